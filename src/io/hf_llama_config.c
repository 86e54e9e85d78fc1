/*
 * hf_llama_config.c: the config.json of LlamaForCausalLM,
 * Qwen2ForCausalLM and MistralForCausalLM, key by key. A key that is absent
 * takes the default transformers' config class gives it (the row's numbers,
 * hf_archs.c), as from_pretrained would. A key that asks for what cltrain
 * does not compute is refused naming the file and the key:
 *
 *   hidden_act other than silu; head_dim other than hidden_size /
 *   num_attention_heads; partial_rotary_factor below 1; rope_scaling of a
 *   type other than llama3 (and any for Qwen2 and Mistral, whose
 *   transformers classes read none before 4.45); attention_dropout above 0
 *   (cltrain's attention has no dropout, so training would differ); a
 *   sliding window shorter than the context (hf_import.c, once the context
 *   is known); quantization_config (hf_import.c).
 *
 * Honoured: the shapes, num_key_value_heads, max_position_embeddings (the
 * context), rms_norm_eps, rope_theta, rope_scaling llama3,
 * tie_word_embeddings, Llama's attention_bias and mlp_bias. Keys that do
 * not change what the model computes (token ids, use_cache, torch_dtype,
 * initializer_range, pretraining_tp, which splits a product into slices
 * of the same sum) are passed over.
 */
#include "io/hf_arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char NEEDS[] = "a Llama-family config needs (hidden_size, intermediate_size, num_hidden_layers, "
                            "num_attention_heads and vocab_size)";

/* A refusal naming the key and its value. */
static int refused(const char *path, json_t *j, const char *key, const char *why) {
  char *text = clt__hf_json_text(json_object_get(j, key));
  int rc = clt__error(CLT_EFORMAT, "%s: \"%s\": %s is not supported: %s", path, key, text ? text : "?", why);
  free(text);
  return rc;
}

/* One of rope_scaling's numbers, required. */
static int scaling_number(const char *path, json_t *s, const char *key, double lo, double *out) {
  json_t *v = json_object_get(s, key);
  if (!v || json_is_null(v))
    return clt__error(CLT_EFORMAT, "%s: \"rope_scaling\" of type llama3 has no \"%s\" (it needs factor, "
                      "low_freq_factor, high_freq_factor and original_max_position_embeddings)", path, key);
  if (!json_is_number(v) || !(json_number_value(v) > lo) || json_number_value(v) > 1e9)
    return clt__error(CLT_EFORMAT, "%s: \"rope_scaling\": \"%s\" is not a number above %g", path, key, lo);
  *out = json_number_value(v);
  return CLT_OK;
}

/* rope_scaling: null, "default", or llama3 with its four numbers. */
static int read_scaling(const clt__hf_arch *a, const char *path, json_t *j, clt_rope_spec *r) {
  int rc = CLT_OK;
  json_t *s = json_object_get(j, "rope_scaling");
  if (!s || json_is_null(s)) return CLT_OK;
  if (!json_is_object(s)) return clt__error(CLT_EFORMAT, "%s: \"rope_scaling\" is not an object or null", path);
  json_t *t = json_object_get(s, "rope_type");
  if (!t) t = json_object_get(s, "type");
  const char *type = json_string_value(t);
  if (type && strcmp(type, "default") == 0) return CLT_OK; /* transformers' plain rotary embedding */
  if (!type || strcmp(type, "llama3") != 0)
    return refused(path, j, "rope_scaling", "cltrain implements rope_scaling of type llama3 (Llama 3.1 and 3.2), "
                   "not linear, dynamic, yarn, longrope or others");
  if (!a->rope_scaling) {
    char why[160];
    snprintf(why, sizeof why, "cltrain honours rope_scaling for LlamaForCausalLM only, not for %s", a->hf_class);
    return refused(path, j, "rope_scaling", why);
  }
  double f, lo, hi, orig;
  CLT_TRY(scaling_number(path, s, "factor", 0, &f));
  CLT_TRY(scaling_number(path, s, "low_freq_factor", 0, &lo));
  CLT_TRY(scaling_number(path, s, "high_freq_factor", 0, &hi));
  CLT_TRY(scaling_number(path, s, "original_max_position_embeddings", 0, &orig));
  if (orig != (double)(int)orig)
    return clt__error(CLT_EFORMAT, "%s: \"rope_scaling\": \"original_max_position_embeddings\" is not a whole number",
                      path);
  if (!(hi > lo))
    return clt__error(CLT_EFORMAT, "%s: \"rope_scaling\": \"high_freq_factor\" (%g) must be above "
                      "\"low_freq_factor\" (%g)", path, hi, lo);
  r->scaling = CLT_ROPE_LLAMA3;
  r->factor = (float)f;
  r->low_freq_factor = (float)lo;
  r->high_freq_factor = (float)hi;
  r->original_max = (int)orig;
fail:
  return rc;
}

/* The sliding window over the keys: Mistral's sliding_window (null: none),
 * Qwen2's when use_sliding_window is true, and layer_types' sliding layers. */
