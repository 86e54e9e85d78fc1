/*
 * hfllama.c: the Hugging Face Llama-family suites' shared helpers
 * (hfllama.h).
 */
#include "hfllama.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *hl_class(const char *t) {
  return strcmp(t, "llama") == 0 ? "LlamaForCausalLM" : strcmp(t, "qwen2") == 0 ? "Qwen2ForCausalLM"
                                                                                 : "MistralForCausalLM";
}

/* A random value in (-1, 1) from a fixed sequence; norms near 1. */
static float rnd(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) / 8388608.0 - 1.0);
}

static void add(hf_tensors *h, const llama_variant *v, const char *name, int64_t a, int64_t b, float base,
                unsigned *seed) {
  if (v->skip && strcmp(name, v->skip) == 0) return;
  if (v->bad_shape && strcmp(name, v->bad_shape) == 0) a++;
  clt__st_tensor *t = &h->t[h->n];
  int64_t count = b ? a * b : a;
  float *d = malloc((size_t)count * sizeof *d);
  ck_assert_ptr_nonnull(d);
  for (int64_t i = 0; i < count; i++) d[i] = base + 0.5f * rnd(seed);
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = b ? 2 : 1;
  t->shape[0] = a;
  t->shape[1] = b;
  t->data = d;
  h->data[h->n++] = d;
}

void hl_make(hf_tensors *h, const llama_variant *v) {
  unsigned seed = 777;
  char n[128];
  const char *p = v->no_prefix ? "" : "model.";
  int qwen2 = strcmp(v->model_type, "qwen2") == 0;
  int qkv_bias = qwen2 || v->attn_bias, o_bias = v->attn_bias && !qwen2;
  memset(h, 0, sizeof *h);
#define ADD(a, b, base, ...)                                                                                     \
  do {                                                                                                           \
    snprintf(n, sizeof n, __VA_ARGS__);                                                                          \
    add(h, v, n, (a), (b), (base), &seed);                                                                       \
  } while (0)
  ADD(LV, LC, 0, "%sembed_tokens.weight", p);
  for (int k = 0; k < LL; k++) {
    ADD(LC, 0, 1, "%slayers.%d.input_layernorm.weight", p, k);
    ADD(LC, LC, 0, "%slayers.%d.self_attn.q_proj.weight", p, k);
    ADD(LKV * LC / LH, LC, 0, "%slayers.%d.self_attn.k_proj.weight", p, k);
    ADD(LKV * LC / LH, LC, 0, "%slayers.%d.self_attn.v_proj.weight", p, k);
    ADD(LC, LC, 0, "%slayers.%d.self_attn.o_proj.weight", p, k);
    if (qkv_bias) {
      ADD(LC, 0, 0, "%slayers.%d.self_attn.q_proj.bias", p, k);
      ADD(LKV * LC / LH, 0, 0, "%slayers.%d.self_attn.k_proj.bias", p, k);
      ADD(LKV * LC / LH, 0, 0, "%slayers.%d.self_attn.v_proj.bias", p, k);
    }
    if (o_bias) ADD(LC, 0, 0, "%slayers.%d.self_attn.o_proj.bias", p, k);
    if (v->inv_freq) ADD(LC / LH / 2, 0, 0, "%slayers.%d.self_attn.rotary_emb.inv_freq", p, k);
    ADD(LC, 0, 1, "%slayers.%d.post_attention_layernorm.weight", p, k);
    ADD(LI, LC, 0, "%slayers.%d.mlp.gate_proj.weight", p, k);
    ADD(LI, LC, 0, "%slayers.%d.mlp.up_proj.weight", p, k);
    ADD(LC, LI, 0, "%slayers.%d.mlp.down_proj.weight", p, k);
    if (v->mlp_bias) {
      ADD(LI, 0, 0, "%slayers.%d.mlp.gate_proj.bias", p, k);
      ADD(LI, 0, 0, "%slayers.%d.mlp.up_proj.bias", p, k);
      ADD(LC, 0, 0, "%slayers.%d.mlp.down_proj.bias", p, k);
    }
  }
  ADD(LC, 0, 1, "%snorm.weight", p);
  if (!v->tied) ADD(LV, LC, 0, "lm_head.weight");
  if (v->extra) ADD(LC, 0, 0, "%s", v->extra);
#undef ADD
}

