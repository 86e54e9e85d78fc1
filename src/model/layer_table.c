/*
 * layer_table.c: the table of layer kinds (model/layer.h), and the views a
 * kind's forward and backward take of their places in a replica's buffers.
 */
#include "model/layer.h"

#include <stdio.h>
#include <string.h>

static const clt__layer_kind *const kinds[] = {
    &clt__kind_input,     &clt__kind_linear,        &clt__kind_conv2d,        &clt__kind_maxpool,
    &clt__kind_avgpool,   &clt__kind_globalavgpool, &clt__kind_relu,          &clt__kind_leakyrelu,
    &clt__kind_gelu,      &clt__kind_tanh,          &clt__kind_sigmoid,       &clt__kind_dropout,
    &clt__kind_flatten,   &clt__kind_layernorm,     &clt__kind_residual,      &clt__kind_embedding,
    &clt__kind_posembedding, &clt__kind_attention, &clt__kind_silu,         &clt__kind_rmsnorm,
    &clt__kind_swiglu, &clt__kind_save, &clt__kind_concat, &clt__kind_groupnorm,
    &clt__kind_conv1d,    &clt__kind_conv3d,        &clt__kind_maxpool1d,     &clt__kind_avgpool1d,
    &clt__kind_maxpool3d, &clt__kind_avgpool3d,
    &clt__kind_upsample,      &clt__kind_convtranspose1d, &clt__kind_convtranspose2d,
    &clt__kind_convtranspose3d, &clt__kind_batchnorm,
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

const clt__layer_kind *clt__layer_kind_find(const char *word) {
  for (size_t i = 0; i < NKINDS; i++)
    if (strcmp(word, kinds[i]->name) == 0 || (kinds[i]->alias && strcmp(word, kinds[i]->alias) == 0))
      return kinds[i];
  return NULL;
}

const char *clt__layer_kind_list(char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < NKINDS && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", kinds[i]->name);
  if (used < len) snprintf(buf + used, len - used, "; and block ... end");
  return buf;
}

double clt__spec_flops(const clt_model_spec *spec, int first, int last) {
  double sum = 0;
  for (int i = first; i < last && i < spec->nlayers; i++)
    if (spec->layers[i].kind->flops) sum += spec->layers[i].kind->flops(&spec->layers[i]);
  return sum;
}

static int param_view(cl_mem arena, const clt_param_spec *p, clt_tensor *t) {
  return clt_tensor_view(arena, (size_t)p->offset * 4, CLT_F32, p->ndim, p->shape, t);
}

int clt__io_param(const clt__layer_io *io, int k, clt_tensor *t) {
  if (io->param_view) return io->param_view(io->grad_user, &io->l->param[k], t);
  return param_view(io->params, &io->l->param[k], t);
}
int clt__io_grad(const clt__layer_io *io, int k, clt_tensor *t) {
  const clt_param_spec *p = &io->l->param[k];
  if (io->grad_view) return io->grad_view(io->grad_user, p, t);
  return param_view(io->grads, p, t);
}

static int batch_view(cl_mem buf, int64_t off, clt_dtype dt, int64_t n, int ndim, const int64_t *dims,
                      clt_tensor *t) {
  int64_t shape[CLT_MAX_DIMS] = {n};
  for (int d = 0; d < ndim; d++) shape[d + 1] = dims[d];
  return clt_tensor_view(buf, (size_t)off * clt_dtype_size(dt), dt, ndim + 1, shape, t);
}

int clt__io_saved(const clt__layer_io *io, int64_t at, int ndim, const int64_t *dims, clt_tensor *t) {
  return batch_view(io->saved, io->saved_off + at * io->n, io->dt, io->n, ndim, dims, t);
}

int clt__io_aux(const clt__layer_io *io, int64_t at, clt_dtype dt, int64_t count, clt_tensor *t) {
  return clt_tensor_view(io->aux, (size_t)(io->aux_off + at * io->n) * 4, dt, 1, &count, t);
}

int clt__io_scratch(const clt__layer_io *io, int64_t at, int ndim, const int64_t *dims, clt_tensor *t) {
  return batch_view(io->gscratch, at * io->n, io->dt, io->n, ndim, dims, t);
}

int clt__reshape(const clt_tensor *t, int ndim, const int64_t *shape, clt_tensor *out) {
  return clt_tensor_view(t->buf, t->offset, t->dtype, ndim, shape, out);
}

int clt__rows(const clt_tensor *t, int64_t feat, clt_tensor *out) {
  int64_t shape[2] = {clt_tensor_numel(t) / feat, feat};
  return clt__reshape(t, 2, shape, out);
}

int clt__copy(clt_context *ctx, const clt_tensor *src, const clt_tensor *dst) {
  int rc = CLT_OK;
  size_t bytes = clt_tensor_bytes(src);
  if (src->dtype != dst->dtype || bytes != clt_tensor_bytes(dst))
    return clt__error(CLT_ESHAPE, "copy of %zu bytes into %zu", bytes, clt_tensor_bytes(dst));
  if (bytes) CLT_CL_TRY(clEnqueueCopyBuffer(ctx->queue, src->buf, dst->buf, src->offset, dst->offset, bytes, 0, NULL, NULL));
fail:
  return rc;
}