static int read_window(const clt__hf_arch *a, const char *path, json_t *j, clt__hf_config *c) {
  int rc = CLT_OK, on = a->sliding == 1, window = 0;
  if (a->sliding == 2) CLT_TRY(clt__hf_bool_key(path, j, "use_sliding_window", 0, &on));
  json_t *types = json_object_get(j, "layer_types");
  if (types && !json_is_null(types)) {
    size_t i;
    json_t *v;
    if (!json_is_array(types)) return clt__error(CLT_EFORMAT, "%s: \"layer_types\" is not a list", path);
    json_array_foreach(types, i, v) {
      const char *t = json_string_value(v);
      if (t && strcmp(t, "sliding_attention") == 0) on = 1;
      else if (!t || strcmp(t, "full_attention") != 0)
        return clt__error(CLT_EFORMAT, "%s: \"layer_types\"[%zu] is not \"full_attention\" or \"sliding_attention\"",
                          path, i);
    }
  }
  json_t *w = json_object_get(j, "sliding_window");
  if (on && (!w || !json_is_null(w)))
    CLT_TRY(clt__hf_int_key(path, j, "sliding_window", 4096, NEEDS, &window));
  c->window = on ? window : 0;
fail:
  return rc;
}

int clt__hf_llama_read_config(const clt__hf_arch *a, const char *path, json_t *j, clt__hf_config *c) {
  int rc = CLT_OK;
  CLT_TRY(clt__hf_int_key(path, j, "hidden_size", -1, NEEDS, &c->hidden));
  CLT_TRY(clt__hf_int_key(path, j, "intermediate_size", -1, NEEDS, &c->inner));
  CLT_TRY(clt__hf_int_key(path, j, "num_hidden_layers", -1, NEEDS, &c->layers));
  CLT_TRY(clt__hf_int_key(path, j, "num_attention_heads", -1, NEEDS, &c->heads));
  CLT_TRY(clt__hf_int_key(path, j, "vocab_size", -1, NEEDS, &c->vocab));
  CLT_TRY(clt__hf_int_key(path, j, "num_key_value_heads", a->default_kv_heads ? a->default_kv_heads : c->heads,
                          NEEDS, &c->kv_heads));
  if (c->hidden % c->heads)
    return clt__error(CLT_EFORMAT, "%s: \"num_attention_heads\": %d does not divide \"hidden_size\": %d", path,
                      c->heads, c->hidden);
  if (c->heads % c->kv_heads)
    return clt__error(CLT_EFORMAT, "%s: \"num_key_value_heads\": %d does not divide \"num_attention_heads\": %d", path,
                      c->kv_heads, c->heads);
  CLT_TRY(clt__hf_int_key(path, j, "max_position_embeddings", a->default_positions, NEEDS, &c->positions));
  int head_dim;
  CLT_TRY(clt__hf_int_key(path, j, "head_dim", c->hidden / c->heads, NEEDS, &head_dim));
  if (head_dim != c->hidden / c->heads) {
    char why[160];
    snprintf(why, sizeof why, "cltrain's attention has heads of hidden_size / num_attention_heads = %d values",
             c->hidden / c->heads);
    return refused(path, j, "head_dim", why);
  }
  json_t *act = json_object_get(j, "hidden_act");
  const char *f = act && !json_is_null(act) ? json_string_value(act) : "silu";
  if (!f || (strcmp(f, "silu") != 0 && strcmp(f, "swish") != 0))
    return refused(path, j, "hidden_act", "cltrain's swiglu gates with SiLU (\"silu\")");
  double x;
  CLT_TRY(clt__hf_float_key(path, j, "rms_norm_eps", a->default_eps, 0, 1, &x));
  c->eps = (float)x;
  memset(&c->rope, 0, sizeof c->rope);
  CLT_TRY(clt__hf_float_key(path, j, "rope_theta", 10000, 0, 1e12, &x));
  c->rope.theta = (float)x;
  CLT_TRY(read_scaling(a, path, j, &c->rope));
  CLT_TRY(clt__hf_float_key(path, j, "partial_rotary_factor", 1, 0, 1, &x));
  if (x != 1) return refused(path, j, "partial_rotary_factor", "cltrain rotates every value of a head (1.0)");
  if (a->attn_bias < 0) {
    int bias;
    CLT_TRY(clt__hf_bool_key(path, j, "attention_bias", 0, &bias));
    c->attn_bias = bias ? CLT_BIAS_ALL : 0;
  } else {
    c->attn_bias = a->attn_bias; /* the class hard-wires it, whatever attention_bias says */
  }
  c->mlp_bias = 0;
  if (a->has_mlp_bias) CLT_TRY(clt__hf_bool_key(path, j, "mlp_bias", 0, &c->mlp_bias));
  CLT_TRY(clt__hf_float_key(path, j, "attention_dropout", 0, -1, 1, &x));
  if (x != 0)
    return refused(path, j, "attention_dropout", "cltrain's attention has no dropout, so training would differ "
                   "from transformers' (set it to 0.0 to fine-tune without it)");
  CLT_TRY(clt__hf_bool_key(path, j, "tie_word_embeddings", 0, &c->tied));
  CLT_TRY(read_window(a, path, j, c));
fail:
  return rc;
}
