/*
 * test_dataset.c: the dataset readers. The real Fashion-MNIST files when they
 * are installed (counts, shape, classes, label histograms, first labels,
 * pixels against an independent read, statistics), then crafted files, good
 * and broken, plain and gzip: every fault must give its status code and a
 * message that names the file and what is wrong. The raw format,
 * normalisation and batch decoding are in test_raw.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data.h" /* the fingerprint: internal */
#include "datautil.h"

static char *tmp; /* scratch directory of the running test */
static char p1[4096], p2[4096];

static void setup(void) { tmp = du_mkdtemp(); }
static void teardown(void) {
  du_rmdir(tmp);
  tmp = NULL;
}

/* ---- Fashion-MNIST, when installed ----------------------------------------- */

static void check_split(const char *split, int64_t count, const int *first_labels, int64_t per_class) {
  const char *dir = du_fashion_dir();
  if (!dir) {
    fprintf(stderr, "SKIP (part): Fashion-MNIST is not installed (dataset-fashion-mnist)\n");
    return;
  }
  clt_dataset *ds = NULL;
  double t0 = du_now();
  du_ok(clt_dataset_open_idx(dir, split, &ds));
  fprintf(stderr, "Fashion-MNIST %s: %lld samples loaded in %.3f s\n", split, (long long)clt_dataset_count(ds),
          du_now() - t0);
  ck_assert_int_eq(clt_dataset_count(ds), count);
  int64_t dims[CLT_DATASET_MAX_DIMS];
  ck_assert_int_eq(clt_dataset_sample_shape(ds, dims), 2);
  ck_assert_int_eq(dims[0], 28);
  ck_assert_int_eq(dims[1], 28);
  ck_assert_int_eq(clt_dataset_sample_size(ds), 784);
  ck_assert_int_eq(clt_dataset_num_classes(ds), 10);

  int64_t *idx = malloc((size_t)count * sizeof *idx);
  int32_t *y = malloc((size_t)count * sizeof *y);
  for (int64_t i = 0; i < count; i++) idx[i] = i;
  du_ok(clt_dataset_get_batch(ds, idx, count, NULL, y));
  int64_t hist[10] = {0};
  for (int64_t i = 0; i < count; i++) hist[y[i]]++;
  for (int c = 0; c < 10; c++) ck_assert_int_eq(hist[c], per_class);
  for (int i = 0; i < 10; i++) ck_assert_int_eq(y[i], first_labels[i]);

  /* The first image against the file's bytes read here with zlib alone. */
  size_t n;
  char name[64];
  snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", strcmp(split, "train") == 0 ? "train" : "t10k");
  unsigned char *raw = du_read(du_join(p1, sizeof p1, dir, name), &n);
  ck_assert_uint_eq(n, 16 + (size_t)count * 784);
  float x[784];
  du_ok(clt_dataset_get_batch(ds, idx, 1, x, NULL));
  for (int j = 0; j < 784; j++) ck_assert_float_eq(x[j], (float)raw[16 + j] / 255.0f);
  free(raw);
  free(idx);
  free(y);
  clt_dataset_destroy(ds);
}

