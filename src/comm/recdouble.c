/*
 * recdouble.c: recursive doubling, the all-reduce of small messages, where
 * the ring's 2 (N - 1) steps cost more than its bandwidth saves.
 *
 * With P the largest power of two <= N and E = N - P: ranks 0 .. 2E-1 pair
 * up first (even rank r sends its buffer to r + 1, which adds it and stands
 * for both). Then P ranks exchange whole buffers with the partner whose
 * number differs in bit k, for k = 0 .. log2 P - 1, both adding. Last, odd
 * ranks below 2E send the result back to their even partner.
 *
 * Both partners compute a + b, in either order, and IEEE addition is
 * commutative, so every rank ends with the same bits. Cost: about
 * (log2 P + 2 [E > 0]) (a + n/B) for n bytes: few steps, full-size messages.
 */
#include "comm_internal.h"

int clt__recdouble_steps(int size) {
  int p = 1, steps = 0;
  while (p * 2 <= size) p *= 2, steps++;
  return steps + (size > p ? 2 : 0);
}

/* Exchange the buffer with partner (send base, receive into tmp) and add. */
static int exchange(clt__op *op, int partner, int step, unsigned char *base, unsigned char *tmp, size_t count,
                    const clt__dtype_ops *ops, int send, int recv) {
  int rc = CLT_OK, n = 0, tag = clt__op_tag(op, CLT__TAG_DATA), peers[2] = {partner, partner};
  size_t bytes = count * ops->esize, got[2] = {0, 0};
  clt__req reqs[2] = {{.kind = 0}, {.kind = 0}};
  if (recv && (rc = clt__tp_irecv(op->comm, tmp, bytes, partner, tag, &reqs[n++])) < 0) goto fail;
  if (send && (rc = clt__tp_isend(op->comm, base, bytes, partner, tag, &reqs[n++])) < 0) goto fail;
  CLT_TRY(clt__op_wait(op, reqs, peers, got, n, step));
  if (recv && got[0] != bytes) {
    rc = clt__error(CLT_EMISMATCH, "rank %d sent %zu bytes where %zu were expected: are the ranks running the same "
                    "plans in the same order?", partner, got[0], bytes);
    return clt__op_break(op, clt__op_error(op, step, rc));
  }
  return CLT_OK;
fail:
  if (rc == CLT_ETIMEDOUT || op->comm->broken) return rc;
  for (int i = 0; i < n; i++) clt__tp_abandon(op->comm, &reqs[i]);
  return clt__op_break(op, clt__op_error(op, step, rc));
}

int clt__recdouble_exec(clt__op *op, unsigned char *base, unsigned char *tmp, size_t count,
                        const clt__dtype_ops *ops, double divisor) {
  int rc = CLT_OK, rank = op->comm->rank, size = op->comm->size, step = 0;
  int p = 1;
  while (p * 2 <= size) p *= 2;
  int extra = size - p, newrank;

  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      /* Folded into rank + 1: send, then wait for the result. */
      CLT_TRY(exchange(op, rank + 1, step, base, tmp, count, ops, 1, 0));
      CLT_TRY(exchange(op, rank + 1, op->nsteps - 1, tmp, base, count, ops, 0, 1));
      return CLT_OK;
    }
    CLT_TRY(exchange(op, rank - 1, step++, base, tmp, count, ops, 0, 1));
    ops->add(base, tmp, count);
    newrank = rank / 2;
  } else {
    newrank = rank - extra;
    if (extra) step++;
  }
  for (int mask = 1; mask < p; mask <<= 1, step++) {
    int partner_new = newrank ^ mask;
    int partner = partner_new < extra ? partner_new * 2 + 1 : partner_new + extra;
    CLT_TRY(exchange(op, partner, step, base, tmp, count, ops, 1, 1));
    ops->add(base, tmp, count);
  }
  if (divisor > 1) ops->divide(base, count, divisor);
  if (rank < 2 * extra) CLT_TRY(exchange(op, rank - 1, step, base, tmp, count, ops, 1, 0));
  return CLT_OK;
fail:
  return rc;
}
