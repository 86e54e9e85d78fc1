/*
 * test_collectives.c: the collectives across real MPI ranks (run by tests/comm/comm.sh
 * under mpirun with 1 to 4 ranks): all-reduce of host and device buffers
 * (exact sums, averages, random data against a serial sum, odd counts,
 * counts below the number of ranks and zero, many chunks, both algorithms),
 * bitwise identity across ranks, two devices in one process, broadcast and
 * allgather; the same for fp16, against the documented order of roundings,
 * with inf and NaN on one rank reaching every rank.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain/mpi.h>

#include "commtest.h"
#include "testutil.h"

static clt_comm *comm;
static int rank, nranks;

/* Counts around every edge: zero, below the number of ranks, odd, one
 * chunk and many, both sides of the recursive-doubling threshold. */
static const size_t counts[] = {0, 1, 2, 3, 5, 7, 17, 1000, 8191, 8193, 100003};
#define NCOUNTS (sizeof counts / sizeof counts[0])

/* Every rank's hash of buf equals rank 0's. */
static void assert_identical_across_ranks(const void *buf, size_t bytes, const char *what) {
  uint64_t h = ct_hash(buf, bytes), *all = calloc((size_t)nranks, sizeof *all);
  MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (int r = 1; r < nranks; r++)
    ck_assert_msg(all[r] == all[0], "%s: rank %d's result differs in bits from rank 0's", what, r);
  free(all);
}

/* One host all-reduce of n elements with the given chunk, checked exactly. */
static void check_host(size_t n, size_t chunk, clt_reduce_op op, int salt) {
  clt_allreduce_plan *plan = NULL;
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  float *x = malloc((n + 1) * sizeof *x), *want = malloc((n + 1) * sizeof *want);
  ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F32, op, &opts, &plan) == 0, "%s", clt_last_error());
  ck_assert_uint_eq(clt_allreduce_plan_count(plan), n);
  ct_fill(x, n, rank * CT_MAX_REPLICAS, salt);
  ct_expect(want, n, nranks, 1, salt, op == CLT_AVG);
  /* Twice: a plan runs many times. */
  for (int run = 0; run < 2; run++) {
    if (run) ct_fill(x, n, rank * CT_MAX_REPLICAS, salt);
    ck_assert_msg(clt_allreduce_run(plan, n ? x : NULL) == 0, "%s", clt_last_error());
    long bad = ct_first_diff(x, want, n);
    ck_assert_msg(bad < 0, "count %zu chunk %zu %s (%s), run %d: element %ld is %g, expected %g", n, chunk,
                  clt_reduce_op_name(op), clt_allreduce_plan_algorithm(plan), run, bad, bad < 0 ? 0 : x[bad],
                  bad < 0 ? 0 : want[bad]);
  }
  assert_identical_across_ranks(x, n * sizeof *x, "host all-reduce");
  clt_allreduce_plan_destroy(plan);
  free(x);
  free(want);
}

START_TEST(host_exact_sums) {
  for (size_t i = 0; i < NCOUNTS; i++) check_host(counts[i], 0, CLT_SUM, (int)i);
}
END_TEST

START_TEST(host_averages) {
  for (size_t i = 0; i < NCOUNTS; i++) check_host(counts[i], 0, CLT_AVG, (int)i + 100);
}
END_TEST

START_TEST(host_many_chunks) {
  /* Chunks of one element, of 16, and the default 1 MiB over 1.5 segments'
   * worth of chunks: the pipeline's windows all fill and drain. */
  check_host(37, 4, CLT_SUM, 1);
  check_host(10007, 64, CLT_SUM, 2);
  check_host(10007, 64, CLT_AVG, 3);
  check_host((size_t)nranks * 393216 + 3, 0, CLT_SUM, 4);
}
END_TEST

/* Random floats: the result must match a serial double-precision sum to
 * float32 rounding. Each of the N - 1 additions on the way rounds once, by
 * at most 2^-24 of the partial sum, so |error| <= N 2^-24 sum |x|. */
