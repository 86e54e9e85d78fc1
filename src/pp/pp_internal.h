/*
 * pp_internal.h: the clt__pp layout, shared by pp.c and schedule.c only.
 */
#ifndef CLT_PP_INTERNAL_H
#define CLT_PP_INTERNAL_H

#include "pp/pp.h"
#include "comm/p2p.h"

/* Message tags on a pipeline's communicator. Messages of one kind between
 * two neighbours match in the order they were posted (MPI's
 * non-overtaking rule), so one tag per kind is enough. */
enum { CLT__PP_TAG_ACT = 1, CLT__PP_TAG_GRAD = 2, CLT__PP_TAG_GATHER = 3, CLT__PP_TAG_TIE = 4 };

/* A weight tied across stages: the owner's stage holds it at owner_at of
 * its arena, the copy's stage at copy_at (model/stage.c). */
typedef struct clt__pp_tie {
  int owner_stage, copy_stage;
  int64_t owner_at, copy_at, count;
} clt__pp_tie;

struct clt__pp {
  int P, D, M;             /* stages, replicas of each, micro-batches per step */
  int stage, d;            /* this rank's place in the grid */
  clt_pipeline_schedule schedule;
  int *cut;                /* P + 1: stage s is layers [cut[s], cut[s + 1]) of the whole spec */
  double *predicted_s;     /* P: --stages auto's time of each stage's micro-batch (0: not predicted) */
  clt_model stage_model;   /* this rank's stage (model/stage.c) */
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
};

/* Parameters of layers [a, b) of s. */
int64_t clt__pp_params_between(const clt_model_spec *s, int a, int b);
/* Collective over pp->comm (cut.c): pp->cut (and pp->predicted_s) from
 * o->stages (counts, "auto") or evenly; logged on rank 0. */
int clt__pp_make_cut(clt__pp *pp, const clt_model_spec *s, const clt_train_options *o, const clt_devices *devs);
/* The cut by cost: P stages over nseg pieces in order, stage s costing
 * the sum of cost[s * nseg + q] over its pieces q, each stage holding at
 * least one piece with has_params. Minimises the slowest stage (*worst),
 * then the total; stage s is pieces [bound[s], bound[s + 1]) (P + 1
 * entries). CLT_EINVAL (no message) when no cut exists. */
int clt__pp_cut_by_cost(int P, int nseg, const int64_t *cost, const int *has_params, int *bound, int64_t *worst);

#endif
