/*
 * test_conv_cpu.c: the implicit-GEMM convolutions of CPU devices
 * (src/nn/conv_cpu.c, cl/conv_cpu.cl), which stride-1 conv1d/2d/3d take on
 * PoCL. Every case runs with CLT_CPU_GEMM=1, so rusticl's llvmpipe
 * compiles and runs the same kernels, on every device:
 *  - forward, dx, dw and db against the plain-C reference (double,
 *    src/ref/ref_nn.c); dw and db start from random values (they
 *    accumulate); guard elements catch stray writes;
 *  - the forward's bits equal the im2col path's on the CPU tiles
 *    (CLT_CONV_IMPLICIT=0): each output is the same sequential fma over k,
 *    which also shows the implicit path ran (no other path gives these
 *    bits and the reference's tolerance);
 *  - f16 activations (x, y, dy, dx stored as half) against the f32 run;
 *  - a workspace too small for one padded sample falls back to im2col
 *    (a widely dilated 3-D kernel over a one-cell depth and height).
 * Cases: 1-D/2-D/3-D, rows of outputs 16, 8 and 4 wide (the vector width),
 * output channels that fill no tile (1, 3, 5, 9, 12), dilation 2, no
 * padding (dx then pads dy by 2), a 1x1 kernel (x read in place), chunks
 * of samples, conv2d through conv.c and through conv_nd.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnutil.h"

typedef struct cc_case {
  int dims, N, Cin, Cout;
  int in[3], k[3]; /* the cfg's axes, in order (the first `dims` used) */
  int p, d;        /* padding and dilation on every axis; stride 1 */
  int bias, ws_samples, via_conv2d;
  int more; /* also against im2col's bits and with f16 activations (each run builds kernels: kept to a few) */
} cc_case;

static const cc_case cases[] = {
    {1, 2, 3, 5, {32}, {3}, 1, 1, 1, 2, 0, 1},             /* conv1d, rows of 32: vectors of 16 */
    {1, 3, 4, 3, {20}, {5}, 4, 2, 0, 1, 0, 0},             /* conv1d dilation 2, vectors of 4, a sample a chunk */
    {2, 2, 5, 12, {6, 16}, {3, 3}, 2, 2, 1, 2, 0, 1},      /* dilated conv2d: 8 + 4 output channels */
    {2, 2, 5, 9, {5, 16}, {3, 3}, 1, 1, 1, 2, 1, 1},       /* conv2d through conv.c, 8 + 1 channels */
    {2, 3, 6, 10, {7, 12}, {3, 3}, 1, 1, 0, 1, 1, 0},      /* conv.c, vectors of 4, chunks of 1 */
    {2, 2, 3, 4, {5, 8}, {1, 1}, 0, 1, 1, 2, 0, 0},        /* 1x1, no padding: x read in place */
    {3, 2, 3, 9, {4, 5, 8}, {3, 3, 3}, 1, 1, 1, 2, 0, 1},  /* conv3d 'same', vectors of 8 */
    {3, 2, 2, 1, {3, 4, 10}, {3, 3, 3}, 0, 1, 1, 2, 0, 0}, /* conv3d without padding: one output channel */
    {3, 1, 1, 8, {4, 4, 16}, {3, 3, 3}, 1, 1, 1, 1, 0, 0}, /* conv3d, one input channel, batch 1 */
    {3, 2, 2, 3, {1, 1, 4}, {3, 3, 3}, 4, 4, 1, 2, 0, 0},  /* padded copy (9x9x12) > im2col's: im2col runs */
};

typedef struct run_out {
  float *y, *dx, *dw, *db;
} run_out;

static void geometry(const cc_case *c, ref_vol *g) {
  *g = (ref_vol){.N = c->N, .C = c->Cin, .Cout = c->Cout};
  for (int a = 0; a < 3; a++) {
    int i = a - (3 - c->dims);
    g->in[a] = i < 0 ? 1 : c->in[i], g->k[a] = i < 0 ? 1 : c->k[i];
    g->s[a] = 1, g->p[a] = i < 0 ? 0 : c->p, g->d[a] = i < 0 ? 1 : c->d;
  }
  ck_assert(ref_vol_init(g));
}

static int64_t numel(const int64_t *shape, int n) {
  int64_t e = 1;
  for (int i = 0; i < n; i++) e *= shape[i];
  return e;
}

/* A tensor of the case's (a, b, spatial...) shape: f32 from host, or f16
 * rounded from it on the device (host NULL: zeros either way). */
