/*
 * test_sources.c: users' own data through clt_dataset_open: NumPy .npy of
 * every element type (and big-endian, and float16), .npz stored and
 * deflated, CSV with a header, column selection and regression targets,
 * a cltrain raw file, the validation split, the per-feature statistics and
 * normalisation, and each parser's refusal of a broken file, naming the
 * file, the row and column or member, and the fault; a file larger than
 * CLT_DATA_MAP_MAX read by pread() (the same values as mapped, and a file
 * cut short while open refused as CLT_EIO, not a SIGBUS).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datautil.h"
#include "npywrite.h"

static char *tmp;
static char p1[4096], p2[4096];

static void setup(void) { tmp = du_mkdtemp(); }
static void teardown(void) {
  du_rmdir(tmp);
  tmp = NULL;
}

static void write_npy(const char *path, const char *descr, const int64_t *shape, int nd, const void *v, size_t nb) {
  size_t len;
  unsigned char *img = npy_image(descr, shape, nd, v, nb, &len);
  npy_write_file(path, img, len);
  free(img);
}

static void get_all(clt_dataset *ds, float *x, void *y) {
  int64_t n = clt_dataset_count(ds), idx[64];
  for (int64_t i = 0; i < n; i++) idx[i] = i;
  if (clt_dataset_targets_per_sample(ds))
    du_ok(clt_dataset_get_batch_targets(ds, idx, n, x, y));
  else
    du_ok(clt_dataset_get_batch(ds, idx, n, x, y));
}

/* A (6, 3) array of every type, labels in its own .npy: values as written. */
START_TEST(npy_types) {
  static const struct { const char *descr; int size; } types[] = {
      {"<f4", 4}, {"<f8", 8}, {"|i1", 1}, {"|u1", 1}, {"<i2", 2}, {"<u2", 2}, {"<i4", 4},
      {"<u4", 4}, {"<i8", 8}, {"<u8", 8}, {">f4", 4}, {">i8", 8}, {"<f2", 2}};
  const int64_t shape[2] = {6, 3}, lshape[1] = {6};
  int64_t lab[6] = {0, 1, 2, 0, 1, 2};
  write_npy(du_join(p2, sizeof p2, tmp, "y.npy"), "<i8", lshape, 1, lab, sizeof lab);
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    unsigned char raw[18 * 8];
    for (int i = 0; i < 18; i++) {
      double v = i; /* 0..17: exact in every type */
      unsigned char b[8];
      char k = types[t].descr[1];
      int sz = types[t].size;
      if (k == 'f' && sz == 4) { float f = (float)v; memcpy(b, &f, 4); }
      else if (k == 'f' && sz == 8) memcpy(b, &v, 8);
      else if (k == 'f' && sz == 2) { uint16_t h = i ? (uint16_t)(0x3c00 + 0) : 0; /* 1.0 or 0 */ memcpy(b, &h, 2); }
      else { uint64_t u = (uint64_t)i; memcpy(b, &u, 8); }
      if (types[t].descr[0] == '>')
        for (int j = 0; j < sz; j++) raw[i * sz + j] = b[sz - 1 - j];
      else
        memcpy(raw + i * sz, b, (size_t)sz);
    }
    du_join(p1, sizeof p1, tmp, "x.npy");
    write_npy(p1, types[t].descr, shape, 2, raw, 18 * (size_t)types[t].size);
    clt_data_options o = {.labels = p2};
    clt_dataset *ds;
    du_ok(clt_dataset_open(p1, &o, &ds));
    ck_assert_int_eq(clt_dataset_count(ds), 6);
    ck_assert_int_eq(clt_dataset_sample_size(ds), 3);
    ck_assert_int_eq(clt_dataset_num_classes(ds), 3);
    float x[18];
    int32_t y[6];
    get_all(ds, x, y);
    for (int i = 0; i < 18; i++) {
      float want = types[t].size == 2 && types[t].descr[1] == 'f' ? (i ? 1.0f : 0.0f) : (float)i;
      ck_assert_msg(x[i] == want, "%s value %d: %g, not %g", types[t].descr, i, (double)x[i], (double)want);
    }
    for (int i = 0; i < 6; i++) ck_assert_int_eq(y[i], lab[i]);
    clt_dataset_destroy(ds);
  }
}
END_TEST

