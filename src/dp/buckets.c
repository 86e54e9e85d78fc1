/*
 * buckets.c: gradient buckets and their all-reduce, overlapped with the
 * backward pass (DESIGN.md "One training step", 3 and 4).
 *
 * Layout. The gradient arena is cut into buckets of about bucket_mb MiB,
 * in backward order, from the ranges of the arena each layer's backward
 * writes (clt__model_grad_ranges). A bucket is complete once the lowest
 * layer writing any of its ranges has run its backward: with tied weights
 * (one range written by two layers) that is the lower of the two. Cuts
 * fall only between ranges completed by different layers, so a layer's
 * weights and bias travel together.
 *
 * Exchange. A recorded backward puts a marker on each replica's queue when
 * a bucket is complete (replica_buckets.c). The calling thread waits for a
 * bucket's markers on every local replica, then the bucket's all-reduce
 * plan copies it to the host on the transfer queues, sums the replicas of
 * this rank, runs the ring across ranks and writes the sum back, while the
 * devices go on with the backward of earlier layers. Under mixed precision
 * the replica rounds each complete bucket to an f16 copy (half the bytes on
 * the wire), the ring sums in f32, and the sums come back into the f32
 * arena at the end.
 *
 * In place. Where this rank has one replica taking part and its exchange
 * buffer is host memory the device shares (src/core/shared_buffers.c: PoCL), a
 * bucket is summed where the backward wrote it, once its marker has
 * passed: no copy out, no write-back, no staging. Not under ZeRO (the
 * reduce-scatter's ring works in parts its device run must not write,
 * and stage 2's slots are reused while the backward runs). Where the
 * trainer put the arena in the node's shared memory (comm/shm_arena.c)
 * and every replica of the job takes part, every rank's bucket is summed
 * from there, with no copy into shm.c's window.
 */
#include "dp/dp_internal.h"

#include <stdlib.h>
#include <string.h>

#include <cltrain/opencl.h>

void clt__bucket_layout_free(clt__bucket_layout *b) {
  free(b->lo);
  free(b->closed_at);
  free(b->opened_at);
  memset(b, 0, sizeof *b);
}

/* A written range and the lowest layer that writes it. */
typedef struct written {
  int64_t lo, hi;
  int layer, top; /* the lowest and the highest layer writing it */
} written;

/* Highest first: the order the backward pass completes them in, as the
 * model lays parameters out in layer order. */
static int by_lo_descending(const void *pa, const void *pb) {
  const written *a = pa, *b = pb;
  if (a->lo != b->lo) return a->lo > b->lo ? -1 : 1;
  return a->hi > b->hi ? -1 : a->hi < b->hi;
}

int clt__bucket_layout_make(int nlayers, const int *first, const clt__param_range *ranges, int64_t limit,
                            clt__bucket_layout *out) {
  int n = first[nlayers], m = 0;
  memset(out, 0, sizeof *out);
  written *w = clt__calloc(n ? n : 1, sizeof *w);
  if (!w) return CLT_ENOMEM;
  for (int i = 0; i < nlayers; i++)
    for (int k = first[i]; k < first[i + 1]; k++) {
      if (ranges[k].hi <= ranges[k].lo) continue;
      w[m++] = (written){ranges[k].lo, ranges[k].hi, i, i};
    }
  qsort(w, (size_t)m, sizeof *w, by_lo_descending);
  /* Merge ranges that overlap (the same tied range listed by two layers):
   * the merged one is complete at the lowest writer. */
  int u = 0;
  for (int k = 0; k < m; k++) {
    if (u > 0 && w[k].hi > w[u - 1].lo) {
      if (w[k].lo < w[u - 1].lo) w[u - 1].lo = w[k].lo;
      if (w[k].hi > w[u - 1].hi) w[u - 1].hi = w[k].hi;
      if (w[k].layer < w[u - 1].layer) w[u - 1].layer = w[k].layer;
      if (w[k].top > w[u - 1].top) w[u - 1].top = w[k].top;
      continue;
    }
    w[u++] = w[k];
  }
  out->lo = clt__calloc(2 * (size_t)(u ? u : 1), sizeof *out->lo);
  out->closed_at = clt__calloc(u ? u : 1, sizeof *out->closed_at);
  out->opened_at = clt__calloc(u ? u : 1, sizeof *out->opened_at);
  if (!out->lo || !out->closed_at || !out->opened_at) {
    free(w);
    clt__bucket_layout_free(out);
    return CLT_ENOMEM;
  }
  out->hi = out->lo + (u ? u : 1);
  /* From the top of the arena down; each bucket starts where the one
   * before it ended, so the buckets cover every range and the gaps between. */
  int64_t hi = u ? w[0].hi : 0;
  int closed_at = nlayers, opened_at = -1;
  for (int k = 0; k < u; k++) {
    if (w[k].layer < closed_at) closed_at = w[k].layer;
    if (w[k].top > opened_at) opened_at = w[k].top;
    int last = k == u - 1;
    int full = limit > 0 && hi - w[k].lo >= limit && (last || w[k + 1].layer != w[k].layer);
    if (last || full) {
      out->lo[out->n] = w[k].lo;
      out->hi[out->n] = hi;
      out->closed_at[out->n] = closed_at;
      out->opened_at[out->n] = opened_at;
      out->n++;
      hi = w[k].lo;
      closed_at = nlayers, opened_at = -1;
    }
  }
  free(w);
  return CLT_OK;
}

