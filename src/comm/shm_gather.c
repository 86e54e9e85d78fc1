/*
 * shm_gather.c: an allgather inside a node whose blocks stay in shared
 * memory (issue 15): every rank's part lies in its segment of a window of
 * the plan's own (clt__tp_shm_region), and the caller may fill its block
 * there itself and read the others' blocks there after the run, instead of
 * handing a private buffer to copy in and out. ZeRO's parameter gather
 * (dp/zero_gather.c) reads its shard from the device straight into its
 * block and queues the device writes of the other ranks' parts straight
 * from theirs: a run is one handshake, no copy at all.
 *
 * Segment of local rank l: a flag on its own cache line, then two slots,
 * each holding rank l's part; run g uses slot g mod 2. Flag `in` = g says:
 *   (a) rank l's block of run g is in its slot g mod 2, and
 *   (b) rank l has finished reading every block of run g - 1: its host
 *       copies are done, and the device commands reading them (ZeRO's
 *       non-blocking writes) are complete, not merely queued.
 * A run raises `in` = g and waits until every peer's is at least g; then
 * every block of run g can be read. (b) is the caller's promise for
 * device reads (clt__allgather_run_filled: ZeRO waits for its writes of the
 * last gather before it fills its block again); host copies keep it by
 * construction.
 *
 * Why two slots and no second handshake: rank l fills slot g mod 2 again at
 * run g + 2, only after its run g + 1 ended, i.e. after every peer raised
 * `in` = g + 1, which by (b) says that peer is done reading run g's blocks.
 * A peer cannot run ahead by two: finishing run g + 1 needs our `in` =
 * g + 1. So a block is never overwritten while a reader (device or host)
 * may still use it, and a rank waits for its peers once per run, as the
 * copy-based allgather must anyway.
 *
 * Why a window of its own: the node's window (shm.c) is shared by every
 * shm plan and replaced when a later plan needs a larger one; device
 * commands reading a block after the run returned would then read freed
 * memory, and the gradient all-reduce's rounds would overwrite blocks still
 * to be written to devices. The region is never moved nor shared; it lives
 * as long as the communicator, so its users wait for their device
 * commands before the communicator goes (dp/zero_gather.c:
 * clt__dp_gather_free).
 *
 * Waiting and errors are shm.c's: polling with the deadline of every wait
 * (CLT_TIMEOUT names the rank whose flag is behind), probing MPI
 * meanwhile. The plan's (count, per-rank counts, algorithm) were checked
 * across ranks when it was made (the fingerprint), before the region was.
 * Bits: only copies, so every rank holds the owner's bits of every part.
 */
#include "comm_internal.h"

#include <stdlib.h>
#include <string.h>

#define HEAD_BYTES 256
#define NSLOTS 2
#define SLOT_ALIGN 4096

struct clt__shm_gather {
  int L, me;
  size_t esize;
  const size_t *part_lo, *part_hi; /* the plan's, by rank (one node: local rank = rank) */
  size_t slot;                     /* bytes between slots */
  unsigned char *const *segs;      /* local_size: each rank's segment */
  uint64_t round;                  /* runs so far */
};

int clt__shm_gather_create(clt_allreduce_plan *plan, struct clt__shm_gather **out) {
  clt_comm *comm = plan->comm;
  struct clt__shm_gather *g = clt__calloc(1, sizeof *g);
  *out = NULL;
  if (!g) return CLT_ENOMEM;
  g->L = comm->local_size;
  g->me = comm->local_rank;
  g->esize = plan->ops->esize;
  g->part_lo = plan->part_lo;
  g->part_hi = plan->part_hi;
  size_t longest = 0;
  for (int r = 0; r < comm->size; r++)
    if (plan->part_hi[r] - plan->part_lo[r] > longest) longest = plan->part_hi[r] - plan->part_lo[r];
  g->slot = (longest * g->esize + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
  int rc = clt__tp_shm_region(comm, HEAD_BYTES + NSLOTS * g->slot, &g->segs);
  if (rc < 0) {
    free(g);
    return rc;
  }
  *out = g;
  return CLT_OK;
}

void clt__shm_gather_free(struct clt__shm_gather *g) { free(g); }

size_t clt__shm_gather_bytes(const struct clt__shm_gather *g) { return g ? HEAD_BYTES + NSLOTS * g->slot : 0; }

static uint64_t *flag_of(const struct clt__shm_gather *g, int l) { return (uint64_t *)(void *)g->segs[l]; }

static unsigned char *slot_of(const struct clt__shm_gather *g, int l, uint64_t run) {
  return g->segs[l] + HEAD_BYTES + (size_t)(run % NSLOTS) * g->slot;
}

unsigned char *clt__shm_gather_block(const struct clt__shm_gather *g, int rank, int next) {
  return slot_of(g, rank, g->round + (next ? 1 : 0));
}

int clt__shm_gather_exec(struct clt__shm_gather *g, clt__op *op, unsigned char *base) {
  int rc = CLT_OK, peer = -1;
  clt_comm *c = op->comm;
  const uint64_t run = g->round + 1;
  size_t es = g->esize;
  if (base) {
    size_t lo = g->part_lo[g->me], n = g->part_hi[g->me] - lo;
    if (n) memcpy(slot_of(g, g->me, run), base + lo * es, n * es);
  }
  c->sent[0] += (g->part_hi[g->me] - g->part_lo[g->me]) * es;
  __atomic_store_n(flag_of(g, g->me), run, __ATOMIC_RELEASE);
  clt__op_progress(op);
  for (;;) {
    peer = -1;
    for (int l = 0; l < g->L && peer < 0; l++)
      if (l != g->me && __atomic_load_n(flag_of(g, l), __ATOMIC_ACQUIRE) < run) peer = l;
    if (peer < 0) break;
    /* As shm.c's waits: MPI progresses, then wait.c's policy and deadline. */
    clt__tp_progress(c);
    CLT_TRY(clt__op_idle(op, c->layout.local[peer], 0));
  }
  g->round = run;
  if (base)
    for (int l = 0; l < g->L; l++) {
      size_t lo = g->part_lo[l], n = g->part_hi[l] - lo;
      if (l != g->me && n) memcpy(base + lo * es, slot_of(g, l, run), n * es);
    }
  return CLT_OK;
fail:
  /* clt__op_idle's timeout already names the peer and broke the
   * communicator: peers may still read our block. */
  return rc;
}
