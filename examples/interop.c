/*
 * interop.c: an application that uses cltrain's interop headers the way
 * README says it may, built with pkg-config alone:
 *
 *   cc interop.c $(pkg-config --cflags --libs cltrain-mpi) -o interop
 *   cc interop.c $(pkg-config --cflags --libs cltrain) -o interop   # no MPI
 *
 * It calls OpenCL itself on the device cltrain found (cltrain/opencl.h) and,
 * built with cltrain-mpi (which needs a library built with MPI,
 * CLT_HAVE_MPI in cltrain/version.h), initialises MPI, hands cltrain its
 * communicator (cltrain/mpi.h) and calls MPI itself.
 * `make installcheck` (and so `make distcheck`) builds and runs it against
 * the installed library.
 */
#include <stdio.h>

#include <cltrain.h>
#include <cltrain/opencl.h>
#include <cltrain/version.h>
/* MPI where the library has it (CLT_HAVE_MPI) and the build asked for it:
 * cltrain-mpi.pc's flags define CLT_USE_MPI; cltrain.pc's need no MPI. */
#if CLT_HAVE_MPI && defined(CLT_USE_MPI)
#define USE_MPI 1
#include <cltrain/mpi.h>
#else
#define USE_MPI 0
#endif

static int fail(const char *what) {
  fprintf(stderr, "interop: %s: %s\n", what, clt_last_error());
  return 1;
}

int main(int argc, char **argv) {
  clt_comm *comm;
  clt_devices *devs;
#if USE_MPI
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (clt_comm_create(MPI_COMM_WORLD, &comm) < 0) return fail("communicator");
#else
  (void)argc, (void)argv;
  if (clt_comm_create_local(&comm) < 0) return fail("communicator");
#endif
  if (clt_devices_discover(&devs) < 0) return fail("devices");
  char name[256] = "";
  cl_int err = clGetDeviceInfo(clt_devices_cl_device(devs, 0), CL_DEVICE_NAME, sizeof name, name, NULL);
  if (err != CL_SUCCESS) {
    fprintf(stderr, "interop: clGetDeviceInfo: %d\n", err);
    return 1;
  }
  int ranks = clt_comm_size(comm);
#if USE_MPI
  int world;
  MPI_Allreduce(&ranks, &world, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  ranks = world;
#endif
  printf("cltrain %s: %d device(s), the first is %s; %d rank(s)\n", clt_version(), clt_devices_count(devs), name,
         ranks);
  clt_devices_destroy(devs);
  clt_comm_destroy(comm);
#if USE_MPI
  MPI_Finalize();
#endif
  return 0;
}
