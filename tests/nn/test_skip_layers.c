/*
 * test_skip_layers.c: the U-Net's layers of src/nn/ on every device (PoCL
 * and rusticl): groupnorm (torch.nn.GroupNorm) and the channel concat of a
 * skip connection.
 *
 * groupnorm's forward is checked against the plain-C reference (src/ref,
 * in double), its backward against the reference backward AND central
 * finite differences of f = sum(y * r) with the reference forward (r the
 * upstream gradient dy; nnutil.h), over odd sizes, one group, one channel
 * per group, a batch of 1, groups wider than a work-group and a mean far
 * from 0 (the variance must be two-pass). Accumulated gradients start from
 * random values; outputs start as NaN so a missed element shows; guard
 * elements catch stray writes. concat: each element where torch.cat puts
 * it (the tensors in buffers of their own and all in one), its backward
 * the exact split, either part alone. Bad shapes are
 * refused naming the op and the tensors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/common.h"
#include "nnutil.h"
#include "ref/ref_nn.h"

/* ---- groupnorm ------------------------------------------------------------ */

typedef struct gn_state {
  int N, C, S, G;
  double eps, *x, *w, *b, *r, *y;
} gn_state;

static double gn_f(void *p) {
  gn_state *s = p;
  ref_groupnorm_forward(s->N, s->C, s->S, s->G, s->eps, s->x, s->w, s->b, s->y, NULL, NULL);
  return nu_dot(s->y, s->r, (size_t)s->N * s->C * s->S);
}

/* Rows of (C / G) S reduce that many terms twice; dw and db sum N S terms:
 * SUM_TOL of the larger. x is (N, C, H, W) with S = H W. */
