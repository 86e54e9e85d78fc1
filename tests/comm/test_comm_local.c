/*
 * test_comm_local.c: the one-rank communicator, which every build has (the
 * only one without MPI): several devices in one process summed and written
 * back (float32 and fp16), averages, broadcast and allgather on one rank, and the argument and
 * environment errors of the communicator and plans; in an MPI build, a
 * communicator asked for before the application initialised MPI (this
 * program never does) is refused, saying so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commtest.h"
#include "testutil.h"
#include <cltrain/version.h>
#if CLT_HAVE_MPI
#include <cltrain/mpi.h>
#endif

static clt_comm *comm;

START_TEST(local_communicator) {
  ck_assert_int_eq(clt_comm_size(comm), 1);
  ck_assert_int_eq(clt_comm_rank(comm), 0);
  ck_assert_int_eq(clt_comm_local_size(comm), 1);
  ck_assert_int_eq(clt_comm_local_rank(comm), 0);
  ck_assert(clt_comm_timeout(comm) == 300.0);
  ck_assert_int_eq(clt_comm_set_timeout(comm, 0), CLT_EINVAL);
  ck_assert_int_eq(clt_comm_set_timeout(comm, 12.5), 0);
  ck_assert(clt_comm_timeout(comm) == 12.5);
  if (tu_ndev) ck_assert_int_eq(clt_comm_default_device(comm, tu_devices), 0);
  clt_comm_destroy(NULL);
  clt_allreduce_plan_destroy(NULL);
}
END_TEST

START_TEST(host_one_rank) {
  const size_t sizes[] = {0, 1, 9, 100001};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    size_t n = sizes[t];
    float *x = malloc((n + 1) * sizeof *x), *want = malloc((n + 1) * sizeof *want);
    clt_allreduce_plan *plan = NULL;
    ck_assert_int_eq(clt_allreduce_plan_create(comm, n, CLT_F32, CLT_SUM, NULL, &plan), 0);
    ck_assert_str_eq(clt_allreduce_plan_algorithm(plan), "local");
    ct_fill(x, n, 0, (int)t);
    ct_expect(want, n, 1, 1, (int)t, 0);
    ck_assert_int_eq(clt_allreduce_run(plan, x), 0);
    ck_assert_int_eq(ct_first_diff(x, want, n), -1);
    clt_allreduce_plan_destroy(plan);
    free(x), free(want);
  }
}
END_TEST

/* Every device of the machine as one replica (PoCL and rusticl here), plus
 * a second buffer on the first device: the process sums them all. */
START_TEST(several_devices_one_process) {
  if (tu_ndev == 0) return;
  int nrep = tu_ndev + 1 > CT_MAX_REPLICAS ? CT_MAX_REPLICAS : tu_ndev + 1;
  const size_t sizes[] = {1, 1000, 70001};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    for (int avg = 0; avg < 2; avg++) {
      size_t n = sizes[t];
      cl_mem bufs[CT_MAX_REPLICAS];
      cl_command_queue queues[CT_MAX_REPLICAS];
      clt_context *ctx[CT_MAX_REPLICAS];
      size_t offs[CT_MAX_REPLICAS];
      float *x = malloc((n + 4) * sizeof *x), *want = malloc(n * sizeof *want);
      for (int q = 0; q < nrep; q++) {
        ctx[q] = tu_ctx[q % tu_ndev];
        offs[q] = (size_t)(q % 3) * sizeof(float);
        for (size_t i = 0; i < n + 4; i++) x[i] = -99.0f;
        ct_fill(x + q % 3, n, q, (int)t);
        bufs[q] = tu_buffer(ctx[q], x, n + 4);
        queues[q] = clt_context_queue(ctx[q]);
      }
      ct_expect(want, n, 1, nrep, (int)t, avg);
      clt_allreduce_plan *plan = NULL;
      clt_allreduce_opts opts = {.chunk_bytes = 4096, .replicas = nrep};
      ck_assert_int_eq(clt_allreduce_plan_create(comm, n, CLT_F32, avg ? CLT_AVG : CLT_SUM, &opts, &plan), 0);
      for (int run = 0; run < 2; run++) /* the second run reuses the staging */
        ck_assert_msg(clt_allreduce_run_devices(plan, nrep, queues, bufs, offs) == 0, "%s", clt_last_error());
      /* Two runs: the second sums the sums (times nrep), then averages. */
      for (size_t i = 0; i < n; i++) want[i] = avg ? want[i] : want[i] * (float)nrep;
      for (int q = 0; q < nrep; q++) {
        tu_read(ctx[q], bufs[q], 0, x, n + 4);
        long bad = ct_first_diff(x + q % 3, want, n);
        ck_assert_msg(bad < 0, "replica %d (%s), %zu elements, %s: element %ld is %g, expected %g", q,
                      tu_name(ctx[q]), n, avg ? "avg" : "sum", bad, bad < 0 ? 0 : x[q % 3 + bad],
                      bad < 0 ? 0 : want[bad]);
        ck_assert(x[(q % 3) ? 0 : n] == -99.0f);
        clReleaseMemObject(bufs[q]);
      }
      clt_allreduce_plan_destroy(plan);
      free(x), free(want);
    }
  }
}
END_TEST

