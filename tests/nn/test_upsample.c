/*
 * test_upsample.c: the layers that make spatial axes larger, on every
 * device (PoCL and rusticl): upsample (nearest and linear, 1D, 2D and 3D,
 * factors 2 and 3) and the transposed convolutions (1D, 2D, 3D; stride 2,
 * padding, output padding, kernel 2 stride 2 as U-Nets use it, chunked
 * workspaces; kernel = stride without padding runs a loop-free col2im,
 * the others the general one). As test_conv_pool.c: forward against the
 * plain-C reference (double, src/ref/ref_nn.c), backward against the
 * reference backward AND central finite differences of f = sum(y * dy)
 * through the reference forward; accumulating gradients start from random
 * values, outputs from NaN, and guard elements catch stray writes. Sizes
 * are odd, batch 1 included.
 *
 * Both ops are linear in their inputs (and the transposed convolution in
 * its weights), so central differences are exact up to double rounding.
 * Tolerances are NU_SUM_TOL (nnutil.h) of the number of terms each result
 * sums.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnutil.h"

/* ---- upsample -------------------------------------------------------------- */

typedef struct up_case {
  int N, C, ns;   /* spatial axes: 1, 2 or 3 */
  int dims[3];    /* the tensor's spatial sizes, outermost first */
  int scale, linear;
} up_case;

static const up_case up_cases[] = {
    {2, 3, 1, {7}, 2, 0},        /* 1D nearest */
    {1, 2, 1, {5}, 3, 1},        /* 1D linear, factor 3, batch 1 */
    {2, 3, 2, {5, 7}, 2, 0},     /* 2D nearest, odd sizes */
    {2, 2, 2, {5, 3}, 2, 1},     /* bilinear */
    {1, 3, 2, {4, 5}, 3, 1},     /* bilinear, factor 3, batch 1 */
    {1, 2, 2, {1, 6}, 2, 1},     /* a plane one row high: its last cell is its first */
    {2, 2, 3, {3, 4, 5}, 2, 0},  /* 3D nearest */
    {1, 2, 3, {3, 2, 5}, 2, 1},  /* trilinear (x2 linear: on PoCL an item per input cell) */
    {2, 2, 1, {6}, 2, 1},        /* 1D linear x2 */
    {1, 1, 3, {1, 4, 3}, 2, 1},  /* trilinear, one cell deep */
    {2, 1, 3, {2, 3, 3}, 3, 1},  /* trilinear, factor 3 */
};

typedef struct up_state {
  int linear, NC, in[3], sc[3];
  double *x, *r, *y;
  size_t ny;
} up_state;

static double up_f(void *p) {
  up_state *s = p;
  ref_upsample_forward(s->linear, s->NC, s->in, s->sc, s->x, s->y);
  return nu_dot(s->y, s->r, s->ny);
}

static void up_run(clt_context *ctx, const up_case *c) {
  int in[3] = {1, 1, 1}, sc[3] = {1, 1, 1};
  int64_t xs[5] = {c->N, c->C}, ys[5] = {c->N, c->C};
  size_t nx = (size_t)c->N * c->C, ny = nx;
  for (int t = 0; t < c->ns; t++) {
    in[3 - c->ns + t] = c->dims[t], sc[3 - c->ns + t] = c->scale;
    xs[2 + t] = c->dims[t], ys[2 + t] = (int64_t)c->dims[t] * c->scale;
    nx *= (size_t)c->dims[t], ny *= (size_t)c->dims[t] * c->scale;
  }
  float *x = nu_random(nx, (unsigned)nx), *dy = nu_random(ny, (unsigned)ny + 1);
  clt_tensor tx = nu_f32(ctx, x, c->ns + 2, xs), ty = nu_f32(ctx, NULL, c->ns + 2, ys);
  clt_tensor tdy = nu_f32(ctx, dy, c->ns + 2, ys), tdx = nu_f32(ctx, NULL, c->ns + 2, xs);
  clt_nn_upsample_mode mode = c->linear ? CLT_NN_UPSAMPLE_LINEAR : CLT_NN_UPSAMPLE_NEAREST;
  ck_assert_msg(clt_nn_upsample_forward(ctx, mode, c->scale, &tx, &ty) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_upsample_backward(ctx, mode, c->scale, &tdy, &tdx) == 0, "%s", clt_last_error());
  float *y = malloc(ny * 4), *gdx = malloc(nx * 4);
  nu_get(ctx, &ty, y), nu_get(ctx, &tdx, gdx);

  up_state s = {c->linear, c->N * c->C, {in[0], in[1], in[2]}, {sc[0], sc[1], sc[2]},
                nu_to_double(x, nx), nu_to_double(dy, ny), malloc(ny * 8), ny};
  double *ry = malloc(ny * 8), *rdx = malloc(nx * 8);
  ref_upsample_forward(c->linear, s.NC, in, sc, s.x, ry);
  ref_upsample_backward(c->linear, s.NC, in, sc, s.r, rdx);
  char what[160];
  snprintf(what, sizeof what, "upsample %dD N=%d C=%d (%d, %d, %d) x%d %s on %s", c->ns, c->N, c->C, in[0], in[1],
           in[2], c->scale, c->linear ? "linear" : "nearest", tu_name(ctx));
  /* a forward value mixes up to 8 cells; a gradient sums up to (2S)^3 outputs */
  double e, tol_y = NU_SUM_TOL(8), tol_dx = NU_SUM_TOL(8 * c->scale * c->scale * c->scale);
  ck_assert_msg((e = nu_err(y, ry, ny)) <= tol_y, "%s: forward error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdx, rdx, nx)) <= tol_dx, "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(up_f, &s, s.x, nx, gdx, NU_FD_H, NU_FD_POINTS)) <= tol_dx, "%s: dx vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(dy), free(y), free(gdx), free(s.x), free(s.r), free(s.y), free(ry), free(rdx);
}

