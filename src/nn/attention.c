/*
 * attention.c: the core of causal multi-head self-attention, forward and
 * backward, as the fused kernels of cl/attention.cl, with grouped-query
 * attention (H query heads sharing K key and value heads; K = H is GPT's
 * multi-head attention). q, k and v are strided views into the fused qkv
 * (B, T, (H + 2K) D): query head h at column h*D of each row, its key head
 * g = h / (H / K) at H*D + g*D, its value at (H + K)*D + g*D.
 *
 * Per sample b and head h (in f32, whatever the stored type):
 *   forward   S = Q K^T / sqrt(D); P = causal softmax(S), lse saved;
 *             Y = P V
 *   backward  P = exp(S - lse) from S recomputed; dP = dY V^T;
 *             dS = P * (dP - rowsum(dY * Y)); dV = P^T dY;
 *             dQ = dS K / sqrt(D); dK = dS^T Q / sqrt(D)
 * Two launches for the forward (k transposed, then the kernel), four for
 * the backward (q, k, v and dy transposed, dQ, then dK and dV); the
 * kernels tile in registers and read the other side's rows from those
 * transposed f32 copies, in scratch (4 B T C + B H T floats, linear in T;
 * the layer's saved activations are unchanged). None of them stores
 * anything of size T x T. Under mixed precision the
 * kernels' f16 variant loads the same floats and does the same float
 * arithmetic, so an f16 result is the f32 path's on the same half inputs,
 * rounded once.
 */
#include "nn/common.h"

#include <math.h>
#include <stdio.h>

typedef struct attn_dims {
  int64_t B, T, C, H, K, D; /* C = H D, the width of y */
} attn_dims;

/* T rounded up to a multiple of 16: the rows of the transposed copies, so
 * that tiles of up to 16 rows never run past them. */
static int64_t padded_T(int64_t T) { return (T + 15) / 16 * 16; }

/* Scratch, in floats: the backward's rowsums delta = rowsum(dY * Y), (B,
 * H, T), rounded up to 16; then the transposed copies of q (B, H, D, TP),
 * k and v (B, K, D, TP each) and dy (B, H, D, TP); the forward uses the
 * place of q, for k. */
static size_t delta_floats(int64_t B, int64_t T, int64_t H) { return (size_t)((B * H * T + 15) / 16 * 16); }
static size_t slab_floats(int64_t B, int64_t T, int64_t width) { return (size_t)(B * width * padded_T(T)); }

size_t clt_nn_gqa_scratch_bytes(int64_t B, int64_t T, int64_t C, int heads, int kv_heads, clt_dtype dtype) {
  (void)dtype;
  if (B < 1 || T < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads || C % heads) return 0;
  int64_t KW = C / heads * kv_heads;
  return (delta_floats(B, T, heads) + 2 * slab_floats(B, T, C) + 2 * slab_floats(B, T, KW)) * sizeof(float);
}

size_t clt_nn_attention_scratch_bytes(int64_t B, int64_t T, int64_t C, int heads, clt_dtype dtype) {
  return clt_nn_gqa_scratch_bytes(B, T, C, heads, heads, dtype);
}

/* Rows per work-item (QB) and rows per vector of the other side (KL): on
 * CPUs that run items as loops a work-item's tile is SIMD registers, 4 x
 * 16 (4 rows of D floats for each of the accumulators, 512-bit lanes);
 * elsewhere (GPUs, rusticl's llvmpipe, which runs items in SIMD lanes) an
 * item's registers are few and items many: 1 x 4. Either way the results
 * are deterministic; they differ in rounding between the two. */
static void attention_tile(const clt_context *ctx, int *qb, int *kl) {
  int cpu = clt__items_run_as_loops(ctx);
  *qb = cpu ? 4 : 1;
  *kl = cpu ? 16 : 4;
}

/* A kernel of cl/attention.cl built for head width D, the tile and qkv's dtype. */
static int attention_kernel(clt_context *ctx, const clt_tensor *qkv, int64_t D, const char *name, cl_kernel *k) {
  char opt[96];
  int qb, kl;
  attention_tile(ctx, &qb, &kl);
  snprintf(opt, sizeof opt, "%s -DHEAD_DIM=%lld -DQB=%d -DKL=%d", clt__nn_act_opt(qkv), (long long)D, qb, kl);
  return clt_context_kernel(ctx, "attention", name, opt, k);
}

/* `heads` head columns from col of src (B, T, ld) transposed into the
 * scratch place at dst floats: (B, heads, D, TP) f32; and the next parts -
 * 1 groups of heads * D columns, at dst + stride. */
