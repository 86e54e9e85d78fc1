/*
 * test_dense.c: the dense layer kernels of src/nn/ on every device (PoCL and
 * rusticl): linear, the activations, dropout, layernorm, softmax
 * cross-entropy, the regression losses (MSE, L1, Huber) and flatten. Each
 * forward is checked against the plain-C reference (src/ref/ref_nn.c, in
 * double), each backward against the reference backward AND against central finite differences of
 * f = sum(y * r) computed with the reference forward in double, where r is
 * the upstream gradient dy. Parameter gradients start from random values
 * so accumulation (+=) is checked too; outputs start as NaN so a missed
 * element shows; guard elements around every tensor catch stray writes.
 * The shape errors are checked to name the op and the shapes.
 *
 * Finite differences: h = 1e-5 on inputs of size ~1 in double. Truncation
 * (h^2 f''') and rounding (1e-16 |f| / h) both stay below 1e-8, so the
 * difference is exact to far better than float32; piecewise-linear ops
 * (relu, leaky_relu) are exact as long as no kink lies within h, which
 * nu_random guarantees (values are multiples of 2^-15, zeros moved).
 *
 * Tolerances are NU_SUM_TOL (nnutil.h, with the reasoning) of the number
 * of terms each result sums, unless a test says otherwise.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnutil.h"

/* ---- linear ---------------------------------------------------------------- */

typedef struct lin_state {
  int N, in, out;
  double *x, *w, *b, *r, *y;
} lin_state;

static double lin_f(void *p) {
  lin_state *s = p;
  ref_linear_forward(s->N, s->in, s->out, s->x, s->w, s->b, s->y);
  return nu_dot(s->y, s->r, (size_t)s->N * s->out);
}

static void linear_case(clt_context *ctx, int N, int in, int out, int bias, int want_dx) {
  size_t nx = (size_t)N * in, nw = (size_t)out * in, ny = (size_t)N * out;
  unsigned seed = (unsigned)(N * 1000 + in * 10 + out);
  float *x = nu_random(nx, seed), *w = nu_random(nw, seed + 1), *b = nu_random(out, seed + 2);
  float *dy = nu_random(ny, seed + 3), *dw0 = nu_random(nw, seed + 4), *db0 = nu_random(out, seed + 5);
  clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(N, in)), tw = nu_f32(ctx, w, NU_SHAPE(out, in));
  clt_tensor tb = nu_f32(ctx, b, NU_SHAPE(out)), ty = nu_f32(ctx, NULL, NU_SHAPE(N, out));
  clt_tensor tdy = nu_f32(ctx, dy, NU_SHAPE(N, out)), tdx = nu_f32(ctx, NULL, NU_SHAPE(N, in));
  clt_tensor tdw = nu_f32(ctx, dw0, NU_SHAPE(out, in)), tdb = nu_f32(ctx, db0, NU_SHAPE(out));

  ck_assert_msg(clt_nn_linear_forward(ctx, &tx, &tw, bias ? &tb : NULL, &ty) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_linear_backward(ctx, &tx, &tw, &tdy, want_dx ? &tdx : NULL, &tdw, bias ? &tdb : NULL) == 0, "%s",
                clt_last_error());
  float *y = malloc(ny * 4), *gdx = malloc(nx * 4), *gdw = malloc(nw * 4), *gdb = malloc(out * 4);
  nu_get(ctx, &ty, y);
  nu_get(ctx, &tdx, gdx);
  nu_get(ctx, &tdw, gdw);
  nu_get(ctx, &tdb, gdb);

  lin_state s = {N,
                 in,
                 out,
                 nu_to_double(x, nx),
                 nu_to_double(w, nw),
                 bias ? nu_to_double(b, out) : NULL,
                 nu_to_double(dy, ny),
                 malloc(ny * 8)};
  double *ry = malloc(ny * 8), *rdx = malloc(nx * 8), *rdw = malloc(nw * 8), *rdb = malloc(out * 8);
  ref_linear_forward(N, in, out, s.x, s.w, s.b, ry);
  ref_linear_backward(N, in, out, s.x, s.w, s.r, rdx, rdw, rdb);
  double *want_dw = nu_plus(dw0, rdw, nw), *want_db = nu_plus(db0, rdb, out);
  char what[160];
  snprintf(what, sizeof what, "linear N=%d in=%d out=%d bias=%d dx=%d on %s", N, in, out, bias, want_dx, tu_name(ctx));

  double e;
  ck_assert_msg((e = nu_err(y, ry, ny)) <= NU_SUM_TOL(in), "%s: forward error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdw, want_dw, nw)) <= NU_SUM_TOL(N), "%s: dw error %g" NU_AT, what, e, NU_AT_ARGS);
  if (bias)
    ck_assert_msg((e = nu_err(gdb, want_db, out)) <= NU_SUM_TOL(N), "%s: db error %g" NU_AT, what, e, NU_AT_ARGS);
  else
    for (int i = 0; i < out; i++) ck_assert_msg(gdb[i] == db0[i], "%s: db touched without a bias", what);
  if (want_dx)
    ck_assert_msg((e = nu_err(gdx, rdx, nx)) <= NU_SUM_TOL(out), "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  else
    for (size_t i = 0; i < nx; i++) ck_assert_msg(isnan(gdx[i]), "%s: dx written though NULL", what);

  /* finite differences of sum(y * dy) */
  float *g_w = nu_added(gdw, dw0, nw), *g_b = nu_added(gdb, db0, out);
  ck_assert_msg((e = nu_fd_error(lin_f, &s, s.w, nw, g_w, NU_FD_H, NU_FD_POINTS)) <= NU_SUM_TOL(N),
                "%s: dw vs fd %g" NU_AT, what, e, NU_AT_ARGS);
  if (bias)
    ck_assert_msg((e = nu_fd_error(lin_f, &s, s.b, out, g_b, NU_FD_H, NU_FD_POINTS)) <= NU_SUM_TOL(N),
                  "%s: db vs fd %g" NU_AT, what, e, NU_AT_ARGS);
  if (want_dx)
    ck_assert_msg((e = nu_fd_error(lin_f, &s, s.x, nx, gdx, NU_FD_H, NU_FD_POINTS)) <= NU_SUM_TOL(out),
                  "%s: dx vs fd %g" NU_AT, what, e, NU_AT_ARGS);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(w), free(b), free(dy), free(dw0), free(db0), free(y), free(gdx), free(gdw), free(gdb);
  free(s.x), free(s.w), free(s.b), free(s.r), free(s.y), free(ry), free(rdx), free(rdw), free(rdb);
  free(want_dw), free(want_db), free(g_w), free(g_b);
}

/* Tolerance NU_SUM_TOL(k), k the terms each result sums: in for y, out for dx,
 * N for dw and db. Shapes: all ones, odd sizes, no bias, no dx, and the
 * Fashion-MNIST classifier's 64 x 128 -> 10. */
START_TEST(linear_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) {
    linear_case(tu_ctx[d], 1, 1, 1, 1, 1);
    linear_case(tu_ctx[d], 4, 7, 3, 1, 1);
    linear_case(tu_ctx[d], 33, 65, 17, 0, 1);
    linear_case(tu_ctx[d], 2, 300, 10, 1, 0); /* a first layer: no dx */
    linear_case(tu_ctx[d], 64, 128, 10, 1, 1);
    linear_case(tu_ctx[d], 9, 5, 24, 1, 1); /* out a multiple of 8: the bias gradient 8 channels an item */
  }
}
END_TEST

