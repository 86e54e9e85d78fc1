/*
 * mpiutil.c: the data-parallel test programs' shared setup (mpiutil.h).
 */
#include "mpiutil.h"

#include <check.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fashion.h"
#include "testutil.h"

int mu_start(int *argc, char ***argv, int need_fashion, int *rank, int *nranks, clt_comm **comm) {
  int provided;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, nranks);
  int rc = !need_fashion || fashion_dir() ? tu_setup() : TU_SKIP;
  if (rc) {
    MPI_Finalize();
    return rc;
  }
  if (clt_comm_create(MPI_COMM_WORLD, comm) < 0) {
    fprintf(stderr, "%s\n", clt_last_error());
    return 1;
  }
  return 0;
}

void mu_rank_devices(int rank, int nranks, clt_devices **mine) {
  char spec[16];
  snprintf(spec, sizeof spec, nranks == 1 ? "all" : "%d", rank % tu_ndev);
  clt_devices_select(tu_devices, spec, mine);
}

int mu_shared_tmpdir(int rank, const char *prefix, char *dir, size_t len) {
  if (rank == 0) {
    snprintf(dir, len, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(dir)) dir[0] = 0;
  }
  MPI_Bcast(dir, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (dir[0]) return 0;
  fprintf(stderr, "cannot make a directory in /tmp\n");
  return -1;
}

void mu_remove_tree(const char *d) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", d);
}

int mu_finish(int rc, int rank, const char *tmpdir) {
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && tmpdir && tmpdir[0]) mu_remove_tree(tmpdir);
  MPI_Finalize();
  return worst;
}

clt_trainer *mu_trainer(const clt_model *m, const char *devspec, clt_comm *comm, const clt_train_options *o) {
  clt_devices *devs;
  clt_trainer *t;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ck_assert_int_eq(clt_devices_select(tu_devices, devspec, &devs), 0);
  ck_assert_msg(clt_trainer_create(m, devs, comm, o, &t) == 0, "rank %d: %s", rank, clt_last_error());
  clt_devices_destroy(devs);
  return t;
}

float *mu_params(clt_trainer *t, const clt_model *m) {
  int64_t P = clt_model_param_count(m);
  float *p = malloc((size_t)P * sizeof *p);
  ck_assert_int_eq(clt_trainer_params(t, p, P), 0);
  return p;
}
