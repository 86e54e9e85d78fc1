/*
 * kinds_llama.c: the layer kinds Llama-family transformers add to GPT's,
 * entries of the layer table (model/layer.h) over the kernels of src/nn:
 *
 *   rmsnorm [eps=E]        transformers' LlamaRMSNorm over the last
 *       dimension: y = x / sqrt(mean(x^2) + eps) * weight (no mean, no
 *       bias), eps 1e-5 by default; kept for the backward: 1 / rms a row;
 *   swiglu I [bias=false]  LlamaMLP: down_proj(silu(gate_proj(x)) *
 *       up_proj(x)) with gate_proj.weight, up_proj.weight (I, C) and
 *       down_proj.weight (C, I) as tensors of their own (and biases with
 *       bias=true). Gate and up lie one after the other in the parameter
 *       arena, so they are one GEMM into the fused (n, T, 2I) [g | u]; the
 *       gate is one fused elementwise kernel (h = silu(g) u), then the down
 *       projection. Kept for the backward: gu and h (3I values a row);
 *       backward scratch dh and dgu (3I a row). One layer rather than two
 *       linears and a multiply: the spec reads as the model does, its
 *       tensors are transformers' by name, and the two products of x are
 *       one GEMM with twice the columns (faster on every device than two).
 *
 * Both work on a flat input or on each position of a sequence (T, C).
 */
#include "model/layer.h"
#include "nn/nn.h"

#include <stdio.h>

#define MAX_DIM 1000000

static int need_features(clt__spec_line *lc, const clt_layer_spec *l) {
  char s[64];
  if (l->in_shape.ndim <= 2) return CLT_OK;
  return clt__line_error(lc, clt__line_col(lc), "%s works on features and needs a flat input or a sequence (T, C), "
                         "not %s", lc->tok[0].text, clt__shape_str(&l->in_shape, s, sizeof s));
}

static int64_t features(const clt_layer_spec *l) { return l->in_shape.dims[l->in_shape.ndim - 1]; }

/* ---- rmsnorm ---- */

static int rmsnorm_parse(clt__spec_line *lc, clt_layer_spec *l) { return clt__opt_float(lc, "eps", 0, 1, 1, &l->eps); }

static int rmsnorm_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = need_features(lc, l);
  if (rc < 0) return rc;
  int64_t d = features(l);
  clt__add_param(l, "weight", 1, &d, CLT_PINIT_ONES, 0, 0);
  l->saved_f32 = clt__shape_rows(&l->in_shape); /* rstd per row */
  return CLT_OK;
}

static int rmsnorm_rstd(const clt__layer_io *io, clt_tensor *rstd) {
  return clt__io_aux(io, 0, CLT_F32, io->n * clt__shape_rows(&io->l->in_shape), rstd);
}

static int rmsnorm_forward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_tensor w, rstd, x, y;
  int64_t d = features(io->l);
  CLT_TRY(clt__io_param(io, 0, &w));
  CLT_TRY(rmsnorm_rstd(io, &rstd));
  CLT_TRY(clt__rows(&io->x, d, &x));
  CLT_TRY(clt__rows(&io->y, d, &y));
  CLT_TRY(clt_nn_rmsnorm_forward(io->ctx, io->l->eps, &x, &w, &y, &rstd));
fail:
  return rc;
}

static int rmsnorm_backward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_tensor w, dw, rstd, x, dy, dx;
  int64_t d = features(io->l);
  if (!io->dx.buf) return clt__error(CLT_EINTERNAL, "rmsnorm's backward always gives an input gradient");
  CLT_TRY(clt__io_param(io, 0, &w));
  CLT_TRY(clt__io_grad(io, 0, &dw));
  CLT_TRY(rmsnorm_rstd(io, &rstd));
  CLT_TRY(clt__rows(&io->x, d, &x));
  CLT_TRY(clt__rows(&io->dy, d, &dy));
  CLT_TRY(clt__rows(&io->dx, d, &dx));
  CLT_TRY(clt_nn_rmsnorm_backward(io->ctx, &x, &w, &rstd, &dy, &dx, &dw));
