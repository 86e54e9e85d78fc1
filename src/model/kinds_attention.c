/*
 * kinds_attention.c: the attention layer kind, causal self-attention over
 * (T, C) sequences in two forms of one computation:
 *
 *   attention heads=H [bias=...]          GPT-2's: multi-head, the fused
 *       qkv.weight (3C, C) and proj.weight (C, C), biases on both by default;
 *   attention heads=H kv_heads=K [rope_theta=... [rope_scaling=llama3 ...]]
 *       Llama's: K key and value heads shared by H / K query heads each,
 *       the four projections of transformers' LlamaAttention as tensors of
 *       their own, q_proj.weight (H D, C), k_proj.weight and v_proj.weight
 *       (K D, C), o_proj.weight (C, H D), D = C / H.
 *
 * bias= is all (true), none (false), qkv (q, k and v only: Qwen2's) or out.
 * Either way the q, k and v weights are one block of the parameter arena
 * (the layer's tensors are laid out in order, the three weights first, then
 * their biases), so the projection is one GEMM into the fused qkv (n, T,
 * (H + 2K) D); with rope_theta= the query and key heads of it are rotated
 * in place (model/rope.c, src/nn/rope.c), so what the backward keeps is
 * the rotated qkv; then the fused attention kernels (no T x T scratch) and
 * the output projection. Kept for the backward: qkv and the heads' output
 * (T (H + 2K) D + T C values a sample), each row's log-sum-exp (H T) and
 * the rotary frequencies (D / 2 floats, uploaded from the spec with every
 * forward, so a pipeline's or an evaluation's sets have their own).
 */
#include "model/layer.h"
#include "model/rope.h"
#include "nn/nn.h"

#include <stdio.h>
#include <string.h>

static int need_sequence(clt__spec_line *lc, const clt_layer_spec *l) {
  char s[64];
  if (l->in_shape.ndim == 2) return CLT_OK;
  return clt__line_error(lc, clt__line_col(lc), "%s needs a sequence (T, C) but the previous layer gives %s",
                         lc->tok[0].text, clt__shape_str(&l->in_shape, s, sizeof s));
}

/* bias=: a boolean (true: all, false: none) or which projections have one. */
static int parse_bias(clt__spec_line *lc, clt_layer_spec *l) {
  static const struct { const char *word; int flags; } words[] = {
      {"all", CLT_BIAS_ALL}, {"true", CLT_BIAS_ALL}, {"yes", CLT_BIAS_ALL}, {"1", CLT_BIAS_ALL},
      {"none", 0},           {"false", 0},           {"no", 0},           {"0", 0},
      {"qkv", CLT_BIAS_QKV}, {"out", CLT_BIAS_OUT}};
  const char *w = NULL;
  int col = 0, rc = clt__opt_word(lc, "bias", &w, &col);
  if (rc < 0 || !w) return rc;
  for (size_t i = 0; i < sizeof words / sizeof *words; i++)
    if (strcmp(w, words[i].word) == 0) {
      l->bias = words[i].flags;
      return CLT_OK;
    }
  return clt__line_error(lc, col, "attention's bias= is all, none, qkv (on the q, k and v projections only) or out "
                         "(on the output projection only), not '%s'", w);
}

static int attention_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  l->init = CLT_INIT_NORMAL;
  l->bias = CLT_BIAS_ALL;
  CLT_TRY(clt__opt_int(lc, "heads", 1, 4096, &l->heads));
  if (!l->heads) return clt__line_error(lc, clt__line_col(lc), "attention needs the number of heads (attention heads=12)");
  CLT_TRY(clt__opt_int(lc, "kv_heads", 1, 4096, &l->kv_heads));
  clt__flag(lc, "causal"); /* the only kind there is; written for the reader */
  CLT_TRY(parse_bias(lc, l));
  CLT_TRY(clt__rope_parse(lc, &l->rope));
  CLT_TRY(clt__opt_init(lc, l));
fail:
  return rc;
}

