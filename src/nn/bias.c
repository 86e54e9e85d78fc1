/*
 * bias.c: per-channel bias for tensors seen as (N, C, P), shared by linear
 * (P = 1) and conv2d (P = OH*OW): broadcast add and gradient (cl/bias.cl).
 */
#include "nn/common.h"

/* y[n, c, p] += b[c] over y seen as (N, C, P). */
int clt__nn_bias_add(clt_context *ctx, const clt_tensor *y, const clt_tensor *b, int64_t C, int64_t P) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong yoff = clt__nn_off(y), boff = clt__nn_off(b);
  cl_uint c = (cl_uint)C, p = (cl_uint)P, total = (cl_uint)clt_tensor_numel(y);
  CLT_TRY(clt_context_kernel(ctx, "bias", "bias_add", NULL, &k));
  CLT_TRY(
      NN_SET_ARGS(k, NN_VAL(y->buf), NN_VAL(yoff), NN_VAL(b->buf), NN_VAL(boff), NN_VAL(c), NN_VAL(p), NN_VAL(total)));
  CLT_TRY(clt_launch_1d(ctx, k, total, 0));
  return CLT_OK;
fail:
  return rc;
}

/* db[c] += sum over n, p of dy[n, c, p], dy seen as (N, C, P). */
int clt__nn_bias_grad(clt_context *ctx, const clt_tensor *dy, const clt_tensor *db, int64_t N, int64_t C, int64_t P) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong dyoff = clt__nn_off(dy), dboff = clt__nn_off(db);
  cl_uint n = (cl_uint)N, c = (cl_uint)C, p = (cl_uint)P;
  CLT_TRY(clt_context_kernel(ctx, "bias", "bias_grad", NULL, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, N * P, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(db->buf), NN_VAL(dboff), NN_VAL(n), NN_VAL(c),
                      NN_VAL(p), NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)C, wgs));
  return CLT_OK;
fail:
  return rc;
}
