/*
 * ring.c: the pipelined ring, the one engine of the all-reduce, the
 * reduce-scatter and the allgathers (planned, broadcast, clt_allgather).
 *
 * N ranks in a ring; each sends only to its right neighbour and receives
 * only from its left one. The buffer is cut into N segments (the first
 * count % N one element longer). N = 4, segments A B C D, rank r starting
 * with its own segment r:
 *
 *   reduce-scatter: in step s rank r sends segment (r - s) mod N to the
 *   right and adds the segment (r - s - 1) mod N that arrives from the left
 *   to its own copy.
 *
 *            rank 0     rank 1     rank 2     rank 3
 *   step 1   A ->       B ->       C ->       D ->      (0 gets D, adds)
 *   step 2   D+ ->      A+ ->      B+ ->      C+ ->
 *   step 3   C+ ->      D+ ->      A+ ->      B+ ->
 *   after    owns B*    owns C*    owns D*    owns A*   (* = sum of all 4)
 *
 *   allgather: N - 1 more steps pass the finished segments on, each rank
 *   overwriting its copy with what arrives (received straight into place).
 *
 * Every segment is summed in one fixed order (starting at the rank that
 * owns it, going right) on exactly one rank, and the allgather copies those
 * bits, so every rank ends with the same bits. An average divides the
 * finished segment on its owner before it is passed on.
 *
 * Cost model (n bytes, bandwidth B per link, latency a per message, c
 * chunk bytes): each rank sends and receives 2 (N - 1)/N n bytes, the
 * least any all-reduce can move, in 2 (N - 1) steps:
 *     T_ring ~ 2 (N - 1) a + 2 (N - 1)/N n/B
 * plus, without pipelining, the time to reduce each segment. Segments are
 * therefore cut into chunks that move independently: a chunk is passed on
 * as soon as it is reduced, receives go to one of nslots staging buffers
 * (double buffering: one is reduced while the next arrives), so reduction,
 * transfer and (for device buffers) the device-to-host copy of later chunks
 * overlap, costing about one chunk's time c/B per step instead of a
 * segment's. Small messages are latency-bound (2 (N - 1) a), which is why
 * plans of small messages use recursive doubling (log2 N steps) instead.
 *
 * The all-reduce is these two halves run back to back; each half is also a
 * collective of its own, on the same schedule and the same code:
 *
 *   reduce-scatter  the first N - 1 steps only (total_steps = reduce_steps):
 *                   rank r ends with segment (r + 1) mod N finished, bit
 *                   for bit what the all-reduce has there;
 *   allgather       the last N - 1 steps only (reduce_steps = 0), over the
 *                   segment table rotated so that rank r starts with the
 *                   segment the reduce-scatter finished there. broadcast and
 *                   clt_allgather run it over blocks in rank order.
 *
 * Segments are given as a table (lo[j], hi[j]) rather than one array of
 * offsets, so that a reduce-scatter or allgather with counts chosen per
 * rank can lay rank r's part at the r-th place of the buffer while the
 * ring still hands it to rank r.
 */
#include "comm_internal.h"

#include <stdlib.h>
#include <string.h>

enum {
  SEND_WINDOW = 8, /* sends in flight */
  COPY_WINDOW = 4, /* receives into place in flight */
  MAX_WINDOW = 16
};

void clt__segments(size_t count, int size, size_t *seg_off) {
  size_t base = count / (size_t)size, rem = count % (size_t)size;
  seg_off[0] = 0;
  for (int j = 0; j < size; j++) seg_off[j + 1] = seg_off[j] + base + ((size_t)j < rem);
}

static int ring_mod(int a, int n) { return ((a % n) + n) % n; }

static size_t seg_chunks(const size_t *lo, const size_t *hi, int seg, size_t ce) {
  size_t len = hi[seg] - lo[seg];
  return (len + ce - 1) / ce;
}

static clt__ring_chunk make_chunk(const size_t *lo, const size_t *hi, int step, int seg, size_t c, size_t ce) {
  clt__ring_chunk ch;
  ch.step = step;
  ch.seg = seg;
  ch.off = lo[seg] + c * ce;
  ch.n = hi[seg] - ch.off < ce ? hi[seg] - ch.off : ce;
  ch.id = 0;
  ch.dep_send = -1;
  return ch;
}

