/*
 * transport_none.c: the transport of a build without MPI. Only one-rank
 * communicators exist there, and a ring of one rank sends nothing, so these
 * are never called; they exist so the collectives link.
 */
#include "comm_internal.h"

static int no_mpi(void) {
  return clt__error(CLT_EINTERNAL, "a message between ranks in a build without MPI (reconfigure --with-mpi)");
}

int clt__tp_isend(clt_comm *comm, const void *buf, size_t bytes, int peer, int tag, clt__req *req) {
  (void)comm, (void)buf, (void)bytes, (void)peer, (void)tag, (void)req;
  return no_mpi();
}

int clt__tp_irecv(clt_comm *comm, void *buf, size_t bytes, int peer, int tag, clt__req *req) {
  (void)comm, (void)buf, (void)bytes, (void)peer, (void)tag, (void)req;
  return no_mpi();
}

int clt__tp_test(clt_comm *comm, clt__req *req, size_t *got) {
  (void)comm, (void)req, (void)got;
  return no_mpi();
}

void clt__tp_abandon(clt_comm *comm, clt__req *req) {
  (void)comm;
  req->kind = 0;
}

void clt__tp_progress(clt_comm *comm) { (void)comm; }

void clt__tp_destroy(clt_comm *comm) { comm->mpi = NULL; }

/* cltrain/mpi.h's Fortran entry, here too so that the symbol (and the
 * Fortran module's call of it) exists in every build; MPI_Fint is an int
 * wherever MPI is. */
CLT_API int clt_comm_create_f(int fcomm, clt_comm **out);
int clt_comm_create_f(int fcomm, clt_comm **out) {
  CLT_ARG(out);
  *out = NULL;
  return clt__error(CLT_EUNSUPPORTED, "clt_comm_create_f: the communicator (Fortran handle %d) cannot be used: "
                                      "cltrain was built without MPI; use clt_comm_create_local, or reconfigure "
                                      "--with-mpi", fcomm);
}

/* comm/p2p.h: a one-rank communicator splits into itself. */
int clt__comm_split(clt_comm *comm, int color, int key, clt_comm **out);
int clt__comm_split(clt_comm *comm, int color, int key, clt_comm **out) {
  (void)color, (void)key;
  *out = NULL;
  if (comm->size != 1) return clt__error(CLT_EINTERNAL, "a split of a %d-rank communicator without MPI", comm->size);
  int rc = clt_comm_create_local(out);
  if (rc == CLT_OK) clt_comm_set_timeout(*out, comm->timeout_s);
  return rc;
}

/* Shared memory between ranks: there is one rank. */
int clt__tp_shm_window(clt_comm *comm, size_t bytes) {
  (void)comm, (void)bytes;
  return no_mpi();
}

int clt__tp_shm_region(clt_comm *comm, size_t bytes, unsigned char *const **segs) {
  (void)comm, (void)bytes;
  *segs = NULL;
  return no_mpi();
}
