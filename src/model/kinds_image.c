/*
 * kinds_image.c: the layer kinds over (C, H, W) samples: conv2d, max and
 * average pooling, global average pooling. Entries of the layer table
 * (model/layer.h) over the kernels of src/nn.
 */
#include "model/layer.h"
#include "nn/nn.h"

#include <stdio.h>

#define MAX_DIM 1000000
/* The im2col workspace is capped; conv2d then runs in chunks of samples. */
#define MAX_WORKSPACE_BYTES (256u << 20)

static int need_image(clt__spec_line *lc, const clt_layer_spec *l) {
  char s[64];
  if (l->in_shape.ndim == 3) return CLT_OK;
  return clt__line_error(lc, clt__line_col(lc), "%s needs a (channels, height, width) input but the previous layer "
                         "gives %s", lc->tok[0].text, clt__shape_str(&l->in_shape, s, sizeof s));
}

/* A window of l->kernel with l->stride and pad over the input. */
static int window_infer(clt__spec_line *lc, clt_layer_spec *l, int pad) {
  char s[64];
  int rc = need_image(lc, l);
  if (rc < 0) return rc;
  const clt_shape *in = &l->in_shape;
  int span = (l->kernel - 1) * (l->dilation > 1 ? l->dilation : 1) + 1; /* conv2d's dilation= spreads the taps */
  int h = (in->dims[1] + 2 * pad - span) / l->stride + 1;
  int w = (in->dims[2] + 2 * pad - span) / l->stride + 1;
  if (in->dims[1] + 2 * pad < span || in->dims[2] + 2 * pad < span || h < 1 || w < 1) {
    if (span > l->kernel)
      return clt__line_error(lc, clt__line_col(lc), "%s window %d with dilation %d spans %d, more than its input %s "
                             "(padding %d)", lc->tok[0].text, l->kernel, l->dilation, span,
                             clt__shape_str(in, s, sizeof s), pad);
    return clt__line_error(lc, clt__line_col(lc), "%s window %d is larger than its input %s (padding %d)",
                           lc->tok[0].text, l->kernel, clt__shape_str(in, s, sizeof s), pad);
  }
  l->out_shape.dims[1] = h;
  l->out_shape.dims[2] = w;
  return CLT_OK;
}

/* ---- conv2d ---- */

static int conv_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  CLT_TRY(clt__need_int(lc, 0, "the number of output channels", "conv2d 32 kernel=3", 1, MAX_DIM, &l->out));
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

static int conv_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = window_infer(lc, l, l->pad);
  if (rc < 0) return rc;
  int64_t cin = l->in_shape.dims[0], k = l->kernel;
  l->out_shape.dims[0] = l->out;
  clt_param_init init;
  double scale; /* fan_in = inputs feeding one output; fan_out = outputs fed by one input */
  clt__weight_init(l, (double)cin * k * k, (double)l->out * k * k, &init, &scale);
  clt__add_param(l, "weight", 4, (int64_t[]){l->out, cin, k, k}, init, scale, 1);
  if (l->bias) clt__add_param(l, "bias", 1, (int64_t[]){l->out}, CLT_PINIT_ZEROS, 0, 0);
  return CLT_OK;
}

static size_t conv_workspace(const clt_layer_spec *l, int64_t n) {
  size_t bytes;
  while ((bytes = clt_nn_conv2d_workspace_bytes(n, l->in_shape.dims[0], l->out, l->kernel, l->kernel,
                                                l->out_shape.dims[1], l->out_shape.dims[2])) > MAX_WORKSPACE_BYTES &&
         n > 1)
    n = (n + 1) / 2;
  return bytes;
}

static size_t conv_scratch(const clt_layer_spec *l, int64_t n, clt_dtype dt) {
  (void)dt;
  return clt_nn_conv_scratch_bytes(n, l->in_shape.dims[0], l->out, (int64_t)l->kernel * l->kernel);
}

static clt_nn_conv2d_cfg conv_cfg(const clt_layer_spec *l) {
  clt_nn_conv2d_cfg c = {.stride_h = l->stride, .stride_w = l->stride, .pad_h = l->pad, .pad_w = l->pad};
  return c;
}

static int workspace_view(const clt__layer_io *io, clt_tensor *t) {
  int64_t n = (int64_t)(clt_buffer_size(io->workspace) / 4);
  return clt_tensor_view(io->workspace, 0, CLT_F32, 1, &n, t);
}

/* A dilated conv2d runs through src/nn/conv_nd.c (kinds_volume.c); the
 * undilated one keeps conv.c's tuned paths. */
static int conv_forward(const clt__layer_io *io) {
  if (io->l->dilation > 1) return clt__convnd_layer_forward(io);
  int rc = CLT_OK;
  clt_nn_conv2d_cfg c = conv_cfg(io->l);
  clt_tensor w, b, ws;
  CLT_TRY(clt__io_param(io, 0, &w));
  if (io->l->bias) CLT_TRY(clt__io_param(io, 1, &b));
  CLT_TRY(workspace_view(io, &ws));
  CLT_TRY(clt_nn_conv2d_forward(io->ctx, &c, &io->x, &w, io->l->bias ? &b : NULL, &io->y, &ws));
fail:
  return rc;
}

