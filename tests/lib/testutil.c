/* testutil.c: shared setup for the Check suites (see testutil.h). */
#include "testutil.h"
#include "fashion.h"

#include <stdio.h>
#include <stdlib.h>

clt_devices *tu_devices;
clt_context **tu_ctx;
int tu_ndev;

int tu_setup(void) {
  int rc = clt_devices_discover(&tu_devices);
  if (rc == CLT_ENOICD || (rc == CLT_OK && clt_devices_count(tu_devices) == 0)) {
    fprintf(stderr, "SKIP: no OpenCL device (%s)\n", clt_last_error());
    return TU_SKIP;
  }
  if (rc < 0) {
    fprintf(stderr, "device discovery failed: %s\n", clt_last_error());
    return 1;
  }
  tu_ndev = clt_devices_count(tu_devices);
  tu_ctx = calloc(tu_ndev, sizeof *tu_ctx);
  for (int i = 0; i < tu_ndev; i++) {
    if ((rc = clt_context_create(tu_devices, i, &tu_ctx[i])) < 0) {
      fprintf(stderr, "context on device %d failed: %s\n", i, clt_last_error());
      return 1;
    }
    fprintf(stderr, "device %d: %s\n", i, tu_name(tu_ctx[i]));
  }
  return 0;
}

void tu_teardown(void) {
  for (int i = 0; i < tu_ndev; i++) clt_context_destroy(tu_ctx[i]);
  free(tu_ctx);
  clt_devices_destroy(tu_devices);
  tu_ctx = NULL;
  tu_devices = NULL;
  tu_ndev = 0;
}

int tu_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}

cl_mem tu_buffer(clt_context *ctx, const float *host, size_t n) {
  cl_mem buf = NULL;
  ck_assert_msg(clt_buffer_create(ctx, n * sizeof(float), &buf) == 0, "%s", clt_last_error());
  if (host)
    ck_assert_int_eq(clEnqueueWriteBuffer(clt_context_queue(ctx), buf, CL_TRUE, 0, n * sizeof(float), host, 0, NULL, NULL),
                     CL_SUCCESS);
  return buf;
}

void tu_read(clt_context *ctx, cl_mem buf, size_t off, float *host, size_t n) {
  ck_assert_int_eq(clEnqueueReadBuffer(clt_context_queue(ctx), buf, CL_TRUE, off * sizeof(float), n * sizeof(float),
                                       host, 0, NULL, NULL),
                   CL_SUCCESS);
}

const char *tu_name(clt_context *ctx) {
  static _Thread_local char buf[300];
  const clt_device_info *d = clt_context_device(ctx);
  snprintf(buf, sizeof buf, "%s (%s)", d->name, d->platform_name);
  return buf;
}

int tu_fashion_raw(const char *split, int64_t n, int ndims, const int64_t *dims,
                   void (*edit)(float *x, int64_t n, void *user), void *user, const char *path) {
  clt_dataset *ds = NULL;
  int64_t *idx = malloc((size_t)n * sizeof *idx);
  float *x = malloc((size_t)n * 784 * sizeof *x);
  int32_t *y = malloc((size_t)n * sizeof *y);
  int rc = idx && x && y ? CLT_OK : CLT_ENOMEM;
  for (int64_t i = 0; rc == CLT_OK && i < n; i++) idx[i] = i;
  if (rc == CLT_OK) rc = clt_dataset_open_idx(fashion_dir(), split, &ds);
  if (rc == CLT_OK) rc = clt_dataset_get_batch(ds, idx, n, x, y);
  if (rc == CLT_OK && edit) edit(x, n, user);
  if (rc == CLT_OK) rc = clt_dataset_write_raw(path, n, ndims, dims, 10, x, y);
  if (rc < 0) fprintf(stderr, "%s\n", clt_last_error());
  clt_dataset_destroy(ds);
  free(idx), free(x), free(y);
  return rc < 0 ? -1 : 0;
}
