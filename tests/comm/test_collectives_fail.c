/*
 * test_collectives_fail.c: the collectives' failures, under mpirun with 2 to 4
 * ranks (tests/comm/comm_fail.sh): ranks that disagree get CLT_EMISMATCH on
 * every rank, naming the ranks and values, without hanging, and the
 * communicator stays usable; a rank that never joins makes the others fail
 * with CLT_ETIMEDOUT naming it, within seconds (CLT_TIMEOUT is short here),
 * after which the communicator refuses further work.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cltrain/mpi.h>

#include "commtest.h"
#include "testutil.h"

static clt_comm *comm;
static int rank, nranks;

static void assert_contains(const char *text, const char *want) {
  ck_assert_msg(strstr(text, want) != NULL, "expected '%s' in: %s", want, text);
}

START_TEST(count_mismatch) {
  int odd = nranks - 1; /* this rank asks for one element more */
  size_t count = rank == odd ? 1001 : 1000;
  char want[64];
  clt_allreduce_plan *plan = (clt_allreduce_plan *)&plan; /* must become NULL */
  int rc = clt_allreduce_plan_create(comm, count, CLT_F32, CLT_SUM, NULL, &plan);
  ck_assert_int_eq(rc, CLT_EMISMATCH);
  ck_assert_ptr_null(plan);
  const char *msg = clt_last_error();
  assert_contains(msg, "count");
  snprintf(want, sizeof want, "1001 on rank %d", odd);
  assert_contains(msg, want);
  assert_contains(msg, "1000 on rank 0");
  /* Nothing was left in flight: the communicator still works. */
  float x = (float)rank;
  ck_assert_msg(clt_allreduce_plan_create(comm, 1, CLT_F32, CLT_SUM, NULL, &plan) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_allreduce_run(plan, &x) == 0, "%s", clt_last_error());
  ck_assert(x == (float)(nranks * (nranks - 1) / 2));
  clt_allreduce_plan_destroy(plan);
}
END_TEST

START_TEST(op_and_dtype_mismatch) {
  clt_allreduce_plan *plan = NULL;
  clt_reduce_op op = rank == 0 ? CLT_AVG : CLT_SUM;
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 10, CLT_F32, op, NULL, &plan), CLT_EMISMATCH);
  assert_contains(clt_last_error(), "op: avg on rank 0 but sum on rank 1");
  clt_dtype dt = rank == 1 ? CLT_F16 : CLT_F32;
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 10, dt, CLT_SUM, NULL, &plan), CLT_EMISMATCH);
  assert_contains(clt_last_error(), "dtype: f32 on rank 0 but f16 on rank 1");
  ck_assert_ptr_null(plan);
  /* fp16 on rank 0 only: every other rank is named. */
  dt = rank == 0 ? CLT_F16 : CLT_F32;
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 10, dt, CLT_SUM, NULL, &plan), CLT_EMISMATCH);
  assert_contains(clt_last_error(), "dtype: f16 on rank 0 but f32 on rank 1");
  if (nranks > 2) assert_contains(clt_last_error(), ", f32 on rank 2");
  /* The same on every rank runs; a type without a reduction is refused on
   * every rank alike. */
  uint16_t x = 0x3c00; /* 1.0 */
  ck_assert_msg(clt_allreduce_plan_create(comm, 1, CLT_F16, CLT_SUM, NULL, &plan) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_allreduce_run(plan, &x) == 0, "%s", clt_last_error());
  ck_assert_uint_eq(x, ct_half((float)nranks));
  clt_allreduce_plan_destroy(plan);
  plan = NULL;
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 10, CLT_I32, CLT_SUM, NULL, &plan), CLT_EUNSUPPORTED);
  /* Chunk sizes must agree too (they shape the messages). */
  clt_allreduce_opts opts = {.chunk_bytes = rank == 0 ? 4096 : 8192};
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 10, CLT_F32, CLT_SUM, &opts, &plan), CLT_EMISMATCH);
  assert_contains(clt_last_error(), "chunk bytes");
}
END_TEST

START_TEST(collective_mismatch) {
  char buf[64] = {0};
  /* Different roots, different sizes. */
  ck_assert_int_eq(clt_bcast(comm, buf, 16, rank == 0 ? 0 : 1), CLT_EMISMATCH);
  assert_contains(clt_last_error(), "root: 0 on rank 0 but 1 on rank 1");
  ck_assert_int_eq(clt_bcast(comm, buf, rank ? 8 : 16, 0), CLT_EMISMATCH);
  assert_contains(clt_last_error(), "bytes: 16 on rank 0 but 8 on rank 1");
  char *all = calloc((size_t)nranks, 64);
  ck_assert_int_eq(clt_allgather(comm, buf, rank == nranks - 1 ? 12 : 8, all), CLT_EMISMATCH);
  assert_contains(clt_last_error(), "bytes: 8 on rank 0 but 12 on rank");
  free(all);
  /* Different collectives at the same point. */
  clt_allreduce_plan *plan = NULL;
  int rc = rank == 0 ? clt_bcast(comm, buf, 16, 0) : clt_allreduce_plan_create(comm, 4, CLT_F32, CLT_SUM, NULL, &plan);
  ck_assert_int_eq(rc, CLT_EMISMATCH);
  assert_contains(clt_last_error(), "broadcasting on rank 0 but making an allreduce plan on rank 1");
  /* And still usable. */
  ck_assert_msg(clt_bcast(comm, buf, 16, 0) == 0, "%s", clt_last_error());
}
END_TEST

