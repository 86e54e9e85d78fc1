/*
 * test_raw.c: the raw format (round trip, plain and gzip, and every broken
 * header, truncation, trailing data, bad label and non-finite value), then
 * normalisation and its statistics on uint8 and float data, and the batch
 * decoder's errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datautil.h"

static char *tmp; /* scratch directory of the running test */
static char p1[4096], p2[4096];

static void setup(void) { tmp = du_mkdtemp(); }
static void teardown(void) {
  du_rmdir(tmp);
  tmp = NULL;
}

/* Good 10-image IDX files img and lab (4x3 images); paths in p1, p2. */
static void write_good_idx(void) {
  unsigned char img[10 * 12], lab[10];
  const uint32_t dims[3] = {10, 4, 3}, n = 10;
  for (size_t i = 0; i < sizeof img; i++) img[i] = (unsigned char)(i * 37 % 256);
  for (int i = 0; i < 10; i++) lab[i] = (unsigned char)(i * 7 % 10);
  du_write_idx(du_join(p1, sizeof p1, tmp, "img"), 0x08, 3, dims, img, sizeof img, 0);
  du_write_idx(du_join(p2, sizeof p2, tmp, "lab"), 0x08, 1, &n, lab, 10, 0);
}

/* ---- raw format ------------------------------------------------------------ */

START_TEST(raw_roundtrip) {
  enum { N = 7, C = 2, H = 3, W = 2 };
  float x[N * C * H * W];
  int32_t y[N];
  const int64_t dims[3] = {C, H, W};
  for (int i = 0; i < N * C * H * W; i++) x[i] = (float)i * 0.37f - 5.0f;
  for (int i = 0; i < N; i++) y[i] = i % 4;
  for (int gz = 0; gz < 2; gz++) {
    du_join(p1, sizeof p1, tmp, gz ? "d.raw.gz" : "d.raw");
    du_ok(clt_dataset_write_raw(p1, N, 3, dims, 4, x, y));
    size_t n;
    unsigned char *bytes = du_read(p1, &n);
    ck_assert_uint_eq(n, 8 + 4 + 8 + 4 + 3 * 8 + 4 + sizeof x + sizeof y);
    ck_assert_mem_eq(bytes, "CLTRAW1\0", 8);
    free(bytes);
    clt_dataset *ds = NULL;
    du_ok(clt_dataset_open_raw(p1, &ds));
    int64_t got[CLT_DATASET_MAX_DIMS];
    ck_assert_int_eq(clt_dataset_sample_shape(ds, got), 3);
    ck_assert_int_eq(got[0], C);
    ck_assert_int_eq(got[2], W);
    ck_assert_int_eq(clt_dataset_count(ds), N);
    ck_assert_int_eq(clt_dataset_num_classes(ds), 4);
    int64_t idx[N];
    float bx[N * C * H * W];
    int32_t by[N];
    for (int i = 0; i < N; i++) idx[i] = N - 1 - i;
    du_ok(clt_dataset_get_batch(ds, idx, N, bx, by));
    for (int i = 0; i < N; i++) {
      ck_assert_int_eq(by[i], y[N - 1 - i]);
      ck_assert_mem_eq(bx + i * C * H * W, x + (N - 1 - i) * C * H * W, sizeof(float) * C * H * W);
    }
    clt_dataset_destroy(ds);
  }
}
END_TEST

/* A raw file as bytes, to break. */
static size_t raw_bytes(unsigned char *b, uint32_t version, uint64_t count, uint32_t ndims, uint64_t dim,
                        uint32_t classes, const float *x, const int32_t *y) {
  size_t o = 0;
  memcpy(b, "CLTRAW1", 8);
  o = 8;
  memcpy(b + o, &version, 4), o += 4; /* the tests run on little-endian hosts */
  memcpy(b + o, &count, 8), o += 8;
  memcpy(b + o, &ndims, 4), o += 4;
  for (uint32_t i = 0; i < ndims; i++) memcpy(b + o, &dim, 8), o += 8;
  memcpy(b + o, &classes, 4), o += 4;
  memcpy(b + o, x, 4 * count * dim), o += 4 * count * dim;
  memcpy(b + o, y, 4 * count), o += 4 * count;
  return o;
}

static void expect_bad_raw(const unsigned char *b, size_t n, int want, const char *needle) {
  for (int gz = 0; gz < 2; gz++) {
    du_join(p1, sizeof p1, tmp, gz ? "bad.raw.gz" : "bad.raw");
    du_write(p1, b, n, gz);
    clt_dataset *ds = NULL;
    du_expect_error(clt_dataset_open_raw(p1, &ds), want, p1, needle);
    ck_assert_ptr_null(ds);
  }
}

