/*
 * test_llama_layers.c: the layers of src/nn/ that Llama-family models add,
 * on every device (PoCL and rusticl): RMSNorm, SwiGLU's gate, rotary
 * position embeddings and grouped-query attention, with activations stored
 * as f32 and as f16.
 *
 * Each forward is checked against the plain-C reference (src/ref/ref_llama.c,
 * in double), each backward against the reference backward AND against
 * central finite differences of f = sum(y * r) computed with the reference
 * forward in double, r being the upstream gradient dy (nnutil.h has the
 * step and why it is exact enough). Accumulated gradients (dw) start from
 * random values; outputs start as NaN so a missed element shows; guard
 * elements around every f32 tensor catch stray writes.
 *
 * f16: inputs are rounded to half on the device; the f16 path must give
 * exactly the f32 path's results on the same values, rounded to nearest
 * even once (the kernels load halves as floats and do the f32 path's
 * arithmetic).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/common.h"
#include "nnutil.h"
#include "ref/ref_gpt.h"
#include "ref/ref_llama.h"

/* ---- helpers ----------------------------------------------------------------- */

static float *get(clt_context *ctx, const clt_tensor *t) {
  float *h = malloc((size_t)clt_tensor_numel(t) * sizeof *h);
  nu_get(ctx, t, h);
  return h;
}

static void put(clt_context *ctx, const clt_tensor *t, const float *host) {
  ck_assert_msg(clt_tensor_upload(ctx, t, host, clt_tensor_bytes(t)) == 0, "%s", clt_last_error());
}

/* n values in [-scale, scale). */
static float *scaled_random(size_t n, unsigned seed, float scale) {
  float *x = nu_random(n, seed);
  for (size_t i = 0; i < n; i++) x[i] *= scale;
  return x;
}

/* ---- rmsnorm ------------------------------------------------------------------ */

typedef struct rms_state {
  int M, D;
  double eps, *x, *w, *r, *y;
} rms_state;

static double rms_f(void *p) {
  rms_state *s = p;
  ref_rmsnorm_forward(s->M, s->D, s->eps, s->x, s->w, s->y, NULL);
  return nu_dot(s->y, s->r, (size_t)s->M * s->D);
}

/* y and dx sum D terms a row (NU_SUM_TOL(D)); dw sums M rows of them. The
 * rows are scaled apart (x of size ~1 and ~100) so a missing rstd shows. */
static void rmsnorm_case(clt_context *ctx, int M, int D) {
  size_t n = (size_t)M * D;
  const float eps = 1e-5f;
  unsigned seed = (unsigned)(M * 100 + D);
  float *x = nu_random(n, seed), *w = scaled_random((size_t)D, seed + 1, 2.0f), *dy = nu_random(n, seed + 2);
  float *dw0 = nu_random((size_t)D, seed + 3);
  for (int m = 0; m < M; m += 2)
    for (int d = 0; d < D; d++) x[(size_t)m * D + d] *= 100.0f;
  clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(M, D)), tw = nu_f32(ctx, w, NU_SHAPE(D)), ty = nu_f32(ctx, NULL, NU_SHAPE(M, D));
  clt_tensor tr = nu_f32(ctx, NULL, NU_SHAPE(M)), tdy = nu_f32(ctx, dy, NU_SHAPE(M, D));
  clt_tensor tdx = nu_f32(ctx, NULL, NU_SHAPE(M, D)), tdw = nu_f32(ctx, dw0, NU_SHAPE(D));
  char what[160];
  snprintf(what, sizeof what, "rmsnorm M=%d D=%d on %s", M, D, tu_name(ctx));

  ck_assert_msg(clt_nn_rmsnorm_forward(ctx, eps, &tx, &tw, &ty, &tr) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_rmsnorm_backward(ctx, &tx, &tw, &tr, &tdy, &tdx, &tdw) == 0, "%s", clt_last_error());
  float *y = get(ctx, &ty), *r = get(ctx, &tr), *dx = get(ctx, &tdx), *dw = get(ctx, &tdw);

  rms_state s = {M, D, eps, nu_to_double(x, n), nu_to_double(w, (size_t)D), nu_to_double(dy, n), malloc(n * 8)};
  double *ry = malloc(n * 8), *rr = malloc((size_t)M * 8), *rdx = malloc(n * 8), *rdw = malloc((size_t)D * 8), e;
  ref_rmsnorm_forward(M, D, eps, s.x, s.w, ry, rr);
  ref_rmsnorm_backward(M, D, eps, s.x, s.w, s.r, rdx, rdw);
  float *added = nu_added(dw, dw0, (size_t)D);
  ck_assert_msg((e = nu_err(y, ry, n)) <= NU_SUM_TOL(D), "%s: y error %g" NU_AT, what, e, NU_AT_ARGS);
  for (int m = 0; m < M; m++) /* rstd relative: the rows of ~100 have rstd ~0.017 */
    ck_assert_msg(fabs(r[m] - rr[m]) <= NU_SUM_TOL(D) * rr[m], "%s: rstd[%d] %.9g, want %.9g", what, m, r[m], rr[m]);
  ck_assert_msg((e = nu_err(dx, rdx, n)) <= NU_SUM_TOL(2 * D), "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(added, rdw, (size_t)D)) <= NU_SUM_TOL(M), "%s: dw error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(rms_f, &s, s.x, n, dx, NU_FD_H, NU_FD_POINTS)) <= NU_SUM_TOL(2 * D),
                "%s: dx vs finite differences %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(rms_f, &s, s.w, (size_t)D, added, NU_FD_H, NU_FD_POINTS)) <= NU_SUM_TOL(M),
                "%s: dw vs finite differences %g" NU_AT, what, e, NU_AT_ARGS);

  /* in place: dx over dy gives the same bits */
  put(ctx, &tdw, dw0);
  ck_assert_msg(clt_nn_rmsnorm_backward(ctx, &tx, &tw, &tr, &tdy, &tdy, &tdw) == 0, "%s", clt_last_error());
  float *dx2 = get(ctx, &tdy);
  ck_assert_msg(memcmp(dx2, dx, n * 4) == 0, "%s: dx in place differs", what);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(w), free(dy), free(dw0), free(y), free(r), free(dx), free(dw), free(s.x), free(s.w), free(s.r);
  free(s.y), free(ry), free(rr), free(rdx), free(rdw), free(added), free(dx2);
}

