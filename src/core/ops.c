/*
 * ops.c: host side of the elementwise kernels (cl/elementwise.cl) and the
 * fixed-order reductions (cl/reduce.cl) on float32 tensor views, and the
 * conversion between float32 and float16 storage.
 */
#include "core/internal.h"

#include <stdio.h>

/* Groups in the first reduction pass: enough to fill a large GPU, few enough
 * that the second pass is one group. Fixed, so results do not vary by run. */
#define REDUCE_GROUPS 256

static int check_f32(const clt_tensor *t, const char *op) {
  if (t->dtype == CLT_F32) return CLT_OK;
  char s[128];
  return clt__error(CLT_EINVAL, "%s: tensor %s is not f32", op, clt_tensor_shape_str(t, s, sizeof s));
}

static int check_same(const clt_tensor *a, const clt_tensor *b, const char *op) {
  if (clt_tensor_numel(a) == clt_tensor_numel(b)) return CLT_OK;
  char sa[128], sb[128];
  return clt__error(CLT_ESHAPE, "%s: tensors %s and %s differ in size", op, clt_tensor_shape_str(a, sa, sizeof sa),
                    clt_tensor_shape_str(b, sb, sizeof sb));
}

static cl_ulong elem_off(const clt_tensor *t) { return t->offset / sizeof(float); }

int clt_fill(clt_context *ctx, const clt_tensor *x, float value) {
  int rc = CLT_OK;
  cl_kernel k;
  CLT_HANDLE(ctx, "context");
  CLT_ARG(x);
  cl_ulong off = elem_off(x), n = (cl_ulong)clt_tensor_numel(x);
  CLT_TRY(check_f32(x, "fill"));
  CLT_TRY(clt_context_kernel(ctx, "elementwise", "fill_f32", NULL, &k));
  CLT_CL_TRY(clSetKernelArg(k, 0, sizeof x->buf, &x->buf));
  CLT_CL_TRY(clSetKernelArg(k, 1, sizeof off, &off));
  CLT_CL_TRY(clSetKernelArg(k, 2, sizeof n, &n));
  CLT_CL_TRY(clSetKernelArg(k, 3, sizeof value, &value));
  CLT_TRY(clt_launch_1d(ctx, k, n, 0));
  return CLT_OK;
fail:
  return rc;
}

int clt_scale(clt_context *ctx, const clt_tensor *x, float alpha) {
  int rc = CLT_OK;
  cl_kernel k;
  CLT_HANDLE(ctx, "context");
  CLT_ARG(x);
  cl_ulong off = elem_off(x), n = (cl_ulong)clt_tensor_numel(x);
  CLT_TRY(check_f32(x, "scale"));
  CLT_TRY(clt_context_kernel(ctx, "elementwise", "scale_f32", NULL, &k));
  CLT_CL_TRY(clSetKernelArg(k, 0, sizeof x->buf, &x->buf));
  CLT_CL_TRY(clSetKernelArg(k, 1, sizeof off, &off));
  CLT_CL_TRY(clSetKernelArg(k, 2, sizeof n, &n));
  CLT_CL_TRY(clSetKernelArg(k, 3, sizeof alpha, &alpha));
  CLT_TRY(clt_launch_1d(ctx, k, n, 0));
  return CLT_OK;
fail:
  return rc;
}

int clt_axpy(clt_context *ctx, float alpha, const clt_tensor *x, const clt_tensor *y) {
  int rc = CLT_OK;
  cl_kernel k;
  CLT_HANDLE(ctx, "context");
  CLT_ARG(x);
  CLT_ARG(y);
  cl_ulong xoff = elem_off(x), yoff = elem_off(y), n = (cl_ulong)clt_tensor_numel(y);
  CLT_TRY(check_f32(x, "axpy"));
  CLT_TRY(check_f32(y, "axpy"));
  CLT_TRY(check_same(x, y, "axpy"));
  CLT_TRY(clt_context_kernel(ctx, "elementwise", "axpy_f32", NULL, &k));
  CLT_CL_TRY(clSetKernelArg(k, 0, sizeof alpha, &alpha));
  CLT_CL_TRY(clSetKernelArg(k, 1, sizeof x->buf, &x->buf));
  CLT_CL_TRY(clSetKernelArg(k, 2, sizeof xoff, &xoff));
  CLT_CL_TRY(clSetKernelArg(k, 3, sizeof y->buf, &y->buf));
  CLT_CL_TRY(clSetKernelArg(k, 4, sizeof yoff, &yoff));
  CLT_CL_TRY(clSetKernelArg(k, 5, sizeof n, &n));
  CLT_TRY(clt_launch_1d(ctx, k, n, 0));
  return CLT_OK;
fail:
  return rc;
}

