/*
 * dp.h: data parallelism with ZeRO stages 0 to 3, as the layers above it
 * see it: a strategy (strategy/strategy.h) that the trainer holds, and
 * that a pipeline (src/pp) runs inside each stage. One clt__dp knows the
 * job's replicas (how many on each rank, and their global numbering),
 * owns this rank's replicas and makes them one model:
 *
 *   dp.c               the object, the replica numbering across ranks;
 *   strategy.c         the plan (sizes, the memory check, the replicas),
 *                      and the strategy's functions;
 *   replicas.c         this rank's replicas: their optimizer step on the
 *                      host where a device rounds loosely, bringing one
 *                      that sat steps out up to date, a rank that sits
 *                      out, and the model's state in and out;
 *   update.c           the gradient's norm and the optimizer step on each
 *                      replica's shard;
 *   evaluate.c         evaluation split over every replica of the job;
 *   agree.c            agreement across ranks: the model and options at
 *                      create, and CRC32s of every replica's parameters;
 *   balance.c          the split of the global batch (shares) and its
 *                      rebalancing from each replica's fitted costs;
 *   buckets.c          gradient buckets laid out from the parameter ranges
 *                      each layer's backward writes, and their exchange
 *                      overlapped with the backward (f16 on the wire under
 *                      mixed precision);
 *   replica_buckets.c  what that hangs on each replica's runs (its hooks,
 *                      ZeRO stage 2's pool of bucket buffers);
 *   zero.c             ZeRO stages 1 to 3: the shards, their plans, the
 *                      pool's slots, the memory a replica needs;
 *   zero_units.c       ZeRO stage 3: each layer's parameters put on the
 *                      device (a ring of units) before its forward and
 *                      backward, from the host's whole copy;
 *   zero_gather.c      the parameters' allgather after a sharded step,
 *                      and the state's gather for checkpoints;
 *   shard_by.c         how large each rank's shard is (--shard-by memory,
 *                      --shard-weights; cut by clt__dp_shard_part, zero.c);
 *   offload.c          the optimizer step of a replica whose state is in
 *                      host memory (--offload optimizer, loose devices).
 *
 * Functions marked collective must be called by every rank of the dp's
 * communicator in the same order.
 */
#ifndef CLT_DP_DP_H
#define CLT_DP_DP_H

#include "core/internal.h"
#include "comm/comm.h"
#include "model/model.h"
#include "model/replica.h"
#include "strategy/strategy.h"

typedef struct clt__dp clt__dp;

/* ---- the strategy (strategy.c) ---- */

/* Data parallelism over every rank of the job: the trainer's table. */
extern const clt__strategy_i clt__dp_strategy;

/* How a data-parallel group is planned inside another strategy (a
 * pipeline stage's replicas): what its replicas hold, the ranks they sum
 * over, and what the other strategy adds. */
typedef struct clt__dp_how {
  const clt_model *local;      /* what the replicas hold (a stage of the job's model) */
  clt_comm *comm;              /* the ranks whose replicas sum their gradients */
  int accumulate;              /* micro-batches a step */
  int64_t room;                /* samples a replica's run takes at most */
  uint64_t extra_activations;  /* device bytes each replica needs beyond its own buffers (activation sets) */
  int stage;                   /* the pipeline stage they are (for reports), or -1 */
  /* The whole model's parameters (the same on every rank) made the
   * replicas' in place, or NULL: the whole model's. */
  void (*take)(void *user, float *params);
  void *take_user;
} clt__dp_how;
/* Collective over job->comm: plan as how says; the result is also a
 * strategy's state (clt__dp_strategy's functions take it as self). */
int clt__dp_plan(const clt__job *job, const clt__dp_how *how, clt__dp **out);
void clt__dp_destroy(clt__dp *dp);
/* This rank's replicas (nlocal of them). */
clt__replica *const *clt__dp_local_replicas(const clt__dp *dp);
/* This rank's parts of the buckets on several ranks (at every stage: the
 * gradient norm's parts; under ZeRO, stages 1 to 3 in a pipeline stage,
 * whose replicas keep their whole gradient arena, the exchange leaves the
 * summed gradient there alone): part k is floats [*lo, *lo + *n) of the
 * arena. Returns how many parts; 0 on one rank. lo and n may be NULL. */
