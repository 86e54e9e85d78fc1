/*
 * test_hf_refusals.c: every bad input of Hugging Face import and export
 * (GPT-2 and the Llama family) is refused with a message naming the file
 * and the key, tensor or line, and nothing is written: an unsupported or
 * malformed config key, a missing or misshapen tensor, a missing shard, a
 * tensor of a dtype cltrain does not read, a spec without the class's
 * structure or biases, a class that is not in the table, a tokenizer
 * directory without a tokenizer or that is the output. No device, no
 * Python.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hfllama.h"

/* The import of a directory with this config change or tensor fault fails
 * with `code`, and the message holds each of the strings. */
static void refused(const char *extra, const char *drop, const variant *v0, int code, const char *const *words) {
  char dir[512], model[512], weights[512];
  hf_tensors h;
  variant v = v0 ? *v0 : (variant){.prefix = "transformer.", .inner = 4 * C};
  hu_make_root();
  hu_write_hf("gpt2", &v, extra, drop, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  int rc = clt_hf_gpt2_import(dir, 0, model, weights);
  ck_assert_msg(rc == code, "import with %s: %d (%s), expected %d", extra ? extra : drop ? drop : "a bad tensor", rc,
                clt_last_error(), code);
  for (int i = 0; words[i]; i++)
    ck_assert_msg(strstr(clt_last_error(), words[i]), "'%s' is not in: %s", words[i], clt_last_error());
  ck_assert_int_eq(access(model, F_OK), -1); /* nothing is written */
  ck_assert_int_eq(access(weights, F_OK), -1);
  hu_free(&h);
  hu_teardown();
}

START_TEST(bad_configs) {
  refused("\"activation_function\": \"relu\"", NULL, NULL, CLT_EFORMAT,
          (const char *[]){"config.json", "activation_function", "relu", NULL});
  refused("\"activation_function\": \"gelu\"", NULL, NULL, CLT_EFORMAT,
          (const char *[]){"config.json", "activation_function", "\"gelu\"", NULL});
  refused(NULL, "n_head", NULL, CLT_EFORMAT, (const char *[]){"config.json", "n_head", NULL});
  refused(NULL, "vocab_size", NULL, CLT_EFORMAT, (const char *[]){"config.json", "vocab_size", NULL});
  refused("\"n_embd\": \"sixteen\"", NULL, NULL, CLT_EFORMAT, (const char *[]){"config.json", "n_embd", NULL});
  refused("\"n_head\": 3", NULL, NULL, CLT_EFORMAT, (const char *[]){"config.json", "n_head", "n_embd", NULL});
  refused("\"scale_attn_weights\": false", NULL, NULL, CLT_EFORMAT,
          (const char *[]){"config.json", "scale_attn_weights", NULL});
  refused("\"scale_attn_by_inverse_layer_idx\": true", NULL, NULL, CLT_EFORMAT,
          (const char *[]){"config.json", "scale_attn_by_inverse_layer_idx", NULL});
  refused("\"add_cross_attention\": true", NULL, NULL, CLT_EFORMAT,
          (const char *[]){"config.json", "add_cross_attention", NULL});
  refused("\"model_type\": \"llama\"", NULL, NULL, CLT_EFORMAT,
          (const char *[]){"config.json", "model_type", "llama", NULL});
  refused("\"layer_norm_epsilon\": \"small\"", NULL, NULL, CLT_EFORMAT,
          (const char *[]){"config.json", "layer_norm_epsilon", NULL});
  refused("\"bad json\" ", NULL, NULL, CLT_EFORMAT, (const char *[]){"config.json", "not JSON", NULL});
}
END_TEST

START_TEST(bad_tensors) {
  refused(NULL, NULL, &(variant){.prefix = "transformer.", .inner = 4 * C, .skip = "transformer.ln_f.bias"},
          CLT_ESHAPE, (const char *[]){"model.safetensors", "transformer.ln_f.bias", "config.json", NULL});
  refused(NULL, NULL,
          &(variant){.prefix = "transformer.", .inner = 4 * C, .bad_shape = "transformer.h.1.attn.c_attn.weight"},
          CLT_ESHAPE,
          (const char *[]){"model.safetensors", "transformer.h.1.attn.c_attn.weight", "(17, 48)", "(16, 48)", NULL});
  /* a config of 3 layers over a file of 2 */
  refused("\"n_layer\": 3", NULL, NULL, CLT_ESHAPE, (const char *[]){"model.safetensors", "h.2.ln_1.weight", NULL});
  /* an untied head that is not there */
  refused("\"tie_word_embeddings\": false", NULL, NULL, CLT_ESHAPE,
          (const char *[]){"model.safetensors", "lm_head.weight", NULL});
  /* no directory at all */
  char model[512], weights[512];
  hu_make_root();
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  ck_assert_int_eq(clt_hf_gpt2_import("/nonexistent/gpt2", 0, model, weights), CLT_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "/nonexistent/gpt2/config.json"));
  /* a config without its model.safetensors */
  char dir[512], path[1024];
  snprintf(dir, sizeof dir, "%s/only-config", hu_root);
  ck_assert_int_eq(mkdir(dir, 0777), 0);
  hu_write_config(dir, NULL, NULL, 4 * C, 0);
  ck_assert_int_eq(clt_hf_gpt2_import(dir, 0, model, weights), CLT_ENOTFOUND);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  ck_assert_msg(strstr(clt_last_error(), path) && strstr(clt_last_error(), "safe_serialization"), "%s",
                clt_last_error());
}
END_TEST

