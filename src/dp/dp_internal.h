/*
 * dp_internal.h: the layout of a clt__dp, shared by the files of src/dp
 * and by no one else (the trainer calls dp.h).
 */
#ifndef CLT_DP_DP_INTERNAL_H
#define CLT_DP_DP_INTERNAL_H

#include "dp/dp.h"

struct clt__dp {
  clt_comm *comm;              /* the trainer's; not owned */
  int rank, nranks;
  int nlocal;                  /* replicas on this rank */
  int nreplicas;               /* on all ranks */
  int first_replica;           /* global index of this rank's first */
  int max_local;               /* most replicas any rank has */
  int *rank_first;             /* per rank: global index of its first replica */
  int *rank_count;             /* per rank: its replicas */

  /* balance.c: per global replica, its share of the global micro-batch and
   * its smoothed throughput (samples/s, 0: not measured); per local
   * replica, its own smoothed rate. */
  int64_t micro_batch;
  int64_t *shares;
  double *throughput;
  double *local_rate;

  /* buckets.c: the layout, an all-reduce plan per bucket (NULL with one
   * replica in the job), and the time the exchange took. */
  clt__bucket_layout buckets;
  clt_allreduce_plan **plans;
  double comm_s, comm_hidden_s;
  int wire;                    /* gradients travel as f16 */

  /* zero.c: ZeRO stage 1 (0: off, and on one rank). Per bucket a
   * reduce-scatter plan of the gradients (instead of plans[], unless the
   * whole gradient is needed: full_grads) and an allgather plan of the
   * parameters; this rank's shard of the arena, range by range. */
  int zero, full_grads;
  clt_reduce_scatter_plan **rs;
  clt_allgather_plan **ag;
  clt__shard_range *shard;
  int nshard;
  int64_t shard_params;
};

/* buckets.c: the bucket layout of a model (pure). */
int clt__dp_model_layout(const clt_model *m, int64_t limit, clt__bucket_layout *out);

/* zero.c: the ZeRO plans and this rank's shard, made by
 * clt__dp_buckets_create once the layout is known; and their release. */
int clt__dp_zero_plans(clt__dp *dp, int64_t P);
void clt__dp_zero_free(clt__dp *dp);

#endif
