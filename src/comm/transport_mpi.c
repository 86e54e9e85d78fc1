/*
 * transport_mpi.c: communicators made from the caller's MPI_Comm, and the
 * point-to-point messages every collective is built from. The only file
 * of the library that includes mpi.h. cltrain never initialises or
 * finalises MPI, works on a duplicate of the caller's communicator with
 * errors returned rather than fatal, and makes every MPI call from the
 * caller's thread.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#  define _GNU_SOURCE /* sched_getaffinity */
#endif
#include "comm_internal.h"
#include "p2p.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cltrain/mpi.h>

struct clt__mpi {
  MPI_Comm comm;
  /* The shared-memory window of the node (clt__tp_shm_window). */
  MPI_Comm node;           /* this node's ranks, in local-rank order */
  MPI_Win win;
  unsigned char **segs;    /* local_size: every local rank's segment */
  /* Windows of their own (clt__tp_shm_region), kept until the
   * communicator is destroyed. */
  struct shm_region *regions;
};

struct shm_region {
  MPI_Win win;
  unsigned char **segs;
  struct shm_region *next;
};

_Static_assert(sizeof(MPI_Request) <= sizeof(((clt__req *)0)->h), "an MPI_Request must fit in clt__req");

static MPI_Request *mpi_req(clt__req *req) { return (MPI_Request *)(void *)req->h.raw; }
static MPI_Comm mpi_comm(const clt_comm *comm) { return ((struct clt__mpi *)comm->mpi)->comm; }

/* Record an MPI failure with MPI's own words. A truncated receive means the
 * ranks disagree on what they are doing. */
static int mpi_error(int code, const char *what, int peer) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0, cls = 0;
  MPI_Error_string(code, text, &len);
  MPI_Error_class(code, &cls);
  if (cls == MPI_ERR_TRUNCATE)
    return clt__error(CLT_EMISMATCH, "%s rank %d: a longer message arrived than this rank expects (%s): are the "
                                     "ranks running the same collectives in the same order?",
                      what, peer, text);
  return clt__error(CLT_EMPI, "%s rank %d failed: %s (MPI error %d)", what, peer, text, code);
}

int clt__tp_isend(clt_comm *comm, const void *buf, size_t bytes, int peer, int tag, clt__req *req) {
  if (bytes > INT_MAX) return clt__error(CLT_EINTERNAL, "a message of %zu bytes (more than INT_MAX)", bytes);
  int e = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, mpi_comm(comm), mpi_req(req));
  if (e != MPI_SUCCESS) return mpi_error(e, "MPI_Isend to", peer);
  if (comm->layout.node_of) comm->sent[comm->layout.node_of[peer] != comm->layout.node] += bytes;
  req->kind = 1;
  req->peer = peer;
  return CLT_OK;
}

int clt__tp_irecv(clt_comm *comm, void *buf, size_t bytes, int peer, int tag, clt__req *req) {
  if (bytes > INT_MAX) return clt__error(CLT_EINTERNAL, "a message of %zu bytes (more than INT_MAX)", bytes);
  int e = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, mpi_comm(comm), mpi_req(req));
  if (e != MPI_SUCCESS) return mpi_error(e, "MPI_Irecv from", peer);
  req->kind = 2;
  req->peer = peer;
  return CLT_OK;
}

int clt__tp_test(clt_comm *comm, clt__req *req, size_t *got) {
  int flag = 0;
  MPI_Status st;
  (void)comm;
  if (!req->kind) return 1;
  /* With MPI_ERRORS_RETURN a failed request is the return code (the
   * status's MPI_ERROR is not set by single-request calls). */
  int e = MPI_Test(mpi_req(req), &flag, &st);
  if (e != MPI_SUCCESS) {
    int kind = req->kind;
    req->kind = 0;
    return mpi_error(e, kind == 1 ? "sending to" : "receiving from", req->peer);
  }
  if (!flag) return 0;
  if (req->kind == 2 && got) {
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    *got = n > 0 ? (size_t)n : 0;
  }
  req->kind = 0;
  return 1;
}

void clt__tp_abandon(clt_comm *comm, clt__req *req) {
  (void)comm;
  if (!req->kind) return;
  if (req->kind == 2) {
    /* Cancelling a receive is local: it completes at once. */
    int flag = 0;
    MPI_Cancel(mpi_req(req));
    for (int i = 0; i < 1000 && !flag; i++) MPI_Test(mpi_req(req), &flag, MPI_STATUS_IGNORE);
    if (!flag) MPI_Request_free(mpi_req(req));
  } else {
    /* A send cannot be taken back; let it finish whenever the peer takes it. */
    MPI_Request_free(mpi_req(req));
  }
  req->kind = 0;
}

