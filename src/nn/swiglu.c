/*
 * swiglu.c: the gate of a SwiGLU MLP (Llama's), h = silu(g) * u over the
 * rows of the fused gate-and-up projection gu = [g | u], forward and
 * backward (cl/swiglu.cl); all activations of one call f32, or f16 under
 * mixed precision.
 */
#include "nn/common.h"

/* gu (N, 2I) and the other (N, I), of one dtype. */
static int check_glu(const char *op, const clt_tensor *gu, const char *hn, const clt_tensor *h) {
  int rc;
  if ((rc = clt__nn_check_act(op, "gu", gu, 2, "(N, 2I)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, hn, h, 2, "(N, I)")) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, "gu", gu, hn, h)) < 0) return rc;
  clt__nn_named ts[] = {{"gu", gu}, {hn, h}};
  if (h->shape[0] != gu->shape[0] || 2 * h->shape[1] != gu->shape[1])
    return clt__nn_shape_error(op, ts, 2, "gu must be (N, 2I) for %s (N, I): [gate | up]", hn);
  return CLT_OK;
}

int clt_nn_swiglu_forward(clt_context *ctx, const clt_tensor *gu, const clt_tensor *h) {
  static const char op[] = "swiglu forward";
  int rc = check_glu(op, gu, "h", h);
  if (rc < 0) return rc;
  cl_kernel k;
  cl_ulong guoff = clt__nn_off(gu), hoff = clt__nn_off(h);
  if (clt_tensor_numel(h) == 0) return CLT_OK;
  CLT_TRY(clt_context_kernel(ctx, "swiglu", "swiglu_forward", clt__nn_act_opt(gu), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(gu->buf), NN_VAL(guoff), NN_VAL(h->buf), NN_VAL(hoff)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)h->shape[1], (size_t)h->shape[0], 1));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_swiglu_backward(clt_context *ctx, const clt_tensor *gu, const clt_tensor *dh, const clt_tensor *dgu) {
  static const char op[] = "swiglu backward";
  int rc = check_glu(op, gu, "dh", dh);
  if (rc < 0) return rc;
  if ((rc = clt__nn_check_like(op, "dgu", dgu, "gu", gu)) < 0) return rc;
  cl_kernel k;
  cl_ulong guoff = clt__nn_off(gu), dhoff = clt__nn_off(dh), dgoff = clt__nn_off(dgu);
  if (clt_tensor_numel(dh) == 0) return CLT_OK;
  CLT_TRY(clt_context_kernel(ctx, "swiglu", "swiglu_backward", clt__nn_act_opt(gu), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(gu->buf), NN_VAL(guoff), NN_VAL(dh->buf), NN_VAL(dhoff), NN_VAL(dgu->buf),
                      NN_VAL(dgoff)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)dh->shape[1], (size_t)dh->shape[0], 1));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