START_TEST(rmsnorm_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) {
    rmsnorm_case(tu_ctx[d], 6, 16);  /* rows 8 wide */
    rmsnorm_case(tu_ctx[d], 5, 13);  /* scalar rows */
    rmsnorm_case(tu_ctx[d], 3, 600); /* longer than a 256-item work-group */
  }
}
END_TEST

/* ---- swiglu ------------------------------------------------------------------- */

typedef struct glu_state {
  int N, I;
  double *gu, *r, *h;
} glu_state;

static double glu_f(void *p) {
  glu_state *s = p;
  ref_swiglu_forward(s->N, s->I, s->gu, s->h);
  return nu_dot(s->h, s->r, (size_t)s->N * s->I);
}

/* Elementwise: a few float operations a value (1e-5 relative, as the
 * activations' ACT_TOL). Gate values reach +-100 and the overflow of
 * exp(-g) (saturation) too. */
#define GLU_TOL 1e-5

static void swiglu_case(clt_context *ctx, int N, int I) {
  size_t ng = (size_t)N * 2 * I, nh = (size_t)N * I;
  unsigned seed = (unsigned)(N * 100 + I);
  float *gu = scaled_random(ng, seed, 4.0f), *dh = nu_random(nh, seed + 1);
  if (ng > 8) gu[0] = 100.0f, gu[1] = -100.0f, gu[2] = 88.7f, gu[3] = -88.7f;
  clt_tensor tg = nu_f32(ctx, gu, NU_SHAPE(N, 2 * I)), th = nu_f32(ctx, NULL, NU_SHAPE(N, I));
  clt_tensor tdh = nu_f32(ctx, dh, NU_SHAPE(N, I)), tdg = nu_f32(ctx, NULL, NU_SHAPE(N, 2 * I));
  char what[160];
  snprintf(what, sizeof what, "swiglu N=%d I=%d on %s", N, I, tu_name(ctx));
  ck_assert_msg(clt_nn_swiglu_forward(ctx, &tg, &th) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_swiglu_backward(ctx, &tg, &tdh, &tdg) == 0, "%s", clt_last_error());
  float *h = get(ctx, &th), *dg = get(ctx, &tdg);
  glu_state s = {N, I, nu_to_double(gu, ng), nu_to_double(dh, nh), malloc(nh * 8)};
  double *rh = malloc(nh * 8), *rdg = malloc(ng * 8), e;
  ref_swiglu_forward(N, I, s.gu, rh);
  ref_swiglu_backward(N, I, s.gu, s.r, rdg);
  ck_assert_msg((e = nu_err(h, rh, nh)) <= GLU_TOL, "%s: h error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(dg, rdg, ng)) <= GLU_TOL, "%s: dgu error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(glu_f, &s, s.gu, ng, dg, NU_FD_H, 200)) <= GLU_TOL, "%s: dgu vs fd %g" NU_AT, what, e,
                NU_AT_ARGS);
  /* in place: dgu over gu */
  ck_assert_msg(clt_nn_swiglu_backward(ctx, &tg, &tdh, &tg) == 0, "%s", clt_last_error());
  float *dg2 = get(ctx, &tg);
  ck_assert_msg(memcmp(dg2, dg, ng * 4) == 0, "%s: dgu in place differs", what);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(gu), free(dh), free(h), free(dg), free(s.gu), free(s.r), free(s.h), free(rh), free(rdg), free(dg2);
}

