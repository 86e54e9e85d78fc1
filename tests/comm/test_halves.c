/*
 * test_halves.c: the all-reduce's two halves as collectives of their own,
 * clt_reduce_scatter_* and clt_allgather_* (run by tests/comm/halves.sh under
 * mpirun on 1 to 5 ranks):
 *
 *   - a reduce-scatter part is bit for bit a serial sum in the ring's order
 *     (rank p's part is summed from rank p + 1 going right), on random
 *     floats whose sum depends on the order, f32 and f16, sums and averages,
 *     counts 0, below the number of ranks, odd, many chunks;
 *   - it is bit for bit the matching segment of clt_allreduce_run on the
 *     same data, at every count (the small-message algorithms too), and a
 *     reduce-scatter then an allgather is bit for bit the all-reduce;
 *   - counts chosen per rank (some 0) put rank r's part at the r-th place;
 *   - device buffers (every device; two replicas in one process): the same
 *     bits as the host, only the part written by a reduce-scatter;
 *   - bad input: counts or per-rank counts that differ across ranks (named
 *     on every rank, the communicator usable after), per-rank counts that
 *     do not add up, NULL buffers, device buffers too small, bad ranks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain/mpi.h>

#include "commtest.h"
#include "testutil.h"

static clt_comm *comm, *ring; /* ring: never the small-message algorithms */
static int rank, nranks;

static const size_t counts[] = {0, 1, 2, 3, 4, 5, 7, 17, 1000, 10007, 100003};
#define NCOUNTS (sizeof counts / sizeof counts[0])

/* Rank r's input, element i: random floats whose sum depends on the order. */
static void fill(float *x, size_t n, int r, int salt) { ref_random(x, n, 7000u + 97u * (unsigned)salt + (unsigned)r); }

/* Rank p's part as the ring sums it: from rank p + 1 going right, each
 * addition rounded to float; an average divides the sum once. */
static void serial_part(float *want, size_t lo, size_t n, int p, int salt, int avg) {
  size_t total = lo + n;
  float *x = malloc((total + 1) * sizeof *x);
  for (size_t i = 0; i < n; i++) want[i] = 0;
  for (int k = 1; k <= nranks; k++) {
    fill(x, total, (p + k) % nranks, salt);
    for (size_t i = 0; i < n; i++) want[i] = k == 1 ? x[lo + i] : want[i] + x[lo + i];
  }
  if (avg)
    for (size_t i = 0; i < n; i++) want[i] /= (float)nranks;
  free(x);
}

/* The all-reduce's segment (r + 1) mod N of count elements. */
static void natural_part(size_t count, int r, size_t *lo, size_t *n) {
  size_t base = count / (size_t)nranks, rem = count % (size_t)nranks;
  int j = (r + 1) % nranks;
  *lo = (size_t)j * base + ((size_t)j < rem ? (size_t)j : rem);
  *n = base + ((size_t)j < rem);
}

static void assert_identical_across_ranks(const void *buf, size_t bytes, const char *what) {
  uint64_t h = ct_hash(buf, bytes), *all = calloc((size_t)nranks, sizeof *all);
  MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (int r = 1; r < nranks; r++)
    ck_assert_msg(all[r] == all[0], "%s: rank %d's result differs in bits from rank 0's", what, r);
  free(all);
}

/* ---- against the serial sum ---- */