/* Export of a spec that is not GPT-2's: refused naming the line. */
static void export_refused(const char *spec, const char *const *words) {
  char model[512], out[512];
  hu_make_root();
  snprintf(model, sizeof model, "%s/bad.model", hu_root);
  snprintf(out, sizeof out, "%s/exported", hu_root);
  hu_write_file(model, spec);
  int rc = clt_hf_gpt2_export(model, "/nonexistent.safetensors", out);
  ck_assert_msg(rc == CLT_EFORMAT, "export: %d (%s)", rc, clt_last_error());
  for (int i = 0; words[i]; i++)
    ck_assert_msg(strstr(clt_last_error(), words[i]), "'%s' is not in: %s", words[i], clt_last_error());
  ck_assert_int_eq(access(out, F_OK), -1);
  hu_teardown();
}

START_TEST(export_structure) {
  export_refused("input 784\nlinear 10\n", (const char *[]){"bad.model:1", "input", "input tokens", NULL});
  /* relu where GPT-2 has GELU (line 10) */
  export_refused(GPT_HEAD "block repeat=2\n layernorm\n attention heads=2\n residual\n layernorm\n linear 64\n"
                 " relu\n linear 16\n residual\nend\nlayernorm\nlinear 32 tie=wte bias=false\n",
                 (const char *[]){"bad.model:10", "relu", "block 0's GELU", NULL});
  export_refused(GPT_HEAD "block repeat=1\n layernorm\n attention heads=2 bias=false\n residual\n layernorm\n"
                 " linear 64\n gelu\n linear 16\n residual\nend\nlayernorm\nlinear 32 tie=wte bias=false\n",
                 (const char *[]){"bad.model:6", "attention", "with biases", NULL});
  export_refused(GPT_HEAD "block repeat=1\n layernorm\n attention heads=2\n residual\n layernorm eps=1e-6\n"
                 " linear 64\n gelu\n linear 16\n residual\nend\nlayernorm\nlinear 32 tie=wte bias=false\n",
                 (const char *[]){"bad.model:8", "layer_norm_epsilon", NULL});
  export_refused(GPT_HEAD "block repeat=1\n layernorm\n attention heads=2\n residual\n layernorm\n"
                 " linear 64\n gelu\n linear 16\n residual\nend\nlayernorm\nlinear 32 bias=true\n",
                 (const char *[]){"bad.model:15", "lm_head", NULL});
  export_refused(GPT_HEAD "block repeat=1\n layernorm\n attention heads=2\n residual\n layernorm\n"
                 " linear 64\n gelu\n linear 16\n residual\nend\nlayernorm\n",
                 (const char *[]){"bad.model: the model ends", "lm_head", NULL});
}
END_TEST

/* ---- the Llama family ---- */

/* The import of v's directory with this config change fails with `code`,
 * naming each of the words; nothing is written. */