START_TEST(random_against_serial_sum) {
  const size_t sizes[] = {1000, 50001};
  for (size_t t = 0; t < 2; t++) {
    size_t n = sizes[t];
    clt_allreduce_plan *plan = NULL;
    float *x = malloc(n * sizeof *x), *other = malloc(n * sizeof *other);
    double *sum = calloc(n, sizeof *sum), *abs_sum = calloc(n, sizeof *abs_sum);
    for (int r = 0; r < nranks; r++) {
      ref_random(other, n, 1000u + (unsigned)r);
      for (size_t i = 0; i < n; i++) sum[i] += other[i], abs_sum[i] += fabs(other[i]);
    }
    ref_random(x, n, 1000u + (unsigned)rank);
    clt_allreduce_opts opts = {.chunk_bytes = 4096};
    ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F32, CLT_SUM, &opts, &plan) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_allreduce_run(plan, x) == 0, "%s", clt_last_error());
    for (size_t i = 0; i < n; i++) {
      double tol = nranks * ldexp(1.0, -24) * abs_sum[i] + 1e-30;
      ck_assert_msg(fabs(x[i] - sum[i]) <= tol, "n %zu element %zu: %.9g, serial sum %.9g (tolerance %g)", n, i, x[i],
                    sum[i], tol);
    }
    assert_identical_across_ranks(x, n * sizeof *x, "random all-reduce");
    clt_allreduce_plan_destroy(plan);
    free(x), free(other), free(sum), free(abs_sum);
  }
}
END_TEST

/* A buffer of the application's own (not clt_buffer_create's, so never
 * host-shared): on a device whose memory is the host's it is mapped,
 * elsewhere staged. */
static cl_mem own_buffer(clt_context *ctx, const float *host, size_t n) {
  cl_int e = CL_SUCCESS;
  cl_mem buf = clCreateBuffer(clt_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof *host,
                              (void *)host, &e);
  ck_assert_int_eq(e, CL_SUCCESS);
  return buf;
}

/* Device buffers at a byte offset, with guard values around the range that
 * must stay untouched; `own`: the application's buffer, else
 * clt_buffer_create's (host-shared on PoCL). */
static void check_device(clt_context *ctx, size_t n, size_t chunk, clt_reduce_op op, int salt, int own) {
  const size_t pad = 3;
  clt_allreduce_plan *plan = NULL;
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  float *host = malloc((n + 2 * pad) * sizeof *host), *want = malloc((n + 1) * sizeof *want);
  for (size_t i = 0; i < n + 2 * pad; i++) host[i] = 777.0f;
  ct_fill(host + pad, n, rank * CT_MAX_REPLICAS, salt);
  ct_expect(want, n, nranks, 1, salt, op == CLT_AVG);
  cl_mem buf = own ? own_buffer(ctx, host, n + 2 * pad) : tu_buffer(ctx, host, n + 2 * pad);
  ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F32, op, &opts, &plan) == 0, "%s", clt_last_error());
  for (int run = 0; run < 2; run++) {
    if (run) ck_assert_int_eq(clEnqueueWriteBuffer(clt_context_queue(ctx), buf, CL_TRUE, 0,
                                                   (n + 2 * pad) * sizeof *host, host, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_msg(clt_allreduce_run_device(plan, clt_context_queue(ctx), buf, pad * sizeof(float)) == 0, "%s: %s",
                  tu_name(ctx), clt_last_error());
    float *got = malloc((n + 2 * pad) * sizeof *got);
    tu_read(ctx, buf, 0, got, n + 2 * pad);
    for (size_t i = 0; i < pad; i++)
      ck_assert_msg(got[i] == 777.0f && got[n + pad + i] == 777.0f, "%s: the guard values moved", tu_name(ctx));
    long bad = ct_first_diff(got + pad, want, n);
    ck_assert_msg(bad < 0, "%s: count %zu chunk %zu (%s): element %ld is %g, expected %g", tu_name(ctx), n, chunk,
                  clt_allreduce_plan_algorithm(plan), bad, bad < 0 ? 0 : got[pad + bad], bad < 0 ? 0 : want[bad]);
    assert_identical_across_ranks(got + pad, n * sizeof *got, "device all-reduce");
    free(got);
  }
  clt_allreduce_plan_destroy(plan);
  clReleaseMemObject(buf);
  free(host);
  free(want);
}

START_TEST(device_buffers) {
  if (tu_ndev == 0) return;
  const size_t sizes[] = {1, 3, 17, 1000, 20011};
  for (int d = 0; d < tu_ndev; d++) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      check_device(tu_ctx[d], sizes[i], 256, i % 2 ? CLT_AVG : CLT_SUM, (int)i, 0);
    /* The application's own buffers: mapped or staged, never in place. */
    check_device(tu_ctx[d], 17, 256, CLT_SUM, 10, 1);
    check_device(tu_ctx[d], 20011, 256, CLT_AVG, 11, 1);
  }
  /* Default chunk: one staging chunk per segment. */
  check_device(tu_ctx[0], 100003, 0, CLT_SUM, 9, 0);
}
END_TEST

