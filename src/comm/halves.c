/*
 * halves.c: the public reduce-scatter and allgather plans, the two halves
 * of the ring all-reduce (ring.c). They are all-reduce plans of another
 * kind (clt__coll_kind in comm_internal.h), made, checked and run by the
 * all-reduce's own code in allreduce.c and allreduce_device.c; this file
 * only gives them their names and types.
 */
#include "comm_internal.h"

static int plan_part(const clt_allreduce_plan *plan, const char *fn, int rank, size_t *offset, size_t *n) {
  if (!plan) return clt__null_arg(fn, "plan", "plan");
  if (!offset) return clt__null_arg(fn, "offset", NULL);
  if (!n) return clt__null_arg(fn, "n", NULL);
  if (rank < 0 || rank >= plan->comm->size)
    return clt__error(CLT_EINVAL, "%s: rank %d is not a rank (0 to %d)", fn, rank, plan->comm->size - 1);
  *offset = plan->part_lo[rank];
  *n = plan->part_hi[rank] - plan->part_lo[rank];
  return CLT_OK;
}

/* ---- reduce-scatter ---- */

int clt_reduce_scatter_plan_create(clt_comm *comm, size_t count, const size_t *counts, clt_dtype dtype,
                                   clt_reduce_op op, const clt_allreduce_opts *opts, clt_reduce_scatter_plan **out) {
  clt_allreduce_plan *p = NULL;
  CLT_ARG(out);
  int rc = clt__plan_create(&clt__kind_reduce_scatter, comm, count, counts, dtype, op, opts, &p);
  *out = (clt_reduce_scatter_plan *)p;
  return rc;
}

void clt_reduce_scatter_plan_destroy(clt_reduce_scatter_plan *plan) { clt__plan_destroy(plan ? &plan->p : NULL); }

size_t clt_reduce_scatter_plan_count(const clt_reduce_scatter_plan *plan) { return plan ? plan->p.count : 0; }

int clt_reduce_scatter_plan_part(const clt_reduce_scatter_plan *plan, int rank, size_t *offset, size_t *n) {
  return plan_part(plan ? &plan->p : NULL, "clt_reduce_scatter_plan_part", rank, offset, n);
}

const char *clt_reduce_scatter_plan_algorithm(const clt_reduce_scatter_plan *plan) {
  return clt_allreduce_plan_algorithm(plan ? &plan->p : NULL);
}

int clt_reduce_scatter_run(clt_reduce_scatter_plan *plan, void *buf) {
  CLT_HANDLE(plan, "plan");
  return clt__plan_run(&plan->p, buf);
}

int clt_reduce_scatter_run_devices(clt_reduce_scatter_plan *plan, int n, const cl_command_queue *queues,
                                   const cl_mem *bufs, const size_t *offsets) {
  CLT_HANDLE(plan, "plan");
  return clt__allreduce_run_devices_split(&plan->p, n, queues, queues, bufs, offsets);
}

int clt_reduce_scatter_run_device(clt_reduce_scatter_plan *plan, cl_command_queue queue, cl_mem buf, size_t offset) {
  CLT_HANDLE(plan, "plan");
  CLT_ARG(queue);
  CLT_ARG(buf);
  return clt_reduce_scatter_run_devices(plan, 1, &queue, &buf, &offset);
}

/* ---- allgather ---- */

int clt_allgather_plan_create(clt_comm *comm, size_t count, const size_t *counts, clt_dtype dtype,
                              const clt_allreduce_opts *opts, clt_allgather_plan **out) {
  clt_allreduce_plan *p = NULL;
  CLT_ARG(out);
  int rc = clt__plan_create(&clt__kind_allgather, comm, count, counts, dtype, CLT_SUM, opts, &p);
  *out = (clt_allgather_plan *)p;
  return rc;
}

void clt_allgather_plan_destroy(clt_allgather_plan *plan) { clt__plan_destroy(plan ? &plan->p : NULL); }

size_t clt_allgather_plan_count(const clt_allgather_plan *plan) { return plan ? plan->p.count : 0; }

int clt_allgather_plan_part(const clt_allgather_plan *plan, int rank, size_t *offset, size_t *n) {
  return plan_part(plan ? &plan->p : NULL, "clt_allgather_plan_part", rank, offset, n);
}

int clt_allgather_run(clt_allgather_plan *plan, void *buf) {
  CLT_HANDLE(plan, "plan");
  return clt__plan_run(&plan->p, buf);
}

int clt_allgather_run_devices(clt_allgather_plan *plan, int n, const cl_command_queue *queues, const cl_mem *bufs,
                              const size_t *offsets) {
  CLT_HANDLE(plan, "plan");
  return clt__allreduce_run_devices_split(&plan->p, n, queues, queues, bufs, offsets);
}

int clt_allgather_run_device(clt_allgather_plan *plan, cl_command_queue queue, cl_mem buf, size_t offset) {
  CLT_HANDLE(plan, "plan");
  CLT_ARG(queue);
  CLT_ARG(buf);
  return clt_allgather_run_devices(plan, 1, &queue, &buf, &offset);
}

clt_allreduce_plan *clt__reduce_scatter_base(clt_reduce_scatter_plan *plan) { return plan ? &plan->p : NULL; }

/* ---- an allgather in place (shm_gather.c) ---- */

int clt__allgather_plan_create_window(clt_comm *comm, size_t count, const size_t *counts, clt_dtype dtype,
                                      clt_allgather_plan **out) {
  clt_allreduce_plan *p = NULL;
  clt_allreduce_opts ao = {0, 1};
  int rc = clt__plan_create(&clt__kind_allgather_window, comm, count, counts, dtype, CLT_SUM, &ao, &p);
  *out = (clt_allgather_plan *)p;
  return rc;
}

void *clt__allgather_window_block(const clt_allgather_plan *plan, int rank, int next) {
  struct clt__shm_gather *g = plan ? clt__shm_plan_gather(&plan->p) : NULL;
  if (!g || rank < 0 || rank >= plan->p.comm->size) return NULL;
  return clt__shm_gather_block(g, rank, next);
}

size_t clt__allgather_window_bytes(const clt_allgather_plan *plan) {
  return plan ? clt__shm_gather_bytes(clt__shm_plan_gather(&plan->p)) : 0;
}

int clt__allgather_run_filled(clt_allgather_plan *plan) {
  clt__op op;
  int rc;
  struct clt__shm_gather *g = plan ? clt__shm_plan_gather(&plan->p) : NULL;
  if (!g)
    return clt__error(CLT_EINTERNAL, "clt__allgather_run_filled: %s", plan ? "the plan has no window" : "no plan");
  if ((rc = clt__allreduce_begin(&plan->p, &op)) < 0) return rc;
  return clt__shm_gather_exec(g, &op, NULL);
}
