/*
 * kinds_volume.c: the layer kinds over (C, L) signals and (C, D, H, W)
 * volumes: conv1d and conv3d (kernel, stride, padding, dilation), and max
 * and average pooling in 1-D and 3-D. Entries of the layer table
 * (model/layer.h) over src/nn/conv_nd.c and src/nn/pool_nd.c. Parameters
 * are laid out as PyTorch's state_dict: weight (out, in, k) or
 * (out, in, k, k, k), bias (out).
 */
#include "model/layer.h"
#include "nn/nn.h"

#include <stdio.h>

#define MAX_DIM 1000000
/* The vol2col workspace is capped, as conv2d's; the batch then runs in
 * chunks of samples. */
#define MAX_WORKSPACE_BYTES (256u << 20)

static const char *const rank_names[4] = {"", "(channels, length)", "(channels, height, width)",
                                          "(channels, depth, height, width)"};

/* The input must be (C, spatial...) with nd spatial axes. */
static int need_rank(clt__spec_line *lc, const clt_layer_spec *l, int nd) {
  char s[64];
  if (l->in_shape.ndim == nd + 1 && !l->in_shape.vocab) return CLT_OK;
  return clt__line_error(lc, clt__line_col(lc), "%s needs a %s input but the previous layer gives %s%s",
                         lc->tok[0].text, rank_names[nd], clt__shape_str(&l->in_shape, s, sizeof s),
                         l->in_shape.ndim == 1 ? " (a flat input: give `input` the sample's shape, or put the "
                                                 "convolution before flatten)" : "");
}

/* out_shape's spatial axes: a window of l->kernel taps spaced `dilation`
 * apart, at l->stride with `pad` on each side, over each input axis. */
static int nd_window_infer(clt__spec_line *lc, clt_layer_spec *l, int nd, int pad, int dilation) {
  char s[64];
  int rc = need_rank(lc, l, nd);
  if (rc < 0) return rc;
  int span = (l->kernel - 1) * dilation + 1;
  for (int a = 1; a <= nd; a++) {
    int in = l->in_shape.dims[a];
    if (in + 2 * pad < span) {
      if (dilation > 1)
        return clt__line_error(lc, clt__line_col(lc), "%s kernel %d with dilation %d spans %d, more than its input "
                               "%s padded by %d on each side", lc->tok[0].text, l->kernel, dilation, span,
                               clt__shape_str(&l->in_shape, s, sizeof s), pad);
      return clt__line_error(lc, clt__line_col(lc), "%s kernel %d is larger than its input %s padded by %d on each "
                             "side", lc->tok[0].text, l->kernel, clt__shape_str(&l->in_shape, s, sizeof s), pad);
    }
    l->out_shape.dims[a] = (in + 2 * pad - span) / l->stride + 1;
  }
  return CLT_OK;
}

/* ---- conv1d, conv3d ---- */

static int convnd_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  char example[32];
  snprintf(example, sizeof example, "%s 16 kernel=3", lc->tok[0].text);
  CLT_TRY(clt__need_int(lc, 0, "the number of output channels", example, 1, MAX_DIM, &l->out));
  l->kernel = 3, l->stride = 1, l->pad = 0, l->dilation = 1;
  CLT_TRY(clt__opt_int(lc, "kernel", 1, 64, &l->kernel));
  CLT_TRY(clt__opt_int(lc, "stride", 1, 64, &l->stride));
  CLT_TRY(clt__opt_int(lc, "pad", 0, 64, &l->pad));
  CLT_TRY(clt__opt_int(lc, "dilation", 1, 64, &l->dilation));
  CLT_TRY(clt__opt_bool(lc, "bias", &l->bias));
  CLT_TRY(clt__opt_init(lc, l));
fail:
  return rc;
}

/* Kernel elements k^nd. */
static int64_t kernel_elems(const clt_layer_spec *l, int nd) {
  int64_t e = 1;
  for (int a = 0; a < nd; a++) e *= l->kernel;
  return e;
}

static int64_t out_elems(const clt_layer_spec *l) {
  int64_t e = 1;
  for (int a = 1; a < l->out_shape.ndim; a++) e *= l->out_shape.dims[a];
  return e;
}

