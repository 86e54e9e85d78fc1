/*
 * trainer.h: the trainer's layout, shared by its two files: trainer.c
 * (replicas, the optimizer step, evaluation) and fit.c (the epoch loop,
 * events and metrics).
 */
#ifndef CLT_TRAIN_TRAINER_H
#define CLT_TRAIN_TRAINER_H

#include "internal.h"
#include "model/model.h"
#include "model/replica.h"

struct clt_trainer {
  const clt_model *model;
  clt_train_options opts;
  clt_comm *comm;
  int own_comm;                /* made here (one rank) */
  int rank, nranks;
  int nlocal;                  /* replicas (devices) on this rank */
  int nreplicas;               /* on all ranks */
  int first_replica;           /* global index of this rank's first replica */
  clt_context **ctx;           /* per local replica */
  clt__replica **rep;
  float **host_params;         /* per local replica: host copies for replicas whose */
  float **host_state;          /*   optimizer step runs on the host; else NULL */
  float *host_grads;           /* staging for those */
  int64_t micro_batch;         /* global samples per micro-batch */
  int64_t steps_done;          /* optimizer steps */
  int64_t micro_steps;         /* micro-batches done (keys dropout masks) */

  /* Gradient buckets in backward order: bucket b is the arena range
   * [bucket_lo[b], bucket_hi[b]) floats, all-reduced by plans[b] (NULL
   * plans with a single replica in the job). */
  int nbuckets;
  int64_t *bucket_lo, *bucket_hi;
  clt_allreduce_plan **plans;
  int max_local;               /* most replicas any rank has */
  int *rank_first;             /* per rank: global index of its first replica */
  int *rank_count;             /* per rank: its replicas */

  /* Load balancing: shares of the global micro-batch, per global replica. */
  int64_t *shares;
  double *throughput;          /* per global replica, smoothed samples/s (0: not measured) */
  double *local_rate;          /* per local replica, smoothed */

  /* Dynamic loss scaling (opts.precision CLT_F16; 1 and unused in f32):
   * the scale, clean steps since it last changed, skipped steps in a row
   * and in all. Skipped steps count in steps_done (their batch is used up)
   * but not in the optimizer's own step count. */
  double loss_scale;
  int64_t scale_clean_steps, skips_in_row, skipped;

  /* Communication accounting since the last step event. */
  double comm_s, comm_hidden_s;

  /* Where training goes on (checkpoint.c saves and restores all of it):
   * the sampler position of the next global micro-batch, the size of the
   * training set it refers to (0: none yet), and the current epoch's sums
   * so far (loss, correct, samples) and steps, so that an epoch resumed
   * half-way reports the whole epoch. */
  clt_sampler_pos pos;
  int64_t pos_count;
  double ep_sums[3];
  int64_t ep_steps;
  int64_t saved_step;          /* steps_done at the last checkpoint written or loaded, or -1 */
  char *checkpoint_dir;        /* opts.checkpoint_dir's copy */
  /* The run checkpoints record (checkpoint_dir.c): its id, kept across
   * resumes; the step this session started from; when it started (ns
   * since the Unix epoch). Set by a resume, else at the first save. */
  char run_id[24];
  int64_t run_branch, run_started;
};

/* Sum the gradients of every replica of every rank into each of them,
 * bucket by bucket, overlapping the backward pass still running. */
int clt__trainer_allreduce(clt_trainer *t);
/* Gather every replica's smoothed throughput into t->throughput (collective). */
int clt__trainer_gather_rates(clt_trainer *t);
/* Gather, then recompute the shares from the throughputs (collective). */
int clt__trainer_rebalance(clt_trainer *t);
/* Compare a CRC32 of every replica's parameters across all ranks. */
int clt__trainer_check_replicas(clt_trainer *t);

/* One optimizer step on every local replica once the gradients of total_n
 * samples are summed (clt__trainer_allreduce): scale, clip, update. *grad_norm gets the global norm
 * (NaN when not clipping); *skipped is 1 when fp16 loss scaling skipped the
 * step instead (the gradient was not finite). */
int clt__trainer_apply(clt_trainer *t, int64_t total_n, double *grad_norm, int *skipped);
/* Sum small per-rank values over all ranks in rank order (the same bits
 * everywhere). */
int clt__trainer_sum(clt_trainer *t, double *vals, int n);

/* Give every rank rank 0's outcome: its status and, after a failure, its
 * message (collective). Returns that status; on the other ranks a failure
 * is recorded as their own error, so every rank reports the same thing. */
int clt__trainer_share_status(clt_trainer *t, int rc);

/* Collective: CLT_OK when rc is CLT_OK on every rank; else the failure of
 * the first rank that failed (named on the others, with `what`). */
int clt__trainer_all_ok(clt_trainer *t, int rc, const char *what);

/* fit()'s periodic checkpoint: DIR/ckpt-<step>.safetensors, then the
 * oldest beyond opts.checkpoint_keep removed (collective). */
int clt__trainer_checkpoint_to_dir(clt_trainer *t);
/* Rank 0, before the first step: whether opts.checkpoint_dir (if any) can
 * take checkpoints (clt_check_output), so a run does not find out after
 * its first hours of work. */
int clt__checkpoint_dir_check(clt_trainer *t);

/* The safetensors tensors of a parameter arena at base, named as
 * nn.Sequential names the layers ("0.weight", "0.bias", ...) after prefix;
 * t needs room for 2 * (layers) entries. */
struct clt__st_tensor;
int clt__arena_tensors(const clt_model_spec *s, const char *prefix, const float *base, struct clt__st_tensor *t,
                       int *n);

#endif
