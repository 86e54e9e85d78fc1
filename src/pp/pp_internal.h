/*
 * pp_internal.h: the clt__pp layout and what the files of src/pp share.
 */
#ifndef CLT_PP_INTERNAL_H
#define CLT_PP_INTERNAL_H

#include "pp/pp.h"
#include "comm/p2p.h"
#include "dp/dp.h"

/* Message tags on a pipeline's communicator. Messages of one kind between
 * two neighbours match in the order they were posted (MPI's
 * non-overtaking rule), so one tag per kind is enough. */
enum { CLT__PP_TAG_ACT = 1, CLT__PP_TAG_GRAD = 2, CLT__PP_TAG_GATHER = 3, CLT__PP_TAG_TIE = 4 };

/* A weight tied across stages: the owner's stage holds it at owner_at of
 * its arena, the copy's stage at copy_at (stage_spec.c). */
typedef struct clt__pp_tie {
  int owner_stage, copy_stage;
  int64_t owner_at, copy_at, count;
} clt__pp_tie;

/* One micro-batch of this pipeline: n samples (0: none of this one), the
 * inputs x (used by the first stage), labels y or targets (by the last). */
typedef struct clt__pp_micro {
  const float *x;
  const int32_t *y;
  const float *targets;
  int64_t n, global_first;
  uint64_t dropout_step;
} clt__pp_micro;

typedef struct clt__pp {
  int P, D, M;             /* stages, replicas of each, micro-batches per step */
  int stage, d;            /* this rank's place in the grid */
  clt_pipeline_schedule schedule;
  int *cut;                /* P + 1: stage s is layers [cut[s], cut[s + 1]) of the whole spec */
  double *predicted_s;     /* P: --stages auto's time of each stage's micro-batch (0: not predicted) */
  const clt_model *whole;  /* the job's model */
  clt_model stage_model;   /* this rank's stage (stage_spec.c) */
  int64_t base;            /* where its parameters start in the whole arena */
  int64_t owned;           /* its parameters of its own (the rest of its arena: copies of tied weights) */
  int nties;               /* weights tied across stages, of every stage */
  clt__pp_tie *ties;
  clt_comm *comm;          /* the trainer's (not owned) */
  clt_comm *stage_comm;    /* this stage's D replicas, ordered by d */
  clt_comm *pipe_comm;     /* this pipeline's P stages, ordered by stage */
  double wait_s, total_s;  /* the last run's time waiting for neighbours, and all of it */
  double sum_wait_s, sum_total_s; /* over every training run so far (the bubble, logged at the end) */
  int64_t runs;
  int warm;                       /* a training run is done: the next ones count for the bubble */
  clt__trace *trace;       /* the trainer's timeline, or NULL; spans on its lane trace_lane */
  int trace_lane;
  /* strategy.c: the stage's data-parallel group (its replica on this
   * rank), the replica's activation sets (set[0] its own), the samples a
   * run takes, and the step's micro-batches copied from the trainer's
   * source (its buffers are reused), with the loss sums of its run. */
  const clt_train_options *o;
  clt__dp *dp;
  clt__replica *r;
  clt__act_set **set;
  int nsets;
  int64_t room;
  clt__pp_micro *mb;
  float *x, *targets;
  int32_t *y;
  int m;
  double loss, metric;
  double run_s;            /* the last step's schedule, wall seconds (this stage's replica's rate) */
  int64_t run_n;           /* and the samples it ran */
  int64_t step;            /* the last step taken or being taken (messages) */
} clt__pp;

/* ---- pp.c ---- */

/* Collective over comm: check o's pipeline options against the rank count
 * and the model (P x D = ranks, M >= 1, no more stages than places to cut,
 * --stages counts), cut the model (--stages auto times its pieces on this
 * rank's device, devs' first), make this rank's stage model. The cut is
 * logged on rank 0. */
int clt__pp_create(clt_comm *comm, const clt_model *m, const clt_train_options *o, const clt_devices *devs,
                   clt__pp **out);
void clt__pp_destroy(clt__pp *pp);
/* Collective, right after a collective with a deadline showed every rank
 * there (MPI_Comm_split blocks): the stage and pipeline communicators. */
int clt__pp_split(clt__pp *pp);
/* The activation sets a stage's replica needs: under 1F1B min(P - stage,
 * M), under GPipe M (the last stage runs each backward right after its
 * forward: 1). */
int clt__pp_activation_sets(const clt__pp *pp);
/* Collective over the stages holding a weight tied across stages (and a
 * no-op elsewhere): after the stage's gradient exchange, the owner's and
 * the copy's gradients summed (owner's + copy's, the same bits on both). */
int clt__pp_sum_tied(clt__pp *pp, clt__replica *r, int64_t step);
/* This stage's copies of tied weights: returns how many, fills the first
 * cap places (at) and sizes (count) in its arena. */