void clt__tp_progress(clt_comm *comm) {
  int flag = 0;
  if (!comm->mpi) return;
  /* the timeout diagnoses' tag: a probe never receives, so one pending there
   * stays for its wait */
  MPI_Iprobe(MPI_ANY_SOURCE, comm->diag_tag, mpi_comm(comm), &flag, MPI_STATUS_IGNORE);
}

/* ---- the node's shared-memory window ------------------------------------------
 * MPI_Win_allocate_shared over the node's ranks (real nodes, or pretend ones
 * inside one machine: comm->shm_capable), each rank's segment in its own
 * pages (alloc_shared_noncontig) and touched first by its owner. The
 * window is used by loads and stores only (shm.c orders them with atomic
 * flags), never by RMA calls, so no epoch is opened. */

static void free_window(struct clt__mpi *m) {
  if (m->win != MPI_WIN_NULL) MPI_Win_free(&m->win);
  free(m->segs);
  m->segs = NULL;
}

/* The node's communicator, split off the first time a window is asked
 * for (collective over the communicator). */
static int node_comm(clt_comm *comm, struct clt__mpi *m) {
  int e;
  if (m->node != MPI_COMM_NULL) return CLT_OK;
  if ((e = MPI_Comm_split(m->comm, comm->layout.node, comm->rank, &m->node)) != MPI_SUCCESS)
    return mpi_error(e, "MPI_Comm_split into nodes on", comm->rank);
  MPI_Comm_set_errhandler(m->node, MPI_ERRORS_RETURN);
  return CLT_OK;
}

/* A window over the node's ranks with a zeroed segment of `bytes` for each,
 * every local rank's address in *segs (local_size entries, allocated);
 * collective over the node, ending with a barrier so no rank reads a
 * segment before its owner zeroed it. */
static int alloc_window(clt_comm *comm, struct clt__mpi *m, size_t bytes, MPI_Win *win, unsigned char ***segs) {
  int e;
  *win = MPI_WIN_NULL;
  if (!(*segs = clt__calloc((size_t)comm->local_size, sizeof **segs))) return CLT_ENOMEM;
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  void *mine = NULL;
  e = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, m->node, &mine, win);
  MPI_Info_free(&info);
  if (e != MPI_SUCCESS) {
    *win = MPI_WIN_NULL;
    free(*segs), *segs = NULL;
    return mpi_error(e, "MPI_Win_allocate_shared of the node, with", comm->rank);
  }
  MPI_Win_set_errhandler(*win, MPI_ERRORS_RETURN);
  for (int l = 0; l < comm->local_size; l++) {
    MPI_Aint size = 0;
    int disp = 0;
    void *p = NULL;
    if ((e = MPI_Win_shared_query(*win, l, &size, &disp, &p)) != MPI_SUCCESS || (size_t)size < bytes || !p) {
      MPI_Win_free(win), free(*segs), *segs = NULL;
      return e != MPI_SUCCESS ? mpi_error(e, "MPI_Win_shared_query of", comm->layout.local[l])
                              : clt__error(CLT_EMPI, "rank %d: the shared-memory segment of rank %d is %ld bytes, "
                                                     "not %zu", comm->rank, comm->layout.local[l], (long)size, bytes);
    }
    (*segs)[l] = p;
  }
  /* Zero (so the flags start at 0) before anyone reads them. */
  memset(mine, 0, bytes);
  if ((e = MPI_Barrier(m->node)) != MPI_SUCCESS) {
    MPI_Win_free(win), free(*segs), *segs = NULL;
    return mpi_error(e, "MPI_Barrier of the node, with", comm->rank);
  }
  return CLT_OK;
}

/* comm->own_cores: whether every rank has a core of its own, on every
 * node (the same on every rank). A node's ranks may use the union of their
 * CPU affinities; with more ranks than that, each round of shm.c waits for
 * ranks that the cores take in turns, and fewer, larger rounds win. */
static int own_cores(clt_comm *comm, MPI_Comm world, MPI_Comm node) {
  enum { WORDS = 1024 / 64 };
  uint64_t mask[WORDS] = {0};
  int e, ranks = 1, cores = 0, own;
#if defined(__linux__) && defined(CPU_ISSET)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE && c < 64 * WORDS; c++)
      if (CPU_ISSET(c, &set)) mask[c / 64] |= (uint64_t)1 << (c % 64);
  } else
