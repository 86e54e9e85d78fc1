/*
 * hf_llama.c: the Llama family's rows of the Hugging Face table
 * (hf_arch.h): LlamaForCausalLM, Qwen2ForCausalLM and MistralForCausalLM,
 * which are one model to cltrain (their config.json, hf_llama_config.c).
 * Every tensor is an nn.Linear's (out, in), as cltrain's: nothing is
 * transposed, and cltrain's attention and swiglu name their tensors as
 * transformers' modules do.
 *
 *   cltrain layer (spec line)           HF tensor ("model." + ...)
 *   embedding C name=embed_tokens       embed_tokens.weight (V, C)
 *   block K: rmsnorm eps=E              layers.K.input_layernorm.weight (C)
 *            attention heads=H          layers.K.self_attn.q_proj.weight (C, C)
 *              kv_heads=KV rope_theta=X   .k_proj.weight, .v_proj.weight (KV D, C)
 *              [rope_scaling=llama3 ...]  .o_proj.weight (C, C)
 *              bias=none|all|qkv          .q_proj.bias ... as bias= has them
 *            residual
 *            rmsnorm eps=E              layers.K.post_attention_layernorm.weight
 *            swiglu I [bias=true]       layers.K.mlp.gate_proj.weight, .up_proj.weight (I, C),
 *                                         .down_proj.weight (C, I) (and biases)
 *            residual
 *   rmsnorm eps=E                       norm.weight
 *   linear V bias=false                 lm_head.weight (V, C), no prefix
 *   linear V tie=embed_tokens bias=false  none: tied to embed_tokens
 *
 * Dropout layers may stand anywhere in the spec (the identity in
 * evaluation; the exported config has attention_dropout 0).
 */
#include "io/hf_arch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layer.h"

#define PREFIX "model."

/* The walk over the spec's layers; dropout layers are passed over. */
typedef struct walk {
  const clt_model_spec *s;
  int i;                /* the next layer to look at */
  clt__hf_tensor *t;
  int n;
  int norm_line;        /* the first rmsnorm's line, 0 before it */
} walk;

static int skip_dropout(walk *w) {
  while (w->i < w->s->nlayers && w->s->layers[w->i].kind == &clt__kind_dropout) w->i++;
  return w->i;
}

