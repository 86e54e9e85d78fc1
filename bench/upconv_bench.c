/*
 * upconv_bench.c: milliseconds per forward and per backward of upsample
 * and the transposed convolutions at the shapes of a U-Net's decoder, on
 * one OpenCL device; bench/upconv_torch.py times PyTorch's on the same
 * shapes (run both with one thread: POCL_MAX_PTHREAD_COUNT=1 and
 * --threads 1, and divide).
 *
 *   bench/upconv_bench [--device I] [--iters N]
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
  fprintf(stderr, "upconv_bench: %s: %s\n", what, clt_last_error());
  exit(1);
}

/* A float32 tensor of ndim dims, filled with small values. */
static clt_tensor make(int ndim, const int64_t *shape) {
  clt_tensor t;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  cl_mem buf;
  if (clt_buffer_create(ctx, (size_t)n * 4, &buf) < 0 || clt_tensor_view(buf, 0, CLT_F32, ndim, shape, &t) < 0)
    die("tensor");
  float *h = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) h[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
  if (clt_tensor_upload(ctx, &t, h, (size_t)n * 4) < 0) die("upload");
  free(h);
  return t;
}

typedef struct op {
  int kind; /* 0 upsample, 1 convtranspose */
  clt_nn_upsample_mode mode;
  int scale;
  clt_nn_convt_cfg cfg;
  clt_tensor x, y, dy, dx, w, b, dw, db, ws;
} op;

static int fwd(op *o) {
  if (o->kind == 0) return clt_nn_upsample_forward(ctx, o->mode, o->scale, &o->x, &o->y);
  return clt_nn_convtranspose_forward(ctx, &o->cfg, &o->x, &o->w, &o->b, &o->y, &o->ws);
}
static int bwd(op *o) {
  if (o->kind == 0) return clt_nn_upsample_backward(ctx, o->mode, o->scale, &o->dy, &o->dx);
  return clt_nn_convtranspose_backward(ctx, &o->cfg, &o->x, &o->w, &o->dy, &o->dx, &o->dw, &o->db, &o->ws);
}

static void time_it(const char *name, const char *dir, int (*f)(op *), op *o) {
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
  printf("  %-44s %-8s %9.3f %9.3f\n", name, dir, t[iters / 2], c);
  free(t);
}

/* x (shape) up by 2 (scale), or through a transposed conv to cout channels
 * with kernel 2 stride 2. */
static void run(const char *name, int kind, clt_nn_upsample_mode mode, int ndim, const int64_t *xs, int64_t cout) {
  op o = {.kind = kind, .mode = mode, .scale = 2};
  int64_t ys[5], ws[5];
  memcpy(ys, xs, (size_t)ndim * sizeof *xs);
  for (int d = 2; d < ndim; d++) ys[d] = xs[d] * 2;
  if (kind == 1) {
    ys[1] = cout;
    ws[0] = xs[1], ws[1] = cout;
    int64_t kc = 1, cells = 1;
    for (int d = 2; d < ndim; d++) ws[d] = 2, kc *= 2, cells *= xs[d];
    for (int a = 0; a < 3; a++) o.cfg.stride[a] = 2;
    o.w = make(ndim, ws), o.dw = make(ndim, ws), o.b = make(1, &cout), o.db = make(1, &cout);
    int64_t wsn = (int64_t)(clt_nn_convtranspose_workspace_bytes(xs[0], xs[1], cout, kc, cells) / 4);
    o.ws = make(1, &wsn);
  }
  o.x = make(ndim, xs), o.dx = make(ndim, xs), o.y = make(ndim, ys), o.dy = make(ndim, ys);
  time_it(name, "forward", fwd, &o);
  time_it(name, "backward", bwd, &o);
}

int main(int argc, char **argv) {
  int dev = 0;
  static const struct option opts[] = {{"device", required_argument, NULL, 'd'},
                                       {"iters", required_argument, NULL, 'n'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "d:n:", opts, NULL)) != -1;) {
    if (c == 'd') dev = atoi(optarg);
    else if (c == 'n') iters = atoi(optarg) > 0 ? atoi(optarg) : 1;
    else {
      fprintf(stderr, "usage: upconv_bench [--device I] [--iters N]\n");
      return 2;
    }
  }
  clt_devices *devs;
  if (clt_devices_discover(&devs) < 0 || clt_devices_count(devs) <= dev) {
    fprintf(stderr, "upconv_bench: no device %d\n", dev);
    return 77;
  }
  if (clt_context_create(devs, dev, &ctx) < 0) die("context");
  printf("upconv_bench on %s, %d iterations: median ms, CPU ms\n", clt_devices_info(devs, dev)->name, iters);
  run("convtranspose2d 64->32 k2 s2 (16, 64, 16, 16)", 1, 0, 4, (const int64_t[]){16, 64, 16, 16}, 32);
  run("convtranspose2d 32->16 k2 s2 (16, 32, 32, 32)", 1, 0, 4, (const int64_t[]){16, 32, 32, 32}, 16);
  run("upsample nearest x2 (16, 64, 16, 16)", 0, CLT_NN_UPSAMPLE_NEAREST, 4, (const int64_t[]){16, 64, 16, 16}, 0);
  run("upsample bilinear x2 (16, 64, 16, 16)", 0, CLT_NN_UPSAMPLE_LINEAR, 4, (const int64_t[]){16, 64, 16, 16}, 0);
  run("convtranspose3d 32->16 k2 s2 (4, 32, 8, 8, 8)", 1, 0, 5, (const int64_t[]){4, 32, 8, 8, 8}, 16);
  run("upsample trilinear x2 (4, 32, 8, 8, 8)", 0, CLT_NN_UPSAMPLE_LINEAR, 5, (const int64_t[]){4, 32, 8, 8, 8}, 0);
  clt_context_destroy(ctx);
  clt_devices_destroy(devs);
  return 0;
}
