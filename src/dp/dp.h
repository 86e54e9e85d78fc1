/*
 * dp.h: data parallelism (DESIGN.md layer 11), as the trainer sees it. One
 * clt__dp per trainer knows the job's replicas (how many on each rank, and
 * their global numbering) and owns what makes them one data-parallel
 * model:
 *
 *   dp.c       the object, the replica numbering across ranks;
 *   agree.c    agreement across ranks: the model and options at create,
 *              and CRC32s of every replica's parameters during training;
 *   balance.c  the split of the global batch (shares) and its rebalancing
 *              from each replica's fitted fixed and per-sample cost;
 *   zero.c     ZeRO stages 1 and 2: the shards, their plans, stage 2's
 *              pool of bucket buffers, the parameter allgather and the
 *              state's gather for checkpoints;
 *   buckets.c  gradient buckets laid out from the parameter ranges each
 *              layer's backward writes, and their all-reduce overlapped
 *              with the backward pass (f16 on the wire under mixed
 *              precision).
 *
 * Replicas (src/model/replica.h) are reached only through their functions;
 * what dp asks of the model is clt__model_grad_ranges (model/model.h).
 * Functions marked collective must be called by every rank in the same
 * order.
 */
#ifndef CLT_DP_DP_H
#define CLT_DP_DP_H

#include "core/internal.h"
#include "comm/comm.h"
#include "model/model.h"
#include "model/replica.h"

typedef struct clt__dp clt__dp;

/* ---- the job (dp.c) ---- */

/* nlocal replicas on this rank of comm. Collective: gathers every rank's
 * count, so that replica g of the job is replica g - first of its rank. */
int clt__dp_create(clt_comm *comm, int nlocal, clt__dp **out);
void clt__dp_destroy(clt__dp *dp);
int clt__dp_replicas(const clt__dp *dp);      /* on all ranks */
int clt__dp_first_replica(const clt__dp *dp); /* global index of this rank's first */

/* ---- agreement (agree.c) ---- */

/* Collective: the model spec, parameter count and the options that must
 * match on every rank do; CLT_EMISMATCH naming the rank and the field. */
int clt__dp_agree_options(const clt__dp *dp, const clt_model *m, const clt_train_options *o);
/* Collective: every replica of every rank holds the same parameters (CRC32
 * of the f32 arena); CLT_EMISMATCH naming the first that differs. `step`
 * is for the message. Local replicas with skip[i] (NULL: none) sat out
 * steps and become a bitwise copy of a checked one before they are read:
 * they are not read here; when all are skipped, host_params (the model a
 * rank that sits out keeps on the host) stands for them. */
int clt__dp_check_replicas(const clt__dp *dp, clt__replica *const *reps, const uint8_t *skip,
                           const float *host_params, int64_t step);

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

/* The first split of a global micro-batch of micro_batch samples over the
 * job's replicas, from o->balance (equal, weights; auto starts equal), and
 * auto's floor (o->balance_min_share, checked against the micro-batch). */
int clt__dp_shares_init(clt__dp *dp, const clt_train_options *o, int64_t micro_batch);
/* Per global replica: its share of a full global micro-batch (may be 0). */
const int64_t *clt__dp_shares(const clt__dp *dp);
/* Shares from elsewhere (a checkpoint): one per global replica, summing to
 * the micro-batch, each at least the floor; else CLT_EINVAL and nothing
 * changes. */
int clt__dp_set_shares(clt__dp *dp, const int64_t *shares);
/* (Collective when it changes who takes part: call it on every rank.) */
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

/* Collective: buckets of about bucket_mb MiB for the model, with one
 * all-reduce plan each for the replicas taking part when the job has more
 * than one replica (under ZeRO reduce-scatter and allgather plans, and this
 * rank's shard: zero.c); under CLT_F16 gradients travel as f16. Before the
 * replicas are made, so that they hold state for the shard only;
 * clt__dp_buckets_attach then sets the buckets on them (reps[nlocal]). */
int clt__dp_buckets_create(clt__dp *dp, const clt_model *m, double bucket_mb, clt_dtype precision);
int clt__dp_buckets_attach(clt__dp *dp, clt__replica *const *reps);
/* Whether local replica i takes part in steps under the current shares:
 * it has a share. One that does not sits steps out: no work, no exchange,
 * no update (the trainer brings it up to date before anything reads it).
 * A function of the shares alone, so every rank knows every rank's. Under
 * ZeRO every replica always takes part (the floor is 1: trainer.c). */
int clt__dp_active(const clt__dp *dp, int i);
/* Every replica of this rank is at 0: the rank sits out. It still joins
 * each all-reduce, from the host (clt__dp_exchange_host), and keeps the
 * model on the host meanwhile (the trainer). */
int clt__dp_sits_out(const clt__dp *dp);
/* Collective when the shares changed who takes part: the all-reduce plans
 * for the replicas taking part now (balance.c calls it). */
int clt__dp_replan(clt__dp *dp);
/* Collective: sum the gradients of every replica taking part of every rank
 * into each of them, bucket by bucket as the recorded backward pass completes them
 * (it may still be running). `step` (1-based) is for messages. */