START_TEST(swiglu_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) {
    swiglu_case(tu_ctx[d], 7, 24);
    swiglu_case(tu_ctx[d], 3, 5);
    swiglu_case(tu_ctx[d], 1, 1);
  }
}
END_TEST

/* ---- rotary embeddings -------------------------------------------------------- */

typedef struct rope_state {
  int B, T, ld, nrot, D;
  const float *freq;
  double *x, *r, *y;
} rope_state;

static double rope_f(void *p) {
  rope_state *s = p;
  size_t n = (size_t)s->B * s->T * s->ld;
  memcpy(s->y, s->x, n * sizeof *s->y);
  ref_rope(s->B, s->T, s->ld, s->nrot, s->D, s->freq, 0, s->y);
  return nu_dot(s->y, s->r, n);
}

/* A rotation: each value is two products and a sum (NU_SUM_TOL(2) on
 * values of size ~1); the angles reach t radians, whose float cos and sin
 * the device may take within 4 ulp (OpenCL's bound): 1e-5 covers both
 * here (T up to 300). Values (the last K heads) stay the same bits. */
#define ROPE_TOL 1e-5

static void rope_case(clt_context *ctx, int B, int T, int H, int K, int D, const ref_rope_cfg *cfg) {
  int ld = (H + 2 * K) * D, half = D / 2;
  size_t n = (size_t)B * T * ld;
  float freq[128];
  ref_rope_inv_freq(D, cfg, freq);
  unsigned seed = (unsigned)(B * 1000 + T * 10 + D);
  float *x = nu_random(n, seed), *dy = nu_random(n, seed + 1);
  clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(B, T, ld)), tf = nu_f32(ctx, freq, NU_SHAPE(half));
  clt_tensor tdy = nu_f32(ctx, dy, NU_SHAPE(B, T, ld));
  char what[200];
  snprintf(what, sizeof what, "rope B=%d T=%d H=%d K=%d D=%d theta=%g%s on %s", B, T, H, K, D, cfg->theta,
           cfg->llama3 ? " llama3" : "", tu_name(ctx));
  ck_assert_msg(clt_nn_rope_forward(ctx, H, K, &tf, &tx) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_rope_backward(ctx, H, K, &tf, &tdy) == 0, "%s", clt_last_error());
  float *y = get(ctx, &tx), *dx = get(ctx, &tdy);
  rope_state s = {B, T, ld, H + K, D, freq, nu_to_double(x, n), nu_to_double(dy, n), malloc(n * 8)};
  double *ry = nu_to_double(x, n), e;
  ref_rope(B, T, ld, H + K, D, freq, 0, ry);
  ck_assert_msg((e = nu_err(y, ry, n)) <= ROPE_TOL, "%s: y error %g" NU_AT, what, e, NU_AT_ARGS);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = (H + K) * D; c < ld; c++) {
        size_t i = ((size_t)b * T + t) * ld + c;
        ck_assert_msg(memcmp(&y[i], &x[i], 4) == 0, "%s: value [%zu] changed", what, i);
      }
  ck_assert_msg((e = nu_fd_error(rope_f, &s, s.x, n, dx, NU_FD_H, 3 * NU_FD_POINTS)) <= ROPE_TOL,
                "%s: dx vs finite differences %g" NU_AT, what, e, NU_AT_ARGS);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(dy), free(y), free(dx), free(s.x), free(s.r), free(s.y), free(ry);
}

START_TEST(rope_matches_reference_and_finite_differences) {
  ref_rope_cfg plain = {.theta = 10000}, big = {.theta = 500000};
  ref_rope_cfg llama3 = {.theta = 500000, .llama3 = 1, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                         .original_max = 64};
  for (int d = 0; d < tu_ndev; d++) {
    rope_case(tu_ctx[d], 2, 5, 2, 1, 8, &plain);
    rope_case(tu_ctx[d], 1, 300, 4, 2, 16, &big); /* angles up to 299 radians */
    rope_case(tu_ctx[d], 2, 9, 3, 3, 6, &llama3);
    rope_case(tu_ctx[d], 1, 40, 2, 1, 32, &llama3); /* every band of llama3's: kept, smoothed, divided */
  }
}
END_TEST

