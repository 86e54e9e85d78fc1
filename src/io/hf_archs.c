/*
 * hf_archs.c: the table of Hugging Face model classes that hf import and
 * export know (hf_arch.h), one row each. The Llama family's rows share
 * their functions and differ in the numbers below, which are transformers'
 * own (LlamaConfig, Qwen2Config, MistralConfig: the defaults from_pretrained
 * fills in for a key config.json leaves out, and what each class's modules
 * hard-wire).
 */
#include "io/hf_arch.h"

#include <stdio.h>
#include <string.h>

#define LLAMA_FAMILY                                                                                          \
  .positions_key = "max_position_embeddings",                                                                \
  .read_config = clt__hf_llama_read_config, .spec_text = clt__hf_llama_spec_text,                            \
  .match = clt__hf_llama_match, .fits = clt__hf_llama_fits, .config_json = clt__hf_llama_config_json,         \
  .is_buffer = clt__hf_llama_is_buffer

const clt__hf_arch clt__hf_archs[] = {
    {.hf_class = "GPT2LMHeadModel", .model_type = "gpt2", .positions_key = "n_positions", .read_config = clt__hf_gpt2_read_config,
     .spec_text = clt__hf_gpt2_spec_text, .match = clt__hf_gpt2_match, .config_json = clt__hf_gpt2_config_json,
     .is_buffer = clt__hf_gpt2_is_buffer},
    /* attention_bias puts biases on all four projections, mlp_bias on the
     * MLP's three; rope_scaling of type llama3 (Llama 3.1, 3.2) */
    {.hf_class = "LlamaForCausalLM", .model_type = "llama", LLAMA_FAMILY, .attn_bias = -1, .has_mlp_bias = 1,
     .rope_scaling = 1, .sliding = 0, .default_kv_heads = 0, .default_positions = 2048, .default_eps = 1e-6f},
    /* q, k and v always have biases, o_proj and the MLP none */
    {.hf_class = "Qwen2ForCausalLM", .model_type = "qwen2", LLAMA_FAMILY, .attn_bias = CLT_BIAS_QKV,
     .has_mlp_bias = 0, .rope_scaling = 0, .sliding = 2, .default_kv_heads = 32, .default_positions = 32768,
     .default_eps = 1e-6f},
    /* no biases; a sliding window over the keys */
    {.hf_class = "MistralForCausalLM", .model_type = "mistral", LLAMA_FAMILY, .attn_bias = 0, .has_mlp_bias = 0,
     .rope_scaling = 0, .sliding = 1, .default_kv_heads = 8, .default_positions = 4096 * 32, .default_eps = 1e-6f},
    {0}};

const clt__hf_arch *clt__hf_arch_find(const char *name) {
  if (!name) return NULL;
  for (const clt__hf_arch *a = clt__hf_archs; a->hf_class; a++)
    if (strcmp(a->hf_class, name) == 0 || strcmp(a->model_type, name) == 0) return a;
  return NULL;
}

const char *clt__hf_arch_list(char *buf, size_t len) {
  size_t at = 0;
  buf[0] = 0;
  for (const clt__hf_arch *a = clt__hf_archs; a->hf_class && at < len; a++)
    at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "", a->hf_class);
  return buf;
}