fail:
  return rc;
}

static void describe_rmsnorm(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "rmsnorm eps=%g", (double)l->eps);
}

const clt__layer_kind clt__kind_rmsnorm = {.name = "rmsnorm",
                                           .parse = rmsnorm_parse,
                                           .infer = rmsnorm_infer,
                                           .forward = rmsnorm_forward,
                                           .backward = rmsnorm_backward,
                                           .describe = describe_rmsnorm};

/* ---- swiglu ---- */

static int swiglu_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  l->init = CLT_INIT_NORMAL;
  l->bias = 0;
  CLT_TRY(clt__need_int(lc, 0, "the hidden width (intermediate_size)", "swiglu 1536", 1, MAX_DIM, &l->out));
  CLT_TRY(clt__opt_bool(lc, "bias", &l->bias));
  CLT_TRY(clt__opt_init(lc, l));
fail:
  return rc;
}

static int swiglu_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = need_features(lc, l);
  if (rc < 0) return rc;
  int64_t C = features(l), I = l->out, rows = clt__shape_rows(&l->in_shape);
  clt_param_init init;
  double scale;
  clt__weight_init(l, C, I, &init, &scale);
  clt__add_param(l, "gate_proj.weight", 2, (int64_t[]){I, C}, init, scale, 1);
  clt__add_param(l, "up_proj.weight", 2, (int64_t[]){I, C}, init, scale, 1);
  if (l->bias) {
    clt__add_param(l, "gate_proj.bias", 1, &I, CLT_PINIT_ZEROS, 0, 0);
    clt__add_param(l, "up_proj.bias", 1, &I, CLT_PINIT_ZEROS, 0, 0);
  }
  clt__weight_init(l, I, C, &init, &scale);
  clt__add_param(l, "down_proj.weight", 2, (int64_t[]){C, I}, init, scale, 1);
  if (l->bias) clt__add_param(l, "down_proj.bias", 1, &C, CLT_PINIT_ZEROS, 0, 0);
  l->saved_act = rows * 3 * I;
  l->grad_scratch = rows * 3 * I;
  return CLT_OK;
}

/* gate, up (C to I) and down (I to C) at every position. */
static double swiglu_flops(const clt_layer_spec *l) {
  return 2.0 * (double)clt__shape_rows(&l->in_shape) * (double)features(l) * 3.0 * l->out;
}

static size_t swiglu_scratch(const clt_layer_spec *l, int64_t n, clt_dtype dt) {
  int64_t rows = n * clt__shape_rows(&l->in_shape), C = features(l);
  size_t a = clt_nn_linear_scratch_bytes(rows, C, 2 * (int64_t)l->out, dt);
  size_t b = clt_nn_linear_scratch_bytes(rows, l->out, C, dt);
  return a > b ? a : b;
}

typedef struct glu_params {
  clt_tensor wgu, bgu, wdown, bdown;
} glu_params;

/* gate and up as one (2I, C) matrix (and their biases as one (2I) vector):
 * consecutive in the arena, or in a gradient bucket's slot. */
static int glu_params_of(const clt__layer_io *io, int grads, glu_params *p) {
  int rc = CLT_OK, b = io->l->bias;
  int64_t C = features(io->l), I = io->l->out;
  int (*view)(const clt__layer_io *, int, clt_tensor *) = grads ? clt__io_grad : clt__io_param;
  const clt_param_spec *ps = io->l->param;
  if (ps[1].offset != ps[0].offset + ps[0].count || (b && ps[3].offset != ps[2].offset + ps[2].count))
    return clt__error(CLT_EINTERNAL, "swiglu's up_proj does not follow its gate_proj in the arena");
  CLT_TRY(view(io, 0, &p->wgu));
  CLT_TRY(clt__reshape(&p->wgu, 2, (int64_t[]){2 * I, C}, &p->wgu));
  if (b) {
    CLT_TRY(view(io, 2, &p->bgu));
    CLT_TRY(clt__reshape(&p->bgu, 1, (int64_t[]){2 * I}, &p->bgu));
  }
  CLT_TRY(view(io, 2 + 2 * b, &p->wdown));
  if (b) CLT_TRY(view(io, 5, &p->bdown));
fail:
  return rc;
}

