/*
 * kinds_seq.c: the layer kinds of transformers, over (T, C) sequences:
 * the token embedding (token ids in, (T, C) out), the learned position
 * embedding, and causal multi-head self-attention with its fused QKV and
 * output projections. Entries of the layer table (model/layer.h) over the
 * kernels of src/nn.
 */
#include "model/layer.h"
#include "nn/nn.h"

#include <stdio.h>

#define MAX_DIM 1000000

static int need_sequence(clt__spec_line *lc, const clt_layer_spec *l) {
  char s[64];
  if (l->in_shape.ndim == 2) return CLT_OK;
  return clt__line_error(lc, clt__line_col(lc), "%s needs a sequence (T, C) but the previous layer gives %s",
                         lc->tok[0].text, clt__shape_str(&l->in_shape, s, sizeof s));
}

/* ---- token embedding: (T) token ids -> (T, C) ---- */

static int embedding_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  l->init = CLT_INIT_NORMAL;
  CLT_TRY(clt__need_int(lc, 0, "the embedding width", "embedding 768", 1, MAX_DIM, &l->out));
  CLT_TRY(clt__opt_init(lc, l));
fail:
  return rc;
}

static int embedding_infer(clt__spec_line *lc, clt_layer_spec *l) {
  char s[64];
  if (!l->in_shape.vocab)
    return clt__line_error(lc, clt__line_col(lc), "embedding takes token ids (input tokens T vocab=V), not %s",
                           clt__shape_str(&l->in_shape, s, sizeof s));
  l->out_shape.ndim = 2;
  l->out_shape.vocab = 0;
  l->out_shape.dims[1] = l->out;
  clt_param_init init;
  double scale;
  clt__weight_init(l, l->out, l->in_shape.vocab, &init, &scale);
  clt__add_param(l, "weight", 2, (int64_t[]){l->in_shape.vocab, l->out}, init, scale, 0);
  return CLT_OK;
}

static size_t embedding_scratch(const clt_layer_spec *l, int64_t n, clt_dtype dt) {
  (void)dt;
  return clt_nn_embedding_scratch_bytes(n * l->in_shape.dims[0]);
}

static int tokens_view(const clt__layer_io *io, clt_tensor *t) {
  int64_t n = clt_tensor_numel(&io->x);
  return clt__reshape(&io->x, 1, &n, t);
}

static int embedding_forward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_tensor tok, w, y;
  CLT_TRY(tokens_view(io, &tok));
  CLT_TRY(clt__io_param(io, 0, &w));
  CLT_TRY(clt__rows(&io->y, io->l->out, &y));
  CLT_TRY(clt_nn_embedding_forward(io->ctx, &tok, &w, &y));
fail:
  return rc;
}

static int embedding_backward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_tensor tok, dw, dy;
  CLT_TRY(tokens_view(io, &tok));
  CLT_TRY(clt__io_grad(io, 0, &dw));
  CLT_TRY(clt__rows(&io->dy, io->l->out, &dy));
  CLT_TRY(clt_nn_embedding_backward(io->ctx, &tok, &dy, &dw));
fail:
  return rc;
}

static void describe_embedding(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "embedding %d%s%s", l->out, l->name[0] ? " " : "", l->name);
}

const clt__layer_kind clt__kind_embedding = {.name = "embedding",
                                             .parse = embedding_parse,
                                             .infer = embedding_infer,
                                             .scratch_bytes = embedding_scratch,
                                             .forward = embedding_forward,
                                             .backward = embedding_backward,
                                             .describe = describe_embedding};

/* ---- learned position embedding: y[b, t] = x[b, t] + wpe[t] ---- */

static int posembedding_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  l->init = CLT_INIT_NORMAL;
  CLT_TRY(clt__opt_int(lc, "positions", 1, MAX_DIM, &l->positions));
  CLT_TRY(clt__opt_init(lc, l));
fail:
  return rc;
}

static int posembedding_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = need_sequence(lc, l);
  if (rc < 0) return rc;
  int T = l->in_shape.dims[0], C = l->in_shape.dims[1];
  if (!l->positions) l->positions = T;
  if (T > l->positions)
    return clt__line_error(lc, clt__line_col(lc), "the context of %d positions is longer than the position table "
                           "of %d (positions=%d)", T, l->positions, l->positions);
  clt_param_init init;
  double scale;
  clt__weight_init(l, C, l->positions, &init, &scale);
  clt__add_param(l, "weight", 2, (int64_t[]){l->positions, C}, init, scale, 0);
  return CLT_OK;
}

