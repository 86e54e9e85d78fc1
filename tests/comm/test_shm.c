/*
 * test_shm.c: the all-reduce through the node's shared-memory window
 * (src/comm/shm.c, CLT_ALLREDUCE=shm), run by tests/comm/shm.sh on 1 to 6 ranks:
 * host and device buffers, f32 and f16, sum and average, counts from 0
 * (and below the rank count) to a few MiB, one round or many: every rank
 * gets the same bits, equal to a serial sum in rank order (the order shm.c
 * documents; fp16: added in float, rounded once). Also its reduce-scatter
 * (the all-reduce's bits in each part), the choice of the cost model, the
 * fitted terms from a model file (alpha_shm, beta_shm, the ring's pair and
 * their far pairs: the fitted forms on one node, the α-β-γ ones without
 * them or on several nodes; bad values refused; auto among the fitted
 * ones alone), and with CLT_NODE_SIZE giving several pretend nodes, two-level in its place.
 * The arena (shm_arena.c): bytes of shared memory all-reduced in place,
 * also under a device buffer. With CT_STALL set, a rank stopped (SIGSTOP) inside a stream of shm
 * all-reduces (or, with CT_GATHER too, of ZeRO's allgathers in a window,
 * shm_gather.c) is named by the others' timeout error; with CT_KILL, a
 * rank killed there ends the job (tests/comm/shm.sh checks how).
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mpi.h>

#include <cltrain/mpi.h>

#include "comm/comm.h" /* ZeRO's allgather in a window: internal */

#include "commcheck.h"
#include "commtest.h"
#include "testutil.h"
#include "ref/ref.h"

static clt_comm *comm; /* CLT_ALLREDUCE=shm */
static int rank, nranks;
static const char *expected; /* the algorithm a plan of comm runs */

/* 0, 1, below and at the rank count, odd, several rounds of the default
 * chunk (N pieces of 256 KiB, or 1 MiB at 2 ranks), a few MiB. */
static const size_t counts[] = {0, 1, 2, 3, 5, 6, 17, 1000, 8193, 100003, 786435};
#define NCOUNTS (sizeof counts / sizeof counts[0])

static void assert_contains(const char *text, const char *part) {
  ck_assert_msg(strstr(text, part) != NULL, "rank %d: \"%s\" does not say \"%s\"", rank, text, part);
}

static void check_host(size_t n, size_t chunk, clt_reduce_op op, int salt) {
  cc_check_host(comm, n, chunk, op, salt, expected, "shm host all-reduce");
}

START_TEST(host_exact) {
  for (size_t i = 0; i < NCOUNTS; i++) {
    check_host(counts[i], 0, CLT_SUM, (int)i);
    check_host(counts[i], 0, CLT_AVG, (int)i + 100);
  }
  check_host(37, 4, CLT_SUM, 1);      /* pieces of one element: 37 / N rounds */
  check_host(10007, 64, CLT_AVG, 2);  /* many rounds, the last one short */
}
END_TEST

/* Random floats: bit for bit the serial float sum in rank order, which is
 * the order shm.c adds them in (and an average divides that sum once). The
 * two-level plan (several pretend nodes) adds in another order: within
 * rounding of a double sum there. */
static void check_random(size_t n, size_t chunk, clt_reduce_op op) {
  clt_allreduce_plan *plan = NULL;
  float *x = malloc((n + 1) * sizeof *x), *other = malloc((n + 1) * sizeof *other);
  float *want = calloc(n + 1, sizeof *want);
  double *mag = calloc(n + 1, sizeof *mag);
  for (int r = 0; r < nranks; r++) {
    ref_random(other, n, 3000u + (unsigned)r);
    for (size_t i = 0; i < n; i++) {
      want[i] = r == 0 ? other[i] : want[i] + other[i];
      mag[i] += fabs(other[i]);
    }
  }
  if (op == CLT_AVG)
    for (size_t i = 0; i < n; i++) want[i] /= (float)nranks;
  ref_random(x, n, 3000u + (unsigned)rank);
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F32, op, &opts, &plan) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_allreduce_run(plan, x) == 0, "%s", clt_last_error());
  if (strcmp(expected, "shm") == 0 || nranks == 1) {
    long bad = ct_first_diff(x, want, n);
    ck_assert_msg(bad < 0, "%zu floats, chunk %zu, %s: element %ld is %.9g, the serial sum in rank order %.9g", n, chunk,
                  clt_reduce_op_name(op), bad, bad < 0 ? 0 : x[bad], bad < 0 ? 0 : want[bad]);
  } else {
    for (size_t i = 0; i < n; i++) {
      double tol = nranks * ldexp(1.0, -23) * mag[i] + 1e-30;
      ck_assert_msg(fabs(x[i] - want[i]) <= tol, "element %zu: %.9g, serial sum %.9g", i, x[i], want[i]);
    }
  }
  cc_identical_across_ranks(x, n * sizeof *x, "shm random all-reduce");
  /* The same bits run after run. */
  float *again = malloc((n + 1) * sizeof *again);
  ref_random(again, n, 3000u + (unsigned)rank);
  ck_assert_msg(clt_allreduce_run(plan, again) == 0, "%s", clt_last_error());
  ck_assert_int_eq(ct_first_diff(x, again, n), -1);
  clt_allreduce_plan_destroy(plan);
  free(x), free(other), free(want), free(mag), free(again);
}