/* fp16 on one rank: every device's replicas (and a second buffer on the
 * first device) added in float and rounded once, not replica by replica;
 * an average divides that sum and rounds again. Inputs over 24 binades, so
 * rounding after each replica would show. */
START_TEST(several_devices_one_process_f16) {
  if (tu_ndev == 0) return;
  int nrep = tu_ndev + 1 > CT_MAX_REPLICAS ? CT_MAX_REPLICAS : tu_ndev + 1;
  const size_t sizes[] = {1, 1000, 70001};
  const uint16_t guard = 0xabcd;
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    for (int avg = 0; avg < 2; avg++) {
      size_t n = sizes[t];
      int salt = (int)t * 2 + avg;
      cl_mem bufs[CT_MAX_REPLICAS];
      cl_command_queue queues[CT_MAX_REPLICAS];
      clt_context *ctx[CT_MAX_REPLICAS];
      size_t offs[CT_MAX_REPLICAS];
      uint16_t *x = malloc((n + 4) * sizeof *x), *want = malloc(n * sizeof *want);
      for (int q = 0; q < nrep; q++) {
        ctx[q] = tu_ctx[q % tu_ndev];
        offs[q] = (size_t)(q % 3) * sizeof *x;
        bufs[q] = ct_f16_buffer(ctx[q], NULL, n + 4);
        queues[q] = clt_context_queue(ctx[q]);
      }
      ct_expect_f16(want, n, 1, nrep, salt, avg, "local");
      clt_allreduce_plan *plan = NULL;
      clt_allreduce_opts opts = {.chunk_bytes = 4096, .replicas = nrep};
      ck_assert_int_eq(clt_allreduce_plan_create(comm, n, CLT_F16, avg ? CLT_AVG : CLT_SUM, &opts, &plan), 0);
      for (int run = 0; run < 2; run++) { /* the second run reuses the staging */
        for (int q = 0; q < nrep; q++) {
          for (size_t i = 0; i < n + 4; i++) x[i] = guard;
          for (size_t i = 0; i < n; i++) x[q % 3 + i] = ct_half_input(i, q, salt);
          ck_assert_int_eq(clEnqueueWriteBuffer(queues[q], bufs[q], CL_TRUE, 0, (n + 4) * sizeof *x, x, 0, NULL, NULL),
                           CL_SUCCESS);
        }
        ck_assert_msg(clt_allreduce_run_devices(plan, nrep, queues, bufs, offs) == 0, "%s", clt_last_error());
        for (int q = 0; q < nrep; q++) {
          ct_f16_read(ctx[q], bufs[q], 0, x, n + 4);
          long bad = ct_first_diff_f16(x + q % 3, want, n);
          ck_assert_msg(bad < 0, "replica %d (%s), %zu elements, %s, run %d: element %ld is 0x%04x, expected 0x%04x",
                        q, tu_name(ctx[q]), n, avg ? "avg" : "sum", run, bad, bad < 0 ? 0 : x[q % 3 + bad],
                        bad < 0 ? 0 : want[bad]);
          ck_assert(x[(q % 3) ? 0 : n] == guard);
        }
      }
      for (int q = 0; q < nrep; q++) clReleaseMemObject(bufs[q]);
      clt_allreduce_plan_destroy(plan);
      free(x), free(want);
    }
  }
}
END_TEST

