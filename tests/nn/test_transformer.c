/*
 * test_transformer.c: the transformer's layers of src/nn/ on every device (PoCL
 * and rusticl): token embedding, learned position embedding, the causal
 * multi-head self-attention core, and the residual adds, with activations
 * stored as f32 and as f16.
 *
 * Each forward is checked against the plain-C reference (src/ref/ref_gpt.c,
 * in double), each backward against the reference backward AND against
 * central finite differences of f = sum(y * r) computed with the reference
 * forward in double, r being the upstream gradient dy (nnutil.h has the
 * step and why it is exact enough). Accumulated gradients (dwte, dwpe)
 * start from random values; outputs start as NaN so a missed element
 * shows; guard elements around every f32 tensor catch stray writes.
 *
 * Where the kernel's float arithmetic is fixed (gathers, single adds, the
 * embedding gradient's documented order) the result must be the host's
 * float computation bit for bit; elsewhere tolerances are NU_SUM_TOL of
 * the terms a result sums, as each test says.
 *
 * f16: as in test_half_gemm.c, inputs are rounded to half on the
 * device; the f16 path must give exactly the f32 path's results on the
 * same values, rounded to nearest even once (f32 outputs: the same bits).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/common.h"
#include "nnutil.h"
#include "ref/ref_gpt.h"

/* ---- helpers ----------------------------------------------------------------- */

static float *get(clt_context *ctx, const clt_tensor *t) {
  float *h = malloc((size_t)clt_tensor_numel(t) * sizeof *h);
  nu_get(ctx, t, h);
  return h;
}

static void put(clt_context *ctx, const clt_tensor *t, const float *host) {
  ck_assert_msg(clt_tensor_upload(ctx, t, host, clt_tensor_bytes(t)) == 0, "%s", clt_last_error());
}

/* got and want hold the same bits (NaN matching any NaN). */
static void expect_bits(const float *got, const float *want, size_t n, const char *what, const char *name) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(memcmp(&got[i], &want[i], sizeof(float)) == 0 || (isnan(got[i]) && isnan(want[i])),
                  "%s: %s[%zu] is %.9g, want %.9g (bit for bit)", what, name, i, got[i], want[i]);
}

/* n values in [-8, 8) with full 24-bit mantissas of varied magnitudes, so
 * that float sums of them round and their order shows in the bits
 * (nu_random's multiples of 2^-15 add up exactly). */
static float *full_random(size_t n, unsigned seed) {
  float *x = nu_random(n, seed);
  for (size_t i = 0; i < n; i++) x[i] = x[i] * 3.14159274f * (float)(1 << (i * 7 % 4)) + 1e-3f * (float)(i % 13);
  return x;
}

static float *copy_floats(const float *x, size_t n) {
  float *c = malloc(n * sizeof *c);
  memcpy(c, x, n * sizeof *c);
  return c;
}

/* ---- token embedding ------------------------------------------------------------ */

typedef struct emb_state {
  int N, V, C;
  const float *tokens;
  double *wte, *r, *y;
} emb_state;

static double emb_f(void *p) {
  emb_state *s = p;
  ref_embedding_forward(s->N, s->V, s->C, s->tokens, s->wte, s->y);
  return nu_dot(s->y, s->r, (size_t)s->N * s->C);
}

/* Forward: a gather, so y is wte's rows bit for bit (NaN rows for bad
 * tokens). Backward: the kernel adds each token's rows in increasing row
 * order into one float, as ref_embedding_backward_f32 does, so the two
 * agree bit for bit, on a second run too; against the double reference and
 * finite differences each element sums at most N rows: NU_SUM_TOL(N). */