static int convnd_infer(clt__spec_line *lc, clt_layer_spec *l, int nd) {
  int rc = nd_window_infer(lc, l, nd, l->pad, l->dilation);
  if (rc < 0) return rc;
  int64_t cin = l->in_shape.dims[0], ke = kernel_elems(l, nd);
  l->out_shape.dims[0] = l->out;
  clt_param_init init;
  double scale;
  clt__weight_init(l, (double)cin * ke, (double)l->out * ke, &init, &scale);
  int64_t shape[5] = {l->out, cin, l->kernel, l->kernel, l->kernel};
  clt__add_param(l, "weight", 2 + nd, shape, init, scale, 1);
  if (l->bias) clt__add_param(l, "bias", 1, (int64_t[]){l->out}, CLT_PINIT_ZEROS, 0, 0);
  return CLT_OK;
}
static int conv1d_infer(clt__spec_line *lc, clt_layer_spec *l) { return convnd_infer(lc, l, 1); }
static int conv3d_infer(clt__spec_line *lc, clt_layer_spec *l) { return convnd_infer(lc, l, 3); }

static size_t convnd_workspace(const clt_layer_spec *l, int64_t n) {
  size_t bytes;
  int nd = l->in_shape.ndim - 1;
  while ((bytes = clt_nn_convnd_workspace_bytes(n, l->in_shape.dims[0], l->out, kernel_elems(l, nd), out_elems(l))) >
             MAX_WORKSPACE_BYTES &&
         n > 1)
    n = (n + 1) / 2;
  return bytes;
}

static size_t convnd_scratch(const clt_layer_spec *l, int64_t n, clt_dtype dt) {
  (void)dt;
  return clt_nn_conv_scratch_bytes(n, l->in_shape.dims[0], l->out, kernel_elems(l, l->in_shape.ndim - 1));
}

static clt_nn_convnd_cfg clt__convnd_cfg(const clt_layer_spec *l) {
  clt_nn_convnd_cfg c = {.dims = l->in_shape.ndim - 1};
  for (int a = 0; a < CLT_NN_MAX_SPATIAL; a++) c.stride[a] = l->stride, c.pad[a] = l->pad, c.dilation[a] = l->dilation;
  return c;
}

static int workspace_view(const clt__layer_io *io, clt_tensor *t) {
  int64_t n = (int64_t)(clt_buffer_size(io->workspace) / 4);
  return clt_tensor_view(io->workspace, 0, CLT_F32, 1, &n, t);
}

int clt__convnd_layer_forward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_nn_convnd_cfg c = clt__convnd_cfg(io->l);
  clt_tensor w, b, ws;
  CLT_TRY(clt__io_param(io, 0, &w));
  if (io->l->bias) CLT_TRY(clt__io_param(io, 1, &b));
  CLT_TRY(workspace_view(io, &ws));
  CLT_TRY(clt_nn_convnd_forward(io->ctx, &c, &io->x, &w, io->l->bias ? &b : NULL, &io->y, &ws));
fail:
  return rc;
}

int clt__convnd_layer_backward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_nn_convnd_cfg c = clt__convnd_cfg(io->l);
  clt_tensor w, dw, db, ws;
  CLT_TRY(clt__io_param(io, 0, &w));
  CLT_TRY(clt__io_grad(io, 0, &dw));
  if (io->l->bias) CLT_TRY(clt__io_grad(io, 1, &db));
  CLT_TRY(workspace_view(io, &ws));
  CLT_TRY(clt_nn_convnd_backward(io->ctx, &c, &io->x, &w, &io->dy, io->dx.buf ? &io->dx : NULL, &dw,
                                 io->l->bias ? &db : NULL, &ws));
fail:
  return rc;
}

static void describe_convnd(const clt_layer_spec *l, char *buf, size_t len) {
  int n = snprintf(buf, len, "%s %d k%d s%d p%d", l->kind->name, l->out, l->kernel, l->stride, l->pad);
  if (n > 0 && (size_t)n < len && l->dilation > 1) n += snprintf(buf + n, len - (size_t)n, " d%d", l->dilation);
  if (n > 0 && (size_t)n < len && !l->bias) snprintf(buf + n, len - (size_t)n, " no-bias");
}

/* Each output value: cin * k^nd multiply-adds. */
static double convnd_flops(const clt_layer_spec *l) {
  return 2.0 * l->in_shape.dims[0] * (double)kernel_elems(l, l->in_shape.ndim - 1) * l->out * (double)out_elems(l);
}

const clt__layer_kind clt__kind_conv1d = {.name = "conv1d",
                                          .parse = convnd_parse,
                                          .infer = conv1d_infer,
                                          .scratch_bytes = convnd_scratch,
                                          .workspace_bytes = convnd_workspace,
                                          .forward = clt__convnd_layer_forward,
                                          .backward = clt__convnd_layer_backward,
                                          .describe = describe_convnd,
                                          .flops = convnd_flops};