/* Debug messages of the library, collected while kept_log is set. */
static char kept_log[4096];
static void keep_log(clt_log_level level, const char *msg, void *user) {
  (void)level, (void)user;
  size_t n = strlen(kept_log);
  snprintf(kept_log + n, sizeof kept_log - n, "%s\n", msg);
}

/* The last rank never joins operation #k; the others must fail within the
 * short timeout plus the diagnosis's grace, naming it. */
static void absent_rank(size_t count, size_t chunk, const char *algorithm) {
  clt_comm *c = NULL;
  int absent = nranks - 1;
  ck_assert_msg(clt_comm_create(MPI_COMM_WORLD, &c) == 0, "%s", clt_last_error());
  ck_assert(clt_comm_timeout(c) > 0 && clt_comm_timeout(c) <= 5); /* CLT_TIMEOUT from comm_fail.sh */
  if (algorithm) ck_assert_int_eq(clt_comm_set_allreduce(c, algorithm), 0);
  clt_allreduce_plan *plan = NULL;
  clt_allreduce_opts opts = {.chunk_bytes = chunk};
  ck_assert_msg(clt_allreduce_plan_create(c, count, CLT_F32, CLT_SUM, &opts, &plan) == 0, "%s", clt_last_error());
  if (algorithm)
    ck_assert_str_eq(clt_allreduce_plan_algorithm(plan), algorithm);
  else /* the small-message algorithm for this number of ranks */
    ck_assert_str_ne(clt_allreduce_plan_algorithm(plan), "ring");
  float *x = calloc(count, sizeof *x);
  if (rank != absent) {
    double t0 = MPI_Wtime();
    int rc = clt_allreduce_run(plan, x);
    double waited = MPI_Wtime() - t0;
    ck_assert_msg(rc == CLT_ETIMEDOUT, "expected CLT_ETIMEDOUT, got %s: %s", clt_status_name(rc), clt_last_error());
    char want[64];
    snprintf(want, sizeof want, "is rank %d alive?", absent);
    fprintf(stderr, "rank %d (after %.1f s): %s\n", rank, waited, clt_last_error());
    assert_contains(clt_last_error(), want);
    snprintf(want, sizeof want, "rank %d: allreduce #2 waited", rank);
    assert_contains(clt_last_error(), want);
    assert_contains(clt_last_error(), "(step ");
    ck_assert_msg(waited < clt_comm_timeout(c) + 5, "took %.1f s", waited);
    /* Messages may be in flight: the communicator refuses more work. */
    ck_assert_int_eq(clt_allreduce_run(plan, x), CLT_ETIMEDOUT);
    assert_contains(clt_last_error(), "cannot be used again");
  }
  /* The absent rank never joins: it goes straight to the barrier below,
   * where it waits until everyone else has given up (no fixed sleep). */
  /* An abandoned receive may still be matched: the plan keeps its staging
   * buffers, and the caller keeps x, on the ranks that gave up. */
  if (rank == absent) free(x);
  kept_log[0] = 0;
  clt_log_level level = clt_log_get_level();
  clt_log_set(keep_log, NULL);
  clt_log_set_level(CLT_LOG_DEBUG);
  clt_allreduce_plan_destroy(plan);
  clt_log_set(NULL, NULL);
  clt_log_set_level(level);
  if (rank != absent) assert_contains(kept_log, "staging buffers are kept");
  MPI_Barrier(MPI_COMM_WORLD);
  clt_comm_destroy(c);
}

/* The halves have the all-reduce's deadlines: the last rank never joins a
 * reduce-scatter (then, on a fresh communicator, an allgather), and the
 * others fail naming it and the operation. */
