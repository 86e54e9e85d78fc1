/*
 * dp_internal.h: the layout of a clt__dp, shared by the files of src/dp
 * and by no one else (the trainer calls dp.h).
 */
#ifndef CLT_DP_DP_INTERNAL_H
#define CLT_DP_DP_INTERNAL_H

#include "dp/dp.h"

#include <cltrain/opencl.h>

/* One rank's part of one bucket: n floats at arena in the arena, at packed
 * in the allgather's buffer. */
typedef struct clt__gather_piece {
  int64_t arena, packed, n;
} clt__gather_piece;

/* A local replica's recent recorded runs (a ring of the newest). */
#define CLT__COST_WINDOW 32
#define CLT__SETS 16
typedef struct clt__cost_obs {
  int64_t n[CLT__COST_WINDOW];
  double t[CLT__COST_WINDOW];
  int count, next;
  int warm;          /* its first run (not counted) is behind it */
  int probe_pending; /* its next run is a probe: compare it with the model */
} clt__cost_obs;

struct clt__dp {
  clt_comm *comm;              /* the trainer's; not owned */
  int rank, nranks;
  int nlocal;                  /* replicas on this rank */
  int nreplicas;               /* on all ranks */
  int first_replica;           /* global index of this rank's first */
  int max_local;               /* most replicas any rank has */
  int *rank_first;             /* per rank: global index of its first replica */
  int *rank_count;             /* per rank: its replicas */
  clt__trace *trace;           /* the trainer's timeline, or NULL; the exchange's spans go on its lane trace_lane */
  int trace_lane;
  clt__replica *const *reps;   /* this rank's replicas, from clt__dp_buckets_attach on (the trainer's) */

  /* balance.c: the split of a global micro-batch. Per global replica:
   * its share, its smoothed throughput (samples/s, 0: not measured), its
   * cost model (gathered fits), and for one at 0 samples the gap to its
   * next probe (in rebalances) and the step it is due. Per local replica:
   * its own smoothed rate and its recent runs. */
  int64_t micro_batch;
  int auto_balance;
  int64_t every;               /* --balance-every */
  int64_t min_share;           /* --balance-min-share (auto) */
  int64_t *shares;
  double *throughput;
  clt__cost *cost;
  double *fixed_s, *per_sample_s; /* the same, as arrays for the step events */
  int64_t *probe_gap, *probe_at;
  int probed;                  /* the replica probed in the step after the last rebalance, or -1 */
  double *local_rate;
  clt__cost_obs *obs;
  /* What the steps measured: the wall time of a step (the slowest rank's)
   * per set of replicas taking part (a bit mask), and this window's sum.
   * A model knows each replica alone; these catch what it cannot see,
   * such as two devices slowing each other on shared cores. */
  struct { uint64_t mask; double wall; int64_t stamp; } sets[CLT__SETS];
  int nsets;
  double wall_sum;
  int64_t wall_steps, rebalances;
  int skip_wall;               /* the first step after new shares (prefetchers refill, replicas catch up) */
  int measure_resplit;         /* ... and its wall time is what new shares cost (not a probe's) */
  double resplit_wall;         /* that step's wall time, this rank (0: none this window) */
  int64_t resplit_ps;          /* what the last new shares cost beyond a step (every rank's most) */
  int64_t runs_per_step;       /* micro-batches a step (--accumulate) */
  int exploring;               /* this window tries a set the model did not choose */

  /* buckets.c: the layout, an all-reduce plan per bucket (NULL with one
   * replica in the job), and the time the exchange took. */
  clt__bucket_layout buckets;
  clt_allreduce_plan **plans;  /* for plan_replicas replicas: those taking part (clt__dp_active) */
  int plan_replicas;
  int wire;                    /* gradients travel as f16 */
  unsigned char *in_place;     /* the one replica's exchange bytes, summed where they are, or NULL */
  int arena;                   /* and every rank's lie in the node's shared memory, each summed from there */
  double comm_s, comm_hidden_s;

  /* zero.c: ZeRO (0: off, and on one rank). Per bucket a reduce-scatter
   * plan of the gradients (instead of plans[]) and an allgather plan of the
   * parameters; this rank's shard of the arena, range by range; its part
   * of each bucket (on several ranks at every stage: the norm's parts),
   * state_at its place in the shard; stage 2's pool of bucket buffers. */
  int zero, pooled;
  clt_reduce_scatter_plan **rs;
  clt__shard_range *shard, *part;
  int nshard;
  int64_t shard_params;
  clt__grad_pool pool;

  /* zero_gather.c: the parameters' allgather, one host plan over every
   * bucket (rank r's block: its parts in bucket order); the pieces of the
   * packed buffer, rank after rank; the floats the buckets cover; the
   * packed buffer (pinned); per local replica the last write from it. */
  clt_allgather_plan *gather;
  clt__gather_piece *pieces;
  int64_t gather_n;
  clt_pinned *staging;
  cl_event *written;
};

/* buckets.c: the bucket layout of a model (pure). */
int clt__dp_model_layout(const clt_model *m, int64_t limit, clt__bucket_layout *out);

/* zero.c: the ZeRO plans and this rank's shard, made by
 * clt__dp_buckets_create once the layout is known; and their release. */
int clt__dp_zero_plans(clt__dp *dp, int64_t P);
void clt__dp_zero_free(clt__dp *dp);
/* This rank's shard of the state into the whole layout (local; the other
 * ranks' ranges untouched). */
void clt__dp_unshard_state(const clt__dp *dp, const float *shard, int per, int64_t P, float *full);

/* zero_gather.c: the allgather's pieces and plan (collective, from
 * clt__dp_zero_plans); its host buffers once the replicas exist (from
 * clt__dp_buckets_attach); their release. */
int clt__dp_gather_plan(clt__dp *dp);
int clt__dp_gather_attach(clt__dp *dp, clt__replica *const *reps);
void clt__dp_gather_free(clt__dp *dp);

#endif