START_TEST(upsample_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++)
    for (size_t i = 0; i < sizeof up_cases / sizeof up_cases[0]; i++) up_run(tu_ctx[d], &up_cases[i]);
}
END_TEST

/* A plane whose cells are its column index, up-sampled bilinearly by 2:
 * the values PyTorch gives (torch.nn.Upsample(scale_factor=2,
 * mode='bilinear') on arange(4) rows): 0, .25, .75, 1.25, 1.75, 2.25, 2.75,
 * 3; and nearest repeats each cell twice. */
START_TEST(upsample_known_values) {
  static const float x[4] = {0, 1, 2, 3};
  static const float lin[8] = {0, .25f, .75f, 1.25f, 1.75f, 2.25f, 2.75f, 3}, near[8] = {0, 0, 1, 1, 2, 2, 3, 3};
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(1, 1, 1, 4)), ty = nu_f32(ctx, NULL, NU_SHAPE(1, 1, 2, 8));
    float y[16];
    ck_assert_int_eq(clt_nn_upsample_forward(ctx, CLT_NN_UPSAMPLE_LINEAR, 2, &tx, &ty), 0);
    nu_get(ctx, &ty, y);
    for (int i = 0; i < 16; i++) ck_assert_msg(y[i] == lin[i % 8], "bilinear y[%d] = %g on %s", i, y[i], tu_name(ctx));
    ck_assert_int_eq(clt_nn_upsample_forward(ctx, CLT_NN_UPSAMPLE_NEAREST, 2, &tx, &ty), 0);
    nu_get(ctx, &ty, y);
    for (int i = 0; i < 16; i++) ck_assert_msg(y[i] == near[i % 8], "nearest y[%d] = %g on %s", i, y[i], tu_name(ctx));
    nu_free_all();
  }
}
END_TEST

/* ---- transposed convolution ---------------------------------------------- */

typedef struct ct_case {
  int N, Cin, Cout, ns;
  int dims[3];
  int k, s, p, op, bias;
  int ws_samples; /* workspace for this many samples (< N: chunked) */
} ct_case;

static const ct_case ct_cases[] = {
    {2, 3, 4, 1, {7}, 3, 1, 0, 0, 1, 2},          /* 1D, stride 1 */
    {1, 2, 3, 1, {5}, 4, 2, 1, 1, 1, 1},          /* 1D, stride 2, padding, output padding, batch 1 */
    {2, 4, 3, 2, {4, 5}, 2, 2, 0, 0, 1, 2},       /* 2D kernel 2 stride 2: a U-Net's up step */
    {1, 2, 3, 2, {3, 4}, 2, 2, 0, 1, 1, 1},       /* the same with output padding: a last row and column of bias */
    {3, 3, 2, 2, {5, 3}, 3, 2, 1, 1, 0, 1},       /* stride 2, padding 1, output padding 1, no bias, chunks of 1 */
    {1, 2, 5, 2, {3, 4}, 3, 3, 2, 2, 1, 1},       /* stride 3, padding 2, output padding 2 */
    {3, 5, 2, 2, {3, 3}, 1, 1, 0, 0, 1, 2},       /* 1x1: a channel mix; chunks (2, 1) */
    {2, 2, 3, 3, {2, 3, 2}, 2, 2, 0, 0, 1, 2},    /* 3D kernel 2 stride 2 */
    {1, 3, 2, 3, {3, 2, 3}, 3, 2, 1, 1, 1, 1},    /* 3D stride 2, padding, output padding, batch 1 */
};

