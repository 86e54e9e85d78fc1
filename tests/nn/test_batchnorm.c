/*
 * test_batchnorm.c: batchnorm's kernels (src/nn/batchnorm.c) on every
 * device (PoCL and rusticl), both the CPUs' kernels (rows an item) and
 * the GPUs' (forced: strided sums, an item per value): the per-channel
 * partial statistics, the
 * normalisation, the backward's partial sums (accumulated into dw, db) and
 * the input gradient, against the plain-C reference (double) and the
 * input, weight and bias gradients against central finite differences of
 * f = sum(y * r) through the reference forward in training (the batch's
 * own statistics, so dx carries their gradient). The kernels are fed the
 * statistics and global means the reference computes, as the layer feeds
 * them the sums over replicas. Shapes: images (N, C, H*W), a flat (N, F)
 * (S = 1), batch 1 with positions, one channel, a mean far from 0 (the
 * two-pass variance must keep it), more values than a work-group. The
 * statistics finished on the device (one device's batch: the mean, the
 * biased and the unbiased variances, and the backward's means) against the
 * same reference; the running statistics' update against the host's
 * unfused float arithmetic, bit for bit.
 *
 * Tolerances: NU_SUM_TOL of the values each channel's sums add (N*S);
 * the finite differences of a function that is smooth in x (the variance
 * is bounded away from 0 here) are accurate to ~1e-9 at h = 1e-5.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnutil.h"

typedef struct bn_case {
  int N, C, S;
  double shift; /* added to x: a mean far from 0 */
} bn_case;

static const bn_case cases[] = {
    {4, 3, 25, 0},  /* images 5x5 */
    {7, 5, 1, 0},   /* flat features: BatchNorm1d on (N, F) */
    {1, 4, 9, 0},   /* batch 1, 9 positions */
    {3, 1, 7, 0},   /* one channel */
    {2, 2, 300, 0}, /* 600 values a channel: more than a work-group */
    {5, 3, 4, 50},  /* |mean| / std ~ 100 */
    {37, 2, 9, 50}, /* many rows merged (unequal counts per item on rusticl), far from 0 */
};

typedef struct bn_state {
  int N, C, S;
  double eps, *x, *w, *b, *r, *y;
} bn_state;

static double bn_f(void *p) {
  bn_state *s = p;
  ref_batchnorm_forward(s->N, s->C, s->S, s->eps, s->x, s->w, s->b, s->y, NULL, NULL);
  return nu_dot(s->y, s->r, (size_t)s->N * s->C * s->S);
}