START_TEST(raw_bad) {
  ck_assert_int_eq(((const unsigned char *)&(uint16_t){1})[0], 1); /* little-endian host */
  unsigned char b[512];
  float x[6] = {1, 2, 3, 4, 5, 6};
  int32_t y[3] = {0, 1, 2};
  size_t n = raw_bytes(b, 1, 3, 1, 2, 3, x, y);
  expect_bad_raw(b, n - 1, CLT_EFORMAT, "truncated: the file ends after 11 of the 12 bytes of label data");
  expect_bad_raw(b, 40, CLT_EFORMAT, "bytes of sample data (3 samples of 2 float32)");
  expect_bad_raw(b, 5, CLT_EFORMAT, "5 of the 8 bytes of the magic number");
  unsigned char more[520];
  memcpy(more, b, n);
  memset(more + n, 0, 3);
  expect_bad_raw(more, n + 3, CLT_EFORMAT, "3 bytes of trailing data after the labels");
  b[0] = 'X';
  expect_bad_raw(b, n, CLT_EFORMAT, "not a cltrain raw file");
  n = raw_bytes(b, 2, 3, 1, 2, 3, x, y);
  expect_bad_raw(b, n, CLT_EFORMAT, "raw format version 2");
  n = raw_bytes(b, 1, 0, 1, 2, 3, x, y);
  expect_bad_raw(b, n, CLT_EFORMAT, "declares 0 samples");
  n = raw_bytes(b, 1, 3, 9, 1, 3, x, y);
  expect_bad_raw(b, n, CLT_EFORMAT, "9 dimensions");
  n = raw_bytes(b, 1, 3, 1, 0, 3, x, y);
  expect_bad_raw(b, n, CLT_EFORMAT, "sample dimension 0 is 0");
  n = raw_bytes(b, 1, 3, 1, 2, 0, x, y);
  expect_bad_raw(b, n, CLT_EFORMAT, "declares 0 classes");
  y[1] = 3;
  n = raw_bytes(b, 1, 3, 1, 2, 3, x, y);
  expect_bad_raw(b, n, CLT_EFORMAT, "label 3 at index 1");
  y[1] = -1;
  n = raw_bytes(b, 1, 3, 1, 2, 3, x, y);
  expect_bad_raw(b, n, CLT_EFORMAT, "label -1 at index 1");
  y[1] = 1;
  x[3] = NAN;
  n = raw_bytes(b, 1, 3, 1, 2, 3, x, y);
  expect_bad_raw(b, n, CLT_ENONFINITE, "sample 1 value 1 is nan");
  du_join(p1, sizeof p1, tmp, "missing.raw");
  clt_dataset *ds = NULL;
  du_expect_error(clt_dataset_open_raw(p1, &ds), CLT_ENOTFOUND, p1);
}
END_TEST

START_TEST(raw_write_refuses) {
  float x[4] = {1, 2, INFINITY, 4};
  int32_t y[2] = {0, 1};
  int64_t d = 2;
  du_join(p1, sizeof p1, tmp, "w.raw");
  du_expect_error(clt_dataset_write_raw(p1, 2, 1, &d, 2, x, y), CLT_ENONFINITE, p1, "sample 1 value 0 is inf");
  x[2] = 3;
  y[1] = 2;
  du_expect_error(clt_dataset_write_raw(p1, 2, 1, &d, 2, x, y), CLT_EINVAL, p1, "label 2 at index 1");
  y[1] = 1;
  du_expect_error(clt_dataset_write_raw(p1, 0, 1, &d, 2, x, y), CLT_EINVAL, p1);
  du_expect_error(clt_dataset_write_raw("/nonexistent/dir/w.raw", 2, 1, &d, 2, x, y), CLT_EIO, "/nonexistent/dir/w.raw");
}
END_TEST

/* ---- normalisation and batches --------------------------------------------- */

