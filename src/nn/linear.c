/*
 * linear.c: fully connected layer, y = x w^T + b, forward and backward,
 * through clt_sgemm (src/blas.c) plus the bias kernels of cl/bias.cl.
 */
#include "nn/common.h"

/* Shapes: x (N, in), w (out, in), b (out), y (N, out). */
static int check_linear(const char *op, const clt_tensor *x, const clt_tensor *w, const clt_tensor *b,
                        const char *bname, const clt_tensor *y, const char *yname) {
  int rc;
  if ((rc = clt__nn_check(op, "x", x, CLT_F32, 2, "(N, in)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "w", w, CLT_F32, 2, "(out, in)")) < 0) return rc;
  if ((rc = clt__nn_check(op, yname, y, CLT_F32, 2, "(N, out)")) < 0) return rc;
  if (b && (rc = clt__nn_check(op, bname, b, CLT_F32, 1, "(out)")) < 0) return rc;
  clt__nn_named ts[] = {{"x", x}, {"w", w}, {bname, b}, {yname, y}};
  if (x->shape[1] != w->shape[1])
    return clt__nn_shape_error(op, ts, 4, "x has %lld features, w expects %lld", (long long)x->shape[1],
                               (long long)w->shape[1]);
  if (y->shape[0] != x->shape[0] || y->shape[1] != w->shape[0])
    return clt__nn_shape_error(op, ts, 4, "%s must be (%lld, %lld)", yname, (long long)x->shape[0],
                               (long long)w->shape[0]);
  if (b && b->shape[0] != w->shape[0])
    return clt__nn_shape_error(op, ts, 4, "%s must have %lld elements", bname, (long long)w->shape[0]);
  return CLT_OK;
}

int clt_nn_linear_forward(clt_context *ctx, const clt_tensor *x, const clt_tensor *w, const clt_tensor *b,
                          const clt_tensor *y) {
  static const char op[] = "linear forward";
  int rc = check_linear(op, x, w, b, "b", y, "y");
  if (rc < 0) return rc;
  int64_t N = x->shape[0], in = x->shape[1], out = w->shape[0];
  /* y (N, out) = x (N, in) w^T (in, out) */
  CLT_TRY(clt_sgemm(ctx, CLT_NO_TRANS, CLT_TRANS, (size_t)N, (size_t)out, (size_t)in, 1.0f, clt__nn_mat(x, in),
                    clt__nn_mat(w, in), 0.0f, clt__nn_mat(y, out)));
  if (b) CLT_TRY(clt__nn_bias_add(ctx, y, b, out, 1));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_linear_backward(clt_context *ctx, const clt_tensor *x, const clt_tensor *w, const clt_tensor *dy,
                           const clt_tensor *dx, const clt_tensor *dw, const clt_tensor *db) {
  static const char op[] = "linear backward";
  int rc;
  if ((rc = check_linear(op, x, w, db, "db", dy, "dy")) < 0) return rc;
  if ((rc = clt__nn_check_like(op, "dw", dw, "w", w)) < 0) return rc;
  if (dx && (rc = clt__nn_check_like(op, "dx", dx, "x", x)) < 0) return rc;
  int64_t N = x->shape[0], in = x->shape[1], out = w->shape[0];
  /* dw (out, in) += dy^T (out, N) x (N, in) */
  CLT_TRY(clt_sgemm(ctx, CLT_TRANS, CLT_NO_TRANS, (size_t)out, (size_t)in, (size_t)N, 1.0f, clt__nn_mat(dy, out),
                    clt__nn_mat(x, in), 1.0f, clt__nn_mat(dw, in)));
  if (db) CLT_TRY(clt__nn_bias_grad(ctx, dy, db, N, out, 1));
  /* dx (N, in) = dy (N, out) w (out, in) */
  if (dx)
    CLT_TRY(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, (size_t)N, (size_t)in, (size_t)out, 1.0f, clt__nn_mat(dy, out),
                      clt__nn_mat(w, in), 0.0f, clt__nn_mat(dx, in)));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
