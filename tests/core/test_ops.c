/*
 * test_ops.c: the elementwise kernels and reductions against plain C on
 * every device (PoCL and rusticl), tensor views and their checks, buffers,
 * pinned memory, and the kernel runtime's error paths: a program that fails
 * to build (its log in the message), a missing source, CLT_KERNEL_DIR.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h" /* clt__sumsq_many */
#include "testutil.h"

/* Sizes: one element, less than a work-group, not a multiple of anything. */
static const size_t sizes[] = {1, 37, 1000, 100003};
#define NSIZES (sizeof sizes / sizeof sizes[0])
/* Views start this many floats into their buffers, so offsets are exercised. */
#define OFF 5

static clt_tensor view(cl_mem buf, size_t off, size_t n) {
  clt_tensor t;
  int64_t shape[1] = {(int64_t)n};
  ck_assert_msg(clt_tensor_view(buf, off * sizeof(float), CLT_F32, 1, shape, &t) == 0, "%s", clt_last_error());
  return t;
}

/* Elementwise results are single float operations (mad may fuse): 1e-6
 * relative covers one rounding; an indexing bug is off by ~1. */
START_TEST(elementwise_match_plain_c) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    for (size_t s = 0; s < NSIZES; s++) {
      size_t n = sizes[s], total = n + 2 * OFF;
      float *a = malloc(total * 4), *b = malloc(total * 4), *got = malloc(total * 4), *want = malloc(total * 4);
      ref_random(a, total, 1 + (unsigned)s);
      ref_random(b, total, 100 + (unsigned)s);
      cl_mem da = tu_buffer(ctx, a, total), db = tu_buffer(ctx, b, total), dc = tu_buffer(ctx, NULL, total);
      clt_tensor ta = view(da, OFF, n), tb = view(db, OFF, n), tc = view(dc, OFF, n);

      /* fill touches only its view: the guard floats around it stay 0 */
      ck_assert_int_eq(clt_fill(ctx, &tc, 3.5f), 0);
      tu_read(ctx, dc, 0, got, total);
      for (size_t i = 0; i < total; i++)
        ck_assert_float_eq(got[i], (i >= OFF && i < OFF + n) ? 3.5f : 0.0f);

      ck_assert_int_eq(clt_add(ctx, &ta, &tb, &tc), 0);
      tu_read(ctx, dc, OFF, got, n);
      for (size_t i = 0; i < n; i++) want[i] = a[OFF + i] + b[OFF + i];
      ck_assert_msg(ref_max_rel_error(got, want, n) <= 1e-6, "add on %s, n=%zu", tu_name(ctx), n);

      ck_assert_int_eq(clt_mul(ctx, &ta, &tb, &tc), 0);
      tu_read(ctx, dc, OFF, got, n);
      for (size_t i = 0; i < n; i++) want[i] = a[OFF + i] * b[OFF + i];
      ck_assert_msg(ref_max_rel_error(got, want, n) <= 1e-6, "mul on %s, n=%zu", tu_name(ctx), n);

      ck_assert_int_eq(clt_axpy(ctx, -1.25f, &ta, &tb), 0); /* b += -1.25 a */
      tu_read(ctx, db, OFF, got, n);
      for (size_t i = 0; i < n; i++) want[i] = b[OFF + i] + -1.25f * a[OFF + i];
      ck_assert_msg(ref_max_rel_error(got, want, n) <= 1e-6, "axpy on %s, n=%zu", tu_name(ctx), n);

      ck_assert_int_eq(clt_scale(ctx, &ta, 0.5f), 0);
      tu_read(ctx, da, 0, got, total);
      for (size_t i = 0; i < total; i++) want[i] = (i >= OFF && i < OFF + n) ? a[i] * 0.5f : a[i];
      ck_assert_msg(ref_max_rel_error(got, want, total) == 0, "scale on %s, n=%zu", tu_name(ctx), n);

      clt_buffer_release(da), clt_buffer_release(db), clt_buffer_release(dc);
      free(a), free(b), free(got), free(want);
    }
  }
}
END_TEST

/* A float32 tree sum of n terms in [-1, 1) errs by about log2(n) * 2^-24
 * times the sum of |terms| (<= n), far below 1e-6 * n. A dropped or doubled
 * element can hide inside that bound, so integer-valued data, which sums
 * exactly, checks that every element is counted once. */