/* ---- activations --------------------------------------------------------- */

typedef struct act_state {
  int act;
  double alpha;
  size_t n;
  double *x, *r, *y;
} act_state;

static double act_f(void *p) {
  act_state *s = p;
  ref_act_forward(s->act, s->alpha, s->n, s->x, s->y);
  return nu_dot(s->y, s->r, s->n);
}

/* Forward and backward are one transcendental function or two of one
 * input: OpenCL allows tanh and exp a few ulp, and 1 - y^2 or y (1 - y)
 * loses a little more near saturation; 1e-5 relative covers that with
 * room, while a wrong formula (e.g. erf-GELU instead of tanh-GELU, ~1e-3)
 * or a wrong element does not pass. */
#define ACT_TOL 1e-5

static void act_case(clt_context *ctx, clt_nn_act act, size_t n) {
  const float alpha = 0.1f;
  float *x = nu_random(n, (unsigned)(n + 17 * act)), *dy = nu_random(n, (unsigned)(n + 3));
  for (size_t i = 0; i < n; i++) x[i] *= 4.0f; /* [-4, 4): the curved part of every activation */
  if (n >= 100) {                              /* and saturation, where exp overflows */
    x[10] = 100.0f, x[11] = -100.0f, x[12] = 30.0f, x[13] = -30.0f, x[14] = 88.7f, x[15] = -88.7f;
  }
  clt_tensor tx = nu_f32(ctx, x, NU_SHAPE((int64_t)n)), ty = nu_f32(ctx, NULL, NU_SHAPE((int64_t)n));
  clt_tensor tdy = nu_f32(ctx, dy, NU_SHAPE((int64_t)n)), tdx = nu_f32(ctx, NULL, NU_SHAPE((int64_t)n));
  ck_assert_msg(clt_nn_act_forward(ctx, act, alpha, &tx, &ty) == 0, "%s", clt_last_error());
  int need_x = clt_nn_act_backward_needs_input(act);
  ck_assert_msg(clt_nn_act_backward(ctx, act, alpha, need_x ? &tx : NULL, need_x ? NULL : &ty, &tdy, &tdx) == 0, "%s",
                clt_last_error());
  float *y = malloc(n * 4), *gdx = malloc(n * 4);
  nu_get(ctx, &ty, y);
  nu_get(ctx, &tdx, gdx);

  act_state s = {act, alpha, n, nu_to_double(x, n), nu_to_double(dy, n), malloc(n * 8)};
  double *ry = malloc(n * 8), *rdx = malloc(n * 8);
  ref_act_forward(act, (double)alpha, n, s.x, ry);
  ref_act_backward(act, (double)alpha, n, s.x, s.r, rdx);
  char what[128];
  snprintf(what, sizeof what, "%s n=%zu on %s", clt_nn_act_name(act), n, tu_name(ctx));
  double e;
  ck_assert_msg((e = nu_err(y, ry, n)) <= ACT_TOL, "%s: forward error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdx, rdx, n)) <= ACT_TOL, "%s: backward error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(act_f, &s, s.x, n, gdx, NU_FD_H, 200)) <= ACT_TOL, "%s: dx vs fd %g" NU_AT, what, e,
                NU_AT_ARGS);

  /* In place: y = act(x) over x, then dx = dy act' over dy. */
  if (!need_x) {
    ck_assert_int_eq(clt_nn_act_forward(ctx, act, alpha, &tx, &tx), 0);
    ck_assert_int_eq(clt_nn_act_backward(ctx, act, alpha, NULL, &tx, &tdy, &tdy), 0);
    float *y2 = malloc(n * 4), *dx2 = malloc(n * 4);
    nu_get(ctx, &tx, y2);
    nu_get(ctx, &tdy, dx2);
    ck_assert_msg(memcmp(y2, y, n * 4) == 0 && memcmp(dx2, gdx, n * 4) == 0, "%s: in place differs", what);
    free(y2), free(dx2);
  }
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(dy), free(y), free(gdx), free(s.x), free(s.r), free(s.y), free(ry), free(rdx);
}

START_TEST(activations_match_reference_and_finite_differences) {
  static const size_t sizes[] = {1, 37, 1000, 1024}; /* 16 divides 1024: PoCL's GELU and SiLU take 16 an item */
  for (int d = 0; d < tu_ndev; d++)
    for (int a = CLT_NN_RELU; a <= CLT_NN_SILU; a++)
      for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) act_case(tu_ctx[d], (clt_nn_act)a, sizes[i]);
}
END_TEST

/* At x = 0 the derivatives of relu and leaky_relu are conventions, the
 * ones PyTorch uses: relu'(0) = 0 (from y > 0), leaky_relu'(0) = alpha
 * (from x > 0). Exact values, so exact comparisons. */
START_TEST(activation_derivatives_at_zero_follow_pytorch) {
  const float x[4] = {0.0f, -0.0f, 2.0f, -2.0f}, dy[4] = {1, 1, 1, 1};
  const float relu[4] = {0, 0, 1, 0}, leaky[4] = {0.25f, 0.25f, 1, 0.25f};
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(4)), ty = nu_f32(ctx, NULL, NU_SHAPE(4));
    clt_tensor tdy = nu_f32(ctx, dy, NU_SHAPE(4)), tdx = nu_f32(ctx, NULL, NU_SHAPE(4));
    float got[4];
    ck_assert_int_eq(clt_nn_act_forward(ctx, CLT_NN_RELU, 0, &tx, &ty), 0);
    ck_assert_int_eq(clt_nn_act_backward(ctx, CLT_NN_RELU, 0, NULL, &ty, &tdy, &tdx), 0);
    nu_get(ctx, &tdx, got);
    for (int i = 0; i < 4; i++) ck_assert_msg(got[i] == relu[i], "relu'(%g) = %g on %s", x[i], got[i], tu_name(ctx));
    ck_assert_int_eq(clt_nn_act_backward(ctx, CLT_NN_LEAKY_RELU, 0.25f, &tx, NULL, &tdy, &tdx), 0);
    nu_get(ctx, &tdx, got);
    for (int i = 0; i < 4; i++)
      ck_assert_msg(got[i] == leaky[i], "leaky_relu'(%g) = %g on %s", x[i], got[i], tu_name(ctx));
    nu_free_all();
  }
}
END_TEST

/* ---- dropout --------------------------------------------------------------- */

