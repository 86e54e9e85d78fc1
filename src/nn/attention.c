/*
 * attention.c: the core of causal multi-head self-attention, forward and
 * backward, as the fused kernels of cl/attention.cl. q, k and v are strided
 * views into the fused qkv (B, T, 3C): head h of q at column h*D of each
 * row of 3C floats, of k at C + h*D, of v at 2C + h*D.
 *
 * Per sample b and head h (in f32, whatever the stored type):
 *   forward   S = Q K^T / sqrt(D); P = causal softmax(S), lse saved;
 *             Y = P V
 *   backward  P = exp(S - lse) from S recomputed; dP = dY V^T;
 *             dS = P * (dP - rowsum(dY * Y)); dV = P^T dY;
 *             dQ = dS K / sqrt(D); dK = dS^T Q / sqrt(D)
 * One launch for the forward, two for the backward (dQ, then dK and dV);
 * none of them stores anything of size T x T. Under mixed precision the
 * kernels' f16 variant loads the same floats and does the same float
 * arithmetic, so an f16 result is the f32 path's on the same half inputs,
 * rounded once.
 */
#include "nn/common.h"

#include <math.h>
#include <stdio.h>

typedef struct attn_dims {
  int64_t B, T, C, H, D;
} attn_dims;

/* The backward's rowsums delta = rowsum(dY * Y), (B, H, T) f32, passed from
 * its first kernel to its second. */
size_t clt_nn_attention_scratch_bytes(int64_t B, int64_t T, int64_t C, int heads, clt_dtype dtype) {
  (void)C, (void)dtype;
  if (B < 1 || T < 1 || heads < 1) return 0;
  return (size_t)B * (size_t)heads * (size_t)T * sizeof(float);
}

/* A kernel of cl/attention.cl built for head width D and qkv's dtype. */
static int attention_kernel(clt_context *ctx, const clt_tensor *qkv, int64_t D, const char *name, cl_kernel *k) {
  char opt[64];
  snprintf(opt, sizeof opt, "%s -DHEAD_DIM=%lld", clt__nn_act_opt(qkv), (long long)D);
  return clt_context_kernel(ctx, "attention", name, opt, k);
}

/* Shapes: qkv (B, T, 3C), y (B, T, C) of one dtype, lse (B, heads, T) f32,
 * heads dividing C. */
static int check_attention(const char *op, int heads, const clt_tensor *qkv, const clt_tensor *y,
                           const clt_tensor *lse, attn_dims *d) {
  int rc;
  if ((rc = clt__nn_check_act(op, "qkv", qkv, 3, "(B, T, 3C)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, "y", y, 3, "(B, T, C)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "lse", lse, CLT_F32, 3, "(B, heads, T)")) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, "qkv", qkv, "y", y)) < 0) return rc;
  clt__nn_named ts[] = {{"qkv", qkv}, {"y", y}, {"lse", lse}};
  if (heads < 1) return clt__nn_shape_error(op, ts, 3, "heads = %d must be at least 1", heads);
  d->B = qkv->shape[0], d->T = qkv->shape[1], d->C = qkv->shape[2] / 3, d->H = heads;
  if (qkv->shape[2] % 3 != 0)
    return clt__nn_shape_error(op, ts, 3, "qkv's last dimension %lld is not 3C (q | k | v)", (long long)qkv->shape[2]);
  if (y->shape[0] != d->B || y->shape[1] != d->T || y->shape[2] != d->C)
    return clt__nn_shape_error(op, ts, 3, "y must be (%lld, %lld, %lld)", (long long)d->B, (long long)d->T,
                               (long long)d->C);
  if (d->C % heads != 0)
    return clt__nn_shape_error(op, ts, 3, "heads = %d does not divide C = %lld", heads, (long long)d->C);
  d->D = d->C / heads;
  if (lse->shape[0] != d->B || lse->shape[1] != heads || lse->shape[2] != d->T)
    return clt__nn_shape_error(op, ts, 3, "lse must be (%lld, %d, %lld)", (long long)d->B, heads, (long long)d->T);
  return CLT_OK;
}

int clt_nn_attention_forward(clt_context *ctx, int heads, const clt_tensor *qkv, const clt_tensor *y,
                             const clt_tensor *lse) {
  static const char op[] = "attention forward";
  attn_dims d;
  int rc = check_attention(op, heads, qkv, y, lse, &d);
  if (rc < 0) return rc;
  cl_kernel k;
  cl_ulong qoff = clt__nn_off(qkv), yoff = clt__nn_off(y), loff = clt__nn_off(lse);
  float scale = 1.0f / sqrtf((float)d.D);
  CLT_TRY(attention_kernel(ctx, qkv, d.D, "attention_forward", &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(qkv->buf), NN_VAL(qoff), NN_VAL(y->buf), NN_VAL(yoff), NN_VAL(lse->buf), NN_VAL(loff),
                      NN_VAL(scale)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)d.T, (size_t)d.H, (size_t)d.B));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_attention_backward(clt_context *ctx, int heads, const clt_tensor *qkv, const clt_tensor *y,
                              const clt_tensor *lse, const clt_tensor *dy, const clt_tensor *dqkv) {
  static const char op[] = "attention backward";
  attn_dims d;
  int rc = check_attention(op, heads, qkv, y, lse, &d);
  if (rc < 0) return rc;
  if ((rc = clt__nn_check_like(op, "dy", dy, "y", y)) < 0) return rc;
  if ((rc = clt__nn_check_like(op, "dqkv", dqkv, "qkv", qkv)) < 0) return rc;
  cl_mem delta;
  cl_kernel k;
  cl_ulong qoff = clt__nn_off(qkv), yoff = clt__nn_off(y), loff = clt__nn_off(lse), dyoff = clt__nn_off(dy);
  cl_ulong dqoff = clt__nn_off(dqkv), doff = 0;
  float scale = 1.0f / sqrtf((float)d.D);
  CLT_TRY(clt__context_scratch(ctx, clt_nn_attention_scratch_bytes(d.B, d.T, d.C, heads, qkv->dtype), &delta));
  CLT_TRY(attention_kernel(ctx, qkv, d.D, "attention_backward_dq", &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(qkv->buf), NN_VAL(qoff), NN_VAL(y->buf), NN_VAL(yoff), NN_VAL(dy->buf), NN_VAL(dyoff),
                      NN_VAL(lse->buf), NN_VAL(loff), NN_VAL(delta), NN_VAL(doff), NN_VAL(dqkv->buf), NN_VAL(dqoff),
                      NN_VAL(scale)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)d.T, (size_t)d.H, (size_t)d.B));
  CLT_TRY(attention_kernel(ctx, qkv, d.D, "attention_backward_dkv", &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(qkv->buf), NN_VAL(qoff), NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(lse->buf),
                      NN_VAL(loff), NN_VAL(delta), NN_VAL(doff), NN_VAL(dqkv->buf), NN_VAL(dqoff), NN_VAL(scale)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)d.T, (size_t)d.H, (size_t)d.B));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