START_TEST(normalize_u8) {
  /* one sample holding every byte value */
  unsigned char all[256];
  for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
  uint32_t dims[3] = {1, 16, 16}, one = 1;
  unsigned char lab = 0;
  du_write_idx(du_join(p1, sizeof p1, tmp, "img"), 0x08, 3, dims, all, 256, 0);
  du_write_idx(du_join(p2, sizeof p2, tmp, "lab"), 0x08, 1, &one, &lab, 1, 0);
  clt_dataset *ds = NULL;
  du_ok(clt_dataset_open_idx_files(p1, p2, 10, &ds));
  int64_t i0 = 0;
  float x[256], mean, std;
  du_ok(clt_dataset_get_batch(ds, &i0, 1, x, NULL));
  ck_assert_float_eq(x[0], 0.0f);
  ck_assert_float_eq(x[255], 1.0f);
  for (int v = 0; v < 256; v++) ck_assert_float_eq(x[v], (float)v / 255.0f);
  du_ok(clt_dataset_stats(ds, &mean, &std));
  /* uniform over 0..255 / 255: mean 1/2, variance (256^2 - 1) / 12 / 255^2 */
  ck_assert_double_eq_tol(mean, 0.5, 1e-7);
  ck_assert_double_eq_tol(std, sqrt((256.0 * 256.0 - 1.0) / 12.0) / 255.0, 1e-7);
  du_ok(clt_dataset_normalize(ds, 0.25f, 0.5f));
  float m2, s2;
  clt_dataset_get_normalization(ds, &m2, &s2);
  ck_assert_float_eq(m2, 0.25f);
  ck_assert_float_eq(s2, 0.5f);
  du_ok(clt_dataset_get_batch(ds, &i0, 1, x, NULL));
  for (int v = 0; v < 256; v++) ck_assert_float_eq(x[v], ((float)v / 255.0f - 0.25f) / 0.5f);
  du_expect_error(clt_dataset_normalize(ds, 0.0f, 0.0f), CLT_EINVAL, p1, "std 0", "all equal");
  du_expect_error(clt_dataset_normalize(ds, NAN, 1.0f), CLT_EINVAL, p1, "mean nan");
  du_expect_error(clt_dataset_normalize(ds, 0.0f, 1e-45f), CLT_ENONFINITE, p1, "byte value 1");
  clt_dataset_get_normalization(ds, &m2, &s2); /* a refused change leaves the old one */
  ck_assert_float_eq(m2, 0.25f);
  du_ok(clt_dataset_normalize(ds, 0.0f, 1.0f));
  du_ok(clt_dataset_get_batch(ds, &i0, 1, x, NULL));
  ck_assert_float_eq(x[255], 1.0f);
  clt_dataset_destroy(ds);
}
END_TEST

START_TEST(normalize_f32) {
  float x[6] = {1, -2, 3e38f, 4, 5, 6}, out[6];
  int32_t y[3] = {0, 1, 0};
  int64_t d = 2, idx[3] = {2, 0, 1};
  du_join(p1, sizeof p1, tmp, "f.raw");
  du_ok(clt_dataset_write_raw(p1, 3, 1, &d, 2, x, y));
  clt_dataset *ds = NULL;
  du_ok(clt_dataset_open_raw(p1, &ds));
  du_ok(clt_dataset_get_batch(ds, idx, 2, out, NULL)); /* stored values, exactly */
  ck_assert_mem_eq(out, x + 4, 8);
  ck_assert_mem_eq(out + 2, x, 8);
  float mean, std;
  du_ok(clt_dataset_stats(ds, &mean, &std));
  ck_assert_float_eq_tol(mean, 5e37f, 1e32f);
  du_ok(clt_dataset_normalize(ds, -3e38f, 1.0f));
  du_expect_error(clt_dataset_get_batch(ds, idx + 1, 2, out, NULL), CLT_ENONFINITE, p1, "sample 1 value 0",
                  "becomes inf");
  du_ok(clt_dataset_normalize(ds, 1.0f, 2.0f));
  du_ok(clt_dataset_get_batch(ds, idx + 1, 1, out, NULL));
  ck_assert_float_eq(out[0], 0.0f);
  ck_assert_float_eq(out[1], -1.5f);
  clt_dataset_destroy(ds);
}
END_TEST

START_TEST(batch_errors) {
  write_good_idx();
  clt_dataset *ds = NULL;
  du_ok(clt_dataset_open_idx_files(p1, p2, 10, &ds));
  int64_t idx[2] = {3, 10};
  float x[24];
  du_expect_error(clt_dataset_get_batch(ds, idx, 2, x, NULL), CLT_EINVAL, p1, "sample index 10 (position 1",
                  "[0, 10)");
  idx[1] = -1;
  du_expect_error(clt_dataset_get_batch(ds, idx, 2, x, NULL), CLT_EINVAL, "sample index -1");
  du_ok(clt_dataset_get_batch(ds, idx, 0, x, NULL));
  clt_dataset_destroy(ds);
  clt_dataset_destroy(NULL);
  ck_assert_int_eq(clt_dataset_count(NULL), 0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("raw");
  TCase *tc = tcase_create("raw");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, raw_roundtrip);
  tcase_add_test(tc, raw_bad);
  tcase_add_test(tc, raw_write_refuses);
  suite_add_tcase(s, tc);
  tc = tcase_create("normalize");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, normalize_u8);
  tcase_add_test(tc, normalize_f32);
  tcase_add_test(tc, batch_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