/* The all-reduce starts after the work queued before it, and what is
 * queued after it sees the result, whichever way the buffer is reduced
 * (in place on a host-shared buffer, mapped, or staged): each rank fills
 * its buffer (and a sub-buffer's region) with a kernel-side fill it does
 * not wait for, then all-reduces and reads the result with a copy queued
 * behind. */
START_TEST(device_buffers_follow_the_queue) {
  if (tu_ndev == 0) return;
  const size_t n = 70001, sub_at = 1024; /* floats; the sub-buffer's origin is 4 KiB in */
  for (int d = 0; d < tu_ndev; d++)
    for (int own = 0; own < 2; own++) {
      clt_context *ctx = tu_ctx[d];
      cl_command_queue q = clt_context_queue(ctx);
      float *zeros = calloc(n, sizeof *zeros), *got = malloc(n * sizeof *got);
      cl_mem buf = own ? own_buffer(ctx, zeros, n) : tu_buffer(ctx, zeros, n);
      cl_buffer_region region = {sub_at * sizeof(float), (n - sub_at) * sizeof(float)};
      cl_int e = CL_SUCCESS;
      cl_mem sub = clCreateSubBuffer(buf, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &e);
      ck_assert_int_eq(e, CL_SUCCESS);
      clt_allreduce_plan *plan = NULL, *subplan = NULL;
      ck_assert_int_eq(clt_allreduce_plan_create(comm, n, CLT_F32, CLT_SUM, NULL, &plan), 0);
      ck_assert_int_eq(clt_allreduce_plan_create(comm, 100, CLT_F32, CLT_SUM, NULL, &subplan), 0);
      float v = (float)(rank + 1);
      ck_assert_int_eq(clEnqueueFillBuffer(q, buf, &v, sizeof v, 0, n * sizeof v, 0, NULL, NULL), CL_SUCCESS);
      ck_assert_msg(clt_allreduce_run_device(plan, q, buf, 0) == 0, "%s: %s", tu_name(ctx), clt_last_error());
      /* Then elements [sub_at + 8, sub_at + 108) once more, through the sub-buffer. */
      ck_assert_msg(clt_allreduce_run_device(subplan, q, sub, 8 * sizeof(float)) == 0, "%s: %s", tu_name(ctx),
                    clt_last_error());
      ck_assert_int_eq(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, n * sizeof *got, got, 0, NULL, NULL), CL_SUCCESS);
      float once = (float)(nranks * (nranks + 1) / 2), twice = once * (float)nranks;
      for (size_t i = 0; i < n; i++) {
        float want = i >= sub_at + 8 && i < sub_at + 108 ? twice : once;
        ck_assert_msg(got[i] == want, "%s, %s buffer: element %zu is %g, expected %g", tu_name(ctx),
                      own ? "the application's" : "clt_buffer_create's", i, got[i], want);
      }
      clt_allreduce_plan_destroy(plan);
      clt_allreduce_plan_destroy(subplan);
      clReleaseMemObject(sub);
      clReleaseMemObject(buf);
      free(zeros), free(got);
    }
}
END_TEST

/* Two replicas per rank (PoCL and rusticl when both exist): summed locally,
 * then across ranks, written back to both. */