int clt__dp_summed_part(const clt__dp *dp, int k, int64_t *lo, int64_t *n);

/* ---- the job (dp.c) ---- */

int clt__dp_replicas(const clt__dp *dp);      /* on all ranks */
int clt__dp_first_replica(const clt__dp *dp); /* global index of this rank's first */

/* ---- agreement (agree.c) ---- */

/* Collective: the model spec, parameter count and the options that must
 * match on every rank do; CLT_EMISMATCH naming the rank and the field. */
int clt__dp_agree_options(const clt__dp *dp, const clt_model *m, const clt_train_options *o);

/* ---- balancing (balance.c) ---- */

/* A replica's time for its part of a micro-batch of n > 0 samples:
 * fixed_s + per_sample_s * n seconds; shares_seen 0: no model yet. */
typedef struct clt__cost {
  double fixed_s, per_sample_s;
  int shares_seen; /* distinct shares the fit saw */
} clt__cost;

/* Pure: the least-squares fit of fixed + per-sample cost to n runs of
 * shares[k] samples in seconds[k] (non-positive entries are skipped), each
 * distinct share taken at the median of its times. With one share seen,
 * the time is taken as proportional (fixed 0), and the slope leans towards
 * that until the shares seen span a quarter of the largest; neither cost
 * comes out negative. */
int clt__cost_fit(int n, const int64_t *shares, const double *seconds, clt__cost *out);
/* Pure: integer shares of total (summing to it, each >= min_share, 0
 * allowed) that minimise the largest predicted time over the R replicas,
 * ties to the lower index; the same bits on every machine (integer
 * picoseconds). */
int clt__shares_minmax(int R, const clt__cost *costs, int64_t total, int64_t min_share, int64_t *shares);
/* The largest predicted time of those shares, picoseconds. */
int64_t clt__shares_predict_ps(int R, const clt__cost *costs, const int64_t *shares, int64_t total);

/* nlocal replicas on this rank of comm, numbered (collective: gathers
 * every rank's count); no replicas are made (the balancer's tests). */
int clt__dp_create(clt_comm *comm, int nlocal, clt__dp **out);
/* The first split of a global micro-batch of micro_batch samples over the
 * job's replicas, from o->balance (equal, weights; auto starts equal), and
 * auto's floor (o->balance_min_share, checked against the micro-batch). */
int clt__dp_shares_init(clt__dp *dp, const clt_train_options *o, int64_t micro_batch);
/* Per global replica: its share of a full global micro-batch (may be 0). */
const int64_t *clt__dp_shares(const clt__dp *dp);
/* Shares from elsewhere (a checkpoint): one per global replica, summing to
 * the micro-batch, each at least the floor; else CLT_EINVAL and nothing
 * changes. (Collective when it changes who takes part: call it on every
 * rank.) */
int clt__dp_set_shares(clt__dp *dp, const int64_t *shares);
/* Where local replica i's slice starts in a full global micro-batch. */
int64_t clt__dp_slice_start(const clt__dp *dp, int i);
/* Split n samples of this rank over its replicas in proportion to their
 * shares (largest remainder; some may get 0; all at 0: the first takes them):
 * counts[nlocal]. */
int clt__dp_split_local(const clt__dp *dp, int64_t n, int64_t *counts);
/* Local replica i ran n samples of a recorded run in `seconds` of device
 * time (0: unknown): fold it into its throughput and its cost model. */
void clt__dp_note_run(clt__dp *dp, int i, int64_t n, double seconds);
/* A step took `seconds` of wall time (all of it: compute, exchange,
 * update, waits), for the balancer's measured comparison of sets of
 * replicas. */
void clt__dp_note_step(clt__dp *dp, double seconds);
/* Collective: every replica's smoothed throughput and cost model, to
 * clt__dp_throughput and clt__dp_costs. */
int clt__dp_gather_rates(clt__dp *dp);
/* Per global replica: samples per second (0: not measured). */
const double *clt__dp_throughput(const clt__dp *dp);
/* Per global replica: its cost model as last gathered. */
const clt__cost *clt__dp_costs(const clt__dp *dp);
/* The same as two arrays (fixed, per sample; seconds), valid as long as dp. */
void clt__dp_cost_arrays(const clt__dp *dp, const double **fixed_s, const double **per_sample_s);
/* Whether --balance auto re-splits after step steps_done: every
 * balance_every steps, and right after a probe. The same on every rank. */