/* Heads of keys and values: kv_heads=, else as many as queries. */
static int64_t kv_of(const clt_layer_spec *l) { return l->kv_heads ? l->kv_heads : l->heads; }
/* The fused qkv's width, (H + 2K) D. */
static int64_t qkv_width(const clt_layer_spec *l) {
  int64_t C = l->in_shape.dims[1];
  return C + 2 * C / l->heads * kv_of(l);
}

static int attention_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = need_sequence(lc, l);
  if (rc < 0) return rc;
  int64_t T = l->in_shape.dims[0], C = l->in_shape.dims[1], H = l->heads, K = kv_of(l);
  if (C % H)
    return clt__line_error(lc, clt__line_col(lc), "attention heads=%d do not divide the width %lld", l->heads,
                           (long long)C);
  if (H % K)
    return clt__line_error(lc, clt__line_col(lc), "attention kv_heads=%d must divide heads=%d (each key and value "
                           "head serves heads / kv_heads query heads)", l->kv_heads, l->heads);
  int64_t D = C / H, W = qkv_width(l);
  CLT_TRY(clt__rope_infer(lc, &l->rope, D));
  clt_param_init init;
  double scale;
  int qb = (l->bias & CLT_BIAS_QKV) != 0, ob = (l->bias & CLT_BIAS_OUT) != 0;
  if (!l->kv_heads) { /* GPT-2's fused tensors */
    clt__weight_init(l, C, 3 * C, &init, &scale);
    clt__add_param(l, "qkv.weight", 2, (int64_t[]){3 * C, C}, init, scale, 1);
    if (qb) clt__add_param(l, "qkv.bias", 1, (int64_t[]){3 * C}, CLT_PINIT_ZEROS, 0, 0);
    clt__weight_init(l, C, C, &init, &scale);
    clt__add_param(l, "proj.weight", 2, (int64_t[]){C, C}, init, scale, 1);
    if (ob) clt__add_param(l, "proj.bias", 1, (int64_t[]){C}, CLT_PINIT_ZEROS, 0, 0);
  } else { /* Llama's q_proj, k_proj, v_proj, o_proj */
    clt__weight_init(l, C, C, &init, &scale);
    clt__add_param(l, "q_proj.weight", 2, (int64_t[]){C, C}, init, scale, 1);
    clt__weight_init(l, C, K * D, &init, &scale);
    clt__add_param(l, "k_proj.weight", 2, (int64_t[]){K * D, C}, init, scale, 1);
    clt__add_param(l, "v_proj.weight", 2, (int64_t[]){K * D, C}, init, scale, 1);
    if (qb) {
      clt__add_param(l, "q_proj.bias", 1, (int64_t[]){C}, CLT_PINIT_ZEROS, 0, 0);
      clt__add_param(l, "k_proj.bias", 1, (int64_t[]){K * D}, CLT_PINIT_ZEROS, 0, 0);
      clt__add_param(l, "v_proj.bias", 1, (int64_t[]){K * D}, CLT_PINIT_ZEROS, 0, 0);
    }
    clt__weight_init(l, C, C, &init, &scale);
    clt__add_param(l, "o_proj.weight", 2, (int64_t[]){C, C}, init, scale, 1);
    if (ob) clt__add_param(l, "o_proj.bias", 1, (int64_t[]){C}, CLT_PINIT_ZEROS, 0, 0);
  }
  l->saved_act = T * W + T * C;
  l->saved_f32 = H * T + l->rope.pairs;
  l->grad_scratch = T * W + T * C;
fail:
  return rc;
}

static size_t attention_scratch(const clt_layer_spec *l, int64_t n, clt_dtype dt) {
  int64_t T = l->in_shape.dims[0], C = l->in_shape.dims[1];
  size_t a = clt_nn_linear_scratch_bytes(n * T, C, qkv_width(l), dt);
  size_t b = clt_nn_gqa_scratch_bytes(n, T, C, l->heads, (int)kv_of(l), dt);
  return a > b ? a : b;
}

/* The layer's tensors as the projections see them: the q, k and v weights
 * as one (W, C) matrix and their biases as one (W) vector, the output
 * projection's weight and bias. */