START_TEST(two_devices_per_process) {
  if (tu_ndev == 0) return;
  clt_context *ctx[2] = {tu_ctx[0], tu_ctx[1 % tu_ndev]};
  const size_t sizes[] = {5, 5000, 30011};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    size_t n = sizes[t];
    clt_reduce_op op = t == 1 ? CLT_AVG : CLT_SUM;
    clt_allreduce_plan *plan = NULL;
    clt_allreduce_opts opts = {.chunk_bytes = 2048, .replicas = 2};
    float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    cl_mem bufs[2];
    cl_command_queue queues[2];
    size_t offs[2] = {0, 0};
    for (int q = 0; q < 2; q++) {
      ct_fill(x, n, rank * CT_MAX_REPLICAS + q, (int)t);
      bufs[q] = tu_buffer(ctx[q], x, n);
      queues[q] = clt_context_queue(ctx[q]);
    }
    ct_expect(want, n, nranks, 2, (int)t, op == CLT_AVG);
    ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F32, op, &opts, &plan) == 0, "%s", clt_last_error());
    ck_assert_int_eq(clt_allreduce_run_device(plan, queues[0], bufs[0], 0), CLT_EINVAL); /* 1 buffer, 2 replicas */
    ck_assert_int_eq(clt_allreduce_run(plan, x), CLT_EINVAL);
    ck_assert_msg(clt_allreduce_run_devices(plan, 2, queues, bufs, offs) == 0, "%s", clt_last_error());
    for (int q = 0; q < 2; q++) {
      tu_read(ctx[q], bufs[q], 0, got, n);
      long bad = ct_first_diff(got, want, n);
      ck_assert_msg(bad < 0, "replica %d (%s), count %zu: element %ld is %g, expected %g", q, tu_name(ctx[q]), n, bad,
                    bad < 0 ? 0 : got[bad], bad < 0 ? 0 : want[bad]);
      clReleaseMemObject(bufs[q]);
    }
    assert_identical_across_ranks(got, n * sizeof *got, "two-replica all-reduce");
    clt_allreduce_plan_destroy(plan);
    free(x), free(want), free(got);
  }
}
END_TEST

/* ---- fp16 -------------------------------------------------------------------
 * Inputs of either sign over 24 binades (ct_half_input), so the order of
 * the roundings shows: the result must equal, bit for bit, the reduction
 * done serially in the documented order (commtest.c), be within the
 * rounding of each step of the exact sum, and be the same on every rank. */

/* Counts around every edge for 2-byte elements: zero, below the number of
 * ranks, odd, either side of the small-message limit (32 KiB), many chunks. */
static const size_t f16_counts[] = {0, 1, 2, 3, 5, 7, 17, 1000, 16383, 16385, 100003};
#define F16_NCOUNTS (sizeof f16_counts / sizeof f16_counts[0])

static void check_f16_result(const uint16_t *got, const uint16_t *want, size_t n, int replicas, int salt, int avg,
                             const char *what) {
  long bad = ct_first_diff_f16(got, want, n);
  ck_assert_msg(bad < 0, "%s: element %ld is 0x%04x (%g), expected 0x%04x (%g)", what, bad, bad < 0 ? 0 : got[bad],
                bad < 0 ? 0 : ct_half_value(got[bad]), bad < 0 ? 0 : want[bad], bad < 0 ? 0 : ct_half_value(want[bad]));
  if (!avg) {
    bad = ct_f16_off_exact(got, n, nranks, replicas, salt);
    ck_assert_msg(bad < 0, "%s: element %ld (%g) is further from the exact sum than rounding allows", what, bad,
                  bad < 0 ? 0 : ct_half_value(got[bad]));
  }
  assert_identical_across_ranks(got, n * sizeof *got, what);
}

static void check_host_f16(clt_comm *c, size_t n, size_t chunk, clt_reduce_op op, int salt) {
  clt_allreduce_plan *plan = NULL;
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  uint16_t *x = malloc((n + 1) * sizeof *x), *want = malloc((n + 1) * sizeof *want);
  char what[128];
  ck_assert_msg(clt_allreduce_plan_create(c, n, CLT_F16, op, &opts, &plan) == 0, "%s", clt_last_error());
  ct_expect_f16(want, n, nranks, 1, salt, op == CLT_AVG, clt_allreduce_plan_algorithm(plan));
  snprintf(what, sizeof what, "f16 host, count %zu chunk %zu %s (%s)", n, chunk, clt_reduce_op_name(op),
           clt_allreduce_plan_algorithm(plan));
  for (int run = 0; run < 2; run++) { /* a plan runs many times */
    for (size_t i = 0; i < n; i++) x[i] = ct_half_input(i, rank * CT_MAX_REPLICAS, salt);
    ck_assert_msg(clt_allreduce_run(plan, n ? x : NULL) == 0, "%s", clt_last_error());
    check_f16_result(x, want, n, 1, salt, op == CLT_AVG, what);
  }
  clt_allreduce_plan_destroy(plan);
  free(x), free(want);
}