static void check_serial(clt_comm *c, size_t n, size_t chunk, clt_reduce_op op, int salt) {
  clt_reduce_scatter_plan *plan = NULL;
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  float *x = malloc((n + 1) * sizeof *x), *want = malloc((n + 1) * sizeof *want);
  ck_assert_msg(clt_reduce_scatter_plan_create(c, n, NULL, CLT_F32, op, &opts, &plan) == 0, "%s", clt_last_error());
  ck_assert_uint_eq(clt_reduce_scatter_plan_count(plan), n);
  size_t lo, len, elo, elen;
  ck_assert_int_eq(clt_reduce_scatter_plan_part(plan, rank, &lo, &len), 0);
  natural_part(n, rank, &elo, &elen);
  ck_assert_msg(lo == elo && len == elen, "count %zu: rank %d's part is [%zu, +%zu), expected [%zu, +%zu)", n, rank,
                lo, len, elo, elen);
  serial_part(want, lo, len, rank, salt, op == CLT_AVG);
  for (int run = 0; run < 2; run++) { /* a plan runs many times */
    fill(x, n, rank, salt);
    ck_assert_msg(clt_reduce_scatter_run(plan, n ? x : NULL) == 0, "%s", clt_last_error());
    long bad = ct_first_diff(x + lo, want, len);
    ck_assert_msg(bad < 0, "count %zu chunk %zu %s (%s), run %d: part element %ld is %.9g, the serial sum %.9g", n,
                  chunk, clt_reduce_op_name(op), clt_reduce_scatter_plan_algorithm(plan), run, bad,
                  bad < 0 ? 0 : x[lo + bad], bad < 0 ? 0 : want[bad]);
  }
  clt_reduce_scatter_plan_destroy(plan);
  free(x), free(want);
}

START_TEST(reduce_scatter_serial_order) {
  for (size_t i = 0; i < NCOUNTS; i++) {
    check_serial(ring, counts[i], 0, CLT_SUM, (int)i);
    check_serial(ring, counts[i], 0, CLT_AVG, (int)i + 50);
  }
  check_serial(ring, 37, 4, CLT_SUM, 1);    /* chunks of one element */
  check_serial(ring, 10007, 64, CLT_AVG, 2); /* many chunks per segment */
  if (nranks == 1) check_serial(comm, 1000, 0, CLT_SUM, 3);
}
END_TEST

/* ---- against the all-reduce ---- */

/* Reduce-scatter, then allgather, of the same data as an all-reduce: the
 * part, then the whole buffer, bit for bit the all-reduce's. */
static void check_against_allreduce(clt_comm *c, size_t n, clt_dtype dt, clt_reduce_op op, size_t chunk, int salt) {
  size_t es = clt_dtype_size(dt);
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  clt_allreduce_plan *ar = NULL;
  clt_reduce_scatter_plan *rs = NULL;
  clt_allgather_plan *ag = NULL;
  unsigned char *a = malloc(n * es + 1), *b = malloc(n * es + 1);
  float *f = malloc((n + 1) * sizeof *f);
  fill(f, n, rank, salt);
  for (size_t i = 0; i < n; i++) {
    if (dt == CLT_F32) memcpy(a + 4 * i, &f[i], 4);
    else {
      uint16_t h = ct_half_input(i, rank * CT_MAX_REPLICAS, salt);
      memcpy(a + 2 * i, &h, 2);
    }
  }
  memcpy(b, a, n * es);
  ck_assert_msg(clt_allreduce_plan_create(c, n, dt, op, &opts, &ar) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_reduce_scatter_plan_create(c, n, NULL, dt, op, &opts, &rs) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_allgather_plan_create(c, n, NULL, dt, &opts, &ag) == 0, "%s", clt_last_error());
  ck_assert_str_eq(clt_reduce_scatter_plan_algorithm(rs), clt_allreduce_plan_algorithm(ar));
  ck_assert_msg(clt_allreduce_run(ar, a) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_reduce_scatter_run(rs, b) == 0, "%s", clt_last_error());
  size_t lo, len, glo, glen;
  ck_assert_int_eq(clt_reduce_scatter_plan_part(rs, rank, &lo, &len), 0);
  ck_assert_int_eq(clt_allgather_plan_part(ag, rank, &glo, &glen), 0);
  ck_assert(lo == glo && len == glen);
  ck_assert_msg(memcmp(a + lo * es, b + lo * es, len * es) == 0, "%s count %zu %s (%s): the part differs from the "
                "all-reduce's segment", clt_dtype_name(dt), n, clt_reduce_op_name(op), clt_allreduce_plan_algorithm(ar));
  /* Garbage outside the part: the allgather must overwrite all of it. */
  for (size_t i = 0; i < n * es; i++)
    if (i < lo * es || i >= (lo + len) * es) b[i] = 0x5a;
  ck_assert_msg(clt_allgather_run(ag, b) == 0, "%s", clt_last_error());
  ck_assert_msg(memcmp(a, b, n * es) == 0, "%s count %zu %s: reduce-scatter then allgather differs from the all-reduce",
                clt_dtype_name(dt), n, clt_reduce_op_name(op));
  assert_identical_across_ranks(b, n * es, "reduce-scatter + allgather");
  clt_allreduce_plan_destroy(ar);
  clt_reduce_scatter_plan_destroy(rs);
  clt_allgather_plan_destroy(ag);
  free(a), free(b), free(f);
}

