/*
 * dp_internal.h: the layout of a clt__dp and what the files of src/dp
 * share, and no one else (the layers above call dp.h).
 */
#ifndef CLT_DP_DP_INTERNAL_H
#define CLT_DP_DP_INTERNAL_H

#include "dp/dp.h"

#include <cltrain/opencl.h>

/* One range of this rank's shard: parameters [lo, lo + n) of the arena,
 * whose optimizer state is per x n floats from float state_at * per of the
 * shard's state (component c, Adam's m or v, from (state_at * per + c n)). */
typedef struct clt__shard_range {
  int64_t lo, n, state_at;
} clt__shard_range;

/* One rank's part of one bucket: n floats at arena in the arena, at packed
 * in the allgather's buffer. */
typedef struct clt__gather_piece {
  int64_t arena, packed, n;
} clt__gather_piece;

/* ZeRO stage 3's units (zero_units.c): per layer the floats of its unit
 * (0: no parameters), where its parameter k lies in it (at[i *
 * CLT_MAX_LAYER_PARAMS + k]) and the ring's end it goes to (end[i]: 0 low,
 * 1 high, by turns in the order the layers run); the largest unit, and
 * the ring's floats: the largest two neighbouring units side by side. */
typedef struct clt__unit_layout {
  int nlayers;
  int64_t *floats, *at;
  int *end;
  int64_t largest, capacity;
} clt__unit_layout;
typedef struct clt__dp_ring clt__dp_ring;

/* Data parallelism's part of one replica (replica_buckets.c): the hooks'
 * state. Per bucket of the layout b: the marker of its completion in the
 * last recorded run (ev), the copy of it out to the exchange's staging
 * (copied, into copy_to; NULL: none), whether the run being enqueued
 * closed it; the f16 copy of the gradient arena for the wire (NULL: none).
 * ZeRO stage 2's pool: the slots (pool; pool16 their f16 copies under the
 * wire), bucket b written into the slot at float slot_at[b] once the host
 * has read bucket after[b] (read[]: user events the exchange sets), open[]
 * in the run being enqueued; the reduced shard of the gradient (gshard,
 * shard_floats f32; gshard16 what the f16 wire brings). */
