/*
 * replica_buckets.c: what data parallelism hangs on one replica's runs
 * (clt__run_hooks, model/replica.h): gradient buckets marked complete as
 * the backward passes their layers, so the exchange (buckets.c) sums each
 * while the backward of earlier layers goes on; under mixed precision each
 * complete bucket rounded to an f16 copy for the wire; on a device whose
 * buffers are host memory, each bucket copied out to the exchange's
 * staging in the queue's own order; ZeRO stage 2's pool of bucket
 * buffers (zero.c says why and how the slots are assigned); and under
 * stage 3 the ring each layer's parameters are written into before its
 * forward and backward (zero_units.c), the same hooks with forward_begin
 * and param_view added.
 *
 * A recorded run (the step's last micro-batch) puts a marker on the queue
 * once the backward of a bucket's lowest layer is done: the exchange waits
 * for it on the host. A bucket whose layer the backward never reaches
 * closes when the run ends.
 *
 * Stage 2. There is no P-float gradient arena: the backward writes each
 * bucket into a slot of a small pool of bucket buffers (grad_view says
 * where), and the exchange reduce-scatters the slot straight into the
 * replica's shard of the gradient (gshard), which is all that persists. A
 * slot is shared by buckets one after another within a backward pass. The
 * device may zero and write it for bucket b only once the host has read
 * the bucket that used it before (after[b]) out of it, so each recorded
 * run makes one user event per bucket, the exchange sets it after the
 * bucket's reduce-scatter has read every chunk, and the compute queue
 * waits on it (a barrier) before the slot's next user opens. The waits go
 * only from later buckets to earlier ones, in the order the host reduces
 * them, so the queue never waits for something the host does after
 * waiting for the queue. On a device whose buffers are host memory the
 * bucket is instead copied out as it closes, and its slot's next user
 * waits for nothing.
 */
#include "dp/dp_internal.h"

#include <stdlib.h>
#include <string.h>

static int make_flat(cl_mem buf, int64_t off, clt_dtype dt, int64_t count, clt_tensor *t) {
  return clt_tensor_view(buf, (size_t)off * clt_dtype_size(dt), dt, 1, &count, t);
}

static int64_t bucket_len(const clt__dp_rep *d, int b) { return d->b->hi[b] - d->b->lo[b]; }

/* ---- the pool's events ---- */

/* Events of the last run that the host never set (a failed exchange): set
 * them, so that nothing waits on them for ever. */