static void embedding_case(clt_context *ctx, int N, int V, int C, const float *tokens, int fd) {
  size_t ny = (size_t)N * C, nw = (size_t)V * C;
  unsigned seed = (unsigned)(N * 100 + V * 10 + C);
  float *wte = nu_random(nw, seed), *dy = full_random(ny, seed + 1), *dw0 = full_random(nw, seed + 2);
  clt_tensor ttok = nu_f32(ctx, tokens, NU_SHAPE(N)), twte = nu_f32(ctx, wte, NU_SHAPE(V, C));
  clt_tensor ty = nu_f32(ctx, NULL, NU_SHAPE(N, C)), tdy = nu_f32(ctx, dy, NU_SHAPE(N, C));
  clt_tensor tdw = nu_f32(ctx, dw0, NU_SHAPE(V, C));
  char what[160];
  snprintf(what, sizeof what, "embedding N=%d V=%d C=%d on %s", N, V, C, tu_name(ctx));

  ck_assert_msg(clt_nn_embedding_forward(ctx, &ttok, &twte, &ty) == 0, "%s", clt_last_error());
  float *y = get(ctx, &ty), *want_y = malloc(ny * sizeof *want_y);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++)
      want_y[(size_t)i * C + c] = ref_token_ok(tokens[i], V) ? wte[(size_t)tokens[i] * C + c] : NAN;
  expect_bits(y, want_y, ny, what, "y");

  ck_assert_msg(clt_nn_embedding_backward(ctx, &ttok, &tdy, &tdw) == 0, "%s", clt_last_error());
  float *dw = get(ctx, &tdw), *want_dw = copy_floats(dw0, nw);
  ref_embedding_backward_f32(N, V, C, tokens, dy, want_dw);
  expect_bits(dw, want_dw, nw, what, "dwte");
  /* the same start gives the same bits again */
  put(ctx, &tdw, dw0);
  ck_assert_msg(clt_nn_embedding_backward(ctx, &ttok, &tdy, &tdw) == 0, "%s", clt_last_error());
  float *dw2 = get(ctx, &tdw);
  expect_bits(dw2, dw, nw, what, "dwte (second run)");

  emb_state s = {N, V, C, tokens, nu_to_double(wte, nw), nu_to_double(dy, ny), malloc(ny * sizeof(double))};
  double *rdw = malloc(nw * sizeof *rdw), e;
  ref_embedding_backward(N, V, C, tokens, s.r, rdw);
  float *added = nu_added(dw, dw0, nw);
  ck_assert_msg((e = nu_err(added, rdw, nw)) <= NU_SUM_TOL(N), "%s: dwte vs reference %g" NU_AT, what, e, NU_AT_ARGS);
  if (fd)
    ck_assert_msg((e = nu_fd_error(emb_f, &s, s.wte, nw, added, NU_FD_H, NU_FD_POINTS)) <= NU_SUM_TOL(N),
                  "%s: dwte vs finite differences %g" NU_AT, what, e, NU_AT_ARGS);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(wte), free(dy), free(dw0), free(y), free(want_y), free(dw), free(want_dw), free(dw2), free(s.wte), free(s.r);
  free(s.y), free(rdw), free(added);
}

START_TEST(embedding_matches_reference_and_finite_differences) {
  /* repeated tokens, the first and the last id */
  static const float few[10] = {3, 7, 3, 0, 10, 3, 7, 1, 3, 5};
  /* rows past the link kernel's 256-item tile, only four distinct ids */
  float many[300];
  for (int i = 0; i < 300; i++) many[i] = (float)((i * i) % 4);
  for (int d = 0; d < tu_ndev; d++) {
    embedding_case(tu_ctx[d], 10, 11, 8, few, 1);
    embedding_case(tu_ctx[d], 300, 5, 3, many, 1);
  }
}
END_TEST

/* A token that is not an integer in [0, V) gives a NaN row forward and
 * adds nothing backward; the good rows are unaffected. */
START_TEST(embedding_bad_tokens_give_nan_rows) {
  const float tokens[7] = {2, -1, 11, 2.5f, NAN, 4, 2};
  for (int d = 0; d < tu_ndev; d++) embedding_case(tu_ctx[d], 7, 11, 8, tokens, 0);
}
END_TEST

/* ---- position embedding ---------------------------------------------------------- */

typedef struct pos_state {
  int B, T, C;
  double *x, *wpe, *r, *y;
} pos_state;

static double pos_f(void *p) {
  pos_state *s = p;
  ref_posembed_forward(s->B, s->T, s->C, s->x, s->wpe, s->y);
  return nu_dot(s->y, s->r, (size_t)s->B * s->T * s->C);
}

/* One float add per element, forward (bits of the host's add); backward
 * adds dy[0], dy[1], ... into dwpe in that order (bits of the host's
 * loop), rows T.. untouched; against finite differences each element sums
 * B terms. */
static void posembed_case(clt_context *ctx, int B, int T, int Tmax, int C) {
  size_t n = (size_t)B * T * C, nw = (size_t)Tmax * C;
  unsigned seed = (unsigned)(B * 1000 + T * 100 + C);
  float *x = full_random(n, seed), *wpe = full_random(nw, seed + 1), *dy = full_random(n, seed + 2);
  float *dw0 = full_random(nw, seed + 3);
  clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(B, T, C)), twpe = nu_f32(ctx, wpe, NU_SHAPE(Tmax, C));
  clt_tensor ty = nu_f32(ctx, NULL, NU_SHAPE(B, T, C)), tdy = nu_f32(ctx, dy, NU_SHAPE(B, T, C));
  clt_tensor tdw = nu_f32(ctx, dw0, NU_SHAPE(Tmax, C));
  char what[160];
  snprintf(what, sizeof what, "posembed B=%d T=%d Tmax=%d C=%d on %s", B, T, Tmax, C, tu_name(ctx));

  ck_assert_msg(clt_nn_posembed_forward(ctx, &tx, &twpe, &ty) == 0, "%s", clt_last_error());
  float *y = get(ctx, &ty), *want_y = malloc(n * sizeof *want_y);
  for (size_t e = 0; e < n; e++) want_y[e] = x[e] + wpe[e % ((size_t)T * C)];
  expect_bits(y, want_y, n, what, "y");
  /* in place, y = x */
  ck_assert_msg(clt_nn_posembed_forward(ctx, &tx, &twpe, &tx) == 0, "%s", clt_last_error());
  float *yin = get(ctx, &tx);
  expect_bits(yin, want_y, n, what, "y in place");

  ck_assert_msg(clt_nn_posembed_backward(ctx, &tdy, &tdw) == 0, "%s", clt_last_error());
  float *dw = get(ctx, &tdw), *want_dw = copy_floats(dw0, nw);
  for (int b = 0; b < B; b++)
    for (size_t e = 0; e < (size_t)T * C; e++) want_dw[e] += dy[(size_t)b * T * C + e];
  expect_bits(dw, want_dw, nw, what, "dwpe");

  pos_state s = {B, T, C, nu_to_double(x, n), nu_to_double(wpe, nw), nu_to_double(dy, n), malloc(n * sizeof(double))};
  float *added = nu_added(dw, dw0, (size_t)T * C);
  double e = nu_fd_error(pos_f, &s, s.wpe, (size_t)T * C, added, NU_FD_H, NU_FD_POINTS);
  ck_assert_msg(e <= NU_SUM_TOL(B), "%s: dwpe vs finite differences %g" NU_AT, what, e, NU_AT_ARGS);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(wpe), free(dy), free(dw0), free(y), free(want_y), free(yin), free(dw), free(want_dw), free(s.x);
  free(s.wpe), free(s.r), free(s.y), free(added);
}

