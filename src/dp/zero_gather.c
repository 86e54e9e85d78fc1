/*
 * zero_gather.c: ZeRO's allgather of the parameters after each rank's
 * optimizer step on its shard (zero.c), and of the optimizer state for a
 * checkpoint: ONE host allgather of every bucket at once.
 *
 * Why one. Rank r's part of bucket b is the all-reduce's segment of it
 * (zero.c), so a rank's parts are scattered over the arena, one per
 * bucket. An allgather plan per bucket ran as many collectives as buckets,
 * each with its own device reads, write-backs of the whole bucket and a
 * wait for them; and it read on the compute queue, so the optimizer's
 * kernels ran inside its clock. Here each rank's parts of every bucket
 * are packed into one block (rank r's block is the r-th of a host buffer,
 * its parts in bucket order), and one allgather plan with per-rank counts
 * moves all blocks: the bytes of the all-reduce's allgather half, in one
 * collective (bench/zero.sh sets it beside stage 0's all-reduce).
 *
 * Order. The host waits for the step's end on every replica's compute
 * queue (outside comm_s, as the exchange waits for the backward), reads
 * its parts from the first replica on the transfer queue (every local
 * replica stepped the same shard to the same bits) into its block,
 * gathers, and writes the other ranks' parts, each straight from its
 * block, to every replica on its compute queue, without waiting: the next
 * step's forward is queued behind the writes. Copies only: the parameters
 * are the bits each owner computed, as with the per-bucket plans.
 *
 * Where the blocks are. On one node whose ranks share memory (unless
 * CLT_ALLREDUCE / --allreduce forces an algorithm other than shm) the plan
 * keeps every rank's block in a shared-memory window of its own
 * (comm/shm_gather.c): this rank's device read lands in its block there,
 * the collective is one handshake of flags, and the writes read the other
 * ranks' blocks where their owners put them. Before, an allgather plan
 * always took the ring (it only copies): every block went from a private
 * packed buffer through MPI's shared-memory transport (a copy into its
 * queue, one out, per hop of N - 1) into the others' packed buffers.
 * Elsewhere (several nodes, or --allreduce ring) it still does.
 *
 * Safety of the writes. They are non-blocking and read a block after the
 * collective returned, so nobody may overwrite it before they are done:
 *  - the packed buffer is this rank's: the next gather fills it only after
 *    the host waited for the step's end on every compute queue, which the
 *    writes were queued before (in-order queues), so after the writes;
 *  - a window block is a peer's, which it fills again while our writes may
 *    be pending. The window has two slots per rank, used by alternate
 *    runs, and a rank's flag for run g also says it has finished reading
 *    every block of run g - 1 (shm_gather.c). We raise it only after the
 *    step's end, when our writes of run g - 1 are complete (checked on
 *    their events: writes_pending), so a peer refills the slot our writes
 *    of run g - 1 read (at run g + 1) only after our flag for run g said
 *    they finished. The argument needs no reasoning about the training
 *    step between two gathers (a reduce-scatter that would order them).
 *  - the window is the plan's own, not the node's window of the gradient
 *    all-reduce and reduce-scatter, whose rounds would overwrite it, and
 *    which a later, larger plan replaces (freeing the old memory);
 *  - the state gather of a checkpoint (clt__dp_gather_state) runs the
 *    same plan with a buffer of its own (a host run copies through the
 *    window); it raises its flag too, so it first waits for the
 *    parameters' pending writes;
 *  - at shutdown clt__dp_gather_free waits for the pending writes (with
 *    CLT_TIMEOUT): the window lives until the communicator is destroyed,
 *    which comes after the trainer, but the packed buffer is freed here.
 * Mismatched ranks are refused when the plan is made (the fingerprint:
 * count, per-rank counts, algorithm), and a rank that stops answering is
 * CLT_ETIMEDOUT naming it, as in every collective.
 */
#include "dp/dp_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cltrain/opencl.h>

/* Rank rank's part of each bucket as the reduce-scatter cuts it
 * (clt__dp_shard_part: equal, or by the shards' weights), for every rank:
 * the pieces of the packed buffer, rank after rank, and each rank's count. */