static void release_read_events(clt__dp_rep *d) {
  for (int b = 0; d->read && b < d->b->n; b++)
    if (d->read[b]) {
      cl_int st = CL_COMPLETE;
      clGetEventInfo(d->read[b], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
      if (st != CL_COMPLETE) clSetUserEventStatus(d->read[b], CL_COMPLETE);
      clReleaseEvent(d->read[b]);
      d->read[b] = NULL;
    }
}

int clt__dp_rep_bucket_read(clt__dp_rep *d, int b) {
  int rc = CLT_OK;
  cl_int st = CL_COMPLETE;
  if (!d->pool || b < 0 || b >= d->b->n || !d->read[b]) return CLT_OK;
  CLT_CL_TRY(clGetEventInfo(d->read[b], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  if (st != CL_COMPLETE) CLT_CL_TRY(clSetUserEventStatus(d->read[b], CL_COMPLETE));
fail:
  return rc;
}

/* Bucket b is about to be written: wait until its slot's previous user has
 * been read by the host, then zero it (the backward accumulates). */
static int open_bucket(clt__dp_rep *d, int b) {
  int rc = CLT_OK, prev = d->after[b];
  clt_tensor s;
  int64_t n = bucket_len(d, b);
  d->open[b] = 1;
  /* A bucket copied out on this queue (clt__dp_rep_copy_out) left its
   * slot free already. */
  if (prev >= 0 && !d->copy_to[prev])
    CLT_CL_TRY(clEnqueueBarrierWithWaitList(d->ctx->queue, 1, &d->read[prev], NULL));
  if (n == 0) return CLT_OK;
  CLT_TRY(clt_tensor_view(d->pool, (size_t)d->slot_at[b] * 4, CLT_F32, 1, &n, &s));
  CLT_TRY(clt_fill(d->ctx, &s, 0.0f));
fail:
  return rc;
}

/* ---- closing a bucket ---- */

/* Bucket b out to the host in the queue's order (what the exchange sums:
 * the f16 wire copy, or f32; its slot of the pool). */
static int copy_out(clt__dp_rep *d, int b) {
  int rc = CLT_OK;
  clt_tensor x = d->pool ? clt__dp_rep_pool_view(d, b) : clt__dp_rep_exchange_view(d);
  size_t es = clt_dtype_size(x.dtype), at = x.offset + (d->pool ? 0 : (size_t)d->b->lo[b] * es);
  size_t bytes = (size_t)bucket_len(d, b) * es;
  if (d->copied[b]) clReleaseEvent(d->copied[b]), d->copied[b] = NULL;
  CLT_CL_TRY(clEnqueueReadBuffer(d->ctx->queue, x.buf, CL_FALSE, at, bytes, d->copy_to[b], 0, NULL, &d->copied[b]));
fail:
  return rc;
}

/* Bucket b's gradients are all written: round them to the f16 wire copy
 * if there is one, copy it out (clt__dp_rep_copy_out), and mark the place
 * on the queue. */
static int close_bucket(clt__dp_rep *d, int b) {
  int rc = CLT_OK;
  int64_t n = bucket_len(d, b);
  d->closed[b] = 1;
  if (d->pool && !d->open[b]) CLT_TRY(open_bucket(d, b)); /* a bucket no layer wrote: zeros */
  if (d->pool16 && n > 0) {
    clt_tensor g, w;
    CLT_TRY(make_flat(d->pool, d->slot_at[b], CLT_F32, n, &g));
    CLT_TRY(make_flat(d->pool16, d->slot_at[b], CLT_F16, n, &w));
    CLT_TRY(clt_convert(d->ctx, &g, &w));
  }
  if (d->wire && n > 0) {
    clt_tensor g = clt__replica_grads(d->r), gb, w;
    CLT_TRY(make_flat(g.buf, d->b->lo[b], CLT_F32, n, &gb));
    CLT_TRY(make_flat(d->wire, d->b->lo[b], CLT_F16, n, &w));
    CLT_TRY(clt_convert(d->ctx, &gb, &w));
  }
  if (d->copy_to[b] && n > 0) CLT_TRY(copy_out(d, b));
  if (d->ev[b]) clReleaseEvent(d->ev[b]), d->ev[b] = NULL;
  CLT_CL_TRY(clEnqueueMarkerWithWaitList(d->ctx->queue, 0, NULL, &d->ev[b]));
fail:
  return rc;
}

/* ---- the hooks ---- */

static int run_begin(void *user, const clt__pass *pass) {
  clt__dp_rep *d = user;
  int rc = CLT_OK;
  cl_int e;
  if (d->ring) clt__dp_ring_reset(d->ring); /* the parameters may have changed since the last run */
  if (d->pool && pass->train && !pass->record)
    return clt__error(CLT_EINTERNAL, "a training run on %s keeps no gradient outside a recorded run (ZeRO stage 2)",
                      d->ctx->info.name);
  if (!pass->record) return CLT_OK;
  memset(d->closed, 0, (size_t)d->b->n);
  if (!d->pool) return CLT_OK;
  release_read_events(d);
  memset(d->open, 0, (size_t)d->b->n);
  for (int b = 0; b < d->b->n; b++) {
    d->read[b] = clCreateUserEvent(d->ctx->context, &e);
    CLT_CL_TRY(e);
  }
fail:
  return rc;
}

/* ZeRO stage 2: the buckets layer i's backward starts get their slots. */
static int backward_begin(void *user, int layer, const clt__pass *pass) {
  clt__dp_rep *d = user;
  int rc = CLT_OK;
  if (d->ring) CLT_TRY(clt__dp_ring_enter(d->ring, layer, -1)); /* stage 3: its parameters, again */
  if (!pass->record || !d->pool) return CLT_OK;
  for (int b = 0; b < d->b->n; b++)
    if (!d->open[b] && d->b->opened_at[b] == layer) CLT_TRY(open_bucket(d, b));
fail:
  return rc;
}

/* The buckets that layer i's backward completes. */
static int backward_end(void *user, int layer, const clt__pass *pass) {
  clt__dp_rep *d = user;
  int rc = CLT_OK;
  if (!pass->record) return CLT_OK;
  for (int b = 0; b < d->b->n; b++)
    if (d->b->closed_at[b] == layer) CLT_TRY(close_bucket(d, b));
fail:
  return rc;
}

/* Buckets the backward never reached (a run of no samples: all of them;
 * none else, as the model lays them out) close at the run's end. */
static int run_end(void *user, const clt__pass *pass) {
  clt__dp_rep *d = user;
  int rc = CLT_OK;
  if (!pass->record) return CLT_OK;
  for (int b = 0; b < d->b->n; b++)
    if (!d->closed[b]) CLT_TRY(close_bucket(d, b));
fail:
  return rc;
}

/* ZeRO stage 2: parameter p's gradient in its bucket's slot. A parameter
 * lies in one bucket: buckets are cut between written ranges. */
static int grad_view(void *user, const clt_param_spec *p, clt_tensor *t) {
  clt__dp_rep *d = user;
  for (int b = 0; b < d->b->n; b++)
    if (p->offset >= d->b->lo[b] && p->offset + p->count <= d->b->hi[b])
      return clt_tensor_view(d->pool, (size_t)(d->slot_at[b] + p->offset - d->b->lo[b]) * 4, CLT_F32, p->ndim,
                             p->shape, t);
  return clt__error(CLT_EINTERNAL, "a parameter (elements %lld to %lld) lies in no gradient bucket",
                    (long long)p->offset, (long long)(p->offset + p->count));
}

/* ZeRO stage 3: layer i's parameters into the ring before its forward,
 * and where a run reads them. */
static int forward_begin(void *user, int layer, const clt__pass *pass) {
  clt__dp_rep *d = user;
  (void)pass;
  return d->ring ? clt__dp_ring_enter(d->ring, layer, +1) : CLT_OK;
}

static int param_view(void *user, const clt_param_spec *p, clt_tensor *t) {
  return clt__dp_ring_view(((clt__dp_rep *)user)->ring, p, t);
}

static const clt__run_hooks bucket_hooks = {
    .run_begin = run_begin, .backward_end = backward_end, .run_end = run_end, .sum_stats = clt__dp_sum_stats};
static const clt__run_hooks pool_hooks = {.run_begin = run_begin, .backward_begin = backward_begin,
                                          .backward_end = backward_end, .run_end = run_end, .grad_view = grad_view, .sum_stats = clt__dp_sum_stats};
/* The same with stage 3's ring: the whole local gradient (--accumulate), or the pool. */
static const clt__run_hooks ring_hooks = {.run_begin = run_begin, .forward_begin = forward_begin,
                                          .backward_begin = backward_begin, .backward_end = backward_end,
                                          .run_end = run_end, .param_view = param_view,
                                          .sum_stats = clt__dp_sum_stats};
static const clt__run_hooks ring_pool_hooks = {.run_begin = run_begin, .forward_begin = forward_begin,
                                               .backward_begin = backward_begin, .backward_end = backward_end,
                                               .run_end = run_end, .grad_view = grad_view, .param_view = param_view,
                                               .sum_stats = clt__dp_sum_stats};

void clt__dp_rep_set_ring(clt__dp_rep *d, clt__dp_ring *g) {
  d->ring = g;
  clt__replica_set_hooks(d->r, g ? (d->pool ? &ring_pool_hooks : &ring_hooks) : d->pool ? &pool_hooks : &bucket_hooks,
                         d);
}

/* ---- making and freeing ---- */

int clt__dp_rep_create(clt__replica *r, const clt__bucket_layout *b, int wire, clt__dp_rep **out) {
  int rc = CLT_OK, nb = b->n ? b->n : 1;
  clt__dp_rep *d = clt__calloc(1, sizeof *d);
  *out = NULL;
  if (!d) return CLT_ENOMEM;
  d->r = r, d->ctx = clt__replica_context(r), d->b = b;
  d->ev = clt__calloc(nb, sizeof *d->ev);
  d->copied = clt__calloc(nb, sizeof *d->copied);
  d->copy_to = clt__calloc(nb, sizeof *d->copy_to);
  d->closed = clt__calloc(nb, 1);
  if (!d->ev || !d->copied || !d->copy_to || !d->closed) { rc = CLT_ENOMEM; goto fail; }
  clt_tensor g = clt__replica_grads(r);
  if (wire && g.buf) CLT_TRY(clt_buffer_create(d->ctx, (size_t)clt_tensor_numel(&g) * 2, &d->wire));
  clt__replica_set_hooks(r, &bucket_hooks, d);
  *out = d;
  return CLT_OK;
fail:
  clt__dp_rep_destroy(d);
  return rc;
}

static void pool_free(clt__dp_rep *d) {
  release_read_events(d);
  clt_buffer_release(d->pool), clt_buffer_release(d->pool16);
  clt_buffer_release(d->gshard), clt_buffer_release(d->gshard16);
  d->pool = d->pool16 = d->gshard = d->gshard16 = NULL;
  free(d->slot), free(d->read), free(d->open), free(d->slot_at);
  d->slot = d->after = NULL, d->read = NULL, d->open = NULL, d->slot_at = NULL;
}

void clt__dp_rep_destroy(clt__dp_rep *d) {
  if (!d) return;
  if (d->r && d->r->hooks_user == d) clt__replica_set_hooks(d->r, NULL, NULL);
  pool_free(d);
  for (int b = 0; b < d->b->n; b++) {
    if (d->ev && d->ev[b]) clReleaseEvent(d->ev[b]);
    if (d->copied && d->copied[b]) clReleaseEvent(d->copied[b]);
  }
  clt_buffer_release(d->wire);
  clt__dp_ring_destroy(d->ring);
  free(d->ev), free(d->copied), free(d->copy_to), free(d->closed);
  free(d);
}

int clt__dp_rep_set_pool(clt__dp_rep *d, const clt__grad_pool *p, int64_t shard_floats, int wire) {
  int rc = CLT_OK, nb = d->b->n, nslots = p->nslots;
  int64_t floats = p->floats;
  const clt__bucket_layout *b = d->b;
  pool_free(d);
  if (!(d->slot = clt__calloc(2 * (size_t)(nb ? nb : 1), sizeof *d->slot)) ||
      !(d->read = clt__calloc(nb ? nb : 1, sizeof *d->read)) || !(d->open = clt__calloc(nb ? nb : 1, 1)) ||
      !(d->slot_at = clt__calloc(nb ? nb : 1, sizeof *d->slot_at)))
    return CLT_ENOMEM;
  d->after = d->slot + nb;
  if (!clt__context_enqueues_ahead(d->ctx)) {
    /* The calling thread waits for the device inside the backward (host
     * GEMMs it runs itself): a slot waiting for the exchange would wait for
     * ever, since the exchange starts only after the backward is enqueued.
     * Each bucket gets a place of its own, where the arena would hold it. */
    int64_t lowest = 0, highest = 0;
    for (int k = 0; k < nb; k++) {
      if (k == 0 || b->lo[k] < lowest) lowest = b->lo[k];
      if (b->hi[k] > highest) highest = b->hi[k];
    }
    clt__log(CLT_LOG_INFO, "%s: its GEMMs make the calling thread wait inside the backward, so under --zero 2 it "
             "keeps every bucket apart (%lld floats) beside the shard, not %d reused bucket buffers",
             d->ctx->info.name, (long long)(highest - lowest), nslots);
    for (int k = 0; k < nb; k++) d->slot[k] = 0, d->after[k] = -1;
    for (int k = 0; k < nb; k++) d->slot_at[k] = b->lo[k] - lowest;
    nslots = 1, floats = highest - lowest;
  } else {
    memcpy(d->slot, p->slot, (size_t)nb * sizeof *d->slot);
    memcpy(d->after, p->after, (size_t)nb * sizeof *d->after);
    for (int k = 0; k < nb; k++) d->slot_at[k] = p->slot_at[p->slot[k]];
  }
  d->shard_floats = shard_floats;
  size_t pool = (size_t)(floats > 0 ? floats : 1);
  size_t shard = (size_t)(shard_floats > 0 ? shard_floats : 1);
  CLT_TRY(clt_buffer_create(d->ctx, pool * 4, &d->pool));
  CLT_TRY(clt_buffer_create(d->ctx, shard * 4, &d->gshard));
  clt_tensor g = clt__dp_rep_grads(d);
  CLT_TRY(clt_fill(d->ctx, &g, 0.0f));
  if (wire) { /* f16 copies of the slots and of the shard, not of a whole arena */
    CLT_TRY(clt_buffer_create(d->ctx, pool * 2, &d->pool16));
    CLT_TRY(clt_buffer_create(d->ctx, shard * 2, &d->gshard16));
    clt_tensor h = clt__dp_rep_shard_view(d);
    CLT_TRY(clt_convert(d->ctx, &g, &h)); /* zeros: what no bucket covers stays 0 */
  }
  clt__replica_set_hooks(d->r, &pool_hooks, d);
  return CLT_OK;
fail:
  pool_free(d);
  return clt__error_prefix(rc, "making the gradient pool (%d bucket buffers, %lld floats) and shard (%lld floats) "
                           "on %s", nslots, (long long)floats, (long long)shard_floats, d->ctx->info.name);
}

/* ---- what the exchange and the update see ---- */

void clt__dp_rep_copy_out(clt__dp_rep *d, void *const *to) {
  int on = to && d->ctx->info.unified_memory && clt__env_switch("CLT_COPY_OUT") != 0;
  for (int b = 0; b < d->b->n; b++) d->copy_to[b] = on ? to[b] : NULL;
}

cl_event clt__dp_rep_copied(const clt__dp_rep *d, int b) {
  return b >= 0 && b < d->b->n && d->copy_to[b] ? d->copied[b] : NULL;
}

clt_tensor clt__dp_rep_exchange_view(const clt__dp_rep *d) {
  clt_tensor t;
  memset(&t, 0, sizeof t);
  if (d->wire) make_flat(d->wire, 0, CLT_F16, d->r->spec->param_count, &t);
  else t = clt__replica_grads(d->r);
  return t;
}

clt_tensor clt__dp_rep_pool_view(const clt__dp_rep *d, int b) {
  clt_tensor t;
  int64_t n = bucket_len(d, b);
  memset(&t, 0, sizeof t);
  if (d->pool16) clt_tensor_view(d->pool16, (size_t)d->slot_at[b] * 2, CLT_F16, 1, &n, &t);
  else clt_tensor_view(d->pool, (size_t)d->slot_at[b] * 4, CLT_F32, 1, &n, &t);
  return t;
}

clt_tensor clt__dp_rep_shard_view(const clt__dp_rep *d) {
  clt_tensor t;
  int64_t n = d->shard_floats;
  memset(&t, 0, sizeof t);
  if (d->gshard16) clt_tensor_view(d->gshard16, 0, CLT_F16, 1, &n, &t);
  else clt_tensor_view(d->gshard, 0, CLT_F32, 1, &n, &t);
  return t;
}

clt_tensor clt__dp_rep_grads(const clt__dp_rep *d) {
  clt_tensor t;
  if (!d->gshard) return clt__replica_grads(d->r);
  make_flat(d->gshard, 0, CLT_F32, d->shard_floats, &t); /* under a pool: the shard's */
  return t;
}

int clt__dp_rep_zero_grads(clt__dp_rep *d) {
  clt_tensor g = clt__dp_rep_grads(d);
  return clt_fill(d->ctx, &g, 0.0f);
}

int clt__dp_rep_wire_to_grads(clt__dp_rep *d) {
  if (d->gshard16) { /* the pool's shard */
    clt_tensor w = clt__dp_rep_shard_view(d), g = clt__dp_rep_grads(d);
    return clt_convert(d->ctx, &w, &g);
  }
  if (!d->wire) return CLT_OK;
  clt_tensor w = clt__dp_rep_exchange_view(d), g = clt__replica_grads(d->r);
  return clt_convert(d->ctx, &w, &g);
}

int clt__dp_rep_wait(clt__dp_rep *d, int b, double timeout_s) {
  if (b < 0 || b >= d->b->n || !d->ev[b])
    return clt__error(CLT_EINTERNAL, "bucket %d of %d on %s has no recorded run to wait for", b, d->b->n,
                      d->ctx->info.name);
  return clt__wait_event(d->ctx, d->ev[b], timeout_s, "the backward pass");
}

uint64_t clt__dp_rep_bytes(const clt__dp_rep *d) {
  const cl_mem bufs[] = {d->wire, d->pool, d->pool16, d->gshard, d->gshard16};
  uint64_t bytes = 0;
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) bytes += clt_buffer_size(bufs[i]);
  return bytes;
}
