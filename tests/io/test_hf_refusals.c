/*
 * test_hf_refusals.c: every bad input of Hugging Face GPT-2 import and
 * export is refused with a message naming the file and the key, tensor or
 * line, and nothing is written: an unsupported or malformed config key, a
 * missing or misshapen tensor, a missing file, a spec without GPT-2's
 * structure. No device, no Python.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hfutil.h"

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

int main(void) {
  Suite *s = suite_create("hf_refusals");
  TCase *tc = tcase_create("gpt2");
  tcase_add_test(tc, bad_configs);
  tcase_add_test(tc, bad_tensors);
  tcase_add_test(tc, export_structure);
  tcase_add_checked_fixture(tc, NULL, hu_teardown);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
