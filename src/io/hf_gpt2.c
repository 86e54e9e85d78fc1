/*
 * hf_gpt2.c: the GPT2LMHeadModel row of the Hugging Face table (hf_arch.h):
 * how a cltrain GPT corresponds to transformers' GPT-2 (config.json and
 * model.safetensors as save_pretrained writes them).
 *
 *   cltrain layer (spec line)      its tensor     HF tensor ("transformer." + ...)
 *   embedding C name=wte           weight (V, C)  wte.weight (V, C)
 *   posembedding positions=P       weight (P, C)  wpe.weight (P, C)
 *   block K: layernorm             weight, bias   h.K.ln_1.weight, .bias
 *            attention heads=H     qkv.weight     h.K.attn.c_attn.weight (C, 3C)  transposed
 *                                  qkv.bias       h.K.attn.c_attn.bias
 *                                  proj.weight    h.K.attn.c_proj.weight (C, C)   transposed
 *                                  proj.bias      h.K.attn.c_proj.bias
 *            residual
 *            layernorm             weight, bias   h.K.ln_2.weight, .bias
 *            linear 4C             weight, bias   h.K.mlp.c_fc.weight (C, 4C)     transposed
 *            gelu
 *            linear C              weight, bias   h.K.mlp.c_proj.weight (4C, C)   transposed
 *            residual
 *   layernorm                      weight, bias   ln_f.weight, .bias
 *   linear V tie=wte bias=false    (wte's)        none: lm_head.weight is tied to wte
 *   linear V bias=false (untied)   weight (V, C)  lm_head.weight (V, C), no prefix
 *
 * GPT-2's Conv1D keeps its weight as (in, out); cltrain's linear and
 * attention projections as (out, in), like nn.Linear: those are transposed.
 * c_attn's output columns are q | k | v, head h at [h*D, (h+1)*D) of each,
 * which is the layout of cltrain's fused QKV (nn.h), so nothing else moves.
 * Dropout layers may stand anywhere in the spec: they are the identity in
 * evaluation, and the exported config has every dropout at 0.
 */
#include "io/hf_arch.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layer.h"

#define PREFIX "transformer."

/* ---- config.json ---- */

static const char NEEDS[] = "a GPT-2 config needs (n_embd, n_head, n_layer, n_positions and vocab_size)";