START_TEST(host_one_rank_f16) {
  const size_t n = 1001;
  uint16_t x[1001], want[1001];
  for (int avg = 0; avg < 2; avg++) {
    clt_allreduce_plan *plan = NULL;
    ck_assert_int_eq(clt_allreduce_plan_create(comm, n, CLT_F16, avg ? CLT_AVG : CLT_SUM, NULL, &plan), 0);
    ck_assert_str_eq(clt_allreduce_plan_algorithm(plan), "local");
    for (size_t i = 0; i < n; i++) x[i] = ct_half_input(i, 0, 5);
    ct_expect_f16(want, n, 1, 1, 5, avg, "local");
    ck_assert_int_eq(clt_allreduce_run(plan, x), 0);
    ck_assert_int_eq(ct_first_diff_f16(x, want, n), -1);
    clt_allreduce_plan_destroy(plan);
  }
}
END_TEST

START_TEST(bcast_allgather_one_rank) {
  char buf[8] = "abcdefg", all[8] = {0};
  ck_assert_int_eq(clt_bcast(comm, buf, sizeof buf, 0), 0);
  ck_assert_str_eq(buf, "abcdefg");
  ck_assert_int_eq(clt_bcast(comm, buf, sizeof buf, 1), CLT_EINVAL);
  ck_assert_int_eq(clt_allgather(comm, buf, sizeof buf, all), 0);
  ck_assert_str_eq(all, "abcdefg");
}
END_TEST

START_TEST(argument_errors) {
  clt_allreduce_plan *plan = NULL;
  ck_assert_int_eq(clt_allreduce_plan_create(NULL, 4, CLT_F32, CLT_SUM, NULL, &plan), CLT_EINVAL);
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 4, CLT_I32, CLT_SUM, NULL, &plan), CLT_EUNSUPPORTED);
  ck_assert_msg(strstr(clt_last_error(), "i32") != NULL, "%s", clt_last_error());
  ck_assert_ptr_null(plan);
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 4, CLT_F32, (clt_reduce_op)7, NULL, &plan), CLT_EINVAL);
  clt_allreduce_opts opts = {.chunk_bytes = 2};
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 4, CLT_F32, CLT_SUM, &opts, &plan), CLT_EINVAL);
  opts = (clt_allreduce_opts){.replicas = -1};
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 4, CLT_F32, CLT_SUM, &opts, &plan), CLT_EINVAL);
  ck_assert_int_eq(clt_allreduce_run(NULL, NULL), CLT_EINVAL);
  ck_assert_int_eq(clt_allreduce_plan_create(comm, 100, CLT_F32, CLT_SUM, NULL, &plan), 0);
  ck_assert_int_eq(clt_allreduce_run(plan, NULL), CLT_EINVAL);
  if (tu_ndev) {
    /* 100 floats from byte 8 do not fit in 100 floats. */
    cl_mem small = tu_buffer(tu_ctx[0], NULL, 100);
    ck_assert_int_eq(clt_allreduce_run_device(plan, clt_context_queue(tu_ctx[0]), small, 8), CLT_ESHAPE);
    ck_assert_msg(strstr(clt_last_error(), "do not fit") != NULL, "%s", clt_last_error());
    clReleaseMemObject(small);
  }
  clt_allreduce_plan_destroy(plan);
}
END_TEST