/* The same table as .npy (last column the target), .npz stored and
 * deflated, and CSV: the same samples and targets. */
START_TEST(formats_agree) {
  enum { N = 5, C = 4 };
  float v[N * C];
  for (int i = 0; i < N * C; i++) v[i] = (float)i * 0.5f - 3.25f;
  const int64_t shape[2] = {N, C}, fshape[2] = {N, C - 1}, tshape[1] = {N};
  char csv[4096], *p = csv;
  p += sprintf(p, "a,b,c,y\n");
  for (int i = 0; i < N; i++)
    p += sprintf(p, "%g,%g,%g,%g\n", (double)v[i * C], (double)v[i * C + 1], (double)v[i * C + 2], (double)v[i * C + 3]);
  du_write(du_join(p1, sizeof p1, tmp, "t.csv"), csv, strlen(csv), 0);
  write_npy(du_join(p2, sizeof p2, tmp, "t.npy"), "<f4", shape, 2, v, sizeof v);
  float f[N * (C - 1)], t[N];
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < C - 1; j++) f[i * (C - 1) + j] = v[i * C + j];
    t[i] = v[i * C + C - 1];
  }
  size_t l0, l1;
  unsigned char *imgs[2] = {npy_image("<f4", fshape, 2, f, sizeof f, &l0), npy_image("<f4", tshape, 1, t, sizeof t, &l1)};
  const size_t lens[2] = {l0, l1};
  const char *names[2] = {"x", "y"};
  char stored[4096], deflated[4096];
  for (int d = 0; d < 2; d++) {
    size_t zl;
    unsigned char *z = npz_image(2, names, imgs, lens, d, &zl);
    npy_write_file(du_join(d ? deflated : stored, 4096, tmp, d ? "d.npz" : "s.npz"), z, zl);
    free(z);
  }
  free(imgs[0]), free(imgs[1]);
  const char *paths[4] = {p1, p2, stored, deflated};
  for (int k = 0; k < 4; k++) {
    clt_data_options o = {.regression = 1};
    clt_dataset *ds;
    du_ok(clt_dataset_open(paths[k], &o, &ds));
    ck_assert_int_eq(clt_dataset_count(ds), N);
    ck_assert_int_eq(clt_dataset_sample_size(ds), C - 1);
    ck_assert_int_eq(clt_dataset_targets_per_sample(ds), 1);
    float x[N * (C - 1)], y[N];
    get_all(ds, x, y);
    for (int i = 0; i < N * (C - 1); i++) ck_assert_msg(x[i] == f[i], "%s value %d", paths[k], i);
    for (int i = 0; i < N; i++) ck_assert_msg(y[i] == t[i], "%s target %d", paths[k], i);
    clt_dataset_destroy(ds);
  }
}
END_TEST

/* CSV: a target by name, features picked, tabs, comments and blank lines;
 * classification labels. */
START_TEST(csv_columns) {
  const char *text = "# made by hand\n\"id\"\t\"f1\"\t\"cls\"\t\"f2\"\n1\t0.5\t2\t-1e-3\n\n2\t1.5\t0\t2E2\r\n3\t-2\t1\t.25\n";
  du_write(du_join(p1, sizeof p1, tmp, "c.tsv"), text, strlen(text), 0);
  clt_data_options o = {.target = "cls", .features = "f1,3"};
  clt_dataset *ds;
  du_ok(clt_dataset_open(p1, &o, &ds));
  ck_assert_int_eq(clt_dataset_count(ds), 3);
  ck_assert_int_eq(clt_dataset_sample_size(ds), 2);
  ck_assert_int_eq(clt_dataset_num_classes(ds), 3);
  float x[6];
  int32_t y[3];
  get_all(ds, x, y);
  const float want[6] = {0.5f, -1e-3f, 1.5f, 200.0f, -2.0f, 0.25f};
  for (int i = 0; i < 6; i++) ck_assert_msg(x[i] == want[i], "value %d: %g", i, (double)x[i]);
  ck_assert_int_eq(y[0], 2);
  ck_assert_int_eq(y[1], 0);
  ck_assert_int_eq(y[2], 1);
  /* a fraction to validation: the last row */
  clt_dataset *val;
  du_ok(clt_dataset_split(ds, 0.34, &val));
  ck_assert_int_eq(clt_dataset_count(ds), 2);
  ck_assert_int_eq(clt_dataset_count(val), 1);
  get_all(val, x, y);
  ck_assert(x[0] == -2.0f && x[1] == 0.25f && y[0] == 1);
  du_expect_error(clt_dataset_split(ds, 1.5, &val), CLT_EINVAL, "fraction");
  clt_dataset_destroy(val);
  clt_dataset_destroy(ds);
}
END_TEST