/* llama3's inverse frequencies: with an original context of 64 and factors
 * 1 and 4, a wavelength above 64 is divided by 8, below 16 kept, and
 * between the two interpolated; the table has some of each at D = 32,
 * theta 10000 (wavelengths 2 pi 10000^(2i/32): 6.3, ..., 3.5e4). That
 * these are transformers' own values, tests/train/llama_check.py shows
 * end to end. */
START_TEST(rope_llama3_frequencies_are_transformers) {
  ref_rope_cfg c = {.theta = 10000, .llama3 = 1, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                    .original_max = 64};
  float f[16], plain[16];
  ref_rope_cfg p = {.theta = 10000};
  ref_rope_inv_freq(32, &c, f);
  ref_rope_inv_freq(32, &p, plain);
  int kept = 0, divided = 0, smooth = 0;
  for (int i = 0; i < 16; i++) {
    double wavelen = 2 * 3.14159265358979 / plain[i];
    if (wavelen < 16) kept++, ck_assert_msg(f[i] == plain[i], "pair %d: %.9g, want %.9g", i, f[i], plain[i]);
    else if (wavelen > 64) divided++, ck_assert_msg(f[i] == plain[i] / 8, "pair %d: %.9g, want %.9g", i, f[i], plain[i] / 8);
    else smooth++, ck_assert_msg(f[i] < plain[i] && f[i] > plain[i] / 8, "pair %d: %.9g not between", i, f[i]);
  }
  ck_assert_msg(kept && divided && smooth, "bands: %d kept, %d divided, %d smoothed", kept, divided, smooth);
}
END_TEST

/* ---- grouped-query attention -------------------------------------------------- */

typedef struct gqa_state {
  int B, T, D, H, K;
  double *qkv, *r, *y, *lse;
} gqa_state;

static double gqa_f(void *p) {
  gqa_state *s = p;
  ref_gqa_forward(s->B, s->T, s->D, s->H, s->K, s->qkv, s->y, s->lse);
  return nu_dot(s->y, s->r, (size_t)s->B * s->T * s->H * s->D);
}

/* Tolerances as test_transformer.c's attention: a score sums D products, y
 * T: NU_SUM_TOL(D + T); the backward chains GEMMs of T or D terms, and a
 * key's gradient sums its group's G heads: NU_SUM_TOL(2 G (D + T)). */
static void gqa_case(clt_context *ctx, int B, int T, int D, int H, int K) {
  int C = H * D, W = (H + 2 * K) * D, G = H / K;
  size_t nq = (size_t)B * T * W, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
  unsigned seed = (unsigned)(B * 1000 + T * 100 + D * 10 + H + K);
  float *qkv = scaled_random(nq, seed, 2.0f), *dy = nu_random(ny, seed + 1);
  clt_tensor tq = nu_f32(ctx, qkv, NU_SHAPE(B, T, W)), ty = nu_f32(ctx, NULL, NU_SHAPE(B, T, C));
  clt_tensor tl = nu_f32(ctx, NULL, NU_SHAPE(B, H, T)), tdy = nu_f32(ctx, dy, NU_SHAPE(B, T, C));
  clt_tensor tdq = nu_f32(ctx, NULL, NU_SHAPE(B, T, W));
  char what[200];
  snprintf(what, sizeof what, "attention B=%d T=%d D=%d heads=%d kv_heads=%d on %s", B, T, D, H, K, tu_name(ctx));
  int rf = clt_nn_gqa_forward(ctx, H, K, &tq, &ty, &tl);
  int rb = rf ? rf : clt_nn_gqa_backward(ctx, H, K, &tq, &ty, &tl, &tdy, &tdq);
  ck_assert_msg(rf == 0 && rb == 0, "%s: %s", what, clt_last_error());
  float *y = get(ctx, &ty), *lse = get(ctx, &tl), *dq = get(ctx, &tdq);
  gqa_state s = {B, T, D, H, K, nu_to_double(qkv, nq), nu_to_double(dy, ny), malloc(ny * 8), malloc(nl * 8)};
  double *rdq = malloc(nq * 8), e, tol = NU_SUM_TOL(D + T), btol = NU_SUM_TOL(2 * G * (D + T));
  ref_gqa_forward(B, T, D, H, K, s.qkv, s.y, s.lse);
  ck_assert_msg((e = nu_err(y, s.y, ny)) <= tol, "%s: y error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(lse, s.lse, nl)) <= tol, "%s: lse error %g" NU_AT, what, e, NU_AT_ARGS);
  ref_gqa_backward(B, T, D, H, K, s.qkv, s.r, rdq);
  ck_assert_msg((e = nu_err(dq, rdq, nq)) <= btol, "%s: dqkv error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(gqa_f, &s, s.qkv, nq, dq, NU_FD_H, 3 * NU_FD_POINTS)) <= btol,
                "%s: dqkv vs finite differences %g" NU_AT, what, e, NU_AT_ARGS);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(qkv), free(dy), free(y), free(lse), free(dq), free(s.qkv), free(s.r), free(s.y), free(s.lse), free(rdq);
}

START_TEST(gqa_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    gqa_case(ctx, 2, 5, 4, 4, 2);   /* groups of 2 */
    gqa_case(ctx, 1, 7, 8, 3, 1);   /* multi-query */
    gqa_case(ctx, 2, 24, 16, 4, 2); /* D = 16: one vector; T past a tile of 16 */
    gqa_case(ctx, 1, 33, 32, 6, 2); /* groups of 3, D = 32 as the tiny Llama's */
    gqa_case(ctx, 1, 9, 6, 2, 2);   /* kv_heads = heads: GPT's */
  }
}
END_TEST