START_TEST(posembed_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) {
    posembed_case(tu_ctx[d], 2, 5, 7, 8); /* T < Tmax: rows 5, 6 stay */
    posembed_case(tu_ctx[d], 3, 4, 4, 5);
  }
}
END_TEST

/* ---- residual --------------------------------------------------------------------- */

typedef struct res_state {
  size_t n;
  double *x, *skip, *r, *y;
} res_state;

static double res_f(void *p) {
  res_state *s = p;
  ref_add(s->n, s->x, s->skip, s->y);
  return nu_dot(s->y, s->r, s->n);
}

/* One float add per element: bits of the host's. The gradient of y = x +
 * skip by x is dy, which clt_nn_accumulate adds into a zero g: checked
 * against finite differences (one term each, NU_SUM_TOL(1)). */
static void residual_case(clt_context *ctx, int rows, int cols) {
  size_t n = (size_t)rows * cols;
  unsigned seed = (unsigned)(rows * 100 + cols);
  float *x = full_random(n, seed), *sk = full_random(n, seed + 1), *dy = full_random(n, seed + 2);
  float *g0 = full_random(n, seed + 3), *want = malloc(n * sizeof *want), *zeros = calloc(n, sizeof *zeros);
  clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(rows, cols)), ts = nu_f32(ctx, sk, NU_SHAPE(n));
  clt_tensor ty = nu_f32(ctx, NULL, NU_SHAPE(rows, cols)), tdy = nu_f32(ctx, dy, NU_SHAPE(rows, cols));
  clt_tensor tg = nu_f32(ctx, g0, NU_SHAPE(rows, cols));
  char what[160];
  snprintf(what, sizeof what, "residual (%d, %d) on %s", rows, cols, tu_name(ctx));

  for (size_t i = 0; i < n; i++) want[i] = x[i] + sk[i];
  ck_assert_msg(clt_nn_residual_forward(ctx, &tx, &ts, &ty) == 0, "%s", clt_last_error());
  float *y = get(ctx, &ty);
  expect_bits(y, want, n, what, "y");
  ck_assert_msg(clt_nn_residual_forward(ctx, &tx, &ts, &ts) == 0, "%s", clt_last_error()); /* y = skip */
  float *y2 = get(ctx, &ts);
  expect_bits(y2, want, n, what, "y over skip");
  put(ctx, &ts, sk);
  ck_assert_msg(clt_nn_residual_forward(ctx, &tx, &ts, &tx) == 0, "%s", clt_last_error()); /* y = x */
  float *y3 = get(ctx, &tx);
  expect_bits(y3, want, n, what, "y over x");

  for (size_t i = 0; i < n; i++) want[i] = g0[i] + dy[i];
  ck_assert_msg(clt_nn_accumulate(ctx, &tdy, &tg) == 0, "%s", clt_last_error());
  float *g = get(ctx, &tg);
  expect_bits(g, want, n, what, "g + dy");

  put(ctx, &tg, zeros);
  ck_assert_msg(clt_nn_accumulate(ctx, &tdy, &tg) == 0, "%s", clt_last_error());
  float *dx = get(ctx, &tg);
  res_state s = {n, nu_to_double(x, n), nu_to_double(sk, n), nu_to_double(dy, n), malloc(n * sizeof(double))};
  double e = nu_fd_error(res_f, &s, s.x, n, dx, NU_FD_H, NU_FD_POINTS);
  ck_assert_msg(e <= NU_SUM_TOL(1), "%s: dx vs finite differences %g" NU_AT, what, e, NU_AT_ARGS);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(sk), free(dy), free(g0), free(want), free(zeros), free(y), free(y2), free(y3), free(g), free(dx);
  free(s.x), free(s.skip), free(s.r), free(s.y);
}

