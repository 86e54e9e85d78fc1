/*
 * activation.c: elementwise activations relu, leaky_relu, gelu (tanh
 * approximation), tanh, sigmoid and silu, forward and backward (cl/activation.cl),
 * on activations stored as f32 or f16 (computed in float either way).
 */
#include "nn/common.h"

#include <stdio.h>

const char *clt_nn_act_name(clt_nn_act act) {
  switch (act) {
  case CLT_NN_RELU: return "relu";
  case CLT_NN_LEAKY_RELU: return "leaky_relu";
  case CLT_NN_GELU: return "gelu";
  case CLT_NN_TANH: return "tanh";
  case CLT_NN_SIGMOID: return "sigmoid";
  case CLT_NN_SILU: return "silu";
  }
  return "unknown activation";
}

int clt_nn_act_backward_needs_input(clt_nn_act act) {
  return act == CLT_NN_LEAKY_RELU || act == CLT_NN_GELU || act == CLT_NN_SILU;
}

static int check_act(const char *op, clt_nn_act act) {
  if ((unsigned)act > CLT_NN_SILU) return clt__error(CLT_EINVAL, "%s: unknown activation %d", op, (int)act);
  return CLT_OK;
}

/* a and b: activations of one dtype (f32 or f16) with the same number of
 * elements. */
static int check_pair(const char *op, const char *an, const clt_tensor *a, const char *bn, const clt_tensor *b) {
  int rc;
  if ((rc = clt__nn_check_act(op, an, a, 0, "(any shape)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, bn, b, 0, "(any shape)")) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, an, a, bn, b)) < 0) return rc;
  if (clt_tensor_numel(a) != clt_tensor_numel(b)) {
    clt__nn_named ts[] = {{an, a}, {bn, b}};
    return clt__nn_shape_error(op, ts, 2, "%s and %s differ in size", an, bn);
  }
  return CLT_OK;
}

/* The activations with kernels 16 elements a work-item (cl/activation.cl),
 * used on PoCL where 16 divides n: forward and backward kernel names, by
 * clt_nn_act (NULL: none). */
static const char *const wide16[][2] = {[CLT_NN_GELU] = {"gelu_forward16", "gelu_backward16"},
                                        [CLT_NN_SILU] = {"silu_forward16", "silu_backward16"}};

static const char *act16(const clt_context *ctx, clt_nn_act act, cl_ulong n, int backward) {
  if ((size_t)act >= sizeof wide16 / sizeof wide16[0] || n % 16 != 0 || !clt__items_run_as_loops(ctx)) return NULL;
  return wide16[act][backward];
}

int clt_nn_act_forward(clt_context *ctx, clt_nn_act act, float alpha, const clt_tensor *x, const clt_tensor *y) {
  char op[64];
  snprintf(op, sizeof op, "%s forward", clt_nn_act_name(act));
  int rc;
  if ((rc = check_act(op, act)) < 0 || (rc = check_pair(op, "x", x, "y", y)) < 0) return rc;
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), yoff = clt__nn_off(y), n = (cl_ulong)clt_tensor_numel(x);
  cl_int a = (cl_int)act;
  char opts[48]; /* one program per activation (see cl/activation.cl) and storage type */
  snprintf(opts, sizeof opts, "-DACT=%d %s", (int)act, clt__nn_act_opt(x));
  const char *k16 = act16(ctx, act, n, 0);
  if (k16) {
    CLT_TRY(clt_context_kernel(ctx, "activation", k16, opts, &k));
    CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(y->buf), NN_VAL(yoff)));
    CLT_TRY(clt__launch_exact_1d(ctx, k, n / 16));
    return CLT_OK;
  }
  CLT_TRY(clt_context_kernel(ctx, "activation", "act_forward", opts, &k));
  NN_ARG(k, 0, x->buf);
  NN_ARG(k, 1, xoff);
  NN_ARG(k, 2, y->buf);
  NN_ARG(k, 3, yoff);
  NN_ARG(k, 4, n);
  NN_ARG(k, 5, a);
  NN_ARG(k, 6, alpha);
  CLT_TRY(clt__launch_exact_1d(ctx, k, n));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_act_backward(clt_context *ctx, clt_nn_act act, float alpha, const clt_tensor *x, const clt_tensor *y,
                        const clt_tensor *dy, const clt_tensor *dx) {
  char op[64];
  snprintf(op, sizeof op, "%s backward", clt_nn_act_name(act));
  int rc;
  if ((rc = check_act(op, act)) < 0) return rc;
  int from_input = clt_nn_act_backward_needs_input(act);
  const clt_tensor *s = from_input ? x : y;
  const char *sn = from_input ? "x (the forward's input)" : "y (the forward's output)";
  if (!s) return clt__error(CLT_EINVAL, "%s: needs %s, which is NULL", op, sn);
  if ((rc = check_pair(op, "dy", dy, "dx", dx)) < 0 || (rc = check_pair(op, "dy", dy, sn, s)) < 0) return rc;
  cl_kernel k;
  cl_ulong soff = clt__nn_off(s), dyoff = clt__nn_off(dy), dxoff = clt__nn_off(dx);
  cl_ulong n = (cl_ulong)clt_tensor_numel(dx);
  cl_int a = (cl_int)act;
  char opts[48];
  snprintf(opts, sizeof opts, "-DACT=%d %s", (int)act, clt__nn_act_opt(dy));
  const char *k16 = act16(ctx, act, n, 1);
  if (k16) {
    CLT_TRY(clt_context_kernel(ctx, "activation", k16, opts, &k));
    CLT_TRY(NN_SET_ARGS(k, NN_VAL(s->buf), NN_VAL(soff), NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(dx->buf),
                        NN_VAL(dxoff)));
    CLT_TRY(clt__launch_exact_1d(ctx, k, n / 16));
    return CLT_OK;
  }
  CLT_TRY(clt_context_kernel(ctx, "activation", "act_backward", opts, &k));
  NN_ARG(k, 0, s->buf);
  NN_ARG(k, 1, soff);
  NN_ARG(k, 2, dy->buf);
  NN_ARG(k, 3, dyoff);
  NN_ARG(k, 4, dx->buf);
  NN_ARG(k, 5, dxoff);
  NN_ARG(k, 6, n);
  NN_ARG(k, 7, a);
  NN_ARG(k, 8, alpha);
  CLT_TRY(clt__launch_exact_1d(ctx, k, n));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