int clt__hf_gpt2_read_config(const clt__hf_arch *a, const char *path, json_t *cfg, clt__hf_config *c) {
  int rc = CLT_OK;
  (void)a;
  CLT_TRY(clt__hf_int_key(path, cfg, "n_embd", -1, NEEDS, &c->hidden));
  CLT_TRY(clt__hf_int_key(path, cfg, "n_head", -1, NEEDS, &c->heads));
  CLT_TRY(clt__hf_int_key(path, cfg, "n_layer", -1, NEEDS, &c->layers));
  /* n_ctx is the old name of n_positions */
  int n_ctx;
  CLT_TRY(clt__hf_int_key(path, cfg, "n_ctx", 0, NEEDS, &n_ctx));
  CLT_TRY(clt__hf_int_key(path, cfg, "n_positions", n_ctx ? n_ctx : -1, NEEDS, &c->positions));
  CLT_TRY(clt__hf_int_key(path, cfg, "vocab_size", -1, NEEDS, &c->vocab));
  if (c->hidden % c->heads)
    return clt__error(CLT_EFORMAT, "%s: \"n_head\": %d does not divide \"n_embd\": %d", path, c->heads, c->hidden);
  CLT_TRY(clt__hf_int_key(path, cfg, "n_inner", 4 * c->hidden, NEEDS, &c->inner));
  double e;
  json_t *eps = json_object_get(cfg, "layer_norm_epsilon");
  if (eps && !json_is_null(eps) && !(json_is_number(eps) && json_number_value(eps) > 0 && json_number_value(eps) < 1))
    return clt__error(CLT_EFORMAT, "%s: \"layer_norm_epsilon\" is not a number between 0 and 1", path);
  CLT_TRY(clt__hf_float_key(path, cfg, "layer_norm_epsilon", 1e-5, 0, 1, &e));
  c->eps = (float)e;
  json_t *act = json_object_get(cfg, "activation_function");
  const char *f = act ? json_string_value(act) : "gelu_new";
  if (!f || (strcmp(f, "gelu_new") != 0 && strcmp(f, "gelu_pytorch_tanh") != 0)) {
    char *text = clt__hf_json_text(act);
    rc = clt__error(CLT_EFORMAT, "%s: \"activation_function\": %s is not supported: cltrain's GPT uses GPT-2's tanh "
                    "GELU (\"gelu_new\" or \"gelu_pytorch_tanh\")", path, text ? text : "?");
    free(text);
    return rc;
  }
  /* What the attention computes. reorder_and_upcast_attn only changes how
   * fp16 models round (the scores are computed in f32 either way here), so
   * it is accepted. */
  CLT_TRY(clt__hf_bool_must(path, cfg, "scale_attn_weights", 1,
                            "cltrain's attention always scales the scores by 1/sqrt(head size)"));
  CLT_TRY(clt__hf_bool_must(path, cfg, "scale_attn_by_inverse_layer_idx", 0,
                            "cltrain's attention scales every layer's scores alike"));
  CLT_TRY(clt__hf_bool_must(path, cfg, "add_cross_attention", 0, "cltrain's GPT has self-attention only"));
  CLT_TRY(clt__hf_bool_must(path, cfg, "is_encoder_decoder", 0, "cltrain's GPT is a decoder only"));
  CLT_TRY(clt__hf_bool_key(path, cfg, "tie_word_embeddings", 1, &c->tied));
fail:
  return rc;
}

/* What GPT2Config needs, and what cltrain computes in the keys that could
 * say otherwise; dropout is 0 everywhere (cltrain's dropout layers, if the
 * spec has any, do not correspond to GPT-2's). */
json_t *clt__hf_gpt2_config_json(const clt__hf_arch *a, const clt__hf_config *c, int positions) {
  (void)positions; /* the position table's rows are the spec's */
  json_t *j = json_pack("{s:s, s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:f, s:f, s:f, s:f, s:f, s:b, s:b, "
                        "s:b, s:b, s:b}",
                        "model_type", a->model_type, "architectures", a->hf_class, "n_embd", c->hidden, "n_head",
                        c->heads, "n_layer", c->layers, "n_positions", c->positions, "n_ctx", c->positions,
                        "vocab_size", c->vocab, "layer_norm_epsilon", clt__hf_short_decimal(c->eps),
                        "activation_function", "gelu_new", "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0,
                        "summary_first_dropout", 0.0, "initializer_range", 0.02, "tie_word_embeddings", c->tied,
                        "scale_attn_weights", 1, "scale_attn_by_inverse_layer_idx", 0, "reorder_and_upcast_attn", 0,
                        "use_cache", 1);
  if (j) json_object_set_new(j, "n_inner", c->inner == 4 * c->hidden ? json_null() : json_integer(c->inner));
  return j;
}

/* The attention masks of older files are buffers, not weights. */
int clt__hf_gpt2_is_buffer(const char *name) {
  size_t len = strlen(name);
  return (len >= 10 && strcmp(name + len - 10, ".attn.bias") == 0) ||
         (len >= 17 && strcmp(name + len - 17, ".attn.masked_bias") == 0);
}

/* ---- the spec ---- */

/* The walk over the spec's layers; dropout layers are passed over. */
typedef struct walk {
  const clt_model_spec *s;
  int i;                /* the next layer to look at */
  clt__hf_tensor *t;
  int n;
  int eps_line;         /* the first layernorm's line, 0 before it */
} walk;

static int skip_dropout(walk *w) {
  while (w->i < w->s->nlayers && w->s->layers[w->i].kind == &clt__kind_dropout) w->i++;
  return w->i;
}