static int transpose_heads(clt_context *ctx, const clt_tensor *src, const attn_dims *d, int64_t heads, cl_uint ld,
                           cl_ulong col, cl_mem scratch, cl_ulong dst, cl_uint parts, cl_ulong stride) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong soff = clt__nn_off(src) + col;
  cl_uint T = (cl_uint)d->T;
  /* On CPUs that run items as loops, 16 rows an item where 8 divides D */
  int tiles = clt__items_run_as_loops(ctx) && d->D % 8 == 0;
  CLT_TRY(attention_kernel(ctx, src, d->D, tiles ? "attention_transpose16" : "attention_transpose", &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(src->buf), NN_VAL(soff), NN_VAL(ld), NN_VAL(T), NN_VAL(scratch), NN_VAL(dst),
                      NN_VAL(parts), NN_VAL(stride)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)padded_T(d->T) / (tiles ? 16 : 1), (size_t)heads, (size_t)d->B));
fail:
  return rc;
}

/* Work-items of the row kernels along T: QB rows each. */
static size_t row_items(clt_context *ctx, int64_t T) {
  int qb, kl;
  attention_tile(ctx, &qb, &kl);
  return (size_t)((T + qb - 1) / qb);
}

/* Shapes: qkv (B, T, (H + 2K) D), y (B, T, H D) of one dtype, lse (B, H,
 * T) f32, K dividing H. */
static int check_attention(const char *op, int heads, int kv_heads, const clt_tensor *qkv, const clt_tensor *y,
                           const clt_tensor *lse, attn_dims *d) {
  int rc;
  if ((rc = clt__nn_check_act(op, "qkv", qkv, 3, "(B, T, (H + 2K) D)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, "y", y, 3, "(B, T, H D)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "lse", lse, CLT_F32, 3, "(B, heads, T)")) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, "qkv", qkv, "y", y)) < 0) return rc;
  clt__nn_named ts[] = {{"qkv", qkv}, {"y", y}, {"lse", lse}};
  if (heads < 1) return clt__nn_shape_error(op, ts, 3, "heads = %d must be at least 1", heads);
  if (kv_heads < 1 || heads % kv_heads)
    return clt__nn_shape_error(op, ts, 3, "kv_heads = %d must divide heads = %d", kv_heads, heads);
  d->B = y->shape[0], d->T = y->shape[1], d->C = y->shape[2], d->H = heads, d->K = kv_heads;
  if (d->C % heads != 0)
    return clt__nn_shape_error(op, ts, 3, "heads = %d does not divide C = %lld", heads, (long long)d->C);
  d->D = d->C / heads;
  if (heads == kv_heads && qkv->shape[2] % 3 != 0)
    return clt__nn_shape_error(op, ts, 3, "qkv's last dimension %lld is not 3C (q | k | v)", (long long)qkv->shape[2]);
  if (qkv->shape[0] != d->B || qkv->shape[1] != d->T || qkv->shape[2] != (d->H + 2 * d->K) * d->D) {
    if (heads == kv_heads)
      return clt__nn_shape_error(op, ts, 3, "y must be (%lld, %lld, %lld)", (long long)qkv->shape[0],
                                 (long long)qkv->shape[1], (long long)qkv->shape[2] / 3);
    return clt__nn_shape_error(op, ts, 3, "qkv must be (%lld, %lld, %lld): %d query and 2 x %d key and value heads "
                               "of %lld", (long long)d->B, (long long)d->T, (long long)((d->H + 2 * d->K) * d->D),
                               heads, kv_heads, (long long)d->D);
  }
  if (lse->shape[0] != d->B || lse->shape[1] != heads || lse->shape[2] != d->T)
    return clt__nn_shape_error(op, ts, 3, "lse must be (%lld, %d, %lld)", (long long)d->B, heads, (long long)d->T);
  return CLT_OK;
}

