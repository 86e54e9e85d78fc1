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

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cltrain/mpi.h>

/* Shared memory of the node: a segment per local rank, every one mapped by
 * every local rank (see "the node's shared memory" below). */
struct shm_area {
  unsigned char **segs;    /* local_size: every local rank's segment, as mapped here */
  size_t len;              /* bytes mapped of each */
  int n;
};

struct clt__mpi {
  MPI_Comm comm;
  MPI_Comm node;           /* this node's ranks, in local-rank order */
  struct shm_area win;     /* the node's window (clt__tp_shm_window) */
  /* Regions of their own (clt__tp_shm_region), kept until the
   * communicator is destroyed. */
  struct shm_region *regions;
};

struct shm_region {
  struct shm_area area;
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

/* ---- the node's shared memory ----------------------------------------------
 * Each rank's segment is a file of its own in /dev/shm (else TMPDIR, else
 * /tmp), its pages allocated by its owner (posix_fallocate: first touch,
 * and a tmpfs too small for it is an error here, not a SIGBUS later),
 * mapped by every rank of the node, and unlinked as soon as every rank has
 * mapped it. The memory is used by loads and stores only (shm.c orders
 * them with atomic flags), never by RMA calls, so an MPI window
 * (MPI_Win_allocate_shared, which Open MPI backs with the same files) gave
 * nothing but its free: MPI_Win_free is collective and blocks, and after a
 * failed collective no rank can know whether a peer will ever come to it
 * (gone, or given up and in MPI_Finalize, which then waits for this rank:
 * both hung, issue 38; an abandoned barrier to agree first is matched by a
 * peer's later one). Unmapping is this rank's alone: a peer keeps its own
 * mappings, and the pages go when the last rank unmaps them or exits, so a
 * communicator can be destroyed after any failure, and a killed rank
 * leaves no file behind once the area is made.
 *
 * Making an area is collective over the node and blocking (the caller's
 * contract: every rank is there): the paths are gathered, and an
 * all-reduce agrees that every rank mapped every segment, or every rank
 * fails. */

static void area_unmap(struct shm_area *a) {
  for (int l = 0; a->segs && l < a->n; l++)
    if (a->segs[l]) munmap(a->segs[l], a->len);
  free(a->segs);
  a->segs = NULL;
  a->len = 0;
  a->n = 0;
}

enum { SEG_PATH = 256 };
struct seg_name {
  int32_t status;          /* CLT_OK, or why this rank has no segment */
  char path[SEG_PATH];
};

/* This rank's segment of `len` bytes, made and allocated: the file's
 * descriptor (path in me->path), or a negative status. */
static int make_segment(clt_comm *comm, size_t len, struct seg_name *me) {
  static unsigned long made; /* segments this process made, for unique names */
  const char *tmpdir = getenv("TMPDIR"), *dirs[] = {"/dev/shm", tmpdir, "/tmp"};
  char tried[3 * (SEG_PATH + 64)] = "";
  size_t lt = 0;
  for (size_t d = 0; d < sizeof dirs / sizeof *dirs; d++) {
    if (!dirs[d] || !*dirs[d] || (d == 2 && tmpdir && strcmp(tmpdir, "/tmp") == 0)) continue;
    snprintf(me->path, sizeof me->path, "%s/cltrain-shm-%ld-%lu", dirs[d], (long)getpid(), made++);
    int fd = open(me->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600), e = fd < 0 ? errno : 0;
    if (fd >= 0) {
#if defined(__linux__)
      e = posix_fallocate(fd, 0, (off_t)len);
#else
      e = ftruncate(fd, (off_t)len) == 0 ? 0 : errno;
#endif
      if (e == 0) return fd;
      close(fd);
      unlink(me->path);
    }
    if (lt < sizeof tried)
      lt += (size_t)snprintf(tried + lt, sizeof tried - lt, "%s%s: %s", lt ? "; " : "", dirs[d], strerror(e));
  }
  me->path[0] = '\0';
  return clt__error(CLT_ENOMEM, "rank %d: no room for its shared-memory segment of %zu bytes (%s): free space in "
                    "/dev/shm or give TMPDIR a file system with room", comm->rank, len, tried);
}

/* Map the segment at path (fd: this rank's own, open; else -1). */
static unsigned char *map_segment(const char *path, int fd, size_t len, int *err) {
  int own = fd >= 0;
  if (!own && (fd = open(path, O_RDWR | O_CLOEXEC)) < 0) {
    *err = errno;
    return NULL;
  }
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  *err = p == MAP_FAILED ? errno : 0;
  if (!own) close(fd);
  return p == MAP_FAILED ? NULL : p;
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

/* A new area over the node's ranks with a zeroed segment of `bytes` for
 * each; collective over the node (see above). */
static int area_make(clt_comm *comm, struct clt__mpi *m, size_t bytes, struct shm_area *a) {
  int e, rc = CLT_OK, fd = -1, err = 0, bad = -1, L = comm->local_size;
  struct seg_name me, *all = NULL;
  memset(&me, 0, sizeof me);
  memset(a, 0, sizeof *a);
  if (!(a->segs = clt__calloc((size_t)L, sizeof *a->segs)) || !(all = clt__calloc((size_t)L, sizeof *all))) {
    free(a->segs), a->segs = NULL;
    return CLT_ENOMEM;
  }
  a->n = L;
  a->len = bytes;
  if ((fd = make_segment(comm, bytes, &me)) < 0) me.status = fd;
  char mine[SEG_PATH];
  memcpy(mine, me.path, sizeof mine);
  if ((e = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, m->node)) != MPI_SUCCESS) {
    rc = mpi_error(e, "MPI_Allgather of the shared-memory segments, with", comm->rank);
    goto done;
  }
  int mapped = me.status == CLT_OK, every = 0;
  for (int l = 0; mapped && l < L; l++) {
    all[l].path[SEG_PATH - 1] = '\0';
    if (all[l].status < 0 || !(a->segs[l] = map_segment(all[l].path, l == comm->local_rank ? fd : -1, bytes, &err)))
      mapped = 0, bad = l;
  }
  /* Every rank has opened every segment, or failed: the names can go
   * (done). */
  if ((e = MPI_Allreduce(&mapped, &every, 1, MPI_INT, MPI_MIN, m->node)) != MPI_SUCCESS)
    rc = mpi_error(e, "MPI_Allreduce over the node's shared-memory segments, with", comm->rank);
  else if (me.status < 0)
    rc = me.status; /* make_segment said why */
  else if (bad >= 0 && all[bad].status < 0)
    rc = clt__error(all[bad].status, "rank %d: rank %d of the node made no shared-memory segment (see its error)",
                    comm->rank, comm->layout.local[bad]);
  else if (bad >= 0)
    rc = clt__error(CLT_EIO, "rank %d: mapping rank %d's shared-memory segment %s failed: %s", comm->rank,
                    comm->layout.local[bad], all[bad].path, strerror(err));
  else if (!every)
    rc = clt__error(CLT_EIO, "rank %d: another rank of the node could not map every shared-memory segment (see its "
                    "error)", comm->rank);
done:
  if (mine[0]) unlink(mine);
  if (fd >= 0) close(fd);
  free(all);
  if (rc < 0) area_unmap(a);
  return rc;
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
  /* A smaller one is replaced (the peers unmap it on their own). */
  area_unmap(&m->win);
  comm->shm_segs = NULL;
  comm->shm_bytes = 0;
  comm->shm_round = 0;
  if ((rc = area_make(comm, m, bytes, &m->win)) < 0) return rc;
  comm->shm_segs = m->win.segs;
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
  if ((rc = area_make(comm, m, bytes, &r->area)) < 0) {
    free(r);
    return rc;
  }
  r->next = m->regions;
  m->regions = r;
  *segs = r->area.segs;
  return CLT_OK;
}

/* Local calls only, whatever state the peers are in (they may have given
 * up on a failed collective, be gone, or be in MPI_Finalize): the shared
 * memory is unmapped (see above), and MPI_Comm_free marks the
 * communicators for freeing once their pending requests (abandoned sends)
 * complete, without waiting for any rank. */
void clt__tp_destroy(clt_comm *comm) {
  struct clt__mpi *m = comm->mpi;
  int finalized = 0;
  MPI_Finalized(&finalized);
  area_unmap(&m->win);
  for (struct shm_region *r = m->regions, *next; r; r = next) {
    next = r->next;
    area_unmap(&r->area);
    free(r);
  }
  comm->shm_segs = NULL;
  comm->shm_bytes = 0;
  if (!finalized && m->node != MPI_COMM_NULL) MPI_Comm_free(&m->node);
  if (!finalized && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
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