/* The first layer that does not fit: where, what it is and what GPT-2 has there. */
static int misfit(const walk *w, int i, const char *fmt, ...) CLT__PRINTF(3, 4);
static int misfit(const walk *w, int i, const char *fmt, ...) {
  char want[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(want, sizeof want, fmt, ap);
  va_end(ap);
  const char *tail = "; GPT2LMHeadModel is a GPT of examples/gpt2_124m.model's structure";
  if (i >= w->s->nlayers)
    return clt__error(CLT_EFORMAT, "%s: the model ends where GPT-2 has %s%s", w->s->name, want, tail);
  const clt_layer_spec *l = &w->s->layers[i];
  return clt__error(CLT_EFORMAT, "%s:%d: layer %d (%s) does not fit GPT-2, which has %s here%s", w->s->name,
                    l->line, i, clt__layer_kind_name(l), want, tail);
}

static void add(walk *w, int layer, int param, int transposed, const char *fmt, ...) CLT__PRINTF(5, 6);
static void add(walk *w, int layer, int param, int transposed, const char *fmt, ...) {
  clt__hf_tensor *t = &w->t[w->n++];
  va_list ap;
  char name[80];
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  snprintf(t->name, sizeof t->name, "%s%s", PREFIX, name);
  t->layer = layer;
  t->param = param;
  t->optional = (int)strlen(PREFIX);
  t->transposed = transposed;
}

/* The next layer, which must be of `kind`; its index, or a misfit. */
static int expect(walk *w, const clt__layer_kind *kind, const char *what) {
  int i = skip_dropout(w);
  if (i >= w->s->nlayers || w->s->layers[i].kind != kind) return misfit(w, i, "%s", what);
  w->i++;
  return i;
}

/* A layernorm: GPT-2 has one layer_norm_epsilon for all of them. */
static int layernorm(walk *w, clt__hf_config *cfg, const char *prefix, const char *what) {
  int i = expect(w, &clt__kind_layernorm, what);
  if (i < 0) return i;
  const clt_layer_spec *l = &w->s->layers[i];
  if (!w->eps_line) {
    cfg->eps = l->eps;
    w->eps_line = l->line;
  } else if (l->eps != cfg->eps) {
    return misfit(w, i, "%s with eps=%g like line %d's (GPT-2 has one layer_norm_epsilon)", what, cfg->eps,
                  w->eps_line);
  }
  add(w, i, 0, 0, "%s.weight", prefix);
  add(w, i, 1, 0, "%s.bias", prefix);
  return i;
}

/* A linear with a bias to `out` features (0: any), GPT-2's Conv1D. */
static int conv1d(walk *w, int out, const char *prefix, const char *what) {
  int i = skip_dropout(w);
  const clt_layer_spec *l = i < w->s->nlayers ? &w->s->layers[i] : NULL;
  if (!l || l->kind != &clt__kind_linear || !l->bias || l->tie >= 0 || (out && l->out != out))
    return out ? misfit(w, i, "%s (linear %d with a bias)", what, out) : misfit(w, i, "%s (linear with a bias)", what);
  w->i++;
  add(w, i, 0, 1, "%s.weight", prefix);
  add(w, i, 1, 0, "%s.bias", prefix);
  return i;
}

/* A residual whose skip branch starts at layer `from` (or at a dropout
 * between it and `before`, the same value in evaluation). */
static int residual(walk *w, int from, int before, const char *what) {
  int i = expect(w, &clt__kind_residual, what);
  if (i < 0) return i;
  int skip = w->s->layers[i].skip;
  if (skip < from || skip >= before) return misfit(w, i, "%s", what);
  return i;
}

/* One transformer block, h.K. */
static int block(walk *w, clt__hf_config *cfg, int k) {
  int rc = CLT_OK;
  char p[32], what[96];
  int start = w->i - 1; /* the block's input: the last layer taken, or a dropout after it */
  snprintf(p, sizeof p, "h.%d.ln_1", k);
  snprintf(what, sizeof what, "block %d's ln_1 (layernorm)", k);
  int ln1 = layernorm(w, cfg, p, what);
  if (ln1 < 0) return ln1;
  int at = skip_dropout(w);
  const clt_layer_spec *a = at < w->s->nlayers ? &w->s->layers[at] : NULL;
  if (k == 0) snprintf(what, sizeof what, "block 0's attention (attention heads=H with biases, without kv_heads= or "
                       "rope_theta=)");
  else snprintf(what, sizeof what, "block %d's attention (attention heads=%d with biases, without kv_heads= or "
                "rope_theta=)", k, cfg->heads);
  /* GPT-2's: fused qkv and proj, both with biases, learned positions */
  if (!a || a->kind != &clt__kind_attention || a->bias != CLT_BIAS_ALL || a->kv_heads || a->rope.theta != 0 ||
      (k > 0 && a->heads != cfg->heads))
    return misfit(w, at, "%s", what);
  cfg->heads = a->heads;
  w->i++;
  add(w, at, 0, 1, "h.%d.attn.c_attn.weight", k);
  add(w, at, 1, 0, "h.%d.attn.c_attn.bias", k);
  add(w, at, 2, 1, "h.%d.attn.c_proj.weight", k);
  add(w, at, 3, 0, "h.%d.attn.c_proj.bias", k);
  snprintf(what, sizeof what, "block %d's first residual, adding the block's input", k);
  int res1 = residual(w, start, ln1, what);
  if (res1 < 0) return res1;
  snprintf(p, sizeof p, "h.%d.ln_2", k);
  snprintf(what, sizeof what, "block %d's ln_2 (layernorm)", k);
  int ln2 = layernorm(w, cfg, p, what);
  if (ln2 < 0) return ln2;
  snprintf(p, sizeof p, "h.%d.mlp.c_fc", k);
  snprintf(what, sizeof what, "block %d's mlp.c_fc", k);
  int fc = conv1d(w, k > 0 ? cfg->inner : 0, p, what);
  if (fc < 0) return fc;
  cfg->inner = w->s->layers[fc].out;
  snprintf(what, sizeof what, "block %d's GELU (gelu)", k);
  if ((rc = expect(w, &clt__kind_gelu, what)) < 0) return rc;
  snprintf(p, sizeof p, "h.%d.mlp.c_proj", k);
  snprintf(what, sizeof what, "block %d's mlp.c_proj", k);
  if ((rc = conv1d(w, cfg->hidden, p, what)) < 0) return rc;
  snprintf(what, sizeof what, "block %d's second residual, adding the first one's output", k);
  if ((rc = residual(w, res1, ln2, what)) < 0) return rc;
  return CLT_OK;
}

/* Is the next layer (past dropouts) a layernorm followed by attention? */
static int block_follows(walk *w) {
  int i = skip_dropout(w), j = i + 1;
  if (i >= w->s->nlayers || w->s->layers[i].kind != &clt__kind_layernorm) return 0;
  while (j < w->s->nlayers && w->s->layers[j].kind == &clt__kind_dropout) j++;
  return j < w->s->nlayers && w->s->layers[j].kind == &clt__kind_attention;
}

int clt__hf_gpt2_match(const clt_model_spec *s, clt__hf_config *cfg, clt__hf_tensor **out, int *n) {
  int rc = CLT_OK;
  walk w = {.s = s, .i = 1};
  memset(cfg, 0, sizeof *cfg);
  *out = NULL;
  *n = 0;
  /* Every layer has at most 4 tensors, and lm_head one more. */
  if (!(w.t = clt__calloc((size_t)s->nlayers * CLT_MAX_LAYER_PARAMS + 1, sizeof *w.t))) return CLT_ENOMEM;
  const clt_shape *in = &s->layers[0].out_shape;
  if (in->ndim != 1 || !in->vocab) {
    rc = misfit(&w, 0, "input tokens T vocab=V");
    goto fail;
  }
  cfg->context = in->dims[0];
  cfg->vocab = in->vocab;
  int wte = expect(&w, &clt__kind_embedding, "the token embedding wte (embedding C name=wte)");
  if (wte < 0) { rc = wte; goto fail; }
  cfg->hidden = s->layers[wte].out;
  add(&w, wte, 0, 0, "wte.weight");
  int wpe = expect(&w, &clt__kind_posembedding, "the position embedding wpe (posembedding)");
  if (wpe < 0) { rc = wpe; goto fail; }
  cfg->positions = s->layers[wpe].positions;
  add(&w, wpe, 0, 0, "wpe.weight");
  while (block_follows(&w)) {
    CLT_TRY(block(&w, cfg, cfg->layers));
    cfg->layers++;
  }
  if (cfg->layers == 0) {
    rc = misfit(&w, skip_dropout(&w), "block 0 (layernorm, attention, residual, layernorm, linear, gelu, linear, "
                "residual)");
    goto fail;
  }
  CLT_TRY(layernorm(&w, cfg, "ln_f", "the final layernorm ln_f"));
  int head = skip_dropout(&w);
  const clt_layer_spec *l = head < s->nlayers ? &s->layers[head] : NULL;
  if (!l || l->kind != &clt__kind_linear || l->bias || l->out != cfg->vocab || (l->tie >= 0 && l->tie != wte)) {
    rc = misfit(&w, head, "lm_head (linear %d tie=%s bias=false)", cfg->vocab,
                s->layers[wte].name[0] ? s->layers[wte].name : "wte");
    goto fail;
  }
  w.i++;
  cfg->tied = l->tie == wte;
  if (!cfg->tied) {
    add(&w, head, 0, 0, "lm_head.weight");
    snprintf(w.t[w.n - 1].name, sizeof w.t[w.n - 1].name, "lm_head.weight"); /* no prefix */
    w.t[w.n - 1].optional = 0;
  }
  if (skip_dropout(&w) < s->nlayers) {
    rc = misfit(&w, w.i, "nothing: lm_head is GPT-2's last layer");
    goto fail;
  }
  *out = w.t;
  *n = w.n;
  return CLT_OK;
fail:
  free(w.t);
  return rc;
}

/* "eps=1e-06 " for a layernorm's line, or "" for cltrain's default. */
static void eps_option(float eps, char *buf, size_t len) {
  if (eps == 1e-5f) snprintf(buf, len, "%s", "");
  else snprintf(buf, len, " eps=%.9g", eps);
}

char *clt__hf_gpt2_spec_text(const clt__hf_arch *a, const clt__hf_config *c, const char *record) {
  char eps[48];
  (void)a;
  eps_option(c->eps, eps, sizeof eps);
  size_t size = 2048 + strlen(record);
  char *text = clt__calloc(1, size);
  if (!text) return NULL;
  snprintf(text, size,
           "%s"
           "# n_layer=%d n_head=%d n_embd=%d n_positions=%d vocab_size=%d\n"
           "input tokens %d vocab=%d\n"
           "embedding %d name=wte\n"
           "posembedding positions=%d\n"
           "block repeat=%d\n"
           "  layernorm%s\n"
           "  attention heads=%d\n"
           "  residual\n"
           "  layernorm%s\n"
           "  linear %d init=normal\n"
           "  gelu\n"
           "  linear %d init=normal std=%.3g\n"
           "  residual\n"
           "end\n"
           "layernorm%s\n"
           "linear %d%s bias=false\n",
           record, c->layers, c->heads, c->hidden, c->positions, c->vocab, c->context, c->vocab, c->hidden,
           c->positions, c->layers, eps, c->heads, eps, c->inner, c->hidden, 0.02 / sqrt(2.0 * c->layers), eps,
           c->vocab, c->tied ? " tie=wte" : "");
  return text;
}