typedef struct clt__dp_rep {
  clt__replica *r;
  clt_context *ctx;
  const clt__bucket_layout *b;
  cl_event *ev, *copied;
  void **copy_to;
  unsigned char *closed;
  cl_mem wire;
  cl_mem pool, pool16, gshard, gshard16;
  int64_t shard_floats;
  int *slot, *after;
  int64_t *slot_at;
  cl_event *read;
  unsigned char *open;
  clt__dp_ring *ring; /* ZeRO stage 3: where runs read the parameters (NULL: the arena) */
  clt_comm *stats_comm; /* batchnorm's statistics are summed over these ranks (batch_stats.c) ... */
  int stats_on;         /* ... in the runs of a step (not those of clt_trainer_forward or _gradient) */
  struct clt__stats_meet *meet; /* ... first over this rank's replicas, run side by side, or NULL */
  int index;            /* this replica's among the rank's */
} clt__dp_rep;

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
  clt_comm *comm;              /* the ranks whose replicas sum their gradients; not owned */
  clt_comm *job_comm;          /* every rank of the job (a pipeline's stages too); not owned */
  int rank, nranks;
  int nlocal;                  /* replicas on this rank */
  int nreplicas;               /* on all ranks */
  int first_replica;           /* global index of this rank's first */
  int max_local;               /* most replicas any rank has */
  int *rank_first;             /* per rank: global index of its first replica */
  int *rank_count;             /* per rank: its replicas */
  clt__trace *trace;           /* the trainer's timeline, or NULL: the exchange's spans on trace_lane, */
  int trace_lane;              /*   each replica's layers on lanes[i] */
  int *lanes;

  /* strategy.c, replicas.c: this rank's replicas and how they step. The
   * options (the trainer's, checked), what the replicas hold, the room of
   * a run, the memory counted for one before it was made; per local
   * replica its context (the trainer's), the replica, buckets hung on it,
   * and host copies of its parameters and optimizer state where its device
   * rounds divide and sqrt loosely (else NULL; host_grads stages their
   * gradients); the decay mask (host and devices; NULL: every parameter
   * decays). */
  const clt_train_options *o;
  const clt_model *local;
  int stage;                   /* a pipeline stage's replicas: the stage; else -1 */
  int64_t micro_batch, room;
  clt_replica_memory need;
  clt_context **ctx;
  clt__replica **rep;
  clt__dp_rep **drep;
  float **host_params, **host_state, *host_grads;
  uint8_t *decay_host;
  cl_mem *decay_dev;
  /* Per local replica: 1 when it sat out steps at 0 samples (no update)
   * and has not been brought up to date since. While this rank sits out
   * (all its replicas at 0) the model lives on the host: parameters and
   * optimizer state updated there from the host exchange's sum, and grads
   * for that sum; ran[i]: replica i ran the rank's own samples in this
   * step (the public step). */
  uint8_t *stale, *ran;
  int sitting;
  float *sit_params, *sit_state, *sit_grads;
  clt_comm *arena_comm;        /* whose shared-memory arena holds the gradients, or NULL */
  double step_t0;              /* when the step began (the balancer's measured steps) */

  /* balance.c: the split of a global micro-batch. Per global replica:
   * its share, its smoothed throughput (samples/s, 0: not measured), its
   * cost model (gathered fits), and for one at 0 samples the gap to its
   * next probe (in rebalances) and the step it is due. Per local replica:
   * its own smoothed rate and its recent runs. */
  int auto_balance;
  int64_t every;               /* --balance-every */
  int64_t min_share;           /* --balance-min-share (auto) */
  int64_t *shares;
  double *throughput;
  clt__cost *cost;
  double *fixed_s, *per_sample_s; /* the same, as arrays for the step events */
  int64_t *probe_gap, *probe_at;
  unsigned char *idle_said;    /* per replica: its first time at 0 was said at the warn level */
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
  uint64_t sent_mark;          /* the communicator's bytes sent at the last step event */

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

  /* shard_by.c, zero.c: the shards' weights, one per rank of comm (NULL:
   * equal, the all-reduce's own segments); offload.c: the optimizer state
   * of every replica in host memory (host_state), stepped there. */
  double *shard_w;
  int offload;
  /* zero_units.c: ZeRO stage 3 (zero == 3): the units; the whole
   * parameters on the host in arena order (what the units are written
   * from, the allgather's result) and this rank's shard read back. */
  clt__unit_layout units;
  float *z3_full, *z3_mine;
};

/* ---- shard_by.c: how large each rank's shard is ---- */

/* Collective over dp->comm: dp->shard_w from o->shard_by (--shard-weights
 * as given; --shard-by memory from what each rank's devices have free
 * beside the replica's unsharded buffers, the smallest of its devices),
 * the same on every rank; NULL for equal shards (and on one rank). */
int clt__dp_shard_weights(clt__dp *dp, const clt__job *job);

/* ---- offload.c: the optimizer state in host memory ---- */

/* The step of local replica i whose state is on the host (offload, or a
 * device that rounds divide and sqrt loosely): its shard's gradient read,
 * the host's step range by range, each range's parameters written back
 * without waiting while the host steps the next. */
int clt__dp_step_on_host(clt__dp *dp, int i, const clt__update *u);
/* Whether replica i's device holds optimizer state (not under offload). */
int clt__dp_device_state(const clt__dp *dp);

/* ---- replica_buckets.c: data parallelism's part of each replica ---- */

/* Buckets b on r (their markers; with `wire`, the f16 copy of its arena),
 * hung on r's runs. */
int clt__dp_rep_create(clt__replica *r, const clt__bucket_layout *b, int wire, clt__dp_rep **out);

/* batch_stats.c: batchnorm's statistics over every rank (the replicas'
 * sum_stats hook), on in a step's runs (clt__dp_stats_on); what they
 * cannot go with, refused on every rank before the first step. */
int clt__dp_sum_stats(void *user, int layer, double *sums, int count);
void clt__dp_stats_on(clt__dp *dp, int on);
int clt__dp_check_batch_stats(const clt__dp *dp, const clt__job *job, const clt__dp_how *how);
int clt__dp_check_step_batch(const clt__dp *dp);
/* run(dp, i, arg) for each local replica i, each in a thread of its own,
 * their statistics' sums met here (the main thread makes the MPI calls);
 * the first failure, after every run has ended. */
