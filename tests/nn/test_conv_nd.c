/*
 * test_conv_nd.c: src/nn/conv_nd.c and pool_nd.c on every device (PoCL and
 * rusticl): 1-D, 2-D (dilated) and 3-D convolution with stride, padding and
 * dilation, and 1-D and 3-D max and average pooling. As test_conv_pool.c:
 * forward against the plain-C reference (double, src/ref/ref_nn.c),
 * backward against the reference backward AND central finite differences
 * of f = sum(y * r) through the reference forward; dw and db start from
 * random values (they accumulate), guard elements catch stray writes.
 * Cases: odd sizes, stride 2, padding, dilation 2, batch 1, kernels as
 * large as the (dilated) input, chunked workspaces.
 *
 * Convolution and average pooling are linear in each input, so central
 * differences are exact up to double rounding; max pooling's inputs are
 * distinct values (nu_distinct) so no argmax changes within the step.
 * Tolerances are NU_SUM_TOL of the terms each result sums (nnutil.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnutil.h"

/* ---- convolution ---------------------------------------------------------- */

typedef struct nd_case {
  int dims, N, Cin, Cout;
  int in[3], k[3];   /* the cfg's axes, in order (the first `dims` used) */
  int s, p, d;       /* stride, padding, dilation on every axis */
  int bias, ws_samples;
} nd_case;

static const nd_case nd_cases[] = {
    {1, 2, 3, 4, {11}, {3}, 1, 1, 1, 1, 2},         /* conv1d 'same' */
    {1, 1, 2, 3, {13}, {3}, 2, 1, 2, 0, 1},         /* batch 1, stride 2, dilation 2, no bias */
    {1, 3, 2, 2, {9}, {5}, 1, 0, 2, 1, 1},          /* dilated kernel spans the whole input: L_out 1 */
    {1, 5, 4, 3, {17}, {4}, 3, 2, 1, 1, 2},         /* even kernel, stride 3; chunks (2, 2, 1) */
    {2, 2, 3, 4, {9, 7}, {3, 2}, 1, 2, 2, 1, 2},    /* dilated conv2d, non-square kernel */
    {2, 1, 2, 3, {8, 9}, {3, 3}, 2, 1, 2, 1, 1},    /* dilated conv2d, stride 2, batch 1 */
    {3, 2, 2, 3, {5, 6, 7}, {3, 3, 3}, 1, 1, 1, 1, 2}, /* conv3d 'same', odd sizes */
    {3, 1, 3, 2, {7, 5, 6}, {3, 2, 3}, 2, 1, 1, 0, 1}, /* conv3d batch 1, stride 2, non-cubic, no bias */
    {3, 3, 2, 2, {6, 6, 5}, {2, 2, 2}, 1, 0, 2, 1, 1}, /* conv3d dilation 2, one sample a chunk */
    {3, 2, 1, 2, {3, 4, 3}, {3, 3, 3}, 1, 0, 1, 1, 2}, /* kernel as large as the input along D and W */
};

typedef struct nd_state {
  ref_vol g;
  double *x, *w, *b, *r, *y;
  size_t ny;
} nd_state;

static double nd_f(void *p) {
  nd_state *s = p;
  ref_convnd_forward(&s->g, s->x, s->w, s->b, s->y);
  return nu_dot(s->y, s->r, s->ny);
}

/* A tensor of shape (a, b, spatial...) with `dims` spatial axes. */
static clt_tensor nd_tensor(clt_context *ctx, const float *data, int dims, int64_t a, int64_t b, const int *sp) {
  int64_t shape[5] = {a, b};
  for (int i = 0; i < dims; i++) shape[2 + i] = sp[i];
  return nu_f32(ctx, data, 2 + dims, shape);
}