START_TEST(random_against_serial_sum) {
  check_random(50001, 0, CLT_SUM);
  check_random(50001, 4096, CLT_AVG);
  check_random(786435, 0, CLT_SUM); /* 3 MiB: several rounds through the window */
}
END_TEST

/* fp16 in rank order as shm adds (not under two-level, which adds in
 * another order). */
static void check_f16(size_t n, size_t chunk, clt_reduce_op op, clt_context *ctx, int salt) {
  const char *order = strcmp(expected, "twolevel") == 0 ? NULL : nranks == 1 ? "local" : "shm";
  cc_check_f16(comm, n, chunk, op, ctx, salt, order, "shm f16 all-reduce");
}

START_TEST(host_f16) {
  const size_t sizes[] = {0, 1, 3, 7, 1000, 50001, 1572867};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    check_f16(sizes[t], 0, CLT_SUM, NULL, (int)t);
    check_f16(sizes[t], 0, CLT_AVG, NULL, (int)t + 10);
  }
  check_f16(20011, 512, CLT_SUM, NULL, 30); /* many rounds */
}
END_TEST

/* Device buffers through the staging (PoCL's unified memory maps instead
 * when the plan runs on the queue it reads on: both paths are run). */
START_TEST(device_buffers) {
  if (tu_ndev == 0) return;
  clt_context *ctx = tu_ctx[rank % tu_ndev];
  const size_t sizes[] = {0, 3, 1000, 30011, 100003};
  const size_t chunks[] = {0, 0, 64, 0, 4096};
  cc_check_device(comm, ctx, sizes, chunks, sizeof sizes / sizeof sizes[0], "shm device all-reduce");
  check_f16(20011, 0, CLT_SUM, ctx, 5);
  check_f16(5, 0, CLT_AVG, ctx, 6);
}
END_TEST

/* Two replicas per process (the staging, chunk by chunk through the
 * rounds): summed locally first, then across ranks. */
START_TEST(two_replicas) {
  if (tu_ndev == 0) return;
  clt_context *ctx[2] = {tu_ctx[0], tu_ctx[1 % tu_ndev]};
  cc_check_two_replicas(comm, ctx, 5003, 0, 0);
  cc_check_two_replicas(comm, ctx, 40009, 1024, 1);
}
END_TEST

/* A reduce-scatter takes the all-reduce's algorithm: each rank's part is
 * bit for bit the all-reduce's (ZeRO's guarantee), on host and device. */
START_TEST(reduce_scatter_parts) {
  const size_t sizes[] = {0, 2, 1001, 300007};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++)
    for (int half = 0; half < 2; half++) {
      size_t n = sizes[t], es = half ? 2 : 4, lo = 0, len = 0;
      clt_dtype dt = half ? CLT_F16 : CLT_F32;
      clt_reduce_op op = t % 2 ? CLT_AVG : CLT_SUM;
      clt_allreduce_opts opts = {.chunk_bytes = t == 2 ? 256 : 0};
      unsigned char *a = malloc(n * es + 2), *b = malloc(n * es + 2);
      for (size_t i = 0; i < n; i++) {
        uint16_t h = ct_half_input(i, rank * CT_MAX_REPLICAS, (int)t);
        float f = ct_value(i, rank * CT_MAX_REPLICAS, (int)t) * 0.37f;
        memcpy(a + i * es, half ? (void *)&h : (void *)&f, es);
      }
      memcpy(b, a, n * es);
      clt_allreduce_plan *ar = NULL;
      clt_reduce_scatter_plan *rs = NULL;
      ck_assert_msg(clt_allreduce_plan_create(comm, n, dt, op, &opts, &ar) == 0, "%s", clt_last_error());
      ck_assert_msg(clt_reduce_scatter_plan_create(comm, n, NULL, dt, op, &opts, &rs) == 0, "%s", clt_last_error());
      if (strcmp(expected, "twolevel") != 0) /* two-level's reduce-scatter is the ring's */
        ck_assert_str_eq(clt_reduce_scatter_plan_algorithm(rs), clt_allreduce_plan_algorithm(ar));
      ck_assert_msg(clt_allreduce_run(ar, n ? a : NULL) == 0, "%s", clt_last_error());
      if (tu_ndev && n) {
        clt_context *ctx = tu_ctx[rank % tu_ndev];
        cl_mem buf = ct_f16_buffer(ctx, NULL, (n * es + 1) / 2);
        ck_assert_int_eq(clEnqueueWriteBuffer(clt_context_queue(ctx), buf, CL_TRUE, 0, n * es, b, 0, NULL, NULL),
                         CL_SUCCESS);
        ck_assert_msg(clt_reduce_scatter_run_device(rs, clt_context_queue(ctx), buf, 0) == 0, "%s", clt_last_error());
        ck_assert_int_eq(clEnqueueReadBuffer(clt_context_queue(ctx), buf, CL_TRUE, 0, n * es, b, 0, NULL, NULL),
                         CL_SUCCESS);
        clReleaseMemObject(buf);
      } else {
        ck_assert_msg(clt_reduce_scatter_run(rs, n ? b : NULL) == 0, "%s", clt_last_error());
      }
      ck_assert_int_eq(clt_reduce_scatter_plan_part(rs, rank, &lo, &len), 0);
      if (strcmp(expected, "twolevel") != 0)
        ck_assert_msg(memcmp(a + lo * es, b + lo * es, len * es) == 0, "%s count %zu %s: the part differs from the "
                      "all-reduce's", clt_dtype_name(dt), n, clt_reduce_op_name(op));
      clt_allreduce_plan_destroy(ar);
      clt_reduce_scatter_plan_destroy(rs);
      free(a), free(b);
    }
}
END_TEST

