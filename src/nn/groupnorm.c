/*
 * groupnorm.c: group normalization, torch.nn.GroupNorm(G, C), forward
 * (saving each sample's and group's mean and 1/std) and backward
 * (cl/groupnorm.cl). x (N, C, ...) is f32, or f16 under mixed precision
 * (y, dy, dx alike); w, b, their gradients, mean and rstd are f32.
 */
#include "nn/common.h"

#include <stdio.h>

/* x (N, C, S...) with G dividing C; w and b (C); mean, rstd (N * G). */
static int check_gn(const char *op, int G, const clt_tensor *x, const clt_tensor *w, const char *bname,
                    const clt_tensor *b, const clt_tensor *mean, const clt_tensor *rstd, int64_t *N, int64_t *C,
                    int64_t *S) {
  int rc;
  if ((rc = clt__nn_check_act(op, "x", x, 0, "(N, C, ...)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "w", w, CLT_F32, 1, "(C)")) < 0) return rc;
  if ((rc = clt__nn_check(op, bname, b, CLT_F32, 1, "(C)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "mean", mean, CLT_F32, 0, "(N * G)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "rstd", rstd, CLT_F32, 0, "(N * G)")) < 0) return rc;
  clt__nn_named ts[] = {{"x", x}, {"w", w}, {bname, b}, {"mean", mean}, {"rstd", rstd}};
  if (x->ndim < 2) return clt__nn_shape_error(op, ts, 5, "x needs a batch and channels, (N, C, ...)");
  *N = x->shape[0];
  *C = x->shape[1];
  *S = clt_tensor_numel(x) / (*N * *C);
  if (G < 1 || *C % G) return clt__nn_shape_error(op, ts, 5, "%d groups do not divide %lld channels", G, (long long)*C);
  if (w->shape[0] != *C || b->shape[0] != *C)
    return clt__nn_shape_error(op, ts, 5, "w and %s must have x's channels, %lld", bname, (long long)*C);
  if (clt_tensor_numel(mean) != *N * G || clt_tensor_numel(rstd) != *N * G)
    return clt__nn_shape_error(op, ts, 5, "mean and rstd must have one element per sample and group, %lld",
                               (long long)(*N * G));
  return CLT_OK;
}

int clt_nn_groupnorm_forward(clt_context *ctx, int groups, float eps, const clt_tensor *x, const clt_tensor *w,
                             const clt_tensor *b, const clt_tensor *y, const clt_tensor *mean, const clt_tensor *rstd) {
  static const char op[] = "groupnorm forward";
  int64_t N, C, S;
  int rc = check_gn(op, groups, x, w, "b", b, mean, rstd, &N, &C, &S);
  if (rc < 0) return rc;
  if ((rc = clt__nn_check_like(op, "y", y, "x", x)) < 0) return rc;
  if (!(eps > 0.0f)) return clt__error(CLT_EINVAL, "%s: eps %g must be positive", op, (double)eps);
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), woff = clt__nn_off(w), boff = clt__nn_off(b), yoff = clt__nn_off(y);
  cl_ulong moff = clt__nn_off(mean), roff = clt__nn_off(rstd);
  cl_uint g = (cl_uint)groups, cg = (cl_uint)(C / groups), s = (cl_uint)S;
  CLT_TRY(clt_context_kernel(ctx, "groupnorm", "groupnorm_forward", clt__nn_act_opt(x), &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, (int64_t)cg * S, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(w->buf), NN_VAL(woff), NN_VAL(b->buf), NN_VAL(boff),
                      NN_VAL(y->buf), NN_VAL(yoff), NN_VAL(mean->buf), NN_VAL(moff), NN_VAL(rstd->buf), NN_VAL(roff),
                      NN_VAL(g), NN_VAL(cg), NN_VAL(s), NN_VAL(eps), NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)(N * groups), wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_groupnorm_backward(clt_context *ctx, int groups, const clt_tensor *x, const clt_tensor *w,
                              const clt_tensor *mean, const clt_tensor *rstd, const clt_tensor *dy,
                              const clt_tensor *dx, const clt_tensor *dw, const clt_tensor *db) {
  static const char op[] = "groupnorm backward";
  int64_t N, C, S;
  int rc = check_gn(op, groups, x, w, "db", db, mean, rstd, &N, &C, &S);
  if (rc < 0) return rc;
  if ((rc = clt__nn_check_like(op, "dy", dy, "x", x)) < 0 || (dx && (rc = clt__nn_check_like(op, "dx", dx, "x", x)) < 0) ||
      (rc = clt__nn_check_like(op, "dw", dw, "w", w)) < 0)
    return rc;
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), woff = clt__nn_off(w), moff = clt__nn_off(mean), roff = clt__nn_off(rstd);
  cl_ulong dyoff = clt__nn_off(dy), dwoff = clt__nn_off(dw), dboff = clt__nn_off(db);
  cl_uint n = (cl_uint)N, g = (cl_uint)groups, cg = (cl_uint)(C / groups), s = (cl_uint)S;
  const char *opt = clt__nn_act_opt(x);
  /* the parameters' gradients first: the input gradient's kernel reads each
   * dy element before writing the same dx element, so dx may be dy */
  CLT_TRY(clt_context_kernel(ctx, "groupnorm", "groupnorm_backward_params", opt, &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(mean->buf), NN_VAL(moff), NN_VAL(rstd->buf),
                      NN_VAL(roff), NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(dw->buf), NN_VAL(dwoff), NN_VAL(db->buf),
                      NN_VAL(dboff), NN_VAL(n), NN_VAL(g), NN_VAL(cg), NN_VAL(s)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)C, 1, 1));
  if (!dx) return CLT_OK;
  cl_ulong dxoff = clt__nn_off(dx);
  CLT_TRY(clt_context_kernel(ctx, "groupnorm", "groupnorm_backward_input", opt, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, (int64_t)cg * S, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(w->buf), NN_VAL(woff), NN_VAL(mean->buf), NN_VAL(moff),
                      NN_VAL(rstd->buf), NN_VAL(roff), NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(dx->buf), NN_VAL(dxoff),
                      NN_VAL(g), NN_VAL(cg), NN_VAL(s), NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)(N * groups), wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
