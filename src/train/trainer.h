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
  clt_allreduce_plan *plan;    /* gradients over all replicas; NULL with one */
  int64_t micro_batch;         /* global samples per micro-batch */
  int64_t steps_done;          /* optimizer steps */
  int64_t micro_steps;         /* micro-batches done (keys dropout masks) */
};

/* One optimizer step on every local replica after the gradients of total_n
 * samples are summed: scale, clip, update. *grad_norm gets the global norm
 * (NaN when not clipping). */
int clt__trainer_apply(clt_trainer *t, int64_t total_n, double *grad_norm);
/* Sum small per-rank values over all ranks in rank order (the same bits
 * everywhere). */
int clt__trainer_sum(clt_trainer *t, double *vals, int n);

#endif