static void groupnorm_case(clt_context *ctx, int N, int C, int H, int W, int G, float shift) {
  int S = H * W, D = C / G * S;
  size_t n = (size_t)N * C * S;
  const float eps = 1e-5f;
  unsigned seed = (unsigned)(N * 1000 + C * 10 + G);
  float *x = nu_random(n, seed), *w = nu_random((size_t)C, seed + 1), *b = nu_random((size_t)C, seed + 2);
  float *dy = nu_random(n, seed + 3), *dw0 = nu_random((size_t)C, seed + 4), *db0 = nu_random((size_t)C, seed + 5);
  for (size_t i = 0; i < n; i++) x[i] += shift;
  for (int i = 0; i < C; i++) w[i] = 1.0f + 0.5f * w[i];
  clt_tensor tx = nu_f32(ctx, x, NU_SHAPE(N, C, H, W)), ty = nu_f32(ctx, NULL, NU_SHAPE(N, C, H, W));
  clt_tensor tw = nu_f32(ctx, w, NU_SHAPE(C)), tb = nu_f32(ctx, b, NU_SHAPE(C));
  clt_tensor tmean = nu_f32(ctx, NULL, NU_SHAPE(N * G)), trstd = nu_f32(ctx, NULL, NU_SHAPE(N * G));
  clt_tensor tdy = nu_f32(ctx, dy, NU_SHAPE(N, C, H, W)), tdx = nu_f32(ctx, NULL, NU_SHAPE(N, C, H, W));
  clt_tensor tdw = nu_f32(ctx, dw0, NU_SHAPE(C)), tdb = nu_f32(ctx, db0, NU_SHAPE(C));
  ck_assert_msg(clt_nn_groupnorm_forward(ctx, G, eps, &tx, &tw, &tb, &ty, &tmean, &trstd) == 0, "%s",
                clt_last_error());
  ck_assert_msg(clt_nn_groupnorm_backward(ctx, G, &tx, &tw, &tmean, &trstd, &tdy, &tdx, &tdw, &tdb) == 0, "%s",
                clt_last_error());
  float *y = malloc(n * 4), *mean = malloc((size_t)N * G * 4), *rstd = malloc((size_t)N * G * 4);
  float *gdx = malloc(n * 4), *gdw = malloc((size_t)C * 4), *gdb = malloc((size_t)C * 4);
  nu_get(ctx, &ty, y), nu_get(ctx, &tmean, mean), nu_get(ctx, &trstd, rstd);
  nu_get(ctx, &tdx, gdx), nu_get(ctx, &tdw, gdw), nu_get(ctx, &tdb, gdb);

  gn_state s = {N, C, S, G, eps, nu_to_double(x, n), nu_to_double(w, C), nu_to_double(b, C), nu_to_double(dy, n),
                malloc(n * 8)};
  double *ry = malloc(n * 8), *rmean = malloc((size_t)N * G * 8), *rrstd = malloc((size_t)N * G * 8);
  double *rdx = malloc(n * 8), *rdw = malloc((size_t)C * 8), *rdb = malloc((size_t)C * 8);
  ref_groupnorm_forward(N, C, S, G, eps, s.x, s.w, s.b, ry, rmean, rrstd);
  ref_groupnorm_backward(N, C, S, G, s.x, s.w, rmean, rrstd, s.r, rdx, rdw, rdb);
  double *want_dw = nu_plus(dw0, rdw, C), *want_db = nu_plus(db0, rdb, C);
  char what[160];
  snprintf(what, sizeof what, "groupnorm %d on (%d, %d, %d, %d) shift=%g on %s", G, N, C, H, W, (double)shift,
           tu_name(ctx));
  double e, tol = NU_SUM_TOL(D > N * S ? D : N * S);
  ck_assert_msg((e = nu_err(y, ry, n)) <= tol, "%s: y error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(mean, rmean, (size_t)N * G)) <= tol, "%s: mean error %g" NU_AT, what, e, NU_AT_ARGS);
  for (int m = 0; m < N * G; m++)
    ck_assert_msg(fabs(rstd[m] - rrstd[m]) <= tol * rrstd[m], "%s: rstd[%d] %g vs %g", what, m, rstd[m], rrstd[m]);
  ck_assert_msg((e = nu_err(gdx, rdx, n)) <= tol, "%s: dx error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdw, want_dw, C)) <= tol, "%s: dw error %g" NU_AT, what, e, NU_AT_ARGS);
  ck_assert_msg((e = nu_err(gdb, want_db, C)) <= tol, "%s: db error %g" NU_AT, what, e, NU_AT_ARGS);
  float *g_w = nu_added(gdw, dw0, C), *g_b = nu_added(gdb, db0, C);
  ck_assert_msg((e = nu_fd_error(gn_f, &s, s.x, n, gdx, NU_FD_H, NU_FD_POINTS)) <= tol, "%s: dx vs fd %g" NU_AT, what,
                e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(gn_f, &s, s.w, C, g_w, NU_FD_H, NU_FD_POINTS)) <= tol, "%s: dw vs fd %g" NU_AT, what,
                e, NU_AT_ARGS);
  ck_assert_msg((e = nu_fd_error(gn_f, &s, s.b, C, g_b, NU_FD_H, NU_FD_POINTS)) <= tol, "%s: db vs fd %g" NU_AT, what,
                e, NU_AT_ARGS);
  /* in place (dx over dy) gives the same bits; without dx, only the parameters' gradients */
  ck_assert_int_eq(clt_nn_groupnorm_backward(ctx, G, &tx, &tw, &tmean, &trstd, &tdy, &tdy, &tdw, &tdb), 0);
  float *dx2 = malloc(n * 4);
  nu_get(ctx, &tdy, dx2);
  ck_assert_msg(memcmp(dx2, gdx, n * 4) == 0, "%s: in-place backward differs", what);
  ck_assert_int_eq(clt_nn_groupnorm_backward(ctx, G, &tx, &tw, &tmean, &trstd, &tdx, NULL, &tdw, &tdb), 0);
  nu_check_guards(ctx, what);
  nu_free_all();
  free(x), free(w), free(b), free(dy), free(dw0), free(db0), free(y), free(mean), free(rstd), free(gdx), free(gdw);
  free(gdb), free(s.x), free(s.w), free(s.b), free(s.r), free(s.y), free(ry), free(rmean), free(rrstd), free(rdx);
  free(rdw), free(rdb), free(want_dw), free(want_db), free(g_w), free(g_b), free(dx2);
}

START_TEST(groupnorm_matches_reference_and_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) {
    groupnorm_case(tu_ctx[d], 2, 6, 3, 5, 3, 0.0f);   /* odd sizes, 2 channels a group */
    groupnorm_case(tu_ctx[d], 1, 4, 2, 3, 1, 0.0f);   /* a batch of 1, one group: layernorm over (C, H, W) */
    groupnorm_case(tu_ctx[d], 3, 5, 1, 7, 5, 3.0f);   /* a channel a group (instance norm); |mean| > std */
    groupnorm_case(tu_ctx[d], 2, 4, 16, 20, 2, 0.0f); /* groups of 640, wider than a work-group */
    groupnorm_case(tu_ctx[d], 2, 6, 1, 1, 3, 0.0f);   /* no positions (a flat input's features) */
  }
}
END_TEST