/* auto on one node: shm where the model says it is cheapest (the default
 * model: above the small-message threshold); forced on several pretend
 * nodes, two-level; ranks that force different ones are refused. */
START_TEST(choice) {
  clt_comm *c = NULL;
  ck_assert_msg(clt_comm_create(MPI_COMM_WORLD, &c) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_comm_set_allreduce(c, "auto"), 0);
  double ring = 0, shm = 0;
  size_t n = 1 << 20;
  ck_assert_int_eq(clt_comm_model_predict(c, "shm", n * 4, &shm), 0);
  ck_assert_int_eq(clt_comm_model_predict(c, "ring", n * 4, &ring), 0);
  clt_allreduce_plan *plan = NULL;
  ck_assert_msg(clt_allreduce_plan_create(c, n, CLT_F32, CLT_SUM, NULL, &plan) == 0, "%s", clt_last_error());
  int one_node = clt_comm_node_count(c) == 1;
  const char *want = nranks == 1 ? "local" : one_node && shm < ring ? "shm" : NULL;
  if (want)
    ck_assert_msg(strcmp(clt_allreduce_plan_algorithm(plan), want) == 0, "%s, expected %s (ring %g s, shm %g s)",
                  clt_allreduce_plan_algorithm(plan), want, ring, shm);
  else
    ck_assert_str_ne(clt_allreduce_plan_algorithm(plan), "shm");
  clt_allreduce_plan_destroy(plan);
  if (nranks > 1) {
    ck_assert_int_eq(clt_comm_set_allreduce(c, rank == 0 ? "shm" : "ring"), 0);
    int rc = clt_allreduce_plan_create(c, 100000, CLT_F32, CLT_SUM, NULL, &plan);
    ck_assert_int_eq(rc, CLT_EMISMATCH);
    assert_contains(clt_last_error(), "algorithm");
  }
  clt_comm_destroy(c);
}
END_TEST

/* A model file's fitted terms. Every rank writes its own copy of the file
 * (the same text), as every rank of a job reads CLT_COMM_MODEL. */
static void write_model(const char *path, const char *fitted_keys) {
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "rank %d: cannot write %s", rank, path);
  fprintf(f, "{\"alpha_intra\": 2e-6, \"beta_intra\": 1.5e-10, \"alpha_inter\": 1e-5, \"beta_inter\": 4e-10, "
             "\"gamma\": 3e-11%s%s}", *fitted_keys ? ", " : "", fitted_keys);
  fclose(f);
}

/* The comm a model file makes, or NULL with the error when refused. */
static clt_comm *comm_with_model(const char *path) {
  clt_comm *c = NULL;
  setenv("CLT_COMM_MODEL", path, 1);
  int rc = clt_comm_create(MPI_COMM_WORLD, &c);
  unsetenv("CLT_COMM_MODEL");
  return rc == 0 ? c : NULL;
}

static void model_refused(const char *path, const char *says) {
  ck_assert_msg(comm_with_model(path) == NULL, "rank %d: %s accepted, expected \"%s\"", rank, path, says);
  assert_contains(clt_last_error(), "CLT_COMM_MODEL");
  assert_contains(clt_last_error(), path);
  assert_contains(clt_last_error(), says);
}

