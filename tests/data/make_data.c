/*
 * make_data.c: the small generated datasets of tests/cli/data_cli.sh and
 * tests/train/data_torch_check.sh, written into DIR:
 *
 *   table.csv         regression: N rows of F features x1..xF and a target
 *                     y = w . x + b + noise (header "x1,...,xF,y")
 *   x.npy, y.npy      classification: N float32 samples of F values from
 *                     C Gaussian blobs, int64 labels
 *   xy.npz            the same as members x and y, stored (and xyz.npz
 *                     deflated)
 *   sim.h5            regression as table.csv, dataset /fields/u of (N, F+1)
 *                     float64, target the last column (built with HDF5)
 *   simz.h5           the same, chunked and deflated
 *   sim.csv           the same values as sim.h5, for checks without h5py
 *   blobs.raw         the classification set as a cltrain raw file
 *   vol.npy, vol_y.npy, sig.npy, sig_y.npy
 *                     regression on (2, 4, 6, 6) volumes and (3, 16)
 *                     signals, float32 (tests/cli/convnd_cli.sh)
 *
 * A fixed generator (SplitMix64), so the files are the same everywhere.
 * Usage: make_data DIR [N]
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain.h>

#include "npywrite.h"

#if HAVE_HDF5
#include <hdf5.h>
#endif

enum { F = 8, C = 3 };

static uint64_t state = 0x5eed;
static double uniform(void) { /* SplitMix64 to [0, 1) */
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}
static double normal(void) { return sqrt(-2 * log(1 - uniform())) * cos(6.283185307179586 * uniform()); }

static void path(char *buf, size_t len, const char *dir, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: make_data DIR [N]\n");
    return 2;
  }
  const char *dir = argv[1];
  const int64_t N = argc == 3 ? atoll(argv[2]) : 600;
  char p[4096];
  /* regression: features of different scales and offsets, so normalising matters */
  double w[F], *tab = calloc((size_t)(N * (F + 1)), sizeof *tab);
  for (int j = 0; j < F; j++) w[j] = normal();
  FILE *csv = fopen((path(p, sizeof p, dir, "table.csv"), p), "w");
  FILE *sim = fopen((path(p, sizeof p, dir, "sim.csv"), p), "w");
  if (!tab || !csv || !sim) return perror(p), 99;
  for (int j = 0; j < F; j++) fprintf(csv, "x%d,", j + 1);
  fprintf(csv, "y\n");
  for (int64_t i = 0; i < N; i++) {
    double y = 0.5;
    for (int j = 0; j < F; j++) {
      double x = (j + 1) * (2 * uniform() - 1) + 3 * j;
      tab[i * (F + 1) + j] = x;
      y += w[j] * (x - 3 * j) / (j + 1);
    }
    y += 0.1 * normal();
    tab[i * (F + 1) + F] = y;
    for (int j = 0; j <= F; j++) {
      fprintf(csv, "%.9g%s", tab[i * (F + 1) + j], j < F ? "," : "\n");
      fprintf(sim, "%.17g%s", tab[i * (F + 1) + j], j < F ? "," : "\n");
    }
  }
  if (fclose(csv) || fclose(sim)) return perror("close"), 99;