START_TEST(halves_are_the_allreduce) {
  for (size_t i = 0; i < NCOUNTS; i++)
    for (int k = 0; k < 2; k++) {
      clt_comm *c = k ? ring : comm;
      check_against_allreduce(c, counts[i], CLT_F32, CLT_SUM, 0, (int)i);
      check_against_allreduce(c, counts[i], CLT_F32, CLT_AVG, 0, (int)i + 10);
      check_against_allreduce(c, counts[i], CLT_F16, CLT_SUM, 0, (int)i + 20);
      check_against_allreduce(c, counts[i], CLT_F16, CLT_AVG, 0, (int)i + 30);
    }
  check_against_allreduce(ring, 10007, CLT_F16, CLT_SUM, 32, 5);
  check_against_allreduce(ring, 20011, CLT_F32, CLT_SUM, 256, 6);
}
END_TEST

/* fp16 against the documented order: each addition in float, rounded. */
START_TEST(reduce_scatter_f16_serial_order) {
  const size_t sizes[] = {0, 2, 5, 1000, 30011};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    size_t n = sizes[t], lo, len;
    clt_reduce_scatter_plan *plan = NULL;
    uint16_t *x = malloc((n + 1) * 2), *want = malloc((n + 1) * 2);
    ck_assert_msg(clt_reduce_scatter_plan_create(ring, n, NULL, CLT_F16, CLT_SUM, NULL, &plan) == 0, "%s",
                  clt_last_error());
    ck_assert_int_eq(clt_reduce_scatter_plan_part(plan, rank, &lo, &len), 0);
    for (size_t i = 0; i < len; i++) {
      uint16_t acc = ct_half_input(lo + i, ((rank + 1) % nranks) * CT_MAX_REPLICAS, (int)t);
      for (int k = 2; k <= nranks; k++)
        acc = ct_half_add(acc, ct_half_input(lo + i, ((rank + k) % nranks) * CT_MAX_REPLICAS, (int)t));
      want[i] = acc;
    }
    for (size_t i = 0; i < n; i++) x[i] = ct_half_input(i, rank * CT_MAX_REPLICAS, (int)t);
    ck_assert_msg(clt_reduce_scatter_run(plan, n ? x : NULL) == 0, "%s", clt_last_error());
    long bad = ct_first_diff_f16(x + lo, want, len);
    ck_assert_msg(bad < 0, "f16 count %zu: part element %ld is 0x%04x, expected 0x%04x", n, bad,
                  bad < 0 ? 0 : x[lo + bad], bad < 0 ? 0 : want[bad]);
    clt_reduce_scatter_plan_destroy(plan);
    free(x), free(want);
  }
}
END_TEST

/* ---- per-rank counts ---- */

/* Rank r gets mine[r] elements: some 0, some more than others. */
static void rank_counts(size_t *mine, int salt) {
  for (int r = 0; r < nranks; r++) mine[r] = (size_t)((r * 7 + salt) % 5 == 0 ? 0 : 3 + (r * 1013 + salt * 17) % 977);
}

