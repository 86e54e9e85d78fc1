/*
 * kinds_dense.c: the layer kinds that work on features (and on each
 * position of a sequence alike): input, linear, layernorm, the six
 * activations, dropout, flatten and residual. Each is an entry of the
 * layer table (model/layer.h) over the kernels of src/nn.
 */
#include "model/layer.h"
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_DIM 1000000

/* ---- input ---- */

static int input_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  clt_shape *s = &l->out_shape;
  if (clt__flag(lc, "tokens")) { /* input tokens T vocab=V */
    s->ndim = 1;
    CLT_TRY(clt__need_int(lc, 1, "the context length", "input tokens 1024 vocab=50257", 1, MAX_DIM, &s->dims[0]));
    CLT_TRY(clt__opt_int(lc, "vocab", 2, 1 << 24, &s->vocab));
    if (!s->vocab)
      return clt__line_error(lc, clt__line_col(lc), "input tokens needs the vocabulary size (vocab=50257)");
  } else { /* input 784, input 2 100, input 1 28 28, input 1 16 16 16 */
    int n = clt__count_positionals(lc);
    if (n < 1 || n > CLT_SHAPE_MAX_DIMS)
      return clt__line_error(lc, clt__line_col(lc), "input needs 1 number (features), 2 (channels length), "
                             "3 (channels height width) or 4 (channels depth height width), "
                             "or tokens T vocab=V, got %d", n);
    s->ndim = n;
    for (int i = 0; i < n; i++) CLT_TRY(clt__need_int(lc, i, "an input dimension", "input 784", 1, MAX_DIM, &s->dims[i]));
  }
  l->in_shape = *s;
fail:
  return rc;
}

static void describe_input(const clt_layer_spec *l, char *buf, size_t len) {
  if (l->out_shape.vocab) snprintf(buf, len, "input tokens vocab %d", l->out_shape.vocab);
  else snprintf(buf, len, "input");
}

const clt__layer_kind clt__kind_input = {
    .name = "input", .flags = CLT_KIND_INPUT, .parse = input_parse, .describe = describe_input};

/* ---- linear over the last dimension ---- */

static int linear_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  CLT_TRY(clt__need_int(lc, 0, "the number of output features", "linear 128", 1, MAX_DIM, &l->out));
  CLT_TRY(clt__opt_bool(lc, "bias", &l->bias));
  CLT_TRY(clt__opt_init(lc, l));
fail:
  return rc;
}

static int linear_infer(clt__spec_line *lc, clt_layer_spec *l) {
  char s[64];
  const clt_shape *in = &l->in_shape;
  if (in->ndim > 2)
    return clt__line_error(lc, clt__line_col(lc), "linear needs a flat input or a sequence (T, C) but the previous "
                           "layer gives %s; add 'flatten' before it", clt__shape_str(in, s, sizeof s));
  int fin = in->dims[in->ndim - 1];
  l->out_shape.dims[in->ndim - 1] = l->out;
  clt_param_init init;
  double scale;
  clt__weight_init(l, fin, l->out, &init, &scale);
  clt__add_param(l, "weight", 2, (int64_t[]){l->out, fin}, init, scale, 1);
  if (l->bias) clt__add_param(l, "bias", 1, (int64_t[]){l->out}, CLT_PINIT_ZEROS, 0, 0);
  return CLT_OK;
}

static size_t linear_scratch(const clt_layer_spec *l, int64_t n, clt_dtype dt) {
  const clt_shape *in = &l->in_shape;
  return clt_nn_linear_scratch_bytes(n * clt__shape_rows(in), in->dims[in->ndim - 1], l->out, dt);
}

static int linear_forward(const clt__layer_io *io) {
  int rc = CLT_OK;
  const clt_layer_spec *l = io->l;
  int64_t fin = l->in_shape.dims[l->in_shape.ndim - 1];
  clt_tensor x, y, w, b;
  CLT_TRY(clt__rows(&io->x, fin, &x));
  CLT_TRY(clt__rows(&io->y, l->out, &y));
  CLT_TRY(clt__io_param(io, 0, &w));
  if (l->bias) CLT_TRY(clt__io_param(io, 1, &b));
  CLT_TRY(clt_nn_linear_forward(io->ctx, &x, &w, l->bias ? &b : NULL, &y));
fail:
  return rc;
}

static int linear_backward(const clt__layer_io *io) {
  int rc = CLT_OK;
  const clt_layer_spec *l = io->l;
  int64_t fin = l->in_shape.dims[l->in_shape.ndim - 1];
  clt_tensor x, dy, dx, w, dw, db;
  CLT_TRY(clt__rows(&io->x, fin, &x));
  CLT_TRY(clt__rows(&io->dy, l->out, &dy));
  if (io->dx.buf) CLT_TRY(clt__rows(&io->dx, fin, &dx));
  CLT_TRY(clt__io_param(io, 0, &w));
  CLT_TRY(clt__io_grad(io, 0, &dw));
  if (l->bias) CLT_TRY(clt__io_grad(io, 1, &db));
  CLT_TRY(clt_nn_linear_backward(io->ctx, &x, &w, &dy, io->dx.buf ? &dx : NULL, &dw, l->bias ? &db : NULL));
fail:
  return rc;
}

