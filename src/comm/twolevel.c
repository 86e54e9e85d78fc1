/*
 * twolevel.c: the node-then-network all-reduce (Horovod's hierarchical
 * all-reduce, NCCL's rings within and across nodes). With L ranks on each
 * of M nodes, a flat ring sends 2 (N-1)/N of the buffer over each of its
 * links, and with nodes in a row some of those links cross the network;
 * this sends each byte over the network once per node:
 *
 *   1. reduce-scatter inside the node (a ring of its L ranks): local rank l
 *      ends with its part, the node's sum of segments
 *      [l lmax / L, (l + 1) lmax / L) of the lmax segments of the buffer;
 *   2. for each segment it carries, an all-reduce (a ring, or Rabenseifner's
 *      in twolevel-rabenseifner: halving.c) with the ranks that carry that
 *      segment on the other nodes, one per node, in node order: each local
 *      rank moves 1/L of the buffer across the network;
 *   3. allgather inside the node: every rank gets every part.
 *
 *        node 0: ranks 0 1     node 1: ranks 2 3     node 2: rank 4
 *   1.   0 gets A0+A1          2 gets A2+A3          4 has all of it
 *        1 gets B0+B1          3 gets B2+B3
 *   2.   ring 0-2-4 over segment A; ring 1-3-4 over segment B
 *   3.   0 <-> 1               2 <-> 3               (nothing)
 *
 * Nodes of unequal size (the layout in comm_internal.h): segment j has one
 * carrier on every node; on a node smaller than the largest one, a rank
 * carries several segments and takes part in their rings one after the
 * other, in segment order on every rank, so no two rings wait on each
 * other. Segments and parts may be empty (counts below the rank count).
 *
 * Every element is summed in one fixed order: its node's ring order, then
 * the network ring's order of the node sums; the two allgathers copy
 * those bits. So every rank gets the same bits, run after run, though not
 * the flat ring's (a different order of float additions; the tests compare
 * with a serial sum within rounding). An average divides once, where the
 * network ring finishes a segment (or, on one node, after step 1).
 *
 * The rings are the ring engine's (ring.c) over lists of this
 * communicator's ranks, so one operation number, one deadline and one
 * diagnosis cover the three steps, and errors name the communicator's
 * ranks. Device buffers are staged chunk by chunk in the order of step 1's
 * ring, and each part goes back to the device as soon as it is final
 * (allreduce_device.c), so the copies overlap the rings.
 *
 * Where the ranks of every node share memory (real nodes, or pretend ones
 * on one machine), steps 1 and 3 go through the node's shared-memory
 * window instead of rings (shm.c: each rank sums its part straight from
 * its peers' segments, then copies the others' parts out): the node's sum
 * is then in local-rank order, and device buffers are copied whole before
 * step 1 (the window's rounds walk through every part at once).
 */
#include "comm_internal.h"

#include <stdlib.h>
#include <string.h>

/* The network rings' messages have their own tag phase. */
#define TAG_NET (CLT__TAG_PHASES - 1)

struct clt__twolevel {
  int L, M;                 /* this node's ranks; nodes */
  size_t *part_lo, *part_hi; /* L each: local rank l's part */
  size_t *rs_lo, *rs_hi;    /* L each: the node ring's segment table */
  clt__ring_sched rs, ag;   /* steps 1 and 3 */
  int nseg;                 /* segments this rank carries across nodes */
  clt__ring_sched *net;     /* nseg network rings (step 2) */
  size_t *net_off;          /* nseg x (M + 1): each ring's segments */
  int *net_peers;           /* nseg x M: each ring's ranks, in node order */
  int halving;              /* step 2 by Rabenseifner's (halving.c), not rings */
  unsigned char *tmp;       /* halving: the longest carried segment */
  unsigned char *staging;   /* 2 chunks: receives being reduced */
  size_t slot_bytes;
  int steps, net_steps;      /* the operation's; each network all-reduce's */
  struct clt__shm *shm;     /* steps 1 and 3 through the node's window, or NULL: rings */
};

static void twolevel_free(struct clt__twolevel *t, int keep_staging) {
  if (!t) return;
  clt__shm_free(t->shm);
  clt__ring_sched_free(&t->rs);
  clt__ring_sched_free(&t->ag);
  for (int k = 0; t->net && k < t->nseg; k++) clt__ring_sched_free(&t->net[k]);
  free(t->net);
  free(t->net_off);
  free(t->net_peers);
  free(t->part_lo);
  if (!keep_staging) free(t->tmp);
  if (!keep_staging) free(t->staging); /* abandoned receives may still land there */
  free(t);
}