int clt__dp_gather_plan(clt__dp *dp) {
  int rc = CLT_OK, nb = dp->buckets.n, N = dp->nranks;
  const clt__bucket_layout *b = &dp->buckets;
  size_t *counts = clt__calloc((size_t)N, sizeof *counts);
  dp->pieces = clt__calloc((size_t)N * (nb ? nb : 1), sizeof *dp->pieces);
  if (!counts || !dp->pieces) { rc = CLT_ENOMEM; goto fail; }
  int64_t packed = 0;
  dp->gather_n = 0;
  for (int k = 0; k < nb; k++) dp->gather_n += b->hi[k] - b->lo[k];
  for (int r = 0; r < N; r++) {
    for (int k = 0; k < nb; k++) {
      size_t off, len;
      CLT_TRY(clt__dp_shard_part(dp->shard_w, N, r, (size_t)(b->hi[k] - b->lo[k]), &off, &len));
      int64_t n = (int64_t)len;
      dp->pieces[r * nb + k] = (clt__gather_piece){b->lo[k] + (int64_t)off, packed, n};
      packed += n;
      counts[r] += (size_t)n;
    }
  }
  if (packed != dp->gather_n) {
    rc = clt__error(CLT_EINTERNAL, "rank %d: the buckets' parts hold %lld floats, the buckets %lld", dp->rank,
                    (long long)packed, (long long)dp->gather_n);
    goto fail;
  }
  /* The host's buffer, one per rank; on one node, blocks in a window. */
  CLT_TRY(clt__allgather_plan_create_window(dp->comm, (size_t)packed, counts, CLT_F32, &dp->gather));
fail:
  free(counts);
  return rc;
}

/* The window's blocks, or NULL: the packed buffer (pinned) instead. */
static int in_window(const clt__dp *dp) { return clt__allgather_window_block(dp->gather, dp->rank, 1) != NULL; }

int clt__dp_gather_attach(clt__dp *dp) {
  int rc = CLT_OK;
  if (!dp->zero || dp->written) return CLT_OK;
  /* Pinned on the first replica's context: it is read from (DMA straight
   * into it on a GPU); the others' writes read it as host memory. */
  if (!in_window(dp))
    CLT_TRY(clt_pinned_create(dp->ctx[0], (size_t)dp->gather_n * sizeof(float), &dp->staging));
  if (!(dp->written = clt__calloc(dp->nlocal, sizeof *dp->written))) rc = CLT_ENOMEM;
fail:
  return rc;
}

uint64_t clt__dp_gather_counted(const clt__dp *dp) {
  /* The window: this rank's segment, sized when the plan was made. */
  return in_window(dp) ? clt__allgather_window_bytes(dp->gather) : (uint64_t)dp->gather_n * sizeof(float);
}

uint64_t clt__dp_gather_bytes(const clt__dp *dp) {
  return in_window(dp) ? clt__allgather_window_bytes(dp->gather) : clt_pinned_size(dp->staging);
}

