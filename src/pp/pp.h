/*
 * pp.h: pipeline parallelism (issue 17), as the trainer sees it. One
 * clt__pp per trainer with clt_train_options.pipeline > 1 knows the grid
 * of ranks (P stages x D replicas: rank r is stage r % P of pipeline
 * r / P), where the model is cut, this rank's stage as a model of its own
 * (model/stage.c), and two communicators split from the trainer's: the D
 * replicas of this stage (src/dp all-reduces the stage's gradients on it)
 * and the P stages of this pipeline (activations forward, their gradients
 * backward, point to point: comm/p2p.h).
 *
 *   pp.c        the grid, the communicators, the whole model's state
 *               gathered to rank 0 and taken back (checkpoints);
 *   cut.c       where the model is cut: by hand, evenly, or by cost;
 *   schedule.c  one step's micro-batches through the stages, 1F1B or GPipe.
 */
#ifndef CLT_PP_PP_H
#define CLT_PP_PP_H

#include "core/internal.h"
#include "model/model.h"
#include "model/replica.h"

typedef struct clt__pp clt__pp;

/* Collective over comm: check o's pipeline options against the rank count
 * and the model (P x D = ranks, M >= 1, no more stages than places to cut,
 * --stages counts), cut the model (--stages auto times its pieces on this
 * rank's device, devs' first), make this rank's stage model and the
 * communicators. The cut is logged on rank 0. */
int clt__pp_create(clt_comm *comm, const clt_model *m, const clt_train_options *o, const clt_devices *devs,
                   clt__pp **out);
void clt__pp_destroy(clt__pp *pp);
/* Collective, right after a collective with a deadline showed every rank
 * there (MPI_Comm_split blocks): the stage and pipeline communicators. */
int clt__pp_split(clt__pp *pp);

const clt_model *clt__pp_stage_model(const clt__pp *pp); /* this rank's stage as a model */
clt_comm *clt__pp_stage_comm(const clt__pp *pp);         /* the D replicas of this stage */
int clt__pp_stage(const clt__pp *pp);                    /* 0 .. P-1 */
int clt__pp_stages(const clt__pp *pp);                   /* P */
int clt__pp_replica(const clt__pp *pp);                  /* this rank's pipeline, 0 .. D-1 */
int clt__pp_replicas(const clt__pp *pp);                 /* D */
int clt__pp_micro_batches(const clt__pp *pp);            /* M */
const int *clt__pp_cut(const clt__pp *pp);               /* P + 1: stage s is layers [cut[s], cut[s + 1]) */
/* The activation sets a stage's replica needs: under 1F1B min(P - stage,
 * M), under GPipe M (the last stage runs each backward right after its
 * forward: 1). */
int clt__pp_activation_sets(const clt__pp *pp);

/* One micro-batch of this pipeline: n samples (0: none of this one), the
 * inputs x (used by the first stage), labels y or targets (by the last). */
typedef struct clt__pp_micro {
  const float *x;
  const int32_t *y;
  const float *targets;
  int64_t n, global_first;
  uint64_t dropout_step;
} clt__pp_micro;

/* Collective over the pipeline's stages: forward and backward of m
 * micro-batches (m <= M) on r, in the schedule's order, gradients
 * accumulating in r's arena; the last backward that runs is recorded
 * (its buckets marked for src/dp's exchange), or an empty run when none
 * does. On the last stage *loss and *metric get the micro-batches' loss
 * and metric sums (0 elsewhere). step (1-based) names messages. Waits for
 * neighbours within CLT_TIMEOUT, naming the stage waited for. With
 * base->train 0 (evaluation): the forwards alone, in activation set 0. */
int clt__pp_run(clt__pp *pp, clt__replica *r, int m, const clt__pp_micro *mb, const clt__pass *base,
                int64_t step, double *loss, double *metric);
/* Collective over the stages holding a weight tied across stages (and a
 * no-op elsewhere): after the stage's gradient exchange, the owner's and
 * the copy's gradients summed (owner's + copy's, the same bits on both). */
int clt__pp_sum_tied(clt__pp *pp, clt__replica *r, int64_t step);
/* This stage's copies of tied weights: returns how many, fills the first
 * cap places (at) and sizes (count) in its arena. */
int clt__pp_copies(const clt__pp *pp, int64_t *at, int64_t *count, int cap);

/* Seconds of the last run spent waiting for neighbours, and its total. */
void clt__pp_last_times(const clt__pp *pp, double *wait_s, double *total_s);
/* Put each micro-batch's forward and backward and each wait for a
 * neighbour on `lane` of tr (the trainer's timeline), or stop with NULL. */
void clt__pp_set_trace(clt__pp *pp, clt__trace *tr, int lane);

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

#endif