/* A communicator that always runs the ring, even for a few elements. */
static clt_comm *ring_only_comm(void) {
  clt_comm *c = NULL;
  char *old = getenv("CLT_ALLREDUCE_SMALL") ? strdup(getenv("CLT_ALLREDUCE_SMALL")) : NULL; /* tests/comm/comm.sh's */
  setenv("CLT_ALLREDUCE_SMALL", "0", 1);
  ck_assert_msg(clt_comm_create(MPI_COMM_WORLD, &c) == 0, "%s", clt_last_error());
  if (old) setenv("CLT_ALLREDUCE_SMALL", old, 1);
  else unsetenv("CLT_ALLREDUCE_SMALL");
  free(old);
  ck_assert_int_eq(clt_comm_set_allreduce(c, "ring"), 0); /* not shm, which the model may prefer */
  return c;
}

START_TEST(host_f16) {
  clt_comm *ring = ring_only_comm();
  for (size_t i = 0; i < F16_NCOUNTS; i++) {
    check_host_f16(comm, f16_counts[i], 0, CLT_SUM, (int)i);
    check_host_f16(comm, f16_counts[i], 0, CLT_AVG, (int)i + 100);
    if (f16_counts[i] <= 1000) check_host_f16(ring, f16_counts[i], 0, CLT_SUM, (int)i + 200);
  }
  check_host_f16(ring, 37, 2, CLT_SUM, 1); /* chunks of one element */
  check_host_f16(comm, 10007, 64, CLT_AVG, 2);
  clt_comm_destroy(ring);
}
END_TEST

/* The trainer skips a step on every rank when the gradients are not finite
 * anywhere: an inf or NaN on one rank, or a sum beyond 65504, must come out
 * non-finite on every rank, small messages and ring alike. */
static void check_non_finite(clt_comm *c, size_t n, clt_context *ctx) {
  clt_allreduce_plan *plan = NULL;
  uint16_t *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = ct_half_input(i, rank, 7);
  if (rank == nranks - 1) x[1] = 0x7c00, x[4] = 0xfc00; /* +inf; -inf */
  if (rank == 0) x[2] = 0x7e01, x[4] = 0x7c00;         /* NaN; +inf (+ -inf elsewhere: NaN) */
  x[3] = 0x7bff;                                       /* 65504 everywhere: the sum overflows */
  x[n - 1] = rank == nranks / 2 ? 0xfc00 : x[n - 1];   /* -inf in the last segment of the ring */
  ck_assert_msg(clt_allreduce_plan_create(c, n, CLT_F16, CLT_SUM, NULL, &plan) == 0, "%s", clt_last_error());
  if (ctx) {
    cl_mem buf = ct_f16_buffer(ctx, x, n);
    ck_assert_msg(clt_allreduce_run_device(plan, clt_context_queue(ctx), buf, 0) == 0, "%s", clt_last_error());
    ct_f16_read(ctx, buf, 0, x, n);
    clReleaseMemObject(buf);
  } else {
    ck_assert_msg(clt_allreduce_run(plan, x) == 0, "%s", clt_last_error());
  }
  const char *alg = clt_allreduce_plan_algorithm(plan);
  ck_assert_msg(x[1] == 0x7c00, "%s, %zu elements: inf from rank %d gave 0x%04x", alg, n, nranks - 1, x[1]);
  /* One rank adds nothing: its NaN stays as it was. */
  ck_assert_msg(x[2] == (nranks == 1 ? 0x7e01 : 0x7e00), "%s, %zu elements: NaN from rank 0 gave 0x%04x", alg, n, x[2]);
  ck_assert_msg(nranks == 1 || x[3] == 0x7c00, "%s, %zu elements: %d x 65504 gave 0x%04x", alg, n, nranks, x[3]);
  ck_assert_msg(nranks == 1 || x[4] == 0x7e00, "%s, %zu elements: inf - inf gave 0x%04x", alg, n, x[4]);
  ck_assert_msg(x[n - 1] == 0xfc00, "%s, %zu elements: -inf gave 0x%04x", alg, n, x[n - 1]);
  for (size_t i = 5; i < n - 1; i++) ck_assert_msg(ct_half_finite(x[i]), "%s: element %zu is not finite", alg, i);
  assert_identical_across_ranks(x, n * sizeof *x, "f16 all-reduce with inf and NaN");
  clt_allreduce_plan_destroy(plan);
  free(x);
}

