/*
 * cli_comm.c: the tool's side of MPI: initialise it (when built with MPI),
 * make the communicator, choose this rank's devices, and end the whole job
 * when a collective fails, since the other ranks would wait forever.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef HAVE_MPI
#include <mpi.h>
#include <cltrain/mpi.h>
#endif

#include "cli.h"

static int mpi_started; /* we called MPI_Init, so we call MPI_Finalize */

int cli_comm_init(int *argc, char ***argv, clt_comm **comm) {
  int rc;
#ifdef HAVE_MPI
  int provided, inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    /* FUNNELED: only this thread calls MPI; the prefetch threads never do. */
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      fprintf(stderr, "cltrain: MPI_Init_thread failed\n");
      return CLI_EXIT_ERROR;
    }
    mpi_started = 1;
  }
  rc = clt_comm_create(MPI_COMM_WORLD, comm);
#else
  (void)argc, (void)argv;
  rc = clt_comm_create_local(comm);
#endif
  return rc < 0 ? cli_fail(rc, "communicator") : CLI_EXIT_OK;
}

void cli_comm_finalize(clt_comm *comm) {
  clt_comm_destroy(comm);
#ifdef HAVE_MPI
  if (mpi_started) MPI_Finalize();
#endif
}

void cli_abort_job(clt_comm *comm, int exit_code) {
#ifdef HAVE_MPI
  if (comm && clt_comm_size(comm) > 1) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
#endif
  (void)comm;
  exit(exit_code);
}

int cli_rank_devices(const char *spec, clt_comm *comm, clt_devices **all, clt_devices **sel) {
  const char *env = getenv("CLT_DEVICES");
  int explicit_spec = (spec && *spec) || (env && *env);
  int ec = cli_select_devices(explicit_spec ? spec : "all", all, sel);
  if (ec != CLI_EXIT_OK || explicit_spec || clt_comm_size(comm) == 1) return ec;
  /* Several ranks and no spec: one device per rank, by local rank. */
  int d = clt_comm_default_device(comm, *sel);
  if (d < 0) return cli_fail(d, "devices");
  char one[32];
  snprintf(one, sizeof one, "%d", clt_devices_info(*sel, d)->index);
  clt_devices_destroy(*sel);
  *sel = NULL;
  int rc = clt_devices_select(*all, one, sel);
  return rc < 0 ? cli_fail(rc, "devices") : CLI_EXIT_OK;
}

int cli_total_replicas(clt_comm *comm, const clt_devices *sel) {
  int n = clt_comm_size(comm);
  int64_t mine = clt_devices_count(sel), *all = calloc((size_t)n, sizeof *all), total = 0;
  if (!all) return -1;
  if (n == 1 || clt_allgather(comm, &mine, sizeof mine, all) < 0) all[0] = mine, n = 1;
  for (int r = 0; r < n; r++) total += all[r];
  free(all);
  return (int)total;
}