int clt_nn_gqa_forward(clt_context *ctx, int heads, int kv_heads, const clt_tensor *qkv, const clt_tensor *y,
                       const clt_tensor *lse) {
  static const char op[] = "attention forward";
  attn_dims d;
  int rc = check_attention(op, heads, kv_heads, qkv, y, lse, &d);
  if (rc < 0) return rc;
  cl_mem scratch;
  cl_kernel k;
  cl_ulong qoff = clt__nn_off(qkv), yoff = clt__nn_off(y), loff = clt__nn_off(lse), ktoff = 0;
  cl_uint T = (cl_uint)d.T, TP = (cl_uint)padded_T(d.T);
  float scale = 1.0f / sqrtf((float)d.D);
  cl_uint zero = 0, G = (cl_uint)(d.H / d.K); /* zero: see tile_scores in cl/attention.cl */
  CLT_TRY(clt__context_scratch(ctx, clt_nn_gqa_scratch_bytes(d.B, d.T, d.C, heads, kv_heads, qkv->dtype), &scratch));
  CLT_TRY(transpose_heads(ctx, qkv, &d, d.K, (cl_uint)((d.H + 2 * d.K) * d.D), (cl_ulong)d.C, scratch, ktoff, 1, 0));
  CLT_TRY(attention_kernel(ctx, qkv, d.D, "attention_forward", &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(qkv->buf), NN_VAL(qoff), NN_VAL(scratch), NN_VAL(ktoff), NN_VAL(T), NN_VAL(TP),
                      NN_VAL(y->buf), NN_VAL(yoff), NN_VAL(lse->buf), NN_VAL(loff), NN_VAL(scale), NN_VAL(zero),
                      NN_VAL(G)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, row_items(ctx, d.T), (size_t)d.H, (size_t)d.B));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_gqa_backward(clt_context *ctx, int heads, int kv_heads, const clt_tensor *qkv, const clt_tensor *y,
                        const clt_tensor *lse, const clt_tensor *dy, const clt_tensor *dqkv) {
  static const char op[] = "attention backward";
  attn_dims d;
  int rc = check_attention(op, heads, kv_heads, qkv, y, lse, &d);
  if (rc < 0) return rc;
  if ((rc = clt__nn_check_like(op, "dy", dy, "y", y)) < 0) return rc;
  if ((rc = clt__nn_check_like(op, "dqkv", dqkv, "qkv", qkv)) < 0) return rc;
  cl_mem scratch;
  cl_kernel k;
  cl_ulong qoff = clt__nn_off(qkv), yoff = clt__nn_off(y), loff = clt__nn_off(lse), dyoff = clt__nn_off(dy);
  cl_ulong dqoff = clt__nn_off(dqkv), doff = 0, qslab = slab_floats(d.B, d.T, d.C);
  cl_ulong kslab = slab_floats(d.B, d.T, d.K * d.D);
  cl_ulong qt = delta_floats(d.B, d.T, d.H), kt = qt + qslab, vt = kt + kslab, gt = vt + kslab;
  cl_uint T = (cl_uint)d.T, TP = (cl_uint)padded_T(d.T), ld = (cl_uint)((d.H + 2 * d.K) * d.D);
  float scale = 1.0f / sqrtf((float)d.D);
  cl_uint zero = 0, G = (cl_uint)(d.H / d.K); /* zero: see tile_scores in cl/attention.cl */
  CLT_TRY(clt__context_scratch(ctx, clt_nn_gqa_scratch_bytes(d.B, d.T, d.C, heads, kv_heads, qkv->dtype), &scratch));
  CLT_TRY(transpose_heads(ctx, qkv, &d, d.H, ld, 0, scratch, qt, 1, 0));                  /* q */
  CLT_TRY(transpose_heads(ctx, qkv, &d, d.K, ld, (cl_ulong)d.C, scratch, kt, 2, kslab)); /* k, v */
  CLT_TRY(transpose_heads(ctx, dy, &d, d.H, (cl_uint)d.C, 0, scratch, gt, 1, 0));
  CLT_TRY(attention_kernel(ctx, qkv, d.D, "attention_backward_dq", &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(qkv->buf), NN_VAL(qoff), NN_VAL(scratch), NN_VAL(kt), NN_VAL(vt), NN_VAL(T),
                      NN_VAL(TP), NN_VAL(y->buf), NN_VAL(yoff), NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(lse->buf),
                      NN_VAL(loff), NN_VAL(scratch), NN_VAL(doff), NN_VAL(dqkv->buf), NN_VAL(dqoff), NN_VAL(scale),
                      NN_VAL(zero), NN_VAL(G)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, row_items(ctx, d.T), (size_t)d.H, (size_t)d.B));
  CLT_TRY(attention_kernel(ctx, qkv, d.D, "attention_backward_dkv", &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(qkv->buf), NN_VAL(qoff), NN_VAL(scratch), NN_VAL(qt), NN_VAL(gt), NN_VAL(T),
                      NN_VAL(TP), NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(lse->buf), NN_VAL(loff), NN_VAL(scratch),
                      NN_VAL(doff), NN_VAL(dqkv->buf), NN_VAL(dqoff), NN_VAL(scale), NN_VAL(zero), NN_VAL(G)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, row_items(ctx, d.T), (size_t)d.K, (size_t)d.B));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_attention_forward(clt_context *ctx, int heads, const clt_tensor *qkv, const clt_tensor *y,
                             const clt_tensor *lse) {
  return clt_nn_gqa_forward(ctx, heads, heads, qkv, y, lse);
}

int clt_nn_attention_backward(clt_context *ctx, int heads, const clt_tensor *qkv, const clt_tensor *y,
                              const clt_tensor *lse, const clt_tensor *dy, const clt_tensor *dqkv) {
  return clt_nn_gqa_backward(ctx, heads, heads, qkv, y, lse, dy, dqkv);
}