/* Relative 1e-12: the test writes model.c's expressions in the same order,
 * so only a compiler's contraction into fma could move the last bit. */
static void assert_predicts(clt_comm *c, const char *algorithm, size_t bytes, double want, const char *form) {
  double got = -1;
  ck_assert_int_eq(clt_comm_model_predict(c, algorithm, bytes, &got), 0);
  if (nranks == 1) want = 0; /* one rank: nothing to exchange */
  ck_assert_msg(fabs(got - want) <= 1e-12 * want, "rank %d: %s of %zu bytes on %d ranks: %.17g s, the %s form "
                "gives %.17g", rank, algorithm, bytes, nranks, got, form, want);
}

START_TEST(model_file_fitted_terms) {
  char path[64];
  snprintf(path, sizeof path, "shm-model-%d.json", rank);
  char *chunk = getenv("CLT_ALLREDUCE_CHUNK") ? strdup(getenv("CLT_ALLREDUCE_CHUNK")) : NULL;
  setenv("CLT_ALLREDUCE_CHUNK", "262144", 1); /* pieces and chunks of 256 KiB: several rounds */
  const double N = nranks, piece = 262144, a = 2e-6, b = 1.5e-10, g = 3e-11, as = 7e-6, bs = 6.5e-11;
  const double bsf = 2e-11, far = 1048576, ar = 3e-6, br = 2.5e-10, brf = 3e-10;
  const size_t big = ((size_t)3 << 20) + 4, small = 4096; /* rounds; one handshake */
  const double k = ceil((double)big / (N * piece)), nb = (double)big, ns = (double)small;
  const double chunks = fmax(1, ceil(nb / N / piece));
  /* The fitted terms were timed on one node: on pretend nodes the α-β-γ
   * forms stay. */
  clt_comm *c = comm_with_model("");
  ck_assert_msg(c != NULL, "rank %d: %s", rank, clt_last_error());
  int one_node = clt_comm_node_count(c) == 1;
  clt_comm_destroy(c);
  const double shm_abg = 2 * k * a + (2 * N - 1) / (2 * N) * nb * b + (N - 1) / N * nb * g;
  const double ax = one_node ? a : 1e-5, bx = one_node ? b : 4e-10; /* the ring's slowest link */
  const double ring_abg = 2 * (N - 1) * ax + 2 * (N - 1) / N * nb * bx + (N - 1) / N * nb * g;

  /* shm's pair: the fitted form, rounds and all. */
  write_model(path, "\"alpha_shm\": 7e-6, \"beta_shm\": 6.5e-11");
  ck_assert_msg((c = comm_with_model(path)) != NULL, "rank %d: %s", rank, clt_last_error());
  assert_predicts(c, "shm", big, one_node ? 2 * k * as + (5 * N - 2) / N * (nb * bs) : shm_abg, "fitted");
  if (one_node) assert_predicts(c, "shm", small, as + (N + 3) * (ns * bs), "fitted one-handshake");
  assert_predicts(c, "ring", big, ring_abg, "alpha-beta-gamma ring");
  clt_comm_destroy(c);

  /* All four pairs: the bytes past the knee cost beta_*_far more; the
   * ring waits once per chunk of a segment. */
  write_model(path, "\"alpha_shm\": 7e-6, \"beta_shm\": 6.5e-11, \"beta_shm_far\": 2e-11, \"shm_far_bytes\": 1048576, "
                    "\"alpha_ring\": 3e-6, \"beta_ring\": 2.5e-10, \"beta_ring_far\": 3e-10, "
                    "\"ring_far_bytes\": 1048576");
  ck_assert_msg((c = comm_with_model(path)) != NULL, "rank %d: %s", rank, clt_last_error());
  assert_predicts(c, "shm", big, one_node ? 2 * k * as + (5 * N - 2) / N * (nb * bs + (nb - far) * bsf) : shm_abg,
                  "fitted with far bytes");
  assert_predicts(c, "ring", big,
                  one_node ? 2 * (N - 1) * chunks * ar + 2 * (N - 1) / N * (nb * br + (nb - far) * brf) : ring_abg,
                  "fitted ring");
  if (one_node) assert_predicts(c, "shm", small, as + (N + 3) * (ns * bs), "fitted one-handshake, under the knee");
  clt_comm_destroy(c);

  /* Neither (a file from before): the α-β-γ form, as always. */
  write_model(path, "");
  ck_assert_msg((c = comm_with_model(path)) != NULL, "rank %d: %s", rank, clt_last_error());
  assert_predicts(c, "shm", big, shm_abg, "alpha-beta-gamma");
  assert_predicts(c, "shm", small, a + ns * b / 2 + (N - 1) * ns * g, "alpha-beta-gamma one-handshake");
  clt_comm_destroy(c);

  /* Bad ones are refused naming the file and the key, on every rank alike. */
  write_model(path, "\"alpha_shm\": \"fast\", \"beta_shm\": 6.5e-11");
  model_refused(path, "\"alpha_shm\" must be a number of seconds");
  write_model(path, "\"alpha_shm\": 7e-6, \"beta_shm\": -1");
  model_refused(path, "\"beta_shm\" must be a number of seconds");
  write_model(path, "\"alpha_shm\": 7e-6, \"beta_shm\": 2");
  model_refused(path, "\"beta_shm\" must be a number of seconds");
  write_model(path, "\"alpha_shm\": 7e-6");
  model_refused(path, "no \"beta_shm\"");
  write_model(path, "\"beta_shm\": 6.5e-11");
  model_refused(path, "no \"alpha_shm\"");
  write_model(path, "\"alpha_ring\": 3e-6");
  model_refused(path, "no \"beta_ring\"");
  write_model(path, "\"beta_ring\": 3e-10, \"alpha_shm\": 7e-6, \"beta_shm\": 6.5e-11");
  model_refused(path, "no \"alpha_ring\"");
  write_model(path, "\"alpha_shm\": 7e-6, \"beta_shm\": 6.5e-11, \"beta_shm_far\": 2e-11");
  model_refused(path, "no \"shm_far_bytes\"");
  write_model(path, "\"alpha_shm\": 7e-6, \"beta_shm\": 6.5e-11, \"shm_far_bytes\": -1, \"beta_shm_far\": 2e-11");
  model_refused(path, "\"shm_far_bytes\" must be a number of bytes");
  write_model(path, "\"beta_ring_far\": 3e-10, \"ring_far_bytes\": 1048576");
  model_refused(path, "beta_ring_far and ring_far_bytes without alpha_ring and beta_ring");
  unlink(path);
  if (chunk) setenv("CLT_ALLREDUCE_CHUNK", chunk, 1);
  else unsetenv("CLT_ALLREDUCE_CHUNK");
  free(chunk);
}
END_TEST