/* Per-feature statistics of two parts combine to those of the whole, and
 * the normalisation they give is applied to every batch. */
START_TEST(feature_norm) {
  const char *text = "x1,x2,y\n1,10,0\n2,10,1\n3,10,2\n4,10,3\n";
  du_write(du_join(p1, sizeof p1, tmp, "n.csv"), text, strlen(text), 0);
  clt_data_options o = {.regression = 1};
  clt_dataset *ds;
  du_ok(clt_dataset_open(p1, &o, &ds));
  double st[8];
  du_ok(clt_dataset_feature_stats(ds, 0, 4, st));
  ck_assert(st[0] == 2.5 && st[1] == 10 && fabs(st[2] - 5.0) < 1e-12 && st[3] == 0);
  ck_assert(st[4] == 1 && st[5] == 10 && st[6] == 4 && st[7] == 10);
  const float shift[2] = {2.5f, 10}, scale[2] = {(float)sqrt(1.25), 1};
  du_ok(clt_dataset_normalize_features(ds, CLT_NORMALIZE_STANDARD, shift, scale));
  float x[8], y[4], sh[2], sc[2];
  get_all(ds, x, y);
  ck_assert(fabsf(x[0] + 1.5f / scale[0]) < 1e-6f && x[1] == 0 && y[3] == 3);
  ck_assert_int_eq(clt_dataset_feature_normalization(ds, sh, sc), CLT_NORMALIZE_STANDARD);
  ck_assert(sh[0] == 2.5f && sc[1] == 1);
  const float zero[2] = {0, 0};
  du_expect_error(clt_dataset_normalize_features(ds, CLT_NORMALIZE_MINMAX, shift, zero), CLT_EINVAL, "feature 0",
                  "scale");
  clt_dataset_destroy(ds);
}
END_TEST

