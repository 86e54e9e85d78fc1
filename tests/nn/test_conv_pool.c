/*
 * test_conv_pool.c: the window layer kernels of src/nn/ on every device
 * (PoCL and rusticl): conv2d (im2col + GEMM with whole-batch and chunked
 * workspaces, and the direct forward), max pooling, average pooling and global average pooling.
 * As in test_dense.c: forward against the plain-C reference (double),
 * backward against the reference backward AND central finite differences
 * of f = sum(y * dy) through the reference forward; accumulating gradients
 * start from random values, outputs from NaN, and guard elements catch
 * stray writes. Shapes cover odd sizes, stride 2, padding, non-square
 * kernels, a kernel as large as the input, 1x1 kernels and batch 1.
 *
 * Finite differences: conv2d and average pooling are linear in each input,
 * so central differences are exact up to double rounding (~1e-11 here).
 * Max pooling is piecewise linear; its inputs are distinct values at least
 * 2/n apart (nu_distinct), so no tie and no change of argmax lies within
 * the step h = 1e-5.
 *
 * Tolerances are NU_SUM_TOL (nnutil.h, with the reasoning) of the number
 * of terms each result sums, unless a test says otherwise.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnutil.h"

/* ---- conv2d ---------------------------------------------------------------- */

typedef struct conv_case {
  int N, Cin, H, W, Cout, KH, KW, sh, sw, ph, pw, bias;
  int ws_samples; /* workspace for this many samples (< N: chunked) */
} conv_case;

static const conv_case conv_cases[] = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 2},  /* 'same' 3x3 */
    {1, 2, 9, 8, 3, 3, 2, 2, 2, 1, 0, 0, 1},  /* batch 1, stride 2, non-square kernel and padding, no bias */
    {3, 1, 5, 5, 2, 5, 5, 1, 1, 0, 0, 1, 3},  /* kernel as large as the input: OH = OW = 1 */
    {5, 4, 6, 7, 5, 1, 1, 2, 2, 0, 0, 1, 2},  /* 1x1, stride 2, odd sizes; 3 chunks (2, 2, 1) */
    {4, 3, 8, 8, 6, 3, 3, 2, 2, 1, 1, 1, 1},  /* stride 2 with padding, one sample per chunk */
    {2, 5, 11, 9, 3, 4, 3, 3, 2, 2, 1, 1, 2}, /* stride 3, even kernel */
    /* K = Cin*KH*KW up to 32 runs the direct kernels (forward; backward
     * without dx), larger K im2col + GEMM: the cases above are mostly the
     * former, these two the latter */
    {3, 8, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1, 2},  /* K = 72, 'same' 3x3, chunks (2, 1), planes of 81 */
    {2, 2, 4, 4, 1, 1, 1, 2, 2, 1, 1, 1, 1},  /* K = 2 but the padded input outgrows the workspace */
    /* On PoCL, im2col and col2im move rows for planes up to 64 wide (the
     * cases above) and elements beyond (src/nn/conv.c, by_rows): */
    {1, 4, 3, 70, 2, 3, 3, 1, 1, 1, 1, 1, 1}, /* K = 36, planes 70 wide */
    /* A first layer's weight gradient on PoCL takes rows 16 columns at a
     * time, then 8, 4, 2 and 1 (cl/conv.cl): 31 = 16 + 8 + 4 + 2 + 1 */
    {3, 1, 4, 31, 3, 3, 3, 1, 1, 1, 1, 1, 2}, /* K = 9, 'same' 3x3, planes 31 wide */
};

typedef struct conv_state {
  ref_window g;
  double *x, *w, *b, *r, *y;
} conv_state;

static double conv_f(void *p) {
  conv_state *s = p;
  ref_conv2d_forward(&s->g, s->x, s->w, s->b, s->y);
  return nu_dot(s->y, s->r, (size_t)s->g.N * s->g.Cout * s->g.OH * s->g.OW);
}

