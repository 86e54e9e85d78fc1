/*
 * kinds_upconv.c: the layer kinds that make a sample's spatial axes larger,
 * for U-Net decoders: `upsample scale=S [mode=nearest|linear]` over (C, L),
 * (C, H, W) or (C, D, H, W) (torch.nn.Upsample, align_corners=False), and
 * `convtranspose1d|2d|3d N kernel=K [stride=1] [pad=0] [output_pad=0]
 * [bias=true] [init=auto]` (torch.nn.ConvTranspose1d/2d/3d, weight (in,
 * out, k...) so a weights file maps onto torch's state_dict). Entries of
 * the layer table (model/layer.h) over src/nn/upsample.c and
 * src/nn/convtranspose.c.
 */
#include "model/layer.h"
#include "nn/nn.h"

#include <stdio.h>
#include <string.h>

#define MAX_DIM 1000000
/* The workspace is capped; convtranspose then runs in chunks of samples. */
#define MAX_WORKSPACE_BYTES (256u << 20)

static const char *const rank_names[] = {"", "", "(channels, length)", "(channels, height, width)",
                                         "(channels, depth, height, width)"};

/* ---- upsample ---- */

static int upsample_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  const char *mode = NULL;
  int col = 0;
  l->scale = 0;
  CLT_TRY(clt__opt_int(lc, "scale", 1, 64, &l->scale));
  if (!l->scale) return clt__line_error(lc, clt__line_col(lc), "upsample needs scale=S (upsample scale=2)");
  CLT_TRY(clt__opt_word(lc, "mode", &mode, &col));
  if (!mode || strcmp(mode, "nearest") == 0) l->upsample_linear = 0;
  else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0 || strcmp(mode, "trilinear") == 0)
    l->upsample_linear = 1;
  else return clt__line_error(lc, col, "mode must be nearest or linear, not '%s'", mode);
fail:
  return rc;
}

static int upsample_infer(clt__spec_line *lc, clt_layer_spec *l) {
  char s[64];
  const clt_shape *in = &l->in_shape;
  if (in->ndim < 2 || in->vocab)
    return clt__line_error(lc, clt__line_col(lc), "upsample needs a (channels, length), (channels, height, width) "
                           "or (channels, depth, height, width) input but the previous layer gives %s",
                           clt__shape_str(in, s, sizeof s));
  for (int d = 1; d < in->ndim; d++) {
    if ((int64_t)in->dims[d] * l->scale > MAX_DIM)
      return clt__line_error(lc, clt__line_col(lc), "upsample scale=%d makes %s too large", l->scale,
                             clt__shape_str(in, s, sizeof s));
    l->out_shape.dims[d] = in->dims[d] * l->scale;
  }
  return CLT_OK;
}

static int upsample_forward(const clt__layer_io *io) {
  return clt_nn_upsample_forward(io->ctx, io->l->upsample_linear ? CLT_NN_UPSAMPLE_LINEAR : CLT_NN_UPSAMPLE_NEAREST,
                                 io->l->scale, &io->x, &io->y);
}

static int upsample_backward(const clt__layer_io *io) {
  return clt_nn_upsample_backward(io->ctx, io->l->upsample_linear ? CLT_NN_UPSAMPLE_LINEAR : CLT_NN_UPSAMPLE_NEAREST,
                                  io->l->scale, &io->dy, &io->dx);
}

static void describe_upsample(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "upsample x%d %s", l->scale, l->upsample_linear ? "linear" : "nearest");
}

const clt__layer_kind clt__kind_upsample = {.name = "upsample",
                                            .flags = CLT_KIND_KEEPS_GAIN,
                                            .parse = upsample_parse,
                                            .infer = upsample_infer,
                                            .forward = upsample_forward,
                                            .backward = upsample_backward,
                                            .describe = describe_upsample};

/* ---- convtranspose1d, 2d, 3d ---- */

/* Spatial axes of the kind: 1, 2 or 3 (the name's digit). */
static int convt_axes(const clt_layer_spec *l) { return l->kind->name[13] - '0'; }

static int convt_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  char example[64];
  snprintf(example, sizeof example, "%s 32 kernel=2 stride=2", lc->tok[0].text);
  CLT_TRY(clt__need_int(lc, 0, "the number of output channels", example, 1, MAX_DIM, &l->out));
  l->kernel = 0, l->stride = 1, l->pad = 0, l->output_pad = 0;
  CLT_TRY(clt__opt_int(lc, "kernel", 1, 64, &l->kernel));
  if (!l->kernel) return clt__line_error(lc, clt__line_col(lc), "%s needs kernel=K (%s)", lc->tok[0].text, example);
  CLT_TRY(clt__opt_int(lc, "stride", 1, 64, &l->stride));
  CLT_TRY(clt__opt_int(lc, "pad", 0, 64, &l->pad));
  CLT_TRY(clt__opt_int(lc, "output_pad", 0, 63, &l->output_pad));
  if (l->output_pad >= l->stride) {
    int col = clt__line_col(lc);
    for (int t = 1; t < lc->ntok; t++)
      if (strncmp(lc->tok[t].text, "output_pad=", 11) == 0) col = lc->tok[t].col + 11;
    return clt__line_error(lc, col, "output_pad=%d must be smaller than stride=%d (as in PyTorch)", l->output_pad,
                           l->stride);
  }
  CLT_TRY(clt__opt_bool(lc, "bias", &l->bias));
  CLT_TRY(clt__opt_init(lc, l));
fail:
  return rc;
}