START_TEST(fashion_train) {
  static const int first[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  check_split("train", 60000, first, 6000);
}
END_TEST

START_TEST(fashion_test) {
  static const int first[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
  check_split("test", 10000, first, 1000);
}
END_TEST

START_TEST(fashion_stats) {
  const char *dir = du_fashion_dir();
  if (!dir) return;
  clt_dataset *ds = NULL;
  float mean, std;
  du_ok(clt_dataset_open_idx(dir, "train", &ds));
  du_ok(clt_dataset_stats(ds, &mean, &std));
  /* The published Fashion-MNIST statistics, to their 4 printed digits. */
  ck_assert_msg(fabsf(mean - 0.2860f) < 1e-4f && fabsf(std - 0.3530f) < 1e-4f, "mean %g std %g", mean, std);
  du_ok(clt_dataset_normalize(ds, mean, std));
  int64_t i0 = 0;
  float x[784];
  du_ok(clt_dataset_get_batch(ds, &i0, 1, x, NULL));
  ck_assert_float_eq(x[0], (0.0f - mean) / std); /* the corner pixel of image 0 is 0 */
  clt_dataset_destroy(ds);
}
END_TEST

/* ---- crafted IDX files ----------------------------------------------------- */

#define N_IMG 10
static unsigned char img_data[N_IMG * 4 * 3];
static unsigned char lab_data[N_IMG];
static const uint32_t img_dims[3] = {N_IMG, 4, 3};

static void fill_data(void) {
  for (size_t i = 0; i < sizeof img_data; i++) img_data[i] = (unsigned char)(i * 37 % 256);
  for (int i = 0; i < N_IMG; i++) lab_data[i] = (unsigned char)(i * 7 % 10);
}

/* Good image and label files named img[.gz] and lab[.gz]; paths in p1, p2. */
static void write_good(int gz) {
  fill_data();
  du_write_idx(du_join(p1, sizeof p1, tmp, gz ? "img.gz" : "img"), 0x08, 3, img_dims, img_data, sizeof img_data, gz);
  uint32_t n = N_IMG;
  du_write_idx(du_join(p2, sizeof p2, tmp, gz ? "lab.gz" : "lab"), 0x08, 1, &n, lab_data, N_IMG, gz);
}

START_TEST(idx_good) {
  for (int gz = 0; gz < 2; gz++) {
    write_good(gz);
    clt_dataset *ds = NULL;
    du_ok(clt_dataset_open_idx_files(p1, p2, 0, &ds)); /* 0: classes from the labels */
    ck_assert_int_eq(clt_dataset_count(ds), N_IMG);
    ck_assert_int_eq(clt_dataset_num_classes(ds), 10);
    ck_assert_int_eq(clt_dataset_sample_size(ds), 12);
    ck_assert_str_eq(clt_dataset_path(ds), p1);
    int64_t idx[3] = {9, 0, 4};
    float x[36];
    int32_t y[3];
    du_ok(clt_dataset_get_batch(ds, idx, 3, x, y));
    for (int i = 0; i < 3; i++) {
      ck_assert_int_eq(y[i], lab_data[idx[i]]);
      for (int j = 0; j < 12; j++) ck_assert_float_eq(x[i * 12 + j], img_data[idx[i] * 12 + j] / 255.0f);
    }
    clt_dataset_destroy(ds);
  }
}
END_TEST

START_TEST(idx_open_dir) {
  fill_data();
  uint32_t n = N_IMG;
  du_write_idx(du_join(p1, sizeof p1, tmp, "t10k-images-idx3-ubyte"), 0x08, 3, img_dims, img_data,
               sizeof img_data, 0);
  clt_dataset *ds = NULL;
  /* images present, labels missing: named */
  du_expect_error(clt_dataset_open_idx(tmp, "test", &ds), CLT_ENOTFOUND, tmp, "t10k-labels-idx1-ubyte",
                  "t10k-labels-idx1-ubyte.gz");
  ck_assert_ptr_null(ds);
  du_write_idx(du_join(p2, sizeof p2, tmp, "t10k-labels-idx1-ubyte.gz"), 0x08, 1, &n, lab_data, N_IMG, 1);
  du_ok(clt_dataset_open_idx(tmp, "test", &ds));
  ck_assert_int_eq(clt_dataset_count(ds), N_IMG);
  ck_assert_int_eq(clt_dataset_num_classes(ds), 10);
  clt_dataset_destroy(ds);
  du_ok(clt_dataset_open_idx(tmp, "t10k", &ds));
  clt_dataset_destroy(ds);
  /* no training files at all */
  du_expect_error(clt_dataset_open_idx(tmp, "train", &ds), CLT_ENOTFOUND, "train-images-idx3-ubyte",
                  "train-images-idx3-ubyte.gz", "dataset-fashion-mnist");
  du_expect_error(clt_dataset_open_idx(tmp, "validation", &ds), CLT_EINVAL, "validation");
  du_expect_error(clt_dataset_open_idx("/nonexistent/fmnist", "train", &ds), CLT_ENOTFOUND, "/nonexistent/fmnist");
}
END_TEST

START_TEST(idx_missing_file) {
  write_good(0);
  clt_dataset *ds = NULL;
  du_join(p1, sizeof p1, tmp, "no-such-images.gz");
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_ENOTFOUND, "no-such-images.gz",
                  "No such file");
  du_expect_error(clt_dataset_open_idx_files(tmp, p2, 10, &ds), CLT_EIO, tmp, "directory");
  ck_assert_ptr_null(ds);
}
END_TEST

/* Write bytes as the image file (plain and gzip) and expect the failure. */
static void expect_bad_images(const void *bytes, size_t n, int want, const char *needle) {
  for (int gz = 0; gz < 2; gz++) {
    write_good(gz);
    du_write(p1, bytes, n, gz);
    clt_dataset *ds = NULL;
    du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), want, p1, needle);
    ck_assert_ptr_null(ds);
  }
}