/* The model's written ranges, layer by layer. */
int clt__dp_model_layout(const clt_model *m, int64_t limit, clt__bucket_layout *out) {
  int L = clt_model_layer_count(m), rc = CLT_OK, total = 0;
  int *first = clt__calloc((size_t)L + 1, sizeof *first);
  clt__param_range *ranges = NULL;
  if (!first) return CLT_ENOMEM;
  for (int i = 0; i < L; i++) {
    first[i] = total;
    total += clt__model_grad_ranges(m, i, NULL, 0);
  }
  first[L] = total;
  if (!(ranges = clt__calloc(total ? total : 1, sizeof *ranges))) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < L; i++) clt__model_grad_ranges(m, i, ranges + first[i], first[i + 1] - first[i]);
  rc = clt__bucket_layout_make(L, first, ranges, limit, out);
fail:
  free(first), free(ranges);
  return rc;
}

/* This rank's replicas that take part in steps (clt__dp_active). */
static int local_active(const clt__dp *dp) {
  int n = 0;
  for (int i = 0; i < dp->nlocal; i++) n += clt__dp_active(dp, i);
  return n;
}

static int prepare_staging(clt__dp *dp);

/* The all-reduce plans for the replicas taking part now: none when one
 * replica alone does (its gradient is the sum), nor when ZeRO
 * reduce-scatters the buckets instead (zero.c; unless the whole gradient
 * is needed). Collective, when any rank needs plans: every rank makes one
 * per bucket, each for its own count. */
int clt__dp_replan(clt__dp *dp) {
  int rc = CLT_OK;
  const clt__bucket_layout *b = &dp->buckets;
  int n = local_active(dp);
  for (int i = 0; dp->drep && i < dp->nlocal; i++) clt__dp_rep_copy_out(dp->drep[i], NULL); /* its staging goes */
  for (int k = 0; dp->plans && k < b->n; k++) clt_allreduce_plan_destroy(dp->plans[k]), dp->plans[k] = NULL;
  dp->plan_replicas = n;
  if (!(dp->nreplicas == 1 || (dp->nranks == 1 && n == 1) || dp->zero > 0)) {
    clt_allreduce_opts ao = {0, n ? n : 1}; /* a rank that sits out runs its part on the host */
    for (int k = 0; k < b->n; k++)
      CLT_TRY(clt_allreduce_plan_create(dp->comm, (size_t)(b->hi[k] - b->lo[k]), dp->wire ? CLT_F16 : CLT_F32,
                                        CLT_SUM, &ao, &dp->plans[k]));
  }
  if (dp->drep && dp->drep[0]) CLT_TRY(prepare_staging(dp)); /* the new plans' */
fail:
  return rc;
}

int clt__dp_buckets_create(clt__dp *dp, const clt_model *m, double bucket_mb, clt_dtype precision) {
  int rc = CLT_OK;
  clt__bucket_layout *b = &dp->buckets;
  CLT_TRY(clt__dp_model_layout(m, (int64_t)(bucket_mb * 1048576.0 / 4.0), b));
  if (!(dp->plans = clt__calloc(b->n ? b->n : 1, sizeof *dp->plans))) { rc = CLT_ENOMEM; goto fail; }
  /* In f16, gradients travel as f16 (half the bytes), rounded per bucket
   * as its backward ends and summed in f32 on the host. */
  dp->wire = dp->nreplicas > 1 && precision == CLT_F16;
  CLT_TRY(clt__dp_replan(dp));
  CLT_TRY(clt__dp_zero_plans(dp, clt_model_param_count(m)));
fail:
  return rc;
}

