/*
 * replica_pool.c: ZeRO stage 2's gradient memory on a replica (src/dp/zero.c
 * says why and how the slots are assigned). There is no P-float gradient
 * arena: the backward writes each bucket into a slot of a small pool of
 * bucket buffers, and the exchange reduce-scatters the slot straight into
 * the replica's shard of the gradient (gshard), which is all that persists.
 *
 * A slot is shared by buckets one after another within a backward pass.
 * The device may zero and write it for bucket b only once the host has read
 * the bucket that used it before (bucket_after[b]) out of it, so each
 * recorded run makes one user event per bucket, the exchange sets it after
 * the bucket's reduce-scatter has read every chunk, and the compute queue
 * waits on it (a barrier) before the slot's next user opens. The waits go
 * only from later buckets to earlier ones, in the order the host reduces
 * them, so the queue never waits for something the host does after
 * waiting for the queue. On a device whose buffers are host memory the
 * bucket is instead copied out to the exchange's staging in the queue's
 * own order as it closes (clt__replica_copy_out), and its slot's next user
 * waits for nothing.
 *
 * Also here: what a replica holds on its device, measured from its
 * buffers (the memory report's counterpart, for the log and bench/zero.sh).
 */
#include "model/replica.h"

#include <stdlib.h>
#include <string.h>

#include "model/layer.h"

int clt__replica_pooled(const clt__replica *r) { return r->pool != NULL; }

int clt__replica_enqueues_ahead(const clt__replica *r) {
  return !clt__host_blas_use(r->ctx) || clt__host_blas_native(r->ctx);
}

/* Events of the last run that the host never set (a failed exchange): set
 * them, so that nothing waits on them for ever. */