/* Random123's tests/kat_vectors, the three philox4x32 10 lines. */
START_TEST(philox_reference_matches_known_answers) {
  static const uint32_t kat[3][10] = {{0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
                                       0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
                                       0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int i = 0; i < 3; i++) {
    uint32_t out[4];
    ref_philox4x32_10(kat[i], kat[i] + 4, out);
    for (int j = 0; j < 4; j++) ck_assert_msg(out[j] == kat[i][6 + j], "vector %d word %d: %08x", i, j, out[j]);
  }
}
END_TEST

typedef struct drop_state {
  float p;
  uint64_t seed, step, base;
  size_t n;
  double *x, *r, *y;
} drop_state;

static double drop_f(void *p) {
  drop_state *s = p;
  ref_dropout(s->p, s->seed, s->step, s->base, s->n, s->x, s->y);
  return nu_dot(s->y, s->r, s->n);
}

/* Dropout is one float multiplication by a mask that is an integer
 * function of (seed, step, index): results must equal the reference BIT
 * FOR BIT, and so be the same on every device. */
START_TEST(dropout_masks_are_bitwise_the_reference_on_every_device) {
  static const size_t sizes[] = {1, 7, 1000, 4099};
  static const float ps[] = {0.0f, 0.25f, 0.5f, 0.9f};
  const uint64_t seed = 0x0123456789abcdefULL, step = 0x100000002ULL;
  for (size_t si = 0; si < 4; si++)
    for (size_t pi = 0; pi < 4; pi++)
      for (uint64_t base = 0; base <= 3; base += 3) {
        size_t n = sizes[si];
        float p = ps[pi];
        float *x = nu_random(n, (unsigned)n), *dy = nu_random(n, (unsigned)n + 1);
        float *want = malloc(n * 4), *want_dx = malloc(n * 4), *got = malloc(n * 4), *first = malloc(n * 4);
        ref_dropout_f32(p, seed, step, base, n, x, want);
        ref_dropout_f32(p, seed, step, base, n, dy, want_dx);
        for (int d = 0; d < tu_ndev; d++) {
          clt_context *ctx = tu_ctx[d];
          clt_tensor tx = nu_f32(ctx, x, NU_SHAPE((int64_t)n)), ty = nu_f32(ctx, NULL, NU_SHAPE((int64_t)n));
          clt_tensor tdy = nu_f32(ctx, dy, NU_SHAPE((int64_t)n)), tdx = nu_f32(ctx, NULL, NU_SHAPE((int64_t)n));
          ck_assert_msg(clt_nn_dropout_forward(ctx, p, seed, step, base, &tx, &ty) == 0, "%s", clt_last_error());
          ck_assert_msg(clt_nn_dropout_backward(ctx, p, seed, step, base, &tdy, &tdx) == 0, "%s", clt_last_error());
          nu_get(ctx, &ty, got);
          ck_assert_msg(memcmp(got, want, n * 4) == 0,
                        "dropout forward n=%zu p=%g base=%llu on %s differs from the "
                        "reference",
                        n, (double)p, (unsigned long long)base, tu_name(ctx));
          if (d == 0)
            memcpy(first, got, n * 4);
          else
            ck_assert_msg(memcmp(got, first, n * 4) == 0, "dropout differs between devices");
          nu_get(ctx, &tdx, got);
          ck_assert_msg(memcmp(got, want_dx, n * 4) == 0, "dropout backward n=%zu p=%g on %s: not the forward's mask",
                        n, (double)p, tu_name(ctx));
          nu_check_guards(ctx, "dropout");
          nu_free_all();
        }
        if (n >= 1000) { /* the gradient is that of the forward, by finite differences */
          drop_state s = {p, seed, step, base, n, nu_to_double(x, n), nu_to_double(dy, n), malloc(n * 8)};
          double e = nu_fd_error(drop_f, &s, s.x, n, want_dx, NU_FD_H, NU_FD_POINTS);
          ck_assert_msg(e <= 1e-6, "dropout p=%g: dx vs fd %g" NU_AT, (double)p, e, NU_AT_ARGS);
          free(s.x), free(s.r), free(s.y);
        }
        if (n == 4099) { /* kept fraction within 5 sigma of 1 - p */
          size_t kept = 0;
          for (size_t i = 0; i < n; i++) kept += want[i] != 0.0f;
          double mean = n * (1.0 - p), sigma = sqrt(n * p * (1.0 - p));
          ck_assert_msg(fabs(kept - mean) <= 5 * sigma + 1e-9, "p=%g kept %zu of %zu", (double)p, kept, n);
        }
        free(x), free(dy), free(want), free(want_dx), free(got), free(first);
      }
}
END_TEST

/* The keep test is (word >> 8) >= round(p * 2^24): choosing p = k / 2^24
 * with k the top 24 bits of an element's own word puts that element exactly
 * on the threshold, where it must be kept (and a > instead of >= would
 * drop it). */
START_TEST(dropout_keeps_an_element_exactly_at_the_threshold) {
  const uint64_t seed = 99, step = 5;
  const float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (uint64_t e = 0; e < 8; e++) {
    uint32_t ctr[4] = {(uint32_t)(e >> 2), 0, (uint32_t)step, 0}, key[2] = {(uint32_t)seed, 0}, r[4];
    ref_philox4x32_10(ctr, key, r);
    uint32_t k = r[e & 3] >> 8;
    if (k == 0 || k >= (1u << 24) - 1) continue; /* p must stay in (0, 1) */
    float p = (float)k / 16777216.0f;            /* exact: k has at most 24 bits */
    ck_assert_uint_eq(ref_dropout_threshold(p), k);
    ck_assert(ref_dropout_keep(seed, step, e, k));
    float want[8], got[8];
    ref_dropout_f32(p, seed, step, 0, 8, x, want);
    ck_assert(want[e] != 0.0f);
    for (int d = 0; d < tu_ndev; d++) {
      clt_context *ctx = tu_ctx[d];
      clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(8)), ty = nu_f32(ctx, NULL, NU_SHAPE(8));
      ck_assert_int_eq(clt_nn_dropout_forward(ctx, p, seed, step, 0, &tx, &ty), 0);
      nu_get(ctx, &ty, got);
      ck_assert_msg(memcmp(got, want, sizeof got) == 0, "element %d at the threshold on %s: %g, want %g", (int)e,
                    tu_name(ctx), got[e], want[e]);
      nu_free_all();
    }
  }
}
END_TEST

/* The mask depends on the global index only: two replicas each holding
 * half of a batch, passing their first global index as index_base, draw
 * exactly the mask one device draws for the whole batch; another step
 * draws a different mask. */
