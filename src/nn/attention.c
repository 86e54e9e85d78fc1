/*
 * attention.c: the core of causal multi-head self-attention, forward and
 * backward, as GEMMs (clt_sgemm_batched) around the causal softmax of
 * cl/attention.cl. q, k and v are strided views into the fused qkv (B, T,
 * 3C): head h of q at column h*D of each row of 3C floats, of k at C + h*D,
 * of v at 2C + h*D.
 *
 * Per sample b and head h (all GEMMs in f32):
 *   forward   S = Q K^T / sqrt(D); P = causal softmax(S), lse saved;
 *             Y = P V
 *   backward  S again, P = exp(S - lse) (the forward's P, bit for bit);
 *             dP = dY V^T; dS = P * (dP - rowsum(dY * Y));
 *             dV = P^T dY; dQ = dS K / sqrt(D); dK = dS^T Q / sqrt(D)
 * The T x T matrices of a chunk of samples live in the context's scratch
 * space for one call only: nothing of size T x T is kept between forward
 * and backward. Under mixed precision, each chunk's qkv (and y, dy) are
 * widened into f32 scratch, the same f32 code runs there, and y (dqkv) are
 * rounded back; so an f16 result is the f32 path's on the same half
 * inputs, rounded once.
 */
#include "nn/common.h"

#include <math.h>

/* The scratch a call may use: chunks of samples are sized to fit in it. */
#define ATTN_SCRATCH_MOST ((size_t)256 << 20)
static size_t scratch_most = ATTN_SCRATCH_MOST;

void clt__nn_attention_limit(size_t bytes) { scratch_most = bytes ? bytes : ATTN_SCRATCH_MOST; }

typedef struct attn_dims {
  int64_t B, T, C, H, D;
} attn_dims;

/* Floats of scratch per sample: P and dS (H T x T each; the forward uses P
 * only), and for f16 f32 copies of qkv and dqkv (T x 3C) and y and dy
 * (T x C). */
static size_t floats_per_sample(int64_t T, int64_t C, int64_t H, clt_dtype dtype) {
  size_t f = 2 * (size_t)(H * T * T);
  if (dtype == CLT_F16) f += 2 * (size_t)(T * 3 * C) + 2 * (size_t)(T * C);
  return f;
}

/* Samples per chunk: as many as fit in scratch_most, at least 1, at most
 * B. */
static int64_t chunk_samples(int64_t B, int64_t T, int64_t C, int64_t H, clt_dtype dtype) {
  size_t per = floats_per_sample(T, C, H, dtype) * sizeof(float);
  int64_t nb = per ? (int64_t)(scratch_most / per) : B;
  if (nb < 1) nb = 1;
  if (nb > B) nb = B;
  return nb;
}

size_t clt_nn_attention_scratch_bytes(int64_t B, int64_t T, int64_t C, int heads, clt_dtype dtype) {
  if (B < 1 || T < 1 || C < 1 || heads < 1) return 0;
  return (size_t)chunk_samples(B, T, C, heads, dtype) * floats_per_sample(T, C, heads, dtype) * sizeof(float);
}

/* Where one chunk's f32 operands are: buffers and float offsets of the
 * chunk's first sample (y, dy: (nb, T, C); qkv, dqkv: (nb, T, 3C)), of its
 * P and dS (nb, H, T, T) and of its lse (nb, H, T). */
typedef struct attn_chunk {
  int64_t nb;
  cl_mem qkv, y, dy, dqkv, s, lse;
  size_t qkv_off, y_off, dy_off, dqkv_off, p_off, ds_off, lse_off;
} attn_chunk;

/* A GEMM operand repeated per (sample b, head h): at m.offset + b * per_b
 * + h * per_h floats. */
typedef struct head_operand {
  clt_matrix m;
  size_t per_b, per_h;
} head_operand;

/* C_bh = alpha op(A_bh) op(B_bh) for every sample b < nb and head h < H,
 * batched over the larger of the two and looped over the smaller. */