static void conv_run(clt_context *ctx, const conv_case *c) {
  ref_window g = {c->N, c->Cin, c->H, c->W, c->Cout, c->KH, c->KW, c->sh, c->sw, c->ph, c->pw, 0, 0};
  ck_assert(ref_window_init(&g));
  int OH = g.OH, OW = g.OW;
  ck_assert_int_eq(clt_nn_out_size(c->H, c->KH, c->sh, c->ph), OH);
  size_t nx = (size_t)c->N * c->Cin * c->H * c->W, nw = (size_t)c->Cout * c->Cin * c->KH * c->KW;
  size_t ny = (size_t)c->N * c->Cout * OH * OW;
  unsigned seed = (unsigned)(nx + nw);
  float *x = nu_random(nx, seed), *w = nu_random(nw, seed + 1), *b = nu_random(c->Cout, seed + 2);
  float *dy = nu_random(ny, seed + 3), *dw0 = nu_random(nw, seed + 4), *db0 = nu_random(c->Cout, seed + 5);
  size_t ws_bytes = clt_nn_conv2d_workspace_bytes(c->ws_samples, c->Cin, c->Cout, c->KH, c->KW, OH, OW);
  clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(c->N, c->Cin, c->H, c->W));
  clt_tensor tw = nu_f32(ctx, w, NU_SHAPE(c->Cout, c->Cin, c->KH, c->KW)), tb = nu_f32(ctx, b, NU_SHAPE(c->Cout));
  clt_tensor ty = nu_f32(ctx, NULL, NU_SHAPE(c->N, c->Cout, OH, OW)),
             tdy = nu_f32(ctx, dy, NU_SHAPE(c->N, c->Cout, OH, OW));
  clt_tensor tdx = nu_f32(ctx, NULL, NU_SHAPE(c->N, c->Cin, c->H, c->W));
  clt_tensor tdw = nu_f32(ctx, dw0, NU_SHAPE(c->Cout, c->Cin, c->KH, c->KW)), tdb = nu_f32(ctx, db0, NU_SHAPE(c->Cout));
  clt_tensor tws = nu_f32(ctx, NULL, NU_SHAPE((int64_t)(ws_bytes / 4)));
  clt_nn_conv2d_cfg cfg = {c->sh, c->sw, c->ph, c->pw, CLT_NN_CONV_AUTO};
  const clt_tensor *bias = c->bias ? &tb : NULL, *dbias = c->bias ? &tdb : NULL;

  ck_assert_msg(clt_nn_conv2d_forward(ctx, &cfg, &tx, &tw, bias, &ty, &tws) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_conv2d_backward(ctx, &cfg, &tx, &tw, &tdy, &tdx, &tdw, dbias, &tws) == 0, "%s",
                clt_last_error());
  float *y = malloc(ny * 4), *gdx = malloc(nx * 4), *gdw = malloc(nw * 4), *gdb = malloc(c->Cout * 4);
  nu_get(ctx, &ty, y), nu_get(ctx, &tdx, gdx), nu_get(ctx, &tdw, gdw), nu_get(ctx, &tdb, gdb);

  conv_state s = {g,
                  nu_to_double(x, nx),
                  nu_to_double(w, nw),
                  c->bias ? nu_to_double(b, c->Cout) : NULL,
                  nu_to_double(dy, ny),
                  malloc(ny * 8)};
  double *ry = malloc(ny * 8), *rdx = malloc(nx * 8), *rdw = malloc(nw * 8), *rdb = malloc(c->Cout * 8);
  ref_conv2d_forward(&g, s.x, s.w, s.b, ry);
  ref_conv2d_backward(&g, s.x, s.w, s.r, rdx, rdw, rdb);
  double *want_dw = nu_plus(dw0, rdw, nw), *want_db = nu_plus(db0, rdb, c->Cout);
  char what[200];
  snprintf(what, sizeof what, "conv2d N=%d Cin=%d %dx%d Cout=%d k=%dx%d s=%dx%d p=%dx%d bias=%d ws=%d on %s", c->N,
           c->Cin, c->H, c->W, c->Cout, c->KH, c->KW, c->sh, c->sw, c->ph, c->pw, c->bias, c->ws_samples, tu_name(ctx));
  /* terms summed: forward Cin*KH*KW, dx Cout*KH*KW, dw and db N*OH*OW */
  double e, tol_y = NU_SUM_TOL(c->Cin * c->KH * c->KW), tol_dx = NU_SUM_TOL(c->Cout * c->KH * c->KW);
  double tol_dw = NU_SUM_TOL(c->N * OH * OW);
  ck_assert_msg((e = nu_err(y, ry, ny)) <= tol_y, "%s: forward error %g" NU_AT, what, e, NU_AT_ARGS);
  for (int algo = CLT_NN_CONV_IM2COL; algo <= CLT_NN_CONV_DIRECT; algo++) { /* both forwards, whatever auto chose */
    clt_nn_conv2d_cfg forced = cfg;
    forced.algo = (clt_nn_conv2d_algo)algo;
    ck_assert_int_eq(clt_fill(ctx, &ty, NAN), 0);
    ck_assert_msg(clt_nn_conv2d_forward(ctx, &forced, &tx, &tw, bias, &ty, &tws) == 0, "%s", clt_last_error());
    nu_get(ctx, &ty, y);
    ck_assert_msg((e = nu_err(y, ry, ny)) <= tol_y, "%s: forward (algo %d) error %g" NU_AT, what, algo, e, NU_AT_ARGS);
  }
  ck_assert_msg((e = nu_err(gdx, rdx, nx)) <= tol_dx, "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdw, want_dw, nw)) <= tol_dw, "%s: dw error %g" NU_AT, what, e, NU_AT_ARGS);
  if (c->bias)
    ck_assert_msg((e = nu_err(gdb, want_db, c->Cout)) <= tol_dw, "%s: db error %g" NU_AT, what, e, NU_AT_ARGS);
  float *g_w = nu_added(gdw, dw0, nw), *g_b = nu_added(gdb, db0, c->Cout);
  ck_assert_msg((e = nu_fd_error(conv_f, &s, s.x, nx, gdx, NU_FD_H, NU_FD_POINTS)) <= tol_dx, "%s: dx vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(conv_f, &s, s.w, nw, g_w, NU_FD_H, NU_FD_POINTS)) <= tol_dw, "%s: dw vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  if (c->bias)
    ck_assert_msg((e = nu_fd_error(conv_f, &s, s.b, c->Cout, g_b, NU_FD_H, NU_FD_POINTS)) <= tol_dw,
                  "%s: db vs fd %g" NU_AT, what, e, NU_AT_ARGS);

  /* Without dx (a first layer) the parameter gradients are the same, and
   * a second backward adds the same again: the same bits as 2x (exact in
   * float). */
  ck_assert_int_eq(clt_nn_conv2d_backward(ctx, &cfg, &tx, &tw, &tdy, NULL, &tdw, dbias, &tws), 0);
  float *gdw2 = malloc(nw * 4);
  nu_get(ctx, &tdw, gdw2);
  for (size_t i = 0; i < nw; i++) {
    float once = gdw[i] - dw0[i], twice = gdw2[i] - dw0[i];
    ck_assert_msg(fabsf(twice - 2 * once) <= 1e-5f * (1 + fabsf(gdw2[i])), "%s: second backward dw[%zu]", what, i);
  }
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(w), free(b), free(dy), free(dw0), free(db0), free(y), free(gdx), free(gdw), free(gdb), free(gdw2);
  free(s.x), free(s.w), free(s.b), free(s.r), free(s.y), free(ry), free(rdx), free(rdw), free(rdb);
  free(want_dw), free(want_db), free(g_w), free(g_b);
}

/* Every case of conv_cases on every device, forward by the automatic
 * choice and by both algorithms; tolerances SUM_TOL of the terms each
 * result sums (see conv_run). */
START_TEST(conv2d_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++)
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) conv_run(tu_ctx[d], &conv_cases[i]);
}
END_TEST