static clt_tensor act(clt_context *ctx, const cc_case *c, int half, const float *host, int64_t a, int64_t b,
                      const int *sp) {
  int64_t shape[5] = {a, b};
  for (int i = 0; i < c->dims; i++) shape[2 + i] = sp[i];
  clt_tensor f = nu_f32(ctx, host, 2 + c->dims, shape);
  if (!half) return f;
  clt_tensor h = nu_tensor(ctx, CLT_F16, NULL, 2 + c->dims, shape);
  ck_assert_msg(clt_convert(ctx, &f, &h) == 0, "%s", clt_last_error());
  return h;
}

/* t read back as floats (widened from f16 on the device). */
static float *read_back(clt_context *ctx, const clt_tensor *t) {
  size_t n = (size_t)numel(t->shape, t->ndim);
  float *h = malloc(n * 4);
  if (t->dtype == CLT_F16) {
    clt_tensor f = nu_f32(ctx, NULL, t->ndim, t->shape);
    ck_assert_msg(clt_convert(ctx, t, &f) == 0, "%s", clt_last_error());
    nu_get(ctx, &f, h);
  } else {
    nu_get(ctx, t, h);
  }
  return h;
}

/* Forward and backward of case c on ctx with the given inputs; ws_floats
 * overrides the workspace's size when > 0. */
static run_out run(clt_context *ctx, const cc_case *c, const ref_vol *g, int half, const float *x, const float *w,
                   const float *b, const float *dy, const float *dw0, const float *db0, int64_t ws_floats) {
  int ks[3], outs[3];
  for (int i = 0; i < c->dims; i++) ks[i] = c->k[i], outs[i] = g->out[3 - c->dims + i];
  int64_t KE = (int64_t)g->k[0] * g->k[1] * g->k[2], P = (int64_t)g->out[0] * g->out[1] * g->out[2];
  clt_tensor tx = act(ctx, c, half, x, c->N, c->Cin, c->in), tdx = act(ctx, c, half, NULL, c->N, c->Cin, c->in);
  clt_tensor ty = act(ctx, c, half, NULL, c->N, c->Cout, outs), tdy = act(ctx, c, half, dy, c->N, c->Cout, outs);
  int64_t wshape[5] = {c->Cout, c->Cin};
  for (int i = 0; i < c->dims; i++) wshape[2 + i] = ks[i];
  clt_tensor tw = nu_f32(ctx, w, 2 + c->dims, wshape), tdw = nu_f32(ctx, dw0, 2 + c->dims, wshape);
  clt_tensor tb = nu_f32(ctx, b, NU_SHAPE(c->Cout)), tdb = nu_f32(ctx, db0, NU_SHAPE(c->Cout));
  if (ws_floats <= 0) ws_floats = (int64_t)(clt_nn_convnd_workspace_bytes(c->ws_samples, c->Cin, c->Cout, KE, P) / 4);
  clt_tensor tws = nu_f32(ctx, NULL, NU_SHAPE(ws_floats));
  const clt_tensor *bias = c->bias ? &tb : NULL, *dbias = c->bias ? &tdb : NULL;
  if (c->via_conv2d) {
    clt_nn_conv2d_cfg cfg = {1, 1, c->p, c->p, CLT_NN_CONV_AUTO};
    ck_assert_msg(clt_nn_conv2d_forward(ctx, &cfg, &tx, &tw, bias, &ty, &tws) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_nn_conv2d_backward(ctx, &cfg, &tx, &tw, &tdy, &tdx, &tdw, dbias, &tws) == 0, "%s",
                  clt_last_error());
  } else {
    clt_nn_convnd_cfg cfg = {.dims = c->dims};
    for (int i = 0; i < c->dims; i++) cfg.stride[i] = 1, cfg.pad[i] = c->p, cfg.dilation[i] = c->d;
    ck_assert_msg(clt_nn_convnd_forward(ctx, &cfg, &tx, &tw, bias, &ty, &tws) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_nn_convnd_backward(ctx, &cfg, &tx, &tw, &tdy, &tdx, &tdw, dbias, &tws) == 0, "%s",
                  clt_last_error());
  }
  run_out o = {read_back(ctx, &ty), read_back(ctx, &tdx), read_back(ctx, &tdw), read_back(ctx, &tdb)};
  nu_check_guards(ctx, "conv_cpu");
  nu_free_all();
  return o;
}

static void free_out(run_out *o) { free(o->y), free(o->dx), free(o->dw), free(o->db); }

static double max_diff(const float *a, const float *b, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i]));
  return e;
}

