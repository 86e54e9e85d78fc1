/*
 * app_split.c: cltrain as an HPC application uses it (tests/comm/comm_app.sh,
 * under mpirun). The application initialises MPI itself, splits
 * MPI_COMM_WORLD into two sub-communicators (even and odd ranks), makes its
 * own OpenCL context, queue and buffers with plain OpenCL calls, and
 * all-reduces those buffers through cltrain on each sub-communicator,
 * interleaved with its own MPI traffic. Exit 0 when every rank's result is
 * exact, 1 otherwise, 77 when there is no OpenCL device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain/mpi.h>
#include <cltrain/opencl.h>

#define COUNT 40009

/* The application's own device: the first device of the first platform
 * that has one. */
static int open_device(cl_context *context, cl_command_queue *queue) {
  cl_platform_id platforms[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, platforms, &np) != CL_SUCCESS) return -1;
  for (cl_uint p = 0; p < np; p++) {
    cl_device_id dev;
    cl_uint nd = 0;
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 1, &dev, &nd) != CL_SUCCESS || nd == 0) continue;
    cl_int err;
    *context = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    if (err != CL_SUCCESS) continue;
    *queue = clCreateCommandQueue(*context, dev, 0, &err);
    if (err == CL_SUCCESS) return 0;
    clReleaseContext(*context);
  }
  return -1;
}

static float value(int world_rank, size_t i) { return (float)((int)((i + 3 * (size_t)world_rank) % 17) - 8); }

int main(int argc, char **argv) {
  int provided, world_rank, world_size, ok = 1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);

  cl_context context = NULL;
  cl_command_queue queue = NULL;
  int have = open_device(&context, &queue) == 0, all_have = 0;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_have) {
    if (world_rank == 0) fprintf(stderr, "SKIP: no OpenCL device\n");
    MPI_Finalize();
    return 77;
  }

  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
  int half_rank, half_size;
  MPI_Comm_rank(half, &half_rank);
  MPI_Comm_size(half, &half_size);

  clt_comm *comm = NULL;
  clt_allreduce_plan *plan = NULL;
  if (clt_comm_create(half, &comm) < 0 ||
      clt_allreduce_plan_create(comm, COUNT, CLT_F32, CLT_SUM, NULL, &plan) < 0) {
    fprintf(stderr, "rank %d: %s\n", world_rank, clt_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  float *host = malloc(COUNT * sizeof *host), *want = calloc(COUNT, sizeof *want);
  for (size_t i = 0; i < COUNT; i++) host[i] = value(world_rank, i);
  /* The expected sum over this half's members, by the application's own MPI. */
  MPI_Allreduce(host, want, COUNT, MPI_FLOAT, MPI_SUM, half);

  cl_int err;
  cl_mem buf = clCreateBuffer(context, CL_MEM_READ_WRITE, (COUNT + 16) * sizeof(float), NULL, &err);
  clEnqueueWriteBuffer(queue, buf, CL_TRUE, 16 * sizeof(float), COUNT * sizeof(float), host, 0, NULL, NULL);
  for (int round = 0; round < 3 && ok; round++) {
    if (clt_allreduce_run_device(plan, queue, buf, 16 * sizeof(float)) < 0) {
      fprintf(stderr, "rank %d: %s\n", world_rank, clt_last_error());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* The application's own messages between cltrain's. */
    int token = 1, sum = 0;
    MPI_Allreduce(&token, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ok &= sum == world_size;
    clEnqueueReadBuffer(queue, buf, CL_TRUE, 16 * sizeof(float), COUNT * sizeof(float), host, 0, NULL, NULL);
    for (size_t i = 0; i < COUNT && ok; i++) {
      if (host[i] != want[i]) {
        fprintf(stderr, "rank %d, round %d: element %zu is %g, expected %g\n", world_rank, round, i, host[i], want[i]);
        ok = 0;
      }
      want[i] *= (float)half_size; /* the next round sums the sums */
    }
  }
  printf("app_split: world rank %d, half %d rank %d of %d: %s\n", world_rank, world_rank % 2, half_rank, half_size,
         ok ? "ok" : "WRONG");

  clt_allreduce_plan_destroy(plan);
  clt_comm_destroy(comm);
  clReleaseMemObject(buf);
  clReleaseCommandQueue(queue);
  clReleaseContext(context);
  free(host);
  free(want);
  MPI_Comm_free(&half);
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