/* ---- concat ---------------------------------------------------------------- */

START_TEST(concat_is_torch_cat_and_splits_back) {
  enum { N = 3, A = 2, B = 5, HW = 7 }; /* (N, A, 7) and (N, B, 7) into (N, A + B, 7) */
  size_t na = N * A * HW, nb = N * B * HW, ny = na + nb;
  float *a = nu_random(na, 1), *b = nu_random(nb, 2), *dy = nu_random(ny, 3);
  float *y = malloc(ny * 4), *da = malloc(na * 4), *db = malloc(nb * 4);
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    clt_tensor ta = nu_f32(ctx, a, NU_SHAPE(N, A, HW)), tb = nu_f32(ctx, b, NU_SHAPE(N, B, HW));
    clt_tensor ty = nu_f32(ctx, NULL, NU_SHAPE(N, A + B, HW)), tdy = nu_f32(ctx, dy, NU_SHAPE(N, A + B, HW));
    clt_tensor tda = nu_f32(ctx, NULL, NU_SHAPE(N, A, HW)), tdb = nu_f32(ctx, NULL, NU_SHAPE(N, B, HW));
    ck_assert_msg(clt_nn_concat_forward(ctx, &ta, &tb, &ty) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_nn_concat_backward(ctx, &tdy, &tda, &tdb) == 0, "%s", clt_last_error());
    nu_get(ctx, &ty, y), nu_get(ctx, &tda, da), nu_get(ctx, &tdb, db);
    for (int n = 0; n < N; n++)
      for (int c = 0; c < A + B; c++)
        for (int p = 0; p < HW; p++) {
          size_t yi = ((size_t)n * (A + B) + c) * HW + p;
          float want = c < A ? a[((size_t)n * A + c) * HW + p] : b[((size_t)n * B + c - A) * HW + p];
          float got_d = c < A ? da[((size_t)n * A + c) * HW + p] : db[((size_t)n * B + c - A) * HW + p];
          ck_assert_msg(y[yi] == want, "%s: y[%d, %d, %d] is %g, want %g", tu_name(ctx), n, c, p, y[yi], want);
          ck_assert_msg(got_d == dy[yi], "%s: the gradient's part at [%d, %d, %d] is %g, want %g", tu_name(ctx), n,
                        c, p, got_d, dy[yi]);
        }
    /* a, b and y in one buffer, as in the activation arena */
    cl_mem one;
    ck_assert_int_eq(clt_buffer_create(ctx, (na + nb + ny) * 4, &one), 0);
    clt_tensor oa, ob, oy;
    ck_assert_int_eq(clt_tensor_view(one, 0, CLT_F32, 3, (int64_t[]){N, A, HW}, &oa), 0);
    ck_assert_int_eq(clt_tensor_view(one, na * 4, CLT_F32, 3, (int64_t[]){N, B, HW}, &ob), 0);
    ck_assert_int_eq(clt_tensor_view(one, (na + nb) * 4, CLT_F32, 3, (int64_t[]){N, A + B, HW}, &oy), 0);
    ck_assert_int_eq(clt_tensor_upload(ctx, &oa, a, na * 4), 0);
    ck_assert_int_eq(clt_tensor_upload(ctx, &ob, b, nb * 4), 0);
    ck_assert_msg(clt_nn_concat_forward(ctx, &oa, &ob, &oy) == 0, "%s", clt_last_error());
    float *y1 = malloc(ny * 4);
    nu_get(ctx, &oy, y1);
    ck_assert_msg(memcmp(y1, y, ny * 4) == 0, "%s: concat within one buffer differs", tu_name(ctx));
    free(y1);
    clt_buffer_release(one);
    /* either part alone */
    clt_tensor tdb2 = nu_f32(ctx, NULL, NU_SHAPE(N, B, HW)), tda2 = nu_f32(ctx, NULL, NU_SHAPE(N, A, HW));
    ck_assert_msg(clt_nn_concat_backward(ctx, &tdy, NULL, &tdb2) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_nn_concat_backward(ctx, &tdy, &tda2, NULL) == 0, "%s", clt_last_error());
    float *db2 = malloc(nb * 4), *da2 = malloc(na * 4);
    nu_get(ctx, &tdb2, db2), nu_get(ctx, &tda2, da2);
    ck_assert(memcmp(db2, db, nb * 4) == 0 && memcmp(da2, da, na * 4) == 0);
    free(db2), free(da2);
    nu_check_guards(ctx, "concat");
    nu_free_all();
  }
  free(a), free(b), free(dy), free(y), free(da), free(db);
}
END_TEST

