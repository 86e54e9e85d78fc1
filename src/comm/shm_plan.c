/*
 * shm_plan.c: the plans of model.c's row "shm": all-reduces and
 * reduce-scatters in rounds through the node's shared-memory window
 * (shm.c), allgathers whose blocks stay in a window of their own
 * (shm_gather.c: the only kind of allgather plan that takes shm), and
 * all-reduces of bytes already in the node's shared memory (shm_arena.c).
 */
#include "comm_internal.h"

#include <stdlib.h>

struct shm_plan {
  struct clt__shm *shm;          /* the rounds through the node's window, or */
  struct clt__shm_gather *gwin;  /* an allgather's blocks in a window of its own */
};

int clt__shm_plan_create(clt_allreduce_plan *plan) {
  struct shm_plan *s = clt__calloc(1, sizeof *s);
  if (!s) return CLT_ENOMEM;
  plan->state = s;
  if (!plan->kind->reduces) return clt__shm_gather_create(plan, &s->gwin); /* a window of its own */
  return clt__shm_create(plan, &s->shm);                                  /* the node's window */
}

/* Neither holds receive buffers: nothing to keep. */
void clt__shm_plan_destroy(clt_allreduce_plan *plan, int keep_buffers) {
  struct shm_plan *s = plan->state;
  (void)keep_buffers;
  if (!s) return;
  clt__shm_free(s->shm);
  clt__shm_gather_free(s->gwin);
  free(s);
  plan->state = NULL;
}

int clt__shm_plan_steps(const clt_allreduce_plan *plan) {
  const struct shm_plan *s = plan->state;
  return s->gwin ? 1 : clt__shm_steps(s->shm);
}

int clt__shm_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                      clt__ready_fn *ready, clt__final_fn *final, void *user) {
  struct shm_plan *s = plan->state;
  if (s->gwin) return clt__shm_gather_exec(s->gwin, op, base);
  return clt__shm_exec(plan, s->shm, op, base, divisor, ready, final, user);
}

/* Device data comes and goes by the rounds where they are consecutive
 * ranges of the buffer (an all-reduce's). */
int clt__shm_plan_staged(const clt_allreduce_plan *plan) {
  const struct shm_plan *s = plan->state;
  return !s->gwin && clt__shm_contiguous(s->shm);
}
size_t clt__shm_plan_nstage(const clt_allreduce_plan *plan) {
  return clt__shm_nrounds(((const struct shm_plan *)plan->state)->shm);
}
void clt__shm_plan_stage_chunk(const clt_allreduce_plan *plan, size_t i, size_t *off, size_t *n) {
  clt__shm_round(((const struct shm_plan *)plan->state)->shm, i, off, n);
}

/* The state of a plan of this row, else NULL. */
static const struct shm_plan *shm_plan_of(const clt_allreduce_plan *plan) {
  return plan && plan->alg->algorithm == CLT__SHM ? plan->state : NULL;
}

struct clt__shm_gather *clt__shm_plan_gather(const clt_allreduce_plan *plan) {
  const struct shm_plan *s = shm_plan_of(plan);
  return s ? s->gwin : NULL;
}

int clt__allreduce_run_arena(clt_allreduce_plan *plan, void *buf) {
  clt__op op;
  int rc;
  size_t bytes = plan ? plan->count * plan->ops->esize : 0;
  const struct shm_plan *s = shm_plan_of(plan);
  if (!s || !s->shm || !plan->kind->gathers || !plan->ops->sum_to || plan->comm->size == 1 || plan->count == 0 ||
      !clt__arena_holds(plan->comm, buf, bytes))
    return clt__plan_run(plan, buf);
  if ((rc = clt__allreduce_begin(plan, &op)) < 0) return rc;
  double divisor = plan->op == CLT_AVG ? (double)plan->total_replicas : 1.0;
  size_t at = (size_t)((unsigned char *)buf - clt__arena_mine(plan->comm));
  return clt__arena_allreduce(&op, at, plan->seg_off, plan->ops, divisor);
}