START_TEST(idx_bad_magic) {
  unsigned char b[16] = {0x12, 0x34, 0x08, 0x03, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
  expect_bad_images(b, sizeof b, CLT_EFORMAT, "not an IDX file");
}
END_TEST

START_TEST(idx_bad_type) {
  unsigned char b[16] = {0, 0, 0x0D, 0x03, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
  expect_bad_images(b, sizeof b, CLT_EFORMAT, "type byte is 0x0D (float32)");
  b[2] = 0x42;
  expect_bad_images(b, sizeof b, CLT_EFORMAT, "0x42 is no IDX type");
}
END_TEST

START_TEST(idx_bad_ndims) {
  unsigned char b[8] = {0, 0, 0x08, 0x01, 0, 0, 0, 1};
  expect_bad_images(b, sizeof b, CLT_EFORMAT, "is this a label file?");
  /* a label file with image dimensions */
  write_good(0);
  du_write_idx(p2, 0x08, 3, img_dims, img_data, sizeof img_data, 0);
  clt_dataset *ds = NULL;
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p2, "has 3 dimensions",
                  "exactly 1");
}
END_TEST

START_TEST(idx_truncated_header) {
  unsigned char b[10] = {0, 0, 0x08, 0x03, 0, 0, 0, 10, 0, 0};
  expect_bad_images(b, 2, CLT_EFORMAT, "truncated: the file ends after 2 of the 4 bytes of the magic number");
  expect_bad_images(b, sizeof b, CLT_EFORMAT, "truncated: the file ends after 6 of the 12 bytes of the dimensions");
}
END_TEST

START_TEST(idx_truncated_data) {
  fill_data();
  write_good(0);
  du_write_idx(p1, 0x08, 3, img_dims, img_data, sizeof img_data - 5, 0);
  clt_dataset *ds = NULL;
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p1,
                  "truncated: the file ends after 115 of the 120 bytes of image data, which start at byte 16");
  write_good(1);
  du_write_idx(p1, 0x08, 3, img_dims, img_data, sizeof img_data - 5, 1);
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p1, "115 of the 120 bytes of image data");
}
END_TEST

START_TEST(idx_trailing) {
  unsigned char more[sizeof img_data + 7];
  fill_data();
  memcpy(more, img_data, sizeof img_data);
  memset(more + sizeof img_data, 0xAB, 7);
  for (int gz = 0; gz < 2; gz++) {
    write_good(gz);
    du_write_idx(p1, 0x08, 3, img_dims, more, sizeof more, gz);
    clt_dataset *ds = NULL;
    du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p1,
                    "7 bytes of trailing data after the 120 bytes of image data (from byte 136)");
  }
}
END_TEST

START_TEST(idx_zero_count) {
  uint32_t dims[3] = {0, 4, 3};
  write_good(0);
  du_write_idx(p1, 0x08, 3, dims, NULL, 0, 0);
  clt_dataset *ds = NULL;
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p1, "declares 0 images");
  dims[0] = 1;
  dims[2] = 0;
  du_write_idx(p1, 0x08, 3, dims, NULL, 0, 0);
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p1, "dimension 2 of the images is 0");
}
END_TEST

