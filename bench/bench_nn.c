/*
 * bench_nn.c: times conv2d forward and backward (src/nn/conv.c) at the
 * Fashion-MNIST CNN's shapes on every selected device. The forward's two
 * algorithms are each other's peer in the same run: im2col + one CLBlast
 * GEMM per chunk of samples, and the direct kernel (one work-item per
 * output); their outputs are compared too. The ratios printed are what
 * conv.c's automatic choice (DIRECT_MAX_K) is based on.
 *
 *   bench/bench_nn [ITERATIONS]      (devices: CLT_DEVICES, default all)
 *
 * Prints milliseconds per call (the fastest of the iterations, after one
 * warm-up call that compiles the kernels: on a shared machine the fastest
 * run is the least disturbed one), GFLOP/s counting 2 flops per
 * multiply-add, the ratio direct / im2col, and the im2col forward with a
 * one-sample workspace, to show what chunking costs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/nn.h"
#include "ref/ref.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define CHECK(expr)                                                                                                    \
  do {                                                                                                                 \
    if ((rc = (expr)) < 0) {                                                                                           \
      fprintf(stderr, "%s failed: %s\n", #expr, clt_last_error());                                                     \
      goto done;                                                                                                       \
    }                                                                                                                  \
  } while (0)

enum { OP_FORWARD, OP_BACKWARD, OP_FORWARD_1, OP_DIRECT, OP_BACKWARD_NO_DX, NOPS };

typedef struct layer {
  const char *name;
  int N, Cin, H, W, Cout, K, pad;
} layer;

typedef struct bufs {
  clt_tensor x, w, b, y, dy, dx, dw, db, ws, ws1;
  const layer *l;
} bufs;

static int run_op(clt_context *ctx, bufs *t, int op) {
  clt_nn_conv2d_cfg cfg = {1, 1, t->l->pad, t->l->pad, op == OP_DIRECT ? CLT_NN_CONV_DIRECT : CLT_NN_CONV_IM2COL};
  switch (op) {
  case OP_BACKWARD: return clt_nn_conv2d_backward(ctx, &cfg, &t->x, &t->w, &t->dy, &t->dx, &t->dw, &t->db, &t->ws);
  case OP_BACKWARD_NO_DX: return clt_nn_conv2d_backward(ctx, &cfg, &t->x, &t->w, &t->dy, NULL, &t->dw, &t->db, &t->ws);
  case OP_FORWARD_1: return clt_nn_conv2d_forward(ctx, &cfg, &t->x, &t->w, &t->b, &t->y, &t->ws1);
  default: return clt_nn_conv2d_forward(ctx, &cfg, &t->x, &t->w, &t->b, &t->y, &t->ws);
  }
}

/* The fastest of `iters` calls of op, each waited for, in milliseconds. */
static int time_op(clt_context *ctx, bufs *t, int op, int iters, double *ms) {
  int rc;
  double *times = malloc(iters * sizeof *times);
  if ((rc = run_op(ctx, t, op)) < 0 || (rc = clt_context_finish(ctx)) < 0) goto done; /* warm-up, compiles */
  for (int i = 0; i < iters; i++) {
    double t0 = now();
    if ((rc = run_op(ctx, t, op)) < 0 || (rc = clt_context_finish(ctx)) < 0) goto done;
    times[i] = (now() - t0) * 1e3;
  }
  qsort(times, iters, sizeof *times, cmp_double);
  *ms = times[0];
done:
  free(times);
  return rc;
}

/* A tensor in a buffer of its own. */
static int tensor(clt_context *ctx, cl_mem *mems, int *nmem, int ndim, const int64_t *shape, clt_tensor *t) {
  size_t n = 4;
  for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
  int rc = clt_buffer_create(ctx, n, &mems[*nmem]);
  if (rc < 0) return rc;
  return clt_tensor_view(mems[(*nmem)++], 0, CLT_F32, ndim, shape, t);
}