int clt__ring_sched_create(int rank, int size, const size_t *lo, const size_t *hi, size_t ce, int reduce_steps,
                           int total_steps, clt__ring_sched *out) {
  memset(out, 0, sizeof *out);
  out->rank = rank;
  out->size = size;
  out->reduce_steps = reduce_steps;
  out->total_steps = total_steps;
  out->nown = seg_chunks(lo, hi, rank, ce);
  for (int s = 0; s < total_steps; s++) out->nrecv += seg_chunks(lo, hi, ring_mod(rank - s - 1, size), ce);
  size_t *step_start = clt__calloc((size_t)total_steps + 1, sizeof *step_start);
  out->own = clt__calloc(out->nown, sizeof *out->own);
  out->recv = clt__calloc(out->nrecv, sizeof *out->recv);
  if (!step_start || !out->own || !out->recv) {
    free(step_start);
    clt__ring_sched_free(out);
    return CLT_ENOMEM;
  }
  for (size_t c = 0; c < out->nown; c++) {
    out->own[c] = make_chunk(lo, hi, 0, rank, c, ce);
    out->own[c].id = c;
  }
  size_t k = 0;
  for (int s = 0; s < total_steps; s++) {
    int seg = ring_mod(rank - s - 1, size);
    step_start[s] = k;
    for (size_t c = 0; c < seg_chunks(lo, hi, seg, ce); c++, k++) {
      clt__ring_chunk *ch = &out->recv[k];
      *ch = make_chunk(lo, hi, s, seg, c, ce);
      /* Staging order (the order device data is needed): own chunks, then
       * the reduce-scatter receives. A receive into place of step s lands
       * where segment (r - s - 1) was: received at step s - N, or our own. */
      if (s < reduce_steps)
        ch->id = out->nown + k;
      else if (reduce_steps > 0)
        ch->id = s - size >= 0 ? out->nown + step_start[s - size] + c : c;
      else
        ch->id = k;
      /* That place was sent from at step s - (N - 1): the send must be done
       * before new data may land there. */
      int sent_at = s - (size - 1);
      if (s >= reduce_steps && sent_at >= 0)
        ch->dep_send = sent_at == 0 ? (long)c : (long)(out->nown + step_start[sent_at - 1] + c);
    }
  }
  step_start[total_steps] = k;
  out->nsend = total_steps > 0 ? out->nown + step_start[total_steps - 1] : 0;
  free(step_start);
  return CLT_OK;
}

void clt__ring_sched_free(clt__ring_sched *s) {
  free(s->own);
  free(s->recv);
  memset(s, 0, sizeof *s);
}

/* One run of the pipelined ring: its neighbours and tag, the requests in
 * flight (sends and receives each in a window, used round robin) and how
 * far each list of chunks has come; step is the step being worked on, for
 * the messages of a wait or a failure. */
typedef struct ring_run {
  clt__op *op;
  clt_comm *comm;
  const clt__ring_sched *s;
  const clt__ring_io *io;
  int left, right, tag, rwin, step;
  size_t esize;
  clt__req sreq[SEND_WINDOW], rreq[MAX_WINDOW];
  size_t sent, sdone, rposted, rdone;
} ring_run;

/* Sends: our own chunks when their data is in place, then each received
 * chunk once it has been reduced (or has arrived, in the allgather). */
static int post_sends(ring_run *r, int *progressed) {
  const clt__ring_sched *s = r->s;
  const clt__ring_io *io = r->io;
  int rc = CLT_OK, ok = 1;
  while (r->sent < s->nsend && r->sent - r->sdone < SEND_WINDOW) {
    const clt__ring_chunk *c = r->sent < s->nown ? &s->own[r->sent] : &s->recv[r->sent - s->nown];
    r->step = c->step;
    if (r->sent >= s->nown) {
      if (r->sent - s->nown >= r->rdone) break;
    } else if (io->ready) {
      CLT_TRY(io->ready(io->user, c, &ok));
      if (!ok) break;
    }
    CLT_TRY(clt__tp_isend(r->comm, io->base + c->off * r->esize, c->n * r->esize, r->right, r->tag,
                          &r->sreq[r->sent % SEND_WINDOW]));
    r->sent++;
    *progressed = 1;
  }
  return CLT_OK;
fail:
  return rc;
}

/* Receives: reduce-scatter ones into a free staging slot, allgather ones
 * straight into place once the data there has been sent on. */
static int post_receives(ring_run *r, int *progressed) {
  const clt__ring_sched *s = r->s;
  const clt__ring_io *io = r->io;
  int rc = CLT_OK;
  while (r->rposted < s->nrecv && r->rposted - r->rdone < (size_t)r->rwin) {
    const clt__ring_chunk *c = &s->recv[r->rposted];
    unsigned char *dst;
    r->step = c->step;
    if (c->step < s->reduce_steps) {
      if (r->rposted - r->rdone >= (size_t)io->nslots) break;
      dst = io->staging + (r->rposted % (size_t)io->nslots) * io->slot_bytes;
    } else {
      if (c->dep_send >= 0 && (size_t)c->dep_send >= r->sdone) break;
      dst = io->base + c->off * r->esize;
    }
    CLT_TRY(clt__tp_irecv(r->comm, dst, c->n * r->esize, r->left, r->tag, &r->rreq[r->rposted % (size_t)r->rwin]));
    r->rposted++;
    *progressed = 1;
  }
  return CLT_OK;
fail:
  return rc;
}

