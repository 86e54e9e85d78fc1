/*
 * trainer.h: the trainer's layout, shared by its files: trainer.c
 * (replicas, evaluation, small collectives), step.c (one optimizer step,
 * internal and public), fit.c (the epoch loop around it, events and
 * metrics), checkpoint*.c and weights.c.
 */
#ifndef CLT_TRAIN_TRAINER_H
#define CLT_TRAIN_TRAINER_H

#include "core/internal.h"
#include "model/model.h"
#include "model/replica.h"
#include "dp/dp.h"
#include "io/weights.h" /* clt__arena_tensors, clt__weights_read: the weights files' tensors */

#include <stdio.h>

struct clt__pp;

struct clt_trainer {
  const clt_model *model;
  /* What this rank's replicas hold, and every arena size below counts:
   * the model, or under --pipeline its stage (src/pp), whose parameters,
   * gradients and optimizer state alone live here. */
  const clt_model *local;
  struct clt__pp *pp;          /* pipeline parallelism, or NULL */
  int64_t pp_room;             /* the samples of a micro-batch a stage's replica holds */
  clt_train_options opts;
  clt_comm *comm;
  int own_comm;                /* made here (one rank) */
  clt_comm *arena_comm;        /* whose arena holds the gradients (take_arena), or NULL */
  int rank, nranks;
  int nlocal;                  /* replicas (devices) on this rank */
  int nreplicas;               /* on all ranks */
  int first_replica;           /* global index of this rank's first replica */
  clt_context **ctx;           /* per local replica */
  clt__replica **rep;
  float **host_params;         /* per local replica: host copies for replicas whose */
  float **host_state;          /*   optimizer step runs on the host; else NULL */
  float *host_grads;           /* staging for those */
  /* AdamW's decay mask (clt__model_decay_mask), on the host and on each
   * replica's device; NULL when every parameter decays. */
  uint8_t *decay_host;
  cl_mem *decay_dev;
  int64_t micro_batch;         /* global samples per micro-batch */
  int64_t steps_done;          /* optimizer steps */
  int64_t micro_steps;         /* micro-batches done (keys dropout masks) */

  /* Data parallelism (src/dp): replica numbering, gradient buckets and
   * their all-reduce, shares of the batch, agreement checks. */
  clt__dp *dp;
  /* ZeRO: the optimizer state of every rank's shard in the whole layout,
   * gathered for rank 0 to save (clt__checkpoint_gather_state); else NULL. */
  float *zero_state;
  /* Per local replica: 1 when it sat out steps at 0 samples (no update:
   * clt__dp_active) and has not been brought up to date since. */
  uint8_t *stale;
  /* While this rank sits out (clt__dp_sits_out: all its replicas at 0),
   * the model lives on the host: parameters and optimizer state updated
   * there from the host exchange's sum (every replica stale), and grads
   * for that sum. */
  int sitting;
  float *sit_params, *sit_state, *sit_grads;

  /* Dynamic loss scaling (opts.precision CLT_F16; 1 and unused in f32):
   * the scale, clean steps since it last changed, skipped steps in a row
   * and in all. Skipped steps count in steps_done (their batch is used up)
   * but not in the optimizer's own step count. */
  double loss_scale;
  int64_t scale_clean_steps, skips_in_row, skipped;

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

  /* The timeline (timeline.c), while one is recorded: its host lane and
   * each local replica's device lane; else NULL. */
  clt__trace *trace;
  int trace_host, *trace_lanes;

  /* Per local replica: its memory, counted and measured (memory.c). */
  struct clt__memory_record *memory;
};

/* Collective: the whole model's parameters (and, when state is not
 * NULL, optimizer state in the whole layout) into params on rank 0 (and
 * on every rank with `everywhere`): gathered from the stages under
 * --pipeline, else replica 0's (state: zero_state or replica 0's). */
int clt__trainer_whole(clt_trainer *t, float *params, float *state, int everywhere);

/* ---- the memory report (memory.c) ---- */

typedef struct clt__memory_record clt__memory_record;
/* Once the replicas and the exchange's buffers are made: each replica's
 * memory as need counted it for this rank, and as its buffers measure,
 * kept for the metrics and logged. */
int clt__trainer_memory_report(clt_trainer *t, const clt_replica_memory *need);
/* Collective: every replica's record of the job to rank 0, which writes
 * them to metrics (when not NULL) as "start" records, one a line. */
int clt__trainer_memory_records(clt_trainer *t, FILE *metrics);

/* One JSON Lines record o (taken: freed) to the metrics file, flushed;
 * CLT_EIO naming the file when it cannot be written (fit.c). */
struct json_t;
int clt__trainer_metrics_write(clt_trainer *t, FILE *metrics, struct json_t *o);

/* ---- one training step (step.c) ---- */

/* One local replica's part of a micro-batch: n samples, x (n, input size)
 * f32 and y (n * labels per sample) i32, or for a regression model targets
 * (as many) f32 and y NULL; x, y and targets may be NULL when n is 0. */
typedef struct clt__slice {
  const float *x;
  const int32_t *y;
  int64_t n;
  int64_t global_first;  /* global index of its first sample (keys dropout masks) */
  uint64_t dropout_step; /* the micro-batch's dropout key */
  const float *targets;
} clt__slice;

/* Where a step's micro-batches come from (fit: the prefetchers; the public
 * step: the caller's batch). next() fills micro-batch k's slice for every
 * local replica, the labels it adds to the global batch (all ranks), and
 * whether it is the step's last micro-batch. */
typedef struct clt__micro_source {
  int (*next)(void *self, clt_trainer *t, int k, clt__slice *slices, int64_t *labels, int *last);
  void *self;
} clt__micro_source;

/* What a step did, the same on every rank. */
typedef struct clt__step_stats {
  double loss_sum, correct; /* over the global batch; for regression `correct` is the summed squared error */
  int64_t labels;           /* in the global batch (labels that count, or target values): the divisor */
  double grad_norm;         /* of the mean gradient, the same on every rank (NaN when skipped) */
  int skipped;              /* f16 loss scaling skipped the update */
  int counted;              /* its sums belong in the epoch's means (not a skipped overflow) */
  int shares_changed;       /* the balancer re-split the batch after it */
} clt__step_stats;

/* One optimizer step: zero the gradients, then forward, loss and backward of
 * each micro-batch on every local replica, the exchange (src/dp) during the
 * last one's backward, the update, and the checks and rebalancing due
 * after it. Collective. */
int clt__trainer_train_step(clt_trainer *t, const clt__micro_source *src, clt__step_stats *st);

/* Bring every stale local replica (or with `only_active`, those taking
 * part in steps now) up to date: parameters and optimizer state copied
 * bit for bit from one that is. Anything that reads a replica's state
 * outside the step calls it first. */
int clt__trainer_sync_replicas(clt_trainer *t, int only_active);
/* The first local replica taking part in steps (it holds the step's sum). */
int clt__trainer_lead(const clt_trainer *t);

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

/* Collective: under ZeRO, every rank's shard of the optimizer state into
 * t->zero_state, in the whole layout a checkpoint holds; else nothing. */
int clt__checkpoint_gather_state(clt_trainer *t);

/* fit()'s periodic checkpoint: DIR/ckpt-<step>.safetensors, then the
 * oldest beyond opts.checkpoint_keep removed (collective). */
int clt__trainer_checkpoint_to_dir(clt_trainer *t);
/* Rank 0, before the first step: whether opts.checkpoint_dir (if any) can
 * take checkpoints (clt_check_output), so a run does not find out after
 * its first hours of work. */
int clt__checkpoint_dir_check(clt_trainer *t);

#endif
