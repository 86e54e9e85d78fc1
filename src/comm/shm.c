/*
 * shm.c: the all-reduce inside a node through an MPI-3 shared-memory window
 * (issue 13). Every rank of the node has a segment of one window
 * (transport_mpi.c: MPI_Win_allocate_shared over the node's ranks, real or
 * pretend ones on one machine) and reads its peers' segments with plain
 * loads:
 *
 *   1. in:     each rank copies its input, but for its own piece, into its
 *              segment, and raises its `in` flag;
 *   2. reduce: each rank sums its piece straight from every peer's segment
 *              (its own input from its buffer), in local-rank order, and
 *              writes the sum into its buffer and its segment; raises `out`;
 *   3. out:    each rank copies every other piece's sum from its owner's
 *              segment into its buffer; raises `done`.
 *
 * A byte crosses memory once into the window and once out of it: the ring
 * over MPI's shared-memory transport copies every message into a shared
 * queue and out again on the receiver, and does so for 2 (N-1)/N of the
 * buffer on each rank, which is what held it to parity with MPI_Allreduce.
 *
 * Rounds. The window is bounded: a buffer goes through it in rounds of at
 * most N pieces of 1 MiB, or of the chunk when one is given (its elements
 * split as the ring splits a buffer, the first ones a piece one longer). Each segment has two slots
 * used by alternate rounds, so a rank copies round R + 1 in while its peers
 * still copy round R out. A slot is written again (round R + 2) only when
 * every peer's `done` says it has finished round R there.
 *
 * Flags are round numbers that only grow over the communicator's life
 * (comm->shm_round), so a flag never has to be reset and a late peer is
 * told apart from an early one. Data is written before the flag with a
 * release store and read after it with an acquire load (__atomic), which
 * orders plain loads and stores of shared memory as MPI_Win_sync would; the
 * window is never used through RMA calls.
 *
 * Bits: every element is summed in local-rank order, x_0 + x_1 + ... +
 * x_(L-1), in float (fp16: added in float and rounded to half once, as the
 * replicas of one process are), by one rank, and the others copy those
 * bits: every rank ends with the same bits, equal to a serial sum in rank
 * order, whichever rank reduced which piece. An average divides the
 * rounded sum once.
 *
 * Waiting. A rank waiting for a flag polls it with the deadline and idle
 * policy of every other wait (wait.c: spin briefly, then yield, then
 * sleep; after CLT_TIMEOUT the error names the rank whose flag is behind)
 * and probes MPI meanwhile, so messages of earlier operations still in
 * flight progress and oversubscribed peers get the core.
 *
 * Small buffers (up to CLT__SHM_WHOLE_BYTES) take one round with one handshake
 * instead of two: every rank copies all of its input in, waits for every
 * peer's, and sums the whole buffer itself, in the same order, so with
 * the same bits. Summing N times what it would is cheap there; waiting
 * twice for every rank is not when the ranks outnumber the cores.
 *
 * Modes. The two-level all-reduce (twolevel.c) uses the first and second
 * halves on its own: a reduce-scatter (in, reduce into the buffer, `done`)
 * and an allgather (in: its own piece; out) over the fixed parts its
 * network rings carry, cut into rounds of a chunk per part.
 */
#include "comm_internal.h"

#include <stdlib.h>
#include <string.h>

/* A segment: three flags, each on a cache line of its own (a peer polling
 * one does not disturb the owner's stores to another), then two slots. */
enum { FLAG_IN = 0, FLAG_OUT = 1, FLAG_DONE = 2 };
#define LINE 64
#define HEAD_BYTES 256
#define NSLOTS 2
#define SLOT_ALIGN 4096
/* Local rank l's slots start l / L of a page further into its segment than
 * rank 0's: a rank summing its piece loads a peer's slot and stores to its
 * own at the same offset, and at the same address modulo 4096 the core
 * takes each load for one that must wait for the store before it (4K
 * aliasing: 16 KiB on 2 ranks took 5.1 us instead of 3.7). */
#define SKEW_BYTES 4096
/* A slot holds at most this much: N pieces of the chunk, fewer elements
 * per piece on nodes of many ranks. */