typedef struct ct_state {
  ref_convt g;
  double *x, *w, *b, *r, *y;
  size_t ny;
} ct_state;

static double ct_f(void *p) {
  ct_state *s = p;
  ref_convtranspose_forward(&s->g, s->x, s->w, s->b, s->y);
  return nu_dot(s->y, s->r, s->ny);
}

static void ct_run(clt_context *ctx, const ct_case *c) {
  ref_convt g = {c->N, c->Cin, c->Cout, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
  clt_nn_convt_cfg cfg = {{1, 1, 1}, {0, 0, 0}, {0, 0, 0}};
  int64_t xs[5] = {c->N, c->Cin}, ws[5] = {c->Cin, c->Cout}, ys[5] = {c->N, c->Cout};
  for (int t = 0; t < c->ns; t++) {
    int a = 3 - c->ns + t;
    g.in[a] = c->dims[t], g.k[a] = c->k, g.s[a] = c->s, g.p[a] = c->p, g.op[a] = c->op;
    cfg.stride[t] = c->s, cfg.pad[t] = c->p, cfg.output_pad[t] = c->op;
  }
  ck_assert(ref_convt_init(&g));
  size_t nx = (size_t)c->N * c->Cin, nw = (size_t)c->Cin * c->Cout, ny = (size_t)c->N * c->Cout;
  int64_t icells = 1, kcells = 1;
  for (int t = 0; t < c->ns; t++) {
    int a = 3 - c->ns + t;
    xs[2 + t] = g.in[a], ws[2 + t] = c->k, ys[2 + t] = g.out[a];
    ck_assert_int_eq(clt_nn_convt_out_size(g.in[a], c->k, c->s, c->p, c->op), g.out[a]);
    nx *= (size_t)g.in[a], nw *= (size_t)c->k, ny *= (size_t)g.out[a];
    icells *= g.in[a], kcells *= c->k;
  }
  unsigned seed = (unsigned)(nx + nw);
  float *x = nu_random(nx, seed), *w = nu_random(nw, seed + 1), *b = nu_random(c->Cout, seed + 2);
  float *dy = nu_random(ny, seed + 3), *dw0 = nu_random(nw, seed + 4), *db0 = nu_random(c->Cout, seed + 5);
  size_t ws_bytes = clt_nn_convtranspose_workspace_bytes(c->ws_samples, c->Cin, c->Cout, kcells, icells);
  int nd = c->ns + 2;
  clt_tensor tx = nu_f32(ctx, x, nd, xs), tw = nu_f32(ctx, w, nd, ws), tb = nu_f32(ctx, b, NU_SHAPE(c->Cout));
  clt_tensor ty = nu_f32(ctx, NULL, nd, ys), tdy = nu_f32(ctx, dy, nd, ys), tdx = nu_f32(ctx, NULL, nd, xs);
  clt_tensor tdw = nu_f32(ctx, dw0, nd, ws), tdb = nu_f32(ctx, db0, NU_SHAPE(c->Cout));
  clt_tensor tws = nu_f32(ctx, NULL, NU_SHAPE((int64_t)(ws_bytes / 4)));
  const clt_tensor *bias = c->bias ? &tb : NULL, *dbias = c->bias ? &tdb : NULL;
  ck_assert_msg(clt_nn_convtranspose_forward(ctx, &cfg, &tx, &tw, bias, &ty, &tws) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_convtranspose_backward(ctx, &cfg, &tx, &tw, &tdy, &tdx, &tdw, dbias, &tws) == 0, "%s",
                clt_last_error());
  float *y = malloc(ny * 4), *gdx = malloc(nx * 4), *gdw = malloc(nw * 4), *gdb = malloc(c->Cout * 4);
  nu_get(ctx, &ty, y), nu_get(ctx, &tdx, gdx), nu_get(ctx, &tdw, gdw), nu_get(ctx, &tdb, gdb);

  ct_state s = {g, nu_to_double(x, nx), nu_to_double(w, nw), c->bias ? nu_to_double(b, c->Cout) : NULL,
                nu_to_double(dy, ny), malloc(ny * 8), ny};
  double *ry = malloc(ny * 8), *rdx = malloc(nx * 8), *rdw = malloc(nw * 8), *rdb = malloc(c->Cout * 8);
  ref_convtranspose_forward(&g, s.x, s.w, s.b, ry);
  ref_convtranspose_backward(&g, s.x, s.w, s.r, rdx, rdw, rdb);
  double *want_dw = nu_plus(dw0, rdw, nw), *want_db = nu_plus(db0, rdb, c->Cout);
  char what[200];
  snprintf(what, sizeof what, "convtranspose%dd N=%d Cin=%d Cout=%d (%d, %d, %d) k=%d s=%d p=%d op=%d bias=%d ws=%d "
           "on %s", c->ns, c->N, c->Cin, c->Cout, g.in[0], g.in[1], g.in[2], c->k, c->s, c->p, c->op, c->bias,
           c->ws_samples, tu_name(ctx));
  /* terms summed: y Cin*kcells at most, dx Cout*kcells, dw N*icells, db N*ocells */
  double e, tol_y = NU_SUM_TOL(c->Cin * kcells), tol_dx = NU_SUM_TOL(c->Cout * kcells);
  double tol_dw = NU_SUM_TOL(c->N * icells), tol_db = NU_SUM_TOL((double)ny / c->Cout);
  ck_assert_msg((e = nu_err(y, ry, ny)) <= tol_y, "%s: forward error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdx, rdx, nx)) <= tol_dx, "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdw, want_dw, nw)) <= tol_dw, "%s: dw error %g" NU_AT, what, e, NU_AT_ARGS);
  if (c->bias)
    ck_assert_msg((e = nu_err(gdb, want_db, c->Cout)) <= tol_db, "%s: db error %g" NU_AT, what, e, NU_AT_ARGS);
  float *g_w = nu_added(gdw, dw0, nw), *g_b = nu_added(gdb, db0, c->Cout);
  ck_assert_msg((e = nu_fd_error(ct_f, &s, s.x, nx, gdx, NU_FD_H, NU_FD_POINTS)) <= tol_dx, "%s: dx vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(ct_f, &s, s.w, nw, g_w, NU_FD_H, NU_FD_POINTS)) <= tol_dw, "%s: dw vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  if (c->bias)
    ck_assert_msg((e = nu_fd_error(ct_f, &s, s.b, c->Cout, g_b, NU_FD_H, NU_FD_POINTS)) <= tol_db,
                  "%s: db vs fd %g" NU_AT, what, e, NU_AT_ARGS);

  /* Without dx (a first layer) dw is the same: a second backward adds the
   * same again, 2x within float rounding. */
  ck_assert_int_eq(clt_nn_convtranspose_backward(ctx, &cfg, &tx, &tw, &tdy, NULL, &tdw, dbias, &tws), 0);
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

START_TEST(convtranspose_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++)
    for (size_t i = 0; i < sizeof ct_cases / sizeof ct_cases[0]; i++) ct_run(tu_ctx[d], &ct_cases[i]);
}
END_TEST

