/*
 * common.c: shape checks and launch helpers shared by the nn layers
 * (see common.h).
 */
#include "nn/common.h"

#include <stdio.h>
#include <string.h>

cl_ulong clt__nn_off(const clt_tensor *t) { return (cl_ulong)(t->offset / clt_dtype_size(t->dtype)); }

clt_matrix clt__nn_mat(const clt_tensor *t, int64_t ld) {
  clt_matrix m = {t->buf, (size_t)clt__nn_off(t), (size_t)ld};
  return m;
}

int clt__nn_check(const char *op, const char *name, const clt_tensor *t, clt_dtype dtype, int ndim,
                  const char *layout) {
  char s[128];
  if (!t) return clt__error(CLT_EINVAL, "%s: tensor %s is missing (NULL)", op, name);
  if (t->dtype != dtype || (ndim && t->ndim != ndim)) {
    if (ndim)
      return clt__error(CLT_ESHAPE, "%s: %s must be a %d-D %s tensor %s, got %s", op, name, ndim, clt_dtype_name(dtype),
                        layout, clt_tensor_shape_str(t, s, sizeof s));
    return clt__error(CLT_ESHAPE, "%s: %s must be a %s tensor %s, got %s", op, name, clt_dtype_name(dtype), layout,
                      clt_tensor_shape_str(t, s, sizeof s));
  }
  if (clt_tensor_numel(t) > NN_MAX_ELEMS)
    return clt__error(CLT_ESHAPE, "%s: %s %s has more than 2^31 - 1 elements, which the kernels cannot index", op, name,
                      clt_tensor_shape_str(t, s, sizeof s));
  return CLT_OK;
}

int clt__nn_check_act(const char *op, const char *name, const clt_tensor *t, int ndim, const char *layout) {
  return clt__nn_check(op, name, t, t && t->dtype == CLT_F16 ? CLT_F16 : CLT_F32, ndim, layout);
}

const char *clt__nn_act_opt(const clt_tensor *t) { return t && t->dtype == CLT_F16 ? "-DCLT_HALF" : ""; }

int clt__nn_shape_error(const char *op, const clt__nn_named *ts, int n, const char *fmt, ...) {
  char msg[1024], s[128];
  size_t used = (size_t)snprintf(msg, sizeof msg, "%s: ", op);
  int first = 1;
  for (int i = 0; i < n && used < sizeof msg; i++) {
    if (!ts[i].t) continue;
    used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s %s", first ? "" : ", ", ts[i].name,
                             clt_tensor_shape_str(ts[i].t, s, sizeof s));
    first = 0;
  }
  if (used + 2 < sizeof msg) {
    if (!first) {
      memcpy(msg + used, ": ", 3);
      used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + used, sizeof msg - used, fmt, ap);
    va_end(ap);
  }
  return clt__error(CLT_ESHAPE, "%s", msg);
}

int clt__nn_check_like(const char *op, const char *name, const clt_tensor *t, const char *like_name,
                       const clt_tensor *like) {
  if (!t) return clt__error(CLT_EINVAL, "%s: tensor %s is missing (NULL)", op, name);
  if (t->dtype == like->dtype && clt__nn_same_shape(t, like)) return CLT_OK;
  clt__nn_named ts[] = {{like_name, like}, {name, t}};
  return clt__nn_shape_error(op, ts, 2, "%s must have the shape and type of %s", name, like_name);
}

int clt__nn_check_same_act(const char *op, const char *a_name, const clt_tensor *a, const char *b_name,
                           const clt_tensor *b) {
  if (a->dtype == b->dtype) return CLT_OK;
  clt__nn_named ts[] = {{a_name, a}, {b_name, b}};
  return clt__nn_shape_error(op, ts, 2, "%s and %s must be stored in the same dtype (f32, or f16 for mixed precision)",
                             a_name, b_name);
}

int clt__nn_same_shape(const clt_tensor *a, const clt_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}

int clt__nn_args(cl_kernel k, int first, const clt__nn_arg *args, int n) {
  for (int i = 0; i < n; i++) {
    cl_int e = clSetKernelArg(k, (cl_uint)(first + i), args[i].size, args[i].value);
    if (e != CL_SUCCESS)
      return clt__error(clt__cl_status(e), "clSetKernelArg(argument %d, %zu bytes) failed with %s (%d)", first + i,
                        args[i].size, clt__cl_error_name(e), (int)e);
  }
  return CLT_OK;
}

int clt__nn_args_array(cl_kernel k, int first, const void *values, size_t size, int n) {
  for (int i = 0; i < n; i++) {
    clt__nn_arg a = {size, (const char *)values + i * size};
    int rc = clt__nn_args(k, first + i, &a, 1);
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

int clt__nn_launch_groups(clt_context *ctx, cl_kernel k, size_t groups, size_t wgs) {
  int rc = CLT_OK;
  if (groups == 0) return CLT_OK;
  size_t global = groups * wgs;
  CLT_CL_TRY(clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &wgs, 0, NULL, NULL));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "launching %zu work-groups of %zu on %s", groups, wgs, ctx->info.name);
}

/* The largest divisor of n that is at most cap (at least 1). */
static size_t divisor_at_most(size_t n, size_t cap) {
  for (size_t d = cap < n ? cap : n; d > 1; d--)
    if (n % d == 0) return d;
  return 1;
}

int clt__nn_launch_3d(clt_context *ctx, cl_kernel k, size_t gx, size_t gy, size_t gz) {
  int rc = CLT_OK;
  if (gx == 0 || gy == 0 || gz == 0) return CLT_OK;
  size_t most = 0, dims[3] = {0, 0, 0};
  CLT_CL_TRY(clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof most, &most, NULL));
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof dims, dims, NULL) != CL_SUCCESS)
    dims[0] = dims[1] = most;
  if (most > NN_GROUP_ITEMS) most = NN_GROUP_ITEMS;
  if (most < 1) most = 1;
  /* A whole row per group when it fits, else the largest piece that
   * divides it; then as many rows as divide gy and fit. */
  size_t lx = divisor_at_most(gx, most < dims[0] ? most : dims[0]);
  size_t capy = most / lx < dims[1] ? most / lx : dims[1];
  size_t ly = divisor_at_most(gy, capy ? capy : 1);
  size_t local[3] = {lx, ly, 1}, global[3] = {gx, gy, gz};
  CLT_CL_TRY(clEnqueueNDRangeKernel(ctx->queue, k, 3, NULL, global, local, 0, NULL, NULL));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "launching a kernel over %zu x %zu x %zu items on %s", gx, gy, gz, ctx->info.name);
}

/* PoCL on a CPU runs a work-group as a loop over its items, one loop per
 * stretch between barriers: a row reduced by a tree of 128 items is 2 log2
 * 128 loops over mostly idle items, and cost the tiny GPT's layernorm 4 ms
 * where one item walking the row takes 0.45 (nn_bench --gpt). rusticl's
 * llvmpipe, a CPU too, runs items in SIMD lanes and keeps the tree. */
size_t clt__nn_row_wgs(clt_context *ctx, cl_kernel k, int64_t len, size_t most) {
  if (clt__items_run_as_loops(ctx)) return 1;
  size_t want = 1;
  while (want < most && (int64_t)want < len) want *= 2;
  return clt__clamp_wgs(ctx, k, want);
}
