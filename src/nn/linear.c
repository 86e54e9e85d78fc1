/*
 * linear.c: fully connected layer, y = x w^T + b, forward and backward,
 * through clt_sgemm (src/core/blas.c) plus the bias kernels of cl/bias.cl.
 *
 * With activations stored as f16 (mixed precision) the GEMMs still take
 * f32: x and dy are widened into the context's scratch space, the GEMMs
 * run there, and y and dx are rounded back (clt_convert).
 */
#include "nn/common.h"

size_t clt_nn_linear_scratch_bytes(int64_t N, int64_t in, int64_t out, clt_dtype dtype) {
  return dtype == CLT_F16 ? (size_t)N * (size_t)(in + out) * sizeof(float) : 0;
}

/* f32 views of the scratch space: a (N, in) at its start, b (N, out) after. */
static int scratch_views(clt_context *ctx, int64_t N, int64_t in, int64_t out, clt_tensor *a, clt_tensor *b) {
  int rc = CLT_OK;
  cl_mem s;
  int64_t ashape[2] = {N, in}, bshape[2] = {N, out};
  CLT_TRY(clt__context_scratch(ctx, clt_nn_linear_scratch_bytes(N, in, out, CLT_F16), &s));
  CLT_TRY(clt_tensor_view(s, 0, CLT_F32, 2, ashape, a));
  CLT_TRY(clt_tensor_view(s, (size_t)(N * in) * sizeof(float), CLT_F32, 2, bshape, b));
fail:
  return rc;
}

/* The f16 forward: y = round(widen(x) w^T + b). */
static int forward_half(clt_context *ctx, const clt_tensor *x, const clt_tensor *w, const clt_tensor *b,
                        const clt_tensor *y) {
  int rc = CLT_OK;
  int64_t N = x->shape[0], in = x->shape[1], out = w->shape[0];
  clt_tensor x32, y32;
  CLT_TRY(scratch_views(ctx, N, in, out, &x32, &y32));
  CLT_TRY(clt_convert(ctx, x, &x32));
  CLT_TRY(clt_nn_linear_forward(ctx, &x32, w, b, &y32));
  CLT_TRY(clt_convert(ctx, &y32, y));
fail:
  return rc;
}

/* The f16 backward: the f32 one on widened x and dy, dx rounded. */
static int backward_half(clt_context *ctx, const clt_tensor *x, const clt_tensor *w, const clt_tensor *dy,
                         const clt_tensor *dx, const clt_tensor *dw, const clt_tensor *db) {
  int rc = CLT_OK;
  int64_t N = x->shape[0], in = x->shape[1], out = w->shape[0];
  clt_tensor x32, dy32;
  CLT_TRY(scratch_views(ctx, N, in, out, &x32, &dy32));
  CLT_TRY(clt_convert(ctx, x, &x32));
  CLT_TRY(clt_convert(ctx, dy, &dy32));
  /* dx32 takes x32's place: the in-order queue has used x32 for dw first. */
  CLT_TRY(clt_nn_linear_backward(ctx, &x32, w, &dy32, dx ? &x32 : NULL, dw, db));
  if (dx) CLT_TRY(clt_convert(ctx, &x32, dx));
fail:
  return rc;
}

/* Shapes: x (N, in), w (out, in), b (out), y (N, out). */
static int check_linear(const char *op, const clt_tensor *x, const clt_tensor *w, const clt_tensor *b,
                        const char *bname, const clt_tensor *y, const char *yname) {
  int rc;
  if ((rc = clt__nn_check_act(op, "x", x, 2, "(N, in)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "w", w, CLT_F32, 2, "(out, in)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, yname, y, 2, "(N, out)")) < 0) return rc;
  if (b && (rc = clt__nn_check(op, bname, b, CLT_F32, 1, "(out)")) < 0) return rc;
  clt__nn_named ts[] = {{"x", x}, {"w", w}, {bname, b}, {yname, y}};
  if (x->dtype != y->dtype) return clt__nn_shape_error(op, ts, 4, "x and %s must be of one type", yname);
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
  if (x->dtype == CLT_F16) {
    CLT_TRY(forward_half(ctx, x, w, b, y));
    return CLT_OK;
  }
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
  if (x->dtype == CLT_F16) {
    CLT_TRY(backward_half(ctx, x, w, dy, dx, dw, db));
    return CLT_OK;
  }
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