int clt__dp_run_together(clt__dp *dp, int (*run)(clt__dp *dp, int i, void *arg), void *arg);
void clt__dp_rep_destroy(clt__dp_rep *d);
/* ZeRO stage 2: the pool's slots p and the shard's gradient of
 * shard_floats (with wire, f16 copies of both); the hooks then place every
 * gradient in the pool. */
int clt__dp_rep_set_pool(clt__dp_rep *d, const clt__grad_pool *p, int64_t shard_floats, int wire);
/* On a device whose buffers are host memory (CL_DEVICE_HOST_UNIFIED_MEMORY:
 * PoCL, llvmpipe), recorded runs copy each bucket b (what the exchange
 * sums: its range of the exchange view, or its slot of the pool) to host
 * memory at to[b] (NULL, or to NULL: not) on the compute queue as it
 * closes, before its marker. The exchange then starts from the copy, and
 * a pool's slot is free for its next bucket in the queue's order. On a CPU
 * device of one thread, a read on another queue took turns with the
 * backward's kernels queued ahead of it, so the exchange waited for them,
 * and under ZeRO stage 2 they for the exchange. Elsewhere (a GPU's copy
 * engine overlaps its kernels), or with CLT_COPY_OUT=0, nothing is copied.
 * to[b] must stay valid until the next call. */
void clt__dp_rep_copy_out(clt__dp_rep *d, void *const *to);
/* Bucket b's copy in the last recorded run, or NULL. */
cl_event clt__dp_rep_copied(const clt__dp_rep *d, int b);
/* What the exchange sums in place: the f16 wire copy when there is one,
 * else the f32 gradient arena. */
clt_tensor clt__dp_rep_exchange_view(const clt__dp_rep *d);
/* Stage 2: what the exchange reads of bucket b (its slot; f16 under the
 * wire) and where the reduced shard goes (f16 under the wire). */
clt_tensor clt__dp_rep_pool_view(const clt__dp_rep *d, int b);
clt_tensor clt__dp_rep_shard_view(const clt__dp_rep *d);
/* The gradient the optimizer step reads: the arena, or stage 2's shard. */
clt_tensor clt__dp_rep_grads(const clt__dp_rep *d);
int clt__dp_rep_zero_grads(clt__dp_rep *d);
/* After the exchange: the summed f16 copy back into the f32 gradient
 * (nothing without one). Enqueued on the compute queue. */
int clt__dp_rep_wire_to_grads(clt__dp_rep *d);
/* Wait (host side, up to timeout_s) until bucket b of the last recorded
 * run is complete. */
int clt__dp_rep_wait(clt__dp_rep *d, int b, double timeout_s);
/* The host has read bucket b of the last recorded run: its slot may be
 * written again. */
int clt__dp_rep_bucket_read(clt__dp_rep *d, int b);
/* Device bytes of the wire copy, the pool and the shard's gradient. */
uint64_t clt__dp_rep_bytes(const clt__dp_rep *d);

/* ZeRO stage 3: runs on d's replica read the parameters from ring g
 * (NULL: from the arena again); d owns g from then on. */
void clt__dp_rep_set_ring(clt__dp_rep *d, clt__dp_ring *g);

/* ---- zero_units.c ---- */

/* Pure: the units of spec (one per layer with parameters; tied ones
 * copied into each unit that reads them), and their release. */
int clt__unit_layout_make(const clt_model_spec *spec, clt__unit_layout *u);
void clt__unit_layout_free(clt__unit_layout *u);
/* Device bytes of one replica's ring. */
uint64_t clt__unit_ring_bytes(const clt__unit_layout *u);
/* A ring on ctx whose units are written from host (the whole parameters,
 * arena order; valid while runs are enqueued), and its release. */
int clt__dp_ring_create(clt_context *ctx, const clt_model_spec *spec, const clt__unit_layout *u, const float *host,
                        clt__dp_ring **out);
void clt__dp_ring_destroy(clt__dp_ring *g);
/* A run begins: nothing in the ring is current. */
void clt__dp_ring_reset(clt__dp_ring *g);
/* Layer `layer`'s forward (dir +1) or backward (dir -1) is about to be
 * enqueued: its unit in a slot (written unless the slot holds it), and
 * the next unit in that direction written into the other. */