static void release_read_events(clt__replica *r) {
  for (int b = 0; r->bucket_read && b < r->nbuckets; b++)
    if (r->bucket_read[b]) {
      cl_int st = CL_COMPLETE;
      clGetEventInfo(r->bucket_read[b], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
      if (st != CL_COMPLETE) clSetUserEventStatus(r->bucket_read[b], CL_COMPLETE);
      clReleaseEvent(r->bucket_read[b]);
      r->bucket_read[b] = NULL;
    }
}

void clt__replica_pool_free(clt__replica *r) {
  release_read_events(r);
  clt_buffer_release(r->pool), clt_buffer_release(r->pool16);
  clt_buffer_release(r->gshard), clt_buffer_release(r->gshard16);
  r->pool = r->pool16 = r->gshard = r->gshard16 = NULL;
  free(r->bucket_slot), free(r->bucket_read), free(r->bucket_open), free(r->slot_at);
  r->bucket_slot = r->bucket_after = r->bucket_opened_at = NULL;
  r->bucket_read = NULL, r->bucket_open = NULL, r->slot_at = NULL;
}

int clt__replica_set_pool(clt__replica *r, int nslots, const int64_t *slot_at, const int *slot, const int *after,
                          const int *opened_at, int64_t shard_floats, int wire) {
  int rc = CLT_OK, nb = r->nbuckets;
  int64_t floats = slot_at[nslots];
  clt__replica_pool_free(r);
  if (!(r->bucket_slot = clt__calloc(3 * (size_t)(nb ? nb : 1), sizeof *r->bucket_slot)) ||
      !(r->bucket_read = clt__calloc(nb ? nb : 1, sizeof *r->bucket_read)) ||
      !(r->bucket_open = clt__calloc(nb ? nb : 1, 1)) || !(r->slot_at = clt__calloc(nb ? nb : 1, sizeof *r->slot_at)))
    return CLT_ENOMEM;
  r->bucket_after = r->bucket_slot + nb;
  r->bucket_opened_at = r->bucket_slot + 2 * nb;
  memcpy(r->bucket_opened_at, opened_at, (size_t)nb * sizeof *opened_at);
  if (!clt__replica_enqueues_ahead(r)) {
    /* The calling thread waits for the device inside the backward (host
     * GEMMs it runs itself): a slot waiting for the exchange would wait for
     * ever, since the exchange starts only after the backward is enqueued.
     * Each bucket gets a place of its own, where the arena would hold it. */
    int64_t lowest = 0, highest = 0;
    for (int b = 0; b < nb; b++) {
      if (b == 0 || r->bucket_lo[b] < lowest) lowest = r->bucket_lo[b];
      if (r->bucket_hi[b] > highest) highest = r->bucket_hi[b];
    }
    clt__log(CLT_LOG_INFO, "%s: its GEMMs make the calling thread wait inside the backward, so under --zero 2 it "
             "keeps every bucket apart (%lld floats) beside the shard, not %d reused bucket buffers",
             r->ctx->info.name, (long long)(highest - lowest), nslots);
    for (int b = 0; b < nb; b++) r->bucket_slot[b] = 0, r->bucket_after[b] = -1;
    for (int b = 0; b < nb; b++) r->slot_at[b] = r->bucket_lo[b] - lowest;
    nslots = 1, floats = highest - lowest;
  } else {
    memcpy(r->bucket_slot, slot, (size_t)nb * sizeof *slot);
    memcpy(r->bucket_after, after, (size_t)nb * sizeof *after);
    for (int b = 0; b < nb; b++) r->slot_at[b] = slot_at[slot[b]];
  }
  r->shard_floats = shard_floats;
  size_t pool = (size_t)(floats > 0 ? floats : 1);
  size_t shard = (size_t)(shard_floats > 0 ? shard_floats : 1);
  CLT_TRY(clt_buffer_create(r->ctx, pool * 4, &r->pool));
  CLT_TRY(clt_buffer_create(r->ctx, shard * 4, &r->gshard));
  clt_tensor g = clt__replica_grads(r);
  CLT_TRY(clt_fill(r->ctx, &g, 0.0f));
  if (wire) { /* f16 copies of the slots and of the shard, not of a whole arena */
    CLT_TRY(clt_buffer_create(r->ctx, pool * 2, &r->pool16));
    CLT_TRY(clt_buffer_create(r->ctx, shard * 2, &r->gshard16));
    clt_tensor h = clt__replica_shard_exchange_view(r);
    CLT_TRY(clt_convert(r->ctx, &g, &h)); /* zeros: what no bucket covers stays 0 */
  }
  return CLT_OK;
fail:
  clt__replica_pool_free(r);
  return clt__error_prefix(rc, "making the gradient pool (%d bucket buffers, %lld floats) and shard (%lld floats) "
                           "on %s", nslots, (long long)floats, (long long)shard_floats, r->ctx->info.name);
}

clt_tensor clt__replica_pool_view(const clt__replica *r, int b) {
  clt_tensor t;
  int64_t n = r->bucket_hi[b] - r->bucket_lo[b];
  memset(&t, 0, sizeof t);
  if (r->pool16) clt_tensor_view(r->pool16, (size_t)r->slot_at[b] * 2, CLT_F16, 1, &n, &t);
  else clt_tensor_view(r->pool, (size_t)r->slot_at[b] * 4, CLT_F32, 1, &n, &t);
  return t;
}

clt_tensor clt__replica_shard_exchange_view(const clt__replica *r) {
  clt_tensor t;
  int64_t n = r->shard_floats;
  memset(&t, 0, sizeof t);
  if (r->gshard16) clt_tensor_view(r->gshard16, 0, CLT_F16, 1, &n, &t);
  else clt_tensor_view(r->gshard, 0, CLT_F32, 1, &n, &t);
  return t;
}

int clt__replica_bucket_read(clt__replica *r, int b) {
  int rc = CLT_OK;
  cl_int st = CL_COMPLETE;
  if (!r->pool || b < 0 || b >= r->nbuckets || !r->bucket_read[b]) return CLT_OK;
  CLT_CL_TRY(clGetEventInfo(r->bucket_read[b], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  if (st != CL_COMPLETE) CLT_CL_TRY(clSetUserEventStatus(r->bucket_read[b], CL_COMPLETE));
fail:
  return rc;
}

int clt__replica_pool_begin_run(clt__replica *r) {
  int rc = CLT_OK;
  cl_int e;
  if (!r->pool) return CLT_OK;
  release_read_events(r);
  memset(r->bucket_open, 0, (size_t)r->nbuckets);
  for (int b = 0; b < r->nbuckets; b++) {
    r->bucket_read[b] = clCreateUserEvent(r->ctx->context, &e);
    CLT_CL_TRY(e);
  }
fail:
  return rc;
}

/* Bucket b is about to be written: wait until its slot's previous user has
 * been read by the host, then zero it (the backward accumulates). */
static int open_bucket(clt__replica *r, int b) {
  int rc = CLT_OK, prev = r->bucket_after[b];
  clt_tensor s;
  int64_t n = r->bucket_hi[b] - r->bucket_lo[b];
  r->bucket_open[b] = 1;
  /* A bucket copied out on this queue (clt__replica_copy_out) left its
   * slot free already. */
  if (prev >= 0 && !r->copy_to[prev])
    CLT_CL_TRY(clEnqueueBarrierWithWaitList(r->ctx->queue, 1, &r->bucket_read[prev], NULL));
  if (n == 0) return CLT_OK;
  CLT_TRY(clt_tensor_view(r->pool, (size_t)r->slot_at[b] * 4, CLT_F32, 1, &n, &s));
  CLT_TRY(clt_fill(r->ctx, &s, 0.0f));
fail:
  return rc;
}

int clt__replica_pool_open_at(clt__replica *r, int i) {
  int rc = CLT_OK;
  if (!r->pool) return CLT_OK;
  for (int b = 0; b < r->nbuckets; b++)
    if (!r->bucket_open[b] && (i < 0 || r->bucket_opened_at[b] == i)) CLT_TRY(open_bucket(r, b));
fail:
  return rc;
}

int clt__replica_pool_close(clt__replica *r, int b) {
  int rc = CLT_OK;
  int64_t n = r->bucket_hi[b] - r->bucket_lo[b];
  if (!r->bucket_open[b]) CLT_TRY(open_bucket(r, b)); /* a bucket no layer wrote: zeros */
  if (r->pool16 && n > 0) {
    clt_tensor g, w;
    CLT_TRY(clt_tensor_view(r->pool, (size_t)r->slot_at[b] * 4, CLT_F32, 1, &n, &g));
    CLT_TRY(clt_tensor_view(r->pool16, (size_t)r->slot_at[b] * 2, CLT_F16, 1, &n, &w));
    CLT_TRY(clt_convert(r->ctx, &g, &w));
  }
fail:
  return rc;
}

void clt__replica_pool_io(const clt__replica *r, clt__layer_io *io) {
  if (!r->pool) return;
  io->grads = r->pool;
  io->gnb = r->nbuckets;
  io->gbucket_lo = r->bucket_lo;
  io->gbucket_hi = r->bucket_hi;
  io->gslot_at = r->slot_at;
}

static uint64_t sizes(const cl_mem *bufs, size_t n) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) bytes += clt_buffer_size(bufs[i]);
  return bytes;
}

void clt__replica_device_bytes(const clt__replica *r, clt__replica_bytes *out) {
  memset(out, 0, sizeof *out);
  out->parameters = clt_buffer_size(r->params);
  const cl_mem grads[] = {r->grads, r->wire, r->pool, r->pool16, r->gshard, r->gshard16};
  out->gradients = sizes(grads, sizeof grads / sizeof grads[0]);
  out->optimizer_state = clt_buffer_size(r->state);
  const cl_mem act[] = {r->act, r->input32, r->aux, r->labels, r->losses, r->scalars};
  out->activations = sizes(act, sizeof act / sizeof act[0]);
  const cl_mem dact[] = {r->dbuf[0], r->dbuf[1], r->gscratch};
  out->activation_grads = sizes(dact, sizeof dact / sizeof dact[0]);
  if (r->skip) out->activation_grads += sizes(r->skip, (size_t)r->spec->skip_slots);
  const cl_mem ws[] = {r->workspace, r->ctx->scratch};
  out->workspace = sizes(ws, sizeof ws / sizeof ws[0]);
  out->total = out->parameters + out->gradients + out->optimizer_state + out->activations + out->activation_grads +
               out->workspace;
}