static double linear_flops(const clt_layer_spec *l) {
  const clt_shape *in = &l->in_shape;
  return 2.0 * (double)clt__shape_rows(in) * in->dims[in->ndim - 1] * l->out;
}

static void describe_linear(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "linear %d%s%s", l->out, l->bias ? "" : " no-bias", l->tie >= 0 ? " tied" : "");
}

const clt__layer_kind clt__kind_linear = {.name = "linear",
                                          .alias = "dense",
                                          .parse = linear_parse,
                                          .infer = linear_infer,
                                          .scratch_bytes = linear_scratch,
                                          .forward = linear_forward,
                                          .backward = linear_backward,
                                          .describe = describe_linear,
                                          .flops = linear_flops};

/* ---- layernorm over the last dimension ---- */

static int layernorm_parse(clt__spec_line *lc, clt_layer_spec *l) { return clt__opt_float(lc, "eps", 0, 1, 1, &l->eps); }

static int layernorm_infer(clt__spec_line *lc, clt_layer_spec *l) {
  char s[64];
  const clt_shape *in = &l->in_shape;
  if (in->ndim > 2)
    return clt__line_error(lc, clt__line_col(lc), "layernorm normalises features and needs a flat input or a "
                           "sequence (T, C), not %s", clt__shape_str(in, s, sizeof s));
  int64_t d = in->dims[in->ndim - 1];
  clt__add_param(l, "weight", 1, &d, CLT_PINIT_ONES, 0, 0);
  clt__add_param(l, "bias", 1, &d, CLT_PINIT_ZEROS, 0, 0);
  l->saved_f32 = 2 * clt__shape_rows(in); /* mean, rstd per row */
  return CLT_OK;
}

static int layernorm_stats(const clt__layer_io *io, clt_tensor *mean, clt_tensor *rstd) {
  int rc = CLT_OK;
  int64_t rows = clt__shape_rows(&io->l->in_shape);
  CLT_TRY(clt__io_aux(io, 0, CLT_F32, io->n * rows, mean));
  CLT_TRY(clt__io_aux(io, rows, CLT_F32, io->n * rows, rstd));
fail:
  return rc;
}

static int layernorm_forward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_tensor g, b, mean, rstd;
  CLT_TRY(clt__io_param(io, 0, &g));
  CLT_TRY(clt__io_param(io, 1, &b));
  CLT_TRY(layernorm_stats(io, &mean, &rstd));
  CLT_TRY(clt_nn_layernorm_forward(io->ctx, io->l->eps, &io->x, &g, &b, &io->y, &mean, &rstd));
fail:
  return rc;
}

static int layernorm_backward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_tensor g, dg, db, mean, rstd;
  CLT_TRY(clt__io_param(io, 0, &g));
  CLT_TRY(clt__io_grad(io, 0, &dg));
  CLT_TRY(clt__io_grad(io, 1, &db));
  CLT_TRY(layernorm_stats(io, &mean, &rstd));
  if (!io->dx.buf) return clt__error(CLT_EINTERNAL, "layernorm's backward always gives an input gradient");
  CLT_TRY(clt_nn_layernorm_backward(io->ctx, &io->x, &g, &mean, &rstd, &io->dy, &io->dx, &dg, &db));
fail:
  return rc;
}

const clt__layer_kind clt__kind_layernorm = {.name = "layernorm",
                                             .parse = layernorm_parse,
                                             .infer = layernorm_infer,
                                             .forward = layernorm_forward,
                                             .backward = layernorm_backward};

/* ---- elementwise activations ---- */

static clt_nn_act act_of(const clt_layer_spec *l) {
  if (l->kind == &clt__kind_leakyrelu) return CLT_NN_LEAKY_RELU;
  if (l->kind == &clt__kind_gelu) return CLT_NN_GELU;
  if (l->kind == &clt__kind_tanh) return CLT_NN_TANH;
  if (l->kind == &clt__kind_sigmoid) return CLT_NN_SIGMOID;
  if (l->kind == &clt__kind_silu) return CLT_NN_SILU;
  return CLT_NN_RELU;
}

static int act_forward(const clt__layer_io *io) {
  return clt_nn_act_forward(io->ctx, act_of(io->l), io->l->slope, &io->x, &io->y);
}

static int act_backward(const clt__layer_io *io) {
  return clt_nn_act_backward(io->ctx, act_of(io->l), io->l->slope, &io->x, &io->y, &io->dy, &io->dx);
}