static int gemm_heads(clt_context *ctx, clt_transpose ta, clt_transpose tb, int64_t m, int64_t n, int64_t k,
                      float alpha, head_operand a, head_operand b, head_operand c, int64_t nb, int64_t H) {
  int rc = CLT_OK;
  int by_head = H >= nb; /* batch over heads, one call per sample */
  int64_t outer = by_head ? nb : H, inner = by_head ? H : nb;
  for (int64_t o = 0; o < outer; o++) {
    clt_matrix ao = a.m, bo = b.m, co = c.m;
    ao.offset += (size_t)o * (by_head ? a.per_b : a.per_h);
    bo.offset += (size_t)o * (by_head ? b.per_b : b.per_h);
    co.offset += (size_t)o * (by_head ? c.per_b : c.per_h);
    CLT_TRY(clt_sgemm_batched(ctx, ta, tb, (size_t)m, (size_t)n, (size_t)k, alpha, ao, by_head ? a.per_h : a.per_b,
                              bo, by_head ? b.per_h : b.per_b, 0.0f, co, by_head ? c.per_h : c.per_b, (size_t)inner));
  }
fail:
  return rc;
}

/* The operands of a chunk: head h's q, k or v (part 0, 1, 2) in qkv-like
 * (buf, off); its columns in y-like; its T x T block of P or dS. */
static head_operand qkv_part(const attn_dims *d, cl_mem buf, size_t off, int part) {
  head_operand o = {{buf, off + (size_t)(part * d->C), (size_t)(3 * d->C)}, (size_t)(d->T * 3 * d->C), (size_t)d->D};
  return o;
}
static head_operand y_part(const attn_dims *d, cl_mem buf, size_t off) {
  head_operand o = {{buf, off, (size_t)d->C}, (size_t)(d->T * d->C), (size_t)d->D};
  return o;
}
static head_operand square(const attn_dims *d, cl_mem buf, size_t off) {
  head_operand o = {{buf, off, (size_t)d->T}, (size_t)(d->H * d->T * d->T), (size_t)(d->T * d->T)};
  return o;
}

/* S = Q K^T / sqrt(D) into P's place. */
static int scores(clt_context *ctx, const attn_dims *d, const attn_chunk *c) {
  float scale = 1.0f / sqrtf((float)d->D);
  return gemm_heads(ctx, CLT_NO_TRANS, CLT_TRANS, d->T, d->T, d->D, scale, qkv_part(d, c->qkv, c->qkv_off, 0),
                    qkv_part(d, c->qkv, c->qkv_off, 1), square(d, c->s, c->p_off), c->nb, d->H);
}

static int forward_chunk(clt_context *ctx, const attn_dims *d, const attn_chunk *c) {
  int rc = CLT_OK;
  cl_kernel k;
  CLT_TRY(scores(ctx, d, c));
  cl_ulong poff = c->p_off, lseoff = c->lse_off;
  cl_uint T = (cl_uint)d->T;
  CLT_TRY(clt_context_kernel(ctx, "attention", "attention_softmax", NULL, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, d->T, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(c->s), NN_VAL(poff), NN_VAL(c->lse), NN_VAL(lseoff), NN_VAL(T),
                      NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)(c->nb * d->H * d->T), wgs));
  /* Y = P V */
  CLT_TRY(gemm_heads(ctx, CLT_NO_TRANS, CLT_NO_TRANS, d->T, d->D, d->T, 1.0f, square(d, c->s, c->p_off),
                     qkv_part(d, c->qkv, c->qkv_off, 2), y_part(d, c->y, c->y_off), c->nb, d->H));
fail:
  return rc;
}