static void nd_run(clt_context *ctx, const nd_case *c) {
  ref_vol g = {.N = c->N, .C = c->Cin, .Cout = c->Cout};
  int ks[3], outs[3];
  for (int a = 0; a < 3; a++) {
    int i = a - (3 - c->dims);
    g.in[a] = i < 0 ? 1 : c->in[i], g.k[a] = i < 0 ? 1 : c->k[i];
    g.s[a] = i < 0 ? 1 : c->s, g.p[a] = i < 0 ? 0 : c->p, g.d[a] = i < 0 ? 1 : c->d;
  }
  ck_assert(ref_vol_init(&g));
  for (int i = 0; i < c->dims; i++) {
    ks[i] = c->k[i], outs[i] = g.out[3 - c->dims + i];
    ck_assert_int_eq(clt_nn_out_size_dilated(c->in[i], c->k[i], c->s, c->p, c->d), outs[i]);
  }
  int64_t KE = (int64_t)g.k[0] * g.k[1] * g.k[2], P = (int64_t)g.out[0] * g.out[1] * g.out[2];
  size_t nx = (size_t)c->N * c->Cin * g.in[0] * g.in[1] * g.in[2], nw = (size_t)(c->Cout * c->Cin * KE);
  size_t ny = (size_t)(c->N * c->Cout * P);
  unsigned seed = (unsigned)(nx + nw);
  float *x = nu_random(nx, seed), *w = nu_random(nw, seed + 1), *b = nu_random(c->Cout, seed + 2);
  float *dy = nu_random(ny, seed + 3), *dw0 = nu_random(nw, seed + 4), *db0 = nu_random(c->Cout, seed + 5);
  size_t ws_bytes = clt_nn_convnd_workspace_bytes(c->ws_samples, c->Cin, c->Cout, KE, P);
  clt_tensor tx = nd_tensor(ctx, x, c->dims, c->N, c->Cin, c->in), tdx = nd_tensor(ctx, NULL, c->dims, c->N, c->Cin, c->in);
  clt_tensor tw = nd_tensor(ctx, w, c->dims, c->Cout, c->Cin, ks), tdw = nd_tensor(ctx, dw0, c->dims, c->Cout, c->Cin, ks);
  clt_tensor ty = nd_tensor(ctx, NULL, c->dims, c->N, c->Cout, outs), tdy = nd_tensor(ctx, dy, c->dims, c->N, c->Cout, outs);
  clt_tensor tb = nu_f32(ctx, b, NU_SHAPE(c->Cout)), tdb = nu_f32(ctx, db0, NU_SHAPE(c->Cout));
  clt_tensor tws = nu_f32(ctx, NULL, NU_SHAPE((int64_t)(ws_bytes / 4)));
  clt_nn_convnd_cfg cfg = {.dims = c->dims};
  for (int i = 0; i < c->dims; i++) cfg.stride[i] = c->s, cfg.pad[i] = c->p, cfg.dilation[i] = c->d;
  const clt_tensor *bias = c->bias ? &tb : NULL, *dbias = c->bias ? &tdb : NULL;

  ck_assert_msg(clt_nn_convnd_forward(ctx, &cfg, &tx, &tw, bias, &ty, &tws) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_convnd_backward(ctx, &cfg, &tx, &tw, &tdy, &tdx, &tdw, dbias, &tws) == 0, "%s",
                clt_last_error());
  float *y = malloc(ny * 4), *gdx = malloc(nx * 4), *gdw = malloc(nw * 4), *gdb = malloc(c->Cout * 4);
  nu_get(ctx, &ty, y), nu_get(ctx, &tdx, gdx), nu_get(ctx, &tdw, gdw), nu_get(ctx, &tdb, gdb);

  nd_state s = {g, nu_to_double(x, nx), nu_to_double(w, nw), c->bias ? nu_to_double(b, c->Cout) : NULL,
                nu_to_double(dy, ny), malloc(ny * 8), ny};
  double *ry = malloc(ny * 8), *rdx = malloc(nx * 8), *rdw = malloc(nw * 8), *rdb = malloc(c->Cout * 8);
  ref_convnd_forward(&g, s.x, s.w, s.b, ry);
  ref_convnd_backward(&g, s.x, s.w, s.r, rdx, rdw, rdb);
  double *want_dw = nu_plus(dw0, rdw, nw), *want_db = nu_plus(db0, rdb, c->Cout);
  char what[200];
  snprintf(what, sizeof what, "conv%dd N=%d Cin=%d in=%dx%dx%d Cout=%d k=%dx%dx%d s=%d p=%d d=%d bias=%d ws=%d on %s",
           c->dims, c->N, c->Cin, g.in[0], g.in[1], g.in[2], c->Cout, g.k[0], g.k[1], g.k[2], c->s, c->p, c->d,
           c->bias, c->ws_samples, tu_name(ctx));
  double e, tol_y = NU_SUM_TOL(c->Cin * KE), tol_dx = NU_SUM_TOL(c->Cout * KE), tol_dw = NU_SUM_TOL(c->N * P);
  ck_assert_msg((e = nu_err(y, ry, ny)) <= tol_y, "%s: forward error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdx, rdx, nx)) <= tol_dx, "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdw, want_dw, nw)) <= tol_dw, "%s: dw error %g" NU_AT, what, e, NU_AT_ARGS);
  if (c->bias)
    ck_assert_msg((e = nu_err(gdb, want_db, c->Cout)) <= tol_dw, "%s: db error %g" NU_AT, what, e, NU_AT_ARGS);
  float *g_w = nu_added(gdw, dw0, nw), *g_b = nu_added(gdb, db0, c->Cout);
  ck_assert_msg((e = nu_fd_error(nd_f, &s, s.x, nx, gdx, NU_FD_H, NU_FD_POINTS)) <= tol_dx, "%s: dx vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(nd_f, &s, s.w, nw, g_w, NU_FD_H, NU_FD_POINTS)) <= tol_dw, "%s: dw vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  if (c->bias)
    ck_assert_msg((e = nu_fd_error(nd_f, &s, s.b, c->Cout, g_b, NU_FD_H, NU_FD_POINTS)) <= tol_dw,
                  "%s: db vs fd %g" NU_AT, what, e, NU_AT_ARGS);
  /* Without dx (a first layer) dw gets the same again. */
  ck_assert_int_eq(clt_nn_convnd_backward(ctx, &cfg, &tx, &tw, &tdy, NULL, &tdw, dbias, &tws), 0);
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

START_TEST(convnd_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++)
    for (size_t i = 0; i < sizeof nd_cases / sizeof nd_cases[0]; i++) nd_run(tu_ctx[d], &nd_cases[i]);
}
END_TEST