START_TEST(reductions_match_plain_c_and_repeat_bitwise) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    for (size_t s = 0; s < NSIZES; s++) {
      size_t n = sizes[s];
      float *x = malloc((n + OFF) * 4);
      ref_random(x, n + OFF, 7 + (unsigned)s);
      cl_mem dx = tu_buffer(ctx, x, n + OFF);
      clt_tensor t = view(dx, OFF, n);
      float sum = 0, sum2 = 0, sq = 0;
      ck_assert_int_eq(clt_sum(ctx, &t, &sum), 0);
      ck_assert_int_eq(clt_sum(ctx, &t, &sum2), 0);
      ck_assert_int_eq(clt_sumsq(ctx, &t, &sq), 0);
      ck_assert_msg(memcmp(&sum, &sum2, sizeof sum) == 0, "sum is not repeatable on %s", tu_name(ctx));
      double want = ref_sum(x + OFF, n), want_sq = ref_sumsq(x + OFF, n);
      ck_assert_msg(fabs(sum - want) <= 1e-6 * n + 1e-6, "sum on %s n=%zu: %g vs %g", tu_name(ctx), n, sum, want);
      ck_assert_msg(fabs(sq - want_sq) <= 1e-6 * n + 1e-6, "sumsq on %s n=%zu: %g vs %g", tu_name(ctx), n, sq,
                    want_sq);

      /* Integer-valued data sums exactly: any lost or repeated element shows. */
      for (size_t i = 0; i < n + OFF; i++) x[i] = (float)(int)(i % 7) - 3.0f;
      ck_assert_int_eq(clEnqueueWriteBuffer(clt_context_queue(ctx), dx, CL_TRUE, 0, (n + OFF) * 4, x, 0, NULL, NULL),
                       CL_SUCCESS);
      ck_assert_int_eq(clt_sum(ctx, &t, &sum), 0);
      ck_assert_int_eq(clt_sumsq(ctx, &t, &sq), 0);
      ck_assert_msg(sum == (float)ref_sum(x + OFF, n), "exact sum on %s n=%zu", tu_name(ctx), n);
      ck_assert_msg(sq == (float)ref_sumsq(x + OFF, n), "exact sumsq on %s n=%zu", tu_name(ctx), n);
      clt_buffer_release(dx);
      free(x);
    }
  }
}
END_TEST

/* Several sums of squares in one call (clt__sumsq_many: every reduction
 * queued, one read): each the bits of clt_sumsq of the same tensor, for
 * parts of different sizes and offsets in one buffer, as the scratch grows
 * (1, then 5 results) and is reused by fewer (3). The trainer's gradient
 * norm on several ranks reads its parts this way. */
START_TEST(many_sums_of_squares_in_one_read) {
  static const size_t at[5] = {0, 3, 1000, 1001, 5000}, len[5] = {1, 997, 1, 3999, 12345};
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    size_t total = at[4] + len[4];
    float *x = malloc(total * 4);
    ref_random(x, total, 11);
    cl_mem dx = tu_buffer(ctx, x, total);
    clt_tensor parts[5];
    float one[5], many[5];
    for (int k = 0; k < 5; k++) {
      parts[k] = view(dx, at[k], len[k]);
      ck_assert_int_eq(clt_sumsq(ctx, &parts[k], &one[k]), 0);
    }
    static const int counts[3] = {1, 5, 3};
    for (int c = 0; c < 3; c++) {
      memset(many, 0xff, sizeof many);
      ck_assert_msg(clt__sumsq_many(ctx, parts, counts[c], many) == 0, "%s", clt_last_error());
      for (int k = 0; k < counts[c]; k++)
        ck_assert_msg(memcmp(&many[k], &one[k], 4) == 0, "part %d of %d on %s: %.9g, alone %.9g", k, counts[c],
                      tu_name(ctx), many[k], one[k]);
    }
    ck_assert_int_eq(clt__sumsq_many(ctx, parts, 0, many), 0); /* none: nothing read */
    clt_buffer_release(dx);
    free(x);
  }
}
END_TEST

