/*
 * strategy.h: the interface of a parallel strategy, the one thing the
 * trainer (src/train) holds to make this rank's replicas one model across
 * devices and ranks: data parallelism with ZeRO stages 0 to 2 (src/dp),
 * the pipeline with data parallelism inside each stage (src/pp). A
 * strategy owns this rank's replicas and everything that joins them; the
 * trainer owns the step's order, the loss scale, clipping, the schedule,
 * data, checkpoints and metrics, and calls the strategy at named points:
 *
 *   plan                   once: the replicas, their buffers and plans
 *   zero_grads             a step begins
 *   forward_backward       each micro-batch, enqueued (the last recorded)
 *   exchange               after the last: gradients summed, overlapped
 *   losses                 each micro-batch: wait, add its loss sums
 *   grad_sumsq, update     the optimizer step on every replica
 *   after_update           checks and re-splits that are due
 *   get_state, set_state   the whole model's parameters and optimizer
 *                          state (checkpoints, weights)
 *   get_shard              this rank's part of it (sharded checkpoints)
 *   evaluate, destroy, ... outside the step
 *
 * Adding a strategy (ZeRO stage 3, tensor parallelism) is one more
 * implementation of clt__strategy_i in its folder, and a line in the
 * trainer's table (src/train/trainer.c). Members marked (optional) may be
 * NULL. Functions marked collective are called by every rank in the same
 * order.
 */
#ifndef CLT_STRATEGY_STRATEGY_H
#define CLT_STRATEGY_STRATEGY_H

#include "core/internal.h"
#include "model/model.h"
#include "model/replica.h"

struct clt__dp;

/* What a strategy is made for: this rank's part of a training job. */
typedef struct clt__job {
  const clt_model *model;        /* the whole model */
  const clt_train_options *opts; /* checked */
  const clt_devices *devs;       /* this rank's devices */
  clt_context **ctx;             /* a context on each, made by the trainer */
  int nlocal;
  clt_comm *comm;                /* every rank of the job */
} clt__job;

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

/* One optimizer step's numbers, the same on every rank. */
typedef struct clt__update {
  int64_t step;       /* the optimizer's own count, from 1 (Adam's bias correction; skipped steps not counted) */
  int64_t steps_done; /* steps taken before this one, skipped ones too (messages, schedules) */
  float lr;
  float scale;        /* what the summed gradient is multiplied by: 1 / labels, unscaled (f16), clipped */
} clt__update;

/* What one local replica holds, for the memory report (src/train/memory.c). */
typedef struct clt__replica_report {
  int64_t replica;            /* its global index */
  int64_t stage;              /* its pipeline stage, -1 without */
  int64_t zero, shard_params; /* the ZeRO stage in effect and the parameters its optimizer state covers */
  int64_t params;             /* the parameters it holds */
  clt_replica_memory counted; /* before anything was allocated */
  clt__replica_bytes measured;
  uint64_t staging_counted, staging_measured; /* host memory the exchange stages its gradients through */
} clt__replica_report;

/* This rank's part of the model's state, for a checkpoint written in
 * shards (src/train/checkpoint_shards.c): n ranges of the whole layout
 * (range[k] = {first element, count}, in arena order), disjoint over the
 * ranks and together every parameter; their parameters packed range after
 * range (count floats) and each optimizer-state component c packed the
 * same way from c * count. A rank may hold no range (n 0). */
typedef struct clt__state_shard {
  int n;
  int64_t (*range)[2];
  int64_t count;
  float *params, *state;
} clt__state_shard;
void clt__state_shard_free(clt__state_shard *s);

typedef struct clt__strategy clt__strategy;