START_TEST(f16_non_finite_reaches_every_rank) {
  clt_comm *ring = ring_only_comm();
  const size_t sizes[] = {7, 50001};
  for (size_t t = 0; t < 2; t++) {
    check_non_finite(comm, sizes[t], NULL);
    check_non_finite(ring, sizes[t], NULL);
    if (tu_ndev) check_non_finite(comm, sizes[t], tu_ctx[rank % tu_ndev]);
  }
  clt_comm_destroy(ring);
}
END_TEST

/* fp16 device buffers at an element offset, between guard values. */
static void check_device_f16(clt_context *ctx, size_t n, size_t chunk, clt_reduce_op op, int salt) {
  const size_t pad = 3;
  const uint16_t guard = 0x1234;
  clt_allreduce_plan *plan = NULL;
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  uint16_t *host = malloc((n + 2 * pad) * sizeof *host), *want = malloc(n * sizeof *want);
  char what[160];
  for (size_t i = 0; i < n + 2 * pad; i++) host[i] = guard;
  for (size_t i = 0; i < n; i++) host[pad + i] = ct_half_input(i, rank * CT_MAX_REPLICAS, salt);
  cl_mem buf = ct_f16_buffer(ctx, host, n + 2 * pad);
  ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F16, op, &opts, &plan) == 0, "%s", clt_last_error());
  ct_expect_f16(want, n, nranks, 1, salt, op == CLT_AVG, clt_allreduce_plan_algorithm(plan));
  snprintf(what, sizeof what, "f16 device %s, count %zu chunk %zu %s (%s)", tu_name(ctx), n, chunk,
           clt_reduce_op_name(op), clt_allreduce_plan_algorithm(plan));
  for (int run = 0; run < 2; run++) {
    uint16_t *got = malloc((n + 2 * pad) * sizeof *got);
    if (run)
      ck_assert_int_eq(clEnqueueWriteBuffer(clt_context_queue(ctx), buf, CL_TRUE, 0, (n + 2 * pad) * sizeof *host,
                                            host, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_msg(clt_allreduce_run_device(plan, clt_context_queue(ctx), buf, pad * sizeof *host) == 0, "%s: %s",
                  what, clt_last_error());
    ct_f16_read(ctx, buf, 0, got, n + 2 * pad);
    for (size_t i = 0; i < pad; i++)
      ck_assert_msg(got[i] == guard && got[n + pad + i] == guard, "%s: the guard values moved", what);
    check_f16_result(got + pad, want, n, 1, salt, op == CLT_AVG, what);
    free(got);
  }
  clt_allreduce_plan_destroy(plan);
  clReleaseMemObject(buf);
  free(host), free(want);
}

START_TEST(device_buffers_f16) {
  if (tu_ndev == 0) return;
  const size_t sizes[] = {1, 3, 17, 1000, 20011};
  for (int d = 0; d < tu_ndev; d++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      check_device_f16(tu_ctx[d], sizes[i], 256, i % 2 ? CLT_AVG : CLT_SUM, (int)i + 300);
  check_device_f16(tu_ctx[0], 100003, 0, CLT_SUM, 309);
}
END_TEST

/* Two fp16 replicas per rank: added in float and rounded once, then the
 * ring (or a small-message algorithm) across ranks. */
START_TEST(two_devices_per_process_f16) {
  if (tu_ndev == 0) return;
  clt_context *ctx[2] = {tu_ctx[0], tu_ctx[1 % tu_ndev]};
  const size_t sizes[] = {5, 5000, 30011};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    size_t n = sizes[t];
    int salt = (int)t + 400;
    clt_reduce_op op = t == 1 ? CLT_AVG : CLT_SUM;
    clt_allreduce_plan *plan = NULL;
    clt_allreduce_opts opts = {.chunk_bytes = 2048, .replicas = 2};
    uint16_t *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    cl_mem bufs[2];
    cl_command_queue queues[2];
    for (int q = 0; q < 2; q++) {
      for (size_t i = 0; i < n; i++) x[i] = ct_half_input(i, rank * CT_MAX_REPLICAS + q, salt);
      bufs[q] = ct_f16_buffer(ctx[q], x, n);
      queues[q] = clt_context_queue(ctx[q]);
    }
    ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F16, op, &opts, &plan) == 0, "%s", clt_last_error());
    ct_expect_f16(want, n, nranks, 2, salt, op == CLT_AVG, clt_allreduce_plan_algorithm(plan));
    ck_assert_msg(clt_allreduce_run_devices(plan, 2, queues, bufs, NULL) == 0, "%s", clt_last_error());
    for (int q = 0; q < 2; q++) {
      char what[160];
      snprintf(what, sizeof what, "f16 replica %d (%s), count %zu %s (%s)", q, tu_name(ctx[q]), n,
               clt_reduce_op_name(op), clt_allreduce_plan_algorithm(plan));
      ct_f16_read(ctx[q], bufs[q], 0, got, n);
      check_f16_result(got, want, n, 2, salt, op == CLT_AVG, what);
      clReleaseMemObject(bufs[q]);
    }
    clt_allreduce_plan_destroy(plan);
    free(x), free(want), free(got);
  }
}
END_TEST

