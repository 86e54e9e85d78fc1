/*
 * unet_layers_bench.c: milliseconds per forward and per backward of the
 * U-Net benchmarks' layers other than the convolutions (bench/unet.sh's
 * bench/unet2d.model and unet3d.model at batch 8): batchnorm's kernels
 * (statistics and normalisation; backward sums and input gradient; the
 * host's sums between them are the trainer's, timed by CLT_PROFILE=1),
 * SiLU, max pooling, concat, the transposed convolutions and the
 * trilinear upsample, on one OpenCL
 * device. bench/unet_layers_torch.py times PyTorch's on the same shapes
 * (run both with one thread: POCL_MAX_PTHREAD_COUNT=1 and --threads 1).
 *
 *   bench/unet_layers_bench [--device I] [--iters N] [--only SUBSTRING]
 *
 * Each op runs once to build its kernels, then N times with the queue
 * drained after each; the median wall-clock time and the mean CPU time of
 * the process are printed. Linked with the library's internals (the nn
 * layer, src/nn/nn.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "nn/nn.h"

static clt_context *ctx;
static int iters = 20;
static const char *only;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static void die(const char *what) {
  fprintf(stderr, "unet_layers_bench: %s: %s\n", what, clt_last_error());
  exit(1);
}

/* A tensor of ndim dims (f32, or i32 zeros), filled with small values. */
static clt_tensor make_dt(int ndim, const int64_t *shape, clt_dtype dt) {
  clt_tensor t;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  cl_mem buf;
  if (clt_buffer_create(ctx, (size_t)n * 4, &buf) < 0 || clt_tensor_view(buf, 0, dt, ndim, shape, &t) < 0)
    die("tensor");
  float *h = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) h[i] = dt == CLT_F32 ? (float)((i * 7919) % 2001 - 1000) * 1e-3f : 0.0f;
  if (clt_tensor_upload(ctx, &t, h, (size_t)n * 4) < 0) die("upload");
  free(h);
  return t;
}
static clt_tensor make(int ndim, const int64_t *shape) { return make_dt(ndim, shape, CLT_F32); }

static clt_tensor vec(int64_t n, float v) {
  clt_tensor t = make(1, &n);
  float *h = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) h[i] = v;
  if (clt_tensor_upload(ctx, &t, h, (size_t)n * 4) < 0) die("upload");
  free(h);
  return t;
}

typedef struct op {
  clt_tensor x, y, dy, dx, b2, db2, arg, mean, var, w, b, dw, db, part, g1, g2;
  clt_nn_pool2d_cfg pool;
  clt_nn_poolnd_cfg poolnd;
  clt_nn_convt_cfg convt;
  clt_tensor ws;
} op;

static int bn_fwd(op *o) {
  int rc = clt_nn_batchnorm_stats(ctx, &o->x, &o->part);
  return rc < 0 ? rc : clt_nn_batchnorm_forward(ctx, 1e-5f, &o->x, &o->mean, &o->var, &o->w, &o->b, &o->y);
}
static int bn_bwd(op *o) {
  int rc = clt_nn_batchnorm_backward_sums(ctx, 1e-5f, &o->x, &o->mean, &o->var, &o->dy, &o->dw, &o->db, &o->part);
  return rc < 0 ? rc
                : clt_nn_batchnorm_backward_input(ctx, 1e-5f, &o->x, &o->mean, &o->var, &o->w, &o->g1, &o->g2,
                                                  &o->dy, &o->dx);
}
static int bn_stats(op *o) { return clt_nn_batchnorm_stats(ctx, &o->x, &o->part); }
static int bn_sums(op *o) {
  return clt_nn_batchnorm_backward_sums(ctx, 1e-5f, &o->x, &o->mean, &o->var, &o->dy, &o->dw, &o->db, &o->part);
}
static int silu_fwd(op *o) { return clt_nn_act_forward(ctx, CLT_NN_SILU, 0, &o->x, &o->y); }
static int silu_bwd(op *o) { return clt_nn_act_backward(ctx, CLT_NN_SILU, 0, &o->x, NULL, &o->dy, &o->dx); }
static int pool_fwd(op *o) { return clt_nn_maxpool2d_forward(ctx, &o->pool, &o->x, &o->y, &o->arg); }
static int pool_bwd(op *o) { return clt_nn_maxpool2d_backward(ctx, &o->pool, &o->arg, &o->dy, &o->dx); }
static int pool3_fwd(op *o) { return clt_nn_maxpoolnd_forward(ctx, &o->poolnd, &o->x, &o->y, &o->arg); }
static int pool3_bwd(op *o) { return clt_nn_maxpoolnd_backward(ctx, &o->poolnd, &o->arg, &o->dy, &o->dx); }
static int cat_fwd(op *o) { return clt_nn_concat_forward(ctx, &o->x, &o->b2, &o->y); }
static int cat_bwd(op *o) { return clt_nn_concat_backward(ctx, &o->dy, &o->dx, &o->db2); }
static int up_fwd(op *o) { return clt_nn_upsample_forward(ctx, CLT_NN_UPSAMPLE_LINEAR, 2, &o->x, &o->y); }
static int up_bwd(op *o) { return clt_nn_upsample_backward(ctx, CLT_NN_UPSAMPLE_LINEAR, 2, &o->dy, &o->dx); }