/* kv_heads = heads is the multi-head attention, bit for bit: the same
 * kernels, one query head a group. */
START_TEST(gqa_with_as_many_kv_heads_is_multi_head_attention) {
  const int B = 2, T = 19, C = 32, H = 4;
  size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    float *qkv = scaled_random(nq, 5, 2.0f), *dy = nu_random(ny, 6);
    clt_tensor tq = nu_f32(ctx, qkv, NU_SHAPE(B, T, 3 * C)), tdy = nu_f32(ctx, dy, NU_SHAPE(B, T, C));
    clt_tensor y1 = nu_f32(ctx, NULL, NU_SHAPE(B, T, C)), l1 = nu_f32(ctx, NULL, NU_SHAPE(B, H, T));
    clt_tensor y2 = nu_f32(ctx, NULL, NU_SHAPE(B, T, C)), l2 = nu_f32(ctx, NULL, NU_SHAPE(B, H, T));
    clt_tensor d1 = nu_f32(ctx, NULL, NU_SHAPE(B, T, 3 * C)), d2 = nu_f32(ctx, NULL, NU_SHAPE(B, T, 3 * C));
    ck_assert_int_eq(clt_nn_attention_forward(ctx, H, &tq, &y1, &l1), 0);
    ck_assert_int_eq(clt_nn_attention_backward(ctx, H, &tq, &y1, &l1, &tdy, &d1), 0);
    ck_assert_int_eq(clt_nn_gqa_forward(ctx, H, H, &tq, &y2, &l2), 0);
    ck_assert_int_eq(clt_nn_gqa_backward(ctx, H, H, &tq, &y2, &l2, &tdy, &d2), 0);
    float *a = get(ctx, &y1), *b = get(ctx, &y2), *da = get(ctx, &d1), *db = get(ctx, &d2);
    ck_assert_msg(memcmp(a, b, ny * 4) == 0 && memcmp(da, db, nq * 4) == 0, "on %s: differ", tu_name(ctx));
    ck_assert_uint_eq(clt_nn_gqa_scratch_bytes(B, T, C, H, H, CLT_F32),
                      clt_nn_attention_scratch_bytes(B, T, C, H, CLT_F32));
    (void)nl;
    nu_free_all();
    free(qkv), free(dy), free(a), free(b), free(da), free(db);
  }
}
END_TEST

/* The scratch: rowsums (B H T, rounded up to 16), then the transposed
 * copies of q and dy (B H D TP each) and of k and v (B K D TP each), TP = T
 * rounded up to 16; linear in T. SmolLM2-135M at T = 2048, batch 1: 9
 * heads, 3 kv heads, D = 64. */
START_TEST(gqa_scratch_is_bounded) {
  ck_assert_uint_eq(clt_nn_gqa_scratch_bytes(1, 2048, 576, 9, 3, CLT_F32),
                    (9 * 2048 + 2 * 576 * 2048 + 2 * 192 * 2048) * 4);
  ck_assert_uint_eq(clt_nn_gqa_scratch_bytes(2, 5, 8, 4, 2, CLT_F32), (48 + 2 * 2 * 8 * 16 + 2 * 2 * 4 * 16) * 4);
  ck_assert_uint_eq(clt_nn_gqa_scratch_bytes(2, 5, 8, 4, 3, CLT_F32), 0); /* 3 does not divide 4 */
}
END_TEST

/* ---- f16 storage -------------------------------------------------------------- */

#define HALF_BUFS 64
static cl_mem half_bufs[HALF_BUFS];
static int half_nbufs;