START_TEST(dropout_split_by_index_base_equals_whole) {
  const size_t n = 1001, half = 501;
  float *x = nu_random(n, 5), *whole = malloc(n * 4), *split = malloc(n * 4), *other = malloc(n * 4);
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    clt_tensor tx = nu_f32(ctx, x, NU_SHAPE((int64_t)n)), ty = nu_f32(ctx, NULL, NU_SHAPE((int64_t)n));
    ck_assert_int_eq(clt_nn_dropout_forward(ctx, 0.5f, 42, 7, 1000, &tx, &ty), 0);
    nu_get(ctx, &ty, whole);
    clt_tensor xa, xb, ya, yb;
    int64_t na = (int64_t)half, nb = (int64_t)(n - half);
    ck_assert_int_eq(clt_tensor_view(tx.buf, tx.offset, CLT_F32, 1, &na, &xa), 0);
    ck_assert_int_eq(clt_tensor_view(tx.buf, tx.offset + half * 4, CLT_F32, 1, &nb, &xb), 0);
    ck_assert_int_eq(clt_tensor_view(ty.buf, ty.offset, CLT_F32, 1, &na, &ya), 0);
    ck_assert_int_eq(clt_tensor_view(ty.buf, ty.offset + half * 4, CLT_F32, 1, &nb, &yb), 0);
    ck_assert_int_eq(clt_nn_dropout_forward(ctx, 0.5f, 42, 7, 1000 + half, &xb, &yb), 0);
    ck_assert_int_eq(clt_nn_dropout_forward(ctx, 0.5f, 42, 7, 1000, &xa, &ya), 0);
    nu_get(ctx, &ty, split);
    ck_assert_msg(memcmp(whole, split, n * 4) == 0, "split dropout differs on %s", tu_name(ctx));
    ck_assert_int_eq(clt_nn_dropout_forward(ctx, 0.5f, 42, 8, 1000, &tx, &ty), 0);
    nu_get(ctx, &ty, other);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += (whole[i] == 0.0f) != (other[i] == 0.0f);
    ck_assert_msg(differ > n / 4, "step 8 repeats step 7's mask (%zu of %zu differ)", differ, n);
    /* in place */
    ck_assert_int_eq(clt_nn_dropout_forward(ctx, 0.5f, 42, 7, 1000, &tx, &tx), 0);
    nu_get(ctx, &tx, split);
    ck_assert_msg(memcmp(whole, split, n * 4) == 0, "in-place dropout differs on %s", tu_name(ctx));
    nu_free_all();
  }
  free(x), free(whole), free(split), free(other);
}
END_TEST

/* ---- layernorm ------------------------------------------------------------- */

typedef struct ln_state {
  int M, D;
  double eps;
  double *x, *g, *b, *r, *y;
} ln_state;

static double ln_f(void *p) {
  ln_state *s = p;
  ref_layernorm_forward(s->M, s->D, s->eps, s->x, s->g, s->b, s->y, NULL, NULL);
  return nu_dot(s->y, s->r, (size_t)s->M * s->D);
}

/* Rows of D reduce D terms twice (mean, variance) and the gradients of
 * gamma and beta sum M terms: SUM_TOL of the larger. */
static void layernorm_case(clt_context *ctx, int ndim, const int64_t *shape, float shift) {
  int D = (int)shape[ndim - 1], M = 1;
  for (int i = 0; i < ndim - 1; i++) M *= (int)shape[i];
  size_t n = (size_t)M * D;
  const float eps = 1e-5f;
  float *x = nu_random(n, (unsigned)n), *g = nu_random(D, 3), *b = nu_random(D, 4), *dy = nu_random(n, 5);
  float *dg0 = nu_random(D, 6), *db0 = nu_random(D, 7);
  for (size_t i = 0; i < n; i++) x[i] += shift;
  for (int i = 0; i < D; i++) g[i] = 1.0f + 0.5f * g[i];
  clt_tensor tx = nu_f32(ctx, x, ndim, shape), ty = nu_f32(ctx, NULL, ndim, shape);
  clt_tensor tg = nu_f32(ctx, g, NU_SHAPE(D)), tb = nu_f32(ctx, b, NU_SHAPE(D));
  clt_tensor tmean = nu_f32(ctx, NULL, NU_SHAPE(M)), trstd = nu_f32(ctx, NULL, NU_SHAPE(M));
  clt_tensor tdy = nu_f32(ctx, dy, ndim, shape), tdx = nu_f32(ctx, NULL, ndim, shape);
  clt_tensor tdg = nu_f32(ctx, dg0, NU_SHAPE(D)), tdb = nu_f32(ctx, db0, NU_SHAPE(D));
  ck_assert_msg(clt_nn_layernorm_forward(ctx, eps, &tx, &tg, &tb, &ty, &tmean, &trstd) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_layernorm_backward(ctx, &tx, &tg, &tmean, &trstd, &tdy, &tdx, &tdg, &tdb) == 0, "%s",
                clt_last_error());
  float *y = malloc(n * 4), *mean = malloc(M * 4), *rstd = malloc(M * 4), *gdx = malloc(n * 4);
  float *gdg = malloc(D * 4), *gdb = malloc(D * 4);
  nu_get(ctx, &ty, y), nu_get(ctx, &tmean, mean), nu_get(ctx, &trstd, rstd);
  nu_get(ctx, &tdx, gdx), nu_get(ctx, &tdg, gdg), nu_get(ctx, &tdb, gdb);

  ln_state s = {
      M, D, eps, nu_to_double(x, n), nu_to_double(g, D), nu_to_double(b, D), nu_to_double(dy, n), malloc(n * 8)};
  double *ry = malloc(n * 8), *rmean = malloc(M * 8), *rrstd = malloc(M * 8), *rdx = malloc(n * 8);
  double *rdg = malloc(D * 8), *rdb = malloc(D * 8);
  ref_layernorm_forward(M, D, eps, s.x, s.g, s.b, ry, rmean, rrstd);
  ref_layernorm_backward(M, D, s.x, s.g, rmean, rrstd, s.r, rdx, rdg, rdb);
  double *want_dg = nu_plus(dg0, rdg, D), *want_db = nu_plus(db0, rdb, D);
  char what[128];
  snprintf(what, sizeof what, "layernorm M=%d D=%d shift=%g on %s", M, D, (double)shift, tu_name(ctx));
  double e, tol = NU_SUM_TOL(D > M ? D : M);
  ck_assert_msg((e = nu_err(y, ry, n)) <= tol, "%s: y error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(mean, rmean, M)) <= tol, "%s: mean error %g" NU_AT, what, e, NU_AT_ARGS);
  /* rstd = 1/sqrt(var + eps) is 316 for D = 1; relative error then */
  for (int m = 0; m < M; m++)
    ck_assert_msg(fabs(rstd[m] - rrstd[m]) <= tol * rrstd[m], "%s: rstd[%d] %g vs %g", what, m, rstd[m], rrstd[m]);
  ck_assert_msg((e = nu_err(gdx, rdx, n)) <= tol, "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdg, want_dg, D)) <= tol, "%s: dgamma error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdb, want_db, D)) <= tol, "%s: dbeta error %g" NU_AT, what, e, NU_AT_ARGS);
  float *g_g = nu_added(gdg, dg0, D), *g_b = nu_added(gdb, db0, D);
  ck_assert_msg((e = nu_fd_error(ln_f, &s, s.x, n, gdx, NU_FD_H, NU_FD_POINTS)) <= tol, "%s: dx vs fd %g" NU_AT, what,
                e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(ln_f, &s, s.g, D, g_g, NU_FD_H, NU_FD_POINTS)) <= tol, "%s: dgamma vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(ln_f, &s, s.b, D, g_b, NU_FD_H, NU_FD_POINTS)) <= tol, "%s: dbeta vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  /* in place: dx over dy gives the same bits (dgamma and dbeta accumulate again, unchecked) */
  ck_assert_int_eq(clt_nn_layernorm_backward(ctx, &tx, &tg, &tmean, &trstd, &tdy, &tdy, &tdg, &tdb), 0);
  float *dx2 = malloc(n * 4);
  nu_get(ctx, &tdy, dx2);
  ck_assert_msg(memcmp(dx2, gdx, n * 4) == 0, "%s: in-place backward differs", what);
  free(dx2);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(g), free(b), free(dy), free(dg0), free(db0), free(y), free(mean), free(rstd), free(gdx), free(gdg);
  free(gdb), free(s.x), free(s.g), free(s.b), free(s.r), free(s.y), free(ry), free(rmean), free(rrstd), free(rdx);
  free(rdg), free(rdb), free(want_dg), free(want_db), free(g_g), free(g_b);
}