#if HAVE_HDF5
  path(p, sizeof p, dir, "sim.h5");
  hid_t file = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t grp = H5Gcreate2(file, "/fields", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t dims[2] = {(hsize_t)N, F + 1};
  hid_t space = H5Screate_simple(2, dims, NULL);
  hid_t ds = H5Dcreate2(file, "/fields/u", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0 || ds < 0 || H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, tab) < 0)
    return fprintf(stderr, "%s: HDF5 write failed\n", p), 99;
  H5Dclose(ds), H5Sclose(space), H5Gclose(grp), H5Fclose(file);
  /* the same chunked and deflated: HDF5 reads it (whole), not a mapping */
  path(p, sizeof p, dir, "simz.h5");
  file = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  grp = H5Gcreate2(file, "/fields", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  space = H5Screate_simple(2, dims, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t chunk[2] = {(hsize_t)(N < 64 ? N : 64), F + 1};
  H5Pset_chunk(dcpl, 2, chunk);
  H5Pset_deflate(dcpl, 4);
  ds = H5Dcreate2(file, "/fields/u", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (file < 0 || ds < 0 || H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, tab) < 0)
    return fprintf(stderr, "%s: HDF5 write failed\n", p), 99;
  H5Pclose(dcpl), H5Dclose(ds), H5Sclose(space), H5Gclose(grp), H5Fclose(file);
#endif
  free(tab);
  /* classification: C blobs */
  float *x = calloc((size_t)(N * F), sizeof *x), centre[C][F];
  int64_t *y = calloc((size_t)N, sizeof *y);
  int32_t *y32 = calloc((size_t)N, sizeof *y32);
  for (int c = 0; c < C; c++)
    for (int j = 0; j < F; j++) centre[c][j] = (float)(1.5 * normal()) + 10.0f * (float)j;
  for (int64_t i = 0; i < N; i++) {
    y[i] = (int64_t)(uniform() * C);
    y32[i] = (int32_t)y[i];
    for (int j = 0; j < F; j++) x[i * F + j] = centre[y[i]][j] + (float)(1.2 * normal());
  }
  const int64_t xs[2] = {N, F}, ys[1] = {N};
  size_t lx, ly, lz;
  unsigned char *ix = npy_image("<f4", xs, 2, x, (size_t)(N * F) * 4, &lx), *iy = npy_image("<i8", ys, 1, y, (size_t)N * 8, &ly);
  npy_write_file((path(p, sizeof p, dir, "x.npy"), p), ix, lx);
  npy_write_file((path(p, sizeof p, dir, "y.npy"), p), iy, ly);
  const char *names[2] = {"x", "y"};
  unsigned char *imgs[2] = {ix, iy};
  const size_t lens[2] = {lx, ly};
  for (int d = 0; d < 2; d++) {
    unsigned char *z = npz_image(2, names, imgs, lens, d, &lz);
    npy_write_file((path(p, sizeof p, dir, d ? "xyz.npz" : "xy.npz"), p), z, lz);
    free(z);
  }
  const int64_t rd[1] = {F};
  if (clt_dataset_write_raw((path(p, sizeof p, dir, "blobs.raw"), p), N, 1, rd, C, x, y32) < 0)
    return fprintf(stderr, "%s\n", clt_last_error()), 99;
  free(ix), free(iy), free(x), free(y), free(y32);
  /* volumes and signals for tests/cli/convnd_cli.sh: vol.npy (N, 2*4*6*6),
   * the samples of `input 2 4 6 6`, vol_y.npy (N, 1) a smooth function of
   * them; sig.npy (N, 3*16) for `input 3 16`, sig_y.npy (N, 2) */
  enum { VOL = 2 * 4 * 6 * 6, SIG = 3 * 16 };
  float *v = calloc((size_t)(N * VOL), sizeof *v), *vy = calloc((size_t)N, sizeof *vy);
  float *sg = calloc((size_t)(N * SIG), sizeof *sg), *sy = calloc((size_t)(N * 2), sizeof *sy);
  if (!v || !vy || !sg || !sy) return perror("calloc"), 99;
  for (int64_t i = 0; i < N; i++) {
    double a = normal(), b = normal();
    for (int j = 0; j < VOL; j++) v[i * VOL + j] = (float)(a * sin(0.3 * j) + b * cos(0.11 * j) + 0.2 * normal());
    vy[i] = (float)(a - 0.5 * b);
    for (int j = 0; j < SIG; j++) sg[i * SIG + j] = (float)(a * sin(0.5 * j + b) + 0.1 * normal());
    sy[2 * i] = (float)a, sy[2 * i + 1] = (float)(0.3 * b);
  }
  const int64_t vs[2] = {N, VOL}, vys[2] = {N, 1}, ss[2] = {N, SIG}, sys[2] = {N, 2};
  const struct { const char *name; const int64_t *shape; const float *data; size_t n; } outs[4] = {
      {"vol.npy", vs, v, (size_t)(N * VOL)}, {"vol_y.npy", vys, vy, (size_t)N},
      {"sig.npy", ss, sg, (size_t)(N * SIG)}, {"sig_y.npy", sys, sy, (size_t)(N * 2)}};
  for (int k = 0; k < 4; k++) {
    unsigned char *img = npy_image("<f4", outs[k].shape, 2, outs[k].data, outs[k].n * 4, &lx);
    npy_write_file((path(p, sizeof p, dir, outs[k].name), p), img, lx);
    free(img);
  }
  free(v), free(vy), free(sg), free(sy);
  return 0;
}
