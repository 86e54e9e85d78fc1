/*
 * layernorm.c: layer normalization over the last dimension, forward (saving
 * each row's mean and 1/std) and backward (cl/layernorm.cl). x, y, dy and dx
 * are f32, or f16 under mixed precision (all four alike); gamma, beta, their
 * gradients, mean and rstd are f32 either way.
 */
#include "nn/common.h"

#include <stdio.h>

/* Rows of x (..., D): M = numel / D. gamma and beta (D); mean, rstd (M). */
static int check_ln(const char *op, const clt_tensor *x, const clt_tensor *gamma, const clt_tensor *beta,
                    const char *beta_name, const clt_tensor *mean, const clt_tensor *rstd, int64_t *M, int64_t *D) {
  int rc;
  if ((rc = clt__nn_check_act(op, "x", x, 0, "(..., D)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "gamma", gamma, CLT_F32, 1, "(D)")) < 0) return rc;
  if ((rc = clt__nn_check(op, beta_name, beta, CLT_F32, 1, "(D)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "mean", mean, CLT_F32, 0, "(M)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "rstd", rstd, CLT_F32, 0, "(M)")) < 0) return rc;
  *D = x->shape[x->ndim - 1];
  *M = clt_tensor_numel(x) / *D;
  clt__nn_named ts[] = {{"x", x}, {"gamma", gamma}, {beta_name, beta}, {"mean", mean}, {"rstd", rstd}};
  if (gamma->shape[0] != *D || beta->shape[0] != *D)
    return clt__nn_shape_error(op, ts, 5, "gamma and %s must have x's last dimension, %lld", beta_name, (long long)*D);
  if (clt_tensor_numel(mean) != *M || clt_tensor_numel(rstd) != *M)
    return clt__nn_shape_error(op, ts, 5, "mean and rstd must have one element per row of x, %lld", (long long)*M);
  return CLT_OK;
}

/* The row kernels' build options: the storage type, and rows read 8 wide
 * where 8 divides D (cl/layernorm.cl). */
static int ln_options(const clt_tensor *x, int64_t D, char *opt, size_t len) {
  snprintf(opt, len, "%s -DLN_VW=%d", clt__nn_act_opt(x), D % 8 == 0 ? 8 : 1);
  return CLT_OK;
}

int clt_nn_layernorm_forward(clt_context *ctx, float eps, const clt_tensor *x, const clt_tensor *gamma,
                             const clt_tensor *beta, const clt_tensor *y, const clt_tensor *mean,
                             const clt_tensor *rstd) {
  static const char op[] = "layernorm forward";
  int64_t M, D;
  int rc = check_ln(op, x, gamma, beta, "beta", mean, rstd, &M, &D);
  if (rc < 0) return rc;
  if ((rc = clt__nn_check_like(op, "y", y, "x", x)) < 0) return rc;
  if (!(eps > 0.0f)) return clt__error(CLT_EINVAL, "%s: eps %g must be positive", op, (double)eps);
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), goff = clt__nn_off(gamma), boff = clt__nn_off(beta), yoff = clt__nn_off(y);
  cl_ulong moff = clt__nn_off(mean), roff = clt__nn_off(rstd);
  cl_uint d = (cl_uint)D;
  char opt[48];
  CLT_TRY(ln_options(x, D, opt, sizeof opt));
  CLT_TRY(clt_context_kernel(ctx, "layernorm", "layernorm_forward", opt, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, D, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(gamma->buf), NN_VAL(goff), NN_VAL(beta->buf),
                      NN_VAL(boff), NN_VAL(y->buf), NN_VAL(yoff), NN_VAL(mean->buf), NN_VAL(moff), NN_VAL(rstd->buf),
                      NN_VAL(roff), NN_VAL(d), NN_VAL(eps), NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)M, wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_layernorm_backward(clt_context *ctx, const clt_tensor *x, const clt_tensor *gamma, const clt_tensor *mean,
                              const clt_tensor *rstd, const clt_tensor *dy, const clt_tensor *dx,
                              const clt_tensor *dgamma, const clt_tensor *dbeta) {
  static const char op[] = "layernorm backward";
  int64_t M, D;
  int rc = check_ln(op, x, gamma, dbeta, "dbeta", mean, rstd, &M, &D);
  if (rc < 0) return rc;
  if ((rc = clt__nn_check_like(op, "dy", dy, "x", x)) < 0 || (rc = clt__nn_check_like(op, "dx", dx, "x", x)) < 0 ||
      (rc = clt__nn_check_like(op, "dgamma", dgamma, "gamma", gamma)) < 0)
    return rc;
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), goff = clt__nn_off(gamma), moff = clt__nn_off(mean), roff = clt__nn_off(rstd);
  cl_ulong dyoff = clt__nn_off(dy), dxoff = clt__nn_off(dx), dgoff = clt__nn_off(dgamma), dboff = clt__nn_off(dbeta);
  cl_uint m = (cl_uint)M, d = (cl_uint)D;

  /* dgamma, dbeta first: the input-gradient kernel reads each dy element
   * before writing the same dx element, so dx may then be dy (in place). */
  char opt[48];
  CLT_TRY(ln_options(x, D, opt, sizeof opt));
  CLT_TRY(clt_context_kernel(ctx, "layernorm", "layernorm_backward_params", opt, &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(mean->buf), NN_VAL(moff), NN_VAL(rstd->buf), NN_VAL(roff),
                      NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(dgamma->buf), NN_VAL(dgoff), NN_VAL(dbeta->buf),
                      NN_VAL(dboff), NN_VAL(m), NN_VAL(d)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)(D % 8 == 0 ? D / 8 : D), 1, 1));

  CLT_TRY(clt_context_kernel(ctx, "layernorm", "layernorm_backward_input", opt, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, D, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(gamma->buf), NN_VAL(goff), NN_VAL(mean->buf),
                      NN_VAL(moff), NN_VAL(rstd->buf), NN_VAL(roff), NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(dx->buf),
                      NN_VAL(dxoff), NN_VAL(d), NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)M, wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