/* Each parser refuses a broken file naming it, where, and the fault. */
START_TEST(bad_files) {
  const int64_t shape[2] = {3, 2};
  float v[6] = {1, 2, 3, 4, 5, 6};
  clt_data_options reg = {.regression = 1}, cls = {0};
  clt_dataset *ds = NULL;
  size_t len;
  unsigned char *img = npy_image("<f4", shape, 2, v, sizeof v, &len);
  du_join(p1, sizeof p1, tmp, "bad.npy");
  npy_write_file(p1, img, len - 4); /* truncated */
  du_expect_error(clt_dataset_open(p1, &reg, &ds), CLT_EFORMAT, "bad.npy", "truncated");
  unsigned char *longer = malloc(len + 3);
  memcpy(longer, img, len);
  npy_write_file(p1, longer, len + 3); /* trailing */
  du_expect_error(clt_dataset_open(p1, &reg, &ds), CLT_EFORMAT, "bad.npy", "trailing");
  free(longer);
  char *fo = (char *)img + 10;
  while (strncmp(fo, "False", 5) != 0) fo++;
  memcpy(fo, "True ", 5);
  npy_write_file(p1, img, len);
  du_expect_error(clt_dataset_open(p1, &reg, &ds), CLT_EFORMAT, "bad.npy", "Fortran");
  free(img);
  img = npy_image("<c8", shape, 2, v, sizeof v, &len); /* complex */
  npy_write_file(p1, img, len);
  du_expect_error(clt_dataset_open(p1, &reg, &ds), CLT_EFORMAT, "bad.npy", "c8");
  free(img);
  /* a 1-D array with no labels file has no target column */
  const int64_t one[1] = {6};
  img = npy_image("<f4", one, 1, v, sizeof v, &len);
  npy_write_file(p1, img, len);
  du_expect_error(clt_dataset_open(p1, &reg, &ds), CLT_EINVAL, "bad.npy", "--labels");
  /* labels that are no classes */
  du_join(p2, sizeof p2, tmp, "lab.npy");
  float lab[6] = {0, 1, 0.5f, 1, 0, 1};
  unsigned char *li = npy_image("<f4", one, 1, lab, sizeof lab, &len);
  npy_write_file(p2, li, len);
  free(li);
  clt_data_options with = {.labels = p2};
  du_expect_error(clt_dataset_open(p1, &with, &ds), CLT_EFORMAT, "lab.npy", "row 2", "0.5");
  free(img);
  /* CSV: a field that is no number, a short row, an unknown column */
  const char *t1 = "a,b,y\n1,2,3\n4,x5,6\n";
  du_write(du_join(p1, sizeof p1, tmp, "bad.csv"), t1, strlen(t1), 0);
  du_expect_error(clt_dataset_open(p1, &reg, &ds), CLT_EFORMAT, "bad.csv", "line 3", "column 2", "(b)", "x5");
  const char *t2 = "1,2,3\n4,5\n";
  du_write(p1, t2, strlen(t2), 0);
  du_expect_error(clt_dataset_open(p1, &reg, &ds), CLT_EFORMAT, "bad.csv", "line 2", "2 fields");
  const char *t3 = "a,b,y\n1,2,3\n";
  du_write(p1, t3, strlen(t3), 0);
  clt_data_options col = {.target = "z", .regression = 1};
  du_expect_error(clt_dataset_open(p1, &col, &ds), CLT_EINVAL, "bad.csv", "'z'");
  du_ok(clt_dataset_open(p1, &cls, &ds)); /* the same file as classification: fine */
  clt_dataset_destroy(ds), ds = NULL;
  /* .npz without the member, and a cut deflate stream */
  const char *names[1] = {"x"};
  img = npy_image("<f4", shape, 2, v, sizeof v, &len);
  unsigned char *imgs[1] = {img};
  size_t zl;
  unsigned char *z = npz_image(1, names, imgs, &len, 1, &zl);
  npy_write_file(du_join(p1, sizeof p1, tmp, "a.npz"), z, zl);
  du_expect_error(clt_dataset_open(p1, &reg, &ds), CLT_ENOTFOUND, "a.npz", "y.npy");
  z[40 + 4] ^= 0x5a; /* into the deflated bytes */
  npy_write_file(p1, z, zl);
  clt_data_options xo = {.regression = 1, .features = "x", .target = "x"};
  int rc = clt_dataset_open(p1, &xo, &ds);
  ck_assert_msg(rc == CLT_EFORMAT, "a corrupt member gave %s", clt_status_name(rc));
  ck_assert(strstr(clt_last_error(), "a.npz:x.npy"));
  free(z), free(img);
  /* no file cltrain reads */
  du_write(du_join(p1, sizeof p1, tmp, "what.bin"), "hello", 5, 0);
  du_expect_error(clt_dataset_open(p1, &reg, &ds), CLT_EFORMAT, "what.bin", "not a file cltrain reads");
#if !HAVE_HDF5
  du_write(du_join(p1, sizeof p1, tmp, "f.h5"), "\x89HDF\r\n\x1a\n....", 12, 0);
  strcat(p1, ":/u");
  du_expect_error(clt_dataset_open(p1, &reg, &ds), CLT_EUNSUPPORTED, "f.h5", "without HDF5");
#endif
}
END_TEST