START_TEST(residual_adds_are_exact) {
  for (int d = 0; d < tu_ndev; d++) {
    residual_case(tu_ctx[d], 10, 8);
    residual_case(tu_ctx[d], 1, 1001); /* not a multiple of any work-group */
  }
}
END_TEST

/* ---- attention -------------------------------------------------------------------- */

typedef struct attn_state {
  int B, T, C, H;
  double *qkv, *r, *y, *lse;
} attn_state;

static double attn_f(void *p) {
  attn_state *s = p;
  ref_attention_forward(s->B, s->T, s->C, s->H, s->qkv, s->y, s->lse);
  return nu_dot(s->y, s->r, (size_t)s->B * s->T * s->C);
}

/* Tolerances. A score sums D products; a probability is an exp of a score
 * minus the row's lse, a sum of up to T exps; y sums T products of those:
 * NU_SUM_TOL(D + T) for y and lse. The backward chains three more GEMMs of
 * T or D terms (dP, the rowsum, then dQ / dK / dV), each adding its share:
 * NU_SUM_TOL(2 (D + T)). qkv values are in [-2, 2), so the scores, up to
 * 4 sqrt(D), make softmaxes far from uniform (and errors in the mask or
 * the scale show as O(1) differences). */
#define ATTN_SCALE_INPUT 2.0f

static float *attn_input(size_t n, unsigned seed) {
  float *x = nu_random(n, seed);
  for (size_t i = 0; i < n; i++) x[i] *= ATTN_SCALE_INPUT;
  return x;
}

static void attention_case(clt_context *ctx, int B, int T, int C, int H) {
  size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
  int D = C / H;
  unsigned seed = (unsigned)(B * 1000 + T * 100 + C * 10 + H);
  float *qkv = attn_input(nq, seed), *dy = nu_random(ny, seed + 1);
  clt_tensor tq = nu_f32(ctx, qkv, NU_SHAPE(B, T, 3 * C)), ty = nu_f32(ctx, NULL, NU_SHAPE(B, T, C));
  clt_tensor tl = nu_f32(ctx, NULL, NU_SHAPE(B, H, T)), tdy = nu_f32(ctx, dy, NU_SHAPE(B, T, C));
  clt_tensor tdq = nu_f32(ctx, NULL, NU_SHAPE(B, T, 3 * C));
  char what[200];
  snprintf(what, sizeof what, "attention B=%d T=%d C=%d heads=%d on %s", B, T, C, H, tu_name(ctx));

  int rf = clt_nn_attention_forward(ctx, H, &tq, &ty, &tl);
  int rb = rf ? rf : clt_nn_attention_backward(ctx, H, &tq, &ty, &tl, &tdy, &tdq);
  ck_assert_msg(rf == 0 && rb == 0, "%s: %s", what, clt_last_error());
  float *y = get(ctx, &ty), *lse = get(ctx, &tl), *dq = get(ctx, &tdq);

  attn_state s = {B, T, C, H, nu_to_double(qkv, nq), nu_to_double(dy, ny), malloc(ny * sizeof(double)),
                  malloc(nl * sizeof(double))};
  double *rdq = malloc(nq * sizeof *rdq), e, tol = NU_SUM_TOL(D + T), btol = NU_SUM_TOL(2 * (D + T));
  ref_attention_forward(B, T, C, H, s.qkv, s.y, s.lse);
  ck_assert_msg((e = nu_err(y, s.y, ny)) <= tol, "%s: y error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(lse, s.lse, nl)) <= tol, "%s: lse error %g" NU_AT, what, e, NU_AT_ARGS);
  ref_attention_backward(B, T, C, H, s.qkv, s.r, rdq);
  ck_assert_msg((e = nu_err(dq, rdq, nq)) <= btol, "%s: dqkv error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(attn_f, &s, s.qkv, nq, dq, NU_FD_H, 3 * NU_FD_POINTS)) <= btol,
                "%s: dqkv vs finite differences %g" NU_AT, what, e, NU_AT_ARGS);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(qkv), free(dy), free(y), free(lse), free(dq), free(s.qkv), free(s.r), free(s.y), free(s.lse), free(rdq);
}

/* The kernels hold a head's D floats as vectors of 16, 8, 4, 2 or 1 lanes
 * (the largest dividing D) and take rows in tiles of 4 x 16 (PoCL) or 1 x 4:
 * every width is here, with sequences shorter than a tile, ending inside
 * one and spanning several, and one or several work-groups per head. */
START_TEST(attention_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    attention_case(ctx, 2, 5, 8, 2);  /* the small transformer: D = 4 */
    attention_case(ctx, 1, 1, 4, 1);  /* T = 1: p = 1, y = v, no gradient for q and k */
    attention_case(ctx, 2, 7, 6, 6);  /* D = 1; more heads than samples */
    attention_case(ctx, 3, 6, 12, 2); /* D = 6: lanes of 2 */
    attention_case(ctx, 1, 200, 4, 1);
    attention_case(ctx, 1, 300, 8, 1);
    attention_case(ctx, 1, 300, 4, 1); /* rows longer than a 256-item work-group */
    attention_case(ctx, 2, 24, 96, 3); /* D = 32 as the tiny GPT's: 2 vectors of 16 */
    attention_case(ctx, 2, 35, 16, 2); /* D = 8; T = 2 tiles of 16 and 3 rows */
    attention_case(ctx, 1, 33, 48, 3); /* D = 16: 1 vector of 16; T ends one row into a tile */
  }
}
END_TEST

