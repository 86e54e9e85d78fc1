/*
 * mpiutil.h: what the data-parallel test programs (test_dp, test_checkpoint_dp,
 * test_step, test_gpt_dp, run under mpirun by tests/lib/mpi_run.sh) share: MPI
 * and the device setup at start, this rank's devices, a temporary
 * directory every rank sees, and the job's exit code at the end.
 */
#ifndef CLT_MPIUTIL_H
#define CLT_MPIUTIL_H

#include <mpi.h>
#include <stddef.h>

#include <cltrain.h>
#include <cltrain/mpi.h>

/* MPI_Init_thread (funneled), this rank and the job's size, tu_setup (or
 * TU_SKIP when need_fashion and Fashion-MNIST is not installed) and a
 * communicator over MPI_COMM_WORLD. 0, or the exit code to return at once
 * (MPI already finalised where it has to be). */
int mu_start(int *argc, char ***argv, int need_fashion, int *rank, int *nranks, clt_comm **comm);
/* This rank's devices: one per rank, alternating vendors; one rank takes
 * them all. */
void mu_rank_devices(int rank, int nranks, clt_devices **mine);
/* A new directory /tmp/PREFIX-XXXXXX made by rank 0 and told to every rank
 * (collective); 0, or -1 after a message. */
int mu_shared_tmpdir(int rank, const char *prefix, char *dir, size_t len);
/* A trainer of m on the devices devspec selects from tu_devices, over comm
 * (NULL: this process alone); a failure fails the test naming the rank. */
clt_trainer *mu_trainer(const clt_model *m, const char *devspec, clt_comm *comm, const clt_train_options *o);
/* A malloc'd copy of t's parameters (m's parameter count of them). */
float *mu_params(clt_trainer *t, const clt_model *m);
/* rm -rf d. */
void mu_remove_tree(const char *d);
/* The job's result: the worst rc of any rank (a failure on one rank is a
 * failure of the job); once every rank is done, rank 0 removes tmpdir
 * (NULL: none); then MPI_Finalize (collective). */
int mu_finish(int rc, int rank, const char *tmpdir);

#endif
