/*
 * tensor.c: tensor views (cl_mem, byte offset, shape, dtype) over flat
 * buffers, with bounds checked once when the view is made, and host uploads
 * and downloads.
 */
#include "core/internal.h"

#include <stdio.h>
#include <string.h>

int64_t clt_tensor_numel(const clt_tensor *t) {
  int64_t n = 1;
  if (!t) return 0;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

size_t clt_tensor_bytes(const clt_tensor *t) { return t ? (size_t)clt_tensor_numel(t) * clt_dtype_size(t->dtype) : 0; }

const char *clt_tensor_shape_str(const clt_tensor *t, char *buf, size_t len) {
  if (!buf || !len) return buf;
  if (!t) {
    clt__strlcpy(buf, "(no tensor)", len);
    return buf;
  }
  size_t used = (size_t)snprintf(buf, len, "(");
  for (int i = 0; i < t->ndim && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (used < len) snprintf(buf + used, len - used, ") %s", clt_dtype_name(t->dtype));
  return buf;
}

int clt_tensor_view(cl_mem buf, size_t offset, clt_dtype dtype, int ndim, const int64_t *shape,
                    clt_tensor *out) {
  CLT_ARG(out);
  memset(out, 0, sizeof *out);
  CLT_ARG(buf);
  CLT_ARG(shape);
  if (ndim < 1 || ndim > CLT_MAX_DIMS)
    return clt__error(CLT_ESHAPE, "tensor view: %d dimensions (1 to %d are allowed)", ndim, CLT_MAX_DIMS);
  size_t esize = clt_dtype_size(dtype);
  if (esize == 0) return clt__error(CLT_EINVAL, "tensor view: unknown dtype %d", (int)dtype);
  out->buf = buf;
  out->offset = offset;
  out->dtype = dtype;
  out->ndim = ndim;
  for (int i = 0; i < ndim; i++) out->shape[i] = shape[i];

  char s[128];
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] <= 0 || numel > INT64_MAX / shape[i])
      return clt__error(CLT_ESHAPE, "tensor view %s: dimension %d is %lld; dimensions must be positive",
                        clt_tensor_shape_str(out, s, sizeof s), i, (long long)shape[i]);
    numel *= shape[i];
  }
  if (offset % esize)
    return clt__error(CLT_ESHAPE, "tensor view %s: byte offset %zu is not a multiple of the element size %zu",
                      clt_tensor_shape_str(out, s, sizeof s), offset, esize);
  size_t size = clt_buffer_size(buf);
  if ((uint64_t)numel > (size / esize) || offset > size - (size_t)numel * esize)
    return clt__error(CLT_ESHAPE, "tensor view %s at byte offset %zu needs %llu bytes but the buffer holds %zu",
                      clt_tensor_shape_str(out, s, sizeof s), offset,
                      (unsigned long long)(offset + (uint64_t)numel * esize), size);
  return CLT_OK;
}

static int check_host_size(const clt_tensor *t, size_t bytes, const char *what) {
  if (bytes == clt_tensor_bytes(t)) return CLT_OK;
  char s[128];
  return clt__error(CLT_ESHAPE, "%s of tensor %s: %zu host bytes given, the tensor holds %zu", what,
                    clt_tensor_shape_str(t, s, sizeof s), bytes, clt_tensor_bytes(t));
}

/* The arguments of an upload or download, named as cltrain/opencl.h names them. */
static int check_transfer(const char *fn, clt_context *ctx, const clt_tensor *t, const void *host) {
  if (!ctx) return clt__null_arg(fn, "ctx", "context");
  if (!t) return clt__null_arg(fn, "t", NULL);
  if (!host) return clt__null_arg(fn, "host", NULL);
  return CLT_OK;
}

static int upload(clt_context *ctx, const clt_tensor *t, const void *host, size_t bytes, cl_bool blocking) {
  int rc = CLT_OK;
  CLT_TRY(check_host_size(t, bytes, "upload"));
  CLT_CL_TRY(clEnqueueWriteBuffer(ctx->queue, t->buf, blocking, t->offset, bytes, host, 0, NULL, NULL));
  return CLT_OK;
fail:
  return rc;
}

int clt_tensor_upload(clt_context *ctx, const clt_tensor *t, const void *host, size_t bytes) {
  int rc = check_transfer(__func__, ctx, t, host);
  return rc < 0 ? rc : upload(ctx, t, host, bytes, CL_TRUE);
}

int clt_tensor_upload_async(clt_context *ctx, const clt_tensor *t, const void *host, size_t bytes) {
  int rc = check_transfer(__func__, ctx, t, host);
  return rc < 0 ? rc : upload(ctx, t, host, bytes, CL_FALSE);
}

int clt_tensor_download(clt_context *ctx, const clt_tensor *t, void *host, size_t bytes) {
  int rc = check_transfer(__func__, ctx, t, host);
  if (rc < 0) return rc;
  CLT_TRY(check_host_size(t, bytes, "download"));
  CLT_CL_TRY(clEnqueueReadBuffer(ctx->queue, t->buf, CL_TRUE, t->offset, bytes, host, 0, NULL, NULL));
  return CLT_OK;
fail:
  return rc;
}