/* Query i sees keys j <= i only: scaling the q, k and v of positions >= t0
 * of sample 1 by 1000 (scores of 1e6, which would swamp any unmasked row)
 * leaves every output of sample 0 and of positions < t0 the same bits,
 * and changes position t0 (so the change is real). */
START_TEST(attention_is_causal) {
  const int B = 2, T = 6, C = 8, H = 2;
  size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    float *qkv = attn_input(nq, 77);
    clt_tensor tq = nu_f32(ctx, qkv, NU_SHAPE(B, T, 3 * C)), ty = nu_f32(ctx, NULL, NU_SHAPE(B, T, C));
    clt_tensor tl = nu_f32(ctx, NULL, NU_SHAPE(B, H, T));
    ck_assert_msg(clt_nn_attention_forward(ctx, H, &tq, &ty, &tl) == 0, "%s", clt_last_error());
    float *y0 = get(ctx, &ty), *l0 = get(ctx, &tl);
    for (int t0 = 1; t0 < T; t0 += 3) {
      float *q1 = copy_floats(qkv, nq);
      for (size_t e = ((size_t)T + t0) * 3 * C; e < nq; e++) q1[e] *= 1000.0f;
      put(ctx, &tq, q1);
      ck_assert_msg(clt_nn_attention_forward(ctx, H, &tq, &ty, &tl) == 0, "%s", clt_last_error());
      float *y1 = get(ctx, &ty), *l1 = get(ctx, &tl);
      char what[160];
      snprintf(what, sizeof what, "attention with sample 1 changed from position %d on %s", t0, tu_name(ctx));
      expect_bits(y1, y0, ((size_t)T + t0) * C, what, "y before the change");
      expect_bits(l1, l0, (size_t)H * T, what, "lse of sample 0");
      for (int h = 0; h < H; h++)
        expect_bits(l1 + (size_t)(H + h) * T, l0 + (size_t)(H + h) * T, (size_t)t0, what, "lse before the change");
      int changed = 0;
      for (int c = 0; c < C; c++) changed |= y1[((size_t)T + t0) * C + c] != y0[((size_t)T + t0) * C + c];
      ck_assert_msg(changed, "%s: y at the changed position did not change", what);
      for (size_t i = 0; i < ny; i++) ck_assert_msg(isfinite(y1[i]), "%s: y[%zu] = %g", what, i, y1[i]);
      for (size_t i = 0; i < nl; i++) ck_assert_msg(isfinite(l1[i]), "%s: lse[%zu] = %g", what, i, l1[i]);
      free(q1), free(y1), free(l1);
    }
    nu_check_guards(ctx, "attention causal");
    nu_free_all();
    free(qkv), free(y0), free(l0);
  }
}
END_TEST

/* What the model layer reserves: one float per sample, head and query
 * (the backward's rowsums, rounded up to 16), then the transposed f32
 * copies of q, k, v and dy that the tiles read, T rounded up to 16; of
 * either dtype; linear in T, nothing of size T x T. GPT-2 small (T = 1024,
 * 12 heads) at batch 8: 96 MiB, shared by all layers. */
START_TEST(attention_scratch_is_bounded) {
  const size_t gpt2 = (8 * 12 * 1024 + 4 * 8 * 1024 * 768) * 4;
  ck_assert_uint_eq(clt_nn_attention_scratch_bytes(8, 1024, 768, 12, CLT_F32), gpt2);
  ck_assert_uint_eq(clt_nn_attention_scratch_bytes(8, 1024, 768, 12, CLT_F16), gpt2);
  ck_assert_uint_eq(clt_nn_attention_scratch_bytes(4, 2048, 1024, 16, CLT_F32),
                    (4 * 16 * 2048 + 4 * 4 * 2048 * 1024) * 4);
  ck_assert_uint_eq(clt_nn_attention_scratch_bytes(2, 5, 8, 2, CLT_F32), (32 + 4 * 2 * 16 * 8) * 4);
  ck_assert_uint_eq(clt_nn_attention_scratch_bytes(0, 5, 8, 2, CLT_F32), 0);
  ck_assert_uint_eq(clt_nn_embedding_scratch_bytes(8192), 8192 * 4);
}
END_TEST

/* ---- f16 storage -------------------------------------------------------------------- */

/* f32 and f16 device tensors without guards, released by half_release. */
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

/* The f16 tensor t16 widened (through a new f32 tensor like it). */
static float *widened(clt_context *ctx, const clt_tensor *t16) {
  clt_tensor w = half_make(ctx, CLT_F32, t16->ndim, t16->shape);
  ck_assert_int_eq(clt_convert(ctx, t16, &w), 0);
  return get(ctx, &w);
}