int clt__dp_buckets_attach(clt__dp *dp) {
  int rc = CLT_OK;
  for (int i = 0; i < dp->nlocal; i++) {
    CLT_TRY(clt__dp_rep_create(dp->rep[i], &dp->buckets, dp->wire, &dp->drep[i]));
    if (dp->pooled) CLT_TRY(clt__dp_rep_set_pool(dp->drep[i], &dp->pool, dp->shard_params, dp->wire));
  }
  CLT_TRY(clt__dp_units_attach(dp)); /* stage 3's rings */
  CLT_TRY(clt__dp_gather_attach(dp));
  CLT_TRY(prepare_staging(dp));
fail:
  return rc;
}

/* The plan that sums bucket b: the all-reduce's, or ZeRO's reduce-scatter. */
static clt_allreduce_plan *bucket_plan(const clt__dp *dp, int b) {
  if (dp->rs) return clt__reduce_scatter_base(dp->rs[b]);
  return dp->plans ? dp->plans[b] : NULL;
}

/* Local replica i's place among those taking part, or -1. */
static int active_index(const clt__dp *dp, int i) {
  if (!clt__dp_active(dp, i)) return -1;
  int q = 0;
  for (int k = 0; k < i; k++) q += clt__dp_active(dp, k);
  return q;
}

/* The bytes the exchange sums in place (the comment at the top), or NULL. */
static unsigned char *in_place(const clt__dp *dp) {
  if (dp->rs || dp->pooled || local_active(dp) != 1 || !dp->plans || !dp->plans[0] ||
      clt__env_switch("CLT_IN_PLACE") == 0)
    return NULL;
  for (int i = 0; i < dp->nlocal; i++)
    if (clt__dp_active(dp, i)) {
      clt_tensor x = clt__dp_rep_exchange_view(dp->drep[i]);
      unsigned char *host = clt__shared_buffer_host(x.buf);
      return host ? host + x.offset : NULL;
    }
  return NULL;
}

/* Every plan's pinned staging on the queues the exchange reads on, made
 * before the first step (clt__dp_staging_bytes reports it); and the
 * replicas whose buffers are host memory copy each bucket into it as the
 * backward closes the bucket (clt__dp_rep_copy_out says why). None of it
 * when the exchange works in place. */
static int prepare_staging(clt__dp *dp) {
  int rc = CLT_OK, n = 0;
  if ((dp->in_place = in_place(dp))) {
    /* Every rank's bytes in its arena (the trainer agreed to it on all),
     * every rank at it (the shares, the same on all): the same choice. */
    dp->arena = clt__arena_holds(dp->comm, dp->in_place, (size_t)dp->buckets.hi[0] * 4); /* top first */
    for (int g = 0; g < dp->nreplicas; g++) dp->arena &= dp->shares[g] > 0;
    for (int i = 0; i < dp->nlocal; i++) clt__dp_rep_copy_out(dp->drep[i], NULL);
    return CLT_OK;
  }
  dp->arena = 0;
  cl_command_queue *q = clt__calloc(dp->nlocal, sizeof *q);
  void **to = clt__calloc(dp->buckets.n ? dp->buckets.n : 1, sizeof *to);
  if (!q || !to) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  for (int i = 0; i < dp->nlocal; i++)
    if (clt__dp_active(dp, i)) q[n++] = clt_context_transfer_queue(dp->ctx[i]);
  for (int b = 0; b < dp->buckets.n; b++)
    if (bucket_plan(dp, b)) CLT_TRY(clt__plan_prepare_devices(bucket_plan(dp, b), n, q));
  for (int i = 0; i < dp->nlocal; i++) {
    int k = active_index(dp, i);
    for (int b = 0; b < dp->buckets.n; b++) to[b] = k < 0 ? NULL : clt__plan_staging(bucket_plan(dp, b), k);
    clt__dp_rep_copy_out(dp->drep[i], k < 0 ? NULL : to);
  }
fail:
  free(q), free(to);
  return rc;
}