/* With dilation 1 a 2-D case through conv_nd.c gives conv2d's results
 * (conv.c): the two paths agree. */
START_TEST(convnd_2d_agrees_with_conv2d) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    int N = 2, C = 3, H = 7, W = 6, Co = 4;
    size_t nx = (size_t)N * C * H * W, nw = (size_t)Co * C * 9, ny = (size_t)N * Co * H * W;
    float *x = nu_random(nx, 5), *w = nu_random(nw, 6), *y1 = malloc(ny * 4), *y2 = malloc(ny * 4);
    clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(N, C, H, W)), tw = nu_f32(ctx, w, NU_SHAPE(Co, C, 3, 3));
    clt_tensor ty = nu_f32(ctx, NULL, NU_SHAPE(N, Co, H, W));
    clt_tensor ws = nu_f32(ctx, NULL, NU_SHAPE((int64_t)(clt_nn_convnd_workspace_bytes(N, C, Co, 9, H * W) / 4)));
    clt_nn_conv2d_cfg c2 = {1, 1, 1, 1, CLT_NN_CONV_IM2COL};
    clt_nn_convnd_cfg cn = {.dims = 2, .stride = {1, 1}, .pad = {1, 1}, .dilation = {1, 1}};
    ck_assert_int_eq(clt_nn_conv2d_forward(ctx, &c2, &tx, &tw, NULL, &ty, &ws), 0);
    nu_get(ctx, &ty, y1);
    ck_assert_int_eq(clt_nn_convnd_forward(ctx, &cn, &tx, &tw, NULL, &ty, &ws), 0);
    nu_get(ctx, &ty, y2);
    double e = 0;
    for (size_t i = 0; i < ny; i++) e = fmax(e, fabs((double)y1[i] - y2[i]));
    ck_assert_msg(e <= NU_SUM_TOL(27), "conv2d and convnd differ by %g on %s", e, tu_name(ctx));
    nu_free_all();
    free(x), free(w), free(y1), free(y2);
  }
}
END_TEST

/* ---- pooling --------------------------------------------------------------- */

typedef struct pnd_case {
  int dims, N, C;
  int in[3], k, s;
} pnd_case;

static const pnd_case pnd_cases[] = {
    {1, 2, 3, {10}, 2, 2},        /* maxpool1d 2 */
    {1, 1, 2, {11}, 3, 2},        /* batch 1, overlapping windows, odd length */
    {1, 2, 1, {7}, 2, 3},         /* stride > kernel: gaps */
    {3, 2, 2, {4, 6, 5}, 2, 2},   /* maxpool3d 2, odd W: the last column dropped */
    {3, 2, 3, {4, 6, 8}, 2, 2},   /* maxpool3d 2 tiling the input: an item a window writes its inputs */
    {3, 1, 2, {5, 5, 5}, 3, 2},   /* batch 1, overlapping 3-D windows */
    {3, 2, 1, {3, 3, 3}, 3, 3},   /* window as large as the input */
};