/* The f32 tensor t32 rounded to half and widened back. */
static float *rounded(clt_context *ctx, const clt_tensor *t32) {
  clt_tensor h = half_make(ctx, CLT_F16, t32->ndim, t32->shape);
  ck_assert_int_eq(clt_convert(ctx, t32, &h), 0);
  return widened(ctx, &h);
}

/* Embedding, position embedding and the residual adds in f16. */
static void small_layers_half_case(clt_context *ctx) {
  enum { N = 12, V = 11, C = 8, B = 3, T = 4, TMAX = 6 };
  static const float tokens[N] = {1, 5, 1, 10, 0, 5, 5, 3, 1, 9, 2, 5};
  char what[160];
  snprintf(what, sizeof what, "f16 embedding, posembed and residual on %s", tu_name(ctx));
  float *wte = nu_random(V * C, 1), *dy = nu_random(N * C, 2), *dw0 = nu_random(V * C, 3);
  for (int i = 0; i < N * C; i++) dy[i] *= 1000; /* gradients are loss-scaled */
  clt_tensor ttok = F32(ctx, N), twte = F32(ctx, V, C), y32 = F32(ctx, N, C), y16 = F16(ctx, N, C);
  clt_tensor dy32 = F32(ctx, N, C), dy16 = F16(ctx, N, C), dwa = F32(ctx, V, C), dwb = F32(ctx, V, C);
  put(ctx, &ttok, tokens), put(ctx, &twte, wte), put(ctx, &dwa, dw0), put(ctx, &dwb, dw0);
  halves(ctx, dy, &dy32, &dy16);
  ck_assert_msg(clt_nn_embedding_forward(ctx, &ttok, &twte, &y16) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_embedding_forward(ctx, &ttok, &twte, &y32) == 0, "%s", clt_last_error());
  float *g1 = widened(ctx, &y16), *w1 = rounded(ctx, &y32);
  expect_bits(g1, w1, N * C, what, "embedding y");
  ck_assert_msg(clt_nn_embedding_backward(ctx, &ttok, &dy16, &dwa) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_embedding_backward(ctx, &ttok, &dy32, &dwb) == 0, "%s", clt_last_error());
  float *g2 = get(ctx, &dwa), *w2 = get(ctx, &dwb);
  expect_bits(g2, w2, V * C, what, "dwte");

  float *x = nu_random(B * T * C, 4), *wpe = nu_random(TMAX * C, 5), *pdy = nu_random(B * T * C, 6);
  clt_tensor x32 = F32(ctx, B, T, C), x16 = F16(ctx, B, T, C), twpe = F32(ctx, TMAX, C);
  clt_tensor p32 = F32(ctx, B, T, C), p16 = F16(ctx, B, T, C), pdy32 = F32(ctx, B, T, C), pdy16 = F16(ctx, B, T, C);
  clt_tensor dpa = F32(ctx, TMAX, C), dpb = F32(ctx, TMAX, C);
  halves(ctx, x, &x32, &x16), halves(ctx, pdy, &pdy32, &pdy16);
  put(ctx, &twpe, wpe), put(ctx, &dpa, wpe), put(ctx, &dpb, wpe);
  ck_assert_msg(clt_nn_posembed_forward(ctx, &x16, &twpe, &p16) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_posembed_forward(ctx, &x32, &twpe, &p32) == 0, "%s", clt_last_error());
  float *g3 = widened(ctx, &p16), *w3 = rounded(ctx, &p32);
  expect_bits(g3, w3, B * T * C, what, "posembed y");
  ck_assert_msg(clt_nn_posembed_backward(ctx, &pdy16, &dpa) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_posembed_backward(ctx, &pdy32, &dpb) == 0, "%s", clt_last_error());
  float *g4 = get(ctx, &dpa), *w4 = get(ctx, &dpb);
  expect_bits(g4, w4, TMAX * C, what, "dwpe");

  /* residual: y = x + posembed's y; g = x + dy */
  clt_tensor r32 = F32(ctx, B, T, C), r16 = F16(ctx, B, T, C);
  ck_assert_msg(clt_nn_residual_forward(ctx, &x16, &p16, &r16) == 0, "%s", clt_last_error());
  float *p16w = widened(ctx, &p16);
  put(ctx, &p32, p16w); /* the f32 path adds the values the f16 path stored */
  ck_assert_msg(clt_nn_residual_forward(ctx, &x32, &p32, &r32) == 0, "%s", clt_last_error());
  float *g5 = widened(ctx, &r16), *w5 = rounded(ctx, &r32);
  expect_bits(g5, w5, B * T * C, what, "residual y");
  ck_assert_msg(clt_nn_accumulate(ctx, &pdy16, &x16) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_accumulate(ctx, &pdy32, &x32) == 0, "%s", clt_last_error());
  float *g6 = widened(ctx, &x16), *w6 = rounded(ctx, &x32);
  expect_bits(g6, w6, B * T * C, what, "g + dy");

  NU_EXPECT(clt_nn_residual_forward(ctx, &x16, &p32, &r16), CLT_ESHAPE, "residual forward", "x (3, 4, 8) f16",
            "skip (3, 4, 8) f32");
  NU_EXPECT(clt_nn_posembed_forward(ctx, &x16, &twpe, &p32), CLT_ESHAPE, "posembed forward", "y (3, 4, 8) f32",
            "x (3, 4, 8) f16");
  half_release();
  free(wte), free(dy), free(dw0), free(g1), free(w1), free(g2), free(w2), free(x), free(wpe), free(pdy), free(g3);
  free(w3), free(g4), free(w4), free(p16w), free(g5), free(w5), free(g6), free(w6);
}