/* The im2col forward gives the same bits whatever the chunking: every
 * chunk's GEMM sums the same K terms per output, and outputs never mix
 * chunks. (dw is excluded: it is summed chunk by chunk, a different order.) */
START_TEST(conv2d_forward_does_not_depend_on_chunking) {
  const conv_case *c = &conv_cases[3];
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    int OH = (int)clt_nn_out_size(c->H, c->KH, c->sh, c->ph), OW = (int)clt_nn_out_size(c->W, c->KW, c->sw, c->pw);
    size_t nx = (size_t)c->N * c->Cin * c->H * c->W, ny = (size_t)c->N * c->Cout * OH * OW;
    float *x = nu_random(nx, 1), *w = nu_random(c->Cout * c->Cin, 2), *y1 = malloc(ny * 4), *y2 = malloc(ny * 4);
    clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(c->N, c->Cin, c->H, c->W)),
               tw = nu_f32(ctx, w, NU_SHAPE(c->Cout, c->Cin, 1, 1));
    clt_tensor ty = nu_f32(ctx, NULL, NU_SHAPE(c->N, c->Cout, OH, OW));
    size_t all = clt_nn_conv2d_workspace_bytes(c->N, c->Cin, c->Cout, 1, 1, OH, OW);
    size_t one = clt_nn_conv2d_workspace_bytes(1, c->Cin, c->Cout, 1, 1, OH, OW);
    clt_tensor wsa = nu_f32(ctx, NULL, NU_SHAPE((int64_t)(all / 4))),
               ws1 = nu_f32(ctx, NULL, NU_SHAPE((int64_t)(one / 4 + 3)));
    clt_nn_conv2d_cfg cfg = {c->sh, c->sw, c->ph, c->pw, CLT_NN_CONV_IM2COL};
    ck_assert_int_eq(clt_nn_conv2d_forward(ctx, &cfg, &tx, &tw, NULL, &ty, &wsa), 0);
    nu_get(ctx, &ty, y1);
    ck_assert_int_eq(clt_nn_conv2d_forward(ctx, &cfg, &tx, &tw, NULL, &ty, &ws1), 0);
    nu_get(ctx, &ty, y2);
    ck_assert_msg(memcmp(y1, y2, ny * 4) == 0, "conv2d forward depends on the chunking on %s", tu_name(ctx));
    nu_free_all();
    free(x), free(w), free(y1), free(y2);
  }
}
END_TEST

