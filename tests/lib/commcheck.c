/*
 * commcheck.c: the checks each all-reduce algorithm's test runs
 * (commcheck.h).
 */
#include "commcheck.h"

#include <stdint.h>
#include <stdlib.h>

#include <mpi.h>

#include <cltrain/mpi.h>

#include "commtest.h"
#include "testutil.h"

void cc_identical_across_ranks(const void *buf, size_t bytes, const char *what) {
  int nranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  uint64_t h = ct_hash(buf, bytes), *all = calloc((size_t)nranks, sizeof *all);
  MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (int r = 1; r < nranks; r++)
    ck_assert_msg(all[r] == all[0], "%s: rank %d's result differs in bits from rank 0's", what, r);
  free(all);
}

void cc_check_host(clt_comm *comm, size_t n, size_t chunk, clt_reduce_op op, int salt, const char *algorithm,
                   const char *what) {
  int rank = clt_comm_rank(comm), nranks = clt_comm_size(comm);
  clt_allreduce_plan *plan = NULL;
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  float *x = malloc((n + 1) * sizeof *x), *want = malloc((n + 1) * sizeof *want);
  ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F32, op, &opts, &plan) == 0, "%s", clt_last_error());
  ck_assert_str_eq(clt_allreduce_plan_algorithm(plan), algorithm);
  ct_expect(want, n, nranks, 1, salt, op == CLT_AVG);
  for (int run = 0; run < 2; run++) {
    ct_fill(x, n, rank * CT_MAX_REPLICAS, salt);
    ck_assert_msg(clt_allreduce_run(plan, n ? x : NULL) == 0, "%s", clt_last_error());
    long bad = ct_first_diff(x, want, n);
    ck_assert_msg(bad < 0, "%s: count %zu chunk %zu %s, run %d: element %ld is %g, expected %g", what, n, chunk,
                  clt_reduce_op_name(op), run, bad, bad < 0 ? 0 : x[bad], bad < 0 ? 0 : want[bad]);
  }
  cc_identical_across_ranks(x, n * sizeof *x, what);
  clt_allreduce_plan_destroy(plan);
  free(x), free(want);
}

void cc_check_f16(clt_comm *comm, size_t n, size_t chunk, clt_reduce_op op, clt_context *ctx, int salt,
                  const char *order, const char *what) {
  int rank = clt_comm_rank(comm), nranks = clt_comm_size(comm);
  clt_allreduce_plan *plan = NULL;
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  uint16_t *x = malloc((n + 1) * sizeof *x), *want = malloc((n + 1) * sizeof *want);
  for (size_t i = 0; i < n; i++) x[i] = ct_half_input(i, rank * CT_MAX_REPLICAS, salt);
  ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F16, op, &opts, &plan) == 0, "%s", clt_last_error());
  if (ctx) {
    cl_mem buf = ct_f16_buffer(ctx, x, n + 1);
    ck_assert_msg(clt_allreduce_run_device(plan, clt_context_queue(ctx), buf, 0) == 0, "%s", clt_last_error());
    ct_f16_read(ctx, buf, 0, x, n);
    clReleaseMemObject(buf);
  } else {
    ck_assert_msg(clt_allreduce_run(plan, n ? x : NULL) == 0, "%s", clt_last_error());
  }
  if (order) {
    ct_expect_f16(want, n, nranks, 1, salt, op == CLT_AVG, order);
    long bad = ct_first_diff_f16(x, want, n);
    ck_assert_msg(bad < 0, "%s: f16 %s %zu %s: element %ld is 0x%04x, the serial sum in %s's order 0x%04x", what,
                  ctx ? "device" : "host", n, clt_reduce_op_name(op), bad, bad < 0 ? 0 : x[bad], order,
                  bad < 0 ? 0 : want[bad]);
  } else if (op == CLT_SUM) {
    long bad = ct_f16_off_exact(x, n, nranks, 1, salt);
    ck_assert_msg(bad < 0, "%s: f16 %s %zu: element %ld (0x%04x) is off the exact sum by more than rounding", what,
                  ctx ? "device" : "host", n, bad, bad < 0 ? 0 : x[bad]);
  }
  cc_identical_across_ranks(x, n * sizeof *x, what);
  clt_allreduce_plan_destroy(plan);
  free(x), free(want);
}

void cc_check_device(clt_comm *comm, clt_context *ctx, const size_t *sizes, const size_t *chunks, size_t nsizes,
                     const char *what) {
  int rank = clt_comm_rank(comm), nranks = clt_comm_size(comm);
  for (size_t t = 0; t < nsizes; t++) {
    size_t n = sizes[t], pad = 2;
    clt_reduce_op op = t == 2 ? CLT_AVG : CLT_SUM;
    float *host = malloc((n + 2 * pad) * sizeof *host), *want = malloc((n + 1) * sizeof *want);
    for (size_t i = 0; i < n + 2 * pad; i++) host[i] = 777.0f;
    ct_fill(host + pad, n, rank * CT_MAX_REPLICAS, (int)t);
    ct_expect(want, n, nranks, 1, (int)t, op == CLT_AVG);
    cl_mem buf = tu_buffer(ctx, host, n + 2 * pad);
    clt_allreduce_plan *plan = NULL;
    clt_allreduce_opts opts = {.chunk_bytes = chunks[t]};
    ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F32, op, &opts, &plan) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_allreduce_run_device(plan, clt_context_queue(ctx), buf, pad * sizeof(float)) == 0, "%s: %s",
                  tu_name(ctx), clt_last_error());
    tu_read(ctx, buf, 0, host, n + 2 * pad);
    ck_assert_msg(host[0] == 777.0f && host[n + 2 * pad - 1] == 777.0f, "%s: %zu elements: a guard was written",
                  what, n);
    ck_assert_int_eq(ct_first_diff(host + pad, want, n), -1);
    cc_identical_across_ranks(host + pad, n * sizeof *host, what);
    clt_allreduce_plan_destroy(plan);
    clReleaseMemObject(buf);
    free(host), free(want);
  }
}

void cc_check_two_replicas(clt_comm *comm, clt_context *const ctx[2], size_t n, size_t chunk, int avg) {
  int rank = clt_comm_rank(comm), nranks = clt_comm_size(comm);
  size_t offs[2] = {0, 0};
  float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *want);
  cl_mem bufs[2];
  cl_command_queue queues[2];
  for (int q = 0; q < 2; q++) {
    ct_fill(x, n, rank * CT_MAX_REPLICAS + q, 9);
    bufs[q] = tu_buffer(ctx[q], x, n);
    queues[q] = clt_context_queue(ctx[q]);
  }
  ct_expect(want, n, nranks, 2, 9, avg);
  clt_allreduce_plan *plan = NULL;
  clt_allreduce_opts opts = {.replicas = 2, .chunk_bytes = chunk};
  ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F32, avg ? CLT_AVG : CLT_SUM, &opts, &plan) == 0, "%s",
                clt_last_error());
  ck_assert_msg(clt_allreduce_run_devices(plan, 2, queues, bufs, offs) == 0, "%s", clt_last_error());
  for (int q = 0; q < 2; q++) {
    tu_read(ctx[q], bufs[q], 0, x, n);
    ck_assert_int_eq(ct_first_diff(x, want, n), -1);
    clReleaseMemObject(bufs[q]);
  }
  clt_allreduce_plan_destroy(plan);
  free(x), free(want);
}