#endif
  {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < n && c < 64 * WORDS; c++) mask[c / 64] |= (uint64_t)1 << (c % 64);
  }
  if ((e = MPI_Allreduce(MPI_IN_PLACE, mask, WORDS, MPI_UINT64_T, MPI_BOR, node)) != MPI_SUCCESS ||
      (e = MPI_Comm_size(node, &ranks)) != MPI_SUCCESS)
    return e;
  for (int w = 0; w < WORDS; w++) cores += __builtin_popcountll(mask[w]);
  own = cores >= ranks;
  if ((e = MPI_Allreduce(MPI_IN_PLACE, &own, 1, MPI_INT, MPI_MIN, world)) != MPI_SUCCESS) return e;
  comm->own_cores = own;
  return MPI_SUCCESS;
}

int clt__tp_shm_window(clt_comm *comm, size_t bytes) {
  struct clt__mpi *m = comm->mpi;
  int rc;
  if (!m || !comm->shm_capable)
    return clt__error(CLT_EINTERNAL, "rank %d: a shared-memory window where the node's ranks share no memory",
                      comm->rank);
  if (bytes <= comm->shm_bytes) return CLT_OK;
  if (bytes > (size_t)1 << 40) return clt__error(CLT_EINVAL, "a shared-memory segment of %zu bytes", bytes);
  if ((rc = node_comm(comm, m)) < 0) return rc;
  /* Every rank of the node is here (the caller's contract), done with the
   * old window: a smaller one is replaced. */
  free_window(m);
  comm->shm_segs = NULL;
  comm->shm_bytes = 0;
  comm->shm_round = 0;
  if ((rc = alloc_window(comm, m, bytes, &m->win, &m->segs)) < 0) return rc;
  comm->shm_segs = m->segs;
  comm->shm_bytes = bytes;
  return CLT_OK;
}

int clt__tp_shm_region(clt_comm *comm, size_t bytes, unsigned char *const **segs) {
  struct clt__mpi *m = comm->mpi;
  struct shm_region *r = NULL;
  int rc;
  *segs = NULL;
  if (!m || !comm->shm_capable)
    return clt__error(CLT_EINTERNAL, "rank %d: a shared-memory region where the node's ranks share no memory",
                      comm->rank);
  if (bytes == 0 || bytes > (size_t)1 << 40)
    return clt__error(CLT_EINVAL, "a shared-memory segment of %zu bytes", bytes);
  if ((rc = node_comm(comm, m)) < 0) return rc;
  if (!(r = clt__calloc(1, sizeof *r))) return CLT_ENOMEM;
  if ((rc = alloc_window(comm, m, bytes, &r->win, &r->segs)) < 0) {
    free(r);
    return rc;
  }
  r->next = m->regions;
  m->regions = r;
  *segs = r->segs;
  return CLT_OK;
}

/* MPI_Win_free waits for every rank of the node, and a peer may still be
 * inside an operation reading the window: free it only after every rank
 * of the node said (an MPI_Ibarrier) that it is destroying the
 * communicator too, within CLT_TIMEOUT, or a second after a failure (when
 * a peer may be gone). Otherwise the window is left to MPI_Finalize. */