/* ---- pooling --------------------------------------------------------------- */

typedef struct pool_case {
  int N, C, H, W, KH, KW, sh, sw, ph, pw;
} pool_case;

static const pool_case pool_cases[] = {
    {2, 3, 6, 6, 2, 2, 2, 2, 0, 0}, /* the classic 2x2 / 2 */
    {1, 2, 7, 5, 3, 3, 2, 2, 1, 1}, /* batch 1, odd sizes, padding */
    {3, 1, 5, 8, 3, 2, 1, 2, 1, 0}, /* overlapping windows, non-square */
    {2, 2, 7, 7, 2, 2, 2, 2, 0, 0}, /* odd input: the last row and column are dropped */
    {1, 1, 4, 3, 1, 1, 1, 1, 0, 0}, /* identity */
    {2, 2, 9, 8, 2, 2, 3, 3, 1, 1}, /* stride > kernel with padding: gaps between windows */
    {1, 3, 5, 7, 2, 2, 2, 2, 1, 1}, /* 2x2 / 2 with padding on odd sizes */
};

typedef struct pool_state {
  ref_window g;
  int max;
  double *x, *r, *y;
  int32_t *argmax;
} pool_state;

static double pool_f(void *p) {
  pool_state *s = p;
  if (s->max)
    ref_maxpool_forward(&s->g, s->x, s->y, s->argmax);
  else
    ref_avgpool_forward(&s->g, s->x, s->y);
  return nu_dot(s->y, s->r, (size_t)s->g.N * s->g.C * s->g.OH * s->g.OW);
}

