/*
 * layernorm.c: layer normalization over the last dimension, forward (saving
 * each row's mean and 1/std) and backward (cl/layernorm.cl).
 */
#include "nn/common.h"

/* Rows of x (..., D): M = numel / D. gamma and beta (D); mean, rstd (M). */
static int check_ln(const char *op, const clt_tensor *x, const clt_tensor *gamma, const clt_tensor *beta,
                    const char *beta_name, const clt_tensor *mean, const clt_tensor *rstd, int64_t *M, int64_t *D) {
  int rc;
  if ((rc = clt__nn_check(op, "x", x, CLT_F32, 0, "(..., D)")) < 0) return rc;
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
  CLT_TRY(clt_context_kernel(ctx, "layernorm", "layernorm_forward", NULL, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, D, 256);
  NN_ARG(k, 0, x->buf);
  NN_ARG(k, 1, xoff);
  NN_ARG(k, 2, gamma->buf);
  NN_ARG(k, 3, goff);
  NN_ARG(k, 4, beta->buf);
  NN_ARG(k, 5, boff);
  NN_ARG(k, 6, y->buf);
  NN_ARG(k, 7, yoff);
  NN_ARG(k, 8, mean->buf);
  NN_ARG(k, 9, moff);
  NN_ARG(k, 10, rstd->buf);
  NN_ARG(k, 11, roff);
  NN_ARG(k, 12, d);
  NN_ARG(k, 13, eps);
  CLT_CL_TRY(clSetKernelArg(k, 14, wgs * sizeof(float), NULL));
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
  CLT_TRY(clt_context_kernel(ctx, "layernorm", "layernorm_backward_params", NULL, &k));
  NN_ARG(k, 0, x->buf);
  NN_ARG(k, 1, xoff);
  NN_ARG(k, 2, mean->buf);
  NN_ARG(k, 3, moff);
  NN_ARG(k, 4, rstd->buf);
  NN_ARG(k, 5, roff);
  NN_ARG(k, 6, dy->buf);
  NN_ARG(k, 7, dyoff);
  NN_ARG(k, 8, dgamma->buf);
  NN_ARG(k, 9, dgoff);
  NN_ARG(k, 10, dbeta->buf);
  NN_ARG(k, 11, dboff);
  NN_ARG(k, 12, m);
  NN_ARG(k, 13, d);
  CLT_TRY(clt_launch_1d(ctx, k, (size_t)D, 0));

  CLT_TRY(clt_context_kernel(ctx, "layernorm", "layernorm_backward_input", NULL, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, D, 256);
  NN_ARG(k, 0, x->buf);
  NN_ARG(k, 1, xoff);
  NN_ARG(k, 2, gamma->buf);
  NN_ARG(k, 3, goff);
  NN_ARG(k, 4, mean->buf);
  NN_ARG(k, 5, moff);
  NN_ARG(k, 6, rstd->buf);
  NN_ARG(k, 7, roff);
  NN_ARG(k, 8, dy->buf);
  NN_ARG(k, 9, dyoff);
  NN_ARG(k, 10, dx->buf);
  NN_ARG(k, 11, dxoff);
  NN_ARG(k, 12, d);
  CLT_CL_TRY(clSetKernelArg(k, 13, wgs * sizeof(float), NULL));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)M, wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