static int leakyrelu_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = clt__opt_positional_float(lc, 0, "the slope", 0, 1, &l->slope);
  if (rc < 0) return rc;
  return rc == 1 ? CLT_OK : clt__opt_float(lc, "slope", 0, 1, 0, &l->slope);
}

static void describe_leakyrelu(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "leakyrelu %g", l->slope);
}

/* Gains of init=auto (PyTorch's calculate_gain): ReLU and GELU sqrt(2) (He
 * et al. 2015), leaky ReLU sqrt(2 / (1 + slope^2)), tanh 5/3; sigmoid 1. */
static double gain_he(const clt_layer_spec *l) { return (void)l, sqrt(2.0); }
static double gain_leakyrelu(const clt_layer_spec *l) { return sqrt(2.0 / (1.0 + (double)l->slope * l->slope)); }
static double gain_tanh(const clt_layer_spec *l) { return (void)l, 5.0 / 3.0; }

#define ACT_KIND(var, nm, al, ...) \
  const clt__layer_kind var = {.name = nm, .alias = al, .flags = CLT_KIND_ACTIVATION, .forward = act_forward, .backward = act_backward, __VA_ARGS__}
ACT_KIND(clt__kind_relu, "relu", NULL, .gain = gain_he);
ACT_KIND(clt__kind_leakyrelu, "leakyrelu", "leaky_relu", .parse = leakyrelu_parse, .describe = describe_leakyrelu,
         .gain = gain_leakyrelu);
ACT_KIND(clt__kind_gelu, "gelu", NULL, .gain = gain_he);
ACT_KIND(clt__kind_tanh, "tanh", NULL, .gain = gain_tanh);
ACT_KIND(clt__kind_sigmoid, "sigmoid", NULL);
ACT_KIND(clt__kind_silu, "silu", "swish"); /* no gain of its own in PyTorch's calculate_gain: 1 */

/* ---- dropout: masks keyed by (seed, step, global index), see nn.h ---- */

static int dropout_parse(clt__spec_line *lc, clt_layer_spec *l) {
  return clt__need_float(lc, 0, "a drop probability", "dropout 0.25", 0, 0.99, 0, &l->p);
}

/* Each dropout layer draws its own mask: the layer index keys the seed;
 * a replica uses the global position of its samples. */
static uint64_t dropout_seed(const clt__layer_io *io) { return io->pass->seed + 0x9e3779b97f4a7c15ull * (uint64_t)io->index; }
static uint64_t dropout_base(const clt__layer_io *io) {
  return (uint64_t)io->pass->global_first * (uint64_t)clt__shape_numel(&io->l->in_shape);
}

static int dropout_forward(const clt__layer_io *io) {
  return clt_nn_dropout_forward(io->ctx, io->l->p, dropout_seed(io), io->pass->step, dropout_base(io), &io->x, &io->y);
}

static int dropout_backward(const clt__layer_io *io) {
  return clt_nn_dropout_backward(io->ctx, io->l->p, dropout_seed(io), io->pass->step, dropout_base(io), &io->dy,
                                 &io->dx);
}

static void describe_dropout(const clt_layer_spec *l, char *buf, size_t len) { snprintf(buf, len, "dropout %g", l->p); }

const clt__layer_kind clt__kind_dropout = {.name = "dropout",
                                           .flags = CLT_KIND_TRAIN_ONLY | CLT_KIND_KEEPS_GAIN,
                                           .parse = dropout_parse,
                                           .forward = dropout_forward,
                                           .backward = dropout_backward,
                                           .describe = describe_dropout};

/* ---- flatten: a view, no kernel ---- */

static int flatten_infer(clt__spec_line *lc, clt_layer_spec *l) {
  (void)lc;
  l->out_shape.ndim = 1;
  l->out_shape.dims[0] = (int)clt__shape_numel(&l->in_shape); /* the parser bounds every shape by INT_MAX values */
  return CLT_OK;
}

const clt__layer_kind clt__kind_flatten = {
    .name = "flatten", .flags = CLT_KIND_VIEW | CLT_KIND_KEEPS_GAIN, .infer = flatten_infer};

/* ---- residual: y = x + the output of layer l->skip ---- */

static int residual_forward(const clt__layer_io *io) { return clt_nn_residual_forward(io->ctx, &io->x, &io->skip, &io->y); }

/* The main branch's gradient is dy itself (no backward call: dx is dy's
 * storage); the skip branch's is kept in its slot until the backward
 * reaches the layer it came from, where the replica adds it. */
static int residual_backward(const clt__layer_io *io) { return clt__copy(io->ctx, &io->dy, &io->skip); }

const clt__layer_kind clt__kind_residual = {
    .name = "residual", .flags = CLT_KIND_PASS_GRAD, .parse = clt__residual_parse, .forward = residual_forward, .backward = residual_backward};
