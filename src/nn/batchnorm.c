/*
 * batchnorm.c: batch normalisation's kernels (cl/batchnorm.cl) over x seen
 * as (N, C, S): per-channel partial statistics of a replica's samples, the
 * normalisation with given statistics (the global batch's in training, the
 * running ones in eval), and the backward's partial sums and input
 * gradient. Adding the partial sums over replicas is the caller's
 * (model/kinds_batchnorm.c); these only enqueue. x, y, dy and dx are f32,
 * or f16 under mixed precision (all alike); everything else is f32.
 */
#include "nn/common.h"

#include <stdio.h>

/* x (N, C, S) and the per-channel f32 vectors (C) of a call. */
static int check_bn(const char *op, const clt_tensor *x, const clt_tensor *const *vec, const char *const *names,
                    int nvec, int64_t *N, int64_t *C, int64_t *S) {
  int rc;
  if ((rc = clt__nn_check_act(op, "x", x, 3, "(N, C, S)")) < 0) return rc;
  *N = x->shape[0], *C = x->shape[1], *S = x->shape[2];
  for (int k = 0; k < nvec; k++) {
    if ((rc = clt__nn_check(op, names[k], vec[k], CLT_F32, 0, "(C)")) < 0) return rc;
    if (clt_tensor_numel(vec[k]) != *C) {
      clt__nn_named ts[] = {{"x", x}, {names[k], vec[k]}};
      return clt__nn_shape_error(op, ts, 2, "%s must have one element per channel of x, %lld", names[k],
                                 (long long)*C);
    }
  }
  if (*N * *S > 0xffffffffLL) return clt__error(CLT_ESHAPE, "%s: %lld values per channel is beyond 32-bit counts",
                                                 op, (long long)(*N * *S));
  return CLT_OK;
}

/* The kernels (cl/batchnorm.cl): on a CPU device an item walks whole rows
 * (PoCL runs a group's items as a loop; llvmpipe's lanes too gain: 2.0
 * against 5.5 ms for (8, 16, 64x64)'s statistics), elsewhere a group's
 * items stride through a channel side by side, and the elementwise ones
 * take an item per value. Tests force the latter
 * (clt__nn_batchnorm_strided) to check them on the devices they have. */
static int strided_forced;
void clt__nn_batchnorm_strided(int on) { strided_forced = on; }
static int by_rows(const clt_context *ctx) { return !strided_forced && ctx->info.type == CLT_DEVICE_CPU; }

/* Launch an element-wise kernel over x (N, C, S): with rows, a work-group
 * per row of S (its C and S set at argument `arg`), else an item per value. */
static int launch_elementwise(clt_context *ctx, cl_kernel k, int rows, cl_uint arg, int64_t N, int64_t C, int64_t S) {
  int rc = CLT_OK;
  if (!rows) return clt__nn_launch_3d(ctx, k, (size_t)S, (size_t)C, (size_t)N);
  cl_uint c = (cl_uint)C, s = (cl_uint)S;
  NN_ARG(k, arg, c);
  NN_ARG(k, arg + 1, s);
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)(N * C), 1));
fail:
  return rc;
}

static int check_part(const char *op, const clt_tensor *part, int64_t C) {
  int rc = clt__nn_check(op, "part", part, CLT_F32, 0, "(C, 2)");
  if (rc < 0) return rc;
  if (clt_tensor_numel(part) != 2 * C)
    return clt__error(CLT_ESHAPE, "%s: part must hold 2 floats per channel, %lld, not %lld", op, (long long)(2 * C),
                      (long long)clt_tensor_numel(part));
  return CLT_OK;
}