START_TEST(views_check_their_shapes) {
  clt_context *ctx = tu_ctx[0];
  cl_mem buf = tu_buffer(ctx, NULL, 100);
  clt_tensor t, u;
  char s[128];
  int64_t shape[2] = {10, 10}, big[2] = {10, 11}, zero[2] = {10, 0};
  ck_assert_int_eq(clt_tensor_view(buf, 0, CLT_F32, 2, shape, &t), 0);
  ck_assert_int_eq(clt_tensor_numel(&t), 100);
  ck_assert_uint_eq(clt_tensor_bytes(&t), 400);
  ck_assert_str_eq(clt_tensor_shape_str(&t, s, sizeof s), "(10, 10) f32");

  ck_assert_int_eq(clt_tensor_view(buf, 0, CLT_F32, 2, big, &t), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "(10, 11) f32"));
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "buffer holds 400"));
  ck_assert_int_eq(clt_tensor_view(buf, 4, CLT_F32, 2, shape, &t), CLT_ESHAPE); /* runs off the end */
  ck_assert_int_eq(clt_tensor_view(buf, 2, CLT_F32, 1, shape, &t), CLT_ESHAPE); /* misaligned */
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "not a multiple"));
  ck_assert_int_eq(clt_tensor_view(buf, 0, CLT_F32, 2, zero, &t), CLT_ESHAPE);
  ck_assert_int_eq(clt_tensor_view(buf, 0, CLT_F32, 0, shape, &t), CLT_ESHAPE);
  ck_assert_int_eq(clt_tensor_view(buf, 0, CLT_F32, CLT_MAX_DIMS + 1, shape, &t), CLT_ESHAPE);
  ck_assert_int_eq(clt_tensor_view(NULL, 0, CLT_F32, 1, shape, &t), CLT_EINVAL);

  /* Ops refuse tensors of different sizes or types, naming the shapes. */
  ck_assert_int_eq(clt_tensor_view(buf, 0, CLT_F32, 2, shape, &t), 0);
  int64_t small[1] = {7};
  ck_assert_int_eq(clt_tensor_view(buf, 0, CLT_F32, 1, small, &u), 0);
  ck_assert_int_eq(clt_add(ctx, &t, &u, &t), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "(7) f32"));
  ck_assert_int_eq(clt_axpy(ctx, 1.0f, &u, &t), CLT_ESHAPE);
  ck_assert_int_eq(clt_tensor_view(buf, 0, CLT_I32, 1, small, &u), 0);
  ck_assert_int_eq(clt_fill(ctx, &u, 1.0f), CLT_EINVAL);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "not f32"));

  float host[100];
  ck_assert_int_eq(clt_tensor_upload(ctx, &t, host, 399), CLT_ESHAPE);
  ck_assert_int_eq(clt_tensor_download(ctx, &t, host, 401), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "401 host bytes"));
  clt_buffer_release(buf);
}
END_TEST

START_TEST(buffers_and_pinned_memory) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    const clt_device_info *info = clt_context_device(ctx);
    cl_mem buf = NULL;
    ck_assert_int_eq(clt_buffer_create(ctx, 0, &buf), CLT_EINVAL);
    /* More than the device allows in one buffer: the message says both. */
    ck_assert_int_eq(clt_buffer_create(ctx, info->max_alloc_bytes + 4096, &buf), CLT_EDEVMEM);
    ck_assert_ptr_null(buf);
    ck_assert_ptr_nonnull(strstr(clt_last_error(), "could not allocate"));
    ck_assert_ptr_nonnull(strstr(clt_last_error(), "in one buffer"));
    ck_assert_ptr_nonnull(strstr(clt_last_error(), info->name));

    clt_pinned *p = NULL;
    ck_assert_int_eq(clt_pinned_create(ctx, 1 << 20, &p), 0);
    ck_assert_ptr_nonnull(clt_pinned_ptr(p));
    ck_assert_uint_eq(clt_pinned_size(p), 1 << 20);
    float *h = clt_pinned_ptr(p);
    for (int i = 0; i < 1000; i++) h[i] = (float)i;
    cl_mem dbuf = tu_buffer(ctx, NULL, 1000);
    clt_tensor t = view(dbuf, 0, 1000);
    ck_assert_int_eq(clt_tensor_upload_async(ctx, &t, h, 4000), 0); /* pinned: no need to wait */
    float sum = 0;
    ck_assert_int_eq(clt_sum(ctx, &t, &sum), 0);
    ck_assert_float_eq(sum, 499500.0f);
    clt_buffer_release(dbuf);
    clt_pinned_destroy(p);
    clt_pinned_destroy(NULL);
  }
}
END_TEST

