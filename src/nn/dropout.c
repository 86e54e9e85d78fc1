/*
 * dropout.c: inverted dropout whose mask is Philox4x32-10 of (seed, step,
 * element index), forward and backward (cl/dropout.cl); see nn.h for the
 * exact bit recipe, which src/ref/ref_nn.c repeats. x and y (dy and dx) are
 * f32, or f16 under mixed precision: the same mask either way.
 */
#include "nn/common.h"

#include <math.h>

static int dropout(clt_context *ctx, const char *op, float p, uint64_t seed, uint64_t step, uint64_t base,
                   const char *in_name, const clt_tensor *in, const char *out_name, const clt_tensor *out) {
  int rc;
  if (!(p >= 0.0f && p < 1.0f))
    return clt__error(CLT_EINVAL, "%s: drop probability %g must be in [0, 1)", op, (double)p);
  if ((rc = clt__nn_check_act(op, in_name, in, 0, "(any shape)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, out_name, out, 0, "(any shape)")) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, in_name, in, out_name, out)) < 0) return rc;
  if (clt_tensor_numel(in) != clt_tensor_numel(out)) {
    clt__nn_named ts[] = {{in_name, in}, {out_name, out}};
    return clt__nn_shape_error(op, ts, 2, "%s and %s differ in size", in_name, out_name);
  }
  cl_kernel k;
  cl_ulong ioff = clt__nn_off(in), ooff = clt__nn_off(out), n = (cl_ulong)clt_tensor_numel(in);
  cl_ulong s = seed, st = step, b = base;
  /* Keep when the word's top 24 bits >= p * 2^24: exact in double, and an
   * integer comparison on the device. */
  cl_uint threshold = (cl_uint)llround((double)p * 16777216.0);
  float scale = (float)(1.0 / (1.0 - (double)p));
  CLT_TRY(clt_context_kernel(ctx, "dropout", "dropout_apply", clt__nn_act_opt(in), &k));
  NN_ARG(k, 0, in->buf);
  NN_ARG(k, 1, ioff);
  NN_ARG(k, 2, out->buf);
  NN_ARG(k, 3, ooff);
  NN_ARG(k, 4, n);
  NN_ARG(k, 5, s);
  NN_ARG(k, 6, st);
  NN_ARG(k, 7, b);
  NN_ARG(k, 8, threshold);
  NN_ARG(k, 9, scale);
  /* One work-item per Philox block of four elements (cl/dropout.cl). */
  CLT_TRY(clt_launch_1d(ctx, k, (size_t)(((b + n + 3) >> 2) - (b >> 2)), 0));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_dropout_forward(clt_context *ctx, float p, uint64_t seed, uint64_t step, uint64_t index_base,
                           const clt_tensor *x, const clt_tensor *y) {
  return dropout(ctx, "dropout forward", p, seed, step, index_base, "x", x, "y", y);
}

int clt_nn_dropout_backward(clt_context *ctx, float p, uint64_t seed, uint64_t step, uint64_t index_base,
                            const clt_tensor *dy, const clt_tensor *dx) {
  return dropout(ctx, "dropout backward", p, seed, step, index_base, "dy", dy, "dx", dx);
}