START_TEST(layernorm_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) {
    layernorm_case(tu_ctx[d], NU_SHAPE(4, 10), 0.0f);
    layernorm_case(tu_ctx[d], NU_SHAPE(2, 3, 33), 3.0f); /* |mean| > std: the variance must be two-pass */
    layernorm_case(tu_ctx[d], NU_SHAPE(3, 300), 0.0f);   /* rows wider than a work-group */
    layernorm_case(tu_ctx[d], NU_SHAPE(5, 1), 0.0f);     /* D = 1: y = beta, zero gradient for x */
    layernorm_case(tu_ctx[d], NU_SHAPE(3, 64), 2.0f);    /* D a multiple of 8: rows read as vectors */
  }
}
END_TEST

/* ---- softmax cross-entropy ------------------------------------------------- */

typedef struct xent_state {
  int N, C, ignore;
  double *z;
  int32_t *labels;
  double *losses;
} xent_state;

static double xent_f(void *p) {
  xent_state *s = p;
  double loss;
  int correct;
  ref_softmax_xent(s->N, s->C, s->z, s->labels, s->ignore, s->losses, &loss, &correct, NULL);
  return loss;
}

/* Per row: a sum of C exponentials, a log and a difference, so NU_SUM_TOL(C)
 * for losses and gradients; the batch loss adds N more terms. Rows whose
 * logits are ~1e30 are compared relatively (the tolerance is relative to
 * 1 + |want|) but not differentiated numerically: a step of 1e-5 vanishes
 * next to 1e30 even in double. Rows labelled `ignore` must be exactly 0. */
static void xent_case(clt_context *ctx, int N, int C, const float *z, const int32_t *labels, int ignore, float scale,
                      int fd, int inplace) {
  size_t n = (size_t)N * C;
  clt_tensor tz = nu_f32(ctx, z, NU_SHAPE(N, C)), tl = nu_tensor(ctx, CLT_I32, labels, NU_SHAPE(N));
  clt_tensor tdz = inplace ? tz : nu_f32(ctx, NULL, NU_SHAPE(N, C)), tls = nu_f32(ctx, NULL, NU_SHAPE(N));
  clt_tensor tloss = nu_f32(ctx, NULL, NU_SHAPE(1)), tcorrect = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(1));
  ck_assert_msg(clt_nn_softmax_xent(ctx, &tz, &tl, ignore, scale, &tdz, &tls, &tloss, &tcorrect) == 0, "%s",
                clt_last_error());
  float *dz = malloc(n * 4), *losses = malloc(N * 4), loss, loss2;
  int32_t correct;
  nu_get(ctx, &tdz, dz), nu_get(ctx, &tls, losses), nu_get(ctx, &tloss, &loss), nu_get(ctx, &tcorrect, &correct);

  xent_state s = {N, C, ignore, nu_to_double(z, n), (int32_t *)labels, malloc(N * 8)};
  double *rlosses = malloc(N * 8), *rdz = malloc(n * 8), rloss;
  int rcorrect;
  ref_softmax_xent(N, C, s.z, labels, ignore, rlosses, &rloss, &rcorrect, rdz);
  for (size_t i = 0; i < n; i++) rdz[i] *= scale;
  char what[128];
  snprintf(what, sizeof what, "softmax_xent N=%d C=%d ignore=%d scale=%g%s on %s", N, C, ignore, (double)scale,
           inplace ? " in place" : "", tu_name(ctx));
  double e, tol = NU_SUM_TOL(C);
  int any_invalid = 0;
  for (int i = 0; i < N; i++) {
    if (labels[i] == ignore) {
      ck_assert_msg(losses[i] == 0.0f, "%s: ignored row %d has loss %g", what, i, losses[i]);
      for (int j = 0; j < C; j++)
        ck_assert_msg(dz[(size_t)i * C + j] == 0.0f, "%s: ignored row %d has gradient %g at %d", what, i,
                      dz[(size_t)i * C + j], j);
      continue;
    }
    if (labels[i] >= 0 && labels[i] < C) continue;
    any_invalid = 1;
    ck_assert_msg(isnan(losses[i]), "%s: row %d with label %d has loss %g, not NaN", what, i, labels[i], losses[i]);
    for (int j = 0; j < C; j++) ck_assert_msg(isnan(dz[(size_t)i * C + j]), "%s: row %d gradient not NaN", what, i);
  }
  ck_assert_int_eq(correct, rcorrect);
  if (!any_invalid) {
    ck_assert_msg((e = nu_err(losses, rlosses, N)) <= tol, "%s: losses error %g" NU_AT, what, e, NU_AT_ARGS);
    ck_assert_msg((e = nu_err(&loss, &rloss, 1)) <= tol + 1e-6 * N, "%s: loss %g vs %g", what, loss, rloss);
    ck_assert_msg((e = nu_err(dz, rdz, n)) <= tol, "%s: dlogits error %g" NU_AT, what, e, NU_AT_ARGS);
    if (fd && scale == 1.0f)
      ck_assert_msg((e = nu_fd_error(xent_f, &s, s.z, n, dz, NU_FD_H, 100)) <= tol, "%s: dlogits vs fd %g" NU_AT, what,
                    e, NU_AT_ARGS);
  }
  /* the same logits give the same loss bits (fixed summation order) */
  if (!inplace) {
    ck_assert_int_eq(clt_nn_softmax_xent(ctx, &tz, &tl, ignore, scale, NULL, &tls, &tloss, NULL), 0);
    nu_get(ctx, &tloss, &loss2);
    ck_assert_msg(memcmp(&loss, &loss2, 4) == 0 || (isnan(loss) && isnan(loss2)), "%s: loss not repeatable", what);
  }
  nu_check_guards(ctx, what);
  nu_free_all();
  free(dz), free(losses), free(s.z), free(s.losses), free(rlosses), free(rdz);
}