START_TEST(per_rank_counts) {
  for (int salt = 0; salt < 4; salt++) {
    size_t *pc = calloc((size_t)nranks, sizeof *pc), n = 0, lo = 0;
    rank_counts(pc, salt);
    for (int r = 0; r < nranks; r++) {
      if (r == rank) lo = n;
      n += pc[r];
    }
    clt_reduce_scatter_plan *rs = NULL;
    clt_allgather_plan *ag = NULL;
    clt_allreduce_opts opts = {.chunk_bytes = salt % 2 ? 64 : 0};
    ck_assert_msg(clt_reduce_scatter_plan_create(comm, n, pc, CLT_F32, CLT_SUM, &opts, &rs) == 0, "%s",
                  clt_last_error());
    ck_assert_msg(clt_allgather_plan_create(comm, n, pc, CLT_F32, &opts, &ag) == 0, "%s", clt_last_error());
    for (int r = 0; r < nranks; r++) {
      size_t o, len, at = 0;
      for (int k = 0; k < r; k++) at += pc[k];
      ck_assert_int_eq(clt_reduce_scatter_plan_part(rs, r, &o, &len), 0);
      ck_assert(o == at && len == pc[r]);
      ck_assert_int_eq(clt_allgather_plan_part(ag, r, &o, &len), 0);
      ck_assert(o == at && len == pc[r]);
    }
    float *x = malloc((n + 1) * sizeof *x), *want = malloc((n + 1) * sizeof *want);
    fill(x, n, rank, salt);
    ck_assert_msg(clt_reduce_scatter_run(rs, n ? x : NULL) == 0, "%s", clt_last_error());
    serial_part(want, lo, pc[rank], rank, salt, 0);
    long bad = ct_first_diff(x + lo, want, pc[rank]);
    ck_assert_msg(bad < 0, "per-rank counts %d: part element %ld is %.9g, the serial sum %.9g", salt, bad,
                  bad < 0 ? 0 : x[lo + bad], bad < 0 ? 0 : want[bad]);
    /* The allgather hands every rank every part. */
    for (size_t i = 0; i < n; i++)
      if (i < lo || i >= lo + pc[rank]) x[i] = NAN;
    ck_assert_msg(clt_allgather_run(ag, n ? x : NULL) == 0, "%s", clt_last_error());
    size_t at = 0;
    for (int r = 0; r < nranks; r++) {
      serial_part(want, at, pc[r], r, salt, 0);
      bad = ct_first_diff(x + at, want, pc[r]);
      ck_assert_msg(bad < 0, "per-rank counts %d: rank %d's part, element %ld, is %.9g, expected %.9g", salt, r, bad,
                    bad < 0 ? 0 : x[at + bad], bad < 0 ? 0 : want[bad]);
      at += pc[r];
    }
    clt_reduce_scatter_plan_destroy(rs);
    clt_allgather_plan_destroy(ag);
    free(pc), free(x), free(want);
  }
}
END_TEST

/* ---- device buffers ---- */

/* A reduce-scatter and an allgather on the device at an offset, with guard
 * values around: the same bits as the host runs; the reduce-scatter writes
 * the part only. */
