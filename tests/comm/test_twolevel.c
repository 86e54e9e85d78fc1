/*
 * test_twolevel.c: the node-then-network all-reduce (src/comm/twolevel.c)
 * on pretend nodes (CLT_NODE_SIZE, set by tests/comm/twolevel.sh), host and
 * device buffers, f32 and f16, sum and average, counts from 0 to many
 * chunks: against exact sums (small integers) or a serial double-precision
 * sum, every rank with the same bits (the node steps go through shared
 * memory here: pretend nodes are on one machine). Also the node layout,
 * the choice of the cost model (shm on one node), refusals of bad
 * CLT_NODE_SIZE / CLT_ALLREDUCE / CLT_COMM_MODEL values and disagreeing
 * ranks, and a rank that never joins, named by the others after the
 * timeout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include <cltrain/mpi.h>

#include "commcheck.h"
#include "commtest.h"
#include "testutil.h"
#include "ref/ref.h"

static clt_comm *comm; /* CLT_ALLREDUCE=twolevel on CLT_NODE_SIZE's nodes */
static int rank, nranks;
/* "twolevel", or CT_TWOLEVEL's "twolevel-rabenseifner" (Rabenseifner's
 * between nodes: tests/comm/twolevel.sh). */
static const char *algorithm = "twolevel";

static const size_t counts[] = {0, 1, 2, 3, 5, 17, 1000, 8193, 100003};
#define NCOUNTS (sizeof counts / sizeof counts[0])

static void assert_contains(const char *text, const char *part) {
  ck_assert_msg(strstr(text, part) != NULL, "rank %d: \"%s\" does not say \"%s\"", rank, text, part);
}

/* The nodes CLT_NODE_SIZE describes, worked out here independently. */
static int expected_node(int r, int *node_size) {
  const char *v = getenv("CLT_NODE_SIZE");
  if (!strchr(v, ',')) {
    int k = atoi(v);
    *node_size = (r / k + 1) * k <= nranks ? k : nranks - (r / k) * k;
    return r / k;
  }
  int node = 0, at = 0;
  for (const char *p = v; *p; node++) {
    int k = atoi(p);
    if (r < at + k) {
      *node_size = k;
      return node;
    }
    at += k;
    p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
  }
  return -1;
}

START_TEST(layout) {
  int size = 0, node = expected_node(rank, &size), last = 0;
  expected_node(nranks - 1, &last);
  ck_assert_int_eq(clt_comm_node(comm), node);
  ck_assert_int_eq(clt_comm_node_count(comm), expected_node(nranks - 1, &last) + 1);
  ck_assert_int_eq(clt_comm_local_size(comm), size);
  int first = rank;
  while (first > 0 && expected_node(first - 1, &last) == node) first--;
  ck_assert_int_eq(clt_comm_local_rank(comm), rank - first);
}
END_TEST

static void check_host(size_t n, size_t chunk, clt_reduce_op op, int salt) {
  cc_check_host(comm, n, chunk, op, salt, nranks == 1 ? "local" : algorithm, "two-level host all-reduce");
}

START_TEST(host_exact) {
  for (size_t i = 0; i < NCOUNTS; i++) {
    check_host(counts[i], 0, CLT_SUM, (int)i);
    check_host(counts[i], 0, CLT_AVG, (int)i + 100);
  }
  check_host(37, 4, CLT_SUM, 1);      /* chunks of one element */
  check_host(10007, 64, CLT_AVG, 2);  /* many chunks in every ring */
}
END_TEST

/* Random floats against a serial double sum: each element goes through at
 * most N - 1 float additions, each rounding by at most 2^-24 of a partial
 * sum (<= the sum of magnitudes). The order differs from the flat ring's. */