START_TEST(softmax_xent_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    /* rows of scalars, of vectors of 8 (1000) and of 16 (256, on PoCL) */
    static const int shapes[][2] = {{1, 1}, {5, 10}, {3, 1000}, {64, 10}, {4, 256}};
    for (int s = 0; s < 5; s++) {
      int N = shapes[s][0], C = shapes[s][1];
      float *z = nu_random((size_t)N * C, (unsigned)(N + C));
      int32_t *labels = malloc(N * 4);
      for (int i = 0; i < N; i++) labels[i] = (i * 7 + 3) % C;
      for (size_t i = 0; i < (size_t)N * C; i++) z[i] *= 3.0f;
      if (C > 1) z[(size_t)0 * C + labels[0]] = 5.0f; /* row 0 is right: correct counts it */
      xent_case(ctx, N, C, z, labels, -1, 1.0f, 1, 0);
      if (s == 1 || s == 4) {
        xent_case(ctx, N, C, z, labels, -1, 0.25f, 0, 0); /* loss scaling */
        xent_case(ctx, N, C, z, labels, -1, 1.0f, 0, 1);  /* dlogits over logits */
        labels[1] = -1, labels[3] = C;                    /* bad labels give NaN rows */
        xent_case(ctx, N, C, z, labels, -100, 1.0f, 0, 0);
        labels[3] = labels[0] = -1; /* ... unless they are the ignore index (row 0 was right: not counted now) */
        xent_case(ctx, N, C, z, labels, -1, 1.0f, 1, 0);
        xent_case(ctx, N, C, z, labels, -1, 1.0f, 0, 1);
      }
      free(z), free(labels);
    }
  }
}
END_TEST

/* Logits far beyond exp's range must give finite losses and gradients:
 * the row maximum is subtracted before exponentiating. Rows of C = 4 sum 4
 * exponentials: 1e-5 relative to 1 + |want| (the losses reach 2e30). */
START_TEST(softmax_xent_is_stable_for_extreme_logits) {
  enum { N = 5, C = 4 };
  const float z[N * C] = {1e30f,  -1e30f, 0.0f,   5.0f,   /* label 1: loss 2e30 */
                          -1e30f, -1e30f, -1e30f, -1e30f, /* all equal: loss log 4, argmax 0 */
                          88.0f,  -88.0f, 100.0f, 1e4f,   /* exp(1e4) overflows float */
                          -1e4f,  -2e4f,  -3e4f,  -1e4f,  /* all underflow without the shift */
                          3e38f,  3e38f,  -1e20f, 0.0f};  /* near FLT_MAX */
  const int32_t labels[N] = {1, 0, 3, 2, 0};
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    clt_tensor tz = nu_f32(ctx, z, NU_SHAPE(N, C)), tl = nu_tensor(ctx, CLT_I32, labels, NU_SHAPE(N));
    clt_tensor tdz = nu_f32(ctx, NULL, NU_SHAPE(N, C)), tls = nu_f32(ctx, NULL, NU_SHAPE(N));
    clt_tensor tloss = nu_f32(ctx, NULL, NU_SHAPE(1)), tc = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(1));
    ck_assert_int_eq(clt_nn_softmax_xent(ctx, &tz, &tl, -1, 1.0f, &tdz, &tls, &tloss, &tc), 0);
    float dz[N * C], losses[N], loss;
    int32_t correct;
    nu_get(ctx, &tdz, dz), nu_get(ctx, &tls, losses), nu_get(ctx, &tloss, &loss), nu_get(ctx, &tc, &correct);
    double zd[N * C], rl[N], rdz[N * C], rloss;
    int rc;
    for (int i = 0; i < N * C; i++) zd[i] = z[i];
    ref_softmax_xent(N, C, zd, labels, -1, rl, &rloss, &rc, rdz);
    for (int i = 0; i < N * C; i++) ck_assert_msg(isfinite(dz[i]), "dlogits[%d] = %g on %s", i, dz[i], tu_name(ctx));
    for (int i = 0; i < N; i++) ck_assert_msg(isfinite(losses[i]), "loss[%d] = %g on %s", i, losses[i], tu_name(ctx));
    ck_assert_msg(nu_err(losses, rl, N) <= 1e-5, "extreme losses on %s" NU_AT, tu_name(ctx), NU_AT_ARGS);
    ck_assert_msg(nu_err(dz, rdz, N * C) <= 1e-5, "extreme dlogits on %s" NU_AT, tu_name(ctx), NU_AT_ARGS);
    ck_assert_msg(isfinite(loss) && nu_err(&loss, &rloss, 1) <= 1e-5, "extreme loss %g vs %g", loss, rloss);
    ck_assert_int_eq(correct, rc);
    nu_free_all();
  }
}
END_TEST

/* ---- regression losses ------------------------------------------------------ */

typedef struct regress_state {
  int kind, M;
  double delta, *y, *t, *losses;
} regress_state;

static double regress_f(void *p) {
  regress_state *s = p;
  double loss, sq;
  ref_regression_loss(s->kind, s->delta, s->M, s->y, s->t, s->losses, &loss, &sq, NULL);
  return loss;
}

/* Each value's loss and gradient is a few float operations (1e-6 of its
 * size); the sums add M terms: NU_SUM_TOL(M). The loss is piecewise smooth:
 * L1 has a kink at d = 0, where its gradient (0, as PyTorch's) is what the
 * central difference gives too; Huber's first derivative is continuous at
 * |d| = delta, so finite differences hold everywhere. */
static void regress_case(clt_context *ctx, clt_loss_kind kind, float delta, int M, const float *y, const float *t,
                         float scale, int inplace) {
  clt_tensor ty = nu_f32(ctx, y, NU_SHAPE(M)), tt = nu_f32(ctx, t, NU_SHAPE(M));
  clt_tensor tdy = inplace ? ty : nu_f32(ctx, NULL, NU_SHAPE(M)), tls = nu_f32(ctx, NULL, NU_SHAPE(M));
  clt_tensor tsq = nu_f32(ctx, NULL, NU_SHAPE(M)), tloss = nu_f32(ctx, NULL, NU_SHAPE(1));
  clt_tensor tsse = nu_f32(ctx, NULL, NU_SHAPE(1));
  ck_assert_msg(clt_nn_regression_loss(ctx, kind, delta, &ty, &tt, scale, &tdy, &tls, &tsq, &tloss, &tsse) == 0, "%s",
                clt_last_error());
  float *dy = malloc(M * 4), *losses = malloc(M * 4), *sq = malloc(M * 4), loss, sse, loss2;
  nu_get(ctx, &tdy, dy), nu_get(ctx, &tls, losses), nu_get(ctx, &tsq, sq), nu_get(ctx, &tloss, &loss);
  nu_get(ctx, &tsse, &sse);

  regress_state s = {(int)kind, M, delta, nu_to_double(y, M), nu_to_double(t, M), malloc(M * 8)};
  double *rlosses = malloc(M * 8), *rdy = malloc(M * 8), *rsq = malloc(M * 8), rloss, rsse;
  ref_regression_loss((int)kind, delta, M, s.y, s.t, rlosses, &rloss, &rsse, rdy);
  for (int i = 0; i < M; i++) rdy[i] *= scale, rsq[i] = (s.y[i] - s.t[i]) * (s.y[i] - s.t[i]);
  char what[128];
  snprintf(what, sizeof what, "regression loss %s delta=%g M=%d scale=%g%s on %s", clt_loss_name(kind),
           (double)delta, M, (double)scale, inplace ? " in place" : "", tu_name(ctx));
  double e, tol = NU_SUM_TOL(M);
  ck_assert_msg((e = nu_err(losses, rlosses, M)) <= tol, "%s: losses error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(sq, rsq, M)) <= tol, "%s: squared errors error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(&loss, &rloss, 1)) <= tol, "%s: loss %g vs %g", what, loss, rloss);
  ck_assert_msg((e = nu_err(&sse, &rsse, 1)) <= tol, "%s: squared error %g vs %g", what, sse, rsse);
  ck_assert_msg((e = nu_err(dy, rdy, M)) <= tol, "%s: dy error %g" NU_AT, what, e, NU_AT_ARGS);
  for (int i = 0; i < M; i++)
    if (kind == CLT_LOSS_L1 && y[i] == t[i]) ck_assert_msg(dy[i] == 0.0f, "%s: L1 gradient %g at d = 0", what, dy[i]);
  if (scale == 1.0f && !inplace)
    ck_assert_msg((e = nu_fd_error(regress_f, &s, s.y, M, dy, NU_FD_H, 100)) <= tol, "%s: dy vs fd %g" NU_AT, what, e,
                  NU_AT_ARGS);
  if (!inplace) { /* the same values give the same loss bits (fixed summation order) */
    ck_assert_int_eq(clt_nn_regression_loss(ctx, kind, delta, &ty, &tt, scale, NULL, &tls, &tsq, &tloss, &tsse), 0);
    nu_get(ctx, &tloss, &loss2);
    ck_assert_msg(memcmp(&loss, &loss2, 4) == 0, "%s: loss not repeatable", what);
  }
  nu_check_guards(ctx, what);
  nu_free_all();
  free(dy), free(losses), free(sq), free(s.y), free(s.t), free(s.losses), free(rlosses), free(rdy), free(rsq);
}