/* Max pooling copies one element (exact); average pooling sums KH*KW. */
static void pool_run(clt_context *ctx, const pool_case *c, int max) {
  ref_window g = {c->N, c->C, c->H, c->W, 0, c->KH, c->KW, c->sh, c->sw, c->ph, c->pw, 0, 0};
  ck_assert(ref_window_init(&g));
  size_t nx = (size_t)c->N * c->C * c->H * c->W, ny = (size_t)c->N * c->C * g.OH * g.OW;
  float *x = max ? nu_distinct(nx, (unsigned)nx) : nu_random(nx, (unsigned)nx), *dy = nu_random(ny, 9);
  clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(c->N, c->C, c->H, c->W)),
             ty = nu_f32(ctx, NULL, NU_SHAPE(c->N, c->C, g.OH, g.OW));
  clt_tensor targ = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(c->N, c->C, g.OH, g.OW));
  clt_tensor tdy = nu_f32(ctx, dy, NU_SHAPE(c->N, c->C, g.OH, g.OW)),
             tdx = nu_f32(ctx, NULL, NU_SHAPE(c->N, c->C, c->H, c->W));
  clt_nn_pool2d_cfg cfg = {c->KH, c->KW, c->sh, c->sw, c->ph, c->pw};
  if (max) {
    ck_assert_msg(clt_nn_maxpool2d_forward(ctx, &cfg, &tx, &ty, &targ) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_nn_maxpool2d_backward(ctx, &cfg, &targ, &tdy, &tdx) == 0, "%s", clt_last_error());
  } else {
    ck_assert_msg(clt_nn_avgpool2d_forward(ctx, &cfg, &tx, &ty) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_nn_avgpool2d_backward(ctx, &cfg, &tdy, &tdx) == 0, "%s", clt_last_error());
  }
  float *y = malloc(ny * 4), *gdx = malloc(nx * 4);
  int32_t *arg = malloc(ny * 4), *rarg = malloc(ny * 4);
  nu_get(ctx, &ty, y), nu_get(ctx, &tdx, gdx);
  pool_state s = {g, max, nu_to_double(x, nx), nu_to_double(dy, ny), malloc(ny * 8), malloc(ny * 4)};
  double *ry = malloc(ny * 8), *rdx = malloc(nx * 8);
  char what[200];
  snprintf(what, sizeof what, "%s N=%d C=%d %dx%d k=%dx%d s=%dx%d p=%dx%d on %s", max ? "maxpool2d" : "avgpool2d", c->N,
           c->C, c->H, c->W, c->KH, c->KW, c->sh, c->sw, c->ph, c->pw, tu_name(ctx));
  double e, tol = max ? 0.0 : NU_SUM_TOL(c->KH * c->KW);
  if (max) {
    nu_get(ctx, &targ, arg);
    ref_maxpool_forward(&g, s.x, ry, rarg);
    ref_maxpool_backward(&g, rarg, s.r, rdx);
    ck_assert_msg(memcmp(arg, rarg, ny * 4) == 0, "%s: argmax differs", what);
  } else {
    ref_avgpool_forward(&g, s.x, ry);
    ref_avgpool_backward(&g, s.r, rdx);
  }
  /* max: dx sums the dy of every window that picked an input (<= KH*KW) */
  ck_assert_msg((e = nu_err(y, ry, ny)) <= tol, "%s: forward error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdx, rdx, nx)) <= NU_SUM_TOL(c->KH * c->KW), "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(pool_f, &s, s.x, nx, gdx, NU_FD_H, NU_FD_POINTS)) <= NU_SUM_TOL(c->KH * c->KW),
                "%s: dx vs fd %g" NU_AT, what, e, NU_AT_ARGS);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(dy), free(y), free(gdx), free(arg), free(rarg), free(s.x), free(s.r), free(s.y), free(s.argmax);
  free(ry), free(rdx);
}

START_TEST(pooling_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++)
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
      pool_run(tu_ctx[d], &pool_cases[i], 1);
      pool_run(tu_ctx[d], &pool_cases[i], 0);
    }
}
END_TEST

/* A NaN in a window wins the max, so the trainer's non-finite check sees it. */
START_TEST(maxpool_propagates_nan) {
  float x[8] = {1, 2, NAN, 0, -5, -6, -7, -8}, y[2];
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(1, 2, 2, 2)), ty = nu_f32(ctx, NULL, NU_SHAPE(1, 2, 1, 1));
    clt_tensor ta = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(1, 2, 1, 1));
    clt_nn_pool2d_cfg cfg = {2, 2, 2, 2, 0, 0};
    int32_t a[2];
    ck_assert_int_eq(clt_nn_maxpool2d_forward(ctx, &cfg, &tx, &ty, &ta), 0);
    nu_get(ctx, &ty, y), nu_get(ctx, &ta, a);
    ck_assert_msg(isnan(y[0]) && a[0] == 2, "NaN lost on %s: %g at %d", tu_name(ctx), y[0], a[0]);
    ck_assert_msg(y[1] == -5.0f && a[1] == 0, "plane 2 on %s: %g at %d", tu_name(ctx), y[1], a[1]);
    nu_free_all();
  }
}
END_TEST