static void check_device(clt_context *ctx, size_t n, clt_reduce_op op, size_t chunk, int salt) {
  const size_t pad = 3;
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  clt_reduce_scatter_plan *rs = NULL;
  clt_allgather_plan *ag = NULL;
  float *host = malloc((n + 2 * pad) * sizeof *host), *got = malloc((n + 2 * pad) * sizeof *got);
  float *ref = malloc((n + 1) * sizeof *ref);
  for (size_t i = 0; i < n + 2 * pad; i++) host[i] = 777.0f;
  fill(host + pad, n, rank, salt);
  memcpy(ref, host + pad, n * sizeof *ref);
  cl_mem buf = tu_buffer(ctx, host, n + 2 * pad);
  ck_assert_msg(clt_reduce_scatter_plan_create(comm, n, NULL, CLT_F32, op, &opts, &rs) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_allgather_plan_create(comm, n, NULL, CLT_F32, &opts, &ag) == 0, "%s", clt_last_error());
  size_t lo, len;
  clt_reduce_scatter_plan_part(rs, rank, &lo, &len);
  ck_assert_msg(clt_reduce_scatter_run(rs, n ? ref : NULL) == 0, "%s", clt_last_error());
  for (int run = 0; run < 2; run++) {
    ck_assert_msg(clt_reduce_scatter_run_device(rs, clt_context_queue(ctx), buf, pad * sizeof(float)) == 0, "%s: %s",
                  tu_name(ctx), clt_last_error());
    tu_read(ctx, buf, 0, got, n + 2 * pad);
    for (size_t i = 0; i < pad; i++)
      ck_assert_msg(got[i] == 777.0f && got[n + pad + i] == 777.0f, "%s: the guard values moved", tu_name(ctx));
    ck_assert_msg(ct_first_diff(got + pad + lo, ref + lo, len) < 0, "%s: count %zu: the device part differs from "
                  "the host's", tu_name(ctx), n);
    ck_assert_msg(ct_first_diff(got + pad, host + pad, lo) < 0 &&
                  ct_first_diff(got + pad + lo + len, host + pad + lo + len, n - lo - len) < 0,
                  "%s: count %zu: the reduce-scatter wrote outside this rank's part", tu_name(ctx), n);
    if (run == 0) { /* back to the input for the second run */
      ck_assert_int_eq(clEnqueueWriteBuffer(clt_context_queue(ctx), buf, CL_TRUE, 0, (n + 2 * pad) * sizeof *host,
                                            host, 0, NULL, NULL), CL_SUCCESS);
    }
  }
  /* Allgather: only the part is valid on the device now, the rest is the
   * input; after it every part is the host all-reduce's. */
  ck_assert_msg(clt_allgather_run(ag, n ? ref : NULL) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_allgather_run_device(ag, clt_context_queue(ctx), buf, pad * sizeof(float)) == 0, "%s: %s",
                tu_name(ctx), clt_last_error());
  tu_read(ctx, buf, 0, got, n + 2 * pad);
  for (size_t i = 0; i < pad; i++)
    ck_assert_msg(got[i] == 777.0f && got[n + pad + i] == 777.0f, "%s: the guard values moved", tu_name(ctx));
  long bad = ct_first_diff(got + pad, ref, n);
  ck_assert_msg(bad < 0, "%s: count %zu: element %ld of the device allgather is %g, the host's %g", tu_name(ctx), n,
                bad, bad < 0 ? 0 : got[pad + bad], bad < 0 ? 0 : ref[bad]);
  assert_identical_across_ranks(got + pad, n * sizeof *got, "device allgather");
  clt_reduce_scatter_plan_destroy(rs);
  clt_allgather_plan_destroy(ag);
  clReleaseMemObject(buf);
  free(host), free(got), free(ref);
}