static void release_window(clt_comm *comm, struct clt__mpi *m) {
  if (m->win == MPI_WIN_NULL && !m->regions) return;
  MPI_Request req = MPI_REQUEST_NULL;
  int flag = 0;
  double limit = comm->broken && comm->timeout_s > 1 ? 1 : comm->timeout_s;
  if (MPI_Ibarrier(m->node, &req) == MPI_SUCCESS) {
    double start = clt__now();
    while (MPI_Test(&req, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && !flag && clt__now() - start < limit)
      usleep(clt__now() - start < 0.01 ? 0 : 200);
  }
  if (flag) {
    free_window(m);
    for (struct shm_region *r = m->regions; r; r = r->next) MPI_Win_free(&r->win);
  } else {
    clt__log(comm->broken ? CLT_LOG_DEBUG : CLT_LOG_WARN, "rank %d: the node's shared-memory window is left to "
             "MPI_Finalize: another rank of the node did not destroy the communicator within %.1f s%s", comm->rank,
             limit, comm->broken ? " (after a failure)" : " (CLT_TIMEOUT)");
    free(m->segs);
    m->segs = NULL;
    m->win = MPI_WIN_NULL;
    m->node = MPI_COMM_NULL; /* its barrier may be pending */
  }
  for (struct shm_region *r = m->regions, *next; r; r = next) {
    next = r->next;
    free(r->segs);
    free(r);
  }
  m->regions = NULL;
  comm->shm_segs = NULL;
  comm->shm_bytes = 0;
}

void clt__tp_destroy(clt_comm *comm) {
  struct clt__mpi *m = comm->mpi;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) release_window(comm, m);
  if (!finalized && m->node != MPI_COMM_NULL) MPI_Comm_free(&m->node);
  if (!finalized && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
  free(m->segs);
  free(m);
  comm->mpi = NULL;
}

/* Wait for the duplicate: every rank must call clt_comm_create, and one that
 * does not must give an error, not a hang. */
static int wait_for_dup(clt_comm *comm, MPI_Request *req) {
  double start = clt__now();
  int flag = 0;
  while (!flag) {
    int e = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS) return mpi_error(e, "MPI_Comm_idup with", comm->rank);
    if (flag) break;
    double waited = clt__now() - start;
    if (waited > comm->timeout_s)
      return clt__error(CLT_ETIMEDOUT, "rank %d: clt_comm_create waited %.1f s for the other %d ranks of the "
                                       "communicator to call it too (MPI_Comm_idup); did every rank call it?",
                        comm->rank, waited, comm->size - 1);
    if (waited > 0.5) usleep(200);
  }
  return CLT_OK;
}

/* MPI is the application's: initialised by it and not yet finalised. */
static int mpi_running(const char *fn) {
  int flag = 0;
  MPI_Initialized(&flag);
  if (!flag)
    return clt__error(CLT_EINVAL, "%s: MPI is not initialised: initialise it first (MPI_Init_thread "
                      "with MPI_THREAD_FUNNELED is enough); cltrain never initialises MPI itself", fn);
  MPI_Finalized(&flag);
  return flag ? clt__error(CLT_EINVAL, "%s: MPI is already finalised", fn) : CLT_OK;
}

/* The library's own duplicate of the caller's communicator, with errors
 * returned. */
static int duplicate(MPI_Comm user_comm, clt_comm *comm, struct clt__mpi **mp) {
  struct clt__mpi *m = *mp;
  MPI_Request req = MPI_REQUEST_NULL;
  int rc, e;
  if ((e = MPI_Comm_idup(user_comm, &m->comm, &req)) != MPI_SUCCESS)
    return mpi_error(e, "MPI_Comm_idup on", comm->rank);
  if ((rc = wait_for_dup(comm, &req)) < 0) {
    /* The duplicate is still being made and may not be freed: leave it
     * (and its state) to MPI_Finalize or MPI_Abort. */
    *mp = NULL;
    return rc;
  }
  comm->mpi = m;
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  return CLT_OK;
}

/* Tags: the top one is for timeout diagnoses, the rest carry operation
 * numbers. MPI guarantees at least 32767. */
static void set_tags(clt_comm *comm, MPI_Comm mc) {
  int *tag_ub = NULL, ub = 32767, flag = 0;
  if (MPI_Comm_get_attr(mc, MPI_TAG_UB, &tag_ub, &flag) == MPI_SUCCESS && flag && tag_ub) ub = *tag_ub;
  comm->diag_tag = ub;
  comm->tag_ops = (ub - 1) / CLT__TAG_PHASES;
}

/* This rank's node, named by its lowest rank, and whether every rank has a
 * core of its own (own_cores). Every rank is here (the duplicate
 * finished), so these blocking calls cannot wait on an absent rank. */
static int find_node(clt_comm *comm, MPI_Comm mc, int *lowest) {
  MPI_Comm local = MPI_COMM_NULL;
  int e;
  *lowest = comm->rank;
  if ((e = MPI_Comm_split_type(mc, MPI_COMM_TYPE_SHARED, comm->rank, MPI_INFO_NULL, &local)) != MPI_SUCCESS ||
      (e = MPI_Allreduce(MPI_IN_PLACE, lowest, 1, MPI_INT, MPI_MIN, local)) != MPI_SUCCESS)
    return mpi_error(e, "MPI_Comm_split_type on", comm->rank);
  if ((e = own_cores(comm, mc, local)) != MPI_SUCCESS)
    return mpi_error(e, "counting the cores of the node on", comm->rank);
  MPI_Comm_free(&local);
  return CLT_OK;
}

