/*
 * halving.c: Rabenseifner's all-reduce: a reduce-scatter by recursive
 * halving, then an allgather by recursive doubling (Thakur, Rabenseifner
 * and Gropp 2005; MPICH's long-message all-reduce). Over P = 2^k ranks it
 * takes 2 log2 P steps where the ring takes 2 (P - 1), and moves the
 * ring's bytes, 2 (P - 1)/P of the buffer a rank:
 *
 *   halving, distance d = P/2, P/4, ..., 1: partners v and v ^ d split
 *     their range; the lower keeps the lower half, the upper the upper
 *     half, each sending the other half and adding the one it receives;
 *     after log2 P steps position v holds block v (of P) summed over all;
 *   doubling, d = 1, 2, ..., P/2: partners swap what they hold, so the
 *     ranges double back to the whole buffer.
 *
 *   P = 4, blocks A B C D:     halving d=2    halving d=1    doubling d=1, 2
 *     v0 [A B C D] -> keeps A B (+v2)  -> A (+v1)      -> A B -> A B C D
 *     v1 [A B C D] -> keeps A B (+v3)  -> B (+v0)      -> A B -> A B C D
 *     v2 ...                  C D (+v0)   C (+v3)  ...
 *
 * With N not a power of two, P the largest power below N and E = N - P,
 * positions 0 .. 2E-1 pair up first as recursive doubling's do (small.c):
 * even position 2i sends all of its range to 2i + 1, which adds it and
 * stands for both; at the end it sends the result back. That costs two
 * more steps and 2 n more bytes on those ranks: the ring is cheaper then
 * for large n (the cost model chooses, model.c).
 *
 * Bits: each element's sum is a fixed tree, pairs differing in the
 * highest bit of v first (IEEE addition commutes, so it does not matter
 * which partner adds), computed once by the block's owner and copied by
 * the doubling: every rank gets the same bits. An average divides once,
 * at the owner.
 *
 * The ranks are a list (the whole communicator, or the carriers of one
 * segment across nodes in two-level: twolevel.c), the data a range of
 * the buffer, so one operation covers both.
 */
#include "comm_internal.h"

#include <stdlib.h>

int clt__halving_steps(int n) {
  int p = 1, k = 0;
  while (p * 2 <= n) p *= 2, k++;
  return 2 * k + (n > p ? 2 : 0);
}

/* The rank at list position pos. */
static int peer_at(const clt__halving *h, int pos) { return h->peers ? h->peers[pos] : pos; }

/* The list position standing for position v among the P (after the fold). */
static int position_of(int v, int extra) { return v < extra ? 2 * v + 1 : v + extra; }

/* Send send_n elements at send_at to the peer and receive recv_n into
 * recv_at from it, both in flight at once. */
static int swap(clt__op *op, const clt__halving *h, int step, int peer, const unsigned char *send_at, size_t send_n,
                unsigned char *recv_at, size_t recv_n) {
  int peers[2] = {peer, peer}, isrecv[2] = {1, 0};
  void *bufs[2] = {recv_at, (void *)send_at};
  size_t bytes[2] = {recv_n * h->ops->esize, send_n * h->ops->esize};
  return clt__messages(op, step, h->tag_phase, 2, peers, isrecv, bufs, bytes);
}

/* One-way: send (recv = 0) or receive the whole range. */
static int whole(clt__op *op, const clt__halving *h, int step, int peer, int recv, unsigned char *at, size_t n) {
  size_t bytes = n * h->ops->esize;
  void *buf = at;
  return clt__messages(op, step, h->tag_phase, 1, &peer, &recv, &buf, &bytes);
}

int clt__halving_exec(clt__op *op, const clt__halving *h) {
  int rc = CLT_OK, n = h->n, me = h->me, step = h->step0, p = 1;
  const clt__dtype_ops *ops = h->ops;
  size_t es = ops->esize, count = h->hi - h->lo, *off = NULL;
  unsigned char *base = h->base + h->lo * es;
  if (count == 0) return CLT_OK;
  if (n == 1) {
    if (h->divisor > 1) ops->divide(base, count, h->divisor);
    return CLT_OK;
  }
  while (p * 2 <= n) p *= 2;
  int extra = n - p, v;
  int last = h->step0 + clt__halving_steps(n) - 1;
  if (me < 2 * extra && me % 2 == 0) {
    /* Folded into me + 1: send, then wait for the result. */
    CLT_TRY(whole(op, h, step, peer_at(h, me + 1), 0, base, count));
    return whole(op, h, last, peer_at(h, me + 1), 1, base, count);
  }
  if (me < 2 * extra) {
    CLT_TRY(whole(op, h, step, peer_at(h, me - 1), 1, h->tmp, count));
    ops->add(base, h->tmp, count);
    v = me / 2;
  } else {
    v = me - extra;
  }
  if (extra) step++;
  if (!(off = clt__calloc((size_t)p + 1, sizeof *off))) return CLT_ENOMEM;
  clt__segments(count, p, off);

  /* Reduce-scatter: the range halves until it is block v. */
  int b0 = 0, b1 = p;
  for (int d = p / 2; d >= 1; d /= 2, step++) {
    int mid = b0 + d, upper = (v & d) != 0;
    int k0 = upper ? mid : b0, k1 = upper ? b1 : mid; /* kept */
    int s0 = upper ? b0 : mid, s1 = upper ? mid : b1; /* sent */
    size_t keep = off[k1] - off[k0];
    int peer = peer_at(h, position_of(v ^ d, extra));
    CLT_TRY(swap(op, h, step, peer, base + off[s0] * es, off[s1] - off[s0], h->tmp, keep));
    ops->add(base + off[k0] * es, h->tmp, keep);
    b0 = k0, b1 = k1;
  }
  if (h->divisor > 1) ops->divide(base + off[b0] * es, off[b1] - off[b0], h->divisor);

  /* Allgather: the partner holds the neighbouring range of the same width. */
  for (int d = 1; d < p; d *= 2, step++) {
    int upper = (v & d) != 0;
    int r0 = upper ? b0 - d : b1, r1 = upper ? b0 : b1 + d;
    CLT_TRY(swap(op, h, step, peer_at(h, position_of(v ^ d, extra)), base + off[b0] * es, off[b1] - off[b0],
                 base + off[r0] * es, off[r1] - off[r0]));
    if (upper) b0 = r0;
    else b1 = r1;
  }
  if (me < 2 * extra) CLT_TRY(whole(op, h, last, peer_at(h, me - 1), 0, base, count));
fail:
  free(off);
  return rc;
}

/* ---- the plans (model.c's row "rabenseifner") ------------------------------------ */

/* The scratch: the whole buffer's bytes (what the fold receives). */
int clt__halving_plan_create(clt_allreduce_plan *plan) { return clt__plan_scratch_create(plan, 1); }

int clt__halving_plan_steps(const clt_allreduce_plan *plan) { return clt__halving_steps(plan->comm->size); }

int clt__halving_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                          clt__ready_fn *ready, clt__final_fn *final, void *user) {
  (void)ready, (void)final, (void)user;
  clt__halving h = {.n = plan->comm->size, .me = plan->comm->rank, .base = base, .hi = plan->count,
                    .tmp = plan->state, .ops = plan->ops, .divisor = divisor, .tag_phase = CLT__TAG_DATA};
  return clt__halving_exec(op, &h);
}
