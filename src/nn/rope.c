/*
 * rope.c: rotary position embeddings applied in place to the query and key
 * heads of a fused qkv (B, T, (H + 2K) D), forward and backward (the
 * transposed rotation), cl/rope.cl. qkv is f32, or f16 under mixed
 * precision; inv_freq (D / 2) is f32.
 */
#include "nn/common.h"

static int rope(clt_context *ctx, const char *op, int heads, int kv_heads, const clt_tensor *inv_freq, float sign,
                const clt_tensor *qkv) {
  int rc;
  if ((rc = clt__nn_check_act(op, "qkv", qkv, 3, "(B, T, (H + 2K) D)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "inv_freq", inv_freq, CLT_F32, 1, "(D / 2)")) < 0) return rc;
  clt__nn_named ts[] = {{"qkv", qkv}, {"inv_freq", inv_freq}};
  if (heads < 1 || kv_heads < 1 || heads % kv_heads)
    return clt__nn_shape_error(op, ts, 2, "heads = %d and kv_heads = %d: kv_heads must divide heads", heads, kv_heads);
  int64_t B = qkv->shape[0], T = qkv->shape[1], W = qkv->shape[2], half = inv_freq->shape[0], D = 2 * half;
  if (half < 1 || W != (heads + 2 * (int64_t)kv_heads) * D)
    return clt__nn_shape_error(op, ts, 2, "qkv's rows must hold (%d + 2 x %d) heads of 2 x %lld values", heads, kv_heads,
                               (long long)half);
  cl_kernel k;
  cl_ulong qoff = clt__nn_off(qkv), foff = clt__nn_off(inv_freq);
  cl_uint ld = (cl_uint)W, nrot = (cl_uint)(heads + kv_heads), d = (cl_uint)D;
  if (B * T == 0) return CLT_OK;
  CLT_TRY(clt_context_kernel(ctx, "rope", "rope_rotate", clt__nn_act_opt(qkv), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(qkv->buf), NN_VAL(qoff), NN_VAL(ld), NN_VAL(nrot), NN_VAL(d), NN_VAL(inv_freq->buf),
                      NN_VAL(foff), NN_VAL(sign)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)half, (size_t)T, (size_t)B));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_rope_forward(clt_context *ctx, int heads, int kv_heads, const clt_tensor *inv_freq, const clt_tensor *qkv) {
  return rope(ctx, "rope forward", heads, kv_heads, inv_freq, 1.0f, qkv);
}

int clt_nn_rope_backward(clt_context *ctx, int heads, int kv_heads, const clt_tensor *inv_freq,
                         const clt_tensor *dqkv) {
  return rope(ctx, "rope backward", heads, kv_heads, inv_freq, -1.0f, dqkv);
}