static int posembedding_forward(const clt__layer_io *io) {
  clt_tensor w;
  int rc = clt__io_param(io, 0, &w);
  return rc < 0 ? rc : clt_nn_posembed_forward(io->ctx, &io->x, &w, &io->y);
}

static int posembedding_backward(const clt__layer_io *io) {
  clt_tensor dw;
  int rc = clt__io_grad(io, 0, &dw);
  return rc < 0 ? rc : clt_nn_posembed_backward(io->ctx, &io->dy, &dw);
}

const clt__layer_kind clt__kind_posembedding = {.name = "posembedding",
                                                .flags = CLT_KIND_PASS_GRAD,
                                                .parse = posembedding_parse,
                                                .infer = posembedding_infer,
                                                .forward = posembedding_forward,
                                                .backward = posembedding_backward};

/* ---- causal self-attention: qkv = x Wqkv + b; per head softmax(q k^T /
 * sqrt(D), causal) v; y = att Wproj + b. Kept for the backward: qkv and
 * att (T*3C + T*C values a sample) and each row's log-sum-exp (H*T); the
 * T x T scores are recomputed, never stored. ---- */

static int attention_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  l->init = CLT_INIT_NORMAL;
  CLT_TRY(clt__opt_int(lc, "heads", 1, 4096, &l->heads));
  if (!l->heads) return clt__line_error(lc, clt__line_col(lc), "attention needs the number of heads (attention heads=12)");
  clt__flag(lc, "causal"); /* the only kind there is; written for the reader */
  CLT_TRY(clt__opt_bool(lc, "bias", &l->bias));
  CLT_TRY(clt__opt_init(lc, l));
fail:
  return rc;
}

static int attention_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = need_sequence(lc, l);
  if (rc < 0) return rc;
  int64_t T = l->in_shape.dims[0], C = l->in_shape.dims[1], H = l->heads;
  if (C % H)
    return clt__line_error(lc, clt__line_col(lc), "attention heads=%d do not divide the width %lld", l->heads,
                           (long long)C);
  clt_param_init init;
  double scale;
  clt__weight_init(l, C, 3 * C, &init, &scale);
  clt__add_param(l, "qkv.weight", 2, (int64_t[]){3 * C, C}, init, scale, 1);
  if (l->bias) clt__add_param(l, "qkv.bias", 1, (int64_t[]){3 * C}, CLT_PINIT_ZEROS, 0, 0);
  clt__weight_init(l, C, C, &init, &scale);
  clt__add_param(l, "proj.weight", 2, (int64_t[]){C, C}, init, scale, 1);
  if (l->bias) clt__add_param(l, "proj.bias", 1, (int64_t[]){C}, CLT_PINIT_ZEROS, 0, 0);
  l->saved_act = T * 3 * C + T * C;
  l->saved_f32 = H * T;
  l->grad_scratch = T * 3 * C + T * C;
  return CLT_OK;
}

static size_t attention_scratch(const clt_layer_spec *l, int64_t n, clt_dtype dt) {
  int64_t T = l->in_shape.dims[0], C = l->in_shape.dims[1];
  size_t a = clt_nn_linear_scratch_bytes(n * T, C, 3 * C, dt);
  size_t b = clt_nn_attention_scratch_bytes(n, T, C, l->heads, dt);
  return a > b ? a : b;
}

/* The parameter index of each tensor, with or without biases. */
typedef struct attn_params {
  clt_tensor wqkv, bqkv, wproj, bproj;
} attn_params;

static int attention_params(const clt__layer_io *io, int grads, attn_params *p) {
  int rc = CLT_OK, b = io->l->bias;
  int (*view)(const clt__layer_io *, int, clt_tensor *) = grads ? clt__io_grad : clt__io_param;
  CLT_TRY(view(io, 0, &p->wqkv));
  if (b) CLT_TRY(view(io, 1, &p->bqkv));
  CLT_TRY(view(io, 1 + b, &p->wproj));
  if (b) CLT_TRY(view(io, 3, &p->bproj));
fail:
  return rc;
}