START_TEST(environment) {
  clt_comm *c = NULL;
  setenv("CLT_TIMEOUT", "2.5", 1);
  setenv("CLT_ALLREDUCE_CHUNK", "256K", 1);
  ck_assert_int_eq(clt_comm_create_local(&c), 0);
  ck_assert(clt_comm_timeout(c) == 2.5);
  ck_assert_uint_eq(clt_comm_chunk_bytes(c), 256 << 10);
  setenv("CLT_ALLREDUCE_CHUNK", "64K", 1);
  clt_comm_destroy(c);
  ck_assert_int_eq(clt_comm_create_local(&c), 0);
  ck_assert_uint_eq(clt_comm_shm_piece_bytes(c), 64 << 10); /* the variable sets shm's pieces too */
  unsetenv("CLT_ALLREDUCE_CHUNK");
  clt_comm_destroy(c);
  ck_assert_int_eq(clt_comm_create_local(&c), 0);
  ck_assert_uint_eq(clt_comm_shm_piece_bytes(c), 256 << 10); /* one rank has a core of its own */
  ck_assert_uint_eq(clt_comm_shm_piece_bytes(NULL), 0);
  setenv("CLT_ALLREDUCE_CHUNK", "256K", 1);
  clt_comm_destroy(c);
  setenv("CLT_TIMEOUT", "2.5x", 1);
  ck_assert_int_eq(clt_comm_create_local(&c), CLT_EINVAL);
  ck_assert_ptr_null(c);
  ck_assert_msg(strstr(clt_last_error(), "CLT_TIMEOUT='2.5x'") != NULL, "%s", clt_last_error());
  setenv("CLT_TIMEOUT", "0", 1);
  ck_assert_int_eq(clt_comm_create_local(&c), CLT_EINVAL);
  unsetenv("CLT_TIMEOUT");
  setenv("CLT_ALLREDUCE_CHUNK", "2X", 1);
  ck_assert_int_eq(clt_comm_create_local(&c), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "CLT_ALLREDUCE_CHUNK='2X'") != NULL, "%s", clt_last_error());
  setenv("CLT_ALLREDUCE_CHUNK", "4G", 1);
  ck_assert_int_eq(clt_comm_create_local(&c), CLT_EINVAL);
  setenv("CLT_ALLREDUCE_CHUNK", "1", 1); /* below one float: every plan would refuse it */
  ck_assert_int_eq(clt_comm_create_local(&c), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "from 4") != NULL, "%s", clt_last_error());
  unsetenv("CLT_ALLREDUCE_CHUNK");
  setenv("CLT_ALLREDUCE_SMALL", "tiny", 1);
  ck_assert_int_eq(clt_comm_create_local(&c), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "CLT_ALLREDUCE_SMALL='tiny'") != NULL, "%s", clt_last_error());
  setenv("CLT_ALLREDUCE_SMALL", "0", 1);
  ck_assert_int_eq(clt_comm_create_local(&c), 0);
  clt_comm_destroy(c);
  unsetenv("CLT_ALLREDUCE_SMALL");
}
END_TEST

/* A device that never finishes (its queue held by a user event that is
 * never set): the device all-reduce gives up after CLT_TIMEOUT naming the
 * device and the operation, instead of waiting for ever, and the
 * communicator refuses more work. The buffer is the application's own: a
 * host-shared one (clt_buffer_create's on PoCL) is reduced after clFinish,
 * which has no deadline (src/comm/allreduce_device.c). */