START_TEST(regression_losses_match_reference_and_finite_differences) {
  static const clt_loss_kind kinds[] = {CLT_LOSS_MSE, CLT_LOSS_L1, CLT_LOSS_HUBER};
  static const int sizes[] = {1, 37, 1000};
  for (int d = 0; d < tu_ndev; d++)
    for (int k = 0; k < 3; k++)
      for (int z = 0; z < 3; z++) {
        int M = sizes[z];
        float *y = nu_random(M, (unsigned)(11 + M)), *t = nu_random(M, (unsigned)(29 + M));
        for (int i = 0; i < M; i++) y[i] *= 3.0f; /* |d| on both sides of delta */
        if (M > 5) t[5] = y[5];                   /* d = 0: L1's gradient is 0 */
        if (M > 7) t[7] = y[7] - 1.0f;            /* |d| = delta: Huber's two branches meet */
        regress_case(tu_ctx[d], kinds[k], 1.0f, M, y, t, 1.0f, 0);
        if (z == 1) {
          regress_case(tu_ctx[d], kinds[k], 1.0f, M, y, t, 0.25f, 0); /* loss scaling */
          regress_case(tu_ctx[d], kinds[k], 1.0f, M, y, t, 1.0f, 1);  /* dy over y */
          if (kinds[k] == CLT_LOSS_HUBER) regress_case(tu_ctx[d], kinds[k], 0.3f, M, y, t, 1.0f, 0);
        }
        free(y), free(t);
      }
}
END_TEST

/* The batch's loss over a million values, as a large U-Net's output gives:
 * within 1e-6 of the exact sum on every device (a plain float sum by one
 * item drifted 7.8e-4; PyTorch's pairwise sum is within 1e-8). */
START_TEST(regression_loss_sum_is_accurate_over_a_million_values) {
  const int M = 1 << 20;
  float *y = nu_random(M, 7u), *t = calloc(M, sizeof *t), loss;
  double exact = 0;
  for (int i = 0; i < M; i++) exact += (double)y[i] * y[i];
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    clt_tensor ty = nu_f32(ctx, y, NU_SHAPE(M)), tt = nu_f32(ctx, t, NU_SHAPE(M));
    clt_tensor tls = nu_f32(ctx, NULL, NU_SHAPE(M)), tsq = nu_f32(ctx, NULL, NU_SHAPE(M));
    clt_tensor tloss = nu_f32(ctx, NULL, NU_SHAPE(1)), tsse = nu_f32(ctx, NULL, NU_SHAPE(1));
    ck_assert_msg(clt_nn_regression_loss(ctx, CLT_LOSS_MSE, 1.0f, &ty, &tt, 1.0f, NULL, &tls, &tsq, &tloss, &tsse) == 0,
                  "%s", clt_last_error());
    nu_get(ctx, &tloss, &loss);
    ck_assert_msg(fabs(loss - exact) <= 1e-6 * exact, "MSE sum of %d values on %s: %.9g, exact %.9g (%.2g relative)", M,
                  tu_name(ctx), (double)loss, exact, fabs(loss - exact) / exact);
    nu_free_all();
  }
  free(y), free(t);
}
END_TEST

/* What PyTorch gives for these (torch.nn.MSELoss, L1Loss, HuberLoss(delta=0.5)
 * with reduction='sum' on y = [0.5, -1, 2, 0], t = [0, 0, 0.5, 0]): known
 * answers, so the reference itself is checked. */
START_TEST(regression_losses_known_answers) {
  const double y[4] = {0.5, -1, 2, 0}, t[4] = {0, 0, 0.5, 0};
  double losses[4], loss, sq, dy[4];
  ref_regression_loss(CLT_LOSS_MSE, 1, 4, y, t, losses, &loss, &sq, dy);
  ck_assert(loss == 0.25 + 1 + 2.25 && sq == loss && dy[0] == 1 && dy[1] == -2 && dy[2] == 3 && dy[3] == 0);
  ref_regression_loss(CLT_LOSS_L1, 1, 4, y, t, losses, &loss, &sq, dy);
  ck_assert(loss == 0.5 + 1 + 1.5 && dy[0] == 1 && dy[1] == -1 && dy[2] == 1 && dy[3] == 0);
  ref_regression_loss(CLT_LOSS_HUBER, 0.5, 4, y, t, losses, &loss, &sq, dy);
  /* |d| = 0.5 is not below delta: delta * (0.5 - 0.25) = 0.125, as 0.5 * 0.25 */
  ck_assert(losses[0] == 0.125 && losses[1] == 0.5 * (1 - 0.25) && losses[2] == 0.5 * (1.5 - 0.25) && losses[3] == 0);
  ck_assert(dy[0] == 0.5 && dy[1] == -0.5 && dy[2] == 0.5 && dy[3] == 0);
}
END_TEST

/* ---- flatten --------------------------------------------------------------- */

START_TEST(flatten_is_a_view) {
  clt_context *ctx = tu_ctx[0];
  clt_tensor x = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 4, 5)), f, v = nu_f32(ctx, NULL, NU_SHAPE(7));
  char s[128];
  ck_assert_int_eq(clt_nn_flatten(&x, &f), 0);
  ck_assert_str_eq(clt_tensor_shape_str(&f, s, sizeof s), "(2, 60) f32");
  ck_assert_ptr_eq(f.buf, x.buf);
  ck_assert_uint_eq(f.offset, x.offset);
  ck_assert_int_eq(clt_nn_flatten(&v, &f), 0);
  ck_assert_str_eq(clt_tensor_shape_str(&f, s, sizeof s), "(7, 1) f32");
  ck_assert_int_eq(clt_nn_flatten(NULL, &f), CLT_EINVAL);
  nu_free_all();
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