START_TEST(broadcast) {
  const size_t sizes[] = {0, 1, 13, 4099, 300007};
  for (int root = 0; root < nranks; root++)
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
      size_t n = sizes[t];
      unsigned char *buf = malloc(n + 1);
      for (size_t i = 0; i < n; i++) buf[i] = rank == root ? (unsigned char)(i * 31 + root + t) : 0xEE;
      ck_assert_msg(clt_bcast(comm, buf, n, root) == 0, "%s", clt_last_error());
      for (size_t i = 0; i < n; i++)
        ck_assert_msg(buf[i] == (unsigned char)(i * 31 + root + t), "root %d, %zu bytes: byte %zu is wrong", root, n,
                      i);
      free(buf);
    }
}
END_TEST

START_TEST(broadcast_devices) {
  if (tu_ndev == 0) return;
  const size_t n = 10007;
  cl_mem bufs[2];
  cl_command_queue queues[2];
  size_t offs[2] = {8, 0};
  float *x = malloc((n + 2) * sizeof *x);
  int nbuf = tu_ndev > 1 ? 2 : 1;
  for (int q = 0; q < nbuf; q++) {
    for (size_t i = 0; i < n + 2; i++) x[i] = rank == 0 && q == 0 ? (float)i : -1.0f;
    bufs[q] = tu_buffer(tu_ctx[q], x, n + 2);
    queues[q] = clt_context_queue(tu_ctx[q]);
  }
  ck_assert_msg(clt_bcast_devices(comm, 0, (n - 2) * sizeof(float), nbuf, queues, bufs, offs) == 0, "%s",
                clt_last_error());
  for (int q = 0; q < nbuf; q++) {
    tu_read(tu_ctx[q], bufs[q], offs[q] / sizeof(float), x, n - 2);
    for (size_t i = 0; i < n - 2; i++)
      ck_assert_msg(x[i] == (float)(i + 2), "buffer %d (%s): element %zu is %g", q, tu_name(tu_ctx[q]), i, x[i]);
  }
  /* One rank alone gives a buffer too small: every rank fails at once,
   * the others naming it (not a timeout waiting for it), and the next
   * broadcast works. */
  if (nranks > 1) {
    size_t mine = rank == nranks - 1 ? (n + 3) * sizeof(float) : 0;
    double timeout = clt_comm_timeout(comm);
    clt_comm_set_timeout(comm, 60);
    int rc = clt_bcast_devices(comm, 0, (n - 2) * sizeof(float), 1, queues, bufs, rank == nranks - 1 ? &mine : offs);
    ck_assert_msg(rc == CLT_ESHAPE, "rank %d: %s (%s)", rank, clt_status_name(rc), clt_last_error());
    char who[32];
    snprintf(who, sizeof who, "rank %d failed", nranks - 1);
    if (rank != nranks - 1) ck_assert_msg(strstr(clt_last_error(), who), "rank %d: %s", rank, clt_last_error());
    ck_assert_msg(clt_bcast_devices(comm, 0, (n - 2) * sizeof(float), 1, queues, bufs, offs) == 0, "%s",
                  clt_last_error());
    clt_comm_set_timeout(comm, timeout);
  }
  for (int q = 0; q < nbuf; q++) clReleaseMemObject(bufs[q]);
  free(x);
}
END_TEST