START_TEST(a_device_that_never_finishes) {
  if (!tu_ndev) return;
  clt_comm *c = NULL;
  clt_allreduce_plan *plan = NULL;
  ck_assert_int_eq(clt_comm_create_local(&c), 0);
  ck_assert_int_eq(clt_comm_set_timeout(c, 1), 0);
  ck_assert_int_eq(clt_allreduce_plan_create(c, 1000, CLT_F32, CLT_SUM, NULL, &plan), 0);
  cl_command_queue q = clt_context_queue(tu_ctx[0]);
  cl_int e;
  cl_mem buf = clCreateBuffer(clt_context_cl(tu_ctx[0]), CL_MEM_READ_WRITE, 1000 * sizeof(float), NULL, &e);
  ck_assert_int_eq(e, CL_SUCCESS);
  /* Once while the device works, so its staging (mapped through the queue)
   * is made and reused. */
  ck_assert_msg(clt_allreduce_run_device(plan, q, buf, 0) == 0, "%s", clt_last_error());
  cl_context cl = NULL;
  ck_assert_int_eq(clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof cl, &cl, NULL), CL_SUCCESS);
  cl_event gate = clCreateUserEvent(cl, &e);
  ck_assert_int_eq(e, CL_SUCCESS);
  ck_assert_int_eq(clEnqueueMarkerWithWaitList(q, 1, &gate, NULL), CL_SUCCESS);
  clFlush(q);
  int rc = clt_allreduce_run_device(plan, q, buf, 0);
  fprintf(stderr, "a device that never finishes: %s\n", clt_last_error());
  ck_assert_msg(rc == CLT_ETIMEDOUT, "%s: %s", clt_status_name(rc), clt_last_error());
  char name[128] = "";
  cl_device_id d = NULL;
  clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof d, &d, NULL);
  clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name, name, NULL);
  /* A device whose buffers are host memory has its buffer mapped, others copied. */
  ck_assert_msg(strstr(clt_last_error(), "has not finished after 1 s") &&
                (strstr(clt_last_error(), "copying the buffer to the host") ||
                 strstr(clt_last_error(), "mapping the buffer to the host")) && /* staged, or mapped (unified memory) */
                strstr(clt_last_error(), name),
                "%s", clt_last_error());
  ck_assert_int_eq(clt_allreduce_run_device(plan, q, buf, 0), CLT_ETIMEDOUT); /* refused: broken */
  clSetUserEventStatus(gate, CL_COMPLETE);
  clFinish(q);
  clReleaseEvent(gate);
  clt_allreduce_plan_destroy(plan);
  clReleaseMemObject(buf);
  clt_comm_destroy(c);
}
END_TEST

#if CLT_HAVE_MPI
START_TEST(mpi_before_its_initialisation) {
  clt_comm *c = (clt_comm *)1;
  ck_assert_int_eq(clt_comm_create(MPI_COMM_WORLD, &c), CLT_EINVAL);
  ck_assert_ptr_null(c);
  ck_assert_msg(strstr(clt_last_error(), "clt_comm_create: MPI is not initialised") &&
                    strstr(clt_last_error(), "cltrain never initialises MPI itself"),
                "%s", clt_last_error());
  c = (clt_comm *)1;
  ck_assert_int_eq(clt_comm_create_f(0, &c), CLT_EINVAL);
  ck_assert_ptr_null(c);
  ck_assert_msg(strstr(clt_last_error(), "clt_comm_create_f: MPI is not initialised"), "%s", clt_last_error());
}
END_TEST
#endif

int main(void) {
  unsetenv("CLT_TIMEOUT");
  unsetenv("CLT_ALLREDUCE_CHUNK");
  unsetenv("CLT_ALLREDUCE_SMALL");
  if (tu_setup() == 1) return 1; /* no device: the host tests still run */
  if (clt_comm_create_local(&comm) < 0) {
    fprintf(stderr, "clt_comm_create_local: %s\n", clt_last_error());
    return 1;
  }
  Suite *s = suite_create("comm (one rank)");
  TCase *tc = tcase_create("local");
  tcase_add_test(tc, local_communicator);
  tcase_add_test(tc, host_one_rank);
  tcase_add_test(tc, several_devices_one_process);
  tcase_add_test(tc, several_devices_one_process_f16);
  tcase_add_test(tc, host_one_rank_f16);
  tcase_add_test(tc, bcast_allgather_one_rank);
  tcase_add_test(tc, argument_errors);
  tcase_add_test(tc, environment);
  tcase_add_test(tc, a_device_that_never_finishes);
#if CLT_HAVE_MPI
  tcase_add_test(tc, mpi_before_its_initialisation);
#endif
  suite_add_tcase(s, tc);
  int rc = tu_run(s);
  clt_comm_destroy(comm);
  tu_teardown();
  return rc;
}