/* Every rank learns every rank's node (*node_of), and keeps a copy of it
 * (*real): the nodes that really share memory, before CLT_NODE_SIZE's
 * pretend ones replace them. */
static int gather_nodes(clt_comm *comm, MPI_Comm mc, int lowest, int **node_of, int **real) {
  int e;
  if (!(*node_of = clt__calloc((size_t)comm->size, sizeof **node_of))) return CLT_ENOMEM;
  if ((e = MPI_Allgather(&lowest, 1, MPI_INT, *node_of, 1, MPI_INT, mc)) != MPI_SUCCESS)
    return mpi_error(e, "MPI_Allgather of the nodes on", comm->rank);
  if (!(*real = clt__calloc((size_t)comm->size, sizeof **real))) return CLT_ENOMEM;
  memcpy(*real, *node_of, (size_t)comm->size * sizeof **real);
  return CLT_OK;
}

/* Pretend nodes: every rank must pretend the same (one flag and the
 * layout's hash each), or every rank fails the same way. *hashes (size
 * entries) is left to the caller. */
static int agree_on_layout(clt_comm *comm, MPI_Comm mc, int *node_of, uint64_t **hashes, int *pretend) {
  int e, env_rc = clt__layout_env(comm->size, node_of, pretend);
  uint64_t h = 1469598103934665603ull ^ (uint64_t)(env_rc < 0);
  for (int r = 0; r < comm->size; r++) h = (h ^ (uint64_t)node_of[r]) * 1099511628211ull;
  if (!(*hashes = clt__calloc((size_t)comm->size, sizeof **hashes))) return CLT_ENOMEM;
  if ((e = MPI_Allgather(&h, 1, MPI_UINT64_T, *hashes, 1, MPI_UINT64_T, mc)) != MPI_SUCCESS)
    return mpi_error(e, "MPI_Allgather of the node layouts on", comm->rank);
  if (env_rc < 0) return clt__error_prefix(env_rc, "rank %d", comm->rank);
  for (int r = 1; r < comm->size; r++)
    if ((*hashes)[r] != (*hashes)[0]) {
      const char *v = getenv("CLT_NODE_SIZE");
      return clt__error(CLT_EMISMATCH, "rank %d: the ranks disagree on the nodes: rank %d sees another layout than "
                                       "rank 0 (CLT_NODE_SIZE='%s' here, or a rank failed on its own): every rank "
                                       "must set the same CLT_NODE_SIZE, or none", comm->rank, r, v ? v : "");
    }
  return CLT_OK;
}

/* Whether the ranks of each node share memory: pretend nodes inside one
 * real node can use a shared window too. first (size entries, scratch)
 * gets the real node of node k's first rank (node ids are below size). */
static int nodes_share_memory(int size, const int *node_of, const int *real, uint64_t *first) {
  int capable = 1;
  for (int r = 0; r < size; r++) first[r] = UINT64_MAX;
  for (int r = 0; r < size; r++) {
    uint64_t *f = &first[node_of[r]];
    if (*f == UINT64_MAX) *f = (uint64_t)real[r];
    if (*f != (uint64_t)real[r]) capable = 0;
  }
  return capable;
}