START_TEST(idx_count_mismatch) {
  /* The message the issue asks for, word for word. */
  fill_data();
  uint32_t n = N_IMG - 1;
  du_write_idx(du_join(p1, sizeof p1, tmp, "t10k-images-idx3-ubyte.gz"), 0x08, 3, img_dims, img_data,
               sizeof img_data, 1);
  du_write_idx(du_join(p2, sizeof p2, tmp, "t10k-labels-idx1-ubyte.gz"), 0x08, 1, &n, lab_data, n, 1);
  clt_dataset *ds = NULL;
  char want[9000];
  snprintf(want, sizeof want, "%s: 9 labels but %s has 10 images", p2, p1);
  du_expect_error(clt_dataset_open_idx(tmp, "test", &ds), CLT_EFORMAT, want);
}
END_TEST

START_TEST(idx_label_range) {
  write_good(1);
  lab_data[3] = 10;
  lab_data[7] = 200;
  uint32_t n = N_IMG;
  du_write_idx(p2, 0x08, 1, &n, lab_data, N_IMG, 1);
  clt_dataset *ds = NULL;
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p2, "label 10 at index 3",
                  "[0, 10)", "2 bad labels");
  du_ok(clt_dataset_open_idx_files(p1, p2, 0, &ds)); /* inferred: 201 classes */
  ck_assert_int_eq(clt_dataset_num_classes(ds), 201);
  clt_dataset_destroy(ds);
  du_expect_error(clt_dataset_open_idx_files(p1, p2, -3, &ds), CLT_EINVAL, p2, "-3 classes");
}
END_TEST

START_TEST(idx_corrupt_gzip) {
  write_good(1);
  size_t n;
  unsigned char *gz;
  FILE *f = fopen(p1, "rb");
  gz = malloc(1 << 16);
  n = fread(gz, 1, 1 << 16, f);
  fclose(f);
  clt_dataset *ds = NULL;

  /* A broken CRC in the trailer: found after all the data has come out. */
  gz[n - 6] ^= 0xFF;
  du_write(p1, gz, n, 0);
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p1, "corrupt gzip stream",
                  "incorrect data check");
  gz[n - 6] ^= 0xFF;

  /* Garbage in the middle of the deflate stream. */
  for (size_t i = 14; i < n - 12; i++) gz[i] ^= 0x5A;
  du_write(p1, gz, n, 0);
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p1, "gzip stream");
  for (size_t i = 14; i < n - 12; i++) gz[i] ^= 0x5A;

  /* The compressed file cut short. */
  du_write(p1, gz, n - 20, 0);
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p1, "gzip stream ends early", "is the download complete?");
  du_write(p1, gz, n - 3, 0); /* only the trailer is cut */
  du_expect_error(clt_dataset_open_idx_files(p1, p2, 10, &ds), CLT_EFORMAT, p1, "gzip stream ends early", "is the download complete?");
  ck_assert_ptr_null(ds);
  free(gz);
}
END_TEST

START_TEST(idx_raw_given) {
  /* A raw file where IDX is expected (and the other way round) says so. */
  float x[2] = {1, 2};
  int32_t y[2] = {0, 1};
  int64_t d = 1;
  du_join(p1, sizeof p1, tmp, "my.raw");
  du_ok(clt_dataset_write_raw(p1, 2, 1, &d, 2, x, y));
  clt_dataset *ds = NULL;
  du_expect_error(clt_dataset_open_idx_files(p1, p1, 10, &ds), CLT_EFORMAT, p1, "clt_dataset_open_raw");
  write_good(0);
  du_expect_error(clt_dataset_open_raw(p1 /* img */, &ds), CLT_EFORMAT, p1, "looks like an IDX file");
}
END_TEST

/* A data file that is there but cannot be opened (a symbolic link to
 * itself, or to nothing) is named with the reason, not reported as
 * "neither ... nor ....gz is there". */
START_TEST(idx_unreachable_file) {
  clt_dataset *ds = NULL;
  du_join(p1, sizeof p1, tmp, "train-images-idx3-ubyte");
  ck_assert_int_eq(symlink("train-images-idx3-ubyte", p1), 0);
  du_expect_error(clt_dataset_open_idx(tmp, "train", &ds), CLT_EIO, p1, "Too many levels of symbolic links");
  ck_assert_msg(!strstr(clt_last_error(), "is there"), "%s", clt_last_error());
  unlink(p1);
  ck_assert_int_eq(symlink("nowhere", p1), 0);
  du_expect_error(clt_dataset_open_idx(tmp, "train", &ds), CLT_EIO, p1, "a symbolic link to a file that is not there");
  ck_assert_ptr_null(ds);
  unlink(p1);
}
END_TEST