/* ---- mixed precision ----------------------------------------------------- */

/* An f16 copy of the f32 tensor t (a buffer of its own), and t replaced by
 * its values rounded to half, so both paths start from the same numbers. */
static clt_tensor to_half(clt_context *ctx, clt_tensor *t, cl_mem *keep) {
  clt_tensor h;
  ck_assert_int_eq(clt_buffer_create(ctx, clt_tensor_numel(t) * 2, keep), 0);
  ck_assert_int_eq(clt_tensor_view(*keep, 0, CLT_F16, t->ndim, t->shape, &h), 0);
  ck_assert_msg(clt_convert(ctx, t, &h) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_convert(ctx, &h, t) == 0, "%s", clt_last_error());
  return h;
}

/* f16 activations (mixed precision): the kernels read and write half and
 * compute in float, so each f16 output is the f32 path's on the same
 * (rounded) inputs, rounded to half: within half's 2^-11 relative
 * rounding (1e-3 of the largest value here, whose values are ~1). */
static void half_matches(clt_context *ctx, const clt_tensor *h, const clt_tensor *f, const char *what) {
  size_t n = clt_tensor_numel(f);
  cl_mem buf;
  clt_tensor back;
  ck_assert_int_eq(clt_buffer_create(ctx, n * 4, &buf), 0);
  ck_assert_int_eq(clt_tensor_view(buf, 0, CLT_F32, f->ndim, f->shape, &back), 0);
  ck_assert_int_eq(clt_convert(ctx, h, &back), 0);
  float *a = malloc(n * 4), *b = malloc(n * 4);
  nu_get(ctx, &back, a), nu_get(ctx, f, b);
  double big = 0, worst = 0;
  for (size_t i = 0; i < n; i++) big = fmax(big, fabs(b[i]));
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]));
  ck_assert_msg(worst <= 1e-3 * big, "%s on %s: f16 differs from f32 by %g (largest %g)", what, tu_name(ctx), worst,
                big);
  free(a), free(b);
  clt_buffer_release(buf);
}