int clt__dp_ring_enter(clt__dp_ring *g, int layer, int dir);
/* Parameter p of the layer entered last, in its slot. */
int clt__dp_ring_view(const clt__dp_ring *g, const clt_param_spec *p, clt_tensor *t);
uint64_t clt__dp_ring_bytes(const clt__dp_ring *g);
/* Units written since the ring was made (the tests count gathers). */
int64_t clt__dp_ring_writes(const clt__dp_ring *g);
/* Stage 3 only: a ring on every replica, hung on its runs (from
 * clt__dp_buckets_attach: dp->z3_full holds the parameters by then), and
 * the release of the host copies and units (from clt__dp_free_replicas,
 * after the replicas: the rings go with their clt__dp_rep). */
int clt__dp_units_attach(clt__dp *dp);
void clt__dp_units_free(clt__dp *dp);
/* Stage 3: params (P floats, arena order) into this rank's shard, packed
 * like the state (the inverse of what the allgather does). */
void clt__dp_pack_shard(const clt__dp *dp, const float *params, float *shard);

/* ---- buckets.c ---- */

/* The bucket layout of a model (pure). */
int clt__dp_model_layout(const clt_model *m, int64_t limit, clt__bucket_layout *out);
/* Collective: buckets of about bucket_mb MiB for the model, with one
 * all-reduce plan each for the replicas taking part when the job has more
 * than one replica (under ZeRO reduce-scatter and allgather plans, and this
 * rank's shard: zero.c); under CLT_F16 gradients travel as f16. Before the
 * replicas are made, so that they hold state for the shard only;
 * clt__dp_buckets_attach then hangs the buckets on them. */
int clt__dp_buckets_create(clt__dp *dp, const clt_model *m, double bucket_mb, clt_dtype precision);
int clt__dp_buckets_attach(clt__dp *dp);
/* Collective when the shares changed who takes part: the all-reduce plans
 * for the replicas taking part now (balance.c calls it). */
int clt__dp_replan(clt__dp *dp);
/* Collective: sum the gradients of every replica taking part of every rank
 * into each of them, bucket by bucket as the recorded backward pass
 * completes them (it may still be running). `step` (1-based) is for
 * messages. */
int clt__dp_exchange(clt__dp *dp, int64_t step);
/* Collective: the exchange of a rank that sits out: its gradient in
 * grads (P floats: zeros, or what its replica ran of its own samples in
 * clt_trainer_step) summed with every other rank's in place, bucket by
 * bucket on the host, with the same bits as the device exchange. */
int clt__dp_exchange_host(clt__dp *dp, float *grads, int64_t step);
/* The host memory (pinned) the exchange stages local replica i's
 * gradients through (one copy of every bucket, in the wire's type, for
 * each replica taking part in a job of several), and on the first replica
 * under ZeRO the parameters' allgather's: counted from the layout, and
 * measured from the buffers made. */
void clt__dp_staging_bytes(const clt__dp *dp, int i, uint64_t *counted, uint64_t *measured);

/* ---- agree.c ---- */

/* Collective: every replica of every rank holds the same parameters (CRC32
 * of the f32 arena); CLT_EMISMATCH naming the first that differs. `step`
 * is for the message. Local replicas with skip[i] (NULL: none) sat out
 * steps and become a bitwise copy of a checked one before they are read:
 * they are not read here; when all are skipped, host_params (the model a
 * rank that sits out keeps on the host) stands for them. */
int clt__dp_check_replicas(const clt__dp *dp, clt__replica *const *reps, const uint8_t *skip,
                           const float *host_params, int64_t step);

/* ---- zero.c ---- */

/* Before clt__dp_buckets_create: ZeRO stage (0, 1 or 2; the caller
 * refuses others); whole_local_grads: a step sums several micro-batches
 * locally (--accumulate), so stage 2 keeps each replica's whole gradient
 * (stage 1's memory) instead of a pool. On one rank there is nothing to
 * shard: stage 0, said in the log. */
void clt__dp_zero_set(clt__dp *dp, int stage, int whole_local_grads);
/* Pure: the parameters whose optimizer state rank `rank` of nranks keeps
 * under ZeRO with buckets of bucket_mb MiB and shard weights w (NULL:
 * equal; every parameter with one rank). */
int clt__dp_zero_shard_params(const clt_model *m, double bucket_mb, int nranks, int rank, const double *w,
                              int64_t *params);