static void llama_refused(const llama_variant *v, const char *extra, const char *drop, int context, int code,
                          const char *const *words) {
  char dir[512], model[512], weights[512];
  hf_tensors h;
  hu_make_root();
  hl_write_dir("hf", v, extra, drop, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  int rc = clt_hf_import(dir, context, model, weights);
  ck_assert_msg(rc == code, "import with %s: %d (%s), expected %d", extra ? extra : drop ? drop : "a bad tensor", rc,
                clt_last_error(), code);
  for (int i = 0; words[i]; i++)
    ck_assert_msg(strstr(clt_last_error(), words[i]), "'%s' is not in: %s", words[i], clt_last_error());
  ck_assert_int_eq(access(model, F_OK), -1);
  ck_assert_int_eq(access(weights, F_OK), -1);
  hu_free(&h);
  hu_teardown();
}

#define LLAMA (&(llama_variant){.model_type = "llama"})
#define QWEN2 (&(llama_variant){.model_type = "qwen2", .tied = 1})
#define MISTRAL (&(llama_variant){.model_type = "mistral"})
#define WORDS(...) ((const char *[]){"config.json", __VA_ARGS__, NULL})

START_TEST(llama_configs) {
  llama_refused(LLAMA, "\"hidden_act\": \"gelu\"", NULL, 0, CLT_EFORMAT, WORDS("\"hidden_act\": \"gelu\"", "SiLU"));
  llama_refused(QWEN2, "\"hidden_act\": \"relu\"", NULL, 0, CLT_EFORMAT, WORDS("hidden_act", "relu"));
  llama_refused(LLAMA, "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}", NULL, 0, CLT_EFORMAT,
                WORDS("rope_scaling", "linear", "llama3"));
  llama_refused(LLAMA, "\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}", NULL, 0, CLT_EFORMAT,
                WORDS("rope_scaling", "dynamic"));
  llama_refused(LLAMA, "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", NULL, 0, CLT_EFORMAT,
                WORDS("rope_scaling", "yarn"));
  llama_refused(LLAMA, "\"rope_scaling\": {\"rope_type\": \"llama3\", \"low_freq_factor\": 1.0, "
                "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", NULL, 0, CLT_EFORMAT,
                WORDS("rope_scaling", "\"factor\""));
  llama_refused(LLAMA, "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, "
                "\"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}", NULL, 0, CLT_EFORMAT,
                WORDS("high_freq_factor", "low_freq_factor"));
  llama_refused(QWEN2, "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", NULL, 0, CLT_EFORMAT,
                WORDS("rope_scaling", "Qwen2ForCausalLM"));
  llama_refused(LLAMA, "\"partial_rotary_factor\": 0.5", NULL, 0, CLT_EFORMAT, WORDS("partial_rotary_factor", "0.5"));
  llama_refused(MISTRAL, "\"head_dim\": 8", NULL, 0, CLT_EFORMAT, WORDS("\"head_dim\": 8", "= 4"));
  llama_refused(LLAMA, "\"attention_dropout\": 0.1", NULL, 0, CLT_EFORMAT, WORDS("attention_dropout", "0.1"));
  /* a window shorter than the context; the same with a context it covers imports */
  llama_refused(MISTRAL, "\"sliding_window\": 4", NULL, 0, CLT_EFORMAT,
                WORDS("\"sliding_window\": 4", "context of 8", "--context 4"));
  llama_refused(QWEN2, "\"use_sliding_window\": true, \"sliding_window\": 6", NULL, 0, CLT_EFORMAT,
                WORDS("sliding_window", "--context 6"));
  llama_refused(QWEN2, "\"sliding_window\": 6, \"layer_types\": [\"full_attention\", \"sliding_attention\"]", NULL,
                0, CLT_EFORMAT, WORDS("sliding_window", "--context 6"));
  llama_refused(LLAMA, "\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4}", NULL, 0, CLT_EFORMAT,
                WORDS("quantization_config"));
  llama_refused(LLAMA, "\"num_key_value_heads\": 3", NULL, 0, CLT_EFORMAT, WORDS("num_key_value_heads", "3"));
  llama_refused(LLAMA, "\"num_attention_heads\": 3", NULL, 0, CLT_EFORMAT, WORDS("num_attention_heads", "hidden_size"));
  llama_refused(LLAMA, NULL, "hidden_size", 0, CLT_EFORMAT, WORDS("hidden_size"));
  llama_refused(LLAMA, "\"rms_norm_eps\": \"small\"", NULL, 0, CLT_EFORMAT, WORDS("rms_norm_eps"));
  llama_refused(LLAMA, "\"tie_word_embeddings\": \"yes\"", NULL, 0, CLT_EFORMAT, WORDS("tie_word_embeddings"));
  llama_refused(LLAMA, "\"model_type\": \"gemma\", \"architectures\": [\"GemmaForCausalLM\"]", NULL, 0, CLT_EFORMAT,
                WORDS("model_type", "gemma", "LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM"));
  llama_refused(LLAMA, "\"is_encoder_decoder\": true", NULL, 0, CLT_EFORMAT, WORDS("is_encoder_decoder"));
  llama_refused(LLAMA, NULL, NULL, 9, CLT_EINVAL, WORDS("max_position_embeddings=8"));
  /* the window as long as the context is taken, and with --context below it */
  char dir[512], model[512], weights[512];
  hf_tensors h;
  hu_make_root();
  hl_write_dir("hf", MISTRAL, "\"sliding_window\": 4", NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  ck_assert_msg(clt_hf_import(dir, 4, model, weights) == CLT_OK, "%s", clt_last_error());
  hu_free(&h);
}
END_TEST

START_TEST(llama_tensors) {
  /* a shape that disagrees with the config: the file, the tensor, both shapes */
  llama_refused(&(llama_variant){.model_type = "llama", .bad_shape = "model.layers.1.self_attn.k_proj.weight"}, NULL,
                NULL, 0, CLT_ESHAPE,
                WORDS("model.safetensors", "model.layers.1.self_attn.k_proj.weight", "(9, 16)", "(8, 16)"));
  /* a config of 3 layers over a file of 2 */
  llama_refused(LLAMA, "\"num_hidden_layers\": 3", NULL, 0, CLT_ESHAPE,
                WORDS("model.safetensors", "model.layers.2.input_layernorm.weight"));
  /* Qwen2's q, k and v biases missing; an untied head missing */
  llama_refused(&(llama_variant){.model_type = "qwen2", .tied = 1, .skip = "model.layers.0.self_attn.v_proj.bias"},
                NULL, NULL, 0, CLT_ESHAPE, WORDS("model.safetensors", "model.layers.0.self_attn.v_proj.bias",
                                                 "Qwen2ForCausalLM"));
  llama_refused(QWEN2, "\"tie_word_embeddings\": false", NULL, 0, CLT_ESHAPE, WORDS("model.safetensors", "lm_head.weight"));
  /* Llama's attention_bias with files without biases */
  llama_refused(LLAMA, "\"attention_bias\": true", NULL, 0, CLT_ESHAPE,
                WORDS("model.safetensors", "model.layers.0.self_attn.q_proj.bias"));
}
END_TEST

/* A missing shard, and a tensor of a dtype cltrain does not read. */
START_TEST(llama_files) {
  char dir[512], model[512], weights[512], path[1024];
  hf_tensors h;
  hu_make_root();
  hl_write_dir("hf", LLAMA, NULL, NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  hu_write_sharded(&h, dir, "model-00003-of-00003.safetensors");
  ck_assert_int_eq(clt_hf_import(dir, 0, model, weights), CLT_ENOTFOUND);
  ck_assert_msg(strstr(clt_last_error(), "model.safetensors.index.json puts 'model.layers.1.") &&
                strstr(clt_last_error(), "model-00003-of-00003.safetensors"), "%s", clt_last_error());
  ck_assert_int_eq(access(weights, F_OK), -1);
  /* F64 */
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *f = fopen(path, "wb");
  const char *hdr = "{\"model.embed_tokens.weight\":{\"dtype\":\"F64\",\"shape\":[32,16],\"data_offsets\":[0,4096]}}";
  size_t len = strlen(hdr), padded = (len + 7) / 8 * 8;
  for (int b = 0; b < 8; b++) fputc((int)(padded >> (8 * b)) & 0xff, f);
  fputs(hdr, f);
  for (size_t k = len; k < padded; k++) fputc(' ', f);
  for (int k = 0; k < 4096; k++) fputc(0, f);
  fclose(f);
  ck_assert_int_eq(clt_hf_import(dir, 0, model, weights), CLT_EFORMAT);
  ck_assert_msg(strstr(clt_last_error(), path) && strstr(clt_last_error(), "model.embed_tokens.weight") &&
                strstr(clt_last_error(), "F64"), "%s", clt_last_error());
  ck_assert_int_eq(access(weights, F_OK), -1);
  /* config.json that is not JSON */
  snprintf(path, sizeof path, "%s/config.json", dir);
  hu_write_file(path, "{\"model_type\": \"llama\",");
  ck_assert_int_eq(clt_hf_import(dir, 0, model, weights), CLT_EFORMAT);
  ck_assert_msg(strstr(clt_last_error(), path) && strstr(clt_last_error(), "not JSON"), "%s", clt_last_error());
  hu_free(&h);
}
END_TEST

/* Export refusals: a class that cannot hold the spec, a class not in the
 * table, a tokenizer without files or that is the output itself. */
static void export_llama_refused(const llama_variant *v, clt_hf_export_options *o, int code, const char *const *words) {
  char dir[512], model[512], weights[512], out[512];
  hf_tensors h;
  hu_make_root();
  hl_write_dir("hf", v, NULL, NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  ck_assert_msg(clt_hf_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
  snprintf(out, sizeof out, "%s/exported", hu_root);
  const char *asked = o->tokenizer;
  char empty[600], tok[1024];
  if (asked && strcmp(asked, "OUT") == 0) { /* the tokenizer's directory is the output */
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    hu_write_file(tok, "{}\n");
    o->tokenizer = dir;
    snprintf(out, sizeof out, "%s", dir);
  } else if (asked && strcmp(asked, "EMPTY") == 0) { /* a directory without a tokenizer */
    snprintf(empty, sizeof empty, "%s/empty", hu_root);
    ck_assert_int_eq(mkdir(empty, 0777), 0);
    o->tokenizer = empty;
  }
  int rc = clt_hf_export(model, weights, out, o);
  ck_assert_msg(rc == code, "export: %d (%s), expected %d", rc, clt_last_error(), code);
  for (int i = 0; words[i]; i++)
    ck_assert_msg(strstr(clt_last_error(), words[i]), "'%s' is not in: %s", words[i], clt_last_error());
  if (strcmp(out, dir) != 0) ck_assert_int_eq(access(out, F_OK), -1);
  o->tokenizer = asked;
  hu_free(&h);
  hu_teardown();
}

START_TEST(llama_export) {
  clt_hf_export_options o;
  clt_hf_export_options_defaults(&o);
  o.hf_class = "Qwen2ForCausalLM"; /* Llama without biases as Qwen2 */
  export_llama_refused(LLAMA, &o, CLT_EFORMAT, (const char *[]){"m.model:11", "bias=none", "Qwen2ForCausalLM",
                                                                "bias=qkv", NULL});
  o.hf_class = "LlamaForCausalLM"; /* Qwen2's q, k and v biases as Llama */
  export_llama_refused(QWEN2, &o, CLT_EFORMAT, (const char *[]){"m.model:11", "bias=qkv", "LlamaForCausalLM",
                                                                "attention_bias", NULL});
  o.hf_class = "mistral"; /* Llama's MLP biases as Mistral */
  export_llama_refused(&(llama_variant){.model_type = "llama", .mlp_bias = 1}, &o, CLT_EFORMAT,
                       (const char *[]){"m.model:14", "swiglu", "MistralForCausalLM", NULL});
  o.hf_class = "GPT2LMHeadModel"; /* Llama's structure as GPT-2 */
  export_llama_refused(LLAMA, &o, CLT_EFORMAT, (const char *[]){"m.model:10", "rmsnorm", "GPT-2", NULL});
  o.hf_class = "GemmaForCausalLM";
  export_llama_refused(LLAMA, &o, CLT_EINVAL, (const char *[]){"GemmaForCausalLM", "LlamaForCausalLM", NULL});
  o.hf_class = NULL;
  o.tokenizer = "/nonexistent/tokenizer";
  export_llama_refused(LLAMA, &o, CLT_ENOTFOUND, (const char *[]){"/nonexistent/tokenizer", "--tokenizer", NULL});
  o.tokenizer = "EMPTY";
  export_llama_refused(LLAMA, &o, CLT_ENOTFOUND, (const char *[]){"/empty: no tokenizer.json", NULL});
  o.tokenizer = "OUT";
  export_llama_refused(LLAMA, &o, CLT_EINVAL, (const char *[]){"would replace", "export into another directory", NULL});
}
END_TEST

int main(void) {
  Suite *s = suite_create("hf_refusals");
  TCase *tc = tcase_create("gpt2");
  tcase_add_test(tc, bad_configs);
  tcase_add_test(tc, bad_tensors);
  tcase_add_test(tc, export_structure);
  tcase_add_checked_fixture(tc, NULL, hu_teardown);
  suite_add_tcase(s, tc);
  TCase *tl = tcase_create("llama");
  tcase_add_test(tl, llama_configs);
  tcase_add_test(tl, llama_tensors);
  tcase_add_test(tl, llama_files);
  tcase_add_test(tl, llama_export);
  tcase_add_checked_fixture(tl, NULL, hu_teardown);
  suite_add_tcase(s, tl);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
