/*
 * test_blas.c: SGEMM and strided batched SGEMM against the plain-C
 * reference on every device, through each backend the device has (CLBlast;
 * CPU devices also our own tiles, src/core/blas_cpu.c, and, with unified
 * memory, the host BLAS, src/core/blas_host.c): all
 * four transpose cases, offsets, padded leading dimensions, odd shapes,
 * k = 0, operands sharing a buffer, ordering with the device queue, and the
 * shape checks.
 */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* (m, n, k, offset in floats) */
static const size_t shapes[][4] = {{1, 1, 1, 0},     {3, 5, 7, 1},     {16, 16, 16, 0},  {33, 17, 65, 9},
                                   {70, 129, 31, 3},  {6, 64, 5, 0},    {13, 100, 9, 2},  {5, 48, 3, 1},
                                   {64, 208, 40, 0},  {7, 79, 2, 4},    {12, 47, 17, 0},  {8, 70, 6, 0},
                                   {16, 96, 7, 0},    {20, 40, 1500, 1}, {70, 131, 100, 2}};
/* From {6, 64, 5, 0} on: src/core/blas_cpu.c's regions (tiles of 8 x 48 rows
 * and columns, the last rows, the last columns in 16s or 32s, and those
 * short of 16) alone and together; k = 1500: its blocks of k, the second
 * added to C. NT with 16 to 256 rows and k >= 64 ({33, 17, 65},
 * {20, 40, 1500}) is gemm_cpu_nt's: k past the last 16, rows and columns
 * past its tiles; {64, 208, 40}, k < 64, the transpose's. */
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* Float32 accumulation of k products of values in [-1, 1) errs by about
 * k * 2^-24 relative to the sum of |products| (<= k); with k <= 129 that is
 * < 1e-5, and it grows with k (1.7e-5 seen at k = 1500), while a wrong
 * index, transpose or block of k gives errors of order 1. */
#define GEMM_TOL 1e-5
#define GEMM_TOL_K(k) ((k) > 129 ? GEMM_TOL * (double)(k) / 129 : GEMM_TOL)

static void run_case(clt_context *ctx, int ta, int tb, size_t m, size_t n, size_t k, size_t off, size_t batch) {
  size_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 3, ldc = n + 1;
  size_t sa = (ta ? k : m) * lda + 1, sb = (tb ? n : k) * ldb + 2, sc = m * ldc + 3; /* strides between batches */
  size_t na = off + batch * sa, nb = off + batch * sb, nc = off + batch * sc;
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *want = malloc(nc * 4);
  ref_random(a, na, (unsigned)(m + 3 * n + 7 * k));
  ref_random(b, nb, (unsigned)(2 * m + n + k));
  ref_random(c, nc, (unsigned)(m + n + 5 * k));
  memcpy(want, c, nc * 4);
  cl_mem da = tu_buffer(ctx, a, na), db = tu_buffer(ctx, b, nb), dc = tu_buffer(ctx, c, nc);
  clt_matrix ma = {da, off, lda}, mb = {db, off, ldb}, mc = {dc, off, ldc};
  float beta = off == 0 ? 0.0f : -0.5f; /* beta 0: C is not read (src/core/blas_cpu.c's GEMM_BETA0) */
  int rc = batch == 1 ? clt_sgemm(ctx, ta, tb, m, n, k, 1.5f, ma, mb, beta, mc)
                      : clt_sgemm_batched(ctx, ta, tb, m, n, k, 1.5f, ma, sa, mb, sb, beta, mc, sc, batch);
  ck_assert_msg(rc == 0, "%s", clt_last_error());
  tu_read(ctx, dc, 0, c, nc);
  for (size_t i = 0; i < batch; i++)
    ref_sgemm(ta, tb, m, n, k, 1.5f, a + off + i * sa, lda, b + off + i * sb, ldb, beta, want + off + i * sc, ldc);
  double err = ref_max_rel_error(c, want, nc); /* padding between rows must be untouched: compared too */
  ck_assert_msg(err <= GEMM_TOL_K(k), "sgemm%s ta=%d tb=%d m=%zu n=%zu k=%zu off=%zu on %s (CLT_HOST_BLAS=%s CLT_CPU_GEMM=%s): "
                "error %g", batch > 1 ? "_batched" : "", ta, tb, m, n, k, off, tu_name(ctx),
                getenv("CLT_HOST_BLAS") ? getenv("CLT_HOST_BLAS") : "-", getenv("CLT_CPU_GEMM") ? getenv("CLT_CPU_GEMM") : "-",
                err);
  clt_buffer_release(da), clt_buffer_release(db), clt_buffer_release(dc);
  free(a), free(b), free(c), free(want);
}