START_TEST(allgather) {
  /* Metrics: each rank's (loss, samples, seconds). */
  double mine[3] = {rank + 0.5, 100.0 * rank, 1.0 / (rank + 1)}, *all = calloc(3 * (size_t)nranks, sizeof *all);
  ck_assert_msg(clt_allgather(comm, mine, sizeof mine, all) == 0, "%s", clt_last_error());
  for (int r = 0; r < nranks; r++) {
    ck_assert(all[3 * r] == r + 0.5);
    ck_assert(all[3 * r + 1] == 100.0 * r);
    ck_assert(all[3 * r + 2] == 1.0 / (r + 1));
  }
  /* Large blocks go through the chunked ring; in place works. */
  size_t n = 200003;
  unsigned char *big = malloc(n * (size_t)nranks);
  for (size_t i = 0; i < n; i++) big[(size_t)rank * n + i] = (unsigned char)(i + 7 * rank);
  ck_assert_msg(clt_allgather(comm, big + (size_t)rank * n, n, big) == 0, "%s", clt_last_error());
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < n; i++) ck_assert(big[(size_t)r * n + i] == (unsigned char)(i + 7 * r));
  ck_assert_int_eq(clt_allgather(comm, NULL, 0, NULL), 0);
  free(big);
  free(all);
}
END_TEST

START_TEST(communicator) {
  ck_assert_int_eq(clt_comm_size(comm), nranks);
  ck_assert_int_eq(clt_comm_rank(comm), rank);
  /* All ranks of this test run on one machine. */
  ck_assert_int_eq(clt_comm_local_size(comm), nranks);
  ck_assert_int_eq(clt_comm_local_rank(comm), rank);
  if (tu_ndev) ck_assert_int_eq(clt_comm_default_device(comm, tu_devices), rank % tu_ndev);
  /* The library's messages do not meet the application's: interleave. */
  int token = rank, sum = 0;
  float x = 1.0f;
  clt_allreduce_plan *plan = NULL;
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 1, CLT_F32, CLT_SUM, NULL, &plan), 0);
  MPI_Allreduce(&token, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  ck_assert_int_eq(clt_allreduce_run(plan, &x), 0);
  ck_assert(x == (float)nranks);
  ck_assert_int_eq(sum, nranks * (nranks - 1) / 2);
  clt_allreduce_plan_destroy(plan);
}
END_TEST

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int su = tu_setup(); /* no device: the host tests still run */
  if (su == 1) MPI_Abort(MPI_COMM_WORLD, 1);
  if (clt_comm_create(MPI_COMM_WORLD, &comm) < 0) {
    fprintf(stderr, "rank %d: clt_comm_create: %s\n", rank, clt_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  Suite *s = suite_create("comm");
  TCase *tc = tcase_create("collectives");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, communicator);
  tcase_add_test(tc, host_exact_sums);
  tcase_add_test(tc, host_averages);
  tcase_add_test(tc, host_many_chunks);
  tcase_add_test(tc, random_against_serial_sum);
  tcase_add_test(tc, device_buffers);
  tcase_add_test(tc, device_buffers_follow_the_queue);
  tcase_add_test(tc, two_devices_per_process);
  tcase_add_test(tc, host_f16);
  tcase_add_test(tc, f16_non_finite_reaches_every_rank);
  tcase_add_test(tc, device_buffers_f16);
  tcase_add_test(tc, two_devices_per_process_f16);
  tcase_add_test(tc, broadcast);
  tcase_add_test(tc, broadcast_devices);
  tcase_add_test(tc, allgather);
  suite_add_tcase(s, tc);
  int rc = tu_run(s);
  clt_comm_destroy(comm);
  tu_teardown();
  /* Every rank's verdict: one failing rank fails the job. */
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
