/*
 * hfllama.h: what the Hugging Face Llama-family suites (test_hf_llama,
 * test_hf_refusals) share: a small LlamaForCausalLM, Qwen2ForCausalLM or
 * MistralForCausalLM directory written by hand as save_pretrained writes
 * it (config.json, model.safetensors with transformers' names, random
 * values), in hu_root (hfutil.h), and the name each of its tensors has in
 * the weights file hf import writes.
 */
#ifndef CLT_HFLLAMA_H
#define CLT_HFLLAMA_H

#include "hfutil.h"

/* The small model: width 16, 4 heads of 4 sharing 2 key and value heads, an
 * MLP of 24, 2 layers, 32 tokens, context 8. */
enum { LC = 16, LH = 4, LKV = 2, LI = 24, LL = 2, LV = 32, LT = 8 };

typedef struct llama_variant {
  const char *model_type;  /* "llama", "qwen2" or "mistral" */
  int tied;                /* tie_word_embeddings: no lm_head.weight */
  int attn_bias;           /* llama: attention_bias (q, k, v and o biases); qwen2 has q, k and v's always */
  int mlp_bias;            /* llama: mlp_bias */
  int no_prefix;           /* LlamaModel's names, without "model." */
  int inv_freq;            /* each layer's rotary_emb.inv_freq, as older files have */
  const char *skip;        /* leave this tensor out */
  const char *bad_shape;   /* give this tensor one row too many */
  const char *extra;       /* one more tensor, of no *ForCausalLM */
} llama_variant;

/* The class of a model_type: "LlamaForCausalLM", ... */
const char *hl_class(const char *model_type);
/* The tensors of v (transformers' names and (out, in) layout). */
void hl_make(hf_tensors *h, const llama_variant *v);
/* The config save_pretrained writes for v, with `extra` ("\"key\": value"
 * pairs, replacing keys of the same name) and without `drop`. */
void hl_write_config(const char *dir, const llama_variant *v, const char *extra, const char *drop);
/* A directory hu_root/name: config and tensors (as model.safetensors); its
 * path into dir. */
void hl_write_dir(const char *name, const llama_variant *v, const char *extra, const char *drop, hf_tensors *h,
                  char *dir, size_t len);
/* The name hf import gives transformers' tensor `hf` in its weights file
 * ("2.q_proj.weight"), or NULL for a buffer (inv_freq). */
const char *hl_cltrain_name(const char *hf, char *buf, size_t len);
/* Every tensor of h is in the weights file at path under its cltrain name,
 * same shape, same bits. */
void hl_same_imported(const hf_tensors *h, const char *path);

#endif