/* The mean of HW terms: NU_SUM_TOL(HW). */
START_TEST(global_avgpool_matches_reference_and_finite_differences) {
  static const int shapes[][4] = {{2, 3, 5, 4}, {1, 1, 1, 1}, {3, 2, 7, 7}};
  for (int d = 0; d < tu_ndev; d++)
    for (int s = 0; s < 3; s++) {
      clt_context *ctx = tu_ctx[d];
      int N = shapes[s][0], C = shapes[s][1], H = shapes[s][2], W = shapes[s][3];
      size_t nx = (size_t)N * C * H * W, ny = (size_t)N * C;
      float *x = nu_random(nx, 3), *dy = nu_random(ny, 4), *y = malloc(ny * 4), *gdx = malloc(nx * 4);
      clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(N, C, H, W)), tdx = nu_f32(ctx, NULL, NU_SHAPE(N, C, H, W));
      /* y as (N, C) and dy as (N, C, 1, 1): both are accepted */
      clt_tensor ty = nu_f32(ctx, NULL, NU_SHAPE(N, C)), tdy = nu_f32(ctx, dy, NU_SHAPE(N, C, 1, 1));
      ck_assert_msg(clt_nn_global_avgpool_forward(ctx, &tx, &ty) == 0, "%s", clt_last_error());
      ck_assert_msg(clt_nn_global_avgpool_backward(ctx, &tdy, &tdx) == 0, "%s", clt_last_error());
      nu_get(ctx, &ty, y), nu_get(ctx, &tdx, gdx);
      double *xd = nu_to_double(x, nx), *dyd = nu_to_double(dy, ny), *ry = malloc(ny * 8), *rdx = malloc(nx * 8);
      ref_global_avgpool_forward(N * C, H * W, xd, ry);
      ref_global_avgpool_backward(N * C, H * W, dyd, rdx);
      double e;
      ck_assert_msg((e = nu_err(y, ry, ny)) <= NU_SUM_TOL(H * W), "global_avgpool forward on %s: %g" NU_AT,
                    tu_name(ctx), e, NU_AT_ARGS);
      /* dx = dy / HW: linear, so the reference backward is the finite difference up to rounding */
      ck_assert_msg((e = nu_err(gdx, rdx, nx)) <= 1e-6, "global_avgpool backward on %s: %g" NU_AT, tu_name(ctx), e,
                    NU_AT_ARGS);
      nu_check_guards(ctx, "global_avgpool");
      nu_free_all();
      free(x), free(dy), free(y), free(gdx), free(xd), free(dyd), free(ry), free(rdx);
    }
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

