/*
 * loss.c: the losses, SUMMED over the batch, forward and backward fused
 * (cl/loss.cl): softmax cross-entropy over (N, C) logits and int32 labels
 * (rows whose label is the negative ignore index count for nothing), and
 * the regression losses (MSE, L1, Huber) over float targets. Outputs and
 * their gradients are f32, or f16 under mixed precision; losses, sums and
 * counts are f32 / i32 either way.
 */
#include "nn/common.h"

#include <stdio.h>

int clt_nn_softmax_xent(clt_context *ctx, const clt_tensor *logits, const clt_tensor *labels, int ignore_index,
                        float grad_scale,
                        const clt_tensor *dlogits, const clt_tensor *losses, const clt_tensor *loss,
                        const clt_tensor *correct) {
  static const char op[] = "softmax_xent";
  int rc;
  if ((rc = clt__nn_check_act(op, "logits", logits, 2, "(N, C)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "labels", labels, CLT_I32, 1, "(N)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "losses", losses, CLT_F32, 1, "(N)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "loss", loss, CLT_F32, 0, "of 1 element")) < 0) return rc;
  if (correct && (rc = clt__nn_check(op, "correct", correct, CLT_I32, 0, "of 1 element")) < 0) return rc;
  if (dlogits && (rc = clt__nn_check_like(op, "dlogits", dlogits, "logits", logits)) < 0) return rc;
  int64_t N = logits->shape[0], C = logits->shape[1];
  clt__nn_named ts[] = {
      {"logits", logits}, {"labels", labels}, {"losses", losses}, {"loss", loss}, {"correct", correct}};
  if (labels->shape[0] != N || losses->shape[0] != N)
    return clt__nn_shape_error(op, ts, 5, "labels and losses must have one element per row of logits, %lld",
                               (long long)N);
  if (clt_tensor_numel(loss) != 1 || (correct && clt_tensor_numel(correct) != 1))
    return clt__nn_shape_error(op, ts, 5, "loss and correct must hold one element");
  if (ignore_index >= 0)
    return clt__error(CLT_EINVAL, "%s: ignore_index %d must be negative (labels in [0, C) are classes); pass -1 when "
                      "no row is ignored", op, ignore_index);

  cl_kernel k;
  cl_ulong loff = clt__nn_off(logits), laboff = clt__nn_off(labels), lsoff = clt__nn_off(losses);
  cl_ulong doff = dlogits ? clt__nn_off(dlogits) : 0, coff = correct ? clt__nn_off(correct) : 0;
  cl_ulong lossoff = clt__nn_off(loss);
  /* Unused buffer arguments get a real buffer that is never touched. */
  cl_mem dbuf = dlogits ? dlogits->buf : losses->buf, cbuf = correct ? correct->buf : labels->buf;
  cl_int has_grad = dlogits != NULL, has_correct = correct != NULL;
  cl_uint c = (cl_uint)C, n = (cl_uint)N;
  if (correct) {
    static const cl_int zero = 0;
    CLT_CL_TRY(
        clEnqueueFillBuffer(ctx->queue, correct->buf, &zero, sizeof zero, correct->offset, sizeof zero, 0, NULL, NULL));
  }
  char opt[48]; /* vectors of 16 (PoCL) or 8 where they tile the row (cl/loss.cl) */
  int vw = C % 16 == 0 && clt__items_run_as_loops(ctx) ? 16 : C % 8 == 0 ? 8 : 1;
  snprintf(opt, sizeof opt, "%s -DXENT_VW=%d", clt__nn_act_opt(logits), vw);
  CLT_TRY(clt_context_kernel(ctx, "loss", "xent_rows", opt, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, C, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(logits->buf), NN_VAL(loff), NN_VAL(labels->buf), NN_VAL(laboff), NN_VAL(ignore_index),
                      NN_VAL(dbuf), NN_VAL(doff), NN_VAL(has_grad), NN_VAL(losses->buf), NN_VAL(lsoff), NN_VAL(cbuf),
                      NN_VAL(coff), NN_VAL(has_correct), NN_VAL(c), NN_VAL(grad_scale), NN_LOCAL(wgs * sizeof(float)),
                      NN_LOCAL(wgs * sizeof(cl_int))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)N, wgs));

  CLT_TRY(clt_context_kernel(ctx, "loss", "xent_sum", NULL, &k));
  wgs = clt__nn_row_wgs(ctx, k, N, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(losses->buf), NN_VAL(lsoff), NN_VAL(n), NN_VAL(loss->buf), NN_VAL(lossoff),
                      NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, 1, wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

/* sum (1) = the sum of values (M) in a fixed order (cl/loss.cl xent_sum). */
static int sum_fixed(clt_context *ctx, const clt_tensor *values, const clt_tensor *sum) {
  int rc;
  cl_kernel k;
  cl_ulong voff = clt__nn_off(values), soff = clt__nn_off(sum);
  cl_uint n = (cl_uint)clt_tensor_numel(values);
  CLT_TRY(clt_context_kernel(ctx, "loss", "xent_sum", NULL, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, n, 256);
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(values->buf), NN_VAL(voff), NN_VAL(n), NN_VAL(sum->buf), NN_VAL(soff),
                      NN_LOCAL(wgs * sizeof(float))));
  CLT_TRY(clt__nn_launch_groups(ctx, k, 1, wgs));
fail:
  return rc;
}

int clt_nn_regression_loss(clt_context *ctx, clt_loss_kind kind, float delta, const clt_tensor *y,
                           const clt_tensor *targets, float grad_scale, const clt_tensor *dy, const clt_tensor *losses,
                           const clt_tensor *sq_errors, const clt_tensor *loss, const clt_tensor *sq_error) {
  static const char op[] = "regression_loss";
  int rc;
  if (kind != CLT_LOSS_MSE && kind != CLT_LOSS_L1 && kind != CLT_LOSS_HUBER)
    return clt__error(CLT_EINVAL, "%s: loss kind %d is not a regression loss (mse, l1 or huber)", op, (int)kind);
  if (kind == CLT_LOSS_HUBER && !(delta > 0))
    return clt__error(CLT_EINVAL, "%s: huber's delta %g must be positive", op, (double)delta);
  if ((rc = clt__nn_check_act(op, "y", y, 1, "(M)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "targets", targets, CLT_F32, 1, "(M)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "losses", losses, CLT_F32, 1, "(M)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "sq_errors", sq_errors, CLT_F32, 1, "(M)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "loss", loss, CLT_F32, 0, "of 1 element")) < 0) return rc;
  if ((rc = clt__nn_check(op, "sq_error", sq_error, CLT_F32, 0, "of 1 element")) < 0) return rc;
  if (dy && (rc = clt__nn_check_like(op, "dy", dy, "y", y)) < 0) return rc;
  int64_t M = y->shape[0];
  clt__nn_named ts[] = {{"y", y}, {"targets", targets}, {"losses", losses}, {"sq_errors", sq_errors}, {"loss", loss},
                        {"sq_error", sq_error}};
  if (targets->shape[0] != M || losses->shape[0] != M || sq_errors->shape[0] != M)
    return clt__nn_shape_error(op, ts, 6, "targets, losses and sq_errors must have one element per value of y, %lld",
                               (long long)M);
  if (clt_tensor_numel(loss) != 1 || clt_tensor_numel(sq_error) != 1)
    return clt__nn_shape_error(op, ts, 6, "loss and sq_error must hold one element");
  if (M == 0) return clt__error(CLT_ESHAPE, "%s: y holds no values", op);

  cl_kernel k;
  cl_ulong yoff = clt__nn_off(y), toff = clt__nn_off(targets), doff = dy ? clt__nn_off(dy) : 0;
  cl_ulong lsoff = clt__nn_off(losses), sqoff = clt__nn_off(sq_errors);
  cl_mem dbuf = dy ? dy->buf : losses->buf; /* a real buffer that is never touched */
  cl_int has_grad = dy != NULL, ckind = (cl_int)kind;
  CLT_TRY(clt_context_kernel(ctx, "loss", "regress_elems", clt__nn_act_opt(y), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(y->buf), NN_VAL(yoff), NN_VAL(targets->buf), NN_VAL(toff), NN_VAL(dbuf), NN_VAL(doff),
                      NN_VAL(has_grad), NN_VAL(losses->buf), NN_VAL(lsoff), NN_VAL(sq_errors->buf), NN_VAL(sqoff),
                      NN_VAL(ckind), NN_VAL(delta), NN_VAL(grad_scale)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)M, 1, 1));
  CLT_TRY(sum_fixed(ctx, losses, loss));
  CLT_TRY(sum_fixed(ctx, sq_errors, sq_error));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
