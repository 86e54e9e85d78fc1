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
  int rc = clt__ring_sched_create(comm->rank, comm->size, seg_off, comm->chunk_bytes, 0, comm->size - 1, &sched);
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
  CLT_TRY(clt__op_begin(comm, "broadcast", comm ? comm->size : 0, &op));
  clt__fingerprint mine = {.kind = CLT__FP_BCAST, .root = root, .count = bytes};
  CLT_TRY(clt__fingerprint_check(&op, &mine, NULL));
  if (root < 0 || root >= comm->size) {
    rc = clt__error(CLT_EINVAL, "clt_bcast: root %d is not a rank (0 to %d)", root, comm->size - 1);
    goto fail;
  }
  if (!buf && bytes) {
    rc = clt__error(CLT_EINVAL, "rank %d: clt_bcast: no buffer", comm->rank);
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
  CLT_TRY(clt__op_begin(comm, "allgather", comm ? comm->size - 1 : 0, &op));
  clt__fingerprint mine = {.kind = CLT__FP_ALLGATHER, .count = bytes};
  CLT_TRY(clt__fingerprint_check(&op, &mine, NULL));
  if (bytes && (!send || !recv)) {
    rc = clt__error(CLT_EINVAL, "rank %d: clt_allgather: no %s buffer", comm->rank, send ? "receive" : "send");
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

int clt_bcast_devices(clt_comm *comm, int root, size_t bytes, int n, const cl_command_queue *queues,
                      const cl_mem *bufs, const size_t *offsets) {
  int rc = CLT_OK;
  unsigned char *host = NULL;
  if (n < 1 || !queues || !bufs)
    return clt__error(CLT_EINVAL, "clt_bcast_devices: %d buffers given (at least one is needed)", n);
  for (int q = 0; q < n; q++) {
    size_t off = offsets ? offsets[q] : 0, size = clt_buffer_size(bufs[q]);
    if (off > size || size - off < bytes)
      return clt__error(CLT_ESHAPE, "clt_bcast_devices: buffer %d: %zu bytes from offset %zu do not fit in its %zu",
                        q, bytes, off, size);
  }
  if (bytes && !(host = clt__calloc(1, bytes))) return CLT_ENOMEM;
  /* Parameters are broadcast once per job: plain blocking copies do. */
  if (comm && comm->rank == root && bytes)
    CLT_CL_TRY(clEnqueueReadBuffer(queues[0], bufs[0], CL_TRUE, offsets ? offsets[0] : 0, bytes, host, 0, NULL, NULL));
  CLT_TRY(clt_bcast(comm, host, bytes, root));
  for (int q = 0; q < n && bytes; q++)
    CLT_CL_TRY(clEnqueueWriteBuffer(queues[q], bufs[q], CL_TRUE, offsets ? offsets[q] : 0, bytes, host, 0, NULL,
                                    NULL));
fail:
  free(host);
  return rc;
}
