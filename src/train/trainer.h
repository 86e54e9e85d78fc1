/*
 * trainer.h: the trainer's layout, shared by its files: trainer.c (the
 * options, the contexts, the strategy, small collectives), step.c (one
 * optimizer step, internal and public), loss_scale.c (fp16's dynamic loss
 * scaling), fit.c (the epoch loop around the step, events and metrics),
 * evaluate.c and forward.c (outside training), checkpoint*.c, weights.c,
 * memory.c (the memory report) and timeline.c (--trace).
 *
 * The trainer holds one parallel strategy (strategy/strategy.h: data
 * parallelism, or the pipeline), which owns this rank's replicas; it owns
 * what is the same whatever the strategy: the step's order, the loss
 * scale, clipping and the schedule, where training stands, checkpoints,
 * metrics and the timeline.
 */
#ifndef CLT_TRAIN_TRAINER_H
#define CLT_TRAIN_TRAINER_H

#include "core/internal.h"
#include "dp/dp.h"
#include "io/weights.h" /* clt__arena_tensors, clt__weights_read: the weights files' tensors */
#include "model/model.h"
#include "strategy/strategy.h"

#include <stdio.h>

/* Dynamic loss scaling (opts.precision CLT_F16; 1 and unused in f32):
 * the scale, clean steps since it last changed, skipped steps in a row
 * and in all. Skipped steps count in steps_done (their batch is used up)
 * but not in the optimizer's own step count. */
typedef struct clt__loss_scaler {
  double scale;
  int64_t clean_steps, in_row, skipped;
} clt__loss_scaler;

/* Where training goes on (checkpoint.c saves and restores all of it): the
 * sampler position of the next global micro-batch, the size of the
 * training set it refers to (0: none yet), and the current epoch's sums so
 * far (loss, correct, samples) and steps, so that an epoch resumed
 * half-way reports the whole epoch. */
typedef struct clt__progress {
  clt_sampler_pos pos;
  int64_t count;
  double ep_sums[3];
  int64_t ep_steps;
} clt__progress;

/* The run checkpoints record (checkpoint_dir.c): steps_done at the last
 * checkpoint written or loaded (-1: none), the directory (opts'
 * checkpoint_dir's copy) and, on rank 0 from the first fit on, its lock
 * (io/dir_lock.h; -1: not held), the run's id, kept across resumes, the
 * step this session started from, and when it started (ns since the Unix
 * epoch). */
typedef struct clt__run_record {
  int64_t saved_step;
  char *checkpoint_dir;
  int lock_fd;
  char id[24];
  int64_t branch, started;
} clt__run_record;

/* The timeline (timeline.c), while one is recorded: its host lane and
 * each local replica's device lane; else trace is NULL. */
typedef struct clt__timeline {
  clt__trace *trace;
  int host, *lanes;
} clt__timeline;

struct clt_trainer {
  const clt_model *model;
  clt_train_options opts;      /* checked; accumulate is the strategy's (a pipeline's micro-batches) */
  clt_comm *comm;
  int own_comm;                /* made here (one rank) */
  int rank, nranks;
  int nlocal;                  /* devices on this rank, a replica each */
  clt_context **ctx;           /* per local device */
  clt__strategy s;             /* what joins the replicas: data parallelism or a pipeline */
  int64_t steps_done;          /* optimizer steps */
  int64_t micro_steps;         /* micro-batches done (keys dropout masks) */
  clt__loss_scaler scaler;
  clt__progress progress;
  clt__run_record run;
  clt__timeline timeline;
  struct clt__memory_record *memory; /* per local replica: its memory, counted and measured (memory.c) */
  double flops_per_sample;     /* a training step's, of what this rank's replicas hold (run_record.c) */
  double *peak_flops;          /* rank 0, from the run record on: per replica of its data-parallel group,
                                  its device's peak FLOP/s (0: unknown) */
  struct { clt_normalize_kind kind; float *shift, *scale; } norm; /* the inputs' normalisation (normalization.c) */
};

/* The data-parallel group of the strategy's replicas: their numbering,
 * shares of the batch and rates (fit, checkpoints). */
static inline clt__dp *clt__trainer_dp(const clt_trainer *t) { return t->s.dp; }

/* ---- the memory report (memory.c) ---- */

typedef struct clt__memory_record clt__memory_record;
/* Once the strategy is planned: each replica's memory as counted and as
 * its buffers measure, kept for the metrics and logged. */
int clt__trainer_memory_report(clt_trainer *t);
/* Collective: every replica's record of the job to rank 0, which writes
 * them to metrics (when not NULL) as "start" records, one a line. */
int clt__trainer_memory_records(clt_trainer *t, FILE *metrics);

/* ---- the run's records (metrics.c, run_record.c) ---- */

/* Rank 0's outputs of events: JSON Lines and TensorBoard (each may be NULL). */
struct clt__tb;
typedef struct clt__sinks {
  FILE *metrics;
  struct clt__tb *tb;
} clt__sinks;

/* One JSON Lines record o (taken: freed) to the metrics file, after its
 * UTC "time", numbers as their shortest text, flushed; CLT_EIO naming the
 * file when it cannot be written. */
struct json_t;
int clt__trainer_metrics_write(clt_trainer *t, FILE *metrics, struct json_t *o);
/* The event to the callback, and but for a PROGRESS event to the metrics
 * and TensorBoard (rank 0; elsewhere nothing). */