START_TEST(device_buffers) {
  if (tu_ndev == 0) return;
  const size_t sizes[] = {1, 3, 17, 1000, 20011};
  for (int d = 0; d < tu_ndev; d++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      check_device(tu_ctx[d], sizes[i], i % 2 ? CLT_AVG : CLT_SUM, 256, (int)i);
  check_device(tu_ctx[0], 100003, CLT_SUM, 0, 9);
}
END_TEST

/* fp16 device buffers, and two replicas in one process (PoCL and rusticl
 * when both exist): the same bits as the all-reduce's devices run. */
START_TEST(device_f16_two_replicas) {
  if (tu_ndev == 0) return;
  clt_context *ctx[2] = {tu_ctx[0], tu_ctx[1 % tu_ndev]};
  const size_t sizes[] = {5, 5000, 30011};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    size_t n = sizes[t], lo, len;
    clt_allreduce_opts opts = {.replicas = 2};
    clt_allreduce_plan *ar = NULL;
    clt_reduce_scatter_plan *rs = NULL;
    clt_allgather_plan *ag = NULL;
    uint16_t *h[2], *want = malloc(n * 2), *got = malloc(n * 2);
    cl_mem a[2], b[2];
    cl_command_queue q[2] = {clt_context_queue(ctx[0]), clt_context_queue(ctx[1])};
    for (int k = 0; k < 2; k++) {
      h[k] = malloc(n * 2);
      for (size_t i = 0; i < n; i++) h[k][i] = ct_half_input(i, rank * CT_MAX_REPLICAS + k, (int)t);
      a[k] = ct_f16_buffer(ctx[k], h[k], n);
      b[k] = ct_f16_buffer(ctx[k], h[k], n);
    }
    ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F16, CLT_SUM, &opts, &ar) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_reduce_scatter_plan_create(comm, n, NULL, CLT_F16, CLT_SUM, &opts, &rs) == 0, "%s",
                  clt_last_error());
    ck_assert_msg(clt_allgather_plan_create(comm, n, NULL, CLT_F16, &opts, &ag) == 0, "%s", clt_last_error());
    clt_reduce_scatter_plan_part(rs, rank, &lo, &len);
    ck_assert_msg(clt_allreduce_run_devices(ar, 2, q, a, NULL) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_reduce_scatter_run_devices(rs, 2, q, b, NULL) == 0, "%s", clt_last_error());
    ct_f16_read(ctx[0], a[0], 0, want, n);
    for (int k = 0; k < 2; k++) {
      ct_f16_read(ctx[k], b[k], 0, got, n);
      ck_assert_msg(ct_first_diff_f16(got + lo, want + lo, len) < 0, "f16 count %zu: replica %d's part differs from "
                    "the all-reduce's", n, k);
    }
    /* Replica 1's part spoiled: the allgather takes the part from replica 0. */
    uint16_t junk[1] = {0x7c00};
    if (len) ck_assert_int_eq(clEnqueueWriteBuffer(q[1], b[1], CL_TRUE, lo * 2, 2, junk, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_msg(clt_allgather_run_devices(ag, 2, q, b, NULL) == 0, "%s", clt_last_error());
    for (int k = 0; k < 2; k++) {
      ct_f16_read(ctx[k], b[k], 0, got, n);
      long bad = ct_first_diff_f16(got, want, n);
      ck_assert_msg(bad < 0, "f16 count %zu: replica %d's element %ld after the allgather is 0x%04x, the all-reduce's "
                    "0x%04x", n, k, bad, bad < 0 ? 0 : got[bad], bad < 0 ? 0 : want[bad]);
    }
    clt_allreduce_plan_destroy(ar);
    clt_reduce_scatter_plan_destroy(rs);
    clt_allgather_plan_destroy(ag);
    for (int k = 0; k < 2; k++) clReleaseMemObject(a[k]), clReleaseMemObject(b[k]), free(h[k]);
    free(want), free(got);
  }
}
END_TEST

/* ---- bad input ---- */