#define MAX_SLOT_BYTES ((size_t)8 << 20)
/* The default piece. With a core for every rank, 256 KiB: a round's
 * copies stay in the caches (2 ranks of 2 cores here: 1 MiB pieces took
 * 1.00-1.16x the time of 256 KiB ones from 1 MiB to 256 MiB). With more
 * ranks than cores, 1 MiB: on 3 ranks of 2 cores (bench/allreduce.sh, 4 to
 * 32 MiB, under load), pieces of 1 MiB ran 1.1-2.2x MPI_Allreduce where
 * 256 KiB ran 0.6-1.9x: fewer rounds, fewer times every rank must be
 * scheduled. */
#define PIECE_BYTES ((size_t)256 << 10)
#define PIECE_BYTES_SHARED_CORES ((size_t)1 << 20)
/* The reduction works in blocks whose partial sums stay in L1. */
#define BLOCK_BYTES 8192

enum shm_mode { SHM_ALLREDUCE, SHM_REDUCE_SCATTER, SHM_ALLGATHER };

struct clt__shm {
  int L, me;               /* the node's ranks; this one */
  size_t count, esize;
  size_t piece;            /* elements per rank per round, at most */
  size_t pstride;          /* elements between pieces in a slot */
  size_t nrounds;
  int whole;               /* one round, every rank sums all of it (small all-reduces) */
  const size_t *part_lo, *part_hi; /* fixed parts (two-level), or NULL: rounds cut the buffer in order */
  const void **srcs;       /* L: one block's addends */
};

/* Round r's piece of local rank l: elements [*lo, *lo + *n). */
static void piece_of(const struct clt__shm *s, size_t r, int l, size_t *lo, size_t *n) {
  if (s->part_lo) {
    size_t at = s->part_lo[l] + r * s->piece, hi = s->part_hi[l];
    *lo = at < hi ? at : hi;
    *n = at < hi ? (hi - at < s->piece ? hi - at : s->piece) : 0;
    return;
  }
  size_t start = r * (size_t)s->L * s->piece, len = s->count - start;
  if (len > (size_t)s->L * s->piece) len = (size_t)s->L * s->piece;
  size_t base = len / (size_t)s->L, rem = len % (size_t)s->L, ul = (size_t)l;
  *lo = start + ul * base + (ul < rem ? ul : rem);
  *n = base + (ul < rem);
}

size_t clt__shm_nrounds(const struct clt__shm *s) { return s ? s->nrounds : 0; }
int clt__shm_steps(const struct clt__shm *s) { return s ? (int)(2 * s->nrounds) : 0; }

void clt__shm_round(const struct clt__shm *s, size_t i, size_t *off, size_t *n) {
  size_t lo, k, last_lo, last_n;
  piece_of(s, i, 0, &lo, &k);
  piece_of(s, i, s->L - 1, &last_lo, &last_n);
  *off = lo;
  *n = last_lo + last_n - lo;
}

void clt__shm_free(struct clt__shm *s) {
  if (!s) return;
  free(s->srcs);
  free(s);
}

static struct clt__shm *shm_make(const clt_comm *comm, size_t count, size_t esize, size_t chunk_elems,
                                 const size_t *part_lo, const size_t *part_hi) {
  struct clt__shm *s = clt__calloc(1, sizeof *s);
  if (!s || !(s->srcs = clt__calloc((size_t)comm->local_size, sizeof *s->srcs))) {
    clt__shm_free(s);
    return NULL;
  }
  s->L = comm->local_size;
  s->me = comm->local_rank;
  s->count = count;
  s->esize = esize;
  s->part_lo = part_lo;
  s->part_hi = part_hi;
  size_t cap = MAX_SLOT_BYTES / ((size_t)s->L * esize);
  s->piece = chunk_elems < cap ? chunk_elems : cap;
  if (s->piece == 0) s->piece = 1;
  size_t longest = 0;
  if (part_lo) {
    for (int l = 0; l < s->L; l++)
      if (part_hi[l] - part_lo[l] > longest) longest = part_hi[l] - part_lo[l];
    s->nrounds = (longest + s->piece - 1) / s->piece;
  } else {
    longest = (count + (size_t)s->L - 1) / (size_t)s->L;
    s->nrounds = (count + (size_t)s->L * s->piece - 1) / ((size_t)s->L * s->piece);
  }
  s->pstride = longest < s->piece ? longest : s->piece;
  if (!part_lo && count && count * esize <= CLT__SHM_WHOLE_BYTES) s->whole = 1; /* one round already */
  return s;
}