/* qkv (n, T, 3C) and att (n, T, C) in the saved region, lse (n, H, T). */
static int attention_saved(const clt__layer_io *io, clt_tensor *qkv, clt_tensor *att, clt_tensor *lse) {
  int rc = CLT_OK;
  int64_t T = io->l->in_shape.dims[0], C = io->l->in_shape.dims[1], H = io->l->heads;
  CLT_TRY(clt__io_saved(io, 0, 2, (int64_t[]){T, 3 * C}, qkv));
  CLT_TRY(clt__io_saved(io, T * 3 * C, 2, (int64_t[]){T, C}, att));
  CLT_TRY(clt__io_aux(io, 0, CLT_F32, io->n * H * T, lse));
  CLT_TRY(clt__reshape(lse, 3, (int64_t[]){io->n, H, T}, lse));
fail:
  return rc;
}

static int attention_forward(const clt__layer_io *io) {
  int rc = CLT_OK;
  int64_t C = io->l->in_shape.dims[1];
  attn_params p;
  clt_tensor qkv, att, lse, x2, qkv2, att2, y2;
  int b = io->l->bias;
  CLT_TRY(attention_params(io, 0, &p));
  CLT_TRY(attention_saved(io, &qkv, &att, &lse));
  CLT_TRY(clt__rows(&io->x, C, &x2));
  CLT_TRY(clt__rows(&qkv, 3 * C, &qkv2));
  CLT_TRY(clt__rows(&att, C, &att2));
  CLT_TRY(clt__rows(&io->y, C, &y2));
  CLT_TRY(clt_nn_linear_forward(io->ctx, &x2, &p.wqkv, b ? &p.bqkv : NULL, &qkv2));
  CLT_TRY(clt_nn_attention_forward(io->ctx, io->l->heads, &qkv, &att, &lse));
  CLT_TRY(clt_nn_linear_forward(io->ctx, &att2, &p.wproj, b ? &p.bproj : NULL, &y2));
fail:
  return rc;
}

static int attention_backward(const clt__layer_io *io) {
  int rc = CLT_OK;
  int64_t T = io->l->in_shape.dims[0], C = io->l->in_shape.dims[1];
  attn_params p, g;
  clt_tensor qkv, att, lse, dqkv, datt, x2, dx2, dy2, att2, datt2, dqkv2;
  int b = io->l->bias;
  CLT_TRY(attention_params(io, 0, &p));
  CLT_TRY(attention_params(io, 1, &g));
  CLT_TRY(attention_saved(io, &qkv, &att, &lse));
  CLT_TRY(clt__io_scratch(io, 0, 2, (int64_t[]){T, 3 * C}, &dqkv));
  CLT_TRY(clt__io_scratch(io, T * 3 * C, 2, (int64_t[]){T, C}, &datt));
  CLT_TRY(clt__rows(&io->x, C, &x2));
  CLT_TRY(clt__rows(&io->dy, C, &dy2));
  CLT_TRY(clt__rows(&att, C, &att2));
  CLT_TRY(clt__rows(&datt, C, &datt2));
  CLT_TRY(clt__rows(&dqkv, 3 * C, &dqkv2));
  if (io->dx.buf) CLT_TRY(clt__rows(&io->dx, C, &dx2));
  CLT_TRY(clt_nn_linear_backward(io->ctx, &att2, &p.wproj, &dy2, &datt2, &g.wproj, b ? &g.bproj : NULL));
  CLT_TRY(clt_nn_attention_backward(io->ctx, io->l->heads, &qkv, &att, &lse, &datt, &dqkv));
  CLT_TRY(clt_nn_linear_backward(io->ctx, &x2, &p.wqkv, &dqkv2, io->dx.buf ? &dx2 : NULL, &g.wqkv,
                                 b ? &g.bqkv : NULL));
fail:
  return rc;
}

static void describe_attention(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "attention %d heads causal", l->heads);
}

const clt__layer_kind clt__kind_attention = {.name = "attention",
                                             .parse = attention_parse,
                                             .infer = attention_infer,
                                             .scratch_bytes = attention_scratch,
                                             .forward = attention_forward,
                                             .backward = attention_backward,
                                             .describe = describe_attention};
