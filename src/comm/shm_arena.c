/*
 * shm_arena.c: an all-reduce of buffers that already lie in shared memory
 * (issue 13). The arena is a region of the node's shared memory
 * (clt__tp_shm_region: a file per rank mapped by every rank, never
 * moved) that a rank lends to a device whose memory is the host's: the
 * trainer makes it its replica's gradient arena on PoCL
 * (clt__shared_buffer_wrap), so the backward writes the gradients where
 * every peer can read them. An all-reduce of bytes [at, at + count x esize)
 * of every rank's arena then runs, with the flags at the head of each
 * segment:
 *
 *   1. in:     each rank raises `in` = g (its bytes are there: the caller
 *              waited for the backward that wrote them) and waits for every
 *              peer's;
 *   2. reduce: each rank sums its piece straight from every rank's arena,
 *              in local-rank order, into its own arena; raises `out`;
 *   3. out:    each rank copies every other piece from its owner's arena
 *              once the owner's `out` is g; raises `done`, and returns once
 *              every peer's `done` is g: until then a peer may still read
 *              this rank's arena, which the caller writes again next (the
 *              next backward).
 *
 * Against shm.c's all-reduce of a private buffer, no copy into the window
 * and no second store of each sum: at 2 ranks of the 2-core VM, 919 KiB in
 * 62-66 us in a C model of each, 102-105 for shm.c's three steps. A byte
 * still crosses between cores as often (into the reduce, out of it): that
 * is what the 62 us are.
 *
 * Bits: shm.c's. Every element is summed by one rank in local-rank order
 * (ops->sum_to, one rounding per add; an average divided once), and the
 * other ranks copy those bits; the pieces are the plan's segments (one
 * node: local ranks are ranks).
 *
 * Flags are run numbers that only grow over the arena's life, so they are
 * never reset. Waiting and errors are shm.c's: polling with the deadline of
 * every wait (CLT_TIMEOUT names the rank whose flag is behind), probing MPI
 * meanwhile; a failure breaks the communicator (peers may still read this
 * rank's arena).
 */
#include "comm_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

enum { FLAG_IN = 0, FLAG_OUT = 1, FLAG_DONE = 2 };
#define LINE 64
/* The flags' lines, then the bytes from the next page on: a device
 * buffer over them (CL_MEM_USE_HOST_PTR) is page-aligned. A segment is
 * mapped at page granularity, so a peer finds the same offset in its
 * mapping of it. */
#define PAGE 4096

struct clt__arena {
  unsigned char **data;   /* local_size: each local rank's bytes */
  unsigned char *const *segs;
  size_t bytes;           /* each rank's */
  int held;
  uint64_t runs;
};

static unsigned char *data_of(unsigned char *seg) {
  uintptr_t p = (uintptr_t)seg + LINE * 3;
  return seg + ((p + PAGE - 1) / PAGE * PAGE - (uintptr_t)seg);
}

/* The node's segments are files in /dev/shm where it has room for them
 * (transport_mpi.c), else in TMPDIR or /tmp, a disk's file system whose
 * pages the kernel writes back: a tmpfs too small for the arena (a
 * container's 64 MiB, say) would move it there, so the arena is offered
 * only where the node's segments fit in /dev/shm with room to spare. */
static int fits_in_dev_shm(const clt_comm *comm, size_t bytes) {
  struct statvfs v;
  if (statvfs("/dev/shm", &v) != 0) return 1; /* no such tmpfs: the segments are files in TMPDIR or /tmp */
  double free_bytes = (double)v.f_bavail * (double)v.f_frsize;
  return free_bytes >= 1.25 * (double)(bytes + 2 * PAGE) * comm->local_size + 16.0 * 1048576.0;
}

/* What every rank of the communicator sees alike. */
static int can_hold(const clt_comm *comm) {
  return comm && comm->size > 1 && comm->shm_capable && comm->local_size == comm->size &&
         !(comm->arena && comm->arena->held);
}

int clt__comm_arena_available(const clt_comm *comm, size_t bytes) {
  return can_hold(comm) && ((comm->arena && comm->arena->bytes >= bytes) || fits_in_dev_shm(comm, bytes));
}

unsigned char *clt__arena_mine(const clt_comm *comm) {
  return comm && comm->arena ? comm->arena->data[comm->local_rank] : NULL;
}