typedef struct attn_params {
  clt_tensor wqkv, bqkv, wout, bout;
  int has_bqkv, has_bout;
} attn_params;

/* Parameters first .. first + count - 1 of the layer (params or grads) as
 * one tensor of the given shape: they lie one after another. */
static int span(const clt__layer_io *io, int grads, int first, int count, int ndim, const int64_t *shape,
                clt_tensor *t) {
  int rc = grads ? clt__io_grad(io, first, t) : clt__io_param(io, first, t);
  if (rc < 0) return rc;
  for (int k = first + 1; k < first + count; k++)
    if (io->l->param[k].offset != io->l->param[k - 1].offset + io->l->param[k - 1].count)
      return clt__error(CLT_EINTERNAL, "attention's %s does not follow %s in the arena", io->l->param[k].name,
                        io->l->param[k - 1].name);
  return clt__reshape(t, ndim, shape, t);
}

static int attention_params(const clt__layer_io *io, int grads, attn_params *p) {
  int rc = CLT_OK, split = io->l->kv_heads != 0, nw = split ? 3 : 1, k = 0;
  int64_t C = io->l->in_shape.dims[1], W = qkv_width(io->l);
  int (*view)(const clt__layer_io *, int, clt_tensor *) = grads ? clt__io_grad : clt__io_param;
  memset(p, 0, sizeof *p);
  p->has_bqkv = (io->l->bias & CLT_BIAS_QKV) != 0, p->has_bout = (io->l->bias & CLT_BIAS_OUT) != 0;
  CLT_TRY(span(io, grads, k, nw, 2, (int64_t[]){W, C}, &p->wqkv));
  k += nw;
  if (p->has_bqkv) {
    CLT_TRY(span(io, grads, k, nw, 1, (int64_t[]){W}, &p->bqkv));
    k += nw;
  }
  CLT_TRY(view(io, k++, &p->wout));
  if (p->has_bout) CLT_TRY(view(io, k, &p->bout));
fail:
  return rc;
}

/* qkv (n, T, W) and att (n, T, C) in the saved region, lse (n, H, T) and
 * the rotary frequencies (D / 2) in the f32 one. */
static int attention_saved(const clt__layer_io *io, clt_tensor *qkv, clt_tensor *att, clt_tensor *lse,
                           clt_tensor *freq) {
  int rc = CLT_OK;
  const clt_layer_spec *l = io->l;
  int64_t T = l->in_shape.dims[0], C = l->in_shape.dims[1], H = l->heads, W = qkv_width(l);
  CLT_TRY(clt__io_saved(io, 0, 2, (int64_t[]){T, W}, qkv));
  CLT_TRY(clt__io_saved(io, T * W, 2, (int64_t[]){T, C}, att));
  CLT_TRY(clt__io_aux(io, 0, CLT_F32, io->n * H * T, lse));
  CLT_TRY(clt__reshape(lse, 3, (int64_t[]){io->n, H, T}, lse));
  if (l->rope.pairs) CLT_TRY(clt__io_aux(io, H * T, CLT_F32, l->rope.pairs, freq));
fail:
  return rc;
}

static int attention_forward(const clt__layer_io *io) {
  int rc = CLT_OK;
  const clt_layer_spec *l = io->l;
  int64_t C = l->in_shape.dims[1], W = qkv_width(l);
  attn_params p;
  clt_tensor qkv, att, lse, freq, x2, qkv2, att2, y2;
  CLT_TRY(attention_params(io, 0, &p));
  CLT_TRY(attention_saved(io, &qkv, &att, &lse, &freq));
  CLT_TRY(clt__rows(&io->x, C, &x2));
  CLT_TRY(clt__rows(&qkv, W, &qkv2));
  CLT_TRY(clt__rows(&att, C, &att2));
  CLT_TRY(clt__rows(&io->y, C, &y2));
  CLT_TRY(clt_nn_linear_forward(io->ctx, &x2, &p.wqkv, p.has_bqkv ? &p.bqkv : NULL, &qkv2));
  if (l->rope.pairs) {
    /* Non-blocking: the spec outlives every run on it. */
    CLT_CL_TRY(clEnqueueWriteBuffer(io->ctx->queue, freq.buf, CL_FALSE, freq.offset, clt_tensor_bytes(&freq),
                                    l->rope.inv_freq, 0, NULL, NULL));
    CLT_TRY(clt_nn_rope_forward(io->ctx, l->heads, (int)kv_of(l), &freq, &qkv));
  }
  CLT_TRY(clt_nn_gqa_forward(io->ctx, l->heads, (int)kv_of(l), &qkv, &att, &lse));
  CLT_TRY(clt_nn_linear_forward(io->ctx, &att2, &p.wout, p.has_bout ? &p.bout : NULL, &y2));
fail:
  return rc;
}