START_TEST(random_against_serial_sum) {
  const size_t n = 50001;
  clt_allreduce_plan *plan = NULL;
  float *x = malloc(n * sizeof *x), *other = malloc(n * sizeof *other);
  double *sum = calloc(n, sizeof *sum), *mag = calloc(n, sizeof *mag);
  for (int r = 0; r < nranks; r++) {
    ref_random(other, n, 2000u + (unsigned)r);
    for (size_t i = 0; i < n; i++) sum[i] += other[i], mag[i] += fabs(other[i]);
  }
  ref_random(x, n, 2000u + (unsigned)rank);
  clt_allreduce_opts opts = {.chunk_bytes = 4096};
  ck_assert_msg(clt_allreduce_plan_create(comm, n, CLT_F32, CLT_SUM, &opts, &plan) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_allreduce_run(plan, x) == 0, "%s", clt_last_error());
  for (size_t i = 0; i < n; i++) {
    double tol = nranks * ldexp(1.0, -24) * mag[i] + 1e-30;
    ck_assert_msg(fabs(x[i] - sum[i]) <= tol, "element %zu: %.9g, serial sum %.9g (tolerance %g)", i, x[i], sum[i],
                  tol);
  }
  cc_identical_across_ranks(x, n * sizeof *x, "two-level random all-reduce");
  /* The same bits run after run. */
  float *again = malloc(n * sizeof *again);
  ref_random(again, n, 2000u + (unsigned)rank);
  ck_assert_msg(clt_allreduce_run(plan, again) == 0, "%s", clt_last_error());
  ck_assert_int_eq(ct_first_diff(x, again, n), -1);
  clt_allreduce_plan_destroy(plan);
  free(x), free(other), free(sum), free(mag), free(again);
}
END_TEST

/* fp16: within rounding of the exact sum (two-level adds in its own order). */
static void check_f16(size_t n, size_t chunk, clt_reduce_op op, clt_context *ctx, int salt) {
  cc_check_f16(comm, n, chunk, op, ctx, salt, NULL, "two-level f16 all-reduce");
}

START_TEST(host_f16) {
  const size_t sizes[] = {1, 7, 1000, 50001};
  for (size_t t = 0; t < 4; t++) {
    check_f16(sizes[t], 0, CLT_SUM, NULL, (int)t);
    check_f16(sizes[t], 0, CLT_AVG, NULL, (int)t + 10);
  }
}
END_TEST

START_TEST(device_buffers) {
  if (tu_ndev == 0) return;
  clt_context *ctx = tu_ctx[rank % tu_ndev];
  const size_t sizes[] = {0, 3, 1000, 30011}, chunks[] = {0, 0, 0, 0};
  cc_check_device(comm, ctx, sizes, chunks, 4, "two-level device all-reduce");
  check_f16(20011, 0, CLT_SUM, ctx, 5);
  check_f16(5, 0, CLT_AVG, ctx, 6);
}
END_TEST

/* Two replicas per process: summed locally first, then across nodes. */
START_TEST(two_replicas) {
  if (tu_ndev == 0) return;
  clt_context *ctx[2] = {tu_ctx[0], tu_ctx[1 % tu_ndev]};
  cc_check_two_replicas(comm, ctx, 5003, 0, 0);
}
END_TEST

/* auto: the cheapest by the model of the ring, the two two-levels (on
 * several nodes of several ranks), Rabenseifner's and shm (on one node;
 * small messages by CLT_ALLREDUCE_SMALL's threshold without a model file;
 * ties to the earlier in clt_allreduce_algorithms), the same on every
 * rank; and the fingerprint refuses ranks that choose differently. */