/* Backend 0: the default (on PoCL our tiles where B is not transposed,
 * else the host BLAS where the device takes it); 1: CLBlast alone
 * (CLT_HOST_BLAS=0 CLT_CPU_GEMM=0); 2: no tiles (CLT_CPU_GEMM=0); 3: the
 * tiles on every CPU device, rusticl's too (CLT_CPU_GEMM=1). */
enum { NBACKENDS = 4 };
static void set_backend(int b) {
  if (b == 1) setenv("CLT_HOST_BLAS", "0", 1);
  else unsetenv("CLT_HOST_BLAS");
  if (b == 1 || b == 2) setenv("CLT_CPU_GEMM", "0", 1);
  else if (b == 3) setenv("CLT_CPU_GEMM", "1", 1);
  else unsetenv("CLT_CPU_GEMM");
}

START_TEST(sgemm_matches_plain_c) {
  for (int be = 0; be < NBACKENDS; be++, set_backend(0))
    for (int d = 0; d < tu_ndev; d++)
      for (size_t s = 0; s < NSHAPES; s++)
        for (int t = 0; t < 4; t++) {
          set_backend(be);
          run_case(tu_ctx[d], t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], 1);
        }
}
END_TEST

/* A, B and C in one buffer (as a layer's input, weights and output may
 * be), C first filled by a kernel queued just before the GEMM and read by
 * one queued just after: the host BLAS maps the buffer once, after the
 * fill, and the scale after sees its result. */
START_TEST(sgemm_shared_buffer_in_queue_order) {
  enum { M = 7, N = 5, K = 6 };
  size_t ao = 3, bo = ao + M * K + 1, co = bo + K * N + 2, total = co + M * N + 4;
  for (int be = 0; be < NBACKENDS; be++, set_backend(0))
    for (int d = 0; d < tu_ndev; d++) {
      set_backend(be);
      clt_context *ctx = tu_ctx[d];
      float *h = malloc(total * 4), *want = malloc(total * 4), *got = malloc(total * 4);
      ref_random(h, total, 77);
      cl_mem buf = tu_buffer(ctx, h, total);
      clt_tensor ct;
      int64_t len = M * N;
      ck_assert_int_eq(clt_tensor_view(buf, co * 4, CLT_F32, 1, &len, &ct), 0);
      ck_assert_int_eq(clt_fill(ctx, &ct, 1.0f), 0);
      clt_matrix a = {buf, ao, K}, b = {buf, bo, N}, c = {buf, co, N};
      ck_assert_msg(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, M, N, K, 2.0f, a, b, 0.5f, c) == 0, "%s",
                    clt_last_error());
      ck_assert_int_eq(clt_scale(ctx, &ct, 3.0f), 0);
      tu_read(ctx, buf, 0, got, total);
      memcpy(want, h, total * 4);
      for (size_t i = 0; i < M * N; i++) want[co + i] = 1.0f;
      ref_sgemm(0, 0, M, N, K, 2.0f, h + ao, K, h + bo, N, 0.5f, want + co, N);
      for (size_t i = 0; i < M * N; i++) want[co + i] *= 3.0f;
      double err = ref_max_rel_error(got, want, total);
      ck_assert_msg(err <= GEMM_TOL, "shared-buffer sgemm on %s (backend %d): error %g", tu_name(ctx), be, err);
      clt_buffer_release(buf);
      free(h), free(want), free(got);
    }
}
END_TEST