START_TEST(refusals) {
  clt_reduce_scatter_plan *rs = NULL;
  clt_allgather_plan *ag = NULL;
  char what[64];
  size_t o, len;
  int rc;
  if (nranks > 1) {
    /* A count that differs on the last rank: named on every rank. */
    rc = clt_reduce_scatter_plan_create(comm, rank == nranks - 1 ? 101 : 100, NULL, CLT_F32, CLT_SUM, NULL, &rs);
    ck_assert_msg(rc == CLT_EMISMATCH && !rs, "rank %d: %s", rank, clt_last_error());
    snprintf(what, sizeof what, "101 on rank %d", nranks - 1);
    ck_assert_msg(strstr(clt_last_error(), "count: 100 on rank 0") && strstr(clt_last_error(), what), "rank %d: %s",
                  rank, clt_last_error());
    /* Per-rank counts that differ on the last rank. */
    size_t *pc = calloc((size_t)nranks, sizeof *pc);
    pc[0] = 10;
    if (rank == nranks - 1) pc[0] = 5, pc[1] = 5;
    rc = clt_allgather_plan_create(comm, 10, pc, CLT_F32, NULL, &ag);
    ck_assert_msg(rc == CLT_EMISMATCH && !ag, "rank %d: %s", rank, clt_last_error());
    snprintf(what, sizeof what, "on rank %d", nranks - 1);
    ck_assert_msg(strstr(clt_last_error(), "per-rank counts") && strstr(clt_last_error(), what) &&
                  strstr(clt_last_error(), "allgather"), "rank %d: %s", rank, clt_last_error());
    /* Per-rank counts on one rank only. */
    rc = clt_reduce_scatter_plan_create(comm, 10, rank == 0 ? NULL : pc, CLT_F32, CLT_SUM, NULL, &rs);
    ck_assert_msg(rc == CLT_EMISMATCH, "rank %d: %s", rank, clt_last_error());
    ck_assert_msg(strstr(clt_last_error(), "the all-reduce's segments"), "rank %d: %s", rank, clt_last_error());
    /* Another op or type on one rank. */
    rc = clt_reduce_scatter_plan_create(comm, 10, NULL, CLT_F32, rank == 1 ? CLT_AVG : CLT_SUM, NULL, &rs);
    ck_assert_msg(rc == CLT_EMISMATCH && strstr(clt_last_error(), "op: sum on rank 0"), "rank %d: %s", rank,
                  clt_last_error());
    rc = clt_allgather_plan_create(comm, 10, NULL, rank == 1 ? CLT_F16 : CLT_F32, NULL, &ag);
    ck_assert_msg(rc == CLT_EMISMATCH && strstr(clt_last_error(), "dtype"), "rank %d: %s", rank, clt_last_error());
    free(pc);
  }
  /* Per-rank counts that do not add up to count: on every rank alike. */
  size_t *pc = calloc((size_t)nranks, sizeof *pc);
  pc[nranks - 1] = 9;
  rc = clt_reduce_scatter_plan_create(comm, 10, pc, CLT_F32, CLT_SUM, NULL, &rs);
  ck_assert_msg(rc == CLT_EINVAL && strstr(clt_last_error(), "add up to 9, not count 10"), "%s", clt_last_error());
  pc[nranks - 1] = 11;
  rc = clt_allgather_plan_create(comm, 10, pc, CLT_F32, NULL, &ag);
  ck_assert_msg(rc == CLT_EINVAL && strstr(clt_last_error(), "more than count 10"), "%s", clt_last_error());
  free(pc);
  /* Types without a reduction, unknown ops. */
  rc = clt_reduce_scatter_plan_create(comm, 10, NULL, CLT_I32, CLT_SUM, NULL, &rs);
  ck_assert_msg(rc == CLT_EUNSUPPORTED && strstr(clt_last_error(), "reduce-scatter"), "%s", clt_last_error());
  rc = clt_reduce_scatter_plan_create(comm, 10, NULL, CLT_F32, (clt_reduce_op)7, NULL, &rs);
  ck_assert_msg(rc == CLT_EINVAL && strstr(clt_last_error(), "unknown op 7"), "%s", clt_last_error());
  ck_assert_int_eq(clt_reduce_scatter_plan_create(NULL, 10, NULL, CLT_F32, CLT_SUM, NULL, &rs), CLT_EINVAL);
  ck_assert_int_eq(clt_allgather_plan_create(comm, 10, NULL, CLT_F32, NULL, NULL), CLT_EINVAL);

  /* The communicator is usable after all of that. */
  ck_assert_msg(clt_reduce_scatter_plan_create(comm, 1000, NULL, CLT_F32, CLT_SUM, NULL, &rs) == 0, "%s",
                clt_last_error());
  ck_assert_msg(clt_allgather_plan_create(comm, 1000, NULL, CLT_F32, NULL, &ag) == 0, "%s", clt_last_error());
  /* NULL buffers (on every rank, so no one is left waiting), a part of no rank. */
  rc = clt_reduce_scatter_run(rs, NULL);
  ck_assert_msg(rc == CLT_EINVAL && strstr(clt_last_error(), "clt_reduce_scatter_run: no buffer"), "%s",
                clt_last_error());
  rc = clt_allgather_run(ag, NULL);
  ck_assert_msg(rc == CLT_EINVAL && strstr(clt_last_error(), "clt_allgather_run: no buffer"), "%s", clt_last_error());
  ck_assert_int_eq(clt_reduce_scatter_run(NULL, NULL), CLT_EINVAL);
  ck_assert_int_eq(clt_reduce_scatter_plan_part(rs, nranks, &o, &len), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "is not a rank"), "%s", clt_last_error());
  ck_assert_int_eq(clt_allgather_plan_part(ag, -1, &o, &len), CLT_EINVAL);
  /* Device buffers too small, or none. */
  if (tu_ndev) {
    clt_context *ctx = tu_ctx[0];
    cl_command_queue q = clt_context_queue(ctx);
    cl_mem small = tu_buffer(ctx, NULL, 999);
    rc = clt_reduce_scatter_run_device(rs, q, small, 0);
    ck_assert_msg(rc == CLT_ESHAPE && strstr(clt_last_error(), "clt_reduce_scatter_run_devices") &&
                  strstr(clt_last_error(), "4000 bytes from offset 0"), "%s", clt_last_error());
    cl_mem big = tu_buffer(ctx, NULL, 1000);
    rc = clt_allgather_run_device(ag, q, big, 8);
    ck_assert_msg(rc == CLT_ESHAPE && strstr(clt_last_error(), "clt_allgather_run_devices") &&
                  strstr(clt_last_error(), "4000 bytes from offset 8"), "%s", clt_last_error());
    rc = clt_allgather_run_device(ag, q, NULL, 0);
    ck_assert_msg(rc == CLT_EINVAL && strstr(clt_last_error(), "buf is NULL"), "%s", clt_last_error());
    /* And a good run still works after. */
    ck_assert_msg(clt_allgather_run_device(ag, q, big, 0) == 0, "%s", clt_last_error());
    clReleaseMemObject(small);
    clReleaseMemObject(big);
  }
  clt_reduce_scatter_plan_destroy(rs);
  clt_allgather_plan_destroy(ag);
  clt_reduce_scatter_plan_destroy(NULL);
  clt_allgather_plan_destroy(NULL);
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
  char *small = getenv("CLT_ALLREDUCE_SMALL") ? strdup(getenv("CLT_ALLREDUCE_SMALL")) : NULL; /* tests/comm/halves.sh's */
  setenv("CLT_ALLREDUCE_SMALL", "0", 1);
  if (clt_comm_create(MPI_COMM_WORLD, &ring) < 0 || clt_comm_set_allreduce(ring, "ring") < 0) {
    fprintf(stderr, "rank %d: clt_comm_create: %s\n", rank, clt_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (small) setenv("CLT_ALLREDUCE_SMALL", small, 1);
  else unsetenv("CLT_ALLREDUCE_SMALL");
  free(small);
  Suite *s = suite_create("halves");
  TCase *tc = tcase_create("reduce-scatter and allgather");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, reduce_scatter_serial_order);
  tcase_add_test(tc, halves_are_the_allreduce);
  tcase_add_test(tc, reduce_scatter_f16_serial_order);
  tcase_add_test(tc, per_rank_counts);
  tcase_add_test(tc, device_buffers);
  tcase_add_test(tc, device_f16_two_replicas);
  tcase_add_test(tc, refusals);
  suite_add_tcase(s, tc);
  int rc = tu_run(s);
  clt_comm_destroy(ring);
  clt_comm_destroy(comm);
  tu_teardown();
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
