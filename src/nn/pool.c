/*
 * pool.c: 2-D max pooling (argmax saved for backward), average pooling and
 * global average pooling, NCHW, forward and backward (cl/pool.cl). x, y, dy
 * and dx are f32, or f16 under mixed precision (all of one call alike);
 * argmax is i32 either way.
 */
#include "nn/common.h"

#include <stdio.h>

typedef struct pool_geom {
  int64_t N, C, H, W, OH, OW;
} pool_geom;

/* x_name (N, C, H, W) is the input side (x or dx) and y_name (N, C, OH, OW)
 * the output side (y or dy), activations of one dtype; with_argmax: max
 * pooling's argmax (N, C, OH, OW) i32 is a second output-side tensor
 * (otherwise it is NULL). */
static int check_pool(const char *op, const clt_nn_pool2d_cfg *cfg, const char *x_name, const clt_tensor *x,
                      int with_argmax, const clt_tensor *argmax, const char *y_name, const clt_tensor *y,
                      pool_geom *g) {
  int rc;
  if (!cfg) return clt__error(CLT_EINVAL, "%s: no configuration (kernel, stride, padding) given", op);
  if (cfg->kernel_h < 1 || cfg->kernel_w < 1 || cfg->stride_h < 1 || cfg->stride_w < 1 || cfg->pad_h < 0 ||
      cfg->pad_w < 0 || cfg->pad_h > cfg->kernel_h / 2 || cfg->pad_w > cfg->kernel_w / 2)
    return clt__error(CLT_EINVAL,
                      "%s: kernel %dx%d, stride %dx%d, padding %dx%d: kernel and stride must be at least 1 and "
                      "padding between 0 and half the kernel",
                      op, cfg->kernel_h, cfg->kernel_w, cfg->stride_h, cfg->stride_w, cfg->pad_h, cfg->pad_w);
  if ((rc = clt__nn_check_act(op, x_name, x, 4, "(N, C, H, W)")) < 0) return rc;
  if (with_argmax && (rc = clt__nn_check(op, "argmax", argmax, CLT_I32, 4, "(N, C, OH, OW)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, y_name, y, 4, "(N, C, OH, OW)")) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, x_name, x, y_name, y)) < 0) return rc;
  g->N = x->shape[0], g->C = x->shape[1], g->H = x->shape[2], g->W = x->shape[3];
  g->OH = clt_nn_out_size(g->H, cfg->kernel_h, cfg->stride_h, cfg->pad_h);
  g->OW = clt_nn_out_size(g->W, cfg->kernel_w, cfg->stride_w, cfg->pad_w);
  clt__nn_named ts[] = {{x_name, x}, {"argmax", argmax}, {y_name, y}};
  if (g->OH < 1 || g->OW < 1)
    return clt__nn_shape_error(op, ts, 3, "a %dx%d window does not fit a %lldx%lld input with padding %dx%d",
                               cfg->kernel_h, cfg->kernel_w, (long long)g->H, (long long)g->W, cfg->pad_h, cfg->pad_w);
  const clt_tensor *outs[2] = {argmax, y};
  for (int i = 0; i < 2; i++) {
    const clt_tensor *t = outs[i];
    if (t && (t->shape[0] != g->N || t->shape[1] != g->C || t->shape[2] != g->OH || t->shape[3] != g->OW))
      return clt__nn_shape_error(
          op, ts, 3, "%s must be (%lld, %lld, %lld, %lld) for a %dx%d window, stride %dx%d, padding %dx%d",
          i ? y_name : "argmax", (long long)g->N, (long long)g->C, (long long)g->OH, (long long)g->OW, cfg->kernel_h,
          cfg->kernel_w, cfg->stride_h, cfg->stride_w, cfg->pad_h, cfg->pad_w);
  }
  return CLT_OK;
}

/* Whether max pooling runs a row of outputs per item (the _rows kernels):
 * on PoCL, whose work-items run as loops, for planes narrow enough to
 * unroll. */
#define POOL_ROWS_MAX_W 128
static int by_rows(const clt_context *ctx, const pool_geom *g) {
  return clt__items_run_as_loops(ctx) && g->W <= POOL_ROWS_MAX_W && g->OW <= POOL_ROWS_MAX_W / 2;
}

/* Set the POOL_ARGS of cl/pool.cl from argument index `first` on. */
static int pool_args(cl_kernel k, int first, const clt_nn_pool2d_cfg *cfg, const pool_geom *g) {
  int rc = CLT_OK;
  cl_uint u[5] = {(cl_uint)(g->N * g->C), (cl_uint)g->H, (cl_uint)g->W, (cl_uint)g->OH, (cl_uint)g->OW};
  cl_int s[6] = {cfg->kernel_h, cfg->kernel_w, cfg->stride_h, cfg->stride_w, cfg->pad_h, cfg->pad_w};
  CLT_TRY(clt__nn_args_array(k, first, u, sizeof u[0], 5));
  CLT_TRY(clt__nn_args_array(k, first + 5, s, sizeof s[0], 6));
fail:
  return rc;
}

/* Run a pool.cl kernel whose first arguments are (buffer, offset) pairs of
 * the given tensors, then POOL_ARGS, over the range (w, h, N*C): the
 * columns and rows of the tensor it writes; w = 0 for a _rows kernel, over
 * (h, N*C). act is one of the activations (its dtype picks the variant). */
static int run_pool(clt_context *ctx, const char *op, const char *kernel, const clt_tensor *const *ts, int nts,
                    const clt_tensor *act, const clt_nn_pool2d_cfg *cfg, const pool_geom *g, int64_t w, int64_t h) {
  int rc = CLT_OK;
  cl_kernel k;
  char opts[192]; /* the window size as a constant (see cl/pool.cl), and the storage type */
  int n = snprintf(opts, sizeof opts, "-DPOOL_KH=%d -DPOOL_KW=%d%s %s", cfg->kernel_h, cfg->kernel_w,
                   cfg->pad_h == 0 && cfg->pad_w == 0 ? " -DPOOL_NOPAD" : "", clt__nn_act_opt(act));
  if (w == 0) /* a _rows kernel: the columns' geometry too, and a row of outputs an item */
    snprintf(opts + n, sizeof opts - (size_t)n, " -DPOOL_ROWS -DPOOL_W=%lld -DPOOL_OW=%lld -DPOOL_SW=%d -DPOOL_PW=%d",
             (long long)g->W, (long long)g->OW, cfg->stride_w, cfg->pad_w);
  CLT_TRY(clt_context_kernel(ctx, "pool", kernel, opts, &k));
  for (int i = 0; i < nts; i++) {
    cl_ulong off = clt__nn_off(ts[i]);
    clt__nn_arg a[2] = {NN_VAL(ts[i]->buf), NN_VAL(off)};
    CLT_TRY(clt__nn_args(k, 2 * i, a, 2));
  }
  CLT_TRY(pool_args(k, 2 * nts, cfg, g));
  if (w == 0) CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)h, (size_t)(g->N * g->C), 1));
  else CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)w, (size_t)h, (size_t)(g->N * g->C)));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_maxpool2d_forward(clt_context *ctx, const clt_nn_pool2d_cfg *cfg, const clt_tensor *x, const clt_tensor *y,
                             const clt_tensor *argmax) {
  static const char op[] = "maxpool2d forward";
  pool_geom g;
  int rc = check_pool(op, cfg, "x", x, 1, argmax, "y", y, &g);
  if (rc < 0) return rc;
  const clt_tensor *ts[] = {x, y, argmax};
  if (by_rows(ctx, &g)) return run_pool(ctx, op, "maxpool_forward_rows", ts, 3, x, cfg, &g, 0, g.OH);
  return run_pool(ctx, op, "maxpool_forward", ts, 3, x, cfg, &g, g.OW, g.OH);
}