/* A regression dataset's targets reach the prefetcher's batches. */
START_TEST(prefetch_targets) {
  const char *text = "x,t1,t2\n1,10,100\n2,20,200\n3,30,300\n4,40,400\n";
  du_write(du_join(p1, sizeof p1, tmp, "p.csv"), text, strlen(text), 0);
  clt_data_options o = {.regression = 1, .target = "t1,t2"};
  clt_dataset *ds;
  du_ok(clt_dataset_open(p1, &o, &ds));
  ck_assert_int_eq(clt_dataset_targets_per_sample(ds), 2);
  clt_sampler *s;
  clt_prefetcher *pf;
  du_ok(clt_sampler_create(4, 4, 7, 0, &s));
  du_ok(clt_prefetcher_create(ds, s, 0, NULL, &pf));
  clt_batch b;
  du_ok(clt_prefetcher_next(pf, &b));
  ck_assert(b.y == NULL && b.targets != NULL && b.n == 4);
  for (int i = 0; i < 4; i++) {
    ck_assert(b.targets[2 * i] == 10 * b.x[i] && b.targets[2 * i + 1] == 100 * b.x[i]);
  }
  int64_t idx[1] = {0};
  int32_t lab[1];
  du_expect_error(clt_dataset_get_batch(ds, idx, 1, NULL, lab), CLT_EINVAL, "clt_dataset_get_batch_targets");
  clt_prefetcher_destroy(pf);
  clt_sampler_destroy(s);
  clt_dataset_destroy(ds);
}
END_TEST

/* Every sample, the targets and the statistics of path, opened with the
 * rows mapped (map_max NULL) or pread() (map_max "0": any file is larger). */
static void read_all(const char *path, const clt_data_options *o, const char *map_max, float *x, float *t,
                     double *fstats, float *ms) {
  if (map_max) setenv("CLT_DATA_MAP_MAX", map_max, 1);
  else unsetenv("CLT_DATA_MAP_MAX");
  clt_dataset *ds;
  du_ok(clt_dataset_open(path, o, &ds));
  get_all(ds, x, t);
  du_ok(clt_dataset_feature_stats(ds, 1, clt_dataset_count(ds), fstats));
  du_ok(clt_dataset_stats(ds, ms, ms + 1));
  clt_dataset_destroy(ds);
  unsetenv("CLT_DATA_MAP_MAX");
}

START_TEST(pread_rows) {
  enum { N = 9, C = 5 };
  double v[N * C];
  for (int i = 0; i < N * C; i++) v[i] = (double)i * 0.75 - 7.5;
  const int64_t shape[2] = {N, C};
  write_npy(du_join(p1, sizeof p1, tmp, "t.npy"), "<f8", shape, 2, v, sizeof v);
  const int64_t yshape[1] = {N};
  size_t lens[2], zl;
  unsigned char *imgs[2] = {npy_image("<f8", shape, 2, v, sizeof v, &lens[0]),
                            npy_image("<f8", yshape, 1, v, N * sizeof *v, &lens[1])};
  const char *names[2] = {"x", "y"};
  unsigned char *z = npz_image(2, names, imgs, lens, 0, &zl); /* stored: rows at an offset in the archive */
  npy_write_file(du_join(p2, sizeof p2, tmp, "t.npz"), z, zl);
  free(z), free(imgs[0]), free(imgs[1]);
  /* columns 0, 3, 1 (not contiguous) as features, 4 the target; then all but the last */
  const clt_data_options opts[2] = {{.regression = 1, .target = "4", .features = "0,3,1"}, {.regression = 1}};
  const char *paths[2] = {p1, p2};
  for (int k = 0; k < 2; k++)
    for (int w = k; w < 2; w++) { /* an .npz's --target names a member: columns only for the .npy */
      float xm[N * C], tm[N], xp[N * C], tp[N], msm[2], msp[2];
      double fm[4 * C], fp[4 * C];
      read_all(paths[k], &opts[w], NULL, xm, tm, fm, msm);
      read_all(paths[k], &opts[w], "0", xp, tp, fp, msp);
      int64_t F = k ? C : w ? C - 1 : 3;
      ck_assert_msg(memcmp(xm, xp, (size_t)(N * F) * sizeof *xm) == 0, "%s: pread samples differ", paths[k]);
      ck_assert_msg(memcmp(tm, tp, sizeof tm) == 0, "%s: pread targets differ", paths[k]);
      ck_assert_msg(memcmp(fm, fp, (size_t)(4 * F) * sizeof *fm) == 0, "%s: pread feature stats differ", paths[k]);
      ck_assert_msg(msm[0] == msp[0] && msm[1] == msp[1], "%s: pread stats differ", paths[k]);
      ck_assert(xm[0] == (float)v[0] && xm[F] == (float)v[C] && tm[1] == (float)v[k ? 1 : 2 * C - 1]);
    }
  /* The file cut short under an open dataset: its rows are gone. */
  setenv("CLT_DATA_MAP_MAX", "0", 1);
  clt_data_options o = {.regression = 1};
  clt_dataset *ds;
  du_ok(clt_dataset_open(p1, &o, &ds));
  unsetenv("CLT_DATA_MAP_MAX");
  ck_assert_int_eq(truncate(p1, 200), 0);
  int64_t idx[1] = {N - 1};
  float x[C], t[1];
  du_expect_error(clt_dataset_get_batch_targets(ds, idx, 1, x, t), CLT_EIO, "t.npy", "sample 8", "cut short");
  clt_dataset_destroy(ds);
}
END_TEST

