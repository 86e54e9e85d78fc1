/*
 * pool_nd.c: max pooling (argmax kept for the backward) and average
 * pooling over 1-D, 2-D and 3-D windows without padding, (N, C, spatial...)
 * forward and backward (cl/pool_nd.cl); the maxpool1d, avgpool1d,
 * maxpool3d and avgpool3d layers. The 2-D layers keep pool.c's tuned
 * kernels. Activations f32, or f16 under mixed precision.
 */
#include "nn/common.h"

#include <stdio.h>

typedef struct pnd_geom {
  int64_t NC;
  int64_t in[3], out[3]; /* (D, H, W); leading axes 1 below 3-D */
  int k[3], s[3];
} pnd_geom;

static const char *const pnd_layouts[4] = {"", "(N, C, L)", "(N, C, H, W)", "(N, C, D, H, W)"};

/* x_name (N, C, S...) is the input side (x or dx), y_name (N, C, O...) the
 * output side (y or dy); argmax, when not NULL, is i32 shaped as y. */
static int check_pnd(const char *op, const clt_nn_poolnd_cfg *cfg, const char *x_name, const clt_tensor *x,
                     const clt_tensor *argmax, const char *y_name, const clt_tensor *y, pnd_geom *g) {
  int rc;
  if (!cfg) return clt__error(CLT_EINVAL, "%s: no configuration (kernel, stride) given", op);
  int nd = cfg->dims;
  if (nd < 1 || nd > CLT_NN_MAX_SPATIAL)
    return clt__error(CLT_EINVAL, "%s: %d spatial dimensions (1, 2 or 3 are supported)", op, nd);
  for (int a = 0; a < nd; a++)
    if (cfg->kernel[a] < 1 || cfg->stride[a] < 1)
      return clt__error(CLT_EINVAL, "%s: axis %d: kernel %d and stride %d must be at least 1", op, a, cfg->kernel[a],
                        cfg->stride[a]);
  if ((rc = clt__nn_check_act(op, x_name, x, 2 + nd, pnd_layouts[nd])) < 0) return rc;
  if (argmax && (rc = clt__nn_check(op, "argmax", argmax, CLT_I32, 2 + nd, pnd_layouts[nd])) < 0) return rc;
  if ((rc = clt__nn_check_act(op, y_name, y, 2 + nd, pnd_layouts[nd])) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, x_name, x, y_name, y)) < 0) return rc;
  clt__nn_named ts[] = {{x_name, x}, {"argmax", argmax}, {y_name, y}};
  g->NC = x->shape[0] * x->shape[1];
  for (int a = 0; a < 3; a++) {
    int i = a - (3 - nd);
    g->in[a] = i < 0 ? 1 : x->shape[2 + i];
    g->k[a] = i < 0 ? 1 : cfg->kernel[i];
    g->s[a] = i < 0 ? 1 : cfg->stride[i];
    g->out[a] = clt_nn_out_size(g->in[a], g->k[a], g->s[a], 0);
    if (g->out[a] < 1)
      return clt__nn_shape_error(op, ts, 3, "axis %d: a window of %d is larger than the input's %lld", i, g->k[a],
                                 (long long)g->in[a]);
  }
  const clt_tensor *outs[2] = {argmax, y};
  for (int t = 0; t < 2; t++) {
    if (!outs[t]) continue;
    int ok = outs[t]->shape[0] == x->shape[0] && outs[t]->shape[1] == x->shape[1];
    for (int i = 0; i < nd; i++) ok = ok && outs[t]->shape[2 + i] == g->out[3 - nd + i];
    if (!ok)
      return clt__nn_shape_error(op, ts, 3, "%s must be (%lld, %lld, ...) with %lld x %lld x %lld outputs (D, H, W)",
                                 t ? y_name : "argmax", (long long)x->shape[0], (long long)x->shape[1],
                                 (long long)g->out[0], (long long)g->out[1], (long long)g->out[2]);
  }
  return CLT_OK;
}

/* Windows that cannot overlap (stride >= window on every axis): the
 * backward reads one window per input, no loop (the _disjoint kernels). */
static int disjoint(const pnd_geom *g) {
  return g->s[0] >= g->k[0] && g->s[1] >= g->k[1] && g->s[2] >= g->k[2];
}

/* Windows that tile the input exactly (stride = window, every axis a whole
 * number of them): the max backward writes each window's inputs from the
 * window (maxpoolnd_backward_tiles), no input left out. */
static int tiles(const pnd_geom *g) {
  for (int a = 0; a < 3; a++)
    if (g->s[a] != g->k[a] || g->in[a] != g->out[a] * g->s[a]) return 0;
  return 1;
}