int clt__comm_arena_acquire(clt_comm *comm, size_t bytes, unsigned char **mine) {
  *mine = NULL;
  /* Not /dev/shm's room again: it may have changed since the ranks
   * agreed, and a rank that left here would leave the others in the
   * collective below. */
  if (!can_hold(comm))
    return clt__error(CLT_EINTERNAL, "rank %d: an arena where the communicator has none to give", comm->rank);
  struct clt__arena *a = comm->arena;
  if (!a || a->bytes < bytes) {
    unsigned char *const *segs;
    unsigned char **data = clt__calloc((size_t)comm->local_size, sizeof *data);
    if (!data) return CLT_ENOMEM;
    int rc = clt__tp_shm_region(comm, 3 * LINE + PAGE + bytes, &segs);
    if (rc < 0) {
      free(data);
      return rc;
    }
    if (!a && !(a = comm->arena = clt__calloc(1, sizeof *a))) {
      free(data);
      return CLT_ENOMEM;
    }
    free(a->data); /* the region stays with the communicator */
    for (int l = 0; l < comm->local_size; l++) data[l] = data_of(segs[l]);
    a->data = data, a->segs = segs, a->bytes = bytes, a->runs = 0;
  }
  a->held = 1;
  *mine = a->data[comm->local_rank];
  return CLT_OK;
}

void clt__comm_arena_release(clt_comm *comm) {
  if (comm && comm->arena) comm->arena->held = 0;
}

void clt__comm_arena_free(clt_comm *comm) {
  if (!comm->arena) return;
  free(comm->arena->data);
  free(comm->arena);
  comm->arena = NULL;
}

static uint64_t *flag_of(const struct clt__arena *a, int l, int f) {
  return (uint64_t *)(void *)(a->segs[l] + (size_t)f * LINE);
}

/* The first local rank but us whose flag f is below g, or -1 when none. */
static int behind(const clt_comm *c, const struct clt__arena *a, int f, uint64_t g) {
  for (int l = 0; l < c->local_size; l++)
    if (l != c->local_rank && __atomic_load_n(flag_of(a, l, f), __ATOMIC_ACQUIRE) < g) return l;
  return -1;
}

/* Wait until every peer's flag f is at least g: shm.c's waiting. */
static int wait_all(clt__op *op, const struct clt__arena *a, int f, uint64_t g, int step) {
  int peer;
  while ((peer = behind(op->comm, a, f, g)) >= 0) {
    clt__tp_progress(op->comm);
    int rc = clt__op_idle(op, op->comm->layout.local[peer], step);
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

int clt__arena_holds(const clt_comm *comm, const void *p, size_t bytes) {
  const struct clt__arena *a = comm ? comm->arena : NULL;
  if (!a || !a->held) return 0;
  const unsigned char *mine = a->data[comm->local_rank];
  return (const unsigned char *)p >= mine && (size_t)((const unsigned char *)p - mine) <= a->bytes &&
         bytes <= a->bytes - (size_t)((const unsigned char *)p - mine);
}

int clt__arena_allreduce(clt__op *op, size_t at, const size_t *seg_off, const clt__dtype_ops *ops, double divisor) {
  int rc = CLT_OK, step = 0;
  clt_comm *c = op->comm;
  struct clt__arena *a = c->arena;
  const int L = c->local_size, me = c->local_rank;
  const size_t es = ops->esize;
  const uint64_t g = a->runs + 1;
  const void *srcs[64];
  if (L > 64) return clt__error(CLT_EUNSUPPORTED, "an arena all-reduce over %d ranks of a node (at most 64)", L);

  __atomic_store_n(flag_of(a, me, FLAG_IN), g, __ATOMIC_RELEASE);
  CLT_TRY(wait_all(op, a, FLAG_IN, g, step));
  clt__op_progress(op);

  size_t lo = seg_off[me], n = seg_off[me + 1] - lo;
  unsigned char *mine = a->data[me] + at;
  for (int l = 0; l < L; l++) srcs[l] = a->data[l] + at + lo * es;
  if (n) ops->sum_to(mine + lo * es, NULL, srcs, L, n, divisor);
  __atomic_store_n(flag_of(a, me, FLAG_OUT), g, __ATOMIC_RELEASE);

  step = 1;
  unsigned char got[64] = {0};
  for (int left = L - 1; left > 0;) { /* every other piece, as its owner finishes it */
    int waiting = -1, copied = 0;
    for (int l = 0; l < L; l++) {
      if (l == me || got[l]) continue;
      if (__atomic_load_n(flag_of(a, l, FLAG_OUT), __ATOMIC_ACQUIRE) < g) {
        if (waiting < 0) waiting = l;
        continue;
      }
      size_t plo = seg_off[l], pn = seg_off[l + 1] - plo;
      if (pn) memcpy(mine + plo * es, a->data[l] + at + plo * es, pn * es);
      got[l] = 1, left--, copied = 1;
    }
    if (copied) {
      clt__op_progress(op);
    } else if (left > 0) {
      clt__tp_progress(c);
      CLT_TRY(clt__op_idle(op, c->layout.local[waiting], step));
    }
  }
  c->sent[0] += n * es * (size_t)(L - 1);
  __atomic_store_n(flag_of(a, me, FLAG_DONE), g, __ATOMIC_RELEASE);
  clt__op_progress(op);
  CLT_TRY(wait_all(op, a, FLAG_DONE, g, step));
  a->runs = g;
  return CLT_OK;
fail:
  /* clt__op_idle's timeout named the peer and broke the communicator. */
  return rc;
}
