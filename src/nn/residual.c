/*
 * residual.c: the transformer's residual adds (cl/residual.cl): y = x +
 * skip forward, and g += dy where a skip branch's gradient rejoins the
 * main one. All tensors are activations (f32, or f16 under mixed
 * precision) of one dtype and one element count; shapes may differ.
 */
#include "nn/common.h"

/* a and b: activations of one dtype and element count. */
static int check_pair(const char *op, const char *aname, const clt_tensor *a, const char *bname,
                      const clt_tensor *b) {
  int rc;
  if ((rc = clt__nn_check_act(op, aname, a, 0, "of activations")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, bname, b, 0, "of activations")) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, aname, a, bname, b)) < 0) return rc;
  if (clt_tensor_numel(a) != clt_tensor_numel(b)) {
    clt__nn_named ts[] = {{aname, a}, {bname, b}};
    return clt__nn_shape_error(op, ts, 2, "%s and %s differ in size", aname, bname);
  }
  return CLT_OK;
}

int clt_nn_residual_forward(clt_context *ctx, const clt_tensor *x, const clt_tensor *skip, const clt_tensor *y) {
  static const char op[] = "residual forward";
  int rc;
  if ((rc = check_pair(op, "x", x, "skip", skip)) < 0 || (rc = check_pair(op, "x", x, "y", y)) < 0) return rc;
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), soff = clt__nn_off(skip), yoff = clt__nn_off(y), n = (cl_ulong)clt_tensor_numel(x);
  CLT_TRY(clt_context_kernel(ctx, "residual", "residual_add", clt__nn_act_opt(x), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(skip->buf), NN_VAL(soff), NN_VAL(y->buf), NN_VAL(yoff),
                      NN_VAL(n)));
  CLT_TRY(clt__launch_exact_1d(ctx, k, (size_t)n));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_accumulate(clt_context *ctx, const clt_tensor *dy, const clt_tensor *g) {
  static const char op[] = "accumulate";
  int rc = check_pair(op, "dy", dy, "g", g);
  if (rc < 0) return rc;
  cl_kernel k;
  cl_ulong dyoff = clt__nn_off(dy), goff = clt__nn_off(g), n = (cl_ulong)clt_tensor_numel(dy);
  CLT_TRY(clt_context_kernel(ctx, "residual", "accumulate", clt__nn_act_opt(dy), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(g->buf), NN_VAL(goff), NN_VAL(n)));
  CLT_TRY(clt__launch_exact_1d(ctx, k, (size_t)n));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
