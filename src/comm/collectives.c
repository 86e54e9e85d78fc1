/*
 * collectives.c: broadcast and allgather, with the all-reduce's safety:
 * a fingerprint check first (every rank must give the same size and root),
 * the operation number in every tag, and deadlines on every wait.
 *
 * Broadcast is a scatter (the root sends segment j to rank j) followed by
 * the ring allgather: each rank sends about 2 (N - 1)/N of the buffer,
 * like the all-reduce, instead of the root sending all of it N - 1 times.
 */
#include "comm_internal.h"

#include <stdlib.h>
#include <string.h>

/* Largest single message of a scatter (MPI counts are int). */
#define CLT__MAX_MESSAGE ((size_t)1 << 30)

/* The ring allgather over the blocks seg_off describes; rank r's block is
 * in place already. */
static int ring_allgather(clt__op *op, unsigned char *buf, const size_t *seg_off) {
  clt__ring_sched sched;
  clt_comm *comm = op->comm;
  int rc = clt__ring_sched_create(comm->rank, comm->size, seg_off, seg_off + 1, comm->chunk_bytes, 0,
                                  comm->size - 1, &sched);
  if (rc < 0) return rc;
  clt__ring_io io = {.base = buf};
  rc = clt__ring_exec(op, &sched, &io);
  clt__ring_sched_free(&sched);
  return rc;
}

/* The root sends segment j (in pieces of at most CLT__MAX_MESSAGE) to rank j. */
static int scatter(clt__op *op, unsigned char *buf, const size_t *seg_off, int root) {
  clt_comm *comm = op->comm;
  int rc = CLT_OK, n = 0, tag = clt__op_tag(op, CLT__TAG_SCATTER);
  size_t npieces = 0;
  for (int j = 0; j < comm->size; j++)
    if (j != root && (comm->rank == root || comm->rank == j))
      npieces += (seg_off[j + 1] - seg_off[j] + CLT__MAX_MESSAGE - 1) / CLT__MAX_MESSAGE;
  if (npieces == 0) return CLT_OK;
  clt__req *reqs = clt__calloc(npieces, sizeof *reqs);
  int *peers = clt__calloc(npieces, sizeof *peers);
  if (!reqs || !peers) {
    rc = CLT_ENOMEM;
    goto done;
  }
  for (int j = 0; j < comm->size; j++) {
    if (j == root || (comm->rank != root && comm->rank != j)) continue;
    for (size_t off = seg_off[j]; off < seg_off[j + 1]; off += CLT__MAX_MESSAGE, n++) {
      size_t len = seg_off[j + 1] - off < CLT__MAX_MESSAGE ? seg_off[j + 1] - off : CLT__MAX_MESSAGE;
      peers[n] = comm->rank == root ? j : root;
      rc = comm->rank == root ? clt__tp_isend(comm, buf + off, len, j, tag, &reqs[n])
                              : clt__tp_irecv(comm, buf + off, len, root, tag, &reqs[n]);
      if (rc < 0) {
        for (int i = 0; i < n; i++) clt__tp_abandon(comm, &reqs[i]);
        rc = clt__op_break(op, clt__op_error(op, 0, rc));
        goto done;
      }
    }
  }
  rc = clt__op_wait(op, reqs, peers, NULL, n, 0);
done:
  free(reqs);
  free(peers);
  return rc;
}

