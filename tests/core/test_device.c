/*
 * test_device.c: discovery finds the installed OpenCL implementations with
 * sane properties; selection specs choose the right devices and a spec that
 * matches nothing is an error listing what exists; clt_buffer_create's
 * buffers are host-shared exactly where the device allows it.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static int count_platform(const clt_devices *d, const char *platform) {
  int n = 0;
  for (int i = 0; i < clt_devices_count(d); i++)
    n += strstr(clt_devices_info(d, i)->platform_name, platform) != NULL;
  return n;
}

/* A driver whose ICD file is installed must show up: a device silently
 * missing would let every per-device test pass vacuously. */
START_TEST(installed_implementations_are_found) {
  const char *vendors = getenv("OCL_ICD_VENDORS"); /* the loader then reads another directory */
  if (vendors && *vendors) return;
  if (access("/etc/OpenCL/vendors/pocl.icd", F_OK) == 0)
    ck_assert_msg(count_platform(tu_devices, "Portable Computing Language") >= 1, "PoCL is installed but not found");
  const char *rusticl = getenv("RUSTICL_ENABLE");
  if (access("/etc/OpenCL/vendors/rusticl.icd", F_OK) == 0 && rusticl && *rusticl)
    ck_assert_msg(count_platform(tu_devices, "rusticl") >= 1, "rusticl is installed and enabled but not found");
}
END_TEST

START_TEST(properties_are_sane) {
  for (int i = 0; i < clt_devices_count(tu_devices); i++) {
    const clt_device_info *d = clt_devices_info(tu_devices, i);
    ck_assert_int_eq(d->index, i);
    ck_assert_int_gt(strlen(d->name), 0);
    ck_assert_int_gt(strlen(d->platform_name), 0);
    ck_assert_uint_gt(d->compute_units, 0);
    ck_assert_uint_gt(d->global_mem_bytes, 0);
    ck_assert_uint_gt(d->max_alloc_bytes, 0);
    ck_assert_uint_le(d->max_alloc_bytes, d->global_mem_bytes);
    ck_assert_uint_gt(d->local_mem_bytes, 0);
    ck_assert_uint_gt(d->max_work_group_size, 0);
    ck_assert_int_ge(d->opencl_c_major, 1);
    ck_assert_ptr_nonnull(strstr(d->opencl_c_version, "OpenCL C"));
    ck_assert(d->type == CLT_DEVICE_CPU || d->type == CLT_DEVICE_GPU || d->type == CLT_DEVICE_ACCELERATOR ||
              d->type == CLT_DEVICE_OTHER);
  }
  ck_assert_ptr_null(clt_devices_info(tu_devices, -1));
  ck_assert_ptr_null(clt_devices_info(tu_devices, clt_devices_count(tu_devices)));
}
END_TEST

/* Select with spec and return the count (or the negative status). */
static int select_count(const char *spec, clt_devices **out) {
  int rc = clt_devices_select(tu_devices, spec, out);
  return rc < 0 ? rc : clt_devices_count(*out);
}