const clt__layer_kind clt__kind_conv3d = {.name = "conv3d",
                                          .parse = convnd_parse,
                                          .infer = conv3d_infer,
                                          .scratch_bytes = convnd_scratch,
                                          .workspace_bytes = convnd_workspace,
                                          .forward = clt__convnd_layer_forward,
                                          .backward = clt__convnd_layer_backward,
                                          .describe = describe_convnd,
                                          .flops = convnd_flops};

/* ---- maxpool1d, avgpool1d, maxpool3d, avgpool3d ---- */

static int poolnd_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  char example[32];
  snprintf(example, sizeof example, "%s 2", lc->tok[0].text);
  CLT_TRY(clt__need_int(lc, 0, "a window size", example, 1, 64, &l->kernel));
  l->stride = l->kernel;
  CLT_TRY(clt__opt_int(lc, "stride", 1, 64, &l->stride));
fail:
  return rc;
}

static int pool1d_infer(clt__spec_line *lc, clt_layer_spec *l) { return nd_window_infer(lc, l, 1, 0, 1); }
static int pool3d_infer(clt__spec_line *lc, clt_layer_spec *l) { return nd_window_infer(lc, l, 3, 0, 1); }
static int maxpool1d_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = pool1d_infer(lc, l);
  l->saved_f32 = clt__shape_numel(&l->out_shape); /* argmax, i32 */
  return rc;
}
static int maxpool3d_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = pool3d_infer(lc, l);
  l->saved_f32 = clt__shape_numel(&l->out_shape);
  return rc;
}

static clt_nn_poolnd_cfg poolnd_cfg(const clt_layer_spec *l) {
  clt_nn_poolnd_cfg c = {.dims = l->in_shape.ndim - 1};
  for (int a = 0; a < CLT_NN_MAX_SPATIAL; a++) c.kernel[a] = l->kernel, c.stride[a] = l->stride;
  return c;
}

static int argmax_view(const clt__layer_io *io, clt_tensor *t) {
  const clt_shape *s = &io->l->out_shape;
  int64_t shape[1 + CLT_SHAPE_MAX_DIMS] = {io->n};
  for (int a = 0; a < s->ndim; a++) shape[1 + a] = s->dims[a];
  return clt_tensor_view(io->aux, (size_t)io->aux_off * 4, CLT_I32, 1 + s->ndim, shape, t);
}

static int maxpoolnd_forward(const clt__layer_io *io) {
  clt_nn_poolnd_cfg c = poolnd_cfg(io->l);
  clt_tensor a;
  int rc = argmax_view(io, &a);
  return rc < 0 ? rc : clt_nn_maxpoolnd_forward(io->ctx, &c, &io->x, &io->y, &a);
}

static int maxpoolnd_backward(const clt__layer_io *io) {
  clt_nn_poolnd_cfg c = poolnd_cfg(io->l);
  clt_tensor a;
  int rc = argmax_view(io, &a);
  return rc < 0 ? rc : clt_nn_maxpoolnd_backward(io->ctx, &c, &a, &io->dy, &io->dx);
}

static int avgpoolnd_forward(const clt__layer_io *io) {
  clt_nn_poolnd_cfg c = poolnd_cfg(io->l);
  return clt_nn_avgpoolnd_forward(io->ctx, &c, &io->x, &io->y);
}

static int avgpoolnd_backward(const clt__layer_io *io) {
  clt_nn_poolnd_cfg c = poolnd_cfg(io->l);
  return clt_nn_avgpoolnd_backward(io->ctx, &c, &io->dy, &io->dx);
}

static void describe_poolnd(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "%s %d s%d", l->kind->name, l->kernel, l->stride);
}

#define POOL_KIND(var, kname, inf, fwd, bwd)                                                                     \
  const clt__layer_kind var = {.name = kname,                                                                    \
                               .flags = CLT_KIND_KEEPS_GAIN,                                                     \
                               .parse = poolnd_parse,                                                            \
                               .infer = inf,                                                                     \
                               .forward = fwd,                                                                   \
                               .backward = bwd,                                                                  \
                               .describe = describe_poolnd}
POOL_KIND(clt__kind_maxpool1d, "maxpool1d", maxpool1d_infer, maxpoolnd_forward, maxpoolnd_backward);
POOL_KIND(clt__kind_avgpool1d, "avgpool1d", pool1d_infer, avgpoolnd_forward, avgpoolnd_backward);
POOL_KIND(clt__kind_maxpool3d, "maxpool3d", maxpool3d_infer, maxpoolnd_forward, maxpoolnd_backward);
POOL_KIND(clt__kind_avgpool3d, "avgpool3d", pool3d_infer, avgpoolnd_forward, avgpoolnd_backward);