int clt_bcast(clt_comm *comm, void *buf, size_t bytes, int root) {
  int rc = CLT_OK;
  size_t *seg_off = NULL;
  clt__op op;
  CLT_HANDLE(comm, "communicator");
  CLT_TRY(clt__op_begin(comm, "broadcast", comm->size, &op));
  clt__fingerprint mine = {.kind = CLT__FP_BCAST, .root = root, .count = bytes};
  CLT_TRY(clt__fingerprint_check(&op, &mine, NULL));
  if (root < 0 || root >= comm->size) {
    rc = clt__error(CLT_EINVAL, "clt_bcast: root %d is not a rank (0 to %d)", root, comm->size - 1);
    goto fail;
  }
  if (!buf && bytes) {
    rc = clt__error(CLT_EINVAL, "clt_bcast: buf is NULL (rank %d), for %zu bytes", comm->rank, bytes);
    goto fail;
  }
  if (comm->size == 1 || bytes == 0) return CLT_OK;
  if (!(seg_off = clt__calloc((size_t)comm->size + 1, sizeof *seg_off))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  clt__segments(bytes, comm->size, seg_off);
  CLT_TRY(scatter(&op, buf, seg_off, root));
  CLT_TRY(ring_allgather(&op, buf, seg_off));
fail:
  free(seg_off);
  return rc;
}

int clt_allgather(clt_comm *comm, const void *send, size_t bytes, void *recv) {
  int rc = CLT_OK;
  size_t *seg_off = NULL;
  clt__op op;
  CLT_HANDLE(comm, "communicator");
  CLT_TRY(clt__op_begin(comm, "allgather", comm->size - 1, &op));
  clt__fingerprint mine = {.kind = CLT__FP_ALLGATHER, .count = bytes};
  CLT_TRY(clt__fingerprint_check(&op, &mine, NULL));
  if (bytes && (!send || !recv)) {
    rc = clt__error(CLT_EINVAL, "clt_allgather: %s is NULL (rank %d), for %zu bytes", send ? "recv" : "send", comm->rank,
                    bytes);
    goto fail;
  }
  if (bytes > SIZE_MAX / (size_t)comm->size) {
    rc = clt__error(CLT_EINVAL, "clt_allgather: %zu bytes from each of %d ranks do not fit in memory", bytes,
                    comm->size);
    goto fail;
  }
  if (bytes == 0) return CLT_OK;
  unsigned char *mine_at = (unsigned char *)recv + (size_t)comm->rank * bytes;
  if (mine_at != send) memmove(mine_at, send, bytes);
  if (comm->size == 1) return CLT_OK;
  if (!(seg_off = clt__calloc((size_t)comm->size + 1, sizeof *seg_off))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  for (int j = 0; j <= comm->size; j++) seg_off[j] = (size_t)j * bytes;
  CLT_TRY(ring_allgather(&op, recv, seg_off));
fail:
  free(seg_off);
  return rc;
}

/* Collective: CLT_OK when rc is CLT_OK on every rank, else the failure of
 * the first rank that failed (on the others an error naming it). A rank
 * that finds a fault of its own must still come here, so that no peer is
 * left waiting in the next collective until the timeout. */
static int all_ok(clt_comm *comm, int rc, const char *what) {
  int32_t mine = rc, *all;
  if (!comm || comm->size == 1) return rc;
  char msg[1024];
  clt__strlcpy(msg, rc < 0 ? clt_last_error() : "", sizeof msg);
  if (!(all = clt__calloc((size_t)comm->size, sizeof *all))) return clt__error(CLT_ENOMEM, "%s: out of memory", what);
  int grc = clt_allgather(comm, &mine, sizeof mine, all);
  for (int r = 0; grc == CLT_OK && r < comm->size; r++)
    if (all[r] < 0) {
      grc = r == comm->rank ? clt__error(all[r], "%s", msg)
                            : clt__error(all[r], "rank %d: %s: rank %d failed (%s) and said why", comm->rank, what, r,
                                         clt_strerror(all[r]));
      break;
    }
  free(all);
  return grc;
}

int clt_bcast_devices(clt_comm *comm, int root, size_t bytes, int n, const cl_command_queue *queues,
                      const cl_mem *bufs, const size_t *offsets) {
  int rc = CLT_OK;
  unsigned char *host = NULL;
  CLT_HANDLE(comm, "communicator");
  /* Every check is this rank's own: each ends in all_ok, never in an
   * early return, so the others hear of it instead of waiting. */
  if (n < 1) rc = clt__error(CLT_EINVAL, "clt_bcast_devices: %d buffers given (at least one is needed)", n);
  else if (!queues) rc = clt__null_arg(__func__, "queues", NULL);
  else if (!bufs) rc = clt__null_arg(__func__, "bufs", NULL);
  for (int q = 0; rc == CLT_OK && q < n; q++)
    if (!queues[q] || !bufs[q])
      rc = clt__error(CLT_EINVAL, "clt_bcast_devices: %s[%d] is NULL", queues[q] ? "bufs" : "queues", q);
  for (int q = 0; rc == CLT_OK && q < n; q++) {
    size_t off = offsets ? offsets[q] : 0, size = clt_buffer_size(bufs[q]);
    if (off > size || size - off < bytes)
      rc = clt__error(CLT_ESHAPE, "clt_bcast_devices: buffer %d: %zu bytes from offset %zu do not fit in its %zu",
                      q, bytes, off, size);
  }
  if (rc == CLT_OK && bytes && !(host = clt__calloc(1, bytes)))
    rc = clt__error(CLT_ENOMEM, "clt_bcast_devices: no memory for %zu bytes", bytes);
  /* Parameters are broadcast once per job: plain blocking copies do. */
  if (rc == CLT_OK && comm && comm->rank == root && bytes) {
    cl_int e = clEnqueueReadBuffer(queues[0], bufs[0], CL_TRUE, offsets ? offsets[0] : 0, bytes, host, 0, NULL, NULL);
    if (e != CL_SUCCESS)
      rc = clt__error(clt__cl_status(e), "clt_bcast_devices: reading the root's buffer failed with %s (%d)",
                      clt__cl_error_name(e), (int)e);
  }
  CLT_TRY(all_ok(comm, rc, "clt_bcast_devices"));
  CLT_TRY(clt_bcast(comm, host, bytes, root));
  for (int q = 0; q < n && bytes; q++)
    CLT_CL_TRY(clEnqueueWriteBuffer(queues[q], bufs[q], CL_TRUE, offsets ? offsets[q] : 0, bytes, host, 0, NULL,
                                    NULL));
fail:
  free(host);
  return rc;
}