START_TEST(select_by_type_index_and_name) {
  clt_devices *sel = NULL;
  int n = clt_devices_count(tu_devices);

  ck_assert_int_eq(select_count("all", &sel), n);
  clt_devices_destroy(sel);
  ck_assert_int_eq(select_count("ALL", &sel), n); /* case does not matter */
  clt_devices_destroy(sel);

  ck_assert_int_eq(select_count("0:0", &sel), 1);
  ck_assert_int_eq(clt_devices_info(sel, 0)->platform_index, clt_devices_info(tu_devices, 0)->platform_index);
  clt_devices_destroy(sel);

  ck_assert_int_eq(select_count("0", &sel), 1);
  ck_assert_str_eq(clt_devices_info(sel, 0)->name, clt_devices_info(tu_devices, 0)->name);
  clt_devices_destroy(sel);

  int cpus = 0;
  for (int i = 0; i < n; i++) cpus += clt_devices_info(tu_devices, i)->type == CLT_DEVICE_CPU;
  if (cpus) {
    ck_assert_int_eq(select_count("cpu", &sel), cpus);
    for (int i = 0; i < cpus; i++) ck_assert_int_eq(clt_devices_info(sel, i)->type, CLT_DEVICE_CPU);
    clt_devices_destroy(sel);
  }

  int pocl = count_platform(tu_devices, "Portable Computing Language");
  if (pocl) {
    ck_assert_int_eq(select_count("pocl", &sel), pocl);
    clt_devices_destroy(sel);
    ck_assert_int_eq(select_count("pocl:0", &sel), 1);
    ck_assert_ptr_nonnull(strstr(clt_devices_info(sel, 0)->platform_name, "Portable"));
    clt_devices_destroy(sel);
    ck_assert_int_eq(select_count("pocl, pocl,POCL", &sel), pocl); /* no repeats, spaces trimmed */
    clt_devices_destroy(sel);
  }
  int rusticl = count_platform(tu_devices, "rusticl");
  if (pocl && rusticl) {
    /* The result keeps the order of the terms. */
    ck_assert_int_eq(select_count("rusticl:0,pocl:0", &sel), 2);
    ck_assert_ptr_nonnull(strstr(clt_devices_info(sel, 0)->platform_name, "rusticl"));
    ck_assert_ptr_nonnull(strstr(clt_devices_info(sel, 1)->platform_name, "Portable"));
    /* A selection remembers where each device sits in the full list. */
    ck_assert_str_eq(clt_devices_info(tu_devices, clt_devices_info(sel, 0)->index)->name,
                     clt_devices_info(sel, 0)->name);
    clt_devices_destroy(sel);
  }
}
END_TEST

START_TEST(environment_supplies_the_default_spec) {
  clt_devices *sel = NULL;
  setenv("CLT_DEVICES", "0:0", 1);
  ck_assert_int_eq(select_count(NULL, &sel), 1);
  clt_devices_destroy(sel);
  ck_assert_int_eq(select_count("", &sel), 1);
  clt_devices_destroy(sel);
  setenv("CLT_DEVICES", "no-such-device", 1);
  ck_assert_int_eq(select_count(NULL, &sel), CLT_ENOMATCH);
  unsetenv("CLT_DEVICES");
  ck_assert_int_eq(select_count(NULL, &sel), clt_devices_count(tu_devices));
  clt_devices_destroy(sel);
}
END_TEST

START_TEST(bad_specs_are_errors_that_say_what_exists) {
  clt_devices *sel = (clt_devices *)1;
  ck_assert_int_eq(clt_devices_select(tu_devices, "nvidia-h9000", &sel), CLT_ENOMATCH);
  ck_assert_ptr_null(sel);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "'nvidia-h9000' matches no device"));
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "devices that exist"));
  ck_assert_ptr_nonnull(strstr(clt_last_error(), clt_devices_info(tu_devices, 0)->name));

  ck_assert_int_eq(clt_devices_select(tu_devices, "0:0,99:0", &sel), CLT_ENOMATCH);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "'99:0'"));
  ck_assert_int_eq(clt_devices_select(tu_devices, "999", &sel), CLT_ENOMATCH);
  ck_assert_int_eq(clt_devices_select(tu_devices, "cpu:99", &sel), CLT_ENOMATCH);

  ck_assert_int_eq(clt_devices_select(tu_devices, "pocl:x", &sel), CLT_EINVAL);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "pocl:x"));
  ck_assert_int_eq(clt_devices_select(tu_devices, ",,", &sel), CLT_EINVAL);
  ck_assert_int_eq(clt_devices_select(tu_devices, ":0", &sel), CLT_EINVAL);
}
END_TEST

START_TEST(contexts_on_every_device) {
  clt_context *ctx = (clt_context *)1;
  for (int i = 0; i < tu_ndev; i++) {
    ck_assert_ptr_nonnull(clt_context_cl(tu_ctx[i]));
    ck_assert_ptr_nonnull(clt_context_queue(tu_ctx[i]));
    ck_assert_str_eq(clt_context_device(tu_ctx[i])->name, clt_devices_info(tu_devices, i)->name);
    ck_assert_int_eq(clt_context_finish(tu_ctx[i]), 0);
  }
  ck_assert_int_eq(clt_context_create(tu_devices, tu_ndev, &ctx), CLT_EINVAL);
  ck_assert_ptr_null(ctx);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "does not exist"));
  clt_context_destroy(NULL);
  clt_devices_destroy(NULL);
}
END_TEST