static void bn_run(clt_context *ctx, const bn_case *c) {
  const float eps = 1e-5f;
  int N = c->N, C = c->C, S = c->S;
  size_t nx = (size_t)N * C * S;
  unsigned seed = (unsigned)(nx + 7);
  float *x = nu_random(nx, seed), *w = nu_random(C, seed + 1), *b = nu_random(C, seed + 2);
  float *dy = nu_random(nx, seed + 3), *dw0 = nu_random(C, seed + 4), *db0 = nu_random(C, seed + 5);
  for (size_t i = 0; i < nx; i++) x[i] += (float)c->shift;
  double *rx = nu_to_double(x, nx), *rw = nu_to_double(w, C), *rb = nu_to_double(b, C), *rdy = nu_to_double(dy, nx);
  double *ry = malloc(nx * 8), *rmean = malloc(C * 8), *rvar = malloc(C * 8), *rdx = malloc(nx * 8);
  double *rdw = malloc(C * 8), *rdb = malloc(C * 8), M = (double)N * S;
  ref_batchnorm_forward(N, C, S, eps, rx, rw, rb, ry, rmean, rvar);
  ref_batchnorm_backward(N, C, S, eps, rx, rw, rdy, rdx, rdw, rdb);
  float *fmean = nu_to_float(rmean, C), *fvar = nu_to_float(rvar, C);
  float *gdy = malloc(C * 4), *gdyx = malloc(C * 4);
  for (int k = 0; k < C; k++) gdy[k] = (float)(rdb[k] / M), gdyx[k] = (float)(rdw[k] / M);

  clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(N, C, S)), ty = nu_f32(ctx, NULL, NU_SHAPE(N, C, S));
  clt_tensor tdy = nu_f32(ctx, dy, NU_SHAPE(N, C, S)), tdx = nu_f32(ctx, NULL, NU_SHAPE(N, C, S));
  clt_tensor tw = nu_f32(ctx, w, NU_SHAPE(C)), tb = nu_f32(ctx, b, NU_SHAPE(C));
  clt_tensor tm = nu_f32(ctx, fmean, NU_SHAPE(C)), tv = nu_f32(ctx, fvar, NU_SHAPE(C));
  clt_tensor tdw = nu_f32(ctx, dw0, NU_SHAPE(C)), tdb = nu_f32(ctx, db0, NU_SHAPE(C));
  clt_tensor tgdy = nu_f32(ctx, gdy, NU_SHAPE(C)), tgdyx = nu_f32(ctx, gdyx, NU_SHAPE(C));
  clt_tensor tpart = nu_f32(ctx, NULL, NU_SHAPE(C, 2)), tpart2 = nu_f32(ctx, NULL, NU_SHAPE(C, 2));

  ck_assert_msg(clt_nn_batchnorm_stats(ctx, &tx, &tpart) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_batchnorm_forward(ctx, eps, &tx, &tm, &tv, &tw, &tb, &ty) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_batchnorm_backward_sums(ctx, eps, &tx, &tm, &tv, &tdy, &tdw, &tdb, &tpart2) == 0, "%s",
                clt_last_error());
  ck_assert_msg(clt_nn_batchnorm_backward_input(ctx, eps, &tx, &tm, &tv, &tw, &tgdy, &tgdyx, &tdy, &tdx) == 0, "%s",
                clt_last_error());
  clt_tensor tstats = nu_f32(ctx, NULL, NU_SHAPE(3 * C)), tmeans = nu_f32(ctx, NULL, NU_SHAPE(2 * C));
  if (M >= 2) {
    ck_assert_msg(clt_nn_batchnorm_finish_stats(ctx, M, &tpart, &tstats) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_nn_batchnorm_means(ctx, M, &tpart2, &tmeans) == 0, "%s", clt_last_error());
  }
  float *part = malloc(C * 8), *part2 = malloc(C * 8), *y = malloc(nx * 4), *gdx = malloc(nx * 4);
  float *gdw = malloc(C * 4), *gdb = malloc(C * 4), *got_mean = malloc(C * 4), *got_var = malloc(C * 4);
  nu_get(ctx, &tpart, part), nu_get(ctx, &tpart2, part2), nu_get(ctx, &ty, y), nu_get(ctx, &tdx, gdx);
  nu_get(ctx, &tdw, gdw), nu_get(ctx, &tdb, gdb);
  nu_check_guards(ctx, "batchnorm");
  for (int k = 0; k < C; k++) got_mean[k] = part[2 * k], got_var[k] = (float)(part[2 * k + 1] / M);

  char what[160];
  snprintf(what, sizeof what, "batchnorm N=%d C=%d S=%d shift=%g on %s", N, C, S, c->shift, tu_name(ctx));
  double e, tol = NU_SUM_TOL(N * S);
  /* the mean's error is relative to |mean| + 1 and the shift makes it ~50 */
  ck_assert_msg((e = nu_err(got_mean, rmean, C)) <= tol * (1 + fabs(c->shift)), "%s: mean error %g" NU_AT, what, e,
                NU_AT_ARGS);
  ck_assert_msg((e = nu_err(got_var, rvar, C)) <= tol, "%s: variance error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(y, ry, nx)) <= tol, "%s: forward error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdx, rdx, nx)) <= tol, "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  double *want_dw = nu_plus(dw0, rdw, C), *want_db = nu_plus(db0, rdb, C);
  ck_assert_msg((e = nu_err(gdw, want_dw, C)) <= tol, "%s: dw error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdb, want_db, C)) <= tol, "%s: db error %g" NU_AT, what, e, NU_AT_ARGS);
  for (int k = 0; k < C; k++) {
    ck_assert_msg(fabs(part2[2 * k] - rdb[k]) <= tol * (1 + fabs(rdb[k])), "%s: part sum dy [%d]", what, k);
    ck_assert_msg(fabs(part2[2 * k + 1] - rdw[k]) <= tol * (1 + fabs(rdw[k])), "%s: part sum dy*xhat [%d]", what, k);
  }
  if (M >= 2) { /* the statistics and the means finished on the device */
    float *st = malloc((size_t)C * 12), *mn = malloc((size_t)C * 8);
    double *uvar = malloc((size_t)C * 8), *want_g = malloc((size_t)C * 16);
    nu_get(ctx, &tstats, st), nu_get(ctx, &tmeans, mn);
    for (int k = 0; k < C; k++) uvar[k] = rvar[k] * M / (M - 1), want_g[k] = rdb[k] / M, want_g[C + k] = rdw[k] / M;
    ck_assert_msg((e = nu_err(st, rmean, C)) <= tol * (1 + fabs(c->shift)), "%s: finished mean error %g" NU_AT, what,
                  e, NU_AT_ARGS);
    ck_assert_msg((e = nu_err(st + C, rvar, C)) <= tol, "%s: finished variance error %g" NU_AT, what, e, NU_AT_ARGS);
    ck_assert_msg((e = nu_err(st + 2 * C, uvar, C)) <= tol, "%s: unbiased variance error %g" NU_AT, what, e,
                  NU_AT_ARGS);
    ck_assert_msg((e = nu_err(mn, want_g, 2 * C)) <= tol, "%s: backward means error %g" NU_AT, what, e, NU_AT_ARGS);
    free(st), free(mn), free(uvar), free(want_g);
  }
  /* finite differences of sum(y * dy) through the training forward */
  bn_state st = {N, C, S, eps, rx, rw, rb, rdy, malloc(nx * 8)};
  float *g_w = nu_added(gdw, dw0, C), *g_b = nu_added(gdb, db0, C);
  double fd_tol = tol * (1 + fabs(c->shift)); /* h moves a shifted x by a relatively smaller step */
  ck_assert_msg((e = nu_fd_error(bn_f, &st, st.x, nx, gdx, NU_FD_H, NU_FD_POINTS)) <= fd_tol, "%s: dx vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(bn_f, &st, st.w, C, g_w, NU_FD_H, NU_FD_POINTS)) <= tol, "%s: dw vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(bn_f, &st, st.b, C, g_b, NU_FD_H, NU_FD_POINTS)) <= tol, "%s: db vs fd %g" NU_AT,
                what, e, NU_AT_ARGS);
  free(x), free(w), free(b), free(dy), free(dw0), free(db0), free(rx), free(rw), free(rb), free(rdy), free(ry);
  free(rmean), free(rvar), free(rdx), free(rdw), free(rdb), free(fmean), free(fvar), free(gdy), free(gdyx);
  free(part), free(part2), free(y), free(gdx), free(gdw), free(gdb), free(got_mean), free(got_var);
  free(want_dw), free(want_db), free(st.y), free(g_w), free(g_b);
  nu_free_all();
}