/* A pread dataset's batches are read in runs of neighbouring rows (file
 * order, one call a run): shuffled, in order, reversed and with repeated
 * rows, far apart (past the 16 KiB a run spans) and near, the samples are
 * those of the mapping bit for bit, and a non-finite sample is named as
 * the first of the batch's order, as row by row. */
START_TEST(pread_batches) {
  enum { N = 3000, C = 17, B = 700 };
  float *v = malloc((size_t)N * C * sizeof *v);
  for (int i = 0; i < N * C; i++) v[i] = (float)((i * 7919) % 1000) * 0.01f - 3.0f;
  v[5 * C + 2] = NAN, v[2500 * C] = INFINITY;
  const int64_t shape[2] = {N, C};
  write_npy(du_join(p1, sizeof p1, tmp, "b.npy"), "<f4", shape, 2, v, (size_t)N * C * sizeof *v);
  free(v);
  clt_data_options o = {.regression = 1};
  clt_dataset *mapped, *read;
  du_ok(clt_dataset_open(p1, &o, &mapped));
  setenv("CLT_DATA_MAP_MAX", "0", 1);
  du_ok(clt_dataset_open(p1, &o, &read));
  unsetenv("CLT_DATA_MAP_MAX");
  int64_t idx[B];
  float *xm = malloc((size_t)B * C * sizeof *xm), *xp = malloc((size_t)B * C * sizeof *xp), tm[B], tp[B];
  uint64_t r = 12345;
  for (int kind = 0; kind < 4; kind++) {
    for (int i = 0; i < B; i++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      int64_t k = kind == 0 ? (int64_t)(r % N) : kind == 1 ? 6 + i * 3 : kind == 2 ? N - 1 - i : (int64_t)(r % 40) * 70;
      if (k == 5 || k == 2500) k++;
      idx[i] = k;
    }
    du_ok(clt_dataset_get_batch_targets(mapped, idx, B, xm, tm));
    du_ok(clt_dataset_get_batch_targets(read, idx, B, xp, tp));
    ck_assert_msg(memcmp(xm, xp, (size_t)B * (C - 1) * sizeof *xm) == 0, "batch kind %d: pread samples differ", kind);
    ck_assert_msg(memcmp(tm, tp, sizeof tm) == 0, "batch kind %d: pread targets differ", kind);
  }
  const int64_t bad[4] = {9, 2500, 1, 5};
  du_expect_error(clt_dataset_get_batch_targets(mapped, bad, 4, xm, tm), CLT_ENONFINITE, "sample 2500 value 0");
  du_expect_error(clt_dataset_get_batch_targets(read, bad, 4, xp, tp), CLT_ENONFINITE, "sample 2500 value 0");
  free(xm), free(xp);
  clt_dataset_destroy(mapped);
  clt_dataset_destroy(read);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("sources");
  TCase *tc = tcase_create("formats");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, npy_types);
  tcase_add_test(tc, formats_agree);
  tcase_add_test(tc, csv_columns);
  tcase_add_test(tc, feature_norm);
  tcase_add_test(tc, bad_files);
  tcase_add_test(tc, prefetch_targets);
  tcase_add_test(tc, pread_rows);
  tcase_add_test(tc, pread_batches);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