START_TEST(bad_shapes_are_named) {
  clt_context *ctx = tu_ctx[0];
  clt_tensor x = nu_f32(ctx, NULL, NU_SHAPE(4, 7)), w = nu_f32(ctx, NULL, NU_SHAPE(3, 8));
  clt_tensor y = nu_f32(ctx, NULL, NU_SHAPE(4, 3)), w7 = nu_f32(ctx, NULL, NU_SHAPE(3, 7));
  clt_tensor b2 = nu_f32(ctx, NULL, NU_SHAPE(2)), y5 = nu_f32(ctx, NULL, NU_SHAPE(5, 3));
  clt_tensor v10 = nu_f32(ctx, NULL, NU_SHAPE(10)), v11 = nu_f32(ctx, NULL, NU_SHAPE(11));
  clt_tensor i4 = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(4)), f4 = nu_f32(ctx, NULL, NU_SHAPE(4));
  clt_tensor one = nu_f32(ctx, NULL, NU_SHAPE(1)), i3 = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(3));

  NU_EXPECT(clt_nn_linear_forward(ctx, &x, &w, NULL, &y), CLT_ESHAPE, "linear forward", "x (4, 7) f32", "w (3, 8) f32",
            "x has 7 features, w expects 8");
  NU_EXPECT(clt_nn_linear_forward(ctx, &x, &w7, &b2, &y), CLT_ESHAPE, "linear forward", "b (2) f32");
  NU_EXPECT(clt_nn_linear_forward(ctx, &x, &w7, NULL, &y5), CLT_ESHAPE, "y (5, 3) f32", "must be (4, 3)");
  NU_EXPECT(clt_nn_linear_forward(ctx, &v10, &w7, NULL, &y), CLT_ESHAPE, "x must be a 2-D f32 tensor (N, in)",
            "(10) f32");
  NU_EXPECT(clt_nn_linear_backward(ctx, &x, &w7, &y, &y, &w7, NULL), CLT_ESHAPE, "linear backward", "dx (4, 3) f32",
            "x (4, 7) f32");
  NU_EXPECT(clt_nn_linear_backward(ctx, &x, &w7, &y, NULL, NULL, NULL), CLT_EINVAL, "linear backward", "dw");

  NU_EXPECT(clt_nn_act_forward(ctx, CLT_NN_TANH, 0, &v10, &v11), CLT_ESHAPE, "tanh forward", "x (10) f32", "y (11) f32",
            "differ in size");
  NU_EXPECT(clt_nn_act_backward(ctx, CLT_NN_GELU, 0, NULL, &v10, &v10, &v10), CLT_EINVAL, "gelu backward",
            "x (the forward's input)");
  NU_EXPECT(clt_nn_act_forward(ctx, (clt_nn_act)9, 0, &v10, &v10), CLT_EINVAL, "unknown activation 9");

  NU_EXPECT(clt_nn_dropout_forward(ctx, 1.0f, 0, 0, 0, &v10, &v10), CLT_EINVAL, "dropout forward",
            "drop probability 1 must be in [0, 1)");
  NU_EXPECT(clt_nn_dropout_backward(ctx, 0.5f, 0, 0, 0, &v10, &v11), CLT_ESHAPE, "dropout backward", "dy (10) f32",
            "dx (11) f32");

  NU_EXPECT(clt_nn_layernorm_forward(ctx, 1e-5f, &x, &v10, &v10, &x, &f4, &f4), CLT_ESHAPE, "layernorm forward",
            "gamma (10) f32", "x's last dimension, 7");
  NU_EXPECT(clt_nn_layernorm_forward(ctx, 1e-5f, &y, &i3, &i3, &y, &f4, &f4), CLT_ESHAPE, "layernorm forward",
            "gamma must be a 1-D f32 tensor (D), got (3) i32");

  NU_EXPECT(clt_nn_softmax_xent(ctx, &y, &f4, -1, 1, NULL, &f4, &one, NULL), CLT_ESHAPE, "softmax_xent",
            "labels must be a 1-D i32 tensor (N), got (4) f32");
  NU_EXPECT(clt_nn_softmax_xent(ctx, &y, &i3, -1, 1, NULL, &f4, &one, NULL), CLT_ESHAPE, "softmax_xent",
            "logits (4, 3) f32", "labels (3) i32", "one element per row of logits, 4");
  NU_EXPECT(clt_nn_softmax_xent(ctx, &y, &i4, -1, 1, &x, &f4, &one, NULL), CLT_ESHAPE, "dlogits (4, 7) f32");
  NU_EXPECT(clt_nn_softmax_xent(ctx, &y, &i4, -1, 1, NULL, &f4, &v10, NULL), CLT_ESHAPE, "loss (10) f32",
            "hold one element");
  NU_EXPECT(clt_nn_softmax_xent(ctx, &y, &i4, 0, 1, NULL, &f4, &one, NULL), CLT_EINVAL, "softmax_xent",
            "ignore_index 0 must be negative");
  NU_EXPECT(clt_nn_regression_loss(ctx, CLT_LOSS_MSE, 1, &f4, &i4, 1, NULL, &f4, &f4, &one, &one), CLT_ESHAPE,
            "regression_loss", "targets must be a 1-D f32 tensor (M), got (4) i32");
  NU_EXPECT(clt_nn_regression_loss(ctx, CLT_LOSS_L1, 1, &f4, &v10, 1, NULL, &f4, &f4, &one, &one), CLT_ESHAPE,
            "regression_loss", "y (4) f32", "targets (10) f32", "one element per value of y, 4");
  NU_EXPECT(clt_nn_regression_loss(ctx, CLT_LOSS_HUBER, 0, &f4, &f4, 1, NULL, &f4, &f4, &one, &one), CLT_EINVAL,
            "huber's delta 0 must be positive");
  NU_EXPECT(clt_nn_regression_loss(ctx, CLT_LOSS_CROSSENTROPY, 1, &f4, &f4, 1, NULL, &f4, &f4, &one, &one),
            CLT_EINVAL, "not a regression loss");
  nu_free_all();
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn");
  NU_ADD_CASE(s, "linear", linear_matches_reference_and_finite_differences);
  NU_ADD_CASE(s, "activation", activations_match_reference_and_finite_differences,
              activation_derivatives_at_zero_follow_pytorch);
  NU_ADD_CASE(s, "dropout", philox_reference_matches_known_answers,
              dropout_masks_are_bitwise_the_reference_on_every_device,
              dropout_keeps_an_element_exactly_at_the_threshold, dropout_split_by_index_base_equals_whole);
  NU_ADD_CASE(s, "layernorm", layernorm_matches_reference_and_finite_differences);
  NU_ADD_CASE(s, "softmax_xent", softmax_xent_matches_reference_and_finite_differences,
              softmax_xent_is_stable_for_extreme_logits);
  NU_ADD_CASE(s, "regression", regression_losses_match_reference_and_finite_differences,
              regression_losses_known_answers, regression_loss_sum_is_accurate_over_a_million_values);
  NU_ADD_CASE(s, "flatten", flatten_is_a_view);
  NU_ADD_CASE(s, "errors", bad_shapes_are_named);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