/* Rows of the layer's x and y, and gu (rows, 2I) and h (rows, I) in the
 * saved region. */
static int glu_views(const clt__layer_io *io, clt_tensor *x, clt_tensor *y, clt_tensor *gu, clt_tensor *h) {
  int rc = CLT_OK;
  int64_t C = features(io->l), I = io->l->out, rows = clt__shape_rows(&io->l->in_shape);
  CLT_TRY(clt__rows(&io->x, C, x));
  if (y) CLT_TRY(clt__rows(&io->y, C, y));
  CLT_TRY(clt__io_saved(io, 0, 1, (int64_t[]){rows * 2 * I}, gu));
  CLT_TRY(clt__rows(gu, 2 * I, gu));
  CLT_TRY(clt__io_saved(io, rows * 2 * I, 1, (int64_t[]){rows * I}, h));
  CLT_TRY(clt__rows(h, I, h));
fail:
  return rc;
}

static int swiglu_forward(const clt__layer_io *io) {
  int rc = CLT_OK, b = io->l->bias;
  glu_params p;
  clt_tensor x, y, gu, h;
  CLT_TRY(glu_params_of(io, 0, &p));
  CLT_TRY(glu_views(io, &x, &y, &gu, &h));
  CLT_TRY(clt_nn_linear_forward(io->ctx, &x, &p.wgu, b ? &p.bgu : NULL, &gu));
  CLT_TRY(clt_nn_swiglu_forward(io->ctx, &gu, &h));
  CLT_TRY(clt_nn_linear_forward(io->ctx, &h, &p.wdown, b ? &p.bdown : NULL, &y));
fail:
  return rc;
}

static int swiglu_backward(const clt__layer_io *io) {
  int rc = CLT_OK, b = io->l->bias;
  int64_t C = features(io->l), I = io->l->out, rows = clt__shape_rows(&io->l->in_shape);
  glu_params p, g;
  clt_tensor x, gu, h, dy, dx, dh, dgu;
  CLT_TRY(glu_params_of(io, 0, &p));
  CLT_TRY(glu_params_of(io, 1, &g));
  CLT_TRY(glu_views(io, &x, NULL, &gu, &h));
  CLT_TRY(clt__rows(&io->dy, C, &dy));
  if (io->dx.buf) CLT_TRY(clt__rows(&io->dx, C, &dx));
  CLT_TRY(clt__io_scratch(io, 0, 1, (int64_t[]){rows * I}, &dh));
  CLT_TRY(clt__rows(&dh, I, &dh));
  CLT_TRY(clt__io_scratch(io, rows * I, 1, (int64_t[]){rows * 2 * I}, &dgu));
  CLT_TRY(clt__rows(&dgu, 2 * I, &dgu));
  CLT_TRY(clt_nn_linear_backward(io->ctx, &h, &p.wdown, &dy, &dh, &g.wdown, b ? &g.bdown : NULL));
  CLT_TRY(clt_nn_swiglu_backward(io->ctx, &gu, &dh, &dgu));
  CLT_TRY(clt_nn_linear_backward(io->ctx, &x, &p.wgu, &dgu, io->dx.buf ? &dx : NULL, &g.wgu, b ? &g.bgu : NULL));
fail:
  return rc;
}

static void describe_swiglu(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "swiglu %d%s", l->out, l->bias ? " bias" : "");
}

const clt__layer_kind clt__kind_swiglu = {.name = "swiglu",
                                          .parse = swiglu_parse,
                                          .infer = swiglu_infer,
                                          .scratch_bytes = swiglu_scratch,
                                          .forward = swiglu_forward,
                                          .backward = swiglu_backward,
                                          .describe = describe_swiglu,
                                          .flops = swiglu_flops};