int clt__pp_copies(const clt__pp *pp, int64_t *at, int64_t *count, int cap);
/* Collective: the whole model's parameters and optimizer state (per
 * floats per parameter, component c from c P) on rank 0 (whole_params,
 * whole_state; ignored elsewhere), from each stage's first replica
 * (stage_params: the stage's parameter count floats, stage_state: per
 * times that). */
int clt__pp_gather(clt__pp *pp, const clt_model_spec *whole, const float *stage_params, const float *stage_state,
                   int per, float *whole_params, float *whole_state);
/* This rank's stage of a whole model's parameters and state (local; in
 * place too; whole_state may be NULL when per is 0): its own, then its
 * copies of weights tied to other stages, from their owners. The state's
 * component c is at c times the stage's parameter count. */
void clt__pp_take(const clt__pp *pp, const clt_model_spec *whole, const float *whole_params,
                  const float *whole_state, int per, float *stage_params, float *stage_state);

/* ---- schedule.c ---- */

/* Collective over the pipeline's stages: forward and backward of m
 * micro-batches (m <= M) on pp->r, in the schedule's order, gradients
 * accumulating in its arena; the last backward that runs is recorded
 * (its gradients marked for the stage's exchange), or an empty run when
 * none does. On the last stage *loss and *metric get the micro-batches'
 * loss and metric sums (0 elsewhere). step (1-based) names messages.
 * Waits for neighbours within CLT_TIMEOUT, naming the stage waited for.
 * With base->train 0 (evaluation): the forwards alone, in set 0. */
int clt__pp_run(clt__pp *pp, int m, const clt__pp_micro *mb, const clt__pass *base, int64_t step, double *loss,
                double *metric);
/* Put each micro-batch's forward and backward and each wait for a
 * neighbour on `lane` of tr (the trainer's timeline), or stop with NULL. */
void clt__pp_set_trace(clt__pp *pp, clt__trace *tr, int lane);

/* ---- stage_run.c ---- */

/* The forward of n samples x (host, (n, input shape) f32) in set s. Not
 * the last stage: the output is read into out (host, (n, output shape)
 * f32; waits). The last stage (`last`): labels y or pass->targets, the
 * loss (clt__replica_read_loss reads it) and, in training, the backward
 * right away into the gradient arena, on to the input gradient read into
 * dx unless dx is NULL (the first stage). Waits for the device either way:
 * x may be reused on return. */
int clt__pp_stage_forward(clt__replica *r, clt__act_set *s, const float *x, const int32_t *y, int64_t n,
                          const clt__pass *pass, int last, float *out, float *dx);
/* The backward of set s from dy (host, (n, output shape) f32, the next
 * stage's input gradient) into the gradient arena (accumulated), and the
 * input gradient into dx (host; waits) unless dx is NULL. */
int clt__pp_stage_backward(clt__replica *r, clt__act_set *s, const float *dy, int64_t n, const clt__pass *pass,
                           float *dx);

/* ---- stage_spec.c: a stage of a model as a spec of its own ---- */

/* Whether a stage may begin at layer c (2 <= c < nlayers) without cutting
 * a residual's branch; else why not, into why. */
int clt__spec_cut_ok(const clt_model_spec *s, int c, char *why, size_t len);
/* The layers [lo, hi) of s (1 <= lo < hi <= nlayers) as a spec of their
 * own: an input line of layer lo - 1's output shape, then those layers,
 * their parameters laid out from 0; *base is where they start in s's
 * arena. A weight tied to a layer outside [lo, hi) becomes a copy of its
 * own after them (stage_copy; its gradient summed with the owner's by
 * clt__pp_sum_tied before every update). */
int clt__spec_stage(const clt_model_spec *s, int lo, int hi, clt_model_spec **out, int64_t *base);

/* ---- cut.c ---- */

/* Parameters of layers [a, b) of s. */
int64_t clt__pp_params_between(const clt_model_spec *s, int a, int b);
/* Collective over pp->comm: pp->cut (and pp->predicted_s) from
 * o->stages (counts, "auto") or evenly; logged on rank 0. */
int clt__pp_make_cut(clt__pp *pp, const clt_model_spec *s, const clt_train_options *o, const clt_devices *devs);
/* The cut by cost: P stages over nseg pieces in order, stage s costing
 * the sum of cost[s * nseg + q] over its pieces q, each stage holding at
 * least one piece with has_params. Minimises the slowest stage (*worst),
 * then the total; stage s is pieces [bound[s], bound[s + 1]) (P + 1
 * entries). CLT_EINVAL (no message) when no cut exists. */
int clt__pp_cut_by_cost(int P, int nseg, const int64_t *cost, const int *has_params, int *bound, int64_t *worst);

#endif