/* Pure, and the one place a shard is sized: rank `rank`'s part of a
 * bucket of count floats, elements [*off, *off + *n). Equal shards (w
 * NULL): the all-reduce's own segment (rank + 1) mod N (halves.c), as a
 * reduce-scatter plan made without counts cuts it. Weights w (one per
 * rank, >= 0, not all 0): counts in proportion to them, in rank order, as
 * a plan made with clt__dp_shard_counts' counts cuts it. */
int clt__dp_shard_part(const double *w, int nranks, int rank, size_t count, size_t *off, size_t *n);
/* Every rank's count of such a bucket (counts[nranks]). */
int clt__dp_shard_counts(const double *w, int nranks, size_t count, size_t *counts);
/* The ZeRO plans and this rank's shard, made by clt__dp_buckets_create once
 * the layout is known; and their release. */
int clt__dp_zero_plans(clt__dp *dp, int64_t P);
void clt__dp_zero_free(clt__dp *dp);
/* This rank's shard of the state into the whole layout (local; the other
 * ranks' ranges untouched), and the inverse. */
void clt__dp_unshard_state(const clt__dp *dp, const float *shard, int per, int64_t P, float *full);
void clt__dp_scatter_state(const clt__dp *dp, const float *full, int per, int64_t P, float *shard);

/* ---- zero_gather.c ---- */

/* The allgather's pieces and plan (collective, from clt__dp_zero_plans);
 * its host buffers once the replicas exist (from clt__dp_buckets_attach);
 * their release. */
int clt__dp_gather_plan(clt__dp *dp);
int clt__dp_gather_attach(clt__dp *dp);
void clt__dp_gather_free(clt__dp *dp);
/* Collective: every local replica's parameters from the ranks that own
 * them, once each rank's optimizer step on its shard (queued on the
 * replicas' compute queues) is done; the writes are queued there, not
 * waited for. `step` for messages. */
int clt__dp_allgather_params(clt__dp *dp, int64_t step);
/* Collective: the state of every rank's shard (shard: this rank's, per x
 * shard_params floats) into the whole layout, full (per x P floats,
 * component c from c P), on every rank. */
int clt__dp_gather_state(clt__dp *dp, const float *shard, int per, int64_t P, float *full);
/* Bytes of host memory the parameters' allgather stages through, counted
 * and measured. */
uint64_t clt__dp_gather_counted(const clt__dp *dp);
uint64_t clt__dp_gather_bytes(const clt__dp *dp);

/* ---- replicas.c ---- */

/* Make this rank's replicas as the plan sized them (params: the local
 * model's), with their host copies and decay masks; collective (the
 * shared-memory arena is agreed on every rank). */
int clt__dp_make_replicas(clt__dp *dp, const float *params);
void clt__dp_free_replicas(clt__dp *dp);
/* Bring every stale local replica (or with `only_active`, those taking
 * part in steps now) up to date: parameters and optimizer state copied
 * bit for bit from one that is; when the rank begins to sit out, its
 * model goes to the host first. */
int clt__dp_sync_replicas(clt__dp *dp, int only_active);
/* The first local replica taking part in steps (it holds the step's sum). */
int clt__dp_lead(const clt__dp *dp);
/* Replica src's parameters and (per > 0) optimizer state into params and
 * state, from its host copies where its step runs on the host. */
int clt__dp_get_replica(clt__dp *dp, int src, float *params, float *state);
/* The strategy's get_state and set_state (strategy/strategy.h). */
int clt__dp_get_state(void *self, float *params, float *state, int everywhere);
int clt__dp_set_state(void *self, const float *params, const float *state);
int clt__dp_get_shard(void *self, int want_state, int *sharded, clt__state_shard *out);
/* A rank that sits out: its part of the sum (zeros, or the gradient its
 * replicas ran of its own samples) through the host exchange. */
int clt__dp_exchange_sitting(clt__dp *dp, int64_t step);

/* ---- update.c ---- */

int clt__dp_grad_sumsq(void *self, double *ss);
int clt__dp_nonfinite_layer(void *self);
int clt__dp_update(void *self, const clt__update *u);

/* ---- evaluate.c ---- */

int clt__dp_evaluate(void *self, const clt_dataset *ds, double *sums);

#endif