START_TEST(batchnorm_matches_reference_and_finite_differences) {
  for (int strided = 0; strided < 2; strided++) { /* the CPUs' kernels, then the GPUs' */
    clt__nn_batchnorm_strided(strided);
    for (int d = 0; d < tu_ndev; d++)
      for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) bn_run(tu_ctx[d], &cases[i]);
  }
  clt__nn_batchnorm_strided(0);
}
END_TEST

/* Two halves of a batch, their partial statistics combined as the layer
 * combines replicas' (count, sum, sum of squares in double), give the
 * whole batch's mean and variance. */
START_TEST(halves_combine_to_the_whole_batch) {
  int N = 6, C = 3, S = 10;
  size_t nx = (size_t)N * C * S;
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    float *x = nu_random(nx, 99), part[2][6];
    for (size_t i = 0; i < nx; i++) x[i] = 3 + 2 * x[i];
    double *rx = nu_to_double(x, nx), *ry = malloc(nx * 8), mean[3], var[3], one[3] = {1, 1, 1}, zero[3] = {0};
    ref_batchnorm_forward(N, C, S, 1e-5, rx, one, zero, ry, mean, var);
    for (int h = 0; h < 2; h++) {
      clt_tensor tx = nu_f32(ctx, x + (size_t)h * nx / 2, NU_SHAPE(N / 2, C, S));
      clt_tensor tp = nu_f32(ctx, NULL, NU_SHAPE(C, 2));
      ck_assert_msg(clt_nn_batchnorm_stats(ctx, &tx, &tp) == 0, "%s", clt_last_error());
      nu_get(ctx, &tp, part[h]);
    }
    for (int c = 0; c < C; c++) {
      double cnt = (double)N / 2 * S, s1 = 0, s2 = 0, M = (double)N * S;
      for (int h = 0; h < 2; h++) s1 += cnt * part[h][2 * c], s2 += part[h][2 * c + 1] + cnt * part[h][2 * c] * part[h][2 * c];
      double mu = s1 / M, v = s2 / M - mu * mu;
      ck_assert_msg(fabs(mu - mean[c]) <= 1e-6 * (1 + fabs(mean[c])), "channel %d mean %g, want %g on %s", c, mu,
                    mean[c], tu_name(ctx));
      ck_assert_msg(fabs(v - var[c]) <= 1e-5 * (1 + var[c]), "channel %d var %g, want %g on %s", c, v, var[c],
                    tu_name(ctx));
    }
    free(x), free(rx), free(ry);
    nu_free_all();
  }
}
END_TEST

/* The running statistics moved on the device: the bits of the host's
 * float arithmetic (what the replicas of a rank, on different vendors,
 * must all hold), which a fused multiply-add would miss on most of these
 * values. */