/* Run a pool_nd.cl kernel: the (buffer, offset) pairs of ts, then the
 * geometry, over the elements of the tensor it writes (the input side
 * when backward). act picks the storage variant. */
static int run_pnd(clt_context *ctx, const char *op, const char *kernel, const clt_tensor *const *ts, int nts,
                   const clt_tensor *act, const pnd_geom *g, int backward) {
  int rc = CLT_OK;
  cl_kernel k;
  char opts[200]; /* the window and strides as constants: loops unroll, divisions shift (cl/pool_nd.cl) */
  snprintf(opts, sizeof opts, "-DPND_KD=%d -DPND_KH=%d -DPND_KW=%d -DPND_SD=%d -DPND_SH=%d -DPND_SW=%d %s", g->k[0],
           g->k[1], g->k[2], g->s[0], g->s[1], g->s[2], clt__nn_act_opt(act));
  CLT_TRY(clt_context_kernel(ctx, "pool_nd", kernel, opts, &k));
  for (int i = 0; i < nts; i++) {
    cl_ulong off = clt__nn_off(ts[i]);
    clt__nn_arg a[2] = {NN_VAL(ts[i]->buf), NN_VAL(off)};
    CLT_TRY(clt__nn_args(k, 2 * i, a, 2));
  }
  cl_uint u[6];
  cl_int s[6];
  for (int i = 0; i < 3; i++) {
    u[i] = (cl_uint)g->in[i], u[3 + i] = (cl_uint)g->out[i];
    s[i] = g->k[i], s[3 + i] = g->s[i];
  }
  CLT_TRY(clt__nn_args_array(k, 2 * nts, u, sizeof u[0], 6));
  CLT_TRY(clt__nn_args_array(k, 2 * nts + 6, s, sizeof s[0], 6));
  const int64_t *e = backward ? g->in : g->out;
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)e[2], (size_t)e[1], (size_t)(g->NC * e[0])));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_maxpoolnd_forward(clt_context *ctx, const clt_nn_poolnd_cfg *cfg, const clt_tensor *x, const clt_tensor *y,
                             const clt_tensor *argmax) {
  static const char op[] = "maxpoolnd forward";
  pnd_geom g;
  int rc;
  if (!argmax) return clt__error(CLT_EINVAL, "%s: argmax is NULL", op);
  if ((rc = check_pnd(op, cfg, "x", x, argmax, "y", y, &g)) < 0) return rc;
  const clt_tensor *ts[] = {x, y, argmax};
  return run_pnd(ctx, op, "maxpoolnd_forward", ts, 3, x, &g, 0);
}

int clt_nn_maxpoolnd_backward(clt_context *ctx, const clt_nn_poolnd_cfg *cfg, const clt_tensor *argmax,
                              const clt_tensor *dy, const clt_tensor *dx) {
  static const char op[] = "maxpoolnd backward";
  pnd_geom g;
  int rc;
  if (!argmax) return clt__error(CLT_EINVAL, "%s: argmax is NULL", op);
  if ((rc = check_pnd(op, cfg, "dx", dx, argmax, "dy", dy, &g)) < 0) return rc;
  const clt_tensor *ts[] = {argmax, dy, dx};
  if (tiles(&g)) return run_pnd(ctx, op, "maxpoolnd_backward_tiles", ts, 3, dy, &g, 0); /* over the windows */
  return run_pnd(ctx, op, disjoint(&g) ? "maxpoolnd_backward_disjoint" : "maxpoolnd_backward", ts, 3, dy, &g, 1);
}

int clt_nn_avgpoolnd_forward(clt_context *ctx, const clt_nn_poolnd_cfg *cfg, const clt_tensor *x, const clt_tensor *y) {
  static const char op[] = "avgpoolnd forward";
  pnd_geom g;
  int rc = check_pnd(op, cfg, "x", x, NULL, "y", y, &g);
  if (rc < 0) return rc;
  const clt_tensor *ts[] = {x, y};
  return run_pnd(ctx, op, "avgpoolnd_forward", ts, 2, x, &g, 0);
}

int clt_nn_avgpoolnd_backward(clt_context *ctx, const clt_nn_poolnd_cfg *cfg, const clt_tensor *dy,
                              const clt_tensor *dx) {
  static const char op[] = "avgpoolnd backward";
  pnd_geom g;
  int rc = check_pnd(op, cfg, "dx", dx, NULL, "dy", dy, &g);
  if (rc < 0) return rc;
  const clt_tensor *ts[] = {dy, dx};
  return run_pnd(ctx, op, disjoint(&g) ? "avgpoolnd_backward_disjoint" : "avgpoolnd_backward", ts, 2, dy, &g, 1);
}