/* The plan's rings, windows and staging; halving: Rabenseifner's between
 * nodes, else rings. */
static int twolevel_create(clt_allreduce_plan *plan, int halving) {
  int rc = CLT_OK;
  const clt_comm *comm = plan->comm;
  const clt__layout *lay = &comm->layout;
  size_t ce = plan->chunk_elems, *seg_off = NULL;
  struct clt__twolevel *t = clt__calloc(1, sizeof *t);
  if (!t) return CLT_ENOMEM;
  int L = t->L = comm->local_size, M = t->M = lay->nnodes, p = comm->local_rank, lmax = lay->lmax;
  if (!(seg_off = clt__calloc((size_t)lmax + 1, sizeof *seg_off)) ||
      !(t->part_lo = clt__calloc(4 * (size_t)L, sizeof *t->part_lo)))
    goto nomem;
  t->part_hi = t->part_lo + L;
  t->rs_lo = t->part_lo + 2 * L;
  t->rs_hi = t->part_lo + 3 * L;
  clt__segments(plan->count, lmax, seg_off);
  for (int k = 0; k < L; k++) {
    t->part_lo[k] = seg_off[clt__layout_first_seg(lmax, L, k)];
    t->part_hi[k] = seg_off[clt__layout_first_seg(lmax, L, k + 1)];
  }
  /* The reduce-scatter finishes ring segment (p + 1) mod L at position p:
   * that is local rank p's part. */
  for (int j = 0; j < L; j++) {
    t->rs_lo[j] = t->part_lo[(j + L - 1) % L];
    t->rs_hi[j] = t->part_hi[(j + L - 1) % L];
  }
  CLT_TRY(clt__ring_sched_create(p, L, t->rs_lo, t->rs_hi, ce, L - 1, L - 1, &t->rs));
  CLT_TRY(clt__ring_sched_create(p, L, t->part_lo, t->part_hi, ce, 0, L - 1, &t->ag));

  t->halving = halving;
  size_t longest = 0;
  int first = clt__layout_first_seg(lmax, L, p);
  t->nseg = clt__layout_first_seg(lmax, L, p + 1) - first;
  if (!(t->net = clt__calloc((size_t)t->nseg, sizeof *t->net)) ||
      !(t->net_off = clt__calloc((size_t)t->nseg * ((size_t)M + 1), sizeof *t->net_off)) ||
      !(t->net_peers = clt__calloc((size_t)t->nseg * (size_t)M, sizeof *t->net_peers)))
    goto nomem;
  for (int k = 0; k < t->nseg; k++) {
    int j = first + k;
    size_t *off = t->net_off + (size_t)k * ((size_t)M + 1);
    int *peers = t->net_peers + (size_t)k * (size_t)M;
    clt__segments(seg_off[j + 1] - seg_off[j], M, off);
    for (int s = 0; s <= M; s++) off[s] += seg_off[j];
    for (int n = 0; n < M; n++) peers[n] = lay->carrier[(size_t)n * (size_t)lmax + (size_t)j];
    if (seg_off[j + 1] - seg_off[j] > longest) longest = seg_off[j + 1] - seg_off[j];
    if (!t->halving)
      CLT_TRY(clt__ring_sched_create(lay->node, M, off, off + 1, ce, M - 1, 2 * (M - 1), &t->net[k]));
  }
  t->net_steps = t->halving ? clt__halving_steps(M) : 2 * (M - 1);
  t->steps = 2 * (L - 1) + t->net_steps * t->nseg;
  if (comm->shm_capable) {
    CLT_TRY(clt__shm_create_parts(plan, t->part_lo, t->part_hi, &t->shm));
    t->steps = 2 * clt__shm_steps(t->shm) + t->net_steps * t->nseg;
  }
  if (t->halving && longest && !(t->tmp = clt__calloc(longest, plan->ops->esize))) goto nomem;
  t->slot_bytes = (plan->count < ce ? plan->count : ce) * plan->ops->esize;
  if (t->slot_bytes && !(t->staging = clt__calloc(2, t->slot_bytes))) goto nomem;
  free(seg_off);
  plan->state = t;
  return CLT_OK;
nomem:
  rc = CLT_ENOMEM;
fail:
  free(seg_off);
  twolevel_free(t, 0);
  return rc;
}

/* ---- the plans (model.c's rows "twolevel" and "twolevel-rabenseifner") ------------- */

int clt__twolevel_plan_create(clt_allreduce_plan *plan) { return twolevel_create(plan, 0); }
int clt__twolevel_halving_plan_create(clt_allreduce_plan *plan) { return twolevel_create(plan, 1); }

