/*
 * kinds_seq.c: the layer kinds of transformers, over (T, C) sequences:
 * the token embedding (token ids in, (T, C) out) and the learned position
 * embedding (attention is kinds_attention.c's). Entries of the layer table
 * (model/layer.h) over the kernels of src/nn.
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