START_TEST(batched_sgemm_matches_plain_c) {
  for (int be = 0; be < NBACKENDS; be++, set_backend(0))
    for (int d = 0; d < tu_ndev; d++)
    for (int t = 0; t < 4; t++) {
      set_backend(be);
      run_case(tu_ctx[d], t & 1, t >> 1, 9, 14, 25, 2, 3);
      run_case(tu_ctx[d], t & 1, t >> 1, 32, 8, 16, 0, 5);
      run_case(tu_ctx[d], t & 1, t >> 1, 100, 100, 100, 1, 3); /* above 64^3: the indirect kernel, padded */
      run_case(tu_ctx[d], t & 1, t >> 1, 300, 300, 8, 0, 2);   /* attention's scores: a small k */
      run_case(tu_ctx[d], t & 1, t >> 1, 13, 100, 9, 1, 3);    /* src/core/blas_cpu.c's every region, batched */
      run_case(tu_ctx[d], t & 1, t >> 1, 17, 33, 1100, 0, 2);  /* and its blocks of k */
    }
}
END_TEST

START_TEST(k_zero_scales_c) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    float c[12];
    for (int i = 0; i < 12; i++) c[i] = (float)i;
    cl_mem da = tu_buffer(ctx, c, 12), dc = tu_buffer(ctx, c, 12);
    clt_matrix ma = {da, 0, 1}, mc = {dc, 0, 4};
    ck_assert_int_eq(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 3, 4, 0, 1.0f, ma, ma, 2.0f, mc), 0);
    tu_read(ctx, dc, 0, c, 12);
    for (int i = 0; i < 12; i++) ck_assert_float_eq(c[i], 2.0f * i);
    ck_assert_int_eq(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 3, 4, 0, 1.0f, ma, ma, 0.0f, mc), 0);
    tu_read(ctx, dc, 0, c, 12);
    for (int i = 0; i < 12; i++) ck_assert_float_eq(c[i], 0.0f);
    clt_matrix mb = {da, 0, 4}; /* B (3, 4) is read by nobody when m = 0 */
    ck_assert_int_eq(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 0, 4, 3, 1.0f, ma, mb, 0.0f, mc), 0);
    clt_buffer_release(da), clt_buffer_release(dc);
  }
}
END_TEST

START_TEST(bad_shapes_are_named) {
  clt_context *ctx = tu_ctx[0];
  cl_mem buf = tu_buffer(ctx, NULL, 100);
  clt_matrix a = {buf, 0, 10}, b = {buf, 0, 10}, c = {buf, 0, 10};

  clt_matrix narrow = {buf, 0, 4}; /* A is 10 x 8 but ld 4 */
  ck_assert_int_eq(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 10, 10, 8, 1, narrow, b, 0, c), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "matrix A"));
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "leading dimension"));

  ck_assert_int_eq(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 11, 10, 10, 1, a, b, 0, c), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "m=11, n=10, k=10"));
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "buffer holds 100 floats"));

  clt_matrix shifted = {buf, 1, 10};
  ck_assert_int_eq(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 10, 10, 10, 1, a, b, 0, shifted), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "matrix C"));

  /* Transposed B of shape (n, k) = (12, 5) needs ld >= 5 and 12 rows. */
  clt_matrix bt = {buf, 0, 5}, c21 = {buf, 0, 21};
  ck_assert_int_eq(clt_sgemm(ctx, CLT_NO_TRANS, CLT_TRANS, 2, 12, 5, 1, a, bt, 0, c21), 0);
  ck_assert_int_eq(clt_sgemm(ctx, CLT_NO_TRANS, CLT_TRANS, 2, 21, 5, 1, a, bt, 0, c21), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "matrix B"));

  ck_assert_int_eq(clt_sgemm_batched(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 5, 5, 5, 1, a, 50, b, 50, 0, c, 50, 3),
                   CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "batch=3"));
  clt_matrix none = {NULL, 0, 10};
  ck_assert_int_eq(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 2, 2, 2, 1, none, b, 0, c), CLT_EINVAL);
  clt_buffer_release(buf);
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("blas");
  TCase *tc = tcase_create("blas");
  tcase_add_test(tc, sgemm_matches_plain_c);
  tcase_add_test(tc, sgemm_shared_buffer_in_queue_order);
  tcase_add_test(tc, batched_sgemm_matches_plain_c);
  tcase_add_test(tc, k_zero_scales_c);
  tcase_add_test(tc, bad_shapes_are_named);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
