/*
 * bias.c: per-channel bias for tensors seen as (N, C, P), shared by linear
 * (P = 1) and conv2d (P = OH*OW): broadcast add and gradient (cl/bias.cl).
 * y and dy are activations (f32, or f16 under mixed precision); the bias
 * and its gradient are f32. The callers check the shapes; these check the
 * dtypes, which pick the kernel variant.
 */
#include "nn/common.h"

#include <stdio.h>

/* y[n, c, p] += b[c] over y seen as (N, C, P). */
int clt__nn_bias_add(clt_context *ctx, const clt_tensor *y, const clt_tensor *b, int64_t C, int64_t P) {
  int rc = CLT_OK;
  cl_kernel k;
  CLT_TRY(clt__nn_check_act("bias add", "y", y, 0, "(N, C, ...)"));
  CLT_TRY(clt__nn_check("bias add", "b", b, CLT_F32, 1, "(C)"));
  cl_ulong yoff = clt__nn_off(y), boff = clt__nn_off(b);
  if (C < 1 || P < 1) return CLT_OK;
  size_t N = (size_t)(clt_tensor_numel(y) / (C * P));
  CLT_TRY(clt_context_kernel(ctx, "bias", P == 1 ? "bias_add_rows" : "bias_add", clt__nn_act_opt(y), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(y->buf), NN_VAL(yoff), NN_VAL(b->buf), NN_VAL(boff)));
  if (P == 1)
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)C, N, 1));
  else
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)P, (size_t)C, N));
  return CLT_OK;
fail:
  return rc;
}

/* db[c] += sum over n, p of dy[n, c, p], dy seen as (N, C, P). */
int clt__nn_bias_grad(clt_context *ctx, const clt_tensor *dy, const clt_tensor *db, int64_t N, int64_t C,
                      int64_t P) {
  int rc = CLT_OK;
  cl_kernel k;
  CLT_TRY(clt__nn_check_act("bias gradient", "dy", dy, 0, "(N, C, ...)"));
  CLT_TRY(clt__nn_check("bias gradient", "db", db, CLT_F32, 1, "(C)"));
  cl_ulong dyoff = clt__nn_off(dy), dboff = clt__nn_off(db);
  cl_uint n = (cl_uint)N, c = (cl_uint)C, p = (cl_uint)P;
  if (P == 1) {
    char opt[48];
    int vw = C % 8 == 0 ? 8 : 1;
    snprintf(opt, sizeof opt, "%s -DROWS_VW=%d", clt__nn_act_opt(dy), vw);
    CLT_TRY(clt_context_kernel(ctx, "bias", "bias_grad_rows", opt, &k));
    CLT_TRY(NN_SET_ARGS(k, NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(db->buf), NN_VAL(dboff), NN_VAL(n)));
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)(C / vw), 1, 1));
    return CLT_OK;
  }
  CLT_TRY(clt_context_kernel(ctx, "bias", "bias_grad", clt__nn_act_opt(dy), &k));
  /* Rows of at least 64 are walked row by row (see cl/bias.cl) by a group
   * no wider than a row; shorter ones as one flat run. */
  size_t wgs = clt__nn_row_wgs(ctx, k, N * P, 256);
  if (P >= 64)
    while (wgs > (size_t)P) wgs /= 2;
  NN_ARG(k, 0, dy->buf);
  NN_ARG(k, 1, dyoff);
  NN_ARG(k, 2, db->buf);
  NN_ARG(k, 3, dboff);
  NN_ARG(k, 4, n);
  NN_ARG(k, 5, c);
  NN_ARG(k, 6, p);
  CLT_CL_TRY(clSetKernelArg(k, 7, wgs * sizeof(float), NULL));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)C, wgs));
  return CLT_OK;
fail:
  return rc;
}
