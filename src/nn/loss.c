/*
 * loss.c: softmax cross-entropy over (N, C) logits and int32 labels, with
 * the loss SUMMED over the batch, forward and backward fused (cl/loss.cl).
 * Rows whose label is the (negative) ignore index count for nothing.
 * logits and dlogits are f32, or f16 under mixed precision; the losses,
 * loss and correct are f32 / i32 either way.
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
  int vw = C % 16 == 0 && clt__nn_items_run_as_loops(ctx) ? 16 : C % 8 == 0 ? 8 : 1;
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