START_TEST(bad_shapes_are_named) {
  clt_context *ctx = tu_ctx[0];
  clt_tensor x = nu_f32(ctx, NULL, NU_SHAPE(2, 6, 4)), w = nu_f32(ctx, NULL, NU_SHAPE(6));
  clt_tensor w5 = nu_f32(ctx, NULL, NU_SHAPE(5)), st = nu_f32(ctx, NULL, NU_SHAPE(8)), y = nu_f32(ctx, NULL, NU_SHAPE(2, 6, 4));
  NU_EXPECT(clt_nn_groupnorm_forward(ctx, 4, 1e-5f, &x, &w, &w, &y, &st, &st), CLT_ESHAPE, "groupnorm forward",
            "4 groups do not divide 6 channels");
  NU_EXPECT(clt_nn_groupnorm_forward(ctx, 3, 1e-5f, &x, &w5, &w5, &y, &st, &st), CLT_ESHAPE, "groupnorm forward",
            "w and b must have x's channels, 6");
  NU_EXPECT(clt_nn_groupnorm_forward(ctx, 2, 1e-5f, &x, &w, &w, &y, &st, &st), CLT_ESHAPE,
            "one element per sample and group, 4");
  clt_tensor a = nu_f32(ctx, NULL, NU_SHAPE(2, 2, 4)), b3 = nu_f32(ctx, NULL, NU_SHAPE(3, 4, 4));
  NU_EXPECT(clt_nn_concat_forward(ctx, &a, &b3, &y), CLT_ESHAPE, "concat forward", "the batch sizes differ");
  clt_tensor b = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 4));
  NU_EXPECT(clt_nn_concat_forward(ctx, &a, &b, &y), CLT_ESHAPE, "concat forward", "y's size per sample is not a's plus b's");
  nu_free_all();
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn_skip");
  NU_ADD_CASE(s, "groupnorm", groupnorm_matches_reference_and_finite_differences);
  NU_ADD_CASE(s, "concat", concat_is_torch_cat_and_splits_back);
  NU_ADD_CASE(s, "errors", bad_shapes_are_named);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