/* out = a (op) b for the binary kernels add_f32 and mul_f32. */
static int binary(clt_context *ctx, const char *kernel, const clt_tensor *a, const clt_tensor *b,
                  const clt_tensor *out) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong aoff = elem_off(a), boff = elem_off(b), ooff = elem_off(out), n = (cl_ulong)clt_tensor_numel(out);
  CLT_TRY(check_f32(a, kernel));
  CLT_TRY(check_f32(b, kernel));
  CLT_TRY(check_f32(out, kernel));
  CLT_TRY(check_same(a, out, kernel));
  CLT_TRY(check_same(b, out, kernel));
  CLT_TRY(clt_context_kernel(ctx, "elementwise", kernel, NULL, &k));
  CLT_CL_TRY(clSetKernelArg(k, 0, sizeof a->buf, &a->buf));
  CLT_CL_TRY(clSetKernelArg(k, 1, sizeof aoff, &aoff));
  CLT_CL_TRY(clSetKernelArg(k, 2, sizeof b->buf, &b->buf));
  CLT_CL_TRY(clSetKernelArg(k, 3, sizeof boff, &boff));
  CLT_CL_TRY(clSetKernelArg(k, 4, sizeof out->buf, &out->buf));
  CLT_CL_TRY(clSetKernelArg(k, 5, sizeof ooff, &ooff));
  CLT_CL_TRY(clSetKernelArg(k, 6, sizeof n, &n));
  CLT_TRY(clt_launch_1d(ctx, k, n, 0));
  return CLT_OK;
fail:
  return rc;
}

int clt_add(clt_context *ctx, const clt_tensor *a, const clt_tensor *b, const clt_tensor *out) {
  CLT_HANDLE(ctx, "context");
  CLT_ARG(a);
  CLT_ARG(b);
  CLT_ARG(out);
  return binary(ctx, "add_f32", a, b, out);
}

int clt_mul(clt_context *ctx, const clt_tensor *a, const clt_tensor *b, const clt_tensor *out) {
  CLT_HANDLE(ctx, "context");
  CLT_ARG(a);
  CLT_ARG(b);
  CLT_ARG(out);
  return binary(ctx, "mul_f32", a, b, out);
}

/* One reduction pass: `groups` groups of wgs items reduce n elements of
 * (buf, off) into partial[poff .. poff+groups). */
static int reduce_pass(clt_context *ctx, cl_kernel k, cl_mem buf, cl_ulong off, cl_ulong n, cl_mem partial,
                       cl_ulong poff, size_t groups, size_t wgs) {
  int rc = CLT_OK;
  size_t global = groups * wgs;
  CLT_CL_TRY(clSetKernelArg(k, 0, sizeof buf, &buf));
  CLT_CL_TRY(clSetKernelArg(k, 1, sizeof off, &off));
  CLT_CL_TRY(clSetKernelArg(k, 2, sizeof n, &n));
  CLT_CL_TRY(clSetKernelArg(k, 3, sizeof partial, &partial));
  CLT_CL_TRY(clSetKernelArg(k, 4, sizeof poff, &poff));
  CLT_CL_TRY(clSetKernelArg(k, 5, wgs * sizeof(float), NULL));
  CLT_CL_TRY(clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &wgs, 0, NULL, NULL));
  return CLT_OK;
fail:
  return rc;
}

/* Sums (of squares) of n tensors into out[0, n): two passes each, the
 * first into partial[0, G), the second into result slot G + k, then one
 * read of the n results, so the host waits once for all of them. */
