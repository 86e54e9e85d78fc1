/*
 * concat.c: torch.cat along the first dimension after the batch's, the
 * U-Net's skip concatenation: y (N, A + B, ...) = [a (N, A, ...) | b (N, B,
 * ...)] per sample, and its backward, the split of dy into the two parts.
 * Each sample's part is contiguous in every tensor, so both are copies of
 * N rows of a part's values, each tensor's per-sample size apart
 * (cl/concat.cl); any activation dtype, the same bits.
 */
#include "nn/common.h"

/* a, b and y: activations of one dtype with the same N; the per-sample
 * sizes of a and b add up to y's. */
static int check_cat(const char *op, const char *an, const clt_tensor *a, const char *bn, const clt_tensor *b,
                     const char *yn, const clt_tensor *y) {
  int rc;
  if ((rc = clt__nn_check_act(op, an, a, 0, "(N, ...)")) < 0 || (rc = clt__nn_check_act(op, bn, b, 0, "(N, ...)")) < 0 ||
      (rc = clt__nn_check_act(op, yn, y, 0, "(N, ...)")) < 0 || (rc = clt__nn_check_same_act(op, an, a, yn, y)) < 0 ||
      (rc = clt__nn_check_same_act(op, bn, b, yn, y)) < 0)
    return rc;
  clt__nn_named ts[] = {{an, a}, {bn, b}, {yn, y}};
  int64_t n = y->shape[0];
  if (a->shape[0] != n || b->shape[0] != n) return clt__nn_shape_error(op, ts, 3, "the batch sizes differ");
  if (clt_tensor_numel(a) + clt_tensor_numel(b) != clt_tensor_numel(y))
    return clt__nn_shape_error(op, ts, 3, "%s's size per sample is not %s's plus %s's", yn, an, bn);
  return CLT_OK;
}

/* w values of each of the rows from src (sp apart, starting so values in)
 * to dst (dp apart, from do_), in elements (cl/concat.cl). */
static int copy_rows(clt_context *ctx, const clt_tensor *src, size_t so, size_t sp, const clt_tensor *dst, size_t do_,
                     size_t dp, size_t w, size_t rows) {
  int rc = CLT_OK;
  if (!w || !rows) return CLT_OK;
  cl_kernel k;
  cl_ulong soff = clt__nn_off(src) + so, doff = clt__nn_off(dst) + do_;
  cl_uint spu = (cl_uint)sp, dpu = (cl_uint)dp;
  CLT_TRY(clt_context_kernel(ctx, "concat", "copy_rows", clt__nn_act_opt(src), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(src->buf), NN_VAL(soff), NN_VAL(spu), NN_VAL(dst->buf), NN_VAL(doff), NN_VAL(dpu)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, w, rows, 1));
fail:
  return rc;
}

int clt_nn_concat_forward(clt_context *ctx, const clt_tensor *a, const clt_tensor *b, const clt_tensor *y) {
  static const char op[] = "concat forward";
  int rc = check_cat(op, "a", a, "b", b, "y", y);
  if (rc < 0) return rc;
  size_t n = (size_t)y->shape[0];
  size_t ab = (size_t)clt_tensor_numel(a) / n, bb = (size_t)clt_tensor_numel(b) / n, yb = ab + bb;
  CLT_TRY(copy_rows(ctx, a, 0, ab, y, 0, yb, ab, n));
  CLT_TRY(copy_rows(ctx, b, 0, bb, y, ab, yb, bb, n));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_concat_backward(clt_context *ctx, const clt_tensor *dy, const clt_tensor *da, const clt_tensor *db) {
  static const char op[] = "concat backward";
  int rc;
  if ((rc = clt__nn_check_act(op, "dy", dy, 0, "(N, ...)")) < 0) return rc;
  if (!da && !db) return CLT_OK;
  const clt_tensor *have = da ? da : db;
  if ((rc = clt__nn_check_act(op, da ? "da" : "db", have, 0, "(N, ...)")) < 0) return rc;
  size_t n = (size_t)dy->shape[0], yb = (size_t)clt_tensor_numel(dy) / n;
  size_t hb = have->shape[0] == dy->shape[0] ? (size_t)clt_tensor_numel(have) / n : 0;
  if (!hb || hb >= yb) {
    clt__nn_named ts[] = {{"dy", dy}, {da ? "da" : "db", have}};
    return clt__nn_shape_error(op, ts, 2, "the part is not a part of dy's samples");
  }
  clt_tensor other; /* the part not given, for the checks: its shape from the other's */
  int64_t shape[2] = {(int64_t)n, (int64_t)(yb - hb)};
  CLT_TRY(clt_tensor_view(dy->buf, dy->offset, dy->dtype, 2, shape, &other));
  if (da && db) other = *db;
  if ((rc = check_cat(op, "da", da ? da : &other, "db", db ? db : &other, "dy", dy)) < 0) return rc;
  size_t ab = da ? hb : yb - hb, bb = yb - ab;
  if (da) CLT_TRY(copy_rows(ctx, dy, 0, yb, da, 0, ab, ab, n));
  if (db) CLT_TRY(copy_rows(ctx, dy, ab, yb, db, 0, bb, bb, n));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