START_TEST(small_layers_in_f16_are_the_f32_results_rounded) {
  for (int d = 0; d < tu_ndev; d++) small_layers_half_case(tu_ctx[d]);
}
END_TEST

/* The f16 variant of the fused kernels loads qkv (y, dy) as floats and
 * does the f32 variant's float arithmetic, so its results are the f32
 * path's on the same half values rounded once: exactly, not within a
 * tolerance. lse is f32 on both: the same bits. The
 * backward's f32 path is given y as the f16 forward stored it. */
static void attention_half_case(clt_context *ctx, int B, int T, int C, int H) {
  size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
  char what[200];
  snprintf(what, sizeof what, "f16 attention B=%d T=%d C=%d heads=%d on %s", B, T, C, H, tu_name(ctx));
  float *qkv = attn_input(nq, 91), *dy = nu_random(ny, 92);
  for (size_t i = 0; i < ny; i++) dy[i] *= 1000; /* loss-scaled */
  clt_tensor q32 = F32(ctx, B, T, 3 * C), q16 = F16(ctx, B, T, 3 * C), y32 = F32(ctx, B, T, C);
  clt_tensor y16 = F16(ctx, B, T, C), l32 = F32(ctx, B, H, T), l16 = F32(ctx, B, H, T);
  clt_tensor dy32 = F32(ctx, B, T, C), dy16 = F16(ctx, B, T, C), dq32 = F32(ctx, B, T, 3 * C);
  clt_tensor dq16 = F16(ctx, B, T, 3 * C);
  halves(ctx, qkv, &q32, &q16), halves(ctx, dy, &dy32, &dy16);
  ck_assert_msg(clt_nn_attention_forward(ctx, H, &q16, &y16, &l16) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_attention_forward(ctx, H, &q32, &y32, &l32) == 0, "%s", clt_last_error());
  float *gy = widened(ctx, &y16), *wy = rounded(ctx, &y32), *gl = get(ctx, &l16), *wl = get(ctx, &l32);
  expect_bits(gy, wy, ny, what, "y");
  expect_bits(gl, wl, nl, what, "lse");
  put(ctx, &y32, gy);
  ck_assert_msg(clt_nn_attention_backward(ctx, H, &q16, &y16, &l16, &dy16, &dq16) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_attention_backward(ctx, H, &q32, &y32, &l32, &dy32, &dq32) == 0, "%s", clt_last_error());
  float *gd = widened(ctx, &dq16), *wd = rounded(ctx, &dq32);
  expect_bits(gd, wd, nq, what, "dqkv");

  NU_EXPECT(clt_nn_attention_forward(ctx, H, &q16, &y32, &l32), CLT_ESHAPE, "attention forward", "qkv", "f16", "f32");
  NU_EXPECT(clt_nn_attention_backward(ctx, H, &q16, &y16, &l16, &dy32, &dq16), CLT_ESHAPE, "attention backward",
            "dy", "f32");
  half_release();
  free(qkv), free(dy), free(gy), free(wy), free(gl), free(wl), free(gd), free(wd);
}

START_TEST(attention_in_f16_is_the_f32_result_rounded) {
  for (int d = 0; d < tu_ndev; d++) {
    attention_half_case(tu_ctx[d], 2, 5, 8, 2);
    attention_half_case(tu_ctx[d], 3, 9, 12, 3);
    attention_half_case(tu_ctx[d], 2, 24, 96, 3); /* D = 32: vectors of 8 */
  }
}
END_TEST

/* ---- errors ------------------------------------------------------------------------- */