/* Where the file has terms fitted on this node, auto chooses among the
 * algorithms fitted alone: here α, β and γ make recursive doubling a
 * hundred times cheaper than shm's fitted form, as the ping-pong's made
 * it look on one node where it ran 1.1-5.8x shm's time. */
START_TEST(fitted_choice) {
  if (nranks == 1) return;
  char path[64];
  snprintf(path, sizeof path, "shm-choice-%d.json", rank);
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "rank %d: cannot write %s", rank, path);
  fprintf(f, "{\"alpha_intra\": 1e-9, \"beta_intra\": 1e-13, \"alpha_inter\": 1e-9, \"beta_inter\": 1e-13, "
             "\"gamma\": 1e-13, \"alpha_shm\": 1e-6, \"beta_shm\": 5e-11, \"alpha_ring\": 1e-6, \"beta_ring\": 4e-10}");
  fclose(f);
  clt_comm *c = comm_with_model(path);
  ck_assert_msg(c != NULL, "rank %d: %s", rank, clt_last_error());
  ck_assert_int_eq(clt_comm_set_allreduce(c, "auto"), 0);
  const size_t counts[3] = {1024, 1 << 16, 1 << 22};
  for (int i = 0; i < 3; i++) {
    clt_allreduce_plan *plan = NULL;
    ck_assert_msg(clt_allreduce_plan_create(c, counts[i], CLT_F32, CLT_SUM, NULL, &plan) == 0, "%s", clt_last_error());
    const char *got = clt_allreduce_plan_algorithm(plan);
    if (clt_comm_node_count(c) == 1)
      ck_assert_msg(strcmp(got, "shm") == 0, "rank %d: %zu floats on one node: %s, expected shm (fitted)", rank,
                    counts[i], got);
    else /* several pretend nodes: the fitted terms do not apply, α-β-γ chooses */
      ck_assert_msg(strcmp(got, "shm") != 0, "rank %d: %zu floats on pretend nodes: shm", rank, counts[i]);
    clt_allreduce_plan_destroy(plan);
  }
  clt_comm_destroy(c);
  unlink(path);
}
END_TEST

/* Plans of several sizes interleaved on one window (it grows when a larger
 * one is made), and a communicator of its own alongside. */