void clt__dp_staging_bytes(const clt__dp *dp, int i, uint64_t *counted, uint64_t *measured) {
  int q = active_index(dp, i);
  *counted = *measured = 0;
  for (int b = 0; q >= 0 && !dp->in_place && b < dp->buckets.n; b++) {
    clt_allreduce_plan *plan = bucket_plan(dp, b);
    if (!plan) continue;
    *counted += (uint64_t)(dp->buckets.hi[b] - dp->buckets.lo[b]) * (dp->wire ? 2 : 4);
    *measured += clt__plan_staged_bytes(plan, q);
  }
  if (i == 0 && dp->zero) { /* the parameters' allgather, on the first replica's context */
    *counted += clt__dp_gather_counted(dp);
    *measured += clt__dp_gather_bytes(dp);
  }
}

int clt__dp_exchange(clt__dp *dp, int64_t step) {
  int rc = CLT_OK, n = 0;
  /* One replica alone: its sum is its own. Under ZeRO the buckets are
   * reduce-scattered instead (dp->rs), every replica taking part. */
  if (!dp->rs && (!dp->plans || !dp->plans[0])) return CLT_OK;
  /* The replicas taking part (one at 0 samples sits the step out). */
  clt__dp_rep **reps = clt__calloc(dp->nlocal, sizeof *reps);
  if (!reps) return CLT_ENOMEM;
  for (int i = 0; i < dp->nlocal; i++)
    if (clt__dp_active(dp, i)) reps[n++] = dp->drep[i];
  if (!dp->rs && n != dp->plan_replicas) {
    free(reps);
    return clt__error(CLT_EINVAL, "internal: step %lld has %d replicas taking part, the plans %d", (long long)step,
                      n, dp->plan_replicas);
  }
  cl_command_queue *q = clt__calloc(n, sizeof *q), *wq = clt__calloc(n, sizeof *wq);
  cl_mem *bufs = clt__calloc(n, sizeof *bufs), *obufs = clt__calloc(n, sizeof *obufs);
  cl_event *copied = clt__calloc(n, sizeof *copied);
  size_t *offs = clt__calloc(n, sizeof *offs), *esize = clt__calloc(n, sizeof *esize);
  size_t *ooffs = clt__calloc(n, sizeof *ooffs);
  if (!q || !wq || !bufs || !obufs || !copied || !offs || !esize || !ooffs) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < n; i++) {
    clt_context *ctx = reps[i]->ctx;
    clt_tensor x = clt__dp_rep_exchange_view(reps[i]);
    q[i] = clt_context_transfer_queue(ctx), wq[i] = clt_context_queue(ctx);
    bufs[i] = x.buf;
    esize[i] = dp->pooled ? (dp->wire ? 2 : 4) : clt_dtype_size(x.dtype);
    /* Submit the queued backward now: a driver may hold unflushed
     * commands back until something waits on them. */
    CLT_CL_TRY(clFlush(clt_context_queue(ctx)));
  }
  for (int b = 0; b < dp->buckets.n; b++) {
    /* The host waits for the bucket's marker rather than making the
     * transfer queue wait on it: PoCL, for one, serves such cross-queue
     * waits slowly (~100 ms a step here). */
    int64_t w0 = clt__trace_ns();
    for (int i = 0; i < n; i++) {
      CLT_TRY(clt__dp_rep_wait(reps[i], b, clt_comm_timeout(dp->comm)));
      offs[i] = (size_t)dp->buckets.lo[b] * esize[i];
      if (dp->pooled) { /* stage 2: from the bucket's slot into the shard's gradient */
        clt_tensor slot = clt__dp_rep_pool_view(reps[i], b), shard = clt__dp_rep_shard_view(reps[i]);
        bufs[i] = slot.buf, offs[i] = slot.offset;
        obufs[i] = shard.buf, ooffs[i] = (size_t)dp->part[b].state_at * esize[i];
      }
      copied[i] = clt__dp_rep_copied(reps[i], b);
    }
    int64_t w1 = clt__trace_ns();
    clt__trace_span(dp->trace, dp->trace_lane, "wait", w0, w1, "bucket %d: its backward", b);
    double t0 = clt__now();
    clt_allreduce_plan *plan = dp->rs ? clt__reduce_scatter_base(dp->rs[b]) : dp->plans[b];
    clt__device_run run = {n, q, wq, bufs, offs, dp->pooled ? obufs : NULL, ooffs, copied};
    if (dp->arena)
      CLT_TRY(clt__allreduce_run_arena(plan, dp->in_place + offs[0]));
    else if (dp->in_place)
      CLT_TRY(clt_allreduce_run(plan, dp->in_place + offs[0]));
    else
      CLT_TRY(clt__allreduce_run_devices_into(plan, &run));
    /* Read out of every slot: the backward may write the slots again. */
    for (int i = 0; dp->pooled && i < n; i++) CLT_TRY(clt__dp_rep_bucket_read(reps[i], b));
    double dt = clt__now() - t0;
    clt__trace_span(dp->trace, dp->trace_lane, "comm", w1, w1 + (int64_t)(dt * 1e9), "bucket %d: %s %.0f KiB",
                    b, dp->rs ? "reduce-scatter" : "all-reduce",
                    (double)(dp->buckets.hi[b] - dp->buckets.lo[b]) * (double)esize[0] / 1024.0);
    dp->comm_s += dt;
    /* Hidden if some replica's backward was still running when it ended. */
    for (int i = 0; i < n; i++)
      if (clt__replica_busy(reps[i]->r)) {
        dp->comm_hidden_s += dt;
        break;
      }
  }
  /* The f16 sums back into the f32 arenas (after the write-backs, which
   * are on the same in-order queue). */
  for (int i = 0; i < n; i++) CLT_TRY(clt__dp_rep_wire_to_grads(reps[i]));