static void check_case(clt_context *ctx, const cc_case *c) {
  ref_vol g;
  geometry(c, &g);
  int64_t KE = (int64_t)g.k[0] * g.k[1] * g.k[2], P = (int64_t)g.out[0] * g.out[1] * g.out[2];
  size_t nx = (size_t)c->N * c->Cin * g.in[0] * g.in[1] * g.in[2], nw = (size_t)(c->Cout * c->Cin * KE);
  size_t ny = (size_t)(c->N * c->Cout * P);
  unsigned seed = (unsigned)(nx + 3 * nw);
  float *x = nu_random(nx, seed), *w = nu_random(nw, seed + 1), *b = nu_random(c->Cout, seed + 2);
  float *dy = nu_random(ny, seed + 3), *dw0 = nu_random(nw, seed + 4), *db0 = nu_random(c->Cout, seed + 5);
  char what[200];
  snprintf(what, sizeof what, "conv%dd%s N=%d Cin=%d in=%dx%dx%d Cout=%d k=%d p=%d d=%d bias=%d ws=%d on %s", c->dims,
           c->via_conv2d ? " (conv.c)" : "", c->N, c->Cin, g.in[0], g.in[1], g.in[2], c->Cout, c->k[0], c->p, c->d,
           c->bias, c->ws_samples, tu_name(ctx));

  run_out o = run(ctx, c, &g, 0, x, w, b, dy, dw0, db0, 0);
  double *dx_ = nu_to_double(x, nx), *dw_ = nu_to_double(w, nw), *db_ = c->bias ? nu_to_double(b, c->Cout) : NULL;
  double *ddy = nu_to_double(dy, ny), *ry = malloc(ny * 8), *rdx = malloc(nx * 8), *rdw = malloc(nw * 8),
         *rdb = malloc(c->Cout * 8);
  ref_convnd_forward(&g, dx_, dw_, db_, ry);
  ref_convnd_backward(&g, dx_, dw_, ddy, rdx, rdw, rdb);
  double *want_dw = nu_plus(dw0, rdw, nw), *want_db = nu_plus(db0, rdb, c->Cout);
  double e, tol_y = NU_SUM_TOL(c->Cin * KE), tol_dx = NU_SUM_TOL(c->Cout * KE), tol_dw = NU_SUM_TOL(c->N * P);
  ck_assert_msg((e = nu_err(o.y, ry, ny)) <= tol_y, "%s: forward error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(o.dx, rdx, nx)) <= tol_dx, "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(o.dw, want_dw, nw)) <= tol_dw, "%s: dw error %g" NU_AT, what, e, NU_AT_ARGS);
  if (c->bias)
    ck_assert_msg((e = nu_err(o.db, want_db, c->Cout)) <= tol_dw, "%s: db error %g" NU_AT, what, e, NU_AT_ARGS);

  if (!c->more) goto done;
  /* The im2col path on the same tiles: the forward's bits. */
  setenv("CLT_CONV_IMPLICIT", "0", 1);
  run_out im = run(ctx, c, &g, 0, x, w, b, dy, dw0, db0, 0);
  unsetenv("CLT_CONV_IMPLICIT");
  ck_assert_msg(memcmp(o.y, im.y, ny * 4) == 0, "%s: forward differs from im2col's by %g", what,
                max_diff(o.y, im.y, ny));
  ck_assert_msg(max_diff(o.dx, im.dx, nx) <= tol_dx, "%s: dx differs from im2col's", what);

  /* f16 activations: within half's rounding of the f32 run. */
  run_out h = run(ctx, c, &g, 1, x, w, b, dy, dw0, db0, 0);
  ck_assert_msg((e = max_diff(h.y, o.y, ny)) <= 1e-2 * sqrt((double)(c->Cin * KE)), "%s: f16 forward off by %g",
                what, e);
  ck_assert_msg((e = max_diff(h.dx, o.dx, nx)) <= 1e-2 * sqrt((double)(c->Cout * KE)), "%s: f16 dx off by %g", what,
                e);
  ck_assert_msg((e = max_diff(h.dw, o.dw, nw)) <= 1e-2 * sqrt((double)(c->N * P)), "%s: f16 dw off by %g", what, e);

  free_out(&im), free_out(&h);
done:
  free_out(&o);
  free(x), free(w), free(b), free(dy), free(dw0), free(db0), free(dx_), free(dw_), free(db_), free(ddy);
  free(ry), free(rdx), free(rdw), free(rdb), free(want_dw), free(want_db);
}

START_TEST(implicit_gemm_matches_reference_and_im2col) {
  setenv("CLT_CPU_GEMM", "1", 1); /* rusticl's llvmpipe too */
  for (int d = 0; d < tu_ndev; d++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(tu_ctx[d], &cases[i]);
  unsetenv("CLT_CPU_GEMM");
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn_conv_cpu");
  NU_ADD_CASE(s, "implicit", implicit_gemm_matches_reference_and_im2col);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