int clt_nn_maxpool2d_backward(clt_context *ctx, const clt_nn_pool2d_cfg *cfg, const clt_tensor *argmax,
                              const clt_tensor *dy, const clt_tensor *dx) {
  static const char op[] = "maxpool2d backward";
  pool_geom g;
  int rc = check_pool(op, cfg, "dx", dx, 1, argmax, "dy", dy, &g);
  if (rc < 0) return rc;
  const clt_tensor *ts[] = {argmax, dy, dx};
  /* Windows that cannot overlap: one item per window writes its band. */
  if (cfg->stride_h >= cfg->kernel_h && cfg->stride_w >= cfg->kernel_w)
    return by_rows(ctx, &g) ? run_pool(ctx, op, "maxpool_backward_disjoint_rows", ts, 3, dy, cfg, &g, 0, g.OH)
                            : run_pool(ctx, op, "maxpool_backward_disjoint", ts, 3, dy, cfg, &g, g.OW, g.OH);
  return run_pool(ctx, op, "maxpool_backward", ts, 3, dy, cfg, &g, g.W, g.H);
}

int clt_nn_avgpool2d_forward(clt_context *ctx, const clt_nn_pool2d_cfg *cfg, const clt_tensor *x, const clt_tensor *y) {
  static const char op[] = "avgpool2d forward";
  pool_geom g;
  int rc = check_pool(op, cfg, "x", x, 0, NULL, "y", y, &g);
  if (rc < 0) return rc;
  const clt_tensor *ts[] = {x, y};
  return run_pool(ctx, op, "avgpool_forward", ts, 2, x, cfg, &g, g.OW, g.OH);
}