/* OpenCL 2.0 names (the tests build against OpenCL 1.2's headers). */
#define TEST_CL_DEVICE_SVM_CAPABILITIES 0x1053
#define TEST_CL_DEVICE_SVM_FINE_GRAIN_BUFFER (1 << 1)
#define TEST_CL_MEM_USES_SVM_POINTER 0x1109

/* Host-shared (fine-grained SVM under a cl_mem, src/core/shared_buffers.c) on a
 * device with unified memory and fine-grained buffer SVM (PoCL), an
 * ordinary buffer elsewhere (rusticl here) or with CLT_SHARED_BUFFERS=0;
 * either way kernels and copies see the same bytes, and the host sees a
 * shared buffer's bytes in place once its queue has finished. */
START_TEST(buffers_are_host_shared_where_the_device_allows) {
  for (int off = 0; off < 2; off++) {
    if (off) setenv("CLT_SHARED_BUFFERS", "0", 1);
    for (int i = 0; i < tu_ndev; i++) {
      clt_context *ctx = NULL;
      ck_assert_int_eq(clt_context_create(tu_devices, i, &ctx), 0);
      cl_ulong svm = 0;
      if (clGetDeviceInfo(clt_context_cl_device(ctx), TEST_CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, NULL) !=
          CL_SUCCESS)
        svm = 0;
      int want = !off && clt_context_device(ctx)->unified_memory && (svm & TEST_CL_DEVICE_SVM_FINE_GRAIN_BUFFER);
      cl_mem buf = NULL;
      ck_assert_int_eq(clt_buffer_create(ctx, 4096 * sizeof(float), &buf), 0);
      cl_bool uses_svm = CL_FALSE;
      void *host = NULL;
      if (clGetMemObjectInfo(buf, TEST_CL_MEM_USES_SVM_POINTER, sizeof uses_svm, &uses_svm, NULL) != CL_SUCCESS)
        uses_svm = CL_FALSE;
      ck_assert_int_eq(clGetMemObjectInfo(buf, CL_MEM_HOST_PTR, sizeof host, &host, NULL), CL_SUCCESS);
      ck_assert_msg((uses_svm == CL_TRUE) == want && (host != NULL) == want, "%s (CLT_SHARED_BUFFERS %s): shared %d",
                    tu_name(ctx), off ? "0" : "unset", uses_svm == CL_TRUE);
      float x[4096], y[4096];
      for (int k = 0; k < 4096; k++) x[k] = (float)k - 7.5f;
      ck_assert_int_eq(clEnqueueWriteBuffer(clt_context_queue(ctx), buf, CL_FALSE, 0, sizeof x, x, 0, NULL, NULL),
                       CL_SUCCESS);
      ck_assert_int_eq(clt_context_finish(ctx), 0);
      if (want) {
        ck_assert_int_eq(memcmp(host, x, sizeof x), 0);
        ((float *)host)[5] = 1234.5f; /* a host write, seen by the copy queued after it */
        x[5] = 1234.5f;
      }
      tu_read(ctx, buf, 0, y, 4096);
      ck_assert_int_eq(memcmp(x, y, sizeof x), 0);
      clReleaseMemObject(buf);
      clt_context_destroy(ctx);
    }
  }
  unsetenv("CLT_SHARED_BUFFERS");
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("device");
  TCase *tc = tcase_create("device");
  tcase_add_test(tc, installed_implementations_are_found);
  tcase_add_test(tc, properties_are_sane);
  tcase_add_test(tc, select_by_type_index_and_name);
  tcase_add_test(tc, environment_supplies_the_default_spec);
  tcase_add_test(tc, bad_specs_are_errors_that_say_what_exists);
  tcase_add_test(tc, contexts_on_every_device);
  tcase_add_test(tc, buffers_are_host_shared_where_the_device_allows);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