int clt__trainer_emit(clt_trainer *t, const clt__sinks *out, const clt_train_event *ev);
/* The shortest text that reads back as v: as a float when v is a float's
 * value, else as a double ("null" for NaN and infinities). */
void clt__shortest_number(double v, char *buf, size_t len);
/* Collective: every replica's device, host and peak FLOP/s to rank 0,
 * which keeps the peaks (peak_flops) and writes the run record to metrics
 * (when not NULL). */
int clt__trainer_run_record(clt_trainer *t, FILE *metrics);
/* Every option's field, from the one table of them (options_table.c):
 * each checked on its own (a count's least value, an enumeration's range;
 * CLT_EINVAL naming the field and its flag), and all as a JSON object. */
int clt__options_check_fields(const clt_train_options *o);
struct json_t *clt__options_json(const clt_train_options *o);
/* A training step's FLOPs per sample of what this rank's replicas hold. */
double clt__trainer_flops_per_sample(const clt_trainer *t);

/* ---- one training step (step.c) ---- */

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

/* One optimizer step: zero the gradients, then forward, loss and backward
 * of each micro-batch on every local replica, the exchange during the
 * last one's backward, the update, and the checks and rebalancing due
 * after it. Collective. */
int clt__trainer_train_step(clt_trainer *t, const clt__micro_source *src, clt__step_stats *st);

/* ---- fp16's loss scale (loss_scale.c) ---- */

/* The scaler's start: opts.loss_scale under fp16, else 1. */
void clt__scaler_init(clt_trainer *t);
/* The summed gradient of a step, with sum of squares *ss (scaled by the
 * loss scale squared in fp16), is not finite: in fp16 skip the step (*skip
 * 1: halve the scale, the step counted as done; CLT_ENONFINITE after
 * max_skips in a row); in fp32 the error naming where it starts. */
int clt__scaler_nonfinite(clt_trainer *t, int *skip);
/* A finite step: *scale (1 / labels) divided by the loss scale and *ss by
 * its square (fp16), and the scale doubled after loss_scale_window clean
 * steps. */
void clt__scaler_unscale(clt_trainer *t, float *scale, float *ss, int64_t labels);

/* ---- small collectives over the trainer's ranks ---- */

/* Every rank's t->nlocal records of size bytes each (mine) on every rank:
 * *all (freed by the caller, as *counts) holds nranks x *most slots, rank
 * r's (*counts)[r] records first in its slots. */
int clt__trainer_gather_replicas(clt_trainer *t, const void *mine, size_t size, void **all, int64_t **counts,
                                 int64_t *most);
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
/* The same for a check of this rank's own arguments: a rank whose check
 * failed keeps its own message (so a bad path given on every rank is named
 * on every rank), the others name the first rank that failed. */
int clt__trainer_args_ok(clt_trainer *t, int rc, const char *what);

/* Collective: every rank's ds is rank 0's, by their fingerprints (shape,
 * headers, samples at fixed positions: same_data.c); else CLT_EMISMATCH
 * on every rank naming the ranks, files and what differs ("rank 1 trains
 * on ...": verb is "trains on" or "evaluates on"). ds may be NULL: no
 * dataset, which must then be so on every rank. */
int clt__trainer_same_data(clt_trainer *t, const clt_dataset *ds, const char *verb);
/* CLT_EINVAL: ds holds class labels for a regression model, or float
 * targets for a classifier (fit.c). */
int clt__trainer_targets_mismatch(const clt_trainer *t, const clt_dataset *ds);
/* The normalisation's metadata text (normalization.c; malloc'd), NULL for
 * none; and that text read back (CLT_EFORMAT naming path), the first cap
 * values into shift and scale (may be NULL), their number into *n. */
char *clt__norm_json(clt_normalize_kind kind, const float *shift, const float *scale, int64_t n);
char *clt__trainer_norm_json(const clt_trainer *t);
int clt__norm_parse(const char *path, const char *text, clt_normalize_kind *kind, float *shift, float *scale,
                    int64_t cap, int64_t *n);

/* The caller's x of n samples as the trainer's normalisation says: *use
 * is x itself without one, else a normalised copy (*copy, to free). */
int clt__trainer_norm_input(const clt_trainer *t, const float *x, int64_t n, const float **use, float **copy);

/* Whether the model is a regression model (a loss other than crossentropy). */
#define clt__trainer_regression(t) (clt_model_loss((t)->model) != CLT_LOSS_CROSSENTROPY)

/* ---- checkpoints (checkpoint*.c) ---- */

/* fit()'s periodic checkpoint: DIR/ckpt-<step>.safetensors, then the
 * oldest beyond opts.checkpoint_keep removed (collective). */
int clt__trainer_checkpoint_to_dir(clt_trainer *t);
/* Rank 0, before the first step: whether opts.checkpoint_dir (if any) can
 * take checkpoints (clt_check_output), so a run does not find out after
 * its first hours of work; then the directory is made and locked for this
 * trainer's life (another run's lock there is CLT_EIO naming its PID and
 * host). Only rank 0 writes checkpoints, so one lock is a run's. */
int clt__checkpoint_dir_check(clt_trainer *t);

#endif