typedef struct clt__strategy_i {
  const char *name;
  /* Collective: make this rank's replicas (on job->ctx) and what joins
   * them, refusing what cannot fit before allocating it; set s's fields. */
  int (*plan)(const clt__job *job, clt__strategy *s);
  void (*destroy)(void *self);

  /* ---- one step, in this order ---- */
  /* Zero every replica's gradients (bringing one that sat steps out up to
   * date first). */
  int (*zero_grads)(void *self);
  /* Micro-batch k: forward, loss and backward of each local replica's
   * slice, enqueued, the gradients accumulating; the step's last one
   * (last) is recorded, its gradients marked for the exchange as the
   * backward completes them. base: train, seed and loss scale; step
   * (1-based) names messages. */
  int (*forward_backward)(void *self, int64_t step, int k, const clt__slice *slices, const clt__pass *base,
                          int last);
  /* Collective: the step's gradients summed over every replica of every
   * rank, while the last backward still runs. step (1-based) names
   * messages. */
  int (*exchange)(void *self, int64_t step);
  /* Wait for micro-batch k's work and add this rank's loss sum and metric
   * (correct count, or squared error) into sums[0] and sums[1]. */
  int (*losses)(void *self, const clt__slice *slices, int last, double *sums);
  /* This rank's part of the sum of squares of the summed gradient (the
   * trainer adds the parts over the ranks, in rank order). */
  int (*grad_sumsq)(void *self, double *ss);
  /* (optional) The layer where a gradient that is not finite starts (the
   * last one with an inf or NaN), or -1 when it cannot say. */
  int (*nonfinite_layer)(void *self);
  /* Collective: the optimizer step on every replica, each rank on its
   * part, then the parameters gathered where they are sharded. */
  int (*update)(void *self, const clt__update *u);
  /* (optional) Collective: what is due after step steps_done: agreement
   * checks, re-splitting the batch (*changed: it moved). */
  int (*after_update)(void *self, int64_t steps_done, int *changed);

  /* ---- the model's state ---- */
  /* Collective: the whole model's parameters into params (P floats) and,
   * when state is not NULL, its optimizer state in the whole layout (per
   * floats a parameter, component c from c P), on rank 0, or with
   * `everywhere` on every rank. */
  int (*get_state)(void *self, float *params, float *state, int everywhere);
  /* (optional) Every rank: its part of the state without gathering it
   * (checkpoints in shards), the state too when `state` is set; or
   * *sharded 0 (and nothing in out) when every rank holds it all and
   * checkpoints gather it (get_state) as before. Not collective. */
  int (*get_shard)(void *self, int state, int *sharded, clt__state_shard *out);
  /* Every rank: take the whole model's parameters (the same on every
   * rank) and, when state is not NULL, its optimizer state; without it the
   * state stays as it is. */
  int (*set_state)(void *self, const float *params, const float *state);

  /* ---- outside the step ---- */
  /* Collective: this rank's sums of loss and metric over its part of ds
   * (the trainer adds them over the ranks). */
  int (*evaluate)(void *self, const clt_dataset *ds, double *sums);
  /* A local replica holding the whole model, up to date (with `grads`,
   * one that has a whole gradient arena), for inference and gradients; or
   * CLT_EUNSUPPORTED saying why there is none (a pipeline stage holds part
   * of the model). */
  int (*whole_replica)(void *self, int grads, clt__replica **r);
  /* (optional) Where stages begin: the whole model's layers cut[0..P] into
   * cut (cap entries); returns P. NULL: one stage. */
  int (*stages)(void *self, int *cut, int cap);
  /* Put the strategy's spans on tr (host_lane: the calling thread's; lanes:
   * each local replica's device), or stop with NULL. */
  void (*set_trace)(void *self, clt__trace *tr, int host_lane, const int *lanes);
  /* Local replica i's memory, counted and measured. */
  void (*report)(void *self, int i, clt__replica_report *out);
} clt__strategy_i;

/* A strategy as the trainer holds it: its functions, its state, and what
 * its plan sets for the trainer to read. */
struct clt__strategy {
  const clt__strategy_i *i;
  void *self;
  const clt_model *local;    /* what this rank's replicas hold: the whole model, or a pipeline stage */
  clt__replica *const *rep;  /* this rank's replicas, one per context */
  struct clt__dp *dp;        /* the data-parallel group of these replicas: their numbering, shares, rates */
  int accumulate;            /* micro-batches a step: the options', or a pipeline's */
  int64_t micro_batch;       /* global samples a micro-batch */
  int64_t room;              /* samples a replica's run takes at most */
  int split;                 /* a caller's samples are cut into this many micro-batches (a pipeline's), or 0:
                                runs of `room` each */
  int group;                 /* ranks that pass the same samples: consecutive groups of this many (a
                                pipeline's stages), else 1 */
  int one_run;               /* a replica keeps no gradient between runs (ZeRO stage 2's pool): a step of the
                                caller's samples must be one run */
};

/* The whole model's initial parameters, seeded on rank 0 and broadcast to
 * every rank of comm (collective): P floats into *out (freed by the
 * caller). */
int clt__strategy_initial_params(clt_comm *comm, const clt_model *m, uint64_t seed, float **out);
/* Collective: CLT_OK when rc is CLT_OK on every rank of comm; else the
 * failure of the first rank that failed (named on the others, with what). */
int clt__all_ok(clt_comm *comm, int rc, const char *what);
/* Sum small per-rank values over every rank of comm in rank order (the
 * same bits everywhere; collective). */
int clt__sum_ranks(clt_comm *comm, double *vals, int n);

#endif