/* The oldest receive: check it, reduce it, pass on that it is final. */
static int finish_oldest_receive(ring_run *r, int *progressed) {
  const clt__ring_sched *s = r->s;
  const clt__ring_io *io = r->io;
  int rc = CLT_OK, ok;
  if (r->rdone >= r->rposted) return CLT_OK;
  const clt__ring_chunk *c = &s->recv[r->rdone];
  clt__req *req = &r->rreq[r->rdone % (size_t)r->rwin];
  r->step = c->step;
  if (req->kind) {
    size_t got = 0;
    CLT_TRY(clt__tp_test(r->comm, req, &got));
    if (rc == 1) {
      *progressed = 1;
      if (got != c->n * r->esize)
        return clt__error(CLT_EMISMATCH, "rank %d sent %zu bytes where %zu were expected: are the ranks running the "
                          "same plans in the same order?", r->left, got, c->n * r->esize);
    }
  }
  ok = !req->kind;
  if (ok && c->step < s->reduce_steps && io->ready) CLT_TRY(io->ready(io->user, c, &ok));
  if (ok) {
    if (c->step < s->reduce_steps) {
      unsigned char *dst = io->base + c->off * r->esize;
      io->ops->add(dst, io->staging + (r->rdone % (size_t)io->nslots) * io->slot_bytes, c->n);
      if (c->step == s->reduce_steps - 1 && io->divisor > 1) io->ops->divide(dst, c->n, io->divisor);
    }
    if (io->final && c->step >= s->reduce_steps - 1) CLT_TRY(io->final(io->user, c));
    r->rdone++;
    *progressed = 1;
  }
  return CLT_OK;
fail:
  return rc;
}

/* Retire finished sends in order (a later one finishing first just waits
 * to be counted). */
static int retire_sends(ring_run *r, int *progressed) {
  int rc = CLT_OK;
  while (r->sdone < r->sent) {
    CLT_TRY(clt__tp_test(r->comm, &r->sreq[r->sdone % SEND_WINDOW], NULL));
    if (rc == 0) break;
    r->sdone++;
    *progressed = 1;
  }
  return CLT_OK;
fail:
  return rc;
}

/* Nothing moved: wait a little, naming whom we wait for should the wait
 * time out (the left neighbour, the right one, or our own device). */
static int wait_idle(ring_run *r) {
  const clt__ring_sched *s = r->s;
  int peer = r->left;
  if (r->rdone < r->rposted && !r->rreq[r->rdone % (size_t)r->rwin].kind) {
    peer = -1; /* the data has arrived; our own device is late */
    r->step = s->recv[r->rdone].step;
  } else if (r->rdone < r->rposted) {
    r->step = s->recv[r->rdone].step;
  } else if (r->sdone < r->sent) {
    peer = r->right;
    r->step = r->sdone < s->nown ? 0 : s->recv[r->sdone - s->nown].step + 1;
  } else {
    peer = -1;
  }
  return clt__op_idle(r->op, peer, r->io->step0 + r->step);
}

int clt__ring_exec(clt__op *op, const clt__ring_sched *s, const clt__ring_io *io) {
  int rc = CLT_OK;
  if (s->total_steps == 0) return CLT_OK;
  ring_run r = {.op = op, .comm = op->comm, .s = s, .io = io};
  r.left = ring_mod(s->rank - 1, s->size), r.right = ring_mod(s->rank + 1, s->size);
  if (io->peers) r.left = io->peers[r.left], r.right = io->peers[r.right];
  r.tag = clt__op_tag(op, io->tag_phase);
  r.esize = io->ops ? io->ops->esize : 1;
  r.rwin = io->nslots > COPY_WINDOW ? io->nslots : COPY_WINDOW;
  if (r.rwin > MAX_WINDOW)
    return clt__error(CLT_EINTERNAL, "ring: %d staging slots (at most %d)", io->nslots, MAX_WINDOW);

  while (r.rdone < s->nrecv || r.sdone < s->nsend) {
    int progressed = 0;
    CLT_TRY(post_sends(&r, &progressed));
    CLT_TRY(post_receives(&r, &progressed));
    CLT_TRY(finish_oldest_receive(&r, &progressed));
    CLT_TRY(retire_sends(&r, &progressed));
    if (progressed)
      clt__op_progress(op);
    else
      CLT_TRY(wait_idle(&r));
  }
  return CLT_OK;

fail:
  for (int i = 0; i < SEND_WINDOW; i++) clt__tp_abandon(r.comm, &r.sreq[i]);
  for (int i = 0; i < MAX_WINDOW; i++) clt__tp_abandon(r.comm, &r.rreq[i]);
  if (rc == CLT_ETIMEDOUT) return rc;
  return clt__op_break(op, clt__op_error(op, io->step0 + r.step, rc));
}