START_TEST(bad_shapes_are_named) {
  clt_context *ctx = tu_ctx[0];
  clt_tensor x = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 8, 8)), w = nu_f32(ctx, NULL, NU_SHAPE(4, 2, 3, 3));
  clt_tensor w3 = nu_f32(ctx, NULL, NU_SHAPE(4, 3, 3, 3)), y = nu_f32(ctx, NULL, NU_SHAPE(2, 4, 8, 8));
  clt_tensor y6 = nu_f32(ctx, NULL, NU_SHAPE(2, 4, 6, 6)), ws = nu_f32(ctx, NULL, NU_SHAPE(100000));
  clt_tensor tiny = nu_f32(ctx, NULL, NU_SHAPE(10)), big = nu_f32(ctx, NULL, NU_SHAPE(1, 1, 9, 9));
  clt_tensor p4 = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 4, 4)), a4 = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(2, 3, 4, 4));
  clt_tensor p5 = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 5, 4)), g23 = nu_f32(ctx, NULL, NU_SHAPE(2, 3));
  clt_nn_conv2d_cfg same = {1, 1, 1, 1, CLT_NN_CONV_AUTO};

  NU_EXPECT(clt_nn_conv2d_forward(ctx, &same, &x, &w, NULL, &y, &ws), CLT_ESHAPE, "conv2d forward",
            "x (2, 3, 8, 8) f32", "w (4, 2, 3, 3) f32", "x has 3 channels, w expects 2");
  NU_EXPECT(clt_nn_conv2d_forward(ctx, &same, &x, &w3, NULL, &y6, &ws), CLT_ESHAPE, "conv2d forward",
            "y (2, 4, 6, 6) f32", "y must be (2, 4, 8, 8) for stride 1x1, padding 1x1");
  NU_EXPECT(clt_nn_conv2d_forward(ctx, &same, &x, &w3, NULL, &y, &tiny), CLT_ESHAPE, "conv2d forward",
            "workspace (10) f32 holds 40 bytes, but one sample needs", "clt_nn_conv2d_workspace_bytes");
  clt_nn_conv2d_cfg bad = {0, 1, 0, 0, CLT_NN_CONV_AUTO}, bad_algo = {1, 1, 1, 1, (clt_nn_conv2d_algo)7};
  NU_EXPECT(clt_nn_conv2d_forward(ctx, &bad, &x, &w3, NULL, &y, &ws), CLT_EINVAL, "conv2d forward", "stride 0x1");
  NU_EXPECT(clt_nn_conv2d_forward(ctx, &bad_algo, &x, &w3, NULL, &y, &ws), CLT_EINVAL, "unknown algorithm 7");
  NU_EXPECT(clt_nn_conv2d_forward(ctx, NULL, &x, &w3, NULL, &y, &ws), CLT_EINVAL, "conv2d forward");
  clt_nn_conv2d_cfg valid = {1, 1, 0, 0, CLT_NN_CONV_AUTO};
  clt_tensor w9 = nu_f32(ctx, NULL, NU_SHAPE(1, 3, 9, 9));
  NU_EXPECT(clt_nn_conv2d_forward(ctx, &valid, &x, &w9, NULL, &y, &ws), CLT_ESHAPE, "conv2d forward",
            "a 9x9 kernel does not fit a 8x8 input with padding 0x0");
  NU_EXPECT(clt_nn_conv2d_backward(ctx, &same, &x, &w3, &y, &y, &w3, NULL, &ws), CLT_ESHAPE, "conv2d backward",
            "dx (2, 4, 8, 8) f32", "x (2, 3, 8, 8) f32");
  NU_EXPECT(clt_nn_conv2d_backward(ctx, &same, &x, &w3, &y, NULL, &w, NULL, &ws), CLT_ESHAPE, "conv2d backward",
            "dw must have the shape and type of w");

  clt_nn_pool2d_cfg two = {2, 2, 2, 2, 0, 0};
  NU_EXPECT(clt_nn_maxpool2d_forward(ctx, &two, &x, &p5, &a4), CLT_ESHAPE, "maxpool2d forward", "y (2, 3, 5, 4) f32",
            "y must be (2, 3, 4, 4) for a 2x2 window, stride 2x2, padding 0x0");
  NU_EXPECT(clt_nn_maxpool2d_forward(ctx, &two, &x, &p4, &p4), CLT_ESHAPE, "maxpool2d forward",
            "argmax must be a 4-D i32 tensor");
  NU_EXPECT(clt_nn_maxpool2d_backward(ctx, &two, &a4, &p4, &p4), CLT_ESHAPE, "maxpool2d backward",
            "dx (2, 3, 4, 4) f32", "must be (2, 3, 2, 2)");
  clt_nn_pool2d_cfg padded = {2, 2, 2, 2, 2, 0};
  NU_EXPECT(clt_nn_avgpool2d_forward(ctx, &padded, &x, &p4), CLT_EINVAL, "avgpool2d forward", "padding 2x0",
            "half the kernel");
  clt_nn_pool2d_cfg nine = {9, 9, 1, 1, 0, 0};
  NU_EXPECT(clt_nn_avgpool2d_forward(ctx, &nine, &x, &p4), CLT_ESHAPE, "avgpool2d forward",
            "a 9x9 window does not fit a 8x8 input");
  NU_EXPECT(clt_nn_global_avgpool_forward(ctx, &x, &big), CLT_ESHAPE, "global_avgpool forward", "y (1, 1, 9, 9) f32",
            "y must be (2, 3) or (2, 3, 1, 1)");
  NU_EXPECT(clt_nn_global_avgpool_backward(ctx, &g23, &tiny), CLT_ESHAPE, "global_avgpool backward",
            "dx must be a 4-D f32 tensor (N, C, H, W), got (10) f32");
  nu_free_all();
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn_conv");
  NU_ADD_CASE(s, "conv2d", conv2d_matches_reference_and_finite_differences, conv2d_forward_does_not_depend_on_chunking);
  NU_ADD_CASE(s, "pool", pooling_matches_reference_and_finite_differences, maxpool_propagates_nan,
              global_avgpool_matches_reference_and_finite_differences);
  NU_ADD_CASE(s, "errors", bad_shapes_are_named);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
