/*
 * small.c: the all-reduces of small messages, where the number of steps
 * matters more than bandwidth and the ring's 2 (N - 1) steps lose.
 *
 * Recursive doubling (N a power of two, or more than 8 ranks): with P the
 * largest power of two <= N and E = N - P, ranks 0 .. 2E-1 pair up first
 * (even rank r sends its buffer to r + 1, which adds it and stands for
 * both). Then P ranks exchange whole buffers with the partner whose number
 * differs in bit k, for k = 0 .. log2 P - 1, both adding. Last, odd ranks
 * below 2E send the result back to their even partner. Both partners
 * compute a + b, in either order, and IEEE addition is commutative, so
 * every rank ends with the same bits. Cost: (log2 P + 2 [E > 0]) (a + n/B).
 *
 * Gather to rank 0 (3 to 8 ranks, not a power of two): every rank sends its
 * buffer to rank 0, which adds them in rank order and sends the result
 * back: 2 (a + n/B) plus rank 0's N - 1 messages, fewer steps than the
 * 3 of recursive doubling's fold when N is small. Rank 0 computes, everyone
 * gets its bits.
 */
#include "comm_internal.h"

#include <stdlib.h>
#include <string.h>

int clt__recdouble_steps(int size) {
  int p = 1, steps = 0;
  while (p * 2 <= size) p *= 2, steps++;
  return steps + (size > p ? 2 : 0);
}

enum clt__algorithm clt__small_algorithm(int size) {
  return size >= 3 && size <= 8 && (size & (size - 1)) != 0 ? CLT__GATHER : CLT__RECDOUBLE;
}

/* Messages up to a few KiB go eagerly (copied through a shared queue, no
 * handshake) in common MPI transports; larger ones need a rendezvous round
 * trip first (Open MPI's shared memory: above 4 KiB with its header). Mid-
 * sized messages are therefore sent as pieces that each fit, all in flight
 * at once; beyond 4 pieces one large message is as fast (or pieces of at
 * most 1 GiB: the transport takes at most INT_MAX bytes a message). */
#define CLT__EAGER_PIECE ((size_t)4096 - 128)
#define CLT__MAX_PIECES 4
#define CLT__LARGE_PIECE ((size_t)1 << 30)

static size_t piece_of(size_t bytes) {
  return bytes <= CLT__MAX_PIECES * CLT__EAGER_PIECE ? CLT__EAGER_PIECE : CLT__LARGE_PIECE;
}

int clt__messages(clt__op *op, int step, int tag_phase, int n, const int *peers, const int *recv,
                  void *const *bufs, const size_t *bytes) {
  int rc = CLT_OK, tag = clt__op_tag(op, tag_phase), nreq = 0, total = 0;
  for (int i = 0; i < n; i++) total += (int)((bytes[i] + piece_of(bytes[i]) - 1) / piece_of(bytes[i]));
  clt__req reqs_fixed[8 * CLT__MAX_PIECES], *reqs = reqs_fixed;
  int peer_fixed[8 * CLT__MAX_PIECES], *req_peer = peer_fixed;
  size_t got_fixed[8 * CLT__MAX_PIECES], want_fixed[8 * CLT__MAX_PIECES], *got = got_fixed, *want = want_fixed;
  void *heap = NULL;
  if (total > 8 * CLT__MAX_PIECES) {
    size_t each = sizeof *reqs + sizeof *req_peer + 2 * sizeof *got;
    if (!(heap = clt__calloc((size_t)total, each))) return CLT_ENOMEM;
    reqs = heap;
    got = (size_t *)(reqs + total);
    want = got + total;
    req_peer = (int *)(want + total);
  }
  memset(reqs, 0, (size_t)(total > 0 ? total : 1) * sizeof *reqs);
  memset(got, 0, (size_t)(total > 0 ? total : 1) * sizeof *got);
  for (int i = 0; i < n; i++) {
    size_t piece = piece_of(bytes[i]);
    for (size_t off = 0; off < bytes[i]; off += piece, nreq++) {
      unsigned char *at = (unsigned char *)bufs[i] + off;
      want[nreq] = bytes[i] - off < piece ? bytes[i] - off : piece;
      req_peer[nreq] = peers[i];
      rc = recv[i] ? clt__tp_irecv(op->comm, at, want[nreq], peers[i], tag, &reqs[nreq])
                   : clt__tp_isend(op->comm, at, want[nreq], peers[i], tag, &reqs[nreq]);
      if (rc < 0) {
        for (int j = 0; j < nreq; j++) clt__tp_abandon(op->comm, &reqs[j]);
        rc = clt__op_break(op, clt__op_error(op, step, rc));
        goto done;
      }
      if (!recv[i]) want[nreq] = 0; /* sends report no size */
    }
  }
  if ((rc = clt__op_wait(op, reqs, req_peer, got, nreq, step)) < 0) goto done;
  for (int i = 0; i < nreq; i++)
    if (got[i] != want[i]) {
      rc = clt__error(CLT_EMISMATCH, "rank %d sent %zu bytes where %zu were expected: are the ranks running the "
                      "same plans in the same order?", req_peer[i], got[i], want[i]);
      rc = clt__op_break(op, clt__op_error(op, step, rc));
      goto done;
    }
done:
  free(heap);
  return rc;
}