START_TEST(bad_shapes_are_named) {
  clt_context *ctx = tu_ctx[0];
  clt_tensor tok = nu_f32(ctx, NULL, NU_SHAPE(10)), tok_i = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(10));
  clt_tensor wte = nu_f32(ctx, NULL, NU_SHAPE(11, 8)), y = nu_f32(ctx, NULL, NU_SHAPE(10, 8));
  clt_tensor y9 = nu_f32(ctx, NULL, NU_SHAPE(9, 8)), y7 = nu_f32(ctx, NULL, NU_SHAPE(10, 7));
  NU_EXPECT(clt_nn_embedding_forward(ctx, &tok, &wte, &y9), CLT_ESHAPE, "embedding forward", "tokens (10) f32",
            "wte (11, 8) f32", "y (9, 8) f32", "y must be (10, 8)");
  NU_EXPECT(clt_nn_embedding_backward(ctx, &tok, &y7, &wte), CLT_ESHAPE, "embedding backward", "dy (10, 7) f32",
            "dy must be (10, 8)");
  NU_EXPECT(clt_nn_embedding_forward(ctx, &tok_i, &wte, &y), CLT_ESHAPE, "embedding forward",
            "tokens must be a 1-D f32 tensor (N) of token ids, got (10) i32");

  clt_tensor x = nu_f32(ctx, NULL, NU_SHAPE(2, 6, 8)), wpe5 = nu_f32(ctx, NULL, NU_SHAPE(5, 8));
  clt_tensor wpe7 = nu_f32(ctx, NULL, NU_SHAPE(7, 7)), x2 = nu_f32(ctx, NULL, NU_SHAPE(12, 8));
  NU_EXPECT(clt_nn_posembed_forward(ctx, &x, &wpe5, &x), CLT_ESHAPE, "posembed forward", "x (2, 6, 8) f32",
            "wpe (5, 8) f32", "T = 6 positions, but wpe holds only 5");
  NU_EXPECT(clt_nn_posembed_backward(ctx, &x, &wpe7), CLT_ESHAPE, "posembed backward", "dwpe (7, 7) f32",
            "dy has 8 channels, dwpe 7");
  NU_EXPECT(clt_nn_posembed_forward(ctx, &x2, &wpe5, &x2), CLT_ESHAPE, "posembed forward",
            "x must be a 3-D f32 tensor (B, T, C), got (12, 8) f32");

  clt_tensor qkv = nu_f32(ctx, NULL, NU_SHAPE(2, 5, 24)), ay = nu_f32(ctx, NULL, NU_SHAPE(2, 5, 8));
  clt_tensor lse = nu_f32(ctx, NULL, NU_SHAPE(2, 2, 5)), lse3 = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 5));
  clt_tensor q25 = nu_f32(ctx, NULL, NU_SHAPE(2, 5, 25)), ay4 = nu_f32(ctx, NULL, NU_SHAPE(2, 4, 8));
  clt_tensor dq = nu_f32(ctx, NULL, NU_SHAPE(2, 5, 12));
  NU_EXPECT(clt_nn_attention_forward(ctx, 3, &qkv, &ay, &lse3), CLT_ESHAPE, "attention forward", "qkv (2, 5, 24) f32",
            "heads = 3 does not divide C = 8");
  NU_EXPECT(clt_nn_attention_forward(ctx, 0, &qkv, &ay, &lse), CLT_ESHAPE, "attention forward",
            "heads = 0 must be at least 1");
  NU_EXPECT(clt_nn_attention_forward(ctx, 2, &q25, &ay, &lse), CLT_ESHAPE, "qkv (2, 5, 25) f32",
            "last dimension 25 is not 3C");
  NU_EXPECT(clt_nn_attention_forward(ctx, 2, &qkv, &ay4, &lse), CLT_ESHAPE, "y (2, 4, 8) f32", "y must be (2, 5, 8)");
  NU_EXPECT(clt_nn_attention_forward(ctx, 2, &qkv, &ay, &lse3), CLT_ESHAPE, "lse (2, 3, 5) f32",
            "lse must be (2, 2, 5)");
  NU_EXPECT(clt_nn_attention_backward(ctx, 2, &qkv, &ay, &lse, &ay, &dq), CLT_ESHAPE, "attention backward",
            "dqkv (2, 5, 12) f32", "qkv (2, 5, 24) f32");
  NU_EXPECT(clt_nn_attention_backward(ctx, 2, &qkv, &ay, &lse, &ay4, &qkv), CLT_ESHAPE, "attention backward",
            "dy (2, 4, 8) f32");

  clt_tensor v10 = nu_f32(ctx, NULL, NU_SHAPE(10)), v11 = nu_f32(ctx, NULL, NU_SHAPE(11));
  NU_EXPECT(clt_nn_residual_forward(ctx, &v10, &v11, &v10), CLT_ESHAPE, "residual forward", "x (10) f32",
            "skip (11) f32", "differ in size");
  NU_EXPECT(clt_nn_accumulate(ctx, &v11, &v10), CLT_ESHAPE, "accumulate", "dy (11) f32", "g (10) f32");
  NU_EXPECT(clt_nn_accumulate(ctx, &tok_i, &v10), CLT_ESHAPE, "accumulate", "dy must be a f32 tensor");
  nu_free_all();
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn_gpt");
  NU_ADD_CASE(s, "embedding", embedding_matches_reference_and_finite_differences, embedding_bad_tokens_give_nan_rows);
  NU_ADD_CASE(s, "posembed", posembed_matches_reference_and_finite_differences);
  NU_ADD_CASE(s, "residual", residual_adds_are_exact);
  NU_ADD_CASE(s, "attention", attention_matches_reference_and_finite_differences,
              attention_is_causal, attention_scratch_is_bounded);
  NU_ADD_CASE(s, "half", small_layers_in_f16_are_the_f32_results_rounded, attention_in_f16_is_the_f32_result_rounded);
  NU_ADD_CASE(s, "errors", bad_shapes_are_named);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