typedef struct pnd_state {
  ref_vol g;
  int max;
  double *x, *r, *y;
  int32_t *argmax;
  size_t ny;
} pnd_state;

static double pnd_f(void *p) {
  pnd_state *s = p;
  if (s->max) ref_maxpoolnd_forward(&s->g, s->x, s->y, s->argmax);
  else ref_avgpoolnd_forward(&s->g, s->x, s->y);
  return nu_dot(s->y, s->r, s->ny);
}

static void pnd_run(clt_context *ctx, const pnd_case *c, int max) {
  ref_vol g = {.N = c->N, .C = c->C};
  int outs[3];
  for (int a = 0; a < 3; a++) {
    int i = a - (3 - c->dims);
    g.in[a] = i < 0 ? 1 : c->in[i], g.k[a] = i < 0 ? 1 : c->k, g.s[a] = i < 0 ? 1 : c->s, g.d[a] = 1;
  }
  ck_assert(ref_vol_init(&g));
  for (int i = 0; i < c->dims; i++) outs[i] = g.out[3 - c->dims + i];
  int64_t KE = (int64_t)g.k[0] * g.k[1] * g.k[2];
  size_t nx = (size_t)c->N * c->C * g.in[0] * g.in[1] * g.in[2], ny = (size_t)c->N * c->C * g.out[0] * g.out[1] * g.out[2];
  float *x = max ? nu_distinct(nx, (unsigned)nx) : nu_random(nx, (unsigned)nx), *dy = nu_random(ny, 9);
  clt_tensor tx = nd_tensor(ctx, x, c->dims, c->N, c->C, c->in), tdx = nd_tensor(ctx, NULL, c->dims, c->N, c->C, c->in);
  clt_tensor ty = nd_tensor(ctx, NULL, c->dims, c->N, c->C, outs), tdy = nd_tensor(ctx, dy, c->dims, c->N, c->C, outs);
  int64_t ashape[5] = {c->N, c->C};
  for (int i = 0; i < c->dims; i++) ashape[2 + i] = outs[i];
  clt_tensor targ = nu_tensor(ctx, CLT_I32, NULL, 2 + c->dims, ashape);
  clt_nn_poolnd_cfg cfg = {.dims = c->dims};
  for (int i = 0; i < c->dims; i++) cfg.kernel[i] = c->k, cfg.stride[i] = c->s;
  if (max) {
    ck_assert_msg(clt_nn_maxpoolnd_forward(ctx, &cfg, &tx, &ty, &targ) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_nn_maxpoolnd_backward(ctx, &cfg, &targ, &tdy, &tdx) == 0, "%s", clt_last_error());
  } else {
    ck_assert_msg(clt_nn_avgpoolnd_forward(ctx, &cfg, &tx, &ty) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_nn_avgpoolnd_backward(ctx, &cfg, &tdy, &tdx) == 0, "%s", clt_last_error());
  }
  float *y = malloc(ny * 4), *gdx = malloc(nx * 4);
  int32_t *arg = malloc(ny * 4), *rarg = malloc(ny * 4);
  nu_get(ctx, &ty, y), nu_get(ctx, &tdx, gdx);
  pnd_state s = {g, max, nu_to_double(x, nx), nu_to_double(dy, ny), malloc(ny * 8), malloc(ny * 4), ny};
  double *ry = malloc(ny * 8), *rdx = malloc(nx * 8);
  char what[160];
  snprintf(what, sizeof what, "%s%dd N=%d C=%d in=%dx%dx%d k=%d s=%d on %s", max ? "maxpool" : "avgpool", c->dims,
           c->N, c->C, g.in[0], g.in[1], g.in[2], c->k, c->s, tu_name(ctx));
  double e, tol = max ? 0.0 : NU_SUM_TOL(KE);
  if (max) {
    nu_get(ctx, &targ, arg);
    ref_maxpoolnd_forward(&g, s.x, ry, rarg);
    ref_maxpoolnd_backward(&g, rarg, s.r, rdx);
    ck_assert_msg(memcmp(arg, rarg, ny * 4) == 0, "%s: argmax differs", what);
  } else {
    ref_avgpoolnd_forward(&g, s.x, ry);
    ref_avgpoolnd_backward(&g, s.r, rdx);
  }
  ck_assert_msg((e = nu_err(y, ry, ny)) <= tol, "%s: forward error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdx, rdx, nx)) <= NU_SUM_TOL(KE), "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(pnd_f, &s, s.x, nx, gdx, NU_FD_H, NU_FD_POINTS)) <= NU_SUM_TOL(KE),
                "%s: dx vs fd %g" NU_AT, what, e, NU_AT_ARGS);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(dy), free(y), free(gdx), free(arg), free(rarg), free(s.x), free(s.r), free(s.y), free(s.argmax);
  free(ry), free(rdx);
}

