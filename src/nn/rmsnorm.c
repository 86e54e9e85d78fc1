/*
 * rmsnorm.c: RMS normalization over the last dimension (Llama's RMSNorm),
 * forward (saving each row's 1 / rms) and backward (cl/rmsnorm.cl). x, y,
 * dy and dx are f32, or f16 under mixed precision (all four alike); the
 * weight, its gradient and rstd are f32 either way.
 */
#include "nn/common.h"

#include <stdio.h>

/* Rows of x (..., D): M = numel / D. w (D); rstd (M). */
static int check_rms(const char *op, const clt_tensor *x, const clt_tensor *w, const char *wname,
                     const clt_tensor *rstd, int64_t *M, int64_t *D) {
  int rc;
  if ((rc = clt__nn_check_act(op, "x", x, 0, "(..., D)")) < 0) return rc;
  if ((rc = clt__nn_check(op, wname, w, CLT_F32, 1, "(D)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "rstd", rstd, CLT_F32, 0, "(M)")) < 0) return rc;
  *D = x->shape[x->ndim - 1];
  *M = clt_tensor_numel(x) / *D;
  clt__nn_named ts[] = {{"x", x}, {wname, w}, {"rstd", rstd}};
  if (w->shape[0] != *D)
    return clt__nn_shape_error(op, ts, 3, "%s must have x's last dimension, %lld", wname, (long long)*D);
  if (clt_tensor_numel(rstd) != *M)
    return clt__nn_shape_error(op, ts, 3, "rstd must have one element per row of x, %lld", (long long)*M);
  return CLT_OK;
}

/* The storage type, and rows read 8 wide where 8 divides D. */
static void rms_options(const clt_tensor *x, int64_t D, char *opt, size_t len) {
  snprintf(opt, len, "%s -DRN_VW=%d", clt__nn_act_opt(x), D % 8 == 0 ? 8 : 1);
}

int clt_nn_rmsnorm_forward(clt_context *ctx, float eps, const clt_tensor *x, const clt_tensor *w, const clt_tensor *y,
                           const clt_tensor *rstd) {
  static const char op[] = "rmsnorm forward";
  int64_t M, D;
  int rc = check_rms(op, x, w, "w", rstd, &M, &D);
  if (rc < 0) return rc;
  if ((rc = clt__nn_check_like(op, "y", y, "x", x)) < 0) return rc;
  if (!(eps > 0.0f)) return clt__error(CLT_EINVAL, "%s: eps %g must be positive", op, (double)eps);
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), woff = clt__nn_off(w), yoff = clt__nn_off(y), roff = clt__nn_off(rstd);
  cl_uint d = (cl_uint)D;
  char opt[48];
  rms_options(x, D, opt, sizeof opt);
  CLT_TRY(clt_context_kernel(ctx, "rmsnorm", "rmsnorm_forward", opt, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, D, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(w->buf), NN_VAL(woff), NN_VAL(y->buf), NN_VAL(yoff),
                      NN_VAL(rstd->buf), NN_VAL(roff), NN_VAL(d), NN_VAL(eps), NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)M, wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_rmsnorm_backward(clt_context *ctx, const clt_tensor *x, const clt_tensor *w, const clt_tensor *rstd,
                            const clt_tensor *dy, const clt_tensor *dx, const clt_tensor *dw) {
  static const char op[] = "rmsnorm backward";
  int64_t M, D;
  int rc = check_rms(op, x, w, "w", rstd, &M, &D);
  if (rc < 0) return rc;
  if ((rc = clt__nn_check_like(op, "dy", dy, "x", x)) < 0 || (rc = clt__nn_check_like(op, "dx", dx, "x", x)) < 0 ||
      (rc = clt__nn_check_like(op, "dw", dw, "w", w)) < 0)
    return rc;
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), woff = clt__nn_off(w), roff = clt__nn_off(rstd);
  cl_ulong dyoff = clt__nn_off(dy), dxoff = clt__nn_off(dx), dwoff = clt__nn_off(dw);
  cl_uint m = (cl_uint)M, d = (cl_uint)D;
  char opt[48];
  rms_options(x, D, opt, sizeof opt);
  /* dw first: the input-gradient kernel reads each dy element before
   * writing the same dx element, so dx may then be dy (in place). */
  CLT_TRY(clt_context_kernel(ctx, "rmsnorm", "rmsnorm_backward_weight", opt, &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(rstd->buf), NN_VAL(roff), NN_VAL(dy->buf),
                      NN_VAL(dyoff), NN_VAL(dw->buf), NN_VAL(dwoff), NN_VAL(m), NN_VAL(d)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)(D % 8 == 0 ? D / 8 : D), 1, 1));

  CLT_TRY(clt_context_kernel(ctx, "rmsnorm", "rmsnorm_backward_input", opt, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, D, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(w->buf), NN_VAL(woff), NN_VAL(rstd->buf), NN_VAL(roff),
                      NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(dx->buf), NN_VAL(dxoff), NN_VAL(d),
                      NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)M, wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