START_TEST(plans_share_the_window) {
  clt_comm *other = NULL;
  ck_assert_msg(clt_comm_create(MPI_COMM_WORLD, &other) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_comm_set_allreduce(other, "shm"), 0);
  const size_t sizes[3] = {1000, 300001, 17};
  clt_allreduce_plan *plans[3], *op = NULL;
  for (int k = 0; k < 3; k++)
    ck_assert_msg(clt_allreduce_plan_create(comm, sizes[k], CLT_F32, CLT_SUM, NULL, &plans[k]) == 0, "%s",
                  clt_last_error());
  ck_assert_msg(clt_allreduce_plan_create(other, 5000, CLT_F32, CLT_AVG, NULL, &op) == 0, "%s", clt_last_error());
  float *x = malloc(300001 * sizeof *x), *want = malloc(300001 * sizeof *want);
  for (int it = 0; it < 5; it++)
    for (int k = 0; k < 4; k++) {
      size_t n = k < 3 ? sizes[k] : 5000;
      ct_fill(x, n, rank * CT_MAX_REPLICAS, it + k);
      ct_expect(want, n, nranks, 1, it + k, k == 3);
      ck_assert_msg(clt_allreduce_run(k < 3 ? plans[k] : op, x) == 0, "%s", clt_last_error());
      ck_assert_int_eq(ct_first_diff(x, want, n), -1);
    }
  for (int k = 0; k < 3; k++) clt_allreduce_plan_destroy(plans[k]);
  clt_allreduce_plan_destroy(op);
  clt_comm_destroy(other);
  free(x), free(want);
}
END_TEST

/* The last rank is stopped (SIGSTOP, by a child it forks) while the ranks
 * run shm all-reduces of 16 MiB back to back: the others fail with
 * CLT_ETIMEDOUT naming it, rather than spin on its flags for ever; it is
 * continued after they have, and fails too (its peers are gone). With
 * kill set it is killed instead (SIGKILL): the job ends (tests/comm/shm.sh).
 * With gather set the stream is of ZeRO's allgathers in a window of their
 * own (shm_gather.c: each rank fills its block there, then one handshake),
 * which wait for a peer with the same code and must fail the same way. */
static int stream_run(clt_allreduce_plan *plan, clt_allgather_plan *gather, size_t mine, float *x) {
  if (!gather) return clt_allreduce_run(plan, x);
  float *block = clt__allgather_window_block(gather, rank, 1);
  ck_assert_ptr_nonnull(block);
  for (size_t i = 0; i < mine; i++) block[i] = (float)(rank + 1);
  return clt__allgather_run_filled(gather);
}

static void stopped_rank(int kill_it, int gather) {
  if (nranks < 2) return;
  clt_comm *c = NULL;
  int victim = nranks - 1;
  ck_assert_msg(clt_comm_create(MPI_COMM_WORLD, &c) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_comm_set_allreduce(c, "shm"), 0);
  ck_assert_int_eq(clt_comm_set_timeout(c, 2), 0);
  size_t n = (size_t)4 << 20;
  clt_allreduce_plan *plan = NULL;
  clt_allgather_plan *g = NULL;
  size_t *counts = calloc((size_t)nranks, sizeof *counts);
  ck_assert_ptr_nonnull(counts);
  for (int r = 0; r < nranks; r++) counts[r] = n / (size_t)nranks + (r == 0 ? n % (size_t)nranks : 0);
  if (gather) {
    ck_assert_msg(clt__allgather_plan_create_window(c, n, counts, CLT_F32, &g) == 0, "%s", clt_last_error());
    ck_assert_msg(clt__allgather_window_block(g, rank, 1) != NULL, "one node: the plan has a window");
  } else {
    ck_assert_msg(clt_allreduce_plan_create(c, n, CLT_F32, CLT_SUM, NULL, &plan) == 0, "%s", clt_last_error());
    ck_assert_str_eq(clt_allreduce_plan_algorithm(plan), expected);
  }
  float *x = calloc(n, sizeof *x);
  pid_t child = -1;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == victim) {
    pid_t self = getpid();
    child = fork();
    ck_assert(child >= 0);
    if (child == 0) {
      usleep(300000);
      kill(self, kill_it ? SIGKILL : SIGSTOP);
      sleep(6); /* the others' timeout (2 s), the diagnosis's grace (1 s), slack */
      kill(self, SIGCONT);
      _exit(0);
    }
  }
  int rc = 0, runs = 0;
  double t0 = MPI_Wtime(), stop = 0;
  while (rc == 0 && MPI_Wtime() - t0 < 60) rc = stream_run(plan, g, counts[rank], x), runs++;
  stop = MPI_Wtime();
  ck_assert_msg(rc == CLT_ETIMEDOUT, "rank %d: %d runs, then %s: %s", rank, runs, clt_status_name(rc),
                rc ? clt_last_error() : "no error in 60 s");
  if (rank != victim) {
    char want[64];
    snprintf(want, sizeof want, "is rank %d alive?", victim);
    assert_contains(clt_last_error(), want);
    snprintf(want, sizeof want, "for rank %d", victim);
    assert_contains(clt_last_error(), want);
    fprintf(stderr, "rank %d (%.1f s, %s %d): %s\n", rank, stop - t0, gather ? "gather" : "run", runs,
            clt_last_error());
  } else {
    int status = 0;
    waitpid(child, &status, 0);
  }
  /* The communicator refuses further work. */
  ck_assert_int_ne(stream_run(plan, g, counts[rank], x), 0);
  assert_contains(clt_last_error(), "refused");
  clt_allreduce_plan_destroy(plan);
  clt_allgather_plan_destroy(g);
  MPI_Barrier(MPI_COMM_WORLD);
  clt_comm_destroy(c);
  free(x), free(counts);
}