/* The first layer that does not fit: where, what it is and what Llama has there. */
static int misfit(const walk *w, int i, const char *fmt, ...) CLT__PRINTF(3, 4);
static int misfit(const walk *w, int i, const char *fmt, ...) {
  char want[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(want, sizeof want, fmt, ap);
  va_end(ap);
  const char *tail = "; the Llama family (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM) is a model of "
                     "examples/llama_tiny.model's structure";
  if (i >= w->s->nlayers)
    return clt__error(CLT_EFORMAT, "%s: the model ends where Llama has %s%s", w->s->name, want, tail);
  const clt_layer_spec *l = &w->s->layers[i];
  return clt__error(CLT_EFORMAT, "%s:%d: layer %d (%s) does not fit Llama, which has %s here%s", w->s->name, l->line,
                    i, clt__layer_kind_name(l), want, tail);
}

/* Every tensor of layer i, named prefix + its cltrain name (which is
 * transformers' after the module's path). */
static void add_layer(walk *w, int i, const char *prefix) {
  const clt_layer_spec *l = &w->s->layers[i];
  for (int p = 0; p < l->nparams; p++) {
    clt__hf_tensor *t = &w->t[w->n++];
    snprintf(t->name, sizeof t->name, PREFIX "%s%s", prefix, l->param[p].name);
    t->layer = i;
    t->param = p;
    t->optional = (int)strlen(PREFIX);
    t->transposed = 0;
  }
}

/* The next layer, which must be of `kind`; its index, or a misfit. */
static int expect(walk *w, const clt__layer_kind *kind, const char *what) {
  int i = skip_dropout(w);
  if (i >= w->s->nlayers || w->s->layers[i].kind != kind) return misfit(w, i, "%s", what);
  w->i++;
  return i;
}

/* An rmsnorm: the family has one rms_norm_eps for all of them. */
static int rmsnorm(walk *w, clt__hf_config *c, const char *prefix, const char *what) {
  int i = expect(w, &clt__kind_rmsnorm, what);
  if (i < 0) return i;
  const clt_layer_spec *l = &w->s->layers[i];
  if (!w->norm_line) {
    c->eps = l->eps;
    w->norm_line = l->line;
  } else if (l->eps != c->eps) {
    return misfit(w, i, "%s with eps=%g like line %d's (Llama has one rms_norm_eps)", what, (double)c->eps,
                  w->norm_line);
  }
  add_layer(w, i, prefix);
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

static int same_rope(const clt_rope_spec *a, const clt_rope_spec *b) {
  return a->theta == b->theta && a->scaling == b->scaling && a->factor == b->factor &&
         a->low_freq_factor == b->low_freq_factor && a->high_freq_factor == b->high_freq_factor &&
         a->original_max == b->original_max;
}

/* One LlamaDecoderLayer, model.layers.K. */
static int block(walk *w, clt__hf_config *c, int k) {
  int rc = CLT_OK;
  char p[48], what[160];
  int start = w->i - 1; /* the block's input: the last layer taken, or a dropout after it */
  snprintf(p, sizeof p, "layers.%d.input_layernorm.", k);
  snprintf(what, sizeof what, "block %d's input_layernorm (rmsnorm)", k);
  int ln1 = rmsnorm(w, c, p, what);
  if (ln1 < 0) return ln1;
  int at = skip_dropout(w);
  const clt_layer_spec *a = at < w->s->nlayers ? &w->s->layers[at] : NULL;
  if (k == 0)
    snprintf(what, sizeof what, "block 0's self_attn (attention heads=H kv_heads=K rope_theta=X)");
  else
    snprintf(what, sizeof what, "block %d's self_attn (attention heads=%d kv_heads=%d with block 0's rope_theta=, "
             "rope_scaling= and bias=)", k, c->heads, c->kv_heads);
  /* Llama's: separate projections (kv_heads=), rotary positions */
  if (!a || a->kind != &clt__kind_attention || !a->kv_heads || a->rope.theta == 0 ||
      (k > 0 && (a->heads != c->heads || a->kv_heads != c->kv_heads || a->bias != c->attn_bias ||
                 !same_rope(&a->rope, &c->rope))))
    return misfit(w, at, "%s", what);
  if (k == 0) {
    c->heads = a->heads;
    c->kv_heads = a->kv_heads;
    c->attn_bias = a->bias;
    c->rope = a->rope;
    c->attn_line = a->line;
  }
  w->i++;
  snprintf(p, sizeof p, "layers.%d.self_attn.", k);
  add_layer(w, at, p);
  snprintf(what, sizeof what, "block %d's first residual, adding the block's input", k);
  int res1 = residual(w, start, ln1, what);
  if (res1 < 0) return res1;
  snprintf(p, sizeof p, "layers.%d.post_attention_layernorm.", k);
  snprintf(what, sizeof what, "block %d's post_attention_layernorm (rmsnorm)", k);
  int ln2 = rmsnorm(w, c, p, what);
  if (ln2 < 0) return ln2;
  at = skip_dropout(w);
  const clt_layer_spec *m = at < w->s->nlayers ? &w->s->layers[at] : NULL;
  if (k == 0) snprintf(what, sizeof what, "block 0's mlp (swiglu I)");
  else snprintf(what, sizeof what, "block %d's mlp (swiglu %d%s)", k, c->inner, c->mlp_bias ? " bias=true" : "");
  if (!m || m->kind != &clt__kind_swiglu || (k > 0 && (m->out != c->inner || m->bias != c->mlp_bias)))
    return misfit(w, at, "%s", what);
  if (k == 0) {
    c->inner = m->out;
    c->mlp_bias = m->bias;
    c->mlp_line = m->line;
  }
  w->i++;
  snprintf(p, sizeof p, "layers.%d.mlp.", k);
  add_layer(w, at, p);
  snprintf(what, sizeof what, "block %d's second residual, adding the first one's output", k);
  if ((rc = residual(w, res1, ln2, what)) < 0) return rc;
  return CLT_OK;
}

/* Is the next layer (past dropouts) an rmsnorm followed by attention? */
static int block_follows(walk *w) {
  int i = skip_dropout(w), j = i + 1;
  if (i >= w->s->nlayers || w->s->layers[i].kind != &clt__kind_rmsnorm) return 0;
  while (j < w->s->nlayers && w->s->layers[j].kind == &clt__kind_dropout) j++;
  return j < w->s->nlayers && w->s->layers[j].kind == &clt__kind_attention;
}

int clt__hf_llama_match(const clt_model_spec *s, clt__hf_config *c, clt__hf_tensor **out, int *n) {
  int rc = CLT_OK;
  walk w = {.s = s, .i = 1};
  memset(c, 0, sizeof *c);
  *out = NULL;
  *n = 0;
  if (!(w.t = clt__calloc((size_t)s->nlayers * CLT_MAX_LAYER_PARAMS + 1, sizeof *w.t))) return CLT_ENOMEM;
  const clt_shape *in = &s->layers[0].out_shape;
  if (in->ndim != 1 || !in->vocab) {
    rc = misfit(&w, 0, "input tokens T vocab=V");
    goto fail;
  }
  c->context = c->positions = in->dims[0];
  c->vocab = in->vocab;
  int emb = expect(&w, &clt__kind_embedding, "the token embedding embed_tokens (embedding C)");
  if (emb < 0) { rc = emb; goto fail; }
  c->hidden = s->layers[emb].out;
  add_layer(&w, emb, "embed_tokens.");
  while (block_follows(&w)) {
    CLT_TRY(block(&w, c, c->layers));
    c->layers++;
  }
  if (c->layers == 0) {
    rc = misfit(&w, skip_dropout(&w), "block 0 (rmsnorm, attention with kv_heads= and rope_theta=, residual, "
                "rmsnorm, swiglu, residual)");
    goto fail;
  }
  CLT_TRY(rmsnorm(&w, c, "norm.", "the final norm (rmsnorm)"));
  int head = skip_dropout(&w);
  const clt_layer_spec *l = head < s->nlayers ? &s->layers[head] : NULL;
  if (!l || l->kind != &clt__kind_linear || l->bias || l->out != c->vocab || (l->tie >= 0 && l->tie != emb)) {
    rc = misfit(&w, head, "lm_head (linear %d bias=false, or tied: tie=%s)", c->vocab,
                s->layers[emb].name[0] ? s->layers[emb].name : "embed_tokens");
    goto fail;
  }
  w.i++;
  c->tied = l->tie == emb;
  if (!c->tied) {
    clt__hf_tensor *t = &w.t[w.n++];
    snprintf(t->name, sizeof t->name, "lm_head.weight");
    t->layer = head;
    t->param = 0;
    t->optional = 0;
    t->transposed = 0;
  }
  if (skip_dropout(&w) < s->nlayers) {
    rc = misfit(&w, w.i, "nothing: lm_head is Llama's last layer");
    goto fail;
  }
  *out = w.t;
  *n = w.n;
  return CLT_OK;
fail:
  free(w.t);
  return rc;
}

/* ---- the spec of a configuration ---- */

char *clt__hf_llama_spec_text(const clt__hf_arch *a, const clt__hf_config *c, const char *record) {
  char eps[32], theta[32], scaling[256] = "", f[3][32];
  const char *bias = c->attn_bias == CLT_BIAS_ALL ? "all" : c->attn_bias == CLT_BIAS_QKV ? "qkv"
                     : c->attn_bias == CLT_BIAS_OUT ? "out" : "none";
  clt__hf_short_text(c->eps, eps, sizeof eps);
  clt__hf_short_text(c->rope.theta, theta, sizeof theta);
  if (c->rope.scaling == CLT_ROPE_LLAMA3) {
    clt__hf_short_text(c->rope.factor, f[0], sizeof f[0]);
    clt__hf_short_text(c->rope.low_freq_factor, f[1], sizeof f[1]);
    clt__hf_short_text(c->rope.high_freq_factor, f[2], sizeof f[2]);
    snprintf(scaling, sizeof scaling, " rope_scaling=llama3 factor=%s low_freq_factor=%s high_freq_factor=%s "
             "original_max_position_embeddings=%d", f[0], f[1], f[2], c->rope.original_max);
  }
  size_t size = 2048 + strlen(record);
  char *text = clt__calloc(1, size);
  if (!text) return NULL;
  snprintf(text, size,
           "%s"
           "# %s: hidden_size=%d num_hidden_layers=%d num_attention_heads=%d num_key_value_heads=%d\n"
           "# intermediate_size=%d vocab_size=%d max_position_embeddings=%d\n"
           "input tokens %d vocab=%d\n"
           "embedding %d name=embed_tokens\n"
           "block repeat=%d\n"
           "  rmsnorm eps=%s\n"
           "  attention heads=%d kv_heads=%d rope_theta=%s%s bias=%s\n"
           "  residual\n"
           "  rmsnorm eps=%s\n"
           "  swiglu %d%s\n"
           "  residual\n"
           "end\n"
           "rmsnorm eps=%s\n"
           "linear %d%s bias=false\n",
           record, a->model_type, c->hidden, c->layers, c->heads, c->kv_heads, c->inner, c->vocab, c->positions,
           c->context, c->vocab, c->hidden, c->layers, eps, c->heads, c->kv_heads, theta, scaling, bias, eps, c->inner,
           c->mlp_bias ? " bias=true" : "", eps, c->vocab, c->tied ? " tie=embed_tokens" : "");
  return text;
}

/* ---- export ---- */

/* Biases, rope scaling and the MLP's biases as the class has them. */
int clt__hf_llama_fits(const clt__hf_arch *a, const clt_model_spec *spec, const clt__hf_config *c) {
  const char *have = c->attn_bias == CLT_BIAS_ALL ? "all" : c->attn_bias == CLT_BIAS_QKV ? "qkv"
                     : c->attn_bias == CLT_BIAS_OUT ? "out" : "none";
  if (a->attn_bias < 0 && c->attn_bias != 0 && c->attn_bias != CLT_BIAS_ALL)
    return clt__error(CLT_EFORMAT, "%s:%d: attention bias=%s does not fit %s, whose attention_bias puts biases on "
                      "all four projections or on none (bias=all or bias=none)%s", spec->name, c->attn_line, have,
                      a->hf_class, c->attn_bias == CLT_BIAS_QKV ? "; Qwen2ForCausalLM has q, k and v biases" : "");
  if (a->attn_bias >= 0 && c->attn_bias != a->attn_bias)
    return clt__error(CLT_EFORMAT, "%s:%d: attention bias=%s does not fit %s, which has %s", spec->name,
                      c->attn_line, have, a->hf_class,
                      a->attn_bias == CLT_BIAS_QKV ? "biases on q, k and v only (bias=qkv)" : "no biases (bias=none)");
  if (c->mlp_bias && !a->has_mlp_bias)
    return clt__error(CLT_EFORMAT, "%s:%d: swiglu with biases does not fit %s, whose MLP has none (LlamaForCausalLM "
                      "has mlp_bias)", spec->name, c->mlp_line, a->hf_class);
  if (c->rope.scaling != CLT_ROPE_PLAIN && !a->rope_scaling)
    return clt__error(CLT_EFORMAT, "%s:%d: rope_scaling=llama3 does not fit %s as cltrain exports it (rope_scaling "
                      "is written for LlamaForCausalLM only)", spec->name, c->attn_line, a->hf_class);
  return CLT_OK;
}

json_t *clt__hf_llama_config_json(const clt__hf_arch *a, const clt__hf_config *c, int positions) {
  json_t *j = json_pack("{s:s, s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:s, s:b, s:f, s:f, s:b}",
                        "model_type", a->model_type, "architectures", a->hf_class, "hidden_size", c->hidden,
                        "intermediate_size", c->inner, "num_hidden_layers", c->layers, "num_attention_heads",
                        c->heads, "num_key_value_heads", c->kv_heads, "vocab_size", c->vocab,
                        "max_position_embeddings", positions, "rms_norm_eps", clt__hf_short_decimal(c->eps),
                        "rope_theta", clt__hf_short_decimal(c->rope.theta), "hidden_act", "silu",
                        "tie_word_embeddings", c->tied, "attention_dropout", 0.0, "initializer_range", 0.02,
                        "use_cache", 1);
  if (!j) return NULL;
  json_t *scaling = json_null();
  if (c->rope.scaling == CLT_ROPE_LLAMA3)
    scaling = json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor",
                        clt__hf_short_decimal(c->rope.factor), "low_freq_factor",
                        clt__hf_short_decimal(c->rope.low_freq_factor), "high_freq_factor",
                        clt__hf_short_decimal(c->rope.high_freq_factor), "original_max_position_embeddings",
                        c->rope.original_max);
  json_object_set_new(j, "rope_scaling", scaling);
  if (a->attn_bias < 0) json_object_set_new(j, "attention_bias", json_boolean(c->attn_bias == CLT_BIAS_ALL));
  if (a->has_mlp_bias) json_object_set_new(j, "mlp_bias", json_boolean(c->mlp_bias));
  if (a->sliding) json_object_set_new(j, "sliding_window", json_null()); /* attention over the whole context */
  if (a->sliding == 2) {
    json_object_set_new(j, "use_sliding_window", json_false());
    json_object_set_new(j, "max_window_layers", json_integer(c->layers));
  }
  return j;
}

/* Older files keep each layer's rotary inverse frequencies, a buffer. */
int clt__hf_llama_is_buffer(const char *name) {
  static const char tail[] = ".rotary_emb.inv_freq";
  size_t len = strlen(name), n = sizeof tail - 1;
  return len >= n && strcmp(name + len - n, tail) == 0;
}