fail:
  /* A failed exchange lets a waiting backward go on (into a step that
   * failed), rather than wait for ever on slots no one will read. */
  for (int i = 0; rc < 0 && dp->pooled && i < n; i++)
    for (int b = 0; b < dp->buckets.n; b++) (void)clt__dp_rep_bucket_read(reps[i], b);
  free(q), free(wq), free(bufs), free(obufs), free(copied), free(offs), free(esize), free(ooffs), free(reps);
  return rc < 0 ? clt__error_prefix(rc, "summing the gradients of step %lld", (long long)step) : rc;
}

int clt__dp_exchange_host(clt__dp *dp, float *grads, int64_t step) {
  int rc = CLT_OK;
  uint16_t *half = NULL;
  if (!dp->plans || !dp->plans[0]) return CLT_OK;
  int64_t most = 0;
  for (int b = 0; b < dp->buckets.n; b++)
    if (dp->buckets.hi[b] - dp->buckets.lo[b] > most) most = dp->buckets.hi[b] - dp->buckets.lo[b];
  if (dp->wire && !(half = clt__calloc(most ? (size_t)most : 1, sizeof *half))) return CLT_ENOMEM;
  for (int b = 0; b < dp->buckets.n; b++) {
    int64_t lo = dp->buckets.lo[b], n = dp->buckets.hi[b] - lo;
    double t0 = clt__now();
    if (dp->wire) { /* as a replica's wire copy: rounded to f16, summed, back to f32 exactly */
      for (int64_t k = 0; k < n; k++) half[k] = clt__half_from_float(grads[lo + k]);
      CLT_TRY(clt_allreduce_run(dp->plans[b], half));
      for (int64_t k = 0; k < n; k++) grads[lo + k] = clt__float_from_half(half[k]);
    } else {
      CLT_TRY(clt_allreduce_run(dp->plans[b], grads + lo));
    }
    dp->comm_s += clt__now() - t0;
  }
fail:
  free(half);
  return rc < 0 ? clt__error_prefix(rc, "summing the gradients of step %lld", (long long)step) : rc;
}

void clt__dp_set_trace(clt__dp *dp, clt__trace *tr, int lane) {
  if (!dp) return;
  dp->trace = tr;
  dp->trace_lane = lane;
}

double clt__dp_comm_bytes(clt__dp *dp) {
  uint64_t intra = 0, inter = 0;
  clt_comm_bytes_sent(dp->comm, &intra, &inter);
  double since = (double)(intra + inter - dp->sent_mark);
  dp->sent_mark = intra + inter;
  return since;
}

void clt__dp_comm_time(clt__dp *dp, double *seconds, double *hidden, int reset) {
  if (seconds) *seconds = dp->comm_s;
  if (hidden) *hidden = dp->comm_hidden_s;
  if (reset) dp->comm_s = dp->comm_hidden_s = 0;
}