static int bench_layer(clt_context *ctx, const layer *l, int iters) {
  int rc = 0;
  bufs t = {.l = l};
  cl_mem mems[10] = {0};
  int nmem = 0;
  float *h = NULL, *y_im2col = NULL, *y_direct = NULL;
  size_t nx = (size_t)l->N * l->Cin * l->H * l->W, ny = (size_t)l->N * l->Cout * l->H * l->W;
  size_t nw = (size_t)l->Cout * l->Cin * l->K * l->K;
  size_t ws = clt_nn_conv2d_workspace_bytes(l->N, l->Cin, l->Cout, l->K, l->K, l->H, l->W);
  size_t ws1 = clt_nn_conv2d_workspace_bytes(1, l->Cin, l->Cout, l->K, l->K, l->H, l->W);
  int64_t xs[4] = {l->N, l->Cin, l->H, l->W}, ys[4] = {l->N, l->Cout, l->H, l->W};
  int64_t wsh[4] = {l->Cout, l->Cin, l->K, l->K}, bs[1] = {l->Cout}, wss[1] = {(int64_t)(ws / 4)};
  int64_t ws1s[1] = {(int64_t)(ws1 / 4)};
  CHECK(tensor(ctx, mems, &nmem, 4, xs, &t.x));
  CHECK(tensor(ctx, mems, &nmem, 4, xs, &t.dx));
  CHECK(tensor(ctx, mems, &nmem, 4, ys, &t.y));
  CHECK(tensor(ctx, mems, &nmem, 4, ys, &t.dy));
  CHECK(tensor(ctx, mems, &nmem, 4, wsh, &t.w));
  CHECK(tensor(ctx, mems, &nmem, 4, wsh, &t.dw));
  CHECK(tensor(ctx, mems, &nmem, 1, bs, &t.b));
  CHECK(tensor(ctx, mems, &nmem, 1, bs, &t.db));
  CHECK(tensor(ctx, mems, &nmem, 1, wss, &t.ws));
  CHECK(tensor(ctx, mems, &nmem, 1, ws1s, &t.ws1));
  h = malloc((nx > ny ? nx : ny) * 4);
  ref_random(h, nx, 1);
  CHECK(clt_tensor_upload(ctx, &t.x, h, nx * 4));
  ref_random(h, ny, 2);
  CHECK(clt_tensor_upload(ctx, &t.dy, h, ny * 4));
  ref_random(h, nw, 3);
  CHECK(clt_tensor_upload(ctx, &t.w, h, nw * 4));
  ref_random(h, l->Cout, 4);
  CHECK(clt_tensor_upload(ctx, &t.b, h, l->Cout * 4));
  CHECK(clt_context_finish(ctx));
  double ms[NOPS];
  for (int op = 0; op < NOPS; op++) CHECK(time_op(ctx, &t, op, iters, &ms[op]));
  /* The direct forward ran last (of the forwards): compare its y with im2col's. */
  y_im2col = malloc(ny * 4), y_direct = malloc(ny * 4);
  CHECK(clt_tensor_download(ctx, &t.y, y_direct, ny * 4));
  CHECK(run_op(ctx, &t, OP_FORWARD));
  CHECK(clt_tensor_download(ctx, &t.y, y_im2col, ny * 4));
  double err_max = ref_max_rel_error(y_direct, y_im2col, ny);

  double fwd_flops = 2.0 * l->N * l->Cout * l->H * l->W * l->Cin * l->K * l->K;
  printf("  %-22s im2col forward %8.2f ms %7.1f GFLOP/s | backward %8.2f ms %7.1f GFLOP/s | fwd+bwd %8.2f ms\n",
         l->name, ms[OP_FORWARD], fwd_flops / ms[OP_FORWARD] / 1e6, ms[OP_BACKWARD],
         2 * fwd_flops / ms[OP_BACKWARD] / 1e6, ms[OP_FORWARD] + ms[OP_BACKWARD]);
  printf("  %-22s forward, 1-sample workspace %8.2f ms (x%.2f) | direct forward %8.2f ms: direct/im2col = %.2f "
         "(max difference %.1e)\n",
         "", ms[OP_FORWARD_1], ms[OP_FORWARD_1] / ms[OP_FORWARD], ms[OP_DIRECT], ms[OP_DIRECT] / ms[OP_FORWARD],
         err_max);
  printf("  %-22s backward without dx (a first layer) %8.2f ms\n", "", ms[OP_BACKWARD_NO_DX]);
done:
  for (int i = 0; i < nmem; i++) clt_buffer_release(mems[i]);
  free(h), free(y_im2col), free(y_direct);
  return rc;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 5;
  if (iters < 1) iters = 1;
  /* The Fashion-MNIST CNN of DESIGN.md: conv2d 32 k3 p1 on 1x28x28, then
   * (after a 2x2 max pool) conv2d 64 k3 p1 on 32x14x14, batch 64. */
  static const layer layers[] = {{"conv 1->32 28x28 k3", 64, 1, 28, 28, 32, 3, 1},
                                 {"conv 32->64 14x14 k3", 64, 32, 14, 14, 64, 3, 1}};
  clt_devices *all = NULL, *sel = NULL;
  int rc = clt_devices_discover(&all);
  if (rc < 0 || (rc = clt_devices_select(all, NULL, &sel)) < 0) {
    fprintf(stderr, "bench_nn: %s\n", clt_last_error());
    clt_devices_destroy(all);
    return 1;
  }
  printf("conv2d, batch 64, fastest of %d\n", iters);
  for (int d = 0; d < clt_devices_count(sel) && rc >= 0; d++) {
    clt_context *ctx = NULL;
    const clt_device_info *info = clt_devices_info(sel, d);
    printf("%s (%s)\n", info->name, info->platform_name);
    if ((rc = clt_context_create(sel, d, &ctx)) < 0) {
      fprintf(stderr, "bench_nn: %s\n", clt_last_error());
      break;
    }
    for (size_t i = 0; i < sizeof layers / sizeof layers[0] && rc >= 0; i++) rc = bench_layer(ctx, &layers[i], iters);
    clt_context_destroy(ctx);
  }
  clt_devices_destroy(sel);
  clt_devices_destroy(all);
  return rc < 0 ? 1 : 0;
}