START_TEST(half_activations_match_f32) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    cl_mem keep[8];
    float *hx = nu_random(2 * 3 * 5 * 6, 1), *hdy = nu_random(2 * 3 * 10 * 12, 2), *hw = nu_random(3 * 4 * 4, 3);
    float *hcdy = nu_random(2 * 4 * 10 * 12, 4);
    clt_tensor x = nu_f32(ctx, hx, NU_SHAPE(2, 3, 5, 6)), dy = nu_f32(ctx, hdy, NU_SHAPE(2, 3, 10, 12));
    clt_tensor y = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 10, 12)), dx = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 5, 6));
    clt_tensor hx16 = to_half(ctx, &x, &keep[0]), hdy16 = to_half(ctx, &dy, &keep[1]);
    clt_tensor y16 = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 10, 12)), dx16 = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 5, 6));
    y16 = to_half(ctx, &y16, &keep[2]), dx16 = to_half(ctx, &dx16, &keep[3]);
    ck_assert_int_eq(clt_nn_upsample_forward(ctx, CLT_NN_UPSAMPLE_LINEAR, 2, &x, &y), 0);
    ck_assert_msg(clt_nn_upsample_forward(ctx, CLT_NN_UPSAMPLE_LINEAR, 2, &hx16, &y16) == 0, "%s", clt_last_error());
    ck_assert_int_eq(clt_nn_upsample_backward(ctx, CLT_NN_UPSAMPLE_LINEAR, 2, &dy, &dx), 0);
    ck_assert_int_eq(clt_nn_upsample_backward(ctx, CLT_NN_UPSAMPLE_LINEAR, 2, &hdy16, &dx16), 0);
    half_matches(ctx, &y16, &y, "upsample forward");
    half_matches(ctx, &dx16, &dx, "upsample backward");

    /* convtranspose2d 3 -> 4, kernel 2 stride 2: (2, 3, 5, 6) to (2, 4, 10, 12) */
    clt_nn_convt_cfg cfg = {{2, 2, 2}, {0, 0, 0}, {0, 0, 0}};
    clt_tensor w = nu_f32(ctx, hw, NU_SHAPE(3, 4, 2, 2)), dw = nu_f32(ctx, NULL, NU_SHAPE(3, 4, 2, 2));
    clt_tensor cdy = nu_f32(ctx, hcdy, NU_SHAPE(2, 4, 10, 12)), cy = nu_f32(ctx, NULL, NU_SHAPE(2, 4, 10, 12));
    clt_tensor cy16 = nu_f32(ctx, NULL, NU_SHAPE(2, 4, 10, 12)), cdy16 = to_half(ctx, &cdy, &keep[4]);
    cy16 = to_half(ctx, &cy16, &keep[5]);
    clt_tensor dx16b = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 5, 6));
    dx16b = to_half(ctx, &dx16b, &keep[6]);
    size_t wsb = clt_nn_convtranspose_workspace_bytes(2, 3, 4, 4, 30);
    clt_tensor ws = nu_f32(ctx, NULL, NU_SHAPE((int64_t)(wsb / 4)));
    ck_assert_int_eq(clt_fill(ctx, &dw, 0), 0);
    ck_assert_int_eq(clt_nn_convtranspose_forward(ctx, &cfg, &x, &w, NULL, &cy, &ws), 0);
    ck_assert_msg(clt_nn_convtranspose_forward(ctx, &cfg, &hx16, &w, NULL, &cy16, &ws) == 0, "%s", clt_last_error());
    half_matches(ctx, &cy16, &cy, "convtranspose forward");
    ck_assert_int_eq(clt_nn_convtranspose_backward(ctx, &cfg, &x, &w, &cdy, &dx, &dw, NULL, &ws), 0);
    ck_assert_msg(clt_nn_convtranspose_backward(ctx, &cfg, &hx16, &w, &cdy16, &dx16b, &dw, NULL, &ws) == 0, "%s",
                  clt_last_error());
    half_matches(ctx, &dx16b, &dx, "convtranspose backward");
    NU_EXPECT(clt_nn_convtranspose_forward(ctx, &cfg, &hx16, &w, NULL, &cy, &ws), CLT_ESHAPE, "convtranspose forward",
              "x (2, 3, 5, 6) f16", "y (2, 4, 10, 12) f32");
    nu_check_guards(ctx, "half");
    nu_free_all();
    for (int i = 0; i < 7; i++) clt_buffer_release(keep[i]);
    free(hx), free(hdy), free(hw), free(hcdy);
  }
}
END_TEST