/* The window this needs: every node's ranks make the same plans, so they
 * ask for the same size. */
static int shm_window(clt_comm *comm, const struct clt__shm *s) {
  if (s->nrounds == 0) return CLT_OK;
  size_t bytes = s->whole ? s->count * s->esize : (size_t)s->L * s->pstride * s->esize;
  size_t slot = (bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
  return clt__tp_shm_window(comm, HEAD_BYTES + SKEW_BYTES + NSLOTS * slot);
}

int clt__shm_contiguous(const struct clt__shm *s) { return s && !s->part_lo; }

size_t clt__shm_piece_bytes(const clt_comm *comm, size_t given) {
  return given ? given : comm->chunk_set ? comm->chunk_bytes : comm->own_cores ? PIECE_BYTES : PIECE_BYTES_SHARED_CORES;
}

static size_t plan_piece(const clt_allreduce_plan *plan) {
  size_t b = clt__shm_piece_bytes(plan->comm, plan->chunk_given ? plan->chunk_bytes : 0);
  return b / plan->ops->esize ? b / plan->ops->esize : 1;
}

/* An all-reduce's rounds cut the buffer in order; a reduce-scatter's go
 * through the ranks' parts (one node: local ranks are ranks). */
int clt__shm_create(clt_allreduce_plan *plan, struct clt__shm **out) {
  *out = NULL;
  int parts = !plan->kind->gathers;
  struct clt__shm *s = shm_make(plan->comm, plan->count, plan->ops->esize, plan_piece(plan),
                                parts ? plan->part_lo : NULL, parts ? plan->part_hi : NULL);
  if (!s) return CLT_ENOMEM;
  int rc = shm_window(plan->comm, s);
  if (rc < 0) {
    clt__shm_free(s);
    return rc;
  }
  *out = s;
  return CLT_OK;
}

/* ---- the window ---------------------------------------------------------------- */

static uint64_t *flag_of(const clt_comm *c, int l, int f) {
  return (uint64_t *)(void *)(c->shm_segs[l] + (size_t)f * LINE);
}

static void raise_flag(const clt_comm *c, int f, uint64_t g) {
  __atomic_store_n(flag_of(c, c->local_rank, f), g, __ATOMIC_RELEASE);
}

/* The first local rank but us whose flag f is below g, or -1 when none. */
static int behind(const clt_comm *c, int f, uint64_t g) {
  for (int l = 0; l < c->local_size; l++)
    if (l != c->local_rank && __atomic_load_n(flag_of(c, l, f), __ATOMIC_ACQUIRE) < g) return l;
  return -1;
}

/* Local rank l's slot for global round g. */
static unsigned char *slot_of(const clt_comm *c, int l, uint64_t g) {
  size_t stride = (c->shm_bytes - HEAD_BYTES - SKEW_BYTES) / NSLOTS;
  size_t skew = (size_t)l * SKEW_BYTES / (size_t)c->local_size / LINE * LINE;
  return c->shm_segs[l] + HEAD_BYTES + skew + (size_t)(g % NSLOTS) * stride;
}

/* ---- the three steps of a round ---------------------------------------------------- */

/* Our input pieces for the others (allgather: our own, final piece).
 * What goes into the window counts as sent inside the node. */
static void copy_in(const struct clt__shm *s, clt_comm *c, enum shm_mode mode, const unsigned char *base, size_t r,
                    uint64_t g) {
  unsigned char *mine = slot_of(c, s->me, g);
  for (int l = 0; l < s->L; l++) {
    if ((mode == SHM_ALLGATHER) != (l == s->me)) continue;
    size_t lo, n;
    piece_of(s, r, l, &lo, &n);
    if (n) memcpy(mine + (size_t)l * s->pstride * s->esize, base + lo * s->esize, n * s->esize);
    c->sent[0] += n * s->esize;
  }
}

/* Elements [lo, lo + n) summed from every rank's input, in local-rank
 * order: ours from our buffer, the others' at byte pos of their slots;
 * into our buffer and, when to_slot, there too (for the others to copy).
 * A piece is summed in one pass where the type has one (ops->sum_to: 1.1-
 * 1.2x faster from 32 KiB to 256 KiB on 2 ranks here, 1.0-1.07x from 1 to
 * 16 MiB on 3), a whole small buffer through an L1 block (copy, add, copy:
 * 0.1-0.4 us faster up to 8 KiB, where glibc's memcpy has more of the
 * peers' lines in flight than the one-pass loop). */
static void sum_range(struct clt__shm *s, const clt_comm *c, unsigned char *base, size_t lo, size_t n, size_t pos,
                      uint64_t g, unsigned char *to_slot, const clt__dtype_ops *ops, double divisor) {
  size_t es = s->esize;
  const int one_pass = ops->sum_to && !s->whole;
  unsigned char tmp[BLOCK_BYTES] __attribute__((aligned(64)));
  unsigned char *mine = base + lo * es;
  for (size_t b = 0, blk = BLOCK_BYTES / es; b < n; b += blk) {
    size_t nb = n - b < blk ? n - b : blk;
    for (int l = 0; l < s->L; l++)
      s->srcs[l] = (l == s->me ? mine : slot_of(c, l, g) + pos) + b * es;
    if (one_pass) {
      ops->sum_to(mine + b * es, to_slot ? to_slot + b * es : NULL, s->srcs, s->L, nb, divisor);
      continue;
    }
    memcpy(tmp, s->srcs[0], nb * es);
    if (s->L > 1) ops->sum(tmp, s->srcs + 1, s->L - 1, nb);
    if (divisor > 1) ops->divide(tmp, nb, divisor);
    memcpy(mine + b * es, tmp, nb * es);
    if (to_slot) memcpy(to_slot + b * es, tmp, nb * es);
  }
}

/* Our piece of round r, for the others in our slot too (all-reduce). */
static void reduce(struct clt__shm *s, clt_comm *c, enum shm_mode mode, unsigned char *base, size_t r, uint64_t g,
                   const clt__dtype_ops *ops, double divisor) {
  size_t lo, n, pos = (size_t)s->me * s->pstride * s->esize;
  piece_of(s, r, s->me, &lo, &n);
  unsigned char *to_slot = mode == SHM_ALLREDUCE ? slot_of(c, s->me, g) + pos : NULL;
  sum_range(s, c, base, lo, n, pos, g, to_slot, ops, divisor);
  if (to_slot) c->sent[0] += n * s->esize;
}

/* Every other rank's piece from its slot. */
static void copy_out(const struct clt__shm *s, const clt_comm *c, unsigned char *base, size_t r, uint64_t g) {
  for (int l = 0; l < s->L; l++) {
    if (l == s->me) continue;
    size_t lo, n;
    piece_of(s, r, l, &lo, &n);
    if (n) memcpy(base + lo * s->esize, slot_of(c, l, g) + (size_t)l * s->pstride * s->esize, n * s->esize);
  }
}

/* ---- a run ------------------------------------------------------------------------ */

typedef struct shm_hooks {
  int (*ready)(void *, const clt__ring_chunk *, int *);
  int (*final)(void *, const clt__ring_chunk *);
  void *user;
} shm_hooks;

static clt__ring_chunk round_chunk(const struct clt__shm *s, size_t r) {
  clt__ring_chunk ch = {.step = 0, .seg = 0, .id = r, .dep_send = -1};
  clt__shm_round(s, r, &ch.off, &ch.n);
  return ch;
}

/* No progress: probe MPI, then wait.c's policy. The probe matters when the
 * ranks outnumber the cores: Open MPI then yields the core inside its
 * progress (as every MPI_Test of the other algorithms' waits does), and
 * probing only after 20 us of spinning made 4-byte all-reduces on 3 and 4
 * ranks of 2 cores take 27 us instead of 17. */
static int idle(clt__op *op, int peer, int step) {
  clt__tp_progress(op->comm);
  return clt__op_idle(op, peer, step);
}

/* A small all-reduce in one round: all our input in, every peer's in,
 * every rank sums all of it (in the same order as the pieces are). */
static int run_whole(struct clt__shm *s, clt__op *op, unsigned char *base, const clt__dtype_ops *ops, double divisor,
                     const shm_hooks *h, int step0) {
  int rc = CLT_OK, in = 0, peer;
  clt_comm *c = op->comm;
  const uint64_t g = c->shm_round + 1;
  clt__ring_chunk ch = round_chunk(s, 0);
  for (;;) {
    if (!in) {
      /* Once our data is here (device staging) and our slot is free. */
      int ok = 1;
      if (h && h->ready) CLT_TRY(h->ready(h->user, &ch, &ok));
      peer = !ok ? -1 : g > NSLOTS ? behind(c, FLAG_DONE, g - NSLOTS) : -1;
      if (ok && peer < 0) {
        memcpy(slot_of(c, s->me, g), base, s->count * s->esize);
        c->sent[0] += s->count * s->esize;
        raise_flag(c, FLAG_IN, g);
        in = 1;
        clt__op_progress(op);
      }
    }
    if (in && (peer = behind(c, FLAG_IN, g)) < 0) break;
    CLT_TRY(idle(op, peer >= 0 ? c->layout.local[peer] : -1, step0));
  }
  sum_range(s, c, base, 0, s->count, 0, g, NULL, ops, divisor);
  raise_flag(c, FLAG_DONE, g);
  if (h && h->final) CLT_TRY(h->final(h->user, &ch));
  c->shm_round = g;
  return CLT_OK;
fail:
  if (rc == CLT_ETIMEDOUT) return rc;
  return clt__op_break(op, clt__op_error(op, step0, rc));
}

/* Run the rounds; steps step0 + 2r (round r's inputs) and step0 + 2r + 1
 * (its results) in messages. Every rank of the node runs the same rounds,
 * so the round counter stays the same on all of them. */
static int run(struct clt__shm *s, clt__op *op, enum shm_mode mode, unsigned char *base, const clt__dtype_ops *ops,
               double divisor, const shm_hooks *h, int step0) {
  int rc = CLT_OK, step = 0;
  clt_comm *c = op->comm;
  const uint64_t g0 = c->shm_round;
  const int reduces = mode != SHM_ALLGATHER, gathers = mode != SHM_REDUCE_SCATTER;
  size_t rin = 0, rred = 0, rout = 0; /* rounds copied in, reduced, copied out */
  size_t *rdone = gathers ? &rout : &rred;
  if (s->nrounds == 0 || s->L == 1) {
    /* Alone on the node: the reduction is the identity. */
    for (size_t r = 0; r < s->nrounds; r++) {
      clt__ring_chunk ch = round_chunk(s, r);
      int ok = 0;
      while (h && h->ready && (rc = h->ready(h->user, &ch, &ok)) >= 0 && !ok)
        if ((rc = clt__op_idle(op, -1, step0 + 2 * (int)r)) < 0) return rc;
      if (rc < 0) goto fail;
      if (mode != SHM_ALLGATHER && divisor > 1) ops->divide(base + ch.off * s->esize, ch.n, divisor);
      if (h && h->final) CLT_TRY(h->final(h->user, &ch));
    }
    c->shm_round = g0 + s->nrounds;
    return CLT_OK;
  }
  if (s->whole) return run_whole(s, op, base, ops, divisor, h, step0);

  while (*rdone < s->nrounds) {
    int progressed = 0, wait_peer = -2, peer;

    /* Copy out the oldest round whose pieces are all summed (allgather:
     * copied in). */
    if (gathers && rout < (reduces ? rred : rin)) {
      uint64_t g = g0 + rout + 1;
      if ((peer = behind(c, reduces ? FLAG_OUT : FLAG_IN, g)) < 0) {
        copy_out(s, c, base, rout, g);
        raise_flag(c, FLAG_DONE, g);
        if (s->nrounds > 1) clt__tp_progress(c); /* long runs let MPI progress now and then */
        if (h && h->final) {
          clt__ring_chunk ch = round_chunk(s, rout);
          step = step0 + 2 * (int)rout + 1;
          CLT_TRY(h->final(h->user, &ch));
        }
        rout++;
        progressed = 1;
      } else {
        wait_peer = peer, step = step0 + 2 * (int)rout + 1;
      }
    }

    /* Sum our piece of the oldest round whose inputs are all in. */
    if (reduces && rred < rin) {
      uint64_t g = g0 + rred + 1;
      if ((peer = behind(c, FLAG_IN, g)) < 0) {
        reduce(s, c, mode, base, rred, g, ops, divisor);
        raise_flag(c, mode == SHM_ALLREDUCE ? FLAG_OUT : FLAG_DONE, g);
        rred++;
        progressed = 1;
      } else if (wait_peer == -2) {
        wait_peer = peer, step = step0 + 2 * (int)rred;
      }
    }

    /* Copy in the next round, once its data is here (device staging) and
     * its slot is free: every peer done with the round before last. */
    if (rin < s->nrounds && rin < *rdone + NSLOTS) {
      uint64_t g = g0 + rin + 1;
      int ok = 1;
      if (h && h->ready && mode != SHM_ALLGATHER) {
        clt__ring_chunk ch = round_chunk(s, rin);
        step = step0 + 2 * (int)rin;
        CLT_TRY(h->ready(h->user, &ch, &ok));
      }
      peer = g > NSLOTS ? behind(c, FLAG_DONE, g - NSLOTS) : -1;
      if (ok && peer < 0) {
        copy_in(s, c, mode, base, rin, g);
        raise_flag(c, FLAG_IN, g);
        rin++;
        progressed = 1;
      } else if (wait_peer == -2) {
        wait_peer = ok ? peer : -1, step = step0 + 2 * (int)rin;
      }
    }

    if (progressed) {
      clt__op_progress(op);
      continue;
    }
    CLT_TRY(idle(op, wait_peer >= 0 ? c->layout.local[wait_peer] : -1, step));
  }
  c->shm_round = g0 + s->nrounds;
  return CLT_OK;

fail:
  /* Peers may be inside this operation, reading our segment: the window
   * and the communicator are not used again. */
  if (rc == CLT_ETIMEDOUT) return rc;
  return clt__op_break(op, clt__op_error(op, step, rc));
}

int clt__shm_create_parts(clt_allreduce_plan *plan, const size_t *part_lo, const size_t *part_hi,
                          struct clt__shm **out) {
  *out = NULL;
  clt_comm *comm = plan->comm;
  struct clt__shm *s = shm_make(comm, plan->count, plan->ops->esize, plan_piece(plan), part_lo, part_hi);
  if (!s) return CLT_ENOMEM;
  /* Every rank asks, even alone on its node: the first window splits the
   * communicator into nodes, which all its ranks must do together. */
  int rc = shm_window(comm, s);
  if (rc < 0) {
    clt__shm_free(s);
    return rc;
  }
  *out = s;
  return CLT_OK;
}

int clt__shm_reduce_scatter(struct clt__shm *s, clt__op *op, unsigned char *base, const clt__dtype_ops *ops,
                            int step0) {
  return run(s, op, SHM_REDUCE_SCATTER, base, ops, 1, NULL, step0);
}

int clt__shm_allgather(struct clt__shm *s, clt__op *op, unsigned char *base, int step0) {
  return run(s, op, SHM_ALLGATHER, base, NULL, 1, NULL, step0);
}

int clt__shm_exec(clt_allreduce_plan *plan, struct clt__shm *s, clt__op *op, unsigned char *base, double divisor,
                  clt__ready_fn *ready, clt__final_fn *final, void *user) {
  shm_hooks h = {ready, final, user};
  return run(s, op, plan->kind->gathers ? SHM_ALLREDUCE : SHM_REDUCE_SCATTER, base, plan->ops, divisor, &h, 0);
}