START_TEST(choice) {
  clt_comm *c = NULL;
  ck_assert_msg(clt_comm_create(MPI_COMM_WORLD, &c) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_comm_set_allreduce(c, "auto"), 0);
  ck_assert_int_eq(clt_comm_set_allreduce(c, "hierarchical"), CLT_EINVAL);
  assert_contains(clt_last_error(), "hierarchical");
  double t = 0;
  ck_assert_int_eq(clt_comm_model_predict(c, "tree", 4, &t), CLT_EINVAL);
  for (size_t n = 1 << 16; n <= (size_t)1 << 24; n <<= 4) { /* 256 KiB to 64 MiB */
    int multi = clt_comm_node_count(c) > 1 && clt_comm_node_count(c) < nranks;
    const char *names[] = {"ring", "twolevel", "shm", "rabenseifner", "twolevel-rabenseifner"}, *want = "ring";
    int candidate[] = {1, multi, clt_comm_node_count(c) == 1, 1, multi};
    double best = INFINITY;
    for (int k = 0; k < 5; k++) {
      if (!candidate[k]) continue;
      ck_assert_int_eq(clt_comm_model_predict(c, names[k], n * 4, &t), 0);
      if (t < best * (1 - 1e-9)) best = t, want = names[k];
    }
    if (nranks == 1) want = "local";
    clt_allreduce_plan *plan = NULL;
    ck_assert_msg(clt_allreduce_plan_create(c, n, CLT_F32, CLT_SUM, NULL, &plan) == 0, "%s", clt_last_error());
    ck_assert_msg(strcmp(clt_allreduce_plan_algorithm(plan), want) == 0, "%zu floats: %s, expected %s (%g s)", n,
                  clt_allreduce_plan_algorithm(plan), want, best);
    clt_allreduce_plan_destroy(plan);
  }
  clt_allreduce_plan *plan = NULL;
  if (nranks > 1) {
    ck_assert_int_eq(clt_comm_set_allreduce(c, rank == 0 ? "twolevel" : "ring"), 0);
    ck_assert_int_eq(clt_allreduce_plan_create(c, 1000, CLT_F32, CLT_SUM, NULL, &plan), CLT_EMISMATCH);
    assert_contains(clt_last_error(), "algorithm");
    assert_contains(clt_last_error(), "twolevel on rank 0 but ring on rank 1");
  }
  clt_comm_destroy(c);
}
END_TEST

/* Bad values: the same on every rank, so every rank refuses alike. */
static void refused(const char *var, const char *value, const char *says) {
  clt_comm *c = NULL;
  char *old = getenv(var) ? strdup(getenv(var)) : NULL;
  setenv(var, value, 1);
  int rc = clt_comm_create(MPI_COMM_WORLD, &c);
  ck_assert_msg(rc == CLT_EINVAL, "%s='%s': %s", var, value, rc == 0 ? "accepted" : clt_last_error());
  ck_assert(c == NULL);
  assert_contains(clt_last_error(), var);
  assert_contains(clt_last_error(), says);
  if (old) setenv(var, old, 1);
  else unsetenv(var);
  free(old);
}

START_TEST(bad_values) {
  refused("CLT_NODE_SIZE", "0", "not a number of ranks per node");
  refused("CLT_NODE_SIZE", "two", "not a number of ranks per node");
  refused("CLT_NODE_SIZE", "2,", "not a number of ranks per node");
  char sizes[32];
  snprintf(sizes, sizeof sizes, "%d,1", nranks);
  refused("CLT_NODE_SIZE", sizes, "add up to");
  refused("CLT_ALLREDUCE", "tree", "give one of auto, ring, recursive-doubling");
  refused("CLT_COMM_MODEL", "/nonexistent/model.json", "/nonexistent/model.json");
  char path[64];
  snprintf(path, sizeof path, "twolevel-model-%d.json", rank);
  FILE *f = fopen(path, "w");
  fputs("{\"alpha_intra\": 1e-6, \"beta_intra\": 1e-10, \"alpha_inter\": 1e-5, \"gamma\": 1e-10}", f);
  fclose(f);
  refused("CLT_COMM_MODEL", path, "no \"beta_inter\"");
  f = fopen(path, "w");
  fputs("{\"alpha_intra\": -1, \"beta_intra\": 1e-10, \"alpha_inter\": 1e-5, \"beta_inter\": 1, \"gamma\": 0}", f);
  fclose(f);
  refused("CLT_COMM_MODEL", path, "\"alpha_intra\" must be a number of seconds");
  f = fopen(path, "w");
  fputs("{\"alpha_intra\": 2e-6, \"beta_intra\": 1e-10, \"alpha_inter\": 1e-5, \"beta_inter\": 1e-9, \"gamma\": 0}",
        f);
  fclose(f);
  /* A good one is taken, and then the model chooses small messages too. */
  setenv("CLT_COMM_MODEL", path, 1);
  clt_comm *c = NULL;
  ck_assert_msg(clt_comm_create(MPI_COMM_WORLD, &c) == 0, "%s", clt_last_error());
  unsetenv("CLT_COMM_MODEL");
  clt_comm_destroy(c);
  unlink(path);
  /* Ranks that pretend different nodes all fail, naming a rank. */
  if (nranks > 1) {
    char *old = strdup(getenv("CLT_NODE_SIZE"));
    setenv("CLT_NODE_SIZE", rank == 0 ? "1" : "2", 1);
    int rc = clt_comm_create(MPI_COMM_WORLD, &c);
    ck_assert_int_eq(rc, CLT_EMISMATCH);
    assert_contains(clt_last_error(), "disagree on the nodes");
    assert_contains(clt_last_error(), "CLT_NODE_SIZE");
    setenv("CLT_NODE_SIZE", old, 1);
    free(old);
  }
}
END_TEST