START_TEST(stalled_rank) { stopped_rank(0, 0); }
END_TEST

START_TEST(killed_rank) { stopped_rank(1, 0); }
END_TEST

START_TEST(stalled_in_gather) { stopped_rank(0, 1); }
END_TEST

/* The arena (src/comm/shm_arena.c): bytes of the node's shared memory that
 * the trainer lends to a device as its gradient arena, all-reduced in
 * place from every rank's. Offered on one node of two or more ranks, one
 * holder at a time; the runs give shm.c's bits (the serial sum in rank
 * order, an average divided once) and touch nothing outside the buffer;
 * a buffer outside the arena runs as clt_allreduce_run; and a device
 * buffer over the arena (PoCL) sees the sums without a copy. */
static void arena_case(unsigned char *arena, size_t at, size_t n, clt_reduce_op op, int salt) {
  clt_allreduce_plan *plan = NULL;
  float *x = (float *)(void *)(arena + at), *want = malloc((n + 1) * sizeof *want);
  ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F32, op, NULL, &plan) == 0, "%s", clt_last_error());
  memset(arena + at - 4, 0x5a, 4);                 /* sentinels either side */
  memset(arena + at + n * sizeof *x, 0xa5, 4);
  for (int it = 0; it < 3; it++) {                 /* the flags grow run after run */
    ct_fill(x, n, rank * CT_MAX_REPLICAS, salt + it);
    ct_expect(want, n, nranks, 1, salt + it, op == CLT_AVG);
    ck_assert_msg(clt__allreduce_run_arena(plan, x) == 0, "%s", clt_last_error());
    long bad = ct_first_diff(x, want, n);
    ck_assert_msg(bad < 0, "rank %d: %zu floats at byte %zu, %s: element %ld is %g, expected %g", rank, n, at,
                  clt_reduce_op_name(op), bad, bad < 0 ? 0 : x[bad], bad < 0 ? 0 : want[bad]);
  }
  static const unsigned char before[4] = {0x5a, 0x5a, 0x5a, 0x5a}, after[4] = {0xa5, 0xa5, 0xa5, 0xa5};
  ck_assert_msg(memcmp(arena + at - 4, before, 4) == 0 && memcmp(arena + at + n * sizeof *x, after, 4) == 0,
                "rank %d: %zu floats at byte %zu wrote outside them", rank, n, at);
  cc_identical_across_ranks(x, n * sizeof *x, "arena all-reduce");
  /* Random floats: the serial float sum in rank order, bit for bit. */
  float *other = malloc((n + 1) * sizeof *other);
  for (int r = 0; r < nranks; r++) {
    ref_random(other, n, 7000u + (unsigned)r);
    for (size_t i = 0; i < n; i++) want[i] = r == 0 ? other[i] : want[i] + other[i];
  }
  if (op == CLT_AVG)
    for (size_t i = 0; i < n; i++) want[i] /= (float)nranks;
  ref_random(x, n, 7000u + (unsigned)rank);
  ck_assert_msg(clt__allreduce_run_arena(plan, x) == 0, "%s", clt_last_error());
  ck_assert_msg(ct_first_diff(x, want, n) < 0, "rank %d: %zu random floats: not the serial sum in rank order", rank, n);
  clt_allreduce_plan_destroy(plan);
  free(want), free(other);
}