void clt__twolevel_plan_destroy(clt_allreduce_plan *plan, int keep_buffers) {
  twolevel_free(plan->state, keep_buffers);
  plan->state = NULL;
}

int clt__twolevel_plan_steps(const clt_allreduce_plan *plan) {
  return ((const struct clt__twolevel *)plan->state)->steps;
}

/* Device data is staged in the order of the node's ring (step 1), unless
 * the node's steps go through its window (copied whole first). */
int clt__twolevel_plan_staged(const clt_allreduce_plan *plan) {
  return !((const struct clt__twolevel *)plan->state)->shm;
}
size_t clt__twolevel_plan_nstage(const clt_allreduce_plan *plan) {
  return clt__ring_nstage(&((const struct clt__twolevel *)plan->state)->rs);
}
void clt__twolevel_plan_stage_chunk(const clt_allreduce_plan *plan, size_t i, size_t *off, size_t *n) {
  clt__ring_stage_chunk(&((const struct clt__twolevel *)plan->state)->rs, i, off, n);
}

/* The device hooks: ready for the node's reduce-scatter (the staging order
 * is its schedule), final for this rank's finished part and for every part
 * the node's allgather brings. */
int clt__twolevel_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                           clt__ready_fn *ready, clt__final_fn *final, void *user) {
  int rc = CLT_OK;
  struct clt__twolevel *t = plan->state;
  const clt_comm *comm = plan->comm;
  clt__ring_io io = {.base = base,
                     .ops = plan->ops,
                     .divisor = 1,
                     .staging = t->staging,
                     .nslots = 2,
                     .slot_bytes = t->slot_bytes,
                     .peers = comm->layout.local,
                     .tag_phase = CLT__TAG_DATA,
                     .ready = ready,
                     .user = user};
  /* 1. The node's sums, one part per local rank (device data is used as
   * its chunks arrive, in the order of this ring). */
  if (t->shm)
    CLT_TRY(clt__shm_reduce_scatter(t->shm, op, base, plan->ops, 0));
  else
    CLT_TRY(clt__ring_exec(op, &t->rs, &io));
  /* Alone on its node, the rank runs no ring there: wait for its data. */
  for (size_t i = 0; ready && t->L == 1 && i < t->rs.nown; i++) {
    int ok = 0;
    while ((rc = ready(user, &t->rs.own[i], &ok)) >= 0 && !ok)
      if ((rc = clt__op_idle(op, -1, 0)) < 0) break;
    if (rc < 0) goto fail;
  }
  io.ready = NULL;
  io.step0 += t->shm ? clt__shm_steps(t->shm) : t->L - 1;
  /* 2. Each carried segment with its carriers on the other nodes (none
   * on one node: the average divides below). */
  io.divisor = divisor;
  io.tag_phase = TAG_NET;
  for (int k = 0; t->M > 1 && k < t->nseg; k++) {
    io.peers = t->net_peers + (size_t)k * (size_t)t->M;
    if (t->halving) {
      const size_t *off = t->net_off + (size_t)k * ((size_t)t->M + 1);
      clt__halving h = {.peers = io.peers, .n = t->M, .me = comm->layout.node, .base = base, .lo = off[0],
                        .hi = off[t->M], .tmp = t->tmp, .ops = plan->ops, .divisor = divisor,
                        .tag_phase = TAG_NET, .step0 = io.step0};
      CLT_TRY(clt__halving_exec(op, &h));
    } else {
      CLT_TRY(clt__ring_exec(op, &t->net[k], &io));
    }
    io.step0 += t->net_steps;
  }
  if (t->M == 1 && divisor > 1) {
    size_t plo = t->part_lo[comm->local_rank], phi = t->part_hi[comm->local_rank];
    plan->ops->divide(base + plo * plan->ops->esize, phi - plo, divisor);
  }
  /* Our part is final: on its way back to the device during step 3. */
  size_t lo = t->part_lo[comm->local_rank], hi = t->part_hi[comm->local_rank];
  if (final && hi > lo) {
    clt__ring_chunk own = {.off = lo, .n = hi - lo, .dep_send = -1};
    CLT_TRY(final(user, &own));
  }
  /* 3. Every part to every local rank. */
  io.final = final;
  io.divisor = 1;
  io.tag_phase = CLT__TAG_DATA;
  io.peers = comm->layout.local;
  if (t->shm)
    CLT_TRY(clt__shm_allgather(t->shm, op, base, io.step0));
  else
    CLT_TRY(clt__ring_exec(op, &t->ag, &io));
fail:
  return rc;
}