START_TEST(running_statistics_have_the_hosts_bits) {
  enum { C = 1000 };
  const float m = 0.1f;
  float *mean = nu_random(C, 5), *uvar = nu_random(C, 6), *rm = nu_random(C, 7), *rv = nu_random(C, 8);
  float want_m[C], want_v[C], got_m[C], got_v[C];
  for (int k = 0; k < C; k++) {
    uvar[k] = 1 + uvar[k], rv[k] = 1 + rv[k];
    volatile float a = (1.0f - m) * rm[k], b = m * mean[k], u = (1.0f - m) * rv[k], v = m * uvar[k];
    want_m[k] = a + b, want_v[k] = u + v;
  }
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    clt_tensor tm = nu_f32(ctx, mean, NU_SHAPE(C)), tu = nu_f32(ctx, uvar, NU_SHAPE(C));
    clt_tensor trm = nu_f32(ctx, rm, NU_SHAPE(C)), trv = nu_f32(ctx, rv, NU_SHAPE(C));
    ck_assert_msg(clt_nn_batchnorm_running(ctx, m, &tm, &tu, &trm, &trv) == 0, "%s", clt_last_error());
    nu_get(ctx, &trm, got_m), nu_get(ctx, &trv, got_v);
    nu_check_guards(ctx, "batchnorm running");
    for (int k = 0; k < C; k++)
      ck_assert_msg(!memcmp(&got_m[k], &want_m[k], 4) && !memcmp(&got_v[k], &want_v[k], 4),
                    "running statistics [%d] on %s: %.9g, %.9g; the host's %.9g, %.9g", k, tu_name(ctx),
                    (double)got_m[k], (double)got_v[k], (double)want_m[k], (double)want_v[k]);
    nu_free_all();
  }
  free(mean), free(uvar), free(rm), free(rv);
}
END_TEST

START_TEST(bad_shapes_are_named) {
  clt_context *ctx = tu_ctx[0];
  clt_tensor x = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 4)), c3 = nu_f32(ctx, NULL, NU_SHAPE(3));
  clt_tensor c4 = nu_f32(ctx, NULL, NU_SHAPE(4)), p3 = nu_f32(ctx, NULL, NU_SHAPE(3, 2));
  clt_tensor y2 = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 5)), x2d = nu_f32(ctx, NULL, NU_SHAPE(6, 4));
  NU_EXPECT(clt_nn_batchnorm_forward(ctx, 1e-5f, &x, &c3, &c4, &c3, &c3, &x), CLT_ESHAPE, "batchnorm forward",
            "var must have one element per channel of x, 3");
  NU_EXPECT(clt_nn_batchnorm_forward(ctx, 1e-5f, &x, &c3, &c3, &c3, &c3, &y2), CLT_ESHAPE, "batchnorm forward", "y");
  NU_EXPECT(clt_nn_batchnorm_forward(ctx, 0.0f, &x, &c3, &c3, &c3, &c3, &x), CLT_EINVAL, "batchnorm forward",
            "eps 0 must be positive");
  NU_EXPECT(clt_nn_batchnorm_stats(ctx, &x2d, &p3), CLT_ESHAPE, "batchnorm statistics", "(N, C, S)");
  NU_EXPECT(clt_nn_batchnorm_stats(ctx, &x, &c3), CLT_ESHAPE, "batchnorm statistics", "2 floats per channel, 6");
  NU_EXPECT(clt_nn_batchnorm_backward_input(ctx, 1e-5f, &x, &c3, &c3, &c3, &c3, &c4, &x, &x), CLT_ESHAPE,
            "batchnorm backward", "mean_dy_xhat must have one element per channel");
  clt_tensor c9 = nu_f32(ctx, NULL, NU_SHAPE(9)), c6 = nu_f32(ctx, NULL, NU_SHAPE(6));
  NU_EXPECT(clt_nn_batchnorm_finish_stats(ctx, 8, &p3, &c6), CLT_ESHAPE, "batchnorm statistics", "3 C");
  NU_EXPECT(clt_nn_batchnorm_finish_stats(ctx, 1, &p3, &c9), CLT_EINVAL, "batchnorm statistics",
            "1 values a channel: more than one needed");
  NU_EXPECT(clt_nn_batchnorm_means(ctx, 8, &p3, &c9), CLT_ESHAPE, "batchnorm backward means", "2 C");
  NU_EXPECT(clt_nn_batchnorm_running(ctx, 0.1f, &c3, &c3, &c3, &c4), CLT_ESHAPE, "batchnorm running statistics",
            "running_var holds 4 floats");
  NU_EXPECT(clt_nn_batchnorm_running(ctx, 1.5f, &c3, &c3, &c3, &c3), CLT_EINVAL, "batchnorm running statistics",
            "momentum 1.5");
  nu_free_all();
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn_batchnorm");
  NU_ADD_CASE(s, "batchnorm", batchnorm_matches_reference_and_finite_differences, halves_combine_to_the_whole_batch,
              running_statistics_have_the_hosts_bits);
  NU_ADD_CASE(s, "errors", bad_shapes_are_named);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