static int conv_backward(const clt__layer_io *io) {
  if (io->l->dilation > 1) return clt__convnd_layer_backward(io);
  int rc = CLT_OK;
  clt_nn_conv2d_cfg c = conv_cfg(io->l);
  clt_tensor w, dw, db, ws;
  CLT_TRY(clt__io_param(io, 0, &w));
  CLT_TRY(clt__io_grad(io, 0, &dw));
  if (io->l->bias) CLT_TRY(clt__io_grad(io, 1, &db));
  CLT_TRY(workspace_view(io, &ws));
  CLT_TRY(clt_nn_conv2d_backward(io->ctx, &c, &io->x, &w, &io->dy, io->dx.buf ? &io->dx : NULL, &dw,
                                 io->l->bias ? &db : NULL, &ws));
fail:
  return rc;
}

static void describe_conv(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "conv2d %d k%d s%d p%d d%d%s", l->out, l->kernel, l->stride, l->pad, l->dilation,
           l->bias ? "" : " no-bias");
  if (l->dilation <= 1) /* as before dilation= */
    snprintf(buf, len, "conv2d %d k%d s%d p%d%s", l->out, l->kernel, l->stride, l->pad, l->bias ? "" : " no-bias");
}

/* Each output value: cin * k * k multiply-adds. */
static double conv_flops(const clt_layer_spec *l) {
  return 2.0 * l->in_shape.dims[0] * l->kernel * l->kernel * (double)l->out * l->out_shape.dims[1] *
         l->out_shape.dims[2];
}

const clt__layer_kind clt__kind_conv2d = {.name = "conv2d",
                                          .alias = "conv",
                                          .parse = conv_parse,
                                          .infer = conv_infer,
                                          .scratch_bytes = conv_scratch,
                                          .workspace_bytes = conv_workspace,
                                          .forward = conv_forward,
                                          .backward = conv_backward,
                                          .describe = describe_conv,
                                          .flops = conv_flops};

/* ---- max and average pooling ---- */

static int pool_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  CLT_TRY(clt__need_int(lc, 0, "a window size", "maxpool 2", 1, 64, &l->kernel));
  l->stride = l->kernel;
  CLT_TRY(clt__opt_int(lc, "stride", 1, 64, &l->stride));
fail:
  return rc;
}

static int pool_infer(clt__spec_line *lc, clt_layer_spec *l) { return window_infer(lc, l, 0); }

static int maxpool_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = pool_infer(lc, l);
  l->saved_f32 = clt__shape_numel(&l->out_shape); /* argmax, i32 */
  return rc;
}

static clt_nn_pool2d_cfg pool_cfg(const clt_layer_spec *l) {
  clt_nn_pool2d_cfg c = {l->kernel, l->kernel, l->stride, l->stride, 0, 0};
  return c;
}

static int argmax_view(const clt__layer_io *io, clt_tensor *t) {
  const clt_shape *s = &io->l->out_shape;
  int64_t shape[4] = {io->n, s->dims[0], s->dims[1], s->dims[2]};
  return clt_tensor_view(io->aux, (size_t)io->aux_off * 4, CLT_I32, 4, shape, t);
}

static int maxpool_forward(const clt__layer_io *io) {
  clt_nn_pool2d_cfg c = pool_cfg(io->l);
  clt_tensor a;
  int rc = argmax_view(io, &a);
  return rc < 0 ? rc : clt_nn_maxpool2d_forward(io->ctx, &c, &io->x, &io->y, &a);
}

static int maxpool_backward(const clt__layer_io *io) {
  clt_nn_pool2d_cfg c = pool_cfg(io->l);
  clt_tensor a;
  int rc = argmax_view(io, &a);
  return rc < 0 ? rc : clt_nn_maxpool2d_backward(io->ctx, &c, &a, &io->dy, &io->dx);
}

static int avgpool_forward(const clt__layer_io *io) {
  clt_nn_pool2d_cfg c = pool_cfg(io->l);
  return clt_nn_avgpool2d_forward(io->ctx, &c, &io->x, &io->y);
}

static int avgpool_backward(const clt__layer_io *io) {
  clt_nn_pool2d_cfg c = pool_cfg(io->l);
  return clt_nn_avgpool2d_backward(io->ctx, &c, &io->dy, &io->dx);
}

static void describe_pool(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "%s %d s%d", l->kind->name, l->kernel, l->stride);
}

const clt__layer_kind clt__kind_maxpool = {.name = "maxpool",
                                           .alias = "maxpool2d",
                                           .flags = CLT_KIND_KEEPS_GAIN,
                                           .parse = pool_parse,
                                           .infer = maxpool_infer,
                                           .forward = maxpool_forward,
                                           .backward = maxpool_backward,
                                           .describe = describe_pool};

const clt__layer_kind clt__kind_avgpool = {.name = "avgpool",
                                           .alias = "avgpool2d",
                                           .flags = CLT_KIND_KEEPS_GAIN,
                                           .parse = pool_parse,
                                           .infer = pool_infer,
                                           .forward = avgpool_forward,
                                           .backward = avgpool_backward,
                                           .describe = describe_pool};

/* ---- global average pooling ---- */

static int gap_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = need_image(lc, l);
  l->out_shape.ndim = 1;
  return rc;
}

static int gap_forward(const clt__layer_io *io) { return clt_nn_global_avgpool_forward(io->ctx, &io->x, &io->y); }
static int gap_backward(const clt__layer_io *io) { return clt_nn_global_avgpool_backward(io->ctx, &io->dy, &io->dx); }

const clt__layer_kind clt__kind_globalavgpool = {.name = "globalavgpool",
                                                 .flags = CLT_KIND_KEEPS_GAIN,
                                                 .infer = gap_infer,
                                                 .forward = gap_forward,
                                                 .backward = gap_backward};