int clt_comm_create(MPI_Comm user_comm, clt_comm **out) {
  int rc = CLT_OK;
  clt_comm *comm = NULL;
  struct clt__mpi *m = NULL;
  int *node_of = NULL, *real = NULL;
  uint64_t *hashes = NULL;

  CLT_ARG(out);
  *out = NULL;
  if ((rc = mpi_running("clt_comm_create")) < 0) return rc;
  if (user_comm == MPI_COMM_NULL) return clt__error(CLT_EINVAL, "clt_comm_create: the communicator is MPI_COMM_NULL");

  if (!(comm = clt__calloc(1, sizeof *comm)) || !(m = clt__calloc(1, sizeof *m))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  m->comm = m->node = MPI_COMM_NULL;
  m->win = MPI_WIN_NULL;
  MPI_Comm_rank(user_comm, &comm->rank);
  MPI_Comm_size(user_comm, &comm->size);
  CLT_TRY(clt__comm_init_env(comm));
  CLT_TRY(duplicate(user_comm, comm, &m));
  set_tags(comm, m->comm);
  int lowest, pretend = 0;
  CLT_TRY(find_node(comm, m->comm, &lowest));
  CLT_TRY(gather_nodes(comm, m->comm, lowest, &node_of, &real));
  CLT_TRY(agree_on_layout(comm, m->comm, node_of, &hashes, &pretend));
  CLT_TRY(clt__layout_make(comm, node_of));
  comm->shm_capable = nodes_share_memory(comm->size, node_of, real, hashes);
  free(node_of);
  free(hashes);
  free(real);
  node_of = NULL, hashes = NULL, real = NULL;
  clt__log(CLT_LOG_DEBUG, "rank %d of %d: node %d of %d%s, local rank %d of %d, %s, timeout %.1f s, chunk %zu "
           "bytes, cost model: %s", comm->rank, comm->size, comm->layout.node, comm->layout.nnodes,
           pretend ? " (CLT_NODE_SIZE)" : "", comm->local_rank, comm->local_size,
           comm->own_cores ? "a core per rank" : "more ranks than cores", comm->timeout_s, comm->chunk_bytes,
           comm->model.source);
  *out = comm;
  return CLT_OK;

fail:
  free(node_of);
  free(hashes);
  free(real);
  if (comm && !comm->mpi && m) {
    if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    free(m);
  }
  clt_comm_destroy(comm);
  return rc;
}

/* Whether c is a communicator MPI knows. MPI_Comm_f2c of a handle that names
 * nothing gives "an invalid C handle" (MPI-3.1 17.2.4), which Open MPI makes
 * a NULL pointer (MPICH, whose handles are integers, gives the integer back).
 * Anything else is asked of MPI itself: MPI_Comm_size on an invalid
 * communicator raises the error on MPI_COMM_WORLD (MPI-3) or MPI_COMM_SELF
 * (MPI-4), so both return errors for the moment of the question. */
static int comm_is_valid(MPI_Comm c) {
  MPI_Comm zero;
  memset(&zero, 0, sizeof zero);
  if (memcmp(&c, &zero, sizeof c) == 0) return 0;
  MPI_Errhandler world_eh, self_eh;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world_eh);
  MPI_Comm_get_errhandler(MPI_COMM_SELF, &self_eh);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  int size = 0, e = MPI_Comm_size(c, &size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, world_eh);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, self_eh);
  MPI_Errhandler_free(&world_eh);
  MPI_Errhandler_free(&self_eh);
  return e == MPI_SUCCESS && size > 0;
}

int clt_comm_create_f(MPI_Fint fcomm, clt_comm **out) {
  CLT_ARG(out);
  *out = NULL;
  int rc = mpi_running("clt_comm_create_f"); /* f2c before initialisation is undefined: say so first */
  if (rc < 0) return rc;
  MPI_Comm c = MPI_Comm_f2c(fcomm);
  if (c == MPI_COMM_NULL)
    return clt__error(CLT_EINVAL, "clt_comm_create_f: the communicator (Fortran handle %d) is MPI_COMM_NULL",
                      (int)fcomm);
  if (!comm_is_valid(c))
    return clt__error(CLT_EINVAL, "clt_comm_create_f: the communicator (Fortran handle %d) is not an MPI "
                                  "communicator: pass MPI_COMM_WORLD, a communicator the program made, or "
                                  "comm%%MPI_VAL of an mpi_f08 type(MPI_Comm)", (int)fcomm);
  return clt_comm_create(c, out);
}

/* comm/p2p.h. MPI_Comm_split blocks until every rank of the communicator
 * calls it: the trainer calls it right after a collective with a deadline
 * (clt__trainer_all_ok), so every rank is there. The new communicator is
 * duplicated again by clt_comm_create, which owns its copy. */
int clt__comm_split(clt_comm *comm, int color, int key, clt_comm **out) {
  MPI_Comm part = MPI_COMM_NULL;
  *out = NULL;
  if (!comm->mpi) {
    if (comm->size != 1) return clt__error(CLT_EINTERNAL, "a split of a %d-rank communicator without MPI", comm->size);
    return clt_comm_create_local(out);
  }
  int e = MPI_Comm_split(mpi_comm(comm), color, key, &part);
  if (e != MPI_SUCCESS) return mpi_error(e, "MPI_Comm_split on", comm->rank);
  int rc = clt_comm_create(part, out);
  MPI_Comm_free(&part);
  if (rc == CLT_OK) clt_comm_set_timeout(*out, comm->timeout_s);
  return rc;
}