static clt_tensor half_make(clt_context *ctx, clt_dtype dt, int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  ck_assert_int_lt(half_nbufs, HALF_BUFS);
  cl_mem b;
  ck_assert_int_eq(clt_buffer_create(ctx, (size_t)n * clt_dtype_size(dt), &b), 0);
  half_bufs[half_nbufs++] = b;
  clt_tensor t;
  ck_assert_int_eq(clt_tensor_view(b, 0, dt, ndim, shape, &t), 0);
  return t;
}
#define F32(ctx, ...) half_make((ctx), CLT_F32, NU_SHAPE(__VA_ARGS__))
#define F16(ctx, ...) half_make((ctx), CLT_F16, NU_SHAPE(__VA_ARGS__))

static void half_release(void) {
  for (int i = 0; i < half_nbufs; i++) clt_buffer_release(half_bufs[i]);
  half_nbufs = 0;
}

/* host -> t32 rounded to half (t32 then holds halves' values) and t16. */
static void halves(clt_context *ctx, const float *host, const clt_tensor *t32, const clt_tensor *t16) {
  put(ctx, t32, host);
  ck_assert_int_eq(clt_convert(ctx, t32, t16), 0);
  ck_assert_int_eq(clt_convert(ctx, t16, t32), 0);
}

/* The f16 tensor widened, and the f32 one rounded to half and widened. */
static float *widened(clt_context *ctx, const clt_tensor *t16) {
  clt_tensor w = half_make(ctx, CLT_F32, t16->ndim, t16->shape);
  ck_assert_int_eq(clt_convert(ctx, t16, &w), 0);
  return get(ctx, &w);
}
static float *rounded(clt_context *ctx, const clt_tensor *t32) {
  clt_tensor h = half_make(ctx, CLT_F16, t32->ndim, t32->shape);
  ck_assert_int_eq(clt_convert(ctx, t32, &h), 0);
  return widened(ctx, &h);
}

static void expect_same(const float *got, const float *want, size_t n, const char *what, const char *name) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(memcmp(&got[i], &want[i], 4) == 0 || (isnan(got[i]) && isnan(want[i])),
                  "%s: %s[%zu] is %.9g, want %.9g (bit for bit)", what, name, i, got[i], want[i]);
}

