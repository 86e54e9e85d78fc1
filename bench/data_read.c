/*
 * data_read.c: how fast the data sources read from the page cache on one
 * core: clt_dataset_get_batch (the prefetch thread's work) over shuffled
 * batches of 256 samples, for a float32 .npy (memory-mapped), a float64
 * .npy (converted), a stored and a deflated .npz, HDF5 (when built with
 * it), a raw file and CSV (parsed once when opened: its figure is the
 * open's), each against the peer in the same run: memcpy of the same rows
 * out of the same mapping (what any reader must at least do). Prints GB/s
 * of the file's bytes and the ratio to memcpy. Timings, not a test.
 *
 *   bench/data_read [MiB] [DIR]      (default 256 MiB of float32 values, $TMPDIR)
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cltrain.h>

#include "npywrite.h"

#if HAVE_HDF5
#include <hdf5.h>
#endif

enum { F = 256, B = 256 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* GB/s of stored bytes (bytes_per_sample each) for get_batch over every
 * sample once, in shuffled batches; the best of 3 passes (the first pages
 * the file in). */
static double read_rate(clt_dataset *ds, double bytes_per_sample) {
  int64_t N = clt_dataset_count(ds), *perm = malloc((size_t)N * sizeof *perm);
  float *x = malloc((size_t)B * F * sizeof *x), *t = malloc((size_t)B * sizeof *t);
  int32_t *y = malloc((size_t)B * sizeof *y);
  int reg = clt_dataset_targets_per_sample(ds) > 0;
  for (int64_t i = 0; i < N; i++) perm[i] = i;
  for (int64_t i = N - 1; i > 0; i--) {
    int64_t j = (int64_t)(next() % (uint64_t)(i + 1)), tmp = perm[i];
    perm[i] = perm[j], perm[j] = tmp;
  }
  double best = 1e30;
  for (int pass = 0; pass < 3; pass++) {
    double t0 = now();
    for (int64_t at = 0; at < N; at += B) {
      int64_t n = N - at < B ? N - at : B;
      int rc = reg ? clt_dataset_get_batch_targets(ds, perm + at, n, x, t) : clt_dataset_get_batch(ds, perm + at, n, x, y);
      if (rc < 0) {
        fprintf(stderr, "%s\n", clt_last_error());
        exit(1);
      }
    }
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  free(perm), free(x), free(t), free(y);
  return (double)N * bytes_per_sample / best / 1e9;
}

/* memcpy of the same shuffled rows out of a buffer of the file's values. */
static double memcpy_rate(const unsigned char *base, int64_t N, size_t row) {
  unsigned char *dst = malloc((size_t)B * row);
  double best = 1e30;
  for (int pass = 0; pass < 3; pass++) {
    double t0 = now();
    for (int64_t at = 0; at < N; at += B) {
      int64_t n = N - at < B ? N - at : B;
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * row, base + (next() % (uint64_t)N) * row, row);
    }
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  volatile unsigned char sink = dst[0];
  (void)sink;
  free(dst);
  return (double)N * (double)row / best / 1e9;
}

int main(int argc, char **argv) {
  const double mib = argc > 1 ? atof(argv[1]) : 256;
  const char *tmp = argc > 2 ? argv[2] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  const int64_t N = (int64_t)(mib * 1048576 / (4.0 * (F + 1)));
  char p[4096];
  clt_log_set_level(CLT_LOG_ERROR);
  /* a table of N rows, F features and a target: float32 and float64 */
  float *v = malloc((size_t)N * (F + 1) * sizeof *v);
  double *d = malloc((size_t)N * (F + 1) * sizeof *d);
  for (int64_t i = 0; i < N * (F + 1); i++) v[i] = (float)(next() % 1000) * 0.01f, d[i] = v[i];
  const int64_t shape[2] = {N, F + 1};
  printf("data_read: %lld samples of %d float32 features and a target (%.0f MiB), batches of %d, one core\n",
         (long long)N, F, (double)N * (F + 1) * 4 / 1048576, B);
  printf("%-22s %10s %12s\n", "source", "GB/s", "vs memcpy");
  double peer = memcpy_rate((const unsigned char *)v, N, (size_t)(F + 1) * 4);
  printf("%-22s %10.2f %12s\n", "memcpy (peer)", peer, "1.00");
  struct { const char *name, *file, *descr; const void *vals; size_t size; int npz; } kinds[] = {
      {".npy float32 (mmap)", "bench.npy", "<f4", v, 4, 0},
      {".npy float64 (mmap)", "bench64.npy", "<f8", d, 8, 0},
      {".npz stored (mmap)", "bench.npz", "<f4", v, 4, 1},
      {".npz deflated", "benchz.npz", "<f4", v, 4, 2}};
  /* the .npz members: x (N, F) and y (N) */
  float *fx = malloc((size_t)N * F * sizeof *fx), *fy = malloc((size_t)N * sizeof *fy);
  for (int64_t i = 0; i < N; i++) {
    memcpy(fx + i * F, v + i * (F + 1), F * sizeof *fx);
    fy[i] = v[i * (F + 1) + F];
  }
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    size_t len;
    snprintf(p, sizeof p, "%s/%s", tmp, kinds[k].file);
    if (kinds[k].npz) {
      const int64_t xs[2] = {N, F}, ys[1] = {N};
      size_t lens[2];
      unsigned char *imgs[2] = {npy_image("<f4", xs, 2, fx, (size_t)N * F * 4, &lens[0]),
                                npy_image("<f4", ys, 1, fy, (size_t)N * 4, &lens[1])};
      const char *names[2] = {"x", "y"};
      unsigned char *z = npz_image(2, names, imgs, lens, kinds[k].npz == 2, &len);
      npy_write_file(p, z, len);
      free(z), free(imgs[0]), free(imgs[1]);
    } else {
      unsigned char *img = npy_image(kinds[k].descr, shape, 2, kinds[k].vals, (size_t)N * (F + 1) * kinds[k].size, &len);
      npy_write_file(p, img, len);
      free(img);
    }
    clt_data_options o = {.regression = 1};
    clt_dataset *ds;
    double t0 = now();
    int rc = clt_dataset_open(p, &o, &ds);
    double open_s = now() - t0;
    if (rc < 0) {
      fprintf(stderr, "%s: %s\n", kinds[k].name, clt_last_error());
      return 1;
    }
    double r = read_rate(ds, (double)F * (double)kinds[k].size);
    printf("%-22s %10.2f %12.2f   (open %.3f s)\n", kinds[k].name, r, r / peer, open_s);
    clt_dataset_destroy(ds);
    remove(p);
  }
  free(fx), free(fy);
#if HAVE_HDF5
  {
    snprintf(p, sizeof p, "%s/bench.h5", tmp);
    hid_t file = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {(hsize_t)N, F + 1};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dset = H5Dcreate2(file, "/u", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(dset), H5Sclose(space), H5Fclose(file);
    snprintf(p + strlen(p), sizeof p - strlen(p), ":/u");
    clt_data_options o = {.regression = 1};
    clt_dataset *ds;
    double t0 = now();
    if (clt_dataset_open(p, &o, &ds) < 0) return fprintf(stderr, "hdf5: %s\n", clt_last_error()), 1;
    double open_s = now() - t0, r = read_rate(ds, (double)F * 4);
    printf("%-22s %10.2f %12.2f   (open %.3f s: contiguous, so mapped as an .npy)\n", "HDF5 float32", r, r / peer,
           open_s);
    clt_dataset_destroy(ds);
    *strrchr(p, ':') = '\0';
    remove(p);
  }
#endif
  { /* CSV: parsed once, at open */
    snprintf(p, sizeof p, "%s/bench.csv", tmp);
    FILE *f = fopen(p, "w");
    const int64_t rows = N / 8 > 0 ? N / 8 : 1;
    for (int64_t i = 0; i < rows; i++)
      for (int j = 0; j <= F; j++) fprintf(f, "%.2f%c", (double)v[i * (F + 1) + j], j < F ? ',' : '\n');
    long bytes = ftell(f);
    fclose(f);
    clt_data_options o = {.regression = 1};
    clt_dataset *ds;
    double best = 1e30;
    for (int pass = 0; pass < 3; pass++) {
      double t0 = now();
      if (clt_dataset_open(p, &o, &ds) < 0) return fprintf(stderr, "csv: %s\n", clt_last_error()), 1;
      double dt = now() - t0;
      if (dt < best) best = dt;
      if (pass < 2) clt_dataset_destroy(ds);
    }
    double r = read_rate(ds, (double)F * 4);
    printf("%-22s %10.2f %12.2f   (parsing the text at open: %.2f GB/s of %.0f MiB)\n", "CSV (parsed)", r, r / peer,
           (double)bytes / best / 1e9, (double)bytes / 1048576);
    clt_dataset_destroy(ds);
    remove(p);
  }
  free(v), free(d);
  return 0;
}