/* The writes of the last gather: done, or the deadline passed (1). */
static int writes_pending(clt__dp *dp) {
  double start = clt__now(), timeout = clt_comm_timeout(dp->comm);
  for (int i = 0; dp->written && i < dp->nlocal; i++) {
    while (dp->written[i]) {
      cl_int st = CL_COMPLETE;
      if (clGetEventInfo(dp->written[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) != CL_SUCCESS ||
          st <= CL_COMPLETE) {
        clReleaseEvent(dp->written[i]);
        dp->written[i] = NULL;
        break;
      }
      if (clt__now() - start > timeout) return 1;
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
  }
  return 0;
}

void clt__dp_gather_free(clt__dp *dp) {
  /* A device still writing from the staging (one that hangs) keeps it.
   * The window's blocks outlive the plan: the communicator frees them when
   * it is destroyed, after this (the caller's communicator outlives the
   * trainer), so the wait here is what keeps a write from reading freed
   * memory. */
  if (writes_pending(dp))
    clt__log(CLT_LOG_WARN, "rank %d: a replica has not finished writing the gathered parameters after %.0f s; "
             "their host buffer is left allocated%s", dp->rank, clt_comm_timeout(dp->comm),
             in_window(dp) ? " until the communicator is destroyed" : "");
  else
    clt_pinned_destroy(dp->staging);
  clt_allgather_plan_destroy(dp->gather);
  free(dp->pieces), free(dp->written);
  dp->staging = NULL, dp->gather = NULL, dp->pieces = NULL, dp->written = NULL;
}

/* Pieces of rank r: [r nb, (r + 1) nb). An arena-order array x to this
 * rank's block of the packed buffer, and every block back. */
static void pack(const clt__dp *dp, const float *x, float *packed) {
  const clt__gather_piece *p = dp->pieces + (size_t)dp->rank * dp->buckets.n;
  for (int k = 0; k < dp->buckets.n; k++) memcpy(packed + p[k].packed, x + p[k].arena, (size_t)p[k].n * sizeof *x);
}

static void unpack(const clt__dp *dp, const float *packed, float *x) {
  for (int k = 0; k < dp->nranks * dp->buckets.n; k++) {
    const clt__gather_piece *p = &dp->pieces[k];
    memcpy(x + p->arena, packed + p->packed, (size_t)p->n * sizeof *x);
  }
}

/* Rank r's piece k (of pieces[r nb + k]) where the gather reads or writes
 * it: in the packed buffer, or in rank r's block of the window (its parts
 * in bucket order from the block's start), of the next run (this rank's,
 * to fill) or the last one (the others', to write to the devices). */
static float *piece_at(const clt__dp *dp, float *packed, int r, const clt__gather_piece *g, int next) {
  if (packed) return packed + g->packed;
  float *block = clt__allgather_window_block(dp->gather, r, next);
  return block + (g->packed - dp->pieces[(size_t)r * dp->buckets.n].packed);
}

/* Stage 3: this rank's whole shard from the first replica to the host,
 * its ranges into the host's whole parameters (its parts of the buckets
 * and what no bucket covers), its parts into its block, the allgather,
 * and every other rank's parts from their blocks into the whole
 * parameters: the units are written from there (zero_units.c). Nothing
 * is written to the devices, so nothing reads a block after this returns. */
static int gather_to_host(clt__dp *dp, float *packed, double timeout) {
  int rc = CLT_OK, nb = dp->buckets.n;
  cl_event ev = NULL;
  clt_context *ctx0 = clt__replica_context(dp->rep[0]);
  clt_tensor p0 = clt__replica_params(dp->rep[0]);
  if (dp->shard_params > 0) {
    CLT_CL_TRY(clEnqueueReadBuffer(clt_context_transfer_queue(ctx0), p0.buf, CL_FALSE, p0.offset,
                                   (size_t)dp->shard_params * sizeof(float), dp->z3_mine, 0, NULL, &ev));
    CLT_CL_TRY(clFlush(clt_context_transfer_queue(ctx0)));
    CLT_TRY(clt__wait_event(ctx0, ev, timeout, "reading the shard's parameters"));
  }
  for (int k = 0; k < dp->nshard; k++)
    memcpy(dp->z3_full + dp->shard[k].lo, dp->z3_mine + dp->shard[k].state_at,
           (size_t)dp->shard[k].n * sizeof(float));
  const clt__gather_piece *mine = dp->pieces + (size_t)dp->rank * nb;
  for (int k = 0; k < nb; k++)
    if (mine[k].n)
      memcpy(piece_at(dp, packed, dp->rank, &mine[k], 1), dp->z3_full + mine[k].arena, (size_t)mine[k].n * 4);
  if (packed)
    CLT_TRY(clt_allgather_run(dp->gather, packed));
  else
    CLT_TRY(clt__allgather_run_filled(dp->gather));
  for (int k = 0; k < dp->nranks * nb; k++) {
    const clt__gather_piece *g = &dp->pieces[k];
    if (g->n && k / nb != dp->rank)
      memcpy(dp->z3_full + g->arena, piece_at(dp, packed, k / nb, g, 0), (size_t)g->n * sizeof(float));
  }
fail:
  if (ev) clReleaseEvent(ev);
  return rc;
}

int clt__dp_allgather_params(clt__dp *dp, int64_t step) {
  clt__replica *const *reps = dp->rep;
  int rc = CLT_OK, n = dp->nlocal;
  cl_event ev = NULL;
  if (!dp->zero || dp->gather_n == 0) return CLT_OK;
  double timeout = clt_comm_timeout(dp->comm);
  float *packed = in_window(dp) ? NULL : clt_pinned_ptr(dp->staging);
  int64_t w0 = clt__trace_ns();
  /* The step's end on every replica: its shard is final, and the last
   * gather's writes, which read the packed buffer or the window, are done
   * (queued before it on the same in-order queues). */
  for (int i = 0; i < n; i++) {
    clt_context *ctx = clt__replica_context(reps[i]);
    CLT_CL_TRY(clEnqueueMarkerWithWaitList(clt_context_queue(ctx), 0, NULL, &ev));
    CLT_CL_TRY(clFlush(clt_context_queue(ctx)));
    CLT_TRY(clt__wait_event(ctx, ev, timeout, "the optimizer step"));
    clReleaseEvent(ev), ev = NULL;
  }
  /* Said to the others by this run's flag (clt__allgather_run_filled): done
   * reading the last run's blocks. The marker made sure; this releases the
   * writes' events and holds the promise should the order above change. */
  if (writes_pending(dp)) {
    rc = clt__error(CLT_ETIMEDOUT, "rank %d: the gathered parameters of the last step are not written after %.0f s",
                    dp->rank, timeout);
    goto fail;
  }
  int64_t w1 = clt__trace_ns();
  clt__trace_span(dp->trace, dp->trace_lane, "wait", w0, w1, "the optimizer step");
  double t0 = clt__now();
  if (dp->zero == 3) {
    CLT_TRY(gather_to_host(dp, packed, timeout));
    goto done;
  }
  /* This rank's parts, from the first replica, into its block: of the
   * packed buffer, or of the window, where the others read it. */
  clt_context *ctx0 = clt__replica_context(reps[0]);
  cl_command_queue xq = clt_context_transfer_queue(ctx0);
  clt_tensor p0 = clt__replica_params(reps[0]);
  const clt__gather_piece *mine = dp->pieces + (size_t)dp->rank * dp->buckets.n;
  for (int k = 0; k < dp->buckets.n; k++)
    if (mine[k].n)
      CLT_CL_TRY(clEnqueueReadBuffer(xq, p0.buf, CL_FALSE, p0.offset + (size_t)mine[k].arena * sizeof(float),
                                     (size_t)mine[k].n * sizeof(float), piece_at(dp, packed, dp->rank, &mine[k], 1),
                                     0, NULL, NULL));
  CLT_CL_TRY(clEnqueueMarkerWithWaitList(xq, 0, NULL, &ev));
  CLT_CL_TRY(clFlush(xq));
  CLT_TRY(clt__wait_event(ctx0, ev, timeout, "reading the shard's parameters"));
  clReleaseEvent(ev), ev = NULL;
  if (packed)
    CLT_TRY(clt_allgather_run(dp->gather, packed));
  else
    CLT_TRY(clt__allgather_run_filled(dp->gather));
  /* The other ranks' pieces, each straight from its block to its place
   * (this rank's are there already, on every local replica); the last
   * write's event stands for all of them (an in-order queue). */
  for (int i = 0; i < n; i++) {
    cl_command_queue q = clt_context_queue(clt__replica_context(reps[i]));
    clt_tensor p = clt__replica_params(reps[i]);
    if (dp->written[i]) clReleaseEvent(dp->written[i]), dp->written[i] = NULL;
    for (int k = 0; k < dp->nranks * dp->buckets.n; k++) {
      const clt__gather_piece *g = &dp->pieces[k];
      int r = k / dp->buckets.n;
      if (g->n == 0 || r == dp->rank) continue;
      if (dp->written[i]) clReleaseEvent(dp->written[i]), dp->written[i] = NULL;
      CLT_CL_TRY(clEnqueueWriteBuffer(q, p.buf, CL_FALSE, p.offset + (size_t)g->arena * sizeof(float),
                                      (size_t)g->n * sizeof(float), piece_at(dp, packed, r, g, 0), 0, NULL,
                                      &dp->written[i]));
    }
    CLT_CL_TRY(clFlush(q));
  }
done:;
  double dt = clt__now() - t0;
  dp->comm_s += dt;
  clt__trace_span(dp->trace, dp->trace_lane, "comm", w1, w1 + (int64_t)(dt * 1e9), "allgather %.0f KiB",
                  (double)dp->gather_n * 4.0 / 1024.0);
fail:
  if (ev) clReleaseEvent(ev);
  return rc < 0 ? clt__error_prefix(rc, "gathering the parameters of step %lld (--zero %d)", (long long)step, dp->zero)
                : rc;
}

int clt__dp_gather_state(clt__dp *dp, const float *shard, int per, int64_t P, float *full) {
  int rc = CLT_OK;
  float *packed = NULL;
  clt__dp_unshard_state(dp, shard, per, P, full);
  if (!dp->zero || dp->gather_n == 0) return CLT_OK;
  /* The parameters' last gather may still be writing to the devices from
   * the window's blocks: this run's flag tells the others that this rank
   * is done reading them, so it must be (shm_gather.c). */
  if (writes_pending(dp))
    return clt__error(CLT_ETIMEDOUT, "rank %d: gathering the optimizer state: the gathered parameters of the last "
                      "step are not written after %.0f s", dp->rank, clt_comm_timeout(dp->comm));
  /* A buffer of its own: made here, on the rare save (a host run copies
   * through the window's blocks). */
  if (!(packed = clt__calloc((size_t)dp->gather_n, sizeof *packed))) return CLT_ENOMEM;
  for (int c = 0; c < per; c++) {
    float *x = full + (size_t)c * (size_t)P;
    pack(dp, x, packed);
    CLT_TRY(clt_allgather_run(dp->gather, packed));
    unpack(dp, packed, x);
  }
fail:
  free(packed);
  return rc < 0 ? clt__error_prefix(rc, "gathering the optimizer state of every rank (--zero %d)", dp->zero) : rc;
}