START_TEST(poolnd_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++)
    for (size_t i = 0; i < sizeof pnd_cases / sizeof pnd_cases[0]; i++) {
      pnd_run(tu_ctx[d], &pnd_cases[i], 1);
      pnd_run(tu_ctx[d], &pnd_cases[i], 0);
    }
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

START_TEST(bad_shapes_are_named) {
  clt_context *ctx = tu_ctx[0];
  clt_tensor x = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 4, 8, 8)), w = nu_f32(ctx, NULL, NU_SHAPE(4, 3, 5, 3, 3));
  clt_tensor y = nu_f32(ctx, NULL, NU_SHAPE(2, 4, 2, 8, 8)), ws = nu_f32(ctx, NULL, NU_SHAPE(100000));
  clt_tensor w2 = nu_f32(ctx, NULL, NU_SHAPE(4, 2, 3, 3, 3)), x4 = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 8, 8));
  clt_tensor tiny = nu_f32(ctx, NULL, NU_SHAPE(10)), w3 = nu_f32(ctx, NULL, NU_SHAPE(4, 3, 3, 3, 3));
  clt_nn_convnd_cfg c3 = {.dims = 3, .stride = {1, 1, 1}, .pad = {0, 1, 1}, .dilation = {1, 1, 1}};
  /* a 5-deep kernel on a depth of 4 without padding along D */
  NU_EXPECT(clt_nn_convnd_forward(ctx, &c3, &x, &w, NULL, &y, &ws), CLT_ESHAPE, "convnd forward",
            "axis 0: a kernel of 5 with dilation 1 spans 5, more than the input's 4 with padding 0");
  NU_EXPECT(clt_nn_convnd_forward(ctx, &c3, &x, &w2, NULL, &y, &ws), CLT_ESHAPE, "x has 3 channels, w expects 2");
  NU_EXPECT(clt_nn_convnd_forward(ctx, &c3, &x4, &w3, NULL, &y, &ws), CLT_ESHAPE, "convnd forward",
            "x must be a 5-D");
  NU_EXPECT(clt_nn_convnd_forward(ctx, &c3, &x, &w3, NULL, &y, &tiny), CLT_ESHAPE, "workspace (10) f32 holds 40 bytes",
            "clt_nn_convnd_workspace_bytes");
  clt_nn_convnd_cfg dil = c3;
  dil.dilation[0] = 2; /* spans 5 on a depth of 4 */
  NU_EXPECT(clt_nn_convnd_forward(ctx, &dil, &x, &w3, NULL, &y, &ws), CLT_ESHAPE, "with dilation 2 spans 5");
  clt_nn_convnd_cfg bad = {.dims = 4};
  NU_EXPECT(clt_nn_convnd_forward(ctx, &bad, &x, &w3, NULL, &y, &ws), CLT_EINVAL, "4 spatial dimensions");
  clt_nn_poolnd_cfg p3 = {.dims = 3, .kernel = {5, 2, 2}, .stride = {2, 2, 2}};
  clt_tensor py = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 1, 4, 4));
  NU_EXPECT(clt_nn_avgpoolnd_forward(ctx, &p3, &x, &py), CLT_ESHAPE, "avgpoolnd forward",
            "axis 0: a window of 5 is larger than the input's 4");
  p3.kernel[0] = 2;
  NU_EXPECT(clt_nn_avgpoolnd_forward(ctx, &p3, &x, &py), CLT_ESHAPE, "y must be (2, 3, ...) with 2 x 4 x 4 outputs");
  nu_free_all();
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn_conv_nd");
  NU_ADD_CASE(s, "convnd", convnd_matches_reference_and_finite_differences, convnd_2d_agrees_with_conv2d);
  NU_ADD_CASE(s, "poolnd", poolnd_matches_reference_and_finite_differences);
  NU_ADD_CASE(s, "errors", bad_shapes_are_named);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