/* The last rank never joins the second all-reduce: the others fail after
 * the timeout, naming it (the diagnosis hears from everyone else). */
START_TEST(absent_rank) {
  if (nranks < 3) return;
  clt_comm *c = NULL;
  int absent = nranks - 1;
  ck_assert_msg(clt_comm_create(MPI_COMM_WORLD, &c) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_comm_set_allreduce(c, algorithm), 0);
  ck_assert_int_eq(clt_comm_set_timeout(c, 2), 0);
  clt_allreduce_plan *plan = NULL;
  size_t n = 30000;
  clt_allreduce_opts opts = {.chunk_bytes = 1024};
  ck_assert_msg(clt_allreduce_plan_create(c, n, CLT_F32, CLT_SUM, &opts, &plan) == 0, "%s", clt_last_error());
  float *x = calloc(n, sizeof *x);
  if (rank != absent) {
    int rc = clt_allreduce_run(plan, x);
    ck_assert_msg(rc == CLT_ETIMEDOUT, "expected CLT_ETIMEDOUT, got %s: %s", clt_status_name(rc), clt_last_error());
    char want[64];
    snprintf(want, sizeof want, "is rank %d alive?", absent);
    assert_contains(clt_last_error(), want);
    snprintf(want, sizeof want, "rank %d: allreduce #2 waited", rank);
    assert_contains(clt_last_error(), want);
  } else {
    sleep(2 + 4);
    free(x);
  }
  clt_allreduce_plan_destroy(plan);
  MPI_Barrier(MPI_COMM_WORLD);
  clt_comm_destroy(c);
}
END_TEST

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (!getenv("CLT_NODE_SIZE")) setenv("CLT_NODE_SIZE", "2", 1);
  int su = tu_setup();
  if (su == 1) MPI_Abort(MPI_COMM_WORLD, 1);
  if (getenv("CT_TWOLEVEL")) algorithm = getenv("CT_TWOLEVEL");
  if (clt_comm_create(MPI_COMM_WORLD, &comm) < 0 || clt_comm_set_allreduce(comm, algorithm) < 0) {
    fprintf(stderr, "rank %d: clt_comm_create: %s\n", rank, clt_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  Suite *s = suite_create("twolevel");
  TCase *tc = tcase_create("two-level all-reduce");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, layout);
  tcase_add_test(tc, host_exact);
  tcase_add_test(tc, random_against_serial_sum);
  tcase_add_test(tc, host_f16);
  tcase_add_test(tc, device_buffers);
  tcase_add_test(tc, two_replicas);
  tcase_add_test(tc, choice);
  tcase_add_test(tc, bad_values);
  if (getenv("CT_ABSENT")) tcase_add_test(tc, absent_rank);
  suite_add_tcase(s, tc);
  int rc = tu_run(s);
  clt_comm_destroy(comm);
  tu_teardown();
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