static int convt_infer(clt__spec_line *lc, clt_layer_spec *l) {
  char s[64];
  const clt_shape *in = &l->in_shape;
  int axes = convt_axes(l);
  if (in->ndim != axes + 1 || in->vocab)
    return clt__line_error(lc, clt__line_col(lc), "%s needs a %s input but the previous layer gives %s",
                           lc->tok[0].text, rank_names[axes + 1], clt__shape_str(in, s, sizeof s));
  int64_t cin = in->dims[0], k = l->kernel, cells = 1;
  l->out_shape.dims[0] = l->out;
  for (int d = 1; d <= axes; d++) {
    int64_t o = clt_nn_convt_out_size(in->dims[d], k, l->stride, l->pad, l->output_pad);
    if (o < 1 || o > MAX_DIM)
      return clt__line_error(lc, clt__line_col(lc), "%s kernel=%d stride=%d pad=%d leaves no output of its input %s",
                             lc->tok[0].text, l->kernel, l->stride, l->pad, clt__shape_str(in, s, sizeof s));
    l->out_shape.dims[d] = (int)o;
    cells *= k;
  }
  /* Each output cell is fed by about cin * cells / stride^axes inputs;
   * each input feeds out * cells outputs. */
  double fan_in = (double)cin * (double)cells;
  for (int d = 0; d < axes; d++) fan_in /= l->stride;
  if (fan_in < cin) fan_in = (double)cin;
  clt_param_init init;
  double scale;
  clt__weight_init(l, fan_in, (double)l->out * cells, &init, &scale);
  int64_t shape[5] = {cin, l->out, k, k, k};
  clt__add_param(l, "weight", axes + 2, shape, init, scale, 1);
  if (l->bias) clt__add_param(l, "bias", 1, (int64_t[]){l->out}, CLT_PINIT_ZEROS, 0, 0);
  return CLT_OK;
}

static int64_t convt_cells(const clt_layer_spec *l, const clt_shape *s, int64_t *kernel_cells) {
  int64_t cells = 1, kc = 1;
  for (int d = 1; d < s->ndim; d++) cells *= s->dims[d], kc *= l->kernel;
  if (kernel_cells) *kernel_cells = kc;
  return cells;
}

static size_t convt_workspace(const clt_layer_spec *l, int64_t n) {
  int64_t kc, cells = convt_cells(l, &l->in_shape, &kc);
  size_t bytes;
  while ((bytes = clt_nn_convtranspose_workspace_bytes(n, l->in_shape.dims[0], l->out, kc, cells)) >
             MAX_WORKSPACE_BYTES &&
         n > 1)
    n = (n + 1) / 2;
  return bytes;
}

static clt_nn_convt_cfg convt_cfg(const clt_layer_spec *l) {
  clt_nn_convt_cfg c;
  for (int a = 0; a < 3; a++) c.stride[a] = l->stride, c.pad[a] = l->pad, c.output_pad[a] = l->output_pad;
  return c;
}

static int workspace_view(const clt__layer_io *io, clt_tensor *t) {
  int64_t n = (int64_t)(clt_buffer_size(io->workspace) / 4);
  return clt_tensor_view(io->workspace, 0, CLT_F32, 1, &n, t);
}

static int convt_forward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_nn_convt_cfg c = convt_cfg(io->l);
  clt_tensor w, b, ws;
  CLT_TRY(clt__io_param(io, 0, &w));
  if (io->l->bias) CLT_TRY(clt__io_param(io, 1, &b));
  CLT_TRY(workspace_view(io, &ws));
  CLT_TRY(clt_nn_convtranspose_forward(io->ctx, &c, &io->x, &w, io->l->bias ? &b : NULL, &io->y, &ws));
fail:
  return rc;
}

static int convt_backward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_nn_convt_cfg c = convt_cfg(io->l);
  clt_tensor w, dw, db, ws;
  CLT_TRY(clt__io_param(io, 0, &w));
  CLT_TRY(clt__io_grad(io, 0, &dw));
  if (io->l->bias) CLT_TRY(clt__io_grad(io, 1, &db));
  CLT_TRY(workspace_view(io, &ws));
  CLT_TRY(clt_nn_convtranspose_backward(io->ctx, &c, &io->x, &w, &io->dy, io->dx.buf ? &io->dx : NULL, &dw,
                                        io->l->bias ? &db : NULL, &ws));
fail:
  return rc;
}

static void describe_convt(const clt_layer_spec *l, char *buf, size_t len) {
  char op[16] = "";
  if (l->output_pad) snprintf(op, sizeof op, " op%d", l->output_pad);
  snprintf(buf, len, "%s %d k%d s%d p%d%s%s", l->kind->name, l->out, l->kernel, l->stride, l->pad, op,
           l->bias ? "" : " no-bias");
}

/* Each input cell: out * kernel cells multiply-adds per input channel. */
static double convt_flops(const clt_layer_spec *l) {
  int64_t kc, cells = convt_cells(l, &l->in_shape, &kc);
  return 2.0 * l->in_shape.dims[0] * (double)l->out * (double)kc * (double)cells;
}

#define CONVT_KIND(axes)                                                                                             \
  {.name = "convtranspose" #axes "d", .parse = convt_parse, .infer = convt_infer,                                  \
   .workspace_bytes = convt_workspace, .forward = convt_forward, .backward = convt_backward,                       \
   .describe = describe_convt, .flops = convt_flops}

const clt__layer_kind clt__kind_convtranspose1d = CONVT_KIND(1);
const clt__layer_kind clt__kind_convtranspose2d = CONVT_KIND(2);
const clt__layer_kind clt__kind_convtranspose3d = CONVT_KIND(3);