static int backward_chunk(clt_context *ctx, const attn_dims *d, const attn_chunk *c) {
  int rc = CLT_OK;
  cl_kernel k;
  float scale = 1.0f / sqrtf((float)d->D);
  head_operand q = qkv_part(d, c->qkv, c->qkv_off, 0), kk = qkv_part(d, c->qkv, c->qkv_off, 1);
  head_operand v = qkv_part(d, c->qkv, c->qkv_off, 2), dy = y_part(d, c->dy, c->dy_off);
  head_operand p = square(d, c->s, c->p_off), ds = square(d, c->s, c->ds_off);
  CLT_TRY(scores(ctx, d, c));
  /* dP = dY V^T into dS's place */
  CLT_TRY(gemm_heads(ctx, CLT_NO_TRANS, CLT_TRANS, d->T, d->T, d->D, 1.0f, dy, v, ds, c->nb, d->H));
  /* P from S and lse; dS = P * (dP - rowsum(dY * Y)) */
  cl_ulong poff = c->p_off, dsoff = c->ds_off, lseoff = c->lse_off, yoff = c->y_off, dyoff = c->dy_off;
  cl_uint T = (cl_uint)d->T, H = (cl_uint)d->H, C = (cl_uint)d->C, D = (cl_uint)d->D;
  CLT_TRY(clt_context_kernel(ctx, "attention", "attention_softmax_backward", NULL, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, d->T, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(c->s), NN_VAL(poff), NN_VAL(c->s), NN_VAL(dsoff), NN_VAL(c->lse), NN_VAL(lseoff),
                      NN_VAL(c->y), NN_VAL(yoff), NN_VAL(c->dy), NN_VAL(dyoff), NN_VAL(T), NN_VAL(H), NN_VAL(C),
                      NN_VAL(D), NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)(c->nb * d->H * d->T), wgs));
  /* dV = P^T dY, dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D), each overwritten */
  CLT_TRY(gemm_heads(ctx, CLT_TRANS, CLT_NO_TRANS, d->T, d->D, d->T, 1.0f, p, dy,
                     qkv_part(d, c->dqkv, c->dqkv_off, 2), c->nb, d->H));
  CLT_TRY(gemm_heads(ctx, CLT_NO_TRANS, CLT_NO_TRANS, d->T, d->D, d->T, scale, ds, kk,
                     qkv_part(d, c->dqkv, c->dqkv_off, 0), c->nb, d->H));
  CLT_TRY(gemm_heads(ctx, CLT_TRANS, CLT_NO_TRANS, d->T, d->D, d->T, scale, ds, q,
                     qkv_part(d, c->dqkv, c->dqkv_off, 1), c->nb, d->H));
fail:
  return rc;
}

/* A 1-D view of `count` elements of t starting at element `first`. */
static int flat_part(const clt_tensor *t, int64_t first, int64_t count, clt_tensor *out) {
  size_t es = clt_dtype_size(t->dtype);
  return clt_tensor_view(t->buf, t->offset + (size_t)first * es, t->dtype, 1, &count, out);
}

/* Widen count elements of f16 src from element first into f32 scratch at
 * float offset soff (or round them back when to_act). */
static int widen(clt_context *ctx, const clt_tensor *t, int64_t first, int64_t count, cl_mem s, size_t soff,
                 int to_act) {
  int rc = CLT_OK;
  clt_tensor part, s32;
  CLT_TRY(flat_part(t, first, count, &part));
  CLT_TRY(clt_tensor_view(s, soff * sizeof(float), CLT_F32, 1, &count, &s32));
  CLT_TRY(to_act ? clt_convert(ctx, &s32, &part) : clt_convert(ctx, &part, &s32));
fail:
  return rc;
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
  if (d->H * d->T * d->T > NN_MAX_ELEMS)
    return clt__nn_shape_error(op, ts, 3, "heads x T x T = %lld scores per sample exceed 2^31 - 1",
                               (long long)(d->H * d->T * d->T));
  return CLT_OK;
}

/* The chunk of samples [b0, b0 + nb): scratch offsets in floats, laid out
 * as P, dS, qkv32, dqkv32, y32, dy32 (the last four for f16 only). */