int clt_nn_batchnorm_stats(clt_context *ctx, const clt_tensor *x, const clt_tensor *part) {
  static const char op[] = "batchnorm statistics";
  int64_t N, C, S;
  int rc = check_bn(op, x, NULL, NULL, 0, &N, &C, &S);
  if (rc < 0 || (rc = check_part(op, part, C)) < 0) return rc;
  if (N * S == 0) return clt__error(CLT_ESHAPE, "%s: x has no values", op);
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), poff = clt__nn_off(part);
  cl_uint n = (cl_uint)N, c = (cl_uint)C, s = (cl_uint)S;
  int rows = by_rows(ctx);
  CLT_TRY(clt_context_kernel(ctx, "batchnorm", rows ? "batchnorm_stats" : "batchnorm_stats_strided",
                             clt__nn_act_opt(x), &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, rows ? N : N * S, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(n), NN_VAL(c), NN_VAL(s), NN_VAL(part->buf),
                      NN_VAL(poff), NN_LOCAL(3 * wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)C, wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_batchnorm_forward(clt_context *ctx, float eps, const clt_tensor *x, const clt_tensor *mean,
                             const clt_tensor *var, const clt_tensor *w, const clt_tensor *b, const clt_tensor *y) {
  static const char op[] = "batchnorm forward";
  int64_t N, C, S;
  const clt_tensor *vec[] = {mean, var, w, b};
  static const char *const names[] = {"mean", "var", "weight", "bias"};
  int rc = check_bn(op, x, vec, names, 4, &N, &C, &S);
  if (rc < 0 || (rc = clt__nn_check_like(op, "y", y, "x", x)) < 0) return rc;
  if (!(eps > 0.0f)) return clt__error(CLT_EINVAL, "%s: eps %g must be positive", op, (double)eps);
  if (N * S == 0) return CLT_OK;
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), moff = clt__nn_off(mean), voff = clt__nn_off(var), woff = clt__nn_off(w);
  cl_ulong boff = clt__nn_off(b), yoff = clt__nn_off(y);
  int rows = by_rows(ctx);
  CLT_TRY(clt_context_kernel(ctx, "batchnorm", rows ? "batchnorm_forward_rows" : "batchnorm_forward",
                             clt__nn_act_opt(x), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(mean->buf), NN_VAL(moff), NN_VAL(var->buf),
                      NN_VAL(voff), NN_VAL(w->buf), NN_VAL(woff), NN_VAL(b->buf), NN_VAL(boff), NN_VAL(y->buf),
                      NN_VAL(yoff), NN_VAL(eps)));
  CLT_TRY(launch_elementwise(ctx, k, rows, 13, N, C, S));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_batchnorm_backward_sums(clt_context *ctx, float eps, const clt_tensor *x, const clt_tensor *mean,
                                   const clt_tensor *var, const clt_tensor *dy, const clt_tensor *dw,
                                   const clt_tensor *db, const clt_tensor *part) {
  static const char op[] = "batchnorm backward sums";
  int64_t N, C, S;
  const clt_tensor *vec[] = {mean, var, dw, db};
  static const char *const names[] = {"mean", "var", "dweight", "dbias"};
  int rc = check_bn(op, x, vec, names, 4, &N, &C, &S);
  if (rc < 0 || (rc = clt__nn_check_like(op, "dy", dy, "x", x)) < 0 || (rc = check_part(op, part, C)) < 0) return rc;
  if (N * S == 0) return clt__error(CLT_ESHAPE, "%s: x has no values", op);
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), dyoff = clt__nn_off(dy), moff = clt__nn_off(mean), voff = clt__nn_off(var);
  cl_ulong dwoff = clt__nn_off(dw), dboff = clt__nn_off(db), poff = clt__nn_off(part);
  cl_uint n = (cl_uint)N, c = (cl_uint)C, s = (cl_uint)S;
  int rows = by_rows(ctx);
  CLT_TRY(clt_context_kernel(ctx, "batchnorm", rows ? "batchnorm_backward_sums" : "batchnorm_backward_sums_strided",
                             clt__nn_act_opt(x), &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, rows ? N : N * S, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(mean->buf),
                      NN_VAL(moff), NN_VAL(var->buf), NN_VAL(voff), NN_VAL(dw->buf), NN_VAL(dwoff), NN_VAL(db->buf),
                      NN_VAL(dboff), NN_VAL(n), NN_VAL(c), NN_VAL(s), NN_VAL(eps), NN_VAL(part->buf), NN_VAL(poff),
                      NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)C, wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_batchnorm_backward_input(clt_context *ctx, float eps, const clt_tensor *x, const clt_tensor *mean,
                                    const clt_tensor *var, const clt_tensor *w, const clt_tensor *gdy,
                                    const clt_tensor *gdyx, const clt_tensor *dy, const clt_tensor *dx) {
  static const char op[] = "batchnorm backward";
  int64_t N, C, S;
  const clt_tensor *vec[] = {mean, var, w, gdy, gdyx};
  static const char *const names[] = {"mean", "var", "weight", "mean_dy", "mean_dy_xhat"};
  int rc = check_bn(op, x, vec, names, 5, &N, &C, &S);
  if (rc < 0 || (rc = clt__nn_check_like(op, "dy", dy, "x", x)) < 0 ||
      (rc = clt__nn_check_like(op, "dx", dx, "x", x)) < 0)
    return rc;
  if (N * S == 0) return CLT_OK;
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), dyoff = clt__nn_off(dy), moff = clt__nn_off(mean), voff = clt__nn_off(var);
  cl_ulong woff = clt__nn_off(w), goff = clt__nn_off(gdy), gxoff = clt__nn_off(gdyx), dxoff = clt__nn_off(dx);
  int rows = by_rows(ctx);
  CLT_TRY(clt_context_kernel(ctx, "batchnorm", rows ? "batchnorm_backward_input_rows" : "batchnorm_backward_input",
                             clt__nn_act_opt(x), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(mean->buf),
                      NN_VAL(moff), NN_VAL(var->buf), NN_VAL(voff), NN_VAL(w->buf), NN_VAL(woff), NN_VAL(gdy->buf),
                      NN_VAL(goff), NN_VAL(gdyx->buf), NN_VAL(gxoff), NN_VAL(dx->buf), NN_VAL(dxoff), NN_VAL(eps)));
  CLT_TRY(launch_elementwise(ctx, k, rows, 17, N, C, S));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

/* A kernel over the C channels of part (C, 2) into out (k C) (the
 * statistics or the backward's means), count values a channel. */
static int per_channel(clt_context *ctx, const char *op, const char *kernel, double count, const clt_tensor *part,
                       int k, const clt_tensor *out) {
  int rc = clt__nn_check(op, "part", part, CLT_F32, 0, "(C, 2)");
  if (rc < 0 || (rc = clt__nn_check(op, "out", out, CLT_F32, 0, "(k C)")) < 0) return rc;
  int64_t C = clt_tensor_numel(part) / 2;
  if (clt_tensor_numel(part) % 2 || clt_tensor_numel(out) != k * C)
    return clt__error(CLT_ESHAPE, "%s: part holds %lld floats and out %lld: they must be 2 C and %d C", op,
                      (long long)clt_tensor_numel(part), (long long)clt_tensor_numel(out), k);
  if (!(count >= 2)) return clt__error(CLT_EINVAL, "%s: %g values a channel: more than one needed", op, count);
  if (C == 0) return CLT_OK;
  cl_kernel kn;
  cl_ulong poff = clt__nn_off(part), ooff = clt__nn_off(out);
  cl_uint c = (cl_uint)C;
  float m = (float)count;
  CLT_TRY(clt_context_kernel(ctx, "batchnorm", kernel, "", &kn));
  CLT_TRY(NN_SET_ARGS(kn, NN_VAL(part->buf), NN_VAL(poff), NN_VAL(c), NN_VAL(m), NN_VAL(out->buf), NN_VAL(ooff)));
  CLT_TRY(clt__launch_exact_1d(ctx, kn, (size_t)C));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_batchnorm_finish_stats(clt_context *ctx, double count, const clt_tensor *part, const clt_tensor *stats) {
  return per_channel(ctx, "batchnorm statistics", "batchnorm_finish_stats", count, part, 3, stats);
}

int clt_nn_batchnorm_means(clt_context *ctx, double count, const clt_tensor *part, const clt_tensor *g) {
  return per_channel(ctx, "batchnorm backward means", "batchnorm_means", count, part, 2, g);
}

int clt_nn_batchnorm_running(clt_context *ctx, float momentum, const clt_tensor *mean, const clt_tensor *uvar,
                             const clt_tensor *rmean, const clt_tensor *rvar) {
  static const char op[] = "batchnorm running statistics";
  static const char *const names[] = {"mean", "uvar", "running_mean", "running_var"};
  const clt_tensor *t[] = {mean, uvar, rmean, rvar};
  int rc;
  for (int i = 0; i < 4; i++) {
    if ((rc = clt__nn_check(op, names[i], t[i], CLT_F32, 0, "(C)")) < 0) return rc;
    if (clt_tensor_numel(t[i]) != clt_tensor_numel(mean))
      return clt__error(CLT_ESHAPE, "%s: %s holds %lld floats, mean %lld: one per channel each", op, names[i],
                        (long long)clt_tensor_numel(t[i]), (long long)clt_tensor_numel(mean));
  }
  if (!(momentum >= 0.0f && momentum <= 1.0f))
    return clt__error(CLT_EINVAL, "%s: momentum %g must be in [0, 1]", op, (double)momentum);
  if (clt_tensor_numel(mean) == 0) return CLT_OK;
  cl_kernel k;
  cl_ulong moff = clt__nn_off(mean), uoff = clt__nn_off(uvar), rmoff = clt__nn_off(rmean), rvoff = clt__nn_off(rvar);
  CLT_TRY(clt_context_kernel(ctx, "batchnorm", "batchnorm_running", "", &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(mean->buf), NN_VAL(moff), NN_VAL(uvar->buf), NN_VAL(uoff), NN_VAL(momentum),
                      NN_VAL(rmean->buf), NN_VAL(rmoff), NN_VAL(rvar->buf), NN_VAL(rvoff)));
  CLT_TRY(clt__launch_exact_1d(ctx, k, (size_t)clt_tensor_numel(mean)));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