/* The fingerprint the ranks of a job compare (train/same_data.c): the
 * same for a plain and a gzip copy, another when one probed sample or its
 * label differs or the header does. */
START_TEST(idx_fingerprint) {
  clt__data_fingerprint a, b;
  clt_dataset *ds = NULL;
  write_good(0);
  du_ok(clt_dataset_open_idx_files(p1, p2, 10, &ds));
  clt__dataset_fingerprint(ds, &a);
  clt_dataset_destroy(ds);
  write_good(1);
  du_ok(clt_dataset_open_idx_files(p1, p2, 10, &ds));
  clt__dataset_fingerprint(ds, &b);
  clt_dataset_destroy(ds);
  ck_assert(memcmp(a.probe, b.probe, sizeof a.probe) == 0 && a.header == b.header && a.count == b.count);
  /* every sample of 10 is probed: sample 9, the last */
  ck_assert_int_eq(clt__probe_sample(N_IMG, CLT__DATA_PROBES - 1), N_IMG - 1);
  img_data[9 * 12 + 5] ^= 1;
  du_write_idx(p1, 0x08, 3, img_dims, img_data, sizeof img_data, 1);
  du_ok(clt_dataset_open_idx_files(p1, p2, 10, &ds));
  clt__dataset_fingerprint(ds, &b);
  clt_dataset_destroy(ds);
  ck_assert(a.probe[CLT__DATA_PROBES - 1] != b.probe[CLT__DATA_PROBES - 1] && a.probe[0] == b.probe[0]);
  write_good(0);
  lab_data[0] = (unsigned char)(lab_data[0] + 1) % 10;
  uint32_t n = N_IMG;
  du_write_idx(p2, 0x08, 1, &n, lab_data, N_IMG, 0);
  du_ok(clt_dataset_open_idx_files(p1, p2, 10, &ds));
  clt__dataset_fingerprint(ds, &b);
  clt_dataset_destroy(ds);
  ck_assert(a.probe[0] != b.probe[0] && a.probe[CLT__DATA_PROBES - 1] == b.probe[CLT__DATA_PROBES - 1]);
  /* the same bytes seen as 12x1 images: the shape and the header differ */
  const uint32_t flat[3] = {N_IMG, 12, 1};
  write_good(0);
  du_write_idx(p1, 0x08, 3, flat, img_data, sizeof img_data, 0);
  du_ok(clt_dataset_open_idx_files(p1, p2, 10, &ds));
  clt__dataset_fingerprint(ds, &b);
  clt_dataset_destroy(ds);
  ck_assert(a.header != b.header && memcmp(a.probe, b.probe, sizeof a.probe) == 0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("dataset");
  TCase *tc = tcase_create("fashion-mnist");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, fashion_train);
  tcase_add_test(tc, fashion_test);
  tcase_add_test(tc, fashion_stats);
  suite_add_tcase(s, tc);
  tc = tcase_create("idx");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, idx_good);
  tcase_add_test(tc, idx_open_dir);
  tcase_add_test(tc, idx_missing_file);
  tcase_add_test(tc, idx_bad_magic);
  tcase_add_test(tc, idx_bad_type);
  tcase_add_test(tc, idx_bad_ndims);
  tcase_add_test(tc, idx_truncated_header);
  tcase_add_test(tc, idx_truncated_data);
  tcase_add_test(tc, idx_trailing);
  tcase_add_test(tc, idx_zero_count);
  tcase_add_test(tc, idx_count_mismatch);
  tcase_add_test(tc, idx_label_range);
  tcase_add_test(tc, idx_corrupt_gzip);
  tcase_add_test(tc, idx_raw_given);
  tcase_add_test(tc, idx_unreachable_file);
  tcase_add_test(tc, idx_fingerprint);
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