START_TEST(arena_in_place) {
  int one_node = nranks > 1 && strcmp(expected, "shm") == 0;
  const size_t most = 786435 + 8192;
  if (!one_node) { /* one rank, or pretend nodes: the trainer copies through the window */
    ck_assert_msg(!clt__comm_arena_available(comm, 4096), "an arena offered across nodes");
    return;
  }
  if (!clt__comm_arena_available(comm, most * 4)) { /* a small /dev/shm (a container's) */
    if (rank == 0) fprintf(stderr, "arena: no room for %zu floats a rank in /dev/shm, skipped\n", most);
    return;
  }
  unsigned char *arena = NULL, *again = NULL;
  ck_assert_msg(clt__comm_arena_acquire(comm, most * 4, &arena) == 0, "%s", clt_last_error());
  ck_assert_msg(((uintptr_t)arena & 4095) == 0, "rank %d: the arena is not page-aligned", rank);
  ck_assert_msg(!clt__comm_arena_available(comm, 4096), "a held arena is offered again");
  for (size_t i = 0; i < NCOUNTS; i++) {
    arena_case(arena, 4096, counts[i], CLT_SUM, (int)i);
    arena_case(arena, 4 + 4 * i, counts[i], CLT_AVG, (int)i + 50); /* any float offset */
  }
  /* Outside the arena: a host run. */
  float x[1000], want[1000];
  clt_allreduce_plan *plan = NULL;
  ck_assert_msg(clt_allreduce_plan_create(comm, 1000, CLT_F32, CLT_SUM, NULL, &plan) == 0, "%s", clt_last_error());
  ct_fill(x, 1000, rank * CT_MAX_REPLICAS, 9);
  ct_expect(want, 1000, nranks, 1, 9, 0);
  ck_assert_msg(clt__allreduce_run_arena(plan, x) == 0, "%s", clt_last_error());
  ck_assert_int_eq(ct_first_diff(x, want, 1000), -1);

  /* A device buffer over the arena, where a device shares host memory. */
  for (int d = 0; d < clt_devices_count(tu_devices); d++) {
    clt_context *ctx = NULL;
    ck_assert_int_eq(clt_context_create(tu_devices, d, &ctx), 0);
    if (ctx->shared_buffers) {
      cl_mem buf = NULL;
      float back[1000];
      ck_assert_msg(clt__shared_buffer_wrap(ctx, arena, 1000 * sizeof(float), &buf) == 0, "%s", clt_last_error());
      ct_fill(x, 1000, rank * CT_MAX_REPLICAS, 10 + d);
      ct_expect(want, 1000, nranks, 1, 10 + d, 0);
      ck_assert_int_eq(clEnqueueWriteBuffer(ctx->queue, buf, CL_TRUE, 0, sizeof x, x, 0, NULL, NULL), CL_SUCCESS);
      ck_assert_int_eq(clFinish(ctx->queue), CL_SUCCESS);
      ck_assert_msg(clt__shared_buffer_host(buf) == (void *)arena, "the wrapped buffer is not listed as shared");
      ck_assert_msg(clt__allreduce_run_arena(plan, arena) == 0, "%s", clt_last_error());
      ck_assert_int_eq(clEnqueueReadBuffer(ctx->queue, buf, CL_TRUE, 0, sizeof back, back, 0, NULL, NULL), CL_SUCCESS);
      ck_assert_msg(ct_first_diff(back, want, 1000) < 0, "rank %d, %s: the device does not read the sums in place", rank,
                    ctx->info.name);
      clReleaseMemObject(buf);
    }
    clt_context_destroy(ctx);
  }
  clt_allreduce_plan_destroy(plan);

  /* Released, it is offered again, and a smaller one reuses it. */
  clt__comm_arena_release(comm);
  ck_assert_int_eq(clt__comm_arena_available(comm, 4096), 1);
  ck_assert_msg(clt__comm_arena_acquire(comm, 4096, &again) == 0, "%s", clt_last_error());
  ck_assert_ptr_eq(again, arena);
  clt__comm_arena_release(comm);
}
END_TEST

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int su = tu_setup();
  if (su == 1) MPI_Abort(MPI_COMM_WORLD, 1);
  if (clt_comm_create(MPI_COMM_WORLD, &comm) < 0 || clt_comm_set_allreduce(comm, "shm") < 0) {
    fprintf(stderr, "rank %d: clt_comm_create: %s\n", rank, clt_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  expected = nranks == 1 ? "local" : clt_comm_node_count(comm) > 1 ? "twolevel" : "shm";
  Suite *s = suite_create("shm");
  TCase *tc = tcase_create("shared-memory all-reduce");
  tcase_set_timeout(tc, 600);
  if (getenv("CT_STALL")) {
    tcase_add_test(tc, getenv("CT_GATHER") ? stalled_in_gather : stalled_rank);
  } else if (getenv("CT_KILL")) {
    tcase_add_test(tc, killed_rank);
  } else {
    tcase_add_test(tc, host_exact);
    tcase_add_test(tc, random_against_serial_sum);
    tcase_add_test(tc, host_f16);
    tcase_add_test(tc, device_buffers);
    tcase_add_test(tc, two_replicas);
    tcase_add_test(tc, reduce_scatter_parts);
    tcase_add_test(tc, choice);
    tcase_add_test(tc, model_file_fitted_terms);
    tcase_add_test(tc, fitted_choice);
    tcase_add_test(tc, plans_share_the_window);
    tcase_add_test(tc, arena_in_place);
  }
  suite_add_tcase(s, tc);
  int rc = tu_run(s);
  clt_comm_destroy(comm);
  tu_teardown();
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