/* ---- bad calls ------------------------------------------------------------- */

START_TEST(bad_shapes_are_named) {
  clt_context *ctx = tu_ctx[0];
  clt_tensor x = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 4, 5)), y = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 8, 9));
  clt_tensor flat = nu_f32(ctx, NULL, NU_SHAPE(2, 3));
  NU_EXPECT(clt_nn_upsample_forward(ctx, CLT_NN_UPSAMPLE_NEAREST, 2, &x, &y), CLT_ESHAPE, "upsample forward",
            "y (2, 3, 8, 9) f32", "y must be x with its spatial axes times 2");
  NU_EXPECT(clt_nn_upsample_forward(ctx, CLT_NN_UPSAMPLE_NEAREST, 0, &x, &y), CLT_EINVAL, "scale 0");
  NU_EXPECT(clt_nn_upsample_backward(ctx, CLT_NN_UPSAMPLE_LINEAR, 2, &flat, &flat), CLT_ESHAPE, "upsample backward",
            "(N, C, L), (N, C, H, W) or (N, C, D, H, W)");

  clt_nn_convt_cfg cfg = {{2, 2, 2}, {0, 0, 0}, {0, 0, 0}};
  clt_tensor w = nu_f32(ctx, NULL, NU_SHAPE(3, 4, 2, 2)), cy = nu_f32(ctx, NULL, NU_SHAPE(2, 4, 8, 10));
  clt_tensor ws = nu_f32(ctx, NULL, NU_SHAPE(1000)), tiny = nu_f32(ctx, NULL, NU_SHAPE(10));
  NU_EXPECT(clt_nn_convtranspose_forward(ctx, &cfg, &x, &w, NULL, &y, &ws), CLT_ESHAPE, "convtranspose forward",
            "y must have 2 samples of 4 channels");
  NU_EXPECT(clt_nn_convtranspose_forward(ctx, &cfg, &x, &w, NULL, &cy, &tiny), CLT_ESHAPE, "convtranspose forward",
            "the workspace holds 40 bytes");
  clt_nn_convt_cfg bad = {{2, 2, 2}, {0, 0, 0}, {0, 2, 0}};
  NU_EXPECT(clt_nn_convtranspose_forward(ctx, &bad, &x, &w, NULL, &cy, &ws), CLT_EINVAL, "convtranspose forward",
            "output padding 2 from 0 to stride - 1");
  clt_tensor w3 = nu_f32(ctx, NULL, NU_SHAPE(4, 4, 2, 2));
  NU_EXPECT(clt_nn_convtranspose_backward(ctx, &cfg, &x, &w3, &cy, NULL, &w3, NULL, &ws), CLT_ESHAPE,
            "convtranspose backward", "x has 3 channels, w expects 4");
  nu_free_all();
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn_upsample");
  NU_ADD_CASE(s, "upsample", upsample_matches_reference_and_finite_differences, upsample_known_values);
  NU_ADD_CASE(s, "convtranspose", convtranspose_matches_reference_and_finite_differences);
  NU_ADD_CASE(s, "half", half_activations_match_f32);
  NU_ADD_CASE(s, "errors", bad_shapes_are_named);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
