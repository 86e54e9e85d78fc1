/*
 * p2p.c: point-to-point messages with deadlines for the pipeline, on the
 * transport and the waits of the collectives (comm/wait.c), and the split
 * of a communicator. A message is its own operation in the waits'
 * sense, numbered by the caller (the micro-batch), so that a timeout names
 * it; it does not take an operation number of the communicator, whose
 * collectives keep counting alike on every rank.
 */
#include "comm/p2p.h"

#include <string.h>

int clt__p2p_isend(clt_comm *comm, const void *buf, size_t bytes, int peer, int tag, uint64_t number,
                   clt__p2p_msg *m) {
  memset(m, 0, sizeof *m);
  m->peer = peer, m->bytes = bytes, m->number = number;
  if (comm->broken)
    return clt__error(comm->broken, "rank %d: a pipeline message refused: the communicator failed earlier: %s",
                      comm->rank, comm->broken_detail ? comm->broken_detail : clt_strerror(comm->broken));
  return clt__tp_isend(comm, buf, bytes, peer, tag, &m->req);
}

int clt__p2p_irecv(clt_comm *comm, void *buf, size_t bytes, int peer, int tag, uint64_t number,
                   clt__p2p_msg *m) {
  memset(m, 0, sizeof *m);
  m->peer = peer, m->bytes = bytes, m->number = number;
  if (comm->broken)
    return clt__error(comm->broken, "rank %d: a pipeline message refused: the communicator failed earlier: %s",
                      comm->rank, comm->broken_detail ? comm->broken_detail : clt_strerror(comm->broken));
  return clt__tp_irecv(comm, buf, bytes, peer, tag, &m->req);
}

int clt__p2p_wait(clt_comm *comm, clt__p2p_msg *m, const char *what) {
  if (!m->req.kind) return CLT_OK;
  int receive = m->req.kind == 2;
  clt__op op = {.comm = comm, .name = what, .number = m->number, .nsteps = 1, .last_progress = clt__now()};
  size_t got = 0;
  int rc = clt__op_wait(&op, &m->req, &m->peer, &got, 1, 0);
  if (rc < 0) return rc;
  if (receive && got != m->bytes)
    return clt__op_break(&op, clt__error(CLT_EMISMATCH, "rank %d: %s #%llu from rank %d: %zu bytes where %zu were "
                                         "expected; do all ranks run the same model and options?", comm->rank, what,
                                         (unsigned long long)m->number, m->peer, got, m->bytes));
  return CLT_OK;
}

void clt__p2p_progress(clt_comm *comm) {
  if (comm && !comm->broken) clt__tp_progress(comm);
}

void clt__p2p_abandon(clt_comm *comm, clt__p2p_msg *m) { clt__tp_abandon(comm, &m->req); }