/* ---- the staging order ---------------------------------------------------------- */

size_t clt__ring_nstage(const clt__ring_sched *s) {
  size_t n = s->nown;
  while (n - s->nown < s->nrecv && s->recv[n - s->nown].step < s->reduce_steps) n++;
  return n;
}

void clt__ring_stage_chunk(const clt__ring_sched *s, size_t i, size_t *off, size_t *n) {
  const clt__ring_chunk *c = i < s->nown ? &s->own[i] : &s->recv[i - s->nown];
  *off = c->off;
  *n = c->n;
}

/* ---- the ring's plans (model.c's row "ring") -------------------------------------- */

/* Receive buffers of the reduce-scatter: two, so one chunk is reduced while
 * the next arrives. */
#define RING_SLOTS 2

struct ring_plan {
  clt__ring_sched sched;
  unsigned char *staging;  /* RING_SLOTS x slot_bytes; none for an allgather (it receives into place) */
  int nslots;
  size_t slot_bytes;
};

int clt__ring_plan_create(clt_allreduce_plan *plan) {
  const clt_comm *comm = plan->comm;
  const clt__coll_kind *kind = plan->kind;
  int rc = CLT_OK;
  struct ring_plan *r = clt__calloc(1, sizeof *r);
  if (!r) return CLT_ENOMEM;
  plan->state = r;
  /* An allgather alone starts where the reduce-scatter ends: the ring over
   * the parts, rank r starting with its own. */
  if (!kind->reduces)
    CLT_TRY(clt__ring_sched_create(comm->rank, comm->size, plan->part_lo, plan->part_hi, plan->chunk_elems, 0,
                                   comm->size - 1, &r->sched));
  else
    CLT_TRY(clt__ring_sched_create(comm->rank, comm->size, plan->seg_lo, plan->seg_hi, plan->chunk_elems,
                                   comm->size - 1, (1 + kind->gathers) * (comm->size - 1), &r->sched));
  if (kind->reduces) {
    size_t longest = 0;
    for (int j = 0; j < comm->size; j++)
      if (plan->seg_hi[j] - plan->seg_lo[j] > longest) longest = plan->seg_hi[j] - plan->seg_lo[j];
    r->slot_bytes = (longest < plan->chunk_elems ? longest : plan->chunk_elems) * plan->ops->esize;
    r->nslots = RING_SLOTS;
  }
  if (r->slot_bytes && !(r->staging = clt__calloc((size_t)r->nslots, r->slot_bytes))) return CLT_ENOMEM;
fail:
  return rc;
}

void clt__ring_plan_destroy(clt_allreduce_plan *plan, int keep_buffers) {
  struct ring_plan *r = plan->state;
  if (!r) return;
  clt__ring_sched_free(&r->sched);
  if (!keep_buffers) free(r->staging); /* abandoned receives may still land there */
  free(r);
  plan->state = NULL;
}

int clt__ring_plan_steps(const clt_allreduce_plan *plan) {
  return (plan->kind->reduces + plan->kind->gathers) * (plan->comm->size - 1);
}

int clt__ring_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                       clt__ready_fn *ready, clt__final_fn *final, void *user) {
  struct ring_plan *r = plan->state;
  clt__ring_io io = {.base = base,
                     .ops = plan->ops,
                     .divisor = divisor,
                     .staging = r->staging,
                     .nslots = r->nslots,
                     .slot_bytes = r->slot_bytes,
                     .ready = ready,
                     .final = final,
                     .user = user};
  return clt__ring_exec(op, &r->sched, &io);
}

int clt__ring_plan_staged(const clt_allreduce_plan *plan) { return (void)plan, 1; }

size_t clt__ring_plan_nstage(const clt_allreduce_plan *plan) {
  return clt__ring_nstage(&((const struct ring_plan *)plan->state)->sched);
}

void clt__ring_plan_stage_chunk(const clt_allreduce_plan *plan, size_t i, size_t *off, size_t *n) {
  clt__ring_stage_chunk(&((const struct ring_plan *)plan->state)->sched, i, off, n);
}