static int convt_fwd(op *o) { return clt_nn_convtranspose_forward(ctx, &o->convt, &o->x, &o->w, &o->b, &o->y, &o->ws); }
static int convt_bwd(op *o) {
  return clt_nn_convtranspose_backward(ctx, &o->convt, &o->x, &o->w, &o->dy, &o->dx, &o->dw, &o->db, &o->ws);
}

static void time_it(const char *name, const char *dir, int (*f)(op *), op *o) {
  char full[160];
  snprintf(full, sizeof full, "%s %s", name, dir);
  if (only && !strstr(full, only)) return;
  double *t = malloc((size_t)iters * sizeof *t);
  if (f(o) < 0 || clt_context_finish(ctx) < 0) die(name);
  double c0 = cpu();
  for (int i = 0; i < iters; i++) {
    double t0 = now();
    f(o);
    clt_context_finish(ctx);
    t[i] = (now() - t0) * 1e3;
  }
  double c = (cpu() - c0) * 1e3 / iters;
  for (int i = 1; i < iters; i++)
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double s = t[j];
      t[j] = t[j - 1], t[j - 1] = s;
    }
  printf("  %-40s %-14s %9.3f %9.3f\n", name, dir, t[iters / 2], c);
  free(t);
}

/* batchnorm over x (N, C, S) */
static void batchnorm(const char *name, int64_t N, int64_t C, int64_t S) {
  op o;
  memset(&o, 0, sizeof o);
  int64_t xs[3] = {N, C, S}, two = 2 * C;
  o.x = make(3, xs), o.y = make(3, xs), o.dy = make(3, xs), o.dx = make(3, xs);
  o.mean = vec(C, 0.01f), o.var = vec(C, 0.3f), o.w = vec(C, 1.0f), o.b = vec(C, 0.0f), o.dw = vec(C, 0);
  o.db = vec(C, 0), o.g1 = vec(C, 0.01f), o.g2 = vec(C, 0.02f), o.part = make(1, &two);
  time_it(name, "forward", bn_fwd, &o);
  time_it(name, "backward", bn_bwd, &o);
  time_it(name, "(stats)", bn_stats, &o);
  time_it(name, "(bwd sums)", bn_sums, &o);
}

static void silu(const char *name, int64_t n) {
  op o;
  memset(&o, 0, sizeof o);
  o.x = make(1, &n), o.y = make(1, &n), o.dy = make(1, &n), o.dx = make(1, &n);
  time_it(name, "forward", silu_fwd, &o);
  time_it(name, "backward", silu_bwd, &o);
}

static void maxpool2d(const char *name, int64_t N, int64_t C, int64_t H) {
  op o;
  memset(&o, 0, sizeof o);
  int64_t xs[4] = {N, C, H, H}, ys[4] = {N, C, H / 2, H / 2};
  o.pool = (clt_nn_pool2d_cfg){2, 2, 2, 2, 0, 0};
  o.x = make(4, xs), o.dx = make(4, xs), o.y = make(4, ys), o.dy = make(4, ys), o.arg = make_dt(4, ys, CLT_I32);
  time_it(name, "forward", pool_fwd, &o);
  time_it(name, "backward", pool_bwd, &o);
}

static void maxpool3d(const char *name, int64_t N, int64_t C, int64_t D) {
  op o;
  memset(&o, 0, sizeof o);
  int64_t xs[5] = {N, C, D, D, D}, ys[5] = {N, C, D / 2, D / 2, D / 2};
  o.poolnd.dims = 3;
  for (int a = 0; a < 3; a++) o.poolnd.kernel[a] = o.poolnd.stride[a] = 2;
  o.x = make(5, xs), o.dx = make(5, xs), o.y = make(5, ys), o.dy = make(5, ys), o.arg = make_dt(5, ys, CLT_I32);
  time_it(name, "forward", pool3_fwd, &o);
  time_it(name, "backward", pool3_bwd, &o);
}

/* concat of a (N, A, S) and b (N, B, S) */
static void concat(const char *name, int64_t N, int64_t A, int64_t B, int64_t S) {
  op o;
  memset(&o, 0, sizeof o);
  int64_t as[3] = {N, A, S}, bs[3] = {N, B, S}, ys[3] = {N, A + B, S};
  o.x = make(3, as), o.dx = make(3, as), o.b2 = make(3, bs), o.db2 = make(3, bs), o.y = make(3, ys);
  o.dy = make(3, ys);
  time_it(name, "forward", cat_fwd, &o);
  time_it(name, "backward", cat_bwd, &o);
}