int clt__dp_rebalance_due(const clt__dp *dp, int64_t steps_done);
/* Collective: gather, then the min-max shares of the cost models (every
 * rank computes the same ones), with a replica at 0 probed now and then.
 * *changed says whether they moved. */
int clt__dp_rebalance(clt__dp *dp, int64_t steps_done, int *changed);
/* Whether local replica i takes part in steps under the current shares:
 * it has a share. One that does not sits steps out: no work, no exchange,
 * no update (it is brought up to date before anything reads it). A
 * function of the shares alone, so every rank knows every rank's. Under
 * ZeRO every replica always takes part (the floor is 1: strategy.c). */
int clt__dp_active(const clt__dp *dp, int i);
/* Every replica of this rank is at 0: the rank sits out. It still joins
 * each all-reduce, from the host, and keeps the model on the host
 * meanwhile (replicas.c). */
int clt__dp_sits_out(const clt__dp *dp);
/* Seconds spent in the exchange, and those while some backward still ran,
 * since the last reset; reset zeroes them. */
void clt__dp_comm_time(clt__dp *dp, double *seconds, double *hidden, int reset);
/* Bytes this rank sent through dp's communicator since the last call. */
double clt__dp_comm_bytes(clt__dp *dp);

/* ---- gradient buckets (buckets.c) ---- */

/* The bucket layout of a parameter arena, in backward order. Bucket b is
 * the range [lo[b], hi[b]) of floats, first written by the backward of
 * layer opened_at[b] and complete once the backward of layer closed_at[b]
 * is done (opened_at >= closed_at; they differ by more than the layers in
 * between only with tied weights). */
typedef struct clt__bucket_layout {
  int n;
  int64_t *lo, *hi;
  int *closed_at, *opened_at;
} clt__bucket_layout;

/* Lay buckets out from what each layer's backward writes: layer i writes
 * ranges[first[i] .. first[i + 1]) (first has nlayers + 1 entries). A range
 * written by several layers (tied weights) is complete at the lowest of
 * them. Buckets hold at least limit floats where they can (the last may
 * hold less), are cut only between ranges that complete at different
 * layers, and together cover every written range contiguously; limit <= 0
 * gives one bucket. Pure: no device, no communication. */
int clt__bucket_layout_make(int nlayers, const int *first, const clt__param_range *ranges, int64_t limit,
                            clt__bucket_layout *out);
void clt__bucket_layout_free(clt__bucket_layout *b);

/* ---- ZeRO (zero.c) ---- */

/* Stage 2's pool for a layout: bucket b is written into slot slot[b] of
 * nslots buffers, after the host has read bucket after[b] out of it (-1: a
 * fresh slot). Slot s is as long as the longest bucket it holds and starts
 * at float slot_at[s] of the pool, floats long in all (slot_at[nslots]).
 * Pure. */
typedef struct clt__grad_pool {
  int nslots;
  int64_t floats, largest; /* the pool; its longest slot */
  int *slot, *after;
  int64_t *slot_at;
} clt__grad_pool;
int clt__grad_pool_make(const clt__bucket_layout *b, clt__grad_pool *out);
void clt__grad_pool_free(clt__grad_pool *p);
/* Pure: what one replica of m needs on its device under data parallelism
 * on nranks ranks (this one `rank`) with o's ZeRO stage, precision and
 * optimizer, for runs of `room` samples: the model's buffers, optimizer
 * state for the rank's shard (its parameters into *shard_params when not
 * NULL), and gradients (the arena, with its f16 copy on the wire when
 * `wire`; under stage 2 without accumulation the shard's and the bucket
 * pool's instead). shard_w: the ranks' shard weights (NULL: equal
 * shards). Under o->offload the device holds no optimizer state. */
int clt__dp_need(const clt_model *m, const clt_train_options *o, int nranks, int rank, int64_t room, int wire,
                 clt_replica_memory *need, int64_t *shard_params, const double *shard_w);

#endif