START_TEST(a_failed_build_returns_its_log) {
  static const char *bad = "__kernel void k(__global float *x) { x[0] = undefined_thing_42; }\n";
  static const char *good = "__kernel void k(__global float *x) { x[0] = WHAT; }\n";
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    cl_program prog = (cl_program)1;
    ck_assert_int_eq(clt_context_build(ctx, "bad", bad, NULL, &prog), CLT_EBUILD);
    ck_assert_ptr_null(prog);
    ck_assert_msg(strstr(clt_last_error(), "undefined_thing_42") != NULL, "no build log in: %s", clt_last_error());
    ck_assert_ptr_nonnull(strstr(clt_last_error(), "'bad'"));
    /* -D tunables reach the compiler, and programs are cached per options. */
    cl_program p1, p2, p3;
    ck_assert_int_eq(clt_context_build(ctx, "good", good, "-DWHAT=1.0f", &p1), 0);
    ck_assert_int_eq(clt_context_build(ctx, "good", good, "-DWHAT=1.0f", &p2), 0);
    ck_assert_int_eq(clt_context_build(ctx, "good", good, "-DWHAT=2.0f", &p3), 0);
    ck_assert_ptr_eq(p1, p2);
    ck_assert_ptr_ne(p1, p3);
    ck_assert_int_eq(clt_context_build(ctx, "good2", good, NULL, &p3), CLT_EBUILD); /* WHAT undefined */
  }
}
END_TEST

START_TEST(kernel_sources_embedded_and_from_a_directory) {
  const char *const *names = clt_kernel_sources();
  int found = 0;
  for (int i = 0; names[i]; i++) found += strcmp(names[i], "elementwise") == 0 || strcmp(names[i], "reduce") == 0;
  ck_assert_int_eq(found, 2);

  clt_context *ctx = tu_ctx[0];
  cl_kernel k = (cl_kernel)1;
  ck_assert_int_eq(clt_context_kernel(ctx, "no_such_source", "k", NULL, &k), CLT_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "no_such_source"));
  ck_assert_int_eq(clt_context_kernel(ctx, "elementwise", "no_such_kernel", NULL, &k), CLT_ECL);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "no_such_kernel"));

  char dir[] = "/tmp/clt-kernels-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/mine.cl", dir);
  FILE *f = fopen(path, "w");
  fputs("__kernel void twice(__global float *x, const ulong n) {\n"
        "  size_t i = get_global_id(0);\n  if (i < n) x[i] *= 2.0f;\n}\n", f);
  fclose(f);
  setenv("CLT_KERNEL_DIR", dir, 1);
  ck_assert_int_eq(clt_context_kernel(ctx, "mine", "twice", NULL, &k), 0);
  cl_kernel missing;
  ck_assert_int_eq(clt_context_kernel(ctx, "absent", "twice", NULL, &missing), CLT_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "absent.cl"));
  unsetenv("CLT_KERNEL_DIR");

  float x[3] = {1, 2, 3};
  cl_mem buf = tu_buffer(ctx, x, 3);
  cl_ulong n = 3;
  ck_assert_int_eq(clSetKernelArg(k, 0, sizeof buf, &buf), CL_SUCCESS);
  ck_assert_int_eq(clSetKernelArg(k, 1, sizeof n, &n), CL_SUCCESS);
  ck_assert_int_eq(clt_launch_1d(ctx, k, 3, 1000000), 0); /* work-group size is clamped */
  tu_read(ctx, buf, 0, x, 3);
  ck_assert_float_eq(x[2], 6.0f);
  clt_buffer_release(buf);
  unlink(path);
  rmdir(dir);
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("kernels");
  TCase *tc = tcase_create("kernels");
  tcase_add_test(tc, elementwise_match_plain_c);
  tcase_add_test(tc, reductions_match_plain_c_and_repeat_bitwise);
  tcase_add_test(tc, many_sums_of_squares_in_one_read);
  tcase_add_test(tc, views_check_their_shapes);
  tcase_add_test(tc, buffers_and_pinned_memory);
  tcase_add_test(tc, a_failed_build_returns_its_log);
  tcase_add_test(tc, kernel_sources_embedded_and_from_a_directory);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
