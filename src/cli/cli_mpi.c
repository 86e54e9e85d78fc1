/*
 * cli_mpi.c: the tool's side of MPI. The library never initialises or
 * finalises MPI and never aborts; the tool does both: it initialises MPI
 * with MPI_THREAD_FUNNELED (cltrain makes every MPI call from the main
 * thread), and when a collective fails it prints why and calls MPI_Abort,
 * so the whole job ends instead of the other ranks waiting for this one.
 * It also chooses each rank's devices.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_MPI
#  include <cltrain/mpi.h>
#endif

#include "cli.h"

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_mpi_init(int *argc, char ***argv) {
#ifdef HAVE_MPI
  int provided = 0;
  /* Open MPI's hwloc would otherwise list OpenCL devices in MPI_Init,
   * starting PoCL before cpu_threads below could give it its thread count
   * (it reads POCL_MAX_PTHREAD_COUNT once); MPI needs no OpenCL devices. */
  setenv("HWLOC_COMPONENTS", "-opencl", 0);
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "cltrain: MPI_Init_thread failed\n");
    return CLI_EXIT_ERROR;
  }
#else
  (void)argc, (void)argv;
#endif
  return CLI_EXIT_OK;
}

void cli_mpi_finalize(void) {
#ifdef HAVE_MPI
  MPI_Finalize();
#endif
}

int cli_comm_create(clt_comm **out) {
#ifdef HAVE_MPI
  return clt_comm_create(MPI_COMM_WORLD, out);
#else
  return clt_comm_create_local(out);
#endif
}

int cli_comm_fail(const clt_comm *comm, int status, const char *what) {
  char where[160];
  int rank = comm ? clt_comm_rank(comm) : 0;
#ifdef HAVE_MPI
  int size = comm ? clt_comm_size(comm) : 1;
  if (!comm) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  }
#endif
  /* The library's communication errors name the rank already. */
  const char *detail = clt_last_error();
  if (strncmp(detail, "rank ", 5) == 0)
    snprintf(where, sizeof where, "%s", what);
  else
    snprintf(where, sizeof where, "rank %d: %s", rank, what);
  int code = cli_fail(status, where);
#ifdef HAVE_MPI
  if (size > 1) {
    fflush(stdout);
    fprintf(stderr, "cltrain: rank %d: ending the job (MPI_Abort)\n", rank);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
#endif
  return code;
}

void cli_abort_job(const clt_comm *comm, int exit_code) {
#ifdef HAVE_MPI
  if (comm && clt_comm_size(comm) > 1) {
    fflush(stdout);
    fprintf(stderr, "cltrain: rank %d: ending the job (MPI_Abort)\n", clt_comm_rank(comm));
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
#endif
  (void)comm, (void)exit_code;
}

/* A CPU device's threads, before any OpenCL call reads them: --threads N
 * sets them; without it, POCL_MAX_PTHREAD_COUNT (and rusticl's
 * LP_NUM_THREADS) as the user set them, else with several ranks on this
 * node the cores split evenly between them (at least 1 each), so that
 * ranks sharing a node do not oversubscribe it. The host BLAS of such a
 * device takes the same count (src/core/blas_host.c: the device's compute
 * units). */
static void cpu_threads(int threads, clt_comm *comm) {
  char n[16];
  const char *pocl = getenv("POCL_MAX_PTHREAD_COUNT");
  int explicit_env = pocl && *pocl;
  if (threads <= 0 && !explicit_env) {
    int local = clt_comm_local_size(comm);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (local > 1 && cores > 0) threads = cores / local > 0 ? (int)(cores / local) : 1;
  }
  if (threads <= 0) return;
  snprintf(n, sizeof n, "%d", threads);
  setenv("POCL_MAX_PTHREAD_COUNT", n, 1);
  setenv("LP_NUM_THREADS", n, 1);
}

int cli_rank_devices(const char *spec, int threads, clt_comm *comm, clt_devices **all, clt_devices **sel) {
  cpu_threads(threads, comm);
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