static attn_chunk chunk_at(const attn_dims *d, int64_t nb_max, int64_t b0, int64_t nb, cl_mem s,
                           const clt_tensor *lse) {
  attn_chunk c = {0};
  size_t sq = (size_t)(nb_max * d->H * d->T * d->T), wide = (size_t)(nb_max * d->T * 3 * d->C);
  size_t narrow = (size_t)(nb_max * d->T * d->C);
  c.nb = nb;
  c.s = s, c.p_off = 0, c.ds_off = sq;
  c.lse = lse->buf, c.lse_off = (size_t)clt__nn_off(lse) + (size_t)(b0 * d->H * d->T);
  /* f16 defaults: the widened copies in scratch (f32 overrides them) */
  c.qkv = c.dqkv = c.y = c.dy = s;
  c.qkv_off = 2 * sq, c.dqkv_off = 2 * sq + wide, c.y_off = 2 * sq + 2 * wide, c.dy_off = 2 * sq + 2 * wide + narrow;
  return c;
}

int clt_nn_attention_forward(clt_context *ctx, int heads, const clt_tensor *qkv, const clt_tensor *y,
                             const clt_tensor *lse) {
  static const char op[] = "attention forward";
  attn_dims d;
  int rc = check_attention(op, heads, qkv, y, lse, &d);
  if (rc < 0) return rc;
  cl_mem s;
  int half = qkv->dtype == CLT_F16;
  int64_t nb_max = chunk_samples(d.B, d.T, d.C, d.H, qkv->dtype);
  CLT_TRY(clt__context_scratch(ctx, clt_nn_attention_scratch_bytes(d.B, d.T, d.C, heads, qkv->dtype), &s));
  for (int64_t b0 = 0; b0 < d.B; b0 += nb_max) {
    int64_t nb = d.B - b0 < nb_max ? d.B - b0 : nb_max;
    attn_chunk c = chunk_at(&d, nb_max, b0, nb, s, lse);
    int64_t wide0 = b0 * d.T * 3 * d.C, narrow0 = b0 * d.T * d.C;
    if (half) {
      CLT_TRY(widen(ctx, qkv, wide0, nb * d.T * 3 * d.C, s, c.qkv_off, 0));
    } else {
      c.qkv = qkv->buf, c.qkv_off = (size_t)clt__nn_off(qkv) + (size_t)wide0;
      c.y = y->buf, c.y_off = (size_t)clt__nn_off(y) + (size_t)narrow0;
    }
    CLT_TRY(forward_chunk(ctx, &d, &c));
    if (half) CLT_TRY(widen(ctx, y, narrow0, nb * d.T * d.C, s, c.y_off, 1));
  }
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
  cl_mem s;
  int half = qkv->dtype == CLT_F16;
  int64_t nb_max = chunk_samples(d.B, d.T, d.C, d.H, qkv->dtype);
  CLT_TRY(clt__context_scratch(ctx, clt_nn_attention_scratch_bytes(d.B, d.T, d.C, heads, qkv->dtype), &s));
  for (int64_t b0 = 0; b0 < d.B; b0 += nb_max) {
    int64_t nb = d.B - b0 < nb_max ? d.B - b0 : nb_max;
    attn_chunk c = chunk_at(&d, nb_max, b0, nb, s, lse);
    int64_t wide0 = b0 * d.T * 3 * d.C, narrow0 = b0 * d.T * d.C;
    if (half) {
      CLT_TRY(widen(ctx, qkv, wide0, nb * d.T * 3 * d.C, s, c.qkv_off, 0));
      CLT_TRY(widen(ctx, y, narrow0, nb * d.T * d.C, s, c.y_off, 0));
      CLT_TRY(widen(ctx, dy, narrow0, nb * d.T * d.C, s, c.dy_off, 0));
    } else {
      c.qkv = qkv->buf, c.qkv_off = (size_t)clt__nn_off(qkv) + (size_t)wide0;
      c.dqkv = dqkv->buf, c.dqkv_off = (size_t)clt__nn_off(dqkv) + (size_t)wide0;
      c.y = y->buf, c.y_off = (size_t)clt__nn_off(y) + (size_t)narrow0;
      c.dy = dy->buf, c.dy_off = (size_t)clt__nn_off(dy) + (size_t)narrow0;
    }
    CLT_TRY(backward_chunk(ctx, &d, &c));
    if (half) CLT_TRY(widen(ctx, dqkv, wide0, nb * d.T * 3 * d.C, s, c.dqkv_off, 1));
  }
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
