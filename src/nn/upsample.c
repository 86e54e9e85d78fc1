/*
 * upsample.c: up-sampling by a whole factor S along every spatial axis of
 * (N, C, L), (N, C, H, W) or (N, C, D, H, W), nearest or (bi/tri)linear
 * with align_corners=False, as torch.nn.Upsample(scale_factor=S), forward
 * and backward (cl/upsample.cl). Both directions gather (each input cell's
 * gradient is summed from the outputs that read it), so no atomics and the
 * same bits on every run.
 */
#include "nn/common.h"

#include <stdio.h>

/* The tensor's spatial axes as (D, H, W), 1 for those it lacks. */
static void spatial(const clt_tensor *t, int64_t dhw[3]) {
  int ns = t->ndim - 2;
  for (int a = 0; a < 3; a++) dhw[a] = a < 3 - ns ? 1 : t->shape[2 + a - (3 - ns)];
}

/* Check small (N, C, s...) against big (N, C, S s...). */
static int check_up(const char *op, clt_nn_upsample_mode mode, int scale, const char *sname, const clt_tensor *small,
                    const char *bname, const clt_tensor *big) {
  int rc;
  if ((unsigned)mode > CLT_NN_UPSAMPLE_LINEAR)
    return clt__error(CLT_EINVAL, "%s: unknown mode %d (nearest 0 or linear 1)", op, (int)mode);
  if (scale < 1 || scale > 64) return clt__error(CLT_EINVAL, "%s: scale %d must be from 1 to 64", op, scale);
  if ((rc = clt__nn_check_act(op, sname, small, 0, "(N, C, L), (N, C, H, W) or (N, C, D, H, W)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, bname, big, 0, "(N, C, L), (N, C, H, W) or (N, C, D, H, W)")) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, sname, small, bname, big)) < 0) return rc;
  clt__nn_named ts[] = {{sname, small}, {bname, big}};
  if (small->ndim < 3 || small->ndim > 5 || big->ndim != small->ndim)
    return clt__nn_shape_error(op, ts, 2, "both must be (N, C, L), (N, C, H, W) or (N, C, D, H, W), alike");
  for (int d = 0; d < small->ndim; d++)
    if (big->shape[d] != small->shape[d] * (d < 2 ? 1 : scale))
      return clt__nn_shape_error(op, ts, 2, "%s must be %s with its spatial axes times %d", bname, sname, scale);
  return CLT_OK;
}

static int up_kernel(clt_context *ctx, clt_nn_upsample_mode mode, int scale, const clt_tensor *t, const char *name,
                     cl_kernel *k) {
  char opts[128];
  int ns = t->ndim - 2;
  snprintf(opts, sizeof opts, "-DUP_SD=%d -DUP_SH=%d -DUP_SW=%d%s %s", ns >= 3 ? scale : 1, ns >= 2 ? scale : 1,
           scale, mode == CLT_NN_UPSAMPLE_LINEAR ? " -DUP_LINEAR" : "", clt__nn_act_opt(t));
  return clt_context_kernel(ctx, "upsample", name, opts, k);
}

/* Run `name` over (small's geometry): the forward over y's elements, the
 * backward over dx's. */
static int run(clt_context *ctx, const char *op, clt_nn_upsample_mode mode, int scale, const char *name,
               const clt_tensor *in, const clt_tensor *out, const clt_tensor *small, int64_t gx, int64_t gy,
               int64_t gz) {
  int rc = CLT_OK;
  cl_kernel k;
  int64_t dhw[3];
  spatial(small, dhw);
  cl_ulong ioff = clt__nn_off(in), ooff = clt__nn_off(out);
  cl_uint D = (cl_uint)dhw[0], H = (cl_uint)dhw[1], W = (cl_uint)dhw[2];
  CLT_TRY(up_kernel(ctx, mode, scale, small, name, &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(in->buf), NN_VAL(ioff), NN_VAL(out->buf), NN_VAL(ooff), NN_VAL(D), NN_VAL(H),
                      NN_VAL(W)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)gx, (size_t)gy, (size_t)gz));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_upsample_forward(clt_context *ctx, clt_nn_upsample_mode mode, int scale, const clt_tensor *x,
                            const clt_tensor *y) {
  static const char op[] = "upsample forward";
  int rc = check_up(op, mode, scale, "x", x, "y", y);
  if (rc < 0) return rc;
  int64_t dhw[3], s = scale;
  spatial(x, dhw);
  int ns = x->ndim - 2;
  int64_t OD = dhw[0] * (ns >= 3 ? s : 1), OH = dhw[1] * (ns >= 2 ? s : 1), OW = dhw[2] * s;
  if (mode == CLT_NN_UPSAMPLE_LINEAR && scale == 2 && clt__items_run_as_loops(ctx)) /* an item per input cell */
    return run(ctx, op, mode, scale, "upsample_forward_by2", x, y, x, dhw[2], dhw[1],
               x->shape[0] * x->shape[1] * dhw[0]);
  return run(ctx, op, mode, scale, "upsample_forward", x, y, x, OW, OH, x->shape[0] * x->shape[1] * OD);
}

int clt_nn_upsample_backward(clt_context *ctx, clt_nn_upsample_mode mode, int scale, const clt_tensor *dy,
                             const clt_tensor *dx) {
  static const char op[] = "upsample backward";
  int rc = check_up(op, mode, scale, "dx", dx, "dy", dy);
  if (rc < 0) return rc;
  int64_t dhw[3];
  spatial(dx, dhw);
  return run(ctx, op, mode, scale, "upsample_backward", dy, dx, dx, dhw[2], dhw[1],
             dx->shape[0] * dx->shape[1] * dhw[0]);
}