static void absent_rank_half(int gather) {
  clt_comm *c = NULL;
  int absent = nranks - 1;
  const size_t count = 50000;
  ck_assert_msg(clt_comm_create(MPI_COMM_WORLD, &c) == 0, "%s", clt_last_error());
  clt_reduce_scatter_plan *rs = NULL;
  clt_allgather_plan *ag = NULL;
  clt_allreduce_opts opts = {.chunk_bytes = 1024};
  if (gather)
    ck_assert_msg(clt_allgather_plan_create(c, count, NULL, CLT_F32, &opts, &ag) == 0, "%s", clt_last_error());
  else
    ck_assert_msg(clt_reduce_scatter_plan_create(c, count, NULL, CLT_F32, CLT_SUM, &opts, &rs) == 0, "%s",
                  clt_last_error());
  float *x = calloc(count, sizeof *x);
  if (rank != absent) {
    int rc = gather ? clt_allgather_run(ag, x) : clt_reduce_scatter_run(rs, x);
    ck_assert_msg(rc == CLT_ETIMEDOUT, "expected CLT_ETIMEDOUT, got %s: %s", clt_status_name(rc), clt_last_error());
    char want[64];
    snprintf(want, sizeof want, "is rank %d alive?", absent);
    fprintf(stderr, "rank %d: %s\n", rank, clt_last_error());
    assert_contains(clt_last_error(), want);
    snprintf(want, sizeof want, "rank %d: %s #2 waited", rank, gather ? "allgather" : "reduce-scatter");
    assert_contains(clt_last_error(), want);
    assert_contains(clt_last_error(), "(step ");
  } else {
    free(x); /* the ranks that gave up keep theirs: abandoned receives may land */
  }
  clt_reduce_scatter_plan_destroy(rs);
  clt_allgather_plan_destroy(ag);
  MPI_Barrier(MPI_COMM_WORLD);
  clt_comm_destroy(c);
}

START_TEST(absent_rank_reduce_scatter) { absent_rank_half(0); }
END_TEST

START_TEST(absent_rank_allgather) { absent_rank_half(1); }
END_TEST

/* (Forced: on one node the model prefers shm even for 10 floats.) */
START_TEST(absent_rank_small) {
  absent_rank(10, 0, nranks >= 3 && nranks <= 8 && (nranks & (nranks - 1)) ? "gather" : "recursive-doubling");
}
END_TEST

/* shm's one-handshake round of small all-reduces. */
START_TEST(absent_rank_shm_small) { absent_rank(10, 0, "shm"); }
END_TEST

START_TEST(absent_rank_ring) { absent_rank(50000, 1024, "ring"); }
END_TEST

/* Through the node's shared memory: the others spin on the absent rank's
 * flags, within the same deadline. */
START_TEST(absent_rank_shm) { absent_rank(50000, 1024, "shm"); }
END_TEST

START_TEST(bad_environment) {
  clt_comm *c = (clt_comm *)&c;
  setenv("CLT_TIMEOUT", "soon", 1);
  ck_assert_int_eq(clt_comm_create(MPI_COMM_WORLD, &c), CLT_EINVAL);
  ck_assert_ptr_null(c);
  assert_contains(clt_last_error(), "CLT_TIMEOUT='soon'");
  setenv("CLT_TIMEOUT", "-3", 1);
  ck_assert_int_eq(clt_comm_create(MPI_COMM_WORLD, &c), CLT_EINVAL);
  unsetenv("CLT_TIMEOUT");
  setenv("CLT_ALLREDUCE_CHUNK", "lots", 1);
  ck_assert_int_eq(clt_comm_create(MPI_COMM_WORLD, &c), CLT_EINVAL);
  assert_contains(clt_last_error(), "CLT_ALLREDUCE_CHUNK='lots'");
  unsetenv("CLT_ALLREDUCE_CHUNK");
  ck_assert_int_eq(clt_comm_create(MPI_COMM_NULL, &c), CLT_EINVAL);
}
END_TEST

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks < 2) {
    fprintf(stderr, "SKIP: the failure tests need at least 2 ranks\n");
    MPI_Finalize();
    return 77;
  }
  char *timeout = getenv("CLT_TIMEOUT") ? strdup(getenv("CLT_TIMEOUT")) : NULL;
  if (clt_comm_create(MPI_COMM_WORLD, &comm) < 0) {
    fprintf(stderr, "rank %d: clt_comm_create: %s\n", rank, clt_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  Suite *s = suite_create("comm failures");
  TCase *tc = tcase_create("failures");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, count_mismatch);
  tcase_add_test(tc, op_and_dtype_mismatch);
  tcase_add_test(tc, collective_mismatch);
  tcase_add_test(tc, absent_rank_small);
  tcase_add_test(tc, absent_rank_ring);
  tcase_add_test(tc, absent_rank_shm);
  tcase_add_test(tc, absent_rank_shm_small);
  tcase_add_test(tc, absent_rank_reduce_scatter);
  tcase_add_test(tc, absent_rank_allgather);
  tcase_add_test(tc, bad_environment);
  suite_add_tcase(s, tc);
  int rc = tu_run(s);
  if (timeout) setenv("CLT_TIMEOUT", timeout, 1);
  free(timeout);
  clt_comm_destroy(comm);
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
