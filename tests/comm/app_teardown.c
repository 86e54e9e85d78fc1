/*
 * app_teardown.c: an application that initialises and finalises MPI itself
 * tears cltrain down after a failed collective (tests/comm/teardown.sh,
 * under mpirun on 2 ranks with CLT_TIMEOUT=3 and a time limit). Every rank
 * trains a small MLP with clt_trainer_step for a step, then:
 *
 *   timeout   rank 1 sleeps 8 s (past CLT_TIMEOUT) before the next step:
 *             both steps return CLT_ETIMEDOUT;
 *   mismatch  the ranks call different collectives: rank 0 a step, rank 1,
 *             4 s later, an all-reduce: both fail (CLT_ETIMEDOUT, or
 *             CLT_EMISMATCH), with messages in flight, seconds apart;
 *   late      no failure: rank 1 destroys everything 5 s (past
 *             CLT_TIMEOUT) after rank 0 did, the step returning CLT_OK;
 *
 * and then clt_trainer_destroy, clt_comm_destroy and MPI_Finalize must
 * return on every rank: none of them may wait for a peer that has given
 * up, nor meet a peer's abandoned barrier (rank 1 in MPI_Win_free while
 * rank 0 was in MPI_Finalize hung both, issue 38). Each rank prints a line
 * after each stage ("rank R: step: ...", "rank R: destroyed", "rank R:
 * finalized") for the script to check.
 * Exit 0 when the failed call returned the expected status, 1 when not,
 * 77 when a rank has no OpenCL device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cltrain/mpi.h>
#include <cltrain/opencl.h>

#define IN 16
#define BATCH 8

static void say(int rank, const char *what, int rc) {
  if (rc < 0)
    printf("rank %d: %s: %s: %s\n", rank, what, clt_status_name(rc), clt_last_error());
  else
    printf("rank %d: %s\n", rank, what);
  fflush(stdout);
}

int main(int argc, char **argv) {
  int provided, rank, size, ok = 0;
  const char *mode = argc > 1 ? argv[1] : "timeout";
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  clt_devices *all = NULL, *mine = NULL;
  int have = clt_devices_discover(&all) == 0 && clt_devices_count(all) > 0, all_have = 0;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_have || size != 2) {
    if (rank == 0) fprintf(stderr, "SKIP: %s\n", size != 2 ? "this program runs on 2 ranks" : "no OpenCL device");
    clt_devices_destroy(all);
    MPI_Finalize();
    return 77;
  }

  clt_comm *comm = NULL;
  clt_model *m = NULL;
  clt_trainer *t = NULL;
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.batch = BATCH;
  o.log_every = 0;
  float x[BATCH * IN];
  int32_t y[BATCH];
  for (int i = 0; i < BATCH * IN; i++) x[i] = (float)((i * 7 + rank) % 11) / 11.0f;
  for (int i = 0; i < BATCH; i++) y[i] = (i + rank) % 4;
  clt_step_result r;
  int rc;
  if ((rc = clt_devices_select(all, "0", &mine)) < 0 || (rc = clt_comm_create(MPI_COMM_WORLD, &comm)) < 0 ||
      (rc = clt_model_parse("input 16\nlinear 8\nrelu\nlinear 4\n", "teardown.model", &m)) < 0 ||
      (rc = clt_trainer_create(m, mine, comm, &o, &t)) < 0 || (rc = clt_trainer_step(t, x, y, BATCH, &r)) < 0) {
    say(rank, "set-up", rc);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  say(rank, "first step", 0);

  int want = CLT_ETIMEDOUT;
  if (strcmp(mode, "mismatch") == 0) {
    static float buf[1 << 14];
    clt_allreduce_plan *plan = NULL;
    if ((rc = clt_allreduce_plan_create(comm, sizeof buf / sizeof *buf, CLT_F32, CLT_SUM, NULL, &plan)) < 0) {
      say(rank, "set-up", rc);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0)
      rc = clt_trainer_step(t, x, y, BATCH, &r);
    else
      rc = sleep(4) ? CLT_EINTERNAL : clt_allreduce_run(plan, buf);
    clt_allreduce_plan_destroy(plan);
    if (rc == CLT_EMISMATCH) want = rc;
  } else if (strcmp(mode, "late") == 0) {
    want = CLT_OK;
    rc = clt_trainer_step(t, x, y, BATCH, &r);
    if (rank == 1) sleep(5);
  } else {
    if (rank == 1) sleep(8);
    rc = clt_trainer_step(t, x, y, BATCH, &r);
  }
  say(rank, "step", rc);
  ok = rc == want;
  if (!ok) printf("rank %d: the step returned %d (%s), not %s\n", rank, rc, clt_status_name(rc), clt_status_name(want));

  clt_trainer_destroy(t);
  clt_comm_destroy(comm);
  clt_model_destroy(m);
  clt_devices_destroy(mine);
  clt_devices_destroy(all);
  say(rank, "destroyed", 0);
  MPI_Finalize();
  say(rank, "finalized", 0);
  return ok ? 0 : 1;
}