static int attention_backward(const clt__layer_io *io) {
  int rc = CLT_OK;
  const clt_layer_spec *l = io->l;
  int64_t T = l->in_shape.dims[0], C = l->in_shape.dims[1], W = qkv_width(l);
  attn_params p, g;
  clt_tensor qkv, att, lse, freq, dqkv, datt, x2, dx2, dy2, att2, datt2, dqkv2;
  CLT_TRY(attention_params(io, 0, &p));
  CLT_TRY(attention_params(io, 1, &g));
  CLT_TRY(attention_saved(io, &qkv, &att, &lse, &freq));
  CLT_TRY(clt__io_scratch(io, 0, 2, (int64_t[]){T, W}, &dqkv));
  CLT_TRY(clt__io_scratch(io, T * W, 2, (int64_t[]){T, C}, &datt));
  CLT_TRY(clt__rows(&io->x, C, &x2));
  CLT_TRY(clt__rows(&io->dy, C, &dy2));
  CLT_TRY(clt__rows(&att, C, &att2));
  CLT_TRY(clt__rows(&datt, C, &datt2));
  CLT_TRY(clt__rows(&dqkv, W, &dqkv2));
  if (io->dx.buf) CLT_TRY(clt__rows(&io->dx, C, &dx2));
  CLT_TRY(clt_nn_linear_backward(io->ctx, &att2, &p.wout, &dy2, &datt2, &g.wout, p.has_bout ? &g.bout : NULL));
  CLT_TRY(clt_nn_gqa_backward(io->ctx, l->heads, (int)kv_of(l), &qkv, &att, &lse, &datt, &dqkv));
  if (l->rope.pairs) CLT_TRY(clt_nn_rope_backward(io->ctx, l->heads, (int)kv_of(l), &freq, &dqkv));
  CLT_TRY(clt_nn_linear_backward(io->ctx, &x2, &p.wqkv, &dqkv2, io->dx.buf ? &dx2 : NULL, &g.wqkv,
                                 p.has_bqkv ? &g.bqkv : NULL));
fail:
  return rc;
}

static void describe_attention(const clt_layer_spec *l, char *buf, size_t len) {
  static const char *const biases[] = {" no-bias", " bias=qkv", " bias=out", ""};
  char rope[48], kv[24] = "";
  clt__rope_describe(&l->rope, rope, sizeof rope);
  if (l->kv_heads) snprintf(kv, sizeof kv, " %d kv", l->kv_heads);
  snprintf(buf, len, "attention %d heads%s%s%s", l->heads, kv, rope, biases[l->bias & CLT_BIAS_ALL]);
}

/* The projections in (qkv_width) and out (C) at every position, and the
 * scores Q K^T and their weighted sum of V, T x T x C each, counted whole
 * (the causal mask's half included, as llm.c counts them). */
static double attention_flops(const clt_layer_spec *l) {
  double T = (double)l->in_shape.dims[0], C = (double)l->in_shape.dims[1];
  return 2.0 * T * C * (double)(qkv_width(l) + l->in_shape.dims[1]) + 2.0 * 2.0 * T * T * C;
}

const clt__layer_kind clt__kind_attention = {.name = "attention",
                                             .parse = attention_parse,
                                             .infer = attention_infer,
                                             .scratch_bytes = attention_scratch,
                                             .forward = attention_forward,
                                             .backward = attention_backward,
                                             .describe = describe_attention,
                                             .flops = attention_flops};