static int messages(clt__op *op, int step, int n, const int *peers, const int *recv, void *const *bufs,
                    size_t bytes) {
  size_t each[8] = {bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes};
  return clt__messages(op, step, CLT__TAG_DATA, n, peers, recv, bufs, each);
}

/* Exchange with one partner: send base and/or receive into tmp. */
static int exchange(clt__op *op, int partner, int step, unsigned char *base, unsigned char *tmp, size_t bytes,
                    int send, int recv) {
  int peers[2] = {partner, partner}, isrecv[2], n = 0;
  void *bufs[2];
  if (recv) isrecv[n] = 1, bufs[n++] = tmp;
  if (send) isrecv[n] = 0, bufs[n++] = base;
  return messages(op, step, n, peers, isrecv, bufs, bytes);
}

static int recdouble(clt__op *op, unsigned char *base, unsigned char *tmp, size_t count, const clt__dtype_ops *ops,
                     double divisor) {
  int rc = CLT_OK, rank = op->comm->rank, size = op->comm->size, step = 0;
  size_t bytes = count * ops->esize;
  int p = 1;
  while (p * 2 <= size) p *= 2;
  int extra = size - p, newrank;

  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      /* Folded into rank + 1: send, then wait for the result. */
      CLT_TRY(exchange(op, rank + 1, step, base, tmp, bytes, 1, 0));
      return exchange(op, rank + 1, op->nsteps - 1, tmp, base, bytes, 0, 1);
    }
    CLT_TRY(exchange(op, rank - 1, step++, base, tmp, bytes, 0, 1));
    ops->add(base, tmp, count);
    newrank = rank / 2;
  } else {
    newrank = rank - extra;
    if (extra) step++;
  }
  for (int mask = 1; mask < p; mask <<= 1, step++) {
    int partner_new = newrank ^ mask;
    int partner = partner_new < extra ? partner_new * 2 + 1 : partner_new + extra;
    CLT_TRY(exchange(op, partner, step, base, tmp, bytes, 1, 1));
    ops->add(base, tmp, count);
  }
  if (divisor > 1) ops->divide(base, count, divisor);
  if (rank < 2 * extra) CLT_TRY(exchange(op, rank - 1, step, base, tmp, bytes, 1, 0));
fail:
  return rc;
}

static int gather(clt__op *op, unsigned char *base, unsigned char *tmp, size_t count, const clt__dtype_ops *ops,
                  double divisor) {
  int rc = CLT_OK, size = op->comm->size, peers[8] = {0}, isrecv[8] = {0};
  size_t bytes = count * ops->esize;
  void *bufs[8] = {0};
  if (op->comm->rank != 0) {
    peers[0] = peers[1] = 0;
    isrecv[0] = 0, bufs[0] = base;
    isrecv[1] = 1, bufs[1] = tmp;
    /* The result comes back after our send has gone: one wait covers both. */
    CLT_TRY(messages(op, 0, 2, peers, isrecv, bufs, bytes));
    memcpy(base, tmp, bytes);
    return CLT_OK;
  }
  for (int r = 1; r < size; r++) peers[r - 1] = r, isrecv[r - 1] = 1, bufs[r - 1] = tmp + (size_t)(r - 1) * bytes;
  CLT_TRY(messages(op, 0, size - 1, peers, isrecv, bufs, bytes));
  for (int r = 1; r < size; r++) ops->add(base, tmp + (size_t)(r - 1) * bytes, count);
  if (divisor > 1) ops->divide(base, count, divisor);
  for (int r = 1; r < size; r++) isrecv[r - 1] = 0, bufs[r - 1] = base;
  CLT_TRY(messages(op, 1, size - 1, peers, isrecv, bufs, bytes));
fail:
  return rc;
}

/* ---- the plans (model.c's rows "recursive-doubling" and "gather") ------------------ */

/* The scratch: one buffer's bytes, or (size - 1) of them on gather's rank 0. */
int clt__recdouble_plan_create(clt_allreduce_plan *plan) { return clt__plan_scratch_create(plan, 1); }
int clt__gather_plan_create(clt_allreduce_plan *plan) {
  return clt__plan_scratch_create(plan, plan->comm->rank == 0 ? (size_t)plan->comm->size - 1 : 1);
}

int clt__recdouble_plan_steps(const clt_allreduce_plan *plan) { return clt__recdouble_steps(plan->comm->size); }
int clt__gather_plan_steps(const clt_allreduce_plan *plan) { return (void)plan, 2; }

int clt__recdouble_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                            clt__ready_fn *ready, clt__final_fn *final, void *user) {
  (void)ready, (void)final, (void)user;
  return recdouble(op, base, plan->state, plan->count, plan->ops, divisor);
}

int clt__gather_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                         clt__ready_fn *ready, clt__final_fn *final, void *user) {
  (void)ready, (void)final, (void)user;
  return gather(op, base, plan->state, plan->count, plan->ops, divisor);
}