void hl_write_config(const char *dir, const llama_variant *v, const char *extra, const char *drop) {
  char path[1024];
  int llama = strcmp(v->model_type, "llama") == 0, qwen2 = strcmp(v->model_type, "qwen2") == 0;
  json_t *j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:s, s:f, s:f, s:n, s:b, "
                        "s:i, s:i}",
                        "architectures", hl_class(v->model_type), "model_type", v->model_type, "hidden_size", LC,
                        "intermediate_size", LI, "num_hidden_layers", LL, "num_attention_heads", LH,
                        "num_key_value_heads", LKV, "max_position_embeddings", LT, "vocab_size", LV, "rms_norm_eps",
                        1e-6, "rope_theta", 10000.0, "tie_word_embeddings", v->tied, "hidden_act", "silu",
                        "attention_dropout", 0.0, "initializer_range", 0.02, "rope_scaling", "use_cache", 1,
                        "bos_token_id", 1, "eos_token_id", 2);
  ck_assert_ptr_nonnull(j);
  if (llama) {
    json_object_set_new(j, "attention_bias", json_boolean(v->attn_bias));
    json_object_set_new(j, "mlp_bias", json_boolean(v->mlp_bias));
    json_object_set_new(j, "pretraining_tp", json_integer(1));
  } else {
    json_object_set_new(j, "sliding_window", json_integer(qwen2 ? 4096 : LT));
  }
  if (qwen2) {
    json_object_set_new(j, "use_sliding_window", json_false());
    json_object_set_new(j, "max_window_layers", json_integer(LL));
  }
  if (drop) json_object_del(j, drop);
  if (extra) {
    char text[2048];
    snprintf(text, sizeof text, "{%s}", extra);
    json_error_t err;
    json_t *e = json_loads(text, 0, &err);
    ck_assert_msg(e != NULL, "extra keys %s: %s", extra, err.text);
    json_object_update(j, e);
    json_decref(e);
  }
  char *out = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(j);
  snprintf(path, sizeof path, "%s/config.json", dir);
  hu_write_file(path, out);
  free(out);
}

void hl_write_dir(const char *name, const llama_variant *v, const char *extra, const char *drop, hf_tensors *h,
                  char *dir, size_t len) {
  char path[1024];
  snprintf(dir, len, "%s/%s", hu_root, name);
  ck_assert_int_eq(mkdir(dir, 0777), 0);
  hl_write_config(dir, v, extra, drop);
  hl_make(h, v);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  const char *meta[] = {"format", "pt", NULL};
  ck_assert_int_eq(clt__st_write(path, h->t, h->n, meta), CLT_OK);
}

const char *hl_cltrain_name(const char *hf, char *buf, size_t len) {
  int k;
  char rest[96];
  if (strncmp(hf, "model.", 6) == 0) hf += 6;
  if (strstr(hf, "rotary_emb.inv_freq")) return NULL;
  if (strcmp(hf, "embed_tokens.weight") == 0) snprintf(buf, len, "0.weight");
  else if (strcmp(hf, "norm.weight") == 0) snprintf(buf, len, "%d.weight", 1 + 6 * LL);
  else if (strcmp(hf, "lm_head.weight") == 0) snprintf(buf, len, "%d.weight", 2 + 6 * LL);
  else if (sscanf(hf, "layers.%d.%95s", &k, rest) == 2) {
    int base = 1 + 6 * k; /* the block's first line, rmsnorm, is layer base + 1: "base." */
    if (strcmp(rest, "input_layernorm.weight") == 0) snprintf(buf, len, "%d.weight", base);
    else if (strcmp(rest, "post_attention_layernorm.weight") == 0) snprintf(buf, len, "%d.weight", base + 3);
    else if (strncmp(rest, "self_attn.", 10) == 0) snprintf(buf, len, "%d.%s", base + 1, rest + 10);
    else if (strncmp(rest, "mlp.", 4) == 0) snprintf(buf, len, "%d.%s", base + 4, rest + 4);
    else return NULL;
  } else {
    return NULL;
  }
  return buf;
}

void hl_same_imported(const hf_tensors *h, const char *path) {
  for (int i = 0; i < h->n; i++) {
    char name[128];
    const clt__st_tensor *t = &h->t[i];
    if (!hl_cltrain_name(t->name, name, sizeof name)) continue;
    int64_t shape[2];
    int ndim;
    float *x = hu_read_tensor(path, name, shape, &ndim);
    ck_assert_int_eq(ndim, t->ndim);
    ck_assert_int_eq(shape[0], t->shape[0]);
    if (ndim > 1) ck_assert_int_eq(shape[1], t->shape[1]);
    int64_t count = ndim > 1 ? shape[0] * shape[1] : shape[0];
    ck_assert_msg(memcmp(x, t->data, (size_t)count * 4) == 0, "%s (%s) differs after import", t->name, name);
    free(x);
  }
}