static int reduce(clt_context *ctx, const clt_tensor *x, int n, int square, float *out) {
  int rc = CLT_OK;
  cl_kernel k1, k2;
  const char *op = square ? "sumsq" : "sum";
  if (n < 1) return CLT_OK;
  for (int i = 0; i < n; i++) CLT_TRY(check_f32(&x[i], op));
  CLT_TRY(clt_context_kernel(ctx, "reduce", "reduce_sum_f32", square ? "-DSQUARE=1" : "-DSQUARE=0", &k1));
  CLT_TRY(clt_context_kernel(ctx, "reduce", "reduce_sum_f32", "-DSQUARE=0", &k2));
  /* A CPU device runs a work-group at a time per thread, each start a cost
   * of its own (PoCL: 256 groups took longer than the sums in them): 8. */
  size_t groups = ctx->info.type == CLT_DEVICE_CPU ? 8 : REDUCE_GROUPS;
  size_t wgs1 = clt__clamp_wgs(ctx, k1, 256), wgs2 = clt__clamp_wgs(ctx, k2, groups);
  cl_mem partial;
  CLT_TRY(clt__context_buffer(ctx, &ctx->reduce_scratch, (REDUCE_GROUPS + (size_t)n) * sizeof(float),
                              "the sums' scratch", &partial));
  for (int i = 0; i < n; i++) {
    CLT_TRY(reduce_pass(ctx, k1, x[i].buf, elem_off(&x[i]), (cl_ulong)clt_tensor_numel(&x[i]), partial, 0, groups,
                        wgs1));
    CLT_TRY(reduce_pass(ctx, k2, partial, 0, groups, partial, REDUCE_GROUPS + (cl_ulong)i, 1, wgs2));
  }
  CLT_CL_TRY(clEnqueueReadBuffer(ctx->queue, partial, CL_TRUE, REDUCE_GROUPS * sizeof(float),
                                 (size_t)n * sizeof(float), out, 0, NULL, NULL));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_sum(clt_context *ctx, const clt_tensor *x, float *out) {
  CLT_HANDLE(ctx, "context");
  CLT_ARG(x);
  CLT_ARG(out);
  return reduce(ctx, x, 1, 0, out);
}

int clt_sumsq(clt_context *ctx, const clt_tensor *x, float *out) {
  CLT_HANDLE(ctx, "context");
  CLT_ARG(x);
  CLT_ARG(out);
  return reduce(ctx, x, 1, 1, out);
}

int clt__sumsq_many(clt_context *ctx, const clt_tensor *x, int n, float *out) { return reduce(ctx, x, n, 1, out); }

int clt_convert(clt_context *ctx, const clt_tensor *src, const clt_tensor *dst) {
  int rc = CLT_OK;
  cl_kernel k;
  char ss[128], ds[128];
  CLT_HANDLE(ctx, "context");
  CLT_ARG(src);
  CLT_ARG(dst);
  CLT_TRY(check_same(src, dst, "convert"));
  int to_half = src->dtype == CLT_F32 && dst->dtype == CLT_F16;
  if (!to_half && !(src->dtype == CLT_F16 && dst->dtype == CLT_F32))
    return clt__error(CLT_EINVAL, "convert: from %s %s to %s %s: only f32 to f16 and f16 to f32 are converted",
                      clt_dtype_name(src->dtype), clt_tensor_shape_str(src, ss, sizeof ss),
                      clt_dtype_name(dst->dtype), clt_tensor_shape_str(dst, ds, sizeof ds));
  cl_ulong soff = src->offset / clt_dtype_size(src->dtype), doff = dst->offset / clt_dtype_size(dst->dtype);
  cl_ulong n = (cl_ulong)clt_tensor_numel(src);
  CLT_TRY(clt_context_kernel(ctx, "elementwise", to_half ? "to_act" : "from_act", "-DCLT_HALF", &k));
  CLT_CL_TRY(clSetKernelArg(k, 0, sizeof src->buf, &src->buf));
  CLT_CL_TRY(clSetKernelArg(k, 1, sizeof soff, &soff));
  CLT_CL_TRY(clSetKernelArg(k, 2, sizeof dst->buf, &dst->buf));
  CLT_CL_TRY(clSetKernelArg(k, 3, sizeof doff, &doff));
  CLT_CL_TRY(clSetKernelArg(k, 4, sizeof n, &n));
  CLT_TRY(clt_launch_1d(ctx, k, n, 0));
  return CLT_OK;
fail:
  return rc;
}
