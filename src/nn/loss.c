/*
 * loss.c: softmax cross-entropy over (N, C) logits and int32 labels, with
 * the loss SUMMED over the batch, forward and backward fused (cl/loss.cl).
 */
#include "nn/common.h"

int clt_nn_softmax_xent(clt_context *ctx, const clt_tensor *logits, const clt_tensor *labels, float grad_scale,
                        const clt_tensor *dlogits, const clt_tensor *losses, const clt_tensor *loss,
                        const clt_tensor *correct) {
  static const char op[] = "softmax_xent";
  int rc;
  if ((rc = clt__nn_check(op, "logits", logits, CLT_F32, 2, "(N, C)")) < 0) return rc;
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
  CLT_TRY(clt_context_kernel(ctx, "loss", "xent_rows", NULL, &k));
  size_t wgs = clt__nn_row_wgs(ctx, k, C, 256);
  NN_ARG(k, 0, logits->buf);
  NN_ARG(k, 1, loff);
  NN_ARG(k, 2, labels->buf);
  NN_ARG(k, 3, laboff);
  NN_ARG(k, 4, dbuf);
  NN_ARG(k, 5, doff);
  NN_ARG(k, 6, has_grad);
  NN_ARG(k, 7, losses->buf);
  NN_ARG(k, 8, lsoff);
  NN_ARG(k, 9, cbuf);
  NN_ARG(k, 10, coff);
  NN_ARG(k, 11, has_correct);
  NN_ARG(k, 12, c);
  NN_ARG(k, 13, grad_scale);
  CLT_CL_TRY(clSetKernelArg(k, 14, wgs * sizeof(float), NULL));
  CLT_CL_TRY(clSetKernelArg(k, 15, wgs * sizeof(cl_int), NULL));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)N, wgs));

  CLT_TRY(clt_context_kernel(ctx, "loss", "xent_sum", NULL, &k));
  wgs = clt__nn_row_wgs(ctx, k, N, 256);
  NN_ARG(k, 0, losses->buf);
  NN_ARG(k, 1, lsoff);
  NN_ARG(k, 2, n);
  NN_ARG(k, 3, loss->buf);
  NN_ARG(k, 4, lossoff);
  CLT_CL_TRY(clSetKernelArg(k, 5, wgs * sizeof(float), NULL));
  CLT_TRY(clt__nn_launch_groups(ctx, k, 1, wgs));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