int clt__dp_exchange(clt__dp *dp, clt__replica *const *reps, int64_t step);
/* Collective: the exchange of a rank that sits out: its gradient in
 * grads (P floats: zeros, or what its replica ran of its own samples in
 * clt_trainer_step) summed with every other rank's in place, bucket by
 * bucket on the host, with the same bits as the device exchange. */
int clt__dp_exchange_host(clt__dp *dp, float *grads, int64_t step);
/* Seconds spent in the exchange, and those while some backward still ran,
 * since the last reset; reset zeroes them. */
void clt__dp_comm_time(clt__dp *dp, double *seconds, double *hidden, int reset);
/* Put the exchange's spans (each bucket's wait and all-reduce) on `lane`
 * of tr (the trainer's timeline), or stop with NULL. */
void clt__dp_set_trace(clt__dp *dp, clt__trace *tr, int lane);
/* Set what clt__dp_buckets_create made on every local replica
 * (reps[nlocal]): the bucket markers and the f16 copy of the gradients. */
int clt__dp_buckets_attach(clt__dp *dp, clt__replica *const *reps);

/* ---- ZeRO (zero.c) ---- */

/* One range of this rank's shard: parameters [lo, lo + n) of the arena,
 * whose optimizer state is per x n floats from float state_at * per of the
 * shard's state (component c, Adam's m or v, from (state_at * per + c n)). */
typedef struct clt__shard_range {
  int64_t lo, n, state_at;
} clt__shard_range;

/* Before clt__dp_buckets_create: ZeRO stage (0, 1 or 2; the caller
 * refuses others); whole_local_grads: a step sums several micro-batches
 * locally (--accumulate), so stage 2 keeps each replica's whole gradient
 * (stage 1's memory) instead of a pool. On one rank there is nothing to
 * shard: stage 0, said in the log. */
void clt__dp_zero_set(clt__dp *dp, int stage, int whole_local_grads);
/* Pure: the parameters whose optimizer state rank `rank` of nranks keeps
 * under ZeRO with buckets of bucket_mb MiB (every parameter with one
 * rank): what clt__dp_buckets_create will make its shard. */
int clt__dp_zero_shard_params(const clt_model *m, double bucket_mb, int nranks, int rank, int64_t *params);
/* Pure: the gradient floats a replica holds: P, or under stage 2 on
 * several ranks without accumulation shard_params and the pool's. */
int clt__dp_zero_grad_floats(const clt_model *m, const clt_train_options *o, int nranks, int64_t shard_params,
                             int64_t *floats);
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
/* Stage 2 with a pool: no replica has a gradient arena; the exchange
 * reduce-scatters each bucket into the shard's gradient. */
int clt__dp_zero_pooled(const clt__dp *dp);
/* On several ranks: this rank's part of each bucket (*n of them), whose
 * sums of squares, added over the ranks, are the gradient's; NULL on one. */
const clt__shard_range *clt__dp_norm_parts(const clt__dp *dp, int *n);
/* The stage in effect (0 on one rank). */
int clt__dp_zero(const clt__dp *dp);
/* Only this rank's shard of the summed gradient is valid after the
 * exchange (a reduce-scatter ran): ZeRO on. */
int clt__dp_zero_sharded_grads(const clt__dp *dp);
/* This rank's shard, after clt__dp_buckets_create: *n ranges covering
 * *params parameters (every parameter when ZeRO is off). */
const clt__shard_range *clt__dp_shard(const clt__dp *dp, int *n, int64_t *params);
/* Collective: every local replica's parameters from the ranks that own
 * them, once each rank's optimizer step on its shard (queued on the
 * replicas' compute queues) is done; the writes are queued there, not
 * waited for. `step` for messages. */
int clt__dp_allgather_params(clt__dp *dp, clt__replica *const *reps, int64_t step);
/* The host memory (pinned) the exchange stages local replica i's
 * gradients through (one copy of every bucket, in the wire's type, for
 * each replica taking part in a job of several), and on the first replica
 * under ZeRO the parameters' allgather's: counted from the layout, and
 * measured from the buffers made (clt__dp_buckets_attach makes them). */
void clt__dp_staging_bytes(const clt__dp *dp, int i, uint64_t *counted, uint64_t *measured);
/* Bytes of host memory the parameters' allgather stages through, counted
 * and measured: every bucket packed by rank (pinned), or on one node this
 * rank's segment of the plan's shared window (0 without ZeRO). */
uint64_t clt__dp_gather_counted(const clt__dp *dp);
uint64_t clt__dp_gather_bytes(const clt__dp *dp);
/* Collective: the state of every rank's shard (shard: this rank's, per x
 * shard_params floats) into the whole layout, full (per x P floats,
 * component c from c P), on every rank. */
int clt__dp_gather_state(clt__dp *dp, const float *shard, int per, int64_t P, float *full);
/* This rank's shard of a whole-layout state (the inverse, local). */
void clt__dp_scatter_state(const clt__dp *dp, const float *full, int per, int64_t P, float *shard);

#endif