static void upsample3d(const char *name, int64_t N, int64_t C, int64_t D) {
  op o;
  memset(&o, 0, sizeof o);
  int64_t xs[5] = {N, C, D, D, D}, ys[5] = {N, C, 2 * D, 2 * D, 2 * D};
  o.x = make(5, xs), o.dx = make(5, xs), o.y = make(5, ys), o.dy = make(5, ys);
  time_it(name, "forward", up_fwd, &o);
  time_it(name, "backward", up_bwd, &o);
}

/* The 2D U-Net's up-sampling: x (N, Cin, H, H) through a transposed conv
 * of kernel 2, stride 2 to cout channels (its 6.6 ms forward in issue 40's
 * profile was the first run's kernel builds: CLT_PROFILE=1 now leaves that
 * run out). */
static void convtranspose2d(const char *name, int64_t N, int64_t cin, int64_t cout, int64_t H) {
  op o;
  memset(&o, 0, sizeof o);
  int64_t xs[4] = {N, cin, H, H}, ys[4] = {N, cout, 2 * H, 2 * H}, wsh[4] = {cin, cout, 2, 2};
  for (int a = 0; a < 3; a++) o.convt.stride[a] = 2;
  o.w = make(4, wsh), o.dw = make(4, wsh), o.b = make(1, &cout), o.db = make(1, &cout);
  int64_t wsn = (int64_t)(clt_nn_convtranspose_workspace_bytes(N, cin, cout, 4, H * H) / 4);
  o.ws = make(1, &wsn);
  o.x = make(4, xs), o.dx = make(4, xs), o.y = make(4, ys), o.dy = make(4, ys);
  time_it(name, "forward", convt_fwd, &o);
  time_it(name, "backward", convt_bwd, &o);
}

int main(int argc, char **argv) {
  int dev = 0;
  static const struct option opts[] = {{"device", required_argument, NULL, 'd'},
                                       {"iters", required_argument, NULL, 'n'},
                                       {"only", required_argument, NULL, 'o'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "d:n:o:", opts, NULL)) != -1;) {
    if (c == 'd') dev = atoi(optarg);
    else if (c == 'n') iters = atoi(optarg) > 0 ? atoi(optarg) : 1;
    else if (c == 'o') only = optarg;
    else {
      fprintf(stderr, "usage: unet_layers_bench [--device I] [--iters N] [--only SUBSTRING]\n");
      return 2;
    }
  }
  clt_devices *devs;
  if (clt_devices_discover(&devs) < 0 || clt_devices_count(devs) <= dev) {
    fprintf(stderr, "unet_layers_bench: no device %d\n", dev);
    return 77;
  }
  if (clt_context_create(devs, dev, &ctx) < 0) die("context");
  printf("unet_layers_bench on %s, %d iterations: median ms, CPU ms\n", clt_devices_info(devs, dev)->name, iters);
  /* unet2d, batch 8 */
  batchnorm("2d batchnorm (8, 16, 64x64)", 8, 16, 64 * 64);
  batchnorm("2d batchnorm (8, 32, 32x32)", 8, 32, 32 * 32);
  batchnorm("2d batchnorm (8, 64, 16x16)", 8, 64, 16 * 16);
  silu("2d silu (8, 16, 64x64)", 8 * 16 * 64 * 64);
  silu("2d silu (8, 64, 16x16)", 8 * 64 * 16 * 16);
  maxpool2d("2d maxpool 2 (8, 16, 64x64)", 8, 16, 64);
  maxpool2d("2d maxpool 2 (8, 32, 32x32)", 8, 32, 32);
  concat("2d concat (8, 32 + 32, 32x32)", 8, 32, 32, 32 * 32);
  concat("2d concat (8, 16 + 16, 64x64)", 8, 16, 16, 64 * 64);
  convtranspose2d("2d convtranspose2d 64->32 k2 s2 (8, 16x16)", 8, 64, 32, 16);
  convtranspose2d("2d convtranspose2d 32->16 k2 s2 (8, 32x32)", 8, 32, 16, 32);
  /* unet3d, batch 8 */
  batchnorm("3d batchnorm (8, 8, 16^3)", 8, 8, 16 * 16 * 16);
  batchnorm("3d batchnorm (8, 16, 8^3)", 8, 16, 8 * 8 * 8);
  maxpool3d("3d maxpool3d 2 (8, 8, 16^3)", 8, 8, 16);
  upsample3d("3d upsample trilinear x2 (8, 16, 8^3)", 8, 16, 8);
  concat("3d concat (8, 16 + 8, 16^3)", 8, 16, 8, 16 * 16 * 16);
  clt_context_destroy(ctx);
  clt_devices_destroy(devs);
  return 0;
}