int clt_nn_avgpool2d_backward(clt_context *ctx, const clt_nn_pool2d_cfg *cfg, const clt_tensor *dy,
                              const clt_tensor *dx) {
  static const char op[] = "avgpool2d backward";
  pool_geom g;
  int rc = check_pool(op, cfg, "dx", dx, 0, NULL, "dy", dy, &g);
  if (rc < 0) return rc;
  const clt_tensor *ts[] = {dy, dx};
  return run_pool(ctx, op, "avgpool_backward", ts, 2, dy, cfg, &g, g.W, g.H);
}

/* x_name (N, C, H, W) and y_name (N, C) or (N, C, 1, 1). */
static int check_global(const char *op, const char *x_name, const clt_tensor *x, const char *y_name,
                        const clt_tensor *y) {
  int rc;
  if ((rc = clt__nn_check_act(op, x_name, x, 4, "(N, C, H, W)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, y_name, y, 0, "(N, C) or (N, C, 1, 1)")) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, x_name, x, y_name, y)) < 0) return rc;
  int ok = y->shape[0] == x->shape[0] && y->shape[1] == x->shape[1] &&
           (y->ndim == 2 || (y->ndim == 4 && y->shape[2] == 1 && y->shape[3] == 1));
  if (!ok) {
    clt__nn_named ts[] = {{x_name, x}, {y_name, y}};
    return clt__nn_shape_error(op, ts, 2, "%s must be (%lld, %lld) or (%lld, %lld, 1, 1)", y_name,
                               (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[0],
                               (long long)x->shape[1]);
  }
  return CLT_OK;
}

static int run_global(clt_context *ctx, const char *op, const char *kernel, const clt_tensor *in, const clt_tensor *out,
                      const clt_tensor *x, size_t n) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong ioff = clt__nn_off(in), ooff = clt__nn_off(out);
  cl_uint nc = (cl_uint)(x->shape[0] * x->shape[1]), hw = (cl_uint)(x->shape[2] * x->shape[3]);
  CLT_TRY(clt_context_kernel(ctx, "pool", kernel, clt__nn_act_opt(x), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(in->buf), NN_VAL(ioff), NN_VAL(out->buf), NN_VAL(ooff), NN_VAL(nc), NN_VAL(hw)));
  CLT_TRY(clt_launch_1d(ctx, k, n, 0));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_global_avgpool_forward(clt_context *ctx, const clt_tensor *x, const clt_tensor *y) {
  static const char op[] = "global_avgpool forward";
  int rc = check_global(op, "x", x, "y", y);
  if (rc < 0) return rc;
  return run_global(ctx, op, "global_avgpool_forward", x, y, x, (size_t)(x->shape[0] * x->shape[1]));
}

int clt_nn_global_avgpool_backward(clt_context *ctx, const clt_tensor *dy, const clt_tensor *dx) {
  static const char op[] = "global_avgpool backward";
  int rc = check_global(op, "dx", dx, "dy", dy);
  if (rc < 0) return rc;
  return run_global(ctx, op, "global_avgpool_backward", dy, dx, dx, (size_t)clt_tensor_numel(dx));
}