static void llama_half_case(clt_context *ctx) {
  enum { M = 6, D = 16, B = 2, T = 9, H = 4, K = 2, HD = 8, I = 12 };
  const int W = (H + 2 * K) * HD, C = H * HD;
  char what[160];
  snprintf(what, sizeof what, "f16 rmsnorm, swiglu, rope and attention on %s", tu_name(ctx));
  /* rmsnorm */
  float *x = scaled_random(M * D, 1, 3.0f), *w = nu_random(D, 2), *dy = scaled_random(M * D, 3, 1000.0f);
  clt_tensor x32 = F32(ctx, M, D), x16 = F16(ctx, M, D), tw = F32(ctx, D), r32 = F32(ctx, M), r16 = F32(ctx, M);
  clt_tensor y32 = F32(ctx, M, D), y16 = F16(ctx, M, D), dy32 = F32(ctx, M, D), dy16 = F16(ctx, M, D);
  clt_tensor dx32 = F32(ctx, M, D), dx16 = F16(ctx, M, D), dwa = F32(ctx, D), dwb = F32(ctx, D);
  halves(ctx, x, &x32, &x16), halves(ctx, dy, &dy32, &dy16);
  put(ctx, &tw, w), put(ctx, &dwa, w), put(ctx, &dwb, w);
  ck_assert_int_eq(clt_nn_rmsnorm_forward(ctx, 1e-5f, &x16, &tw, &y16, &r16), 0);
  ck_assert_int_eq(clt_nn_rmsnorm_forward(ctx, 1e-5f, &x32, &tw, &y32, &r32), 0);
  float *g1 = widened(ctx, &y16), *w1 = rounded(ctx, &y32), *g2 = get(ctx, &r16), *w2 = get(ctx, &r32);
  expect_same(g1, w1, M * D, what, "rmsnorm y"), expect_same(g2, w2, M, what, "rmsnorm rstd");
  ck_assert_int_eq(clt_nn_rmsnorm_backward(ctx, &x16, &tw, &r16, &dy16, &dx16, &dwa), 0);
  ck_assert_int_eq(clt_nn_rmsnorm_backward(ctx, &x32, &tw, &r32, &dy32, &dx32, &dwb), 0);
  float *g3 = widened(ctx, &dx16), *w3 = rounded(ctx, &dx32), *g4 = get(ctx, &dwa), *w4 = get(ctx, &dwb);
  expect_same(g3, w3, M * D, what, "rmsnorm dx"), expect_same(g4, w4, D, what, "rmsnorm dw");
  /* swiglu */
  float *gu = scaled_random(M * 2 * I, 4, 4.0f), *dh = scaled_random(M * I, 5, 1000.0f);
  clt_tensor gu32 = F32(ctx, M, 2 * I), gu16 = F16(ctx, M, 2 * I), h32 = F32(ctx, M, I), h16 = F16(ctx, M, I);
  clt_tensor dh32 = F32(ctx, M, I), dh16 = F16(ctx, M, I), dg32 = F32(ctx, M, 2 * I), dg16 = F16(ctx, M, 2 * I);
  halves(ctx, gu, &gu32, &gu16), halves(ctx, dh, &dh32, &dh16);
  ck_assert_int_eq(clt_nn_swiglu_forward(ctx, &gu16, &h16), 0);
  ck_assert_int_eq(clt_nn_swiglu_forward(ctx, &gu32, &h32), 0);
  ck_assert_int_eq(clt_nn_swiglu_backward(ctx, &gu16, &dh16, &dg16), 0);
  ck_assert_int_eq(clt_nn_swiglu_backward(ctx, &gu32, &dh32, &dg32), 0);
  float *g5 = widened(ctx, &h16), *w5 = rounded(ctx, &h32), *g6 = widened(ctx, &dg16), *w6 = rounded(ctx, &dg32);
  expect_same(g5, w5, M * I, what, "swiglu h"), expect_same(g6, w6, M * 2 * I, what, "swiglu dgu");
  /* rope, then attention on the rotated qkv */
  float freq[HD / 2];
  ref_rope_cfg cfg = {.theta = 10000};
  ref_rope_inv_freq(HD, &cfg, freq);
  float *qkv = scaled_random(B * T * W, 6, 2.0f), *ady = scaled_random(B * T * C, 7, 1000.0f);
  clt_tensor tf = F32(ctx, HD / 2), q32 = F32(ctx, B, T, W), q16 = F16(ctx, B, T, W);
  clt_tensor a32 = F32(ctx, B, T, C), a16 = F16(ctx, B, T, C), l32 = F32(ctx, B, H, T), l16 = F32(ctx, B, H, T);
  clt_tensor ady32 = F32(ctx, B, T, C), ady16 = F16(ctx, B, T, C), dq32 = F32(ctx, B, T, W), dq16 = F16(ctx, B, T, W);
  put(ctx, &tf, freq);
  halves(ctx, qkv, &q32, &q16), halves(ctx, ady, &ady32, &ady16);
  ck_assert_int_eq(clt_nn_rope_forward(ctx, H, K, &tf, &q16), 0);
  ck_assert_int_eq(clt_nn_rope_forward(ctx, H, K, &tf, &q32), 0);
  float *g7 = widened(ctx, &q16), *w7 = rounded(ctx, &q32);
  expect_same(g7, w7, B * T * W, what, "rope qkv");
  put(ctx, &q32, g7); /* the f32 path goes on from the values the f16 path stored */
  ck_assert_int_eq(clt_nn_gqa_forward(ctx, H, K, &q16, &a16, &l16), 0);
  ck_assert_int_eq(clt_nn_gqa_forward(ctx, H, K, &q32, &a32, &l32), 0);
  float *g8 = widened(ctx, &a16), *w8 = rounded(ctx, &a32), *g9 = get(ctx, &l16), *w9 = get(ctx, &l32);
  expect_same(g8, w8, B * T * C, what, "attention y"), expect_same(g9, w9, B * H * T, what, "attention lse");
  put(ctx, &a32, g8);
  ck_assert_int_eq(clt_nn_gqa_backward(ctx, H, K, &q16, &a16, &l16, &ady16, &dq16), 0);
  ck_assert_int_eq(clt_nn_gqa_backward(ctx, H, K, &q32, &a32, &l32, &ady32, &dq32), 0);
  float *g10 = widened(ctx, &dq16), *w10 = rounded(ctx, &dq32);
  expect_same(g10, w10, B * T * W, what, "attention dqkv");
  put(ctx, &dq32, g10);
  ck_assert_int_eq(clt_nn_rope_backward(ctx, H, K, &tf, &dq16), 0);
  ck_assert_int_eq(clt_nn_rope_backward(ctx, H, K, &tf, &dq32), 0);
  float *g11 = widened(ctx, &dq16), *w11 = rounded(ctx, &dq32);
  expect_same(g11, w11, B * T * W, what, "rope dqkv");
  half_release();
  float *all[] = {x, w, dy, g1, w1, g2, w2, g3, w3, g4, w4, gu, dh, g5, w5, g6, w6, qkv, ady, g7, w7, g8, w8, g9, w9,
                  g10, w10, g11, w11};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

START_TEST(llama_layers_in_f16_are_the_f32_results_rounded) {
  for (int d = 0; d < tu_ndev; d++) llama_half_case(tu_ctx[d]);
}
END_TEST

/* ---- errors ------------------------------------------------------------------- */

START_TEST(bad_shapes_are_named) {
  clt_context *ctx = tu_ctx[0];
  clt_tensor x = nu_f32(ctx, NULL, NU_SHAPE(4, 8)), w7 = nu_f32(ctx, NULL, NU_SHAPE(7)), w8 = nu_f32(ctx, NULL, NU_SHAPE(8));
  clt_tensor r3 = nu_f32(ctx, NULL, NU_SHAPE(3)), r4 = nu_f32(ctx, NULL, NU_SHAPE(4));
  NU_EXPECT(clt_nn_rmsnorm_forward(ctx, 1e-5f, &x, &w7, &x, &r4), CLT_ESHAPE, "rmsnorm forward", "w (7) f32",
            "x's last dimension, 8");
  NU_EXPECT(clt_nn_rmsnorm_forward(ctx, 1e-5f, &x, &w8, &x, &r3), CLT_ESHAPE, "rmsnorm forward", "rstd (3) f32",
            "one element per row of x, 4");
  NU_EXPECT(clt_nn_rmsnorm_forward(ctx, 0.0f, &x, &w8, &x, &r4), CLT_EINVAL, "rmsnorm forward", "eps 0");
  NU_EXPECT(clt_nn_rmsnorm_backward(ctx, &x, &w8, &r4, &x, &x, &w7), CLT_ESHAPE, "rmsnorm backward", "dw (7) f32");

  clt_tensor gu = nu_f32(ctx, NULL, NU_SHAPE(4, 10)), h = nu_f32(ctx, NULL, NU_SHAPE(4, 6));
  NU_EXPECT(clt_nn_swiglu_forward(ctx, &gu, &h), CLT_ESHAPE, "swiglu forward", "gu (4, 10) f32", "h (4, 6) f32",
            "[gate | up]");

  clt_tensor qkv = nu_f32(ctx, NULL, NU_SHAPE(2, 5, 32)), f2 = nu_f32(ctx, NULL, NU_SHAPE(2));
  clt_tensor f3 = nu_f32(ctx, NULL, NU_SHAPE(3)), y = nu_f32(ctx, NULL, NU_SHAPE(2, 5, 16));
  clt_tensor lse = nu_f32(ctx, NULL, NU_SHAPE(2, 4, 5));
  /* (4 + 2 x 2) heads of 4 = 32 */
  NU_EXPECT(clt_nn_rope_forward(ctx, 4, 2, &f3, &qkv), CLT_ESHAPE, "rope forward", "inv_freq (3) f32",
            "(4 + 2 x 2) heads of 2 x 3 values");
  NU_EXPECT(clt_nn_rope_forward(ctx, 4, 3, &f2, &qkv), CLT_ESHAPE, "rope forward", "kv_heads must divide heads");
  NU_EXPECT(clt_nn_gqa_forward(ctx, 4, 3, &qkv, &y, &lse), CLT_ESHAPE, "attention forward", "kv_heads = 3 must divide "
            "heads = 4");
  NU_EXPECT(clt_nn_gqa_forward(ctx, 4, 1, &qkv, &y, &lse), CLT_ESHAPE, "attention forward", "qkv (2, 5, 32) f32",
            "qkv must be (2, 5, 24): 4 query and 2 x 1 key and value heads of 4");
  NU_EXPECT(clt_nn_gqa_backward(ctx, 4, 2, &qkv, &y, &lse, &y, &y), CLT_ESHAPE, "attention backward",
            "dqkv (2, 5, 16) f32");
  nu_free_all();
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn_llama");
  NU_ADD_CASE(s, "rmsnorm", rmsnorm_matches_reference_and_finite_differences);
  NU_ADD_CASE(s, "swiglu", swiglu_matches_reference_and_finite_differences);
  NU_ADD_CASE(s, "rope", rope_matches_reference_and_finite_differences, rope_llama3_frequencies_are_transformers);
  NU_ADD_CASE(s, "attention", gqa_matches_reference_and_finite_differences,
              gqa_with_as_many_kv_heads_is_multi_head_attention, gqa_scratch_is_bounded);
  NU_ADD_CASE(s, "half", llama_layers_in_f16_are_the_f32_results_rounded);
  NU_ADD_CASE(s, "errors", bad_shapes_are_named);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
