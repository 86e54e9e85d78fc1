/*
 * test_hf_llama.c: Hugging Face import and export of LlamaForCausalLM,
 * Qwen2ForCausalLM and MistralForCausalLM without Python and without a
 * device. A directory is written here by hand (hfllama.h), imported,
 * exported and imported again: the imported tensors are transformers' bit
 * for bit under the spec's layers, the export writes them back under
 * transformers' names with the config of the class the import recorded,
 * and the tokenizer's files beside them. Also: bfloat16 and float16 export
 * rounded to nearest even (ties included) and a float16 overflow refused,
 * the class chosen from the spec's structure or asked for, LlamaModel's
 * names, older files' inv_freq buffers, a shorter context, shards and
 * half-precision files. (test_hf_refusals has the bad inputs;
 * tests/io/hf_llama_check.sh compares against transformers itself.)
 */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "hfllama.h"

static void paths(const char *stem, char *model, char *weights, size_t len) {
  snprintf(model, len, "%s/%s.model", hu_root, stem);
  snprintf(weights, len, "%s/%s.safetensors", hu_root, stem);
}

static json_t *read_json(const char *dir, const char *file) {
  char path[1024];
  json_error_t err;
  snprintf(path, sizeof path, "%s/%s", dir, file);
  json_t *j = json_load_file(path, 0, &err);
  ck_assert_msg(j != NULL, "%s: %s", path, err.text);
  return j;
}

static void import_ok(const char *dir, int context, const char *model, const char *weights) {
  ck_assert_msg(clt_hf_import(dir, context, model, weights) == CLT_OK, "%s", clt_last_error());
}

static void export_ok(const char *model, const char *weights, const char *out, clt_hf_export_options *o) {
  ck_assert_msg(clt_hf_export(model, weights, out, o) == CLT_OK, "%s", clt_last_error());
}

/* Import v's directory, export it, import the export; check all three. */
static void round_trip(const llama_variant *v, const char *attention) {
  char dir[512], model[512], weights[512], out[512], st[1024], model2[512], weights2[512], real[PATH_MAX];
  hf_tensors h;
  hu_make_root();
  hl_write_dir("hf", v, NULL, NULL, &h, dir, sizeof dir);
  paths("m", model, weights, sizeof model);
  import_ok(dir, 0, model, weights);
  hl_same_imported(&h, weights);
  /* the spec: the class's shape, and the record export reads */
  const char *text = hu_slurp(model);
  char want[PATH_MAX + 128];
  ck_assert_ptr_nonnull(realpath(dir, real));
  snprintf(want, sizeof want, "# hf-class: %s\n# hf-source: %s\n", hl_class(v->model_type), real);
  ck_assert_msg(strstr(text, want), "no '%s' in:\n%s", want, text);
  ck_assert_msg(strstr(text, attention), "no '%s' in:\n%s", attention, text);
  ck_assert_ptr_nonnull(strstr(text, "input tokens 8 vocab=32\n"));
  ck_assert_ptr_nonnull(strstr(text, "  rmsnorm eps=1e-06\n"));
  ck_assert_ptr_nonnull(strstr(text, v->mlp_bias ? "  swiglu 24 bias=true\n" : "  swiglu 24\n"));
  ck_assert_ptr_nonnull(strstr(text, v->tied ? "linear 32 tie=embed_tokens bias=false\n" : "linear 32 bias=false\n"));
  ck_assert_ptr_null(strstr(text, "hf-max-positions")); /* the whole context */

  /* Export, as recorded: the class, the tensors bit for bit. */
  snprintf(out, sizeof out, "%s/exported", hu_root);
  clt_hf_export_options o;
  clt_hf_export_options_defaults(&o);
  o.no_tokenizer = 1;
  export_ok(model, weights, out, &o);
  ck_assert_str_eq(o.written_class, hl_class(v->model_type));
  snprintf(st, sizeof st, "%s/model.safetensors", out);
  if (!v->no_prefix && !v->inv_freq) hu_same_tensors(&h, st, 0);
  json_t *j = read_json(out, "config.json");
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                   hl_class(v->model_type));
  ck_assert_str_eq(json_string_value(json_object_get(j, "model_type")), v->model_type);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "hidden_size")), LC);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "intermediate_size")), LI);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "num_hidden_layers")), LL);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "num_attention_heads")), LH);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "num_key_value_heads")), LKV);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "max_position_embeddings")), LT);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "vocab_size")), LV);
  ck_assert(json_real_value(json_object_get(j, "rms_norm_eps")) == 1e-6);
  ck_assert(json_real_value(json_object_get(j, "rope_theta")) == 10000.0);
  ck_assert(json_is_true(json_object_get(j, "tie_word_embeddings")) == v->tied);
  ck_assert_str_eq(json_string_value(json_object_get(j, "hidden_act")), "silu");
  ck_assert_str_eq(json_string_value(json_object_get(j, "torch_dtype")), "float32");
  if (strcmp(v->model_type, "llama") == 0) {
    ck_assert(json_is_true(json_object_get(j, "attention_bias")) == v->attn_bias);
    ck_assert(json_is_true(json_object_get(j, "mlp_bias")) == v->mlp_bias);
  } else {
    ck_assert(json_is_null(json_object_get(j, "sliding_window")));
  }
  json_decref(j);

  /* And back: the same cltrain weights, bit for bit. */
  paths("m2", model2, weights2, sizeof model2);
  import_ok(out, 0, model2, weights2);
  hl_same_imported(&h, weights2);
  hu_free(&h);
}

START_TEST(round_trips) {
  round_trip(&(llama_variant){.model_type = "llama"},
             "  attention heads=4 kv_heads=2 rope_theta=10000 bias=none\n");
  hu_teardown();
  round_trip(&(llama_variant){.model_type = "qwen2", .tied = 1},
             "  attention heads=4 kv_heads=2 rope_theta=10000 bias=qkv\n");
  hu_teardown();
  round_trip(&(llama_variant){.model_type = "mistral"},
             "  attention heads=4 kv_heads=2 rope_theta=10000 bias=none\n");
  hu_teardown();
  /* Llama with attention_bias and mlp_bias, LlamaModel's names, older
   * files' inv_freq buffers */
  round_trip(&(llama_variant){.model_type = "llama", .attn_bias = 1, .mlp_bias = 1, .tied = 1, .no_prefix = 1,
                              .inv_freq = 1},
             "  attention heads=4 kv_heads=2 rope_theta=10000 bias=all\n");
}
END_TEST

/* rope_scaling llama3 reaches the spec and comes back in config.json. */
START_TEST(rope_scaling_llama3) {
  char dir[512], model[512], weights[512], out[512];
  hf_tensors h;
  hu_make_root();
  hl_write_dir("hf", &(llama_variant){.model_type = "llama"},
               "\"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, "
               "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}",
               NULL, &h, dir, sizeof dir);
  paths("m", model, weights, sizeof model);
  import_ok(dir, 0, model, weights);
  ck_assert_ptr_nonnull(strstr(hu_slurp(model), "  attention heads=4 kv_heads=2 rope_theta=500000 rope_scaling=llama3 "
                                                "factor=8 low_freq_factor=1 high_freq_factor=4 "
                                                "original_max_position_embeddings=8192 bias=none\n"));
  snprintf(out, sizeof out, "%s/exported", hu_root);
  export_ok(model, weights, out, NULL);
  json_t *j = read_json(out, "config.json"), *s = json_object_get(j, "rope_scaling");
  ck_assert_str_eq(json_string_value(json_object_get(s, "rope_type")), "llama3");
  ck_assert(json_real_value(json_object_get(s, "factor")) == 8.0);
  ck_assert(json_real_value(json_object_get(s, "low_freq_factor")) == 1.0);
  ck_assert(json_real_value(json_object_get(s, "high_freq_factor")) == 4.0);
  ck_assert_int_eq(json_integer_value(json_object_get(s, "original_max_position_embeddings")), 8192);
  ck_assert(json_real_value(json_object_get(j, "rope_theta")) == 500000.0);
  json_decref(j);
  /* "type" (older configs' key) and "default" (no scaling) read too */
  hu_free(&h);
  hu_teardown();
  hu_make_root();
  hl_write_dir("hf", &(llama_variant){.model_type = "llama"}, "\"rope_scaling\": {\"type\": \"default\"}", NULL, &h,
               dir, sizeof dir);
  paths("m", model, weights, sizeof model);
  import_ok(dir, 0, model, weights);
  ck_assert_ptr_nonnull(strstr(hu_slurp(model), "rope_theta=10000 bias=none\n"));
  hu_free(&h);
}
END_TEST

/* bfloat16's RNE by its definition: of the two neighbours the nearer, on a
 * tie the one whose last kept bit is 0. */
static uint16_t bf16_reference(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float flo, fhi;
  memcpy(&flo, &lo, 4);
  memcpy(&fhi, &hi, 4);
  double dlo = fabs((double)x - flo), dhi = fabs((double)fhi - x);
  if (dlo < dhi || (dlo == dhi && !(lo & 0x10000u))) return (uint16_t)(lo >> 16);
  return (uint16_t)(hi >> 16);
}

/* Export in bf16 and f16: each value the nearest, ties to even; the raw
 * bits are read back from the file. */
START_TEST(export_dtypes) {
  char dir[512], model[512], weights[512], out[512], st[1024];
  hf_tensors h;
  hu_make_root();
  llama_variant v = {.model_type = "llama"};
  hl_write_dir("hf", &v, NULL, NULL, &h, dir, sizeof dir);
  /* ties: 1 + 2^-8 lies halfway between bfloat16's 1 and 1 + 2^-7 (to 1),
   * 1 + 3 2^-8 between 1 + 2^-7 and 1 + 2^-6 (to 1 + 2^-6, the even one);
   * 1 + 2^-11 halfway between float16's 1 and 1 + 2^-10 (to 1) */
  float ties[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -1.0f - 0x1p-8f};
  memcpy(h.data[0], ties, sizeof ties);
  snprintf(st, sizeof st, "%s/model.safetensors", dir);
  const char *meta[] = {"format", "pt", NULL};
  ck_assert_int_eq(clt__st_write(st, h.t, h.n, meta), CLT_OK);
  paths("m", model, weights, sizeof model);
  import_ok(dir, 0, model, weights);
  for (int d = CLT_HF_BF16; d <= CLT_HF_F16; d++) {
    snprintf(out, sizeof out, "%s/exported-%d", hu_root, d);
    clt_hf_export_options o;
    clt_hf_export_options_defaults(&o);
    o.dtype = (clt_hf_dtype)d;
    export_ok(model, weights, out, &o);
    json_t *j = read_json(out, "config.json");
    ck_assert_str_eq(json_string_value(json_object_get(j, "torch_dtype")), d == CLT_HF_BF16 ? "bfloat16" : "float16");
    json_decref(j);
    snprintf(st, sizeof st, "%s/model.safetensors", out);
    clt__st_file *f;
    ck_assert_msg(clt__st_open(st, &f) == CLT_OK, "%s", clt_last_error());
    for (int i = 0; i < h.n; i++) {
      clt__st_tensor t;
      ck_assert_int_eq(clt__st_find(f, h.t[i].name, &t), CLT_OK);
      ck_assert_int_eq(t.dtype, d == CLT_HF_BF16 ? CLT__ST_BF16 : CLT__ST_F16);
      int64_t count = t.ndim > 1 ? t.shape[0] * t.shape[1] : t.shape[0];
      float *x = malloc((size_t)count * sizeof *x);
      ck_assert_int_eq(clt__st_read(f, &t, x, count), CLT_OK);
      for (int64_t k = 0; k < count; k++) {
        float want;
        if (d == CLT_HF_BF16) {
          uint32_t bits = (uint32_t)bf16_reference(h.data[i][k]) << 16;
          memcpy(&want, &bits, 4);
        } else {
#ifdef __FLT16_MAX__
          want = (float)(_Float16)h.data[i][k]; /* the compiler's conversion: round to nearest even */
#else
          want = clt__float_from_half(clt__half_from_float(h.data[i][k])); /* (the ties are checked below) */
#endif
        }
        ck_assert_msg(x[k] == want, "%s[%lld]: %a stored as %a, not %a (%s)", h.t[i].name, (long long)k,
                      (double)h.data[i][k], (double)x[k], (double)want, d == CLT_HF_BF16 ? "bf16" : "f16");
      }
      free(x);
    }
    clt__st_close(f);
  }
  /* the ties themselves */
  float *x = hu_read_tensor(st, "model.embed_tokens.weight", (int64_t[2]){0}, &(int){0});
  ck_assert(x[2] == 1.0f && x[3] == 1.0f + 0x1p-9f); /* float16: 1 + 3 2^-11 to 1 + 2^-9 (even) */
  free(x);
  snprintf(out, sizeof out, "%s/exported-%d", hu_root, CLT_HF_BF16);
  snprintf(st, sizeof st, "%s/model.safetensors", out);
  x = hu_read_tensor(st, "model.embed_tokens.weight", (int64_t[2]){0}, &(int){0});
  ck_assert(x[0] == 1.0f && x[1] == 1.0f + 0x1p-6f && x[4] == -1.0f);
  free(x);
  hu_free(&h);
}
END_TEST

/* A float16 export of a value beyond 65504 is refused naming the tensor;
 * nothing is written. bfloat16 holds it. */
START_TEST(f16_overflow) {
  char dir[512], model[512], weights[512], out[512];
  hf_tensors h;
  hu_make_root();
  hl_write_dir("hf", &(llama_variant){.model_type = "qwen2", .tied = 1}, NULL, NULL, &h, dir, sizeof dir);
  h.data[3][5] = 70000.0f; /* model.layers.0.self_attn.k_proj.weight */
  char st[1024];
  snprintf(st, sizeof st, "%s/model.safetensors", dir);
  const char *meta[] = {"format", "pt", NULL};
  ck_assert_int_eq(clt__st_write(st, h.t, h.n, meta), CLT_OK);
  paths("m", model, weights, sizeof model);
  import_ok(dir, 0, model, weights);
  snprintf(out, sizeof out, "%s/exported", hu_root);
  clt_hf_export_options o;
  clt_hf_export_options_defaults(&o);
  o.dtype = CLT_HF_F16;
  ck_assert_int_eq(clt_hf_export(model, weights, out, &o), CLT_ENONFINITE);
  ck_assert_msg(strstr(clt_last_error(), "model.layers.0.self_attn.k_proj.weight") &&
                strstr(clt_last_error(), "65504") && strstr(clt_last_error(), "--dtype bf16"), "%s",
                clt_last_error());
  ck_assert_int_eq(access(out, F_OK), -1);
  o.dtype = CLT_HF_BF16;
  export_ok(model, weights, out, &o);
  hu_free(&h);
}
END_TEST

static void write_tokenizer(const char *dir, const char *tag) {
  char path[1024], text[256];
  const char *files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    snprintf(text, sizeof text, "{\"file\": \"%s\", \"from\": \"%s\"}\n", files[i], tag);
    hu_write_file(path, text);
  }
}

static int same_file_text(const char *a_dir, const char *b_dir, const char *file) {
  char a[1024], b[1024];
  snprintf(a, sizeof a, "%s/%s", a_dir, file);
  snprintf(b, sizeof b, "%s/%s", b_dir, file);
  char *x = strdup(hu_slurp(a));
  int same = strcmp(x, hu_slurp(b)) == 0;
  free(x);
  return same;
}

static char logged[4096];

static void keep_log(clt_log_level level, const char *msg, void *user) {
  (void)user;
  if (level <= CLT_LOG_WARN) snprintf(logged + strlen(logged), sizeof logged - strlen(logged), "%s\n", msg);
}

/* The tokenizer's files: copied from the imported directory, from another
 * one, as a single tokenizer.json, or not at all. */
START_TEST(tokenizer_files) {
  char dir[512], other[512], model[512], weights[512], out[512], path[1024];
  hf_tensors h;
  hu_make_root();
  hl_write_dir("hf", &(llama_variant){.model_type = "llama"}, "\"bos_token_id\": 128000, \"eos_token_id\": [128001, "
               "128009]", NULL, &h, dir, sizeof dir);
  write_tokenizer(dir, "imported");
  paths("m", model, weights, sizeof model);
  import_ok(dir, 0, model, weights);
  /* as recorded */
  snprintf(out, sizeof out, "%s/out1", hu_root);
  clt_hf_export_options o;
  clt_hf_export_options_defaults(&o);
  export_ok(model, weights, out, &o);
  ck_assert_int_eq(o.tokenizer_files, 3);
  ck_assert(same_file_text(dir, out, "tokenizer.json") && same_file_text(dir, out, "tokenizer_config.json") &&
            same_file_text(dir, out, "special_tokens_map.json"));
  json_t *j = read_json(out, "config.json");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "bos_token_id")), 128000);
  ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(j, "eos_token_id"), 1)), 128009);
  json_decref(j);
  /* another directory */
  snprintf(other, sizeof other, "%s/tok", hu_root);
  ck_assert_int_eq(mkdir(other, 0777), 0);
  write_tokenizer(other, "other");
  snprintf(out, sizeof out, "%s/out2", hu_root);
  o.tokenizer = other;
  export_ok(model, weights, out, &o);
  ck_assert(same_file_text(other, out, "tokenizer.json") && same_file_text(other, out, "special_tokens_map.json"));
  snprintf(path, sizeof path, "%s/config.json", out);
  ck_assert_ptr_null(strstr(hu_slurp(path), "128000")); /* the other directory has no config.json */
  /* one tokenizer.json */
  snprintf(out, sizeof out, "%s/out3", hu_root);
  snprintf(path, sizeof path, "%s/tokenizer.json", other);
  o.tokenizer = path;
  export_ok(model, weights, out, &o);
  ck_assert_int_eq(o.tokenizer_files, 1);
  ck_assert(same_file_text(other, out, "tokenizer.json"));
  snprintf(path, sizeof path, "%s/tokenizer_config.json", out);
  ck_assert_int_eq(access(path, F_OK), -1);
  /* none */
  snprintf(out, sizeof out, "%s/out4", hu_root);
  o.tokenizer = NULL;
  o.no_tokenizer = 1;
  export_ok(model, weights, out, &o);
  ck_assert_int_eq(o.tokenizer_files, 0);
  snprintf(path, sizeof path, "%s/tokenizer.json", out);
  ck_assert_int_eq(access(path, F_OK), -1);
  /* the recorded directory gone: a warning naming it, and no tokenizer */
  hu_rm_rf(dir);
  clt_log_set(keep_log, NULL);
  logged[0] = 0;
  snprintf(out, sizeof out, "%s/out5", hu_root);
  o.no_tokenizer = 0;
  export_ok(model, weights, out, &o);
  clt_log_set(NULL, NULL);
  ck_assert_int_eq(o.tokenizer_files, 0);
  ck_assert_msg(strstr(logged, dir) && strstr(logged, "no tokenizer") && strstr(logged, "--tokenizer"), "%s", logged);
  hu_free(&h);
}
END_TEST

/* The spec without its hf- lines (a Llama written by hand, say): the
 * class follows its structure, or is asked for. */
START_TEST(class_choice) {
  char dir[512], model[512], weights[512], bare[512], out[512];
  const struct { const char *type; int tied; const char *asked, *want; int recorded; } cases[] = {
      {"qwen2", 1, NULL, "Qwen2ForCausalLM", 0},         /* q, k and v biases */
      {"llama", 0, NULL, "LlamaForCausalLM", 0},         /* none */
      {"llama", 0, "mistral", "MistralForCausalLM", 0},  /* asked for */
      {"mistral", 0, "LlamaForCausalLM", "LlamaForCausalLM", 1}, /* asked for over the record */
      {"mistral", 0, NULL, "MistralForCausalLM", 1},     /* the record */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    hf_tensors h;
    hu_make_root();
    hl_write_dir("hf", &(llama_variant){.model_type = cases[c].type, .tied = cases[c].tied}, NULL, NULL, &h, dir,
                 sizeof dir);
    paths("m", model, weights, sizeof model);
    import_ok(dir, 0, model, weights);
    const char *text = hu_slurp(model);
    snprintf(bare, sizeof bare, "%s/bare.model", hu_root);
    hu_write_file(bare, strstr(text, "input tokens")); /* no comment, no record */
    snprintf(out, sizeof out, "%s/exported", hu_root);
    clt_hf_export_options o;
    clt_hf_export_options_defaults(&o);
    o.hf_class = cases[c].asked;
    export_ok(cases[c].recorded ? model : bare, weights, out, &o);
    ck_assert_str_eq(o.written_class, cases[c].want);
    json_t *j = read_json(out, "config.json");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)), cases[c].want);
    json_decref(j);
    hu_free(&h);
    hu_teardown();
  }
  /* examples/llama_tiny.model is LlamaForCausalLM's structure: its export
   * gets as far as reading the weights */
  char tiny[1024];
  snprintf(tiny, sizeof tiny, "%s/examples/llama_tiny.model", SRCDIR);
  int rc = clt_hf_export(tiny, "/nonexistent/w.safetensors", "/nonexistent/out", NULL);
  ck_assert_msg(rc == CLT_ENOTFOUND && strstr(clt_last_error(), "/nonexistent/w.safetensors"), "%d %s", rc,
                clt_last_error());
  snprintf(tiny, sizeof tiny, "%s/examples/smollm2_135m.model", SRCDIR);
  rc = clt_hf_export(tiny, "/nonexistent/w.safetensors", "/nonexistent/out", NULL);
  ck_assert_msg(rc == CLT_ENOTFOUND, "%d %s", rc, clt_last_error());
}
END_TEST

/* A shorter context: the spec's input and the record of the whole; the
 * export's max_position_embeddings is the whole again. */
START_TEST(shorter_context) {
  char dir[512], model[512], weights[512], out[512];
  hf_tensors h;
  hu_make_root();
  hl_write_dir("hf", &(llama_variant){.model_type = "mistral"}, NULL, NULL, &h, dir, sizeof dir);
  paths("m", model, weights, sizeof model);
  import_ok(dir, 4, model, weights);
  const char *text = hu_slurp(model);
  ck_assert_ptr_nonnull(strstr(text, "input tokens 4 vocab=32\n"));
  ck_assert_ptr_nonnull(strstr(text, "# hf-max-positions: 8\n"));
  snprintf(out, sizeof out, "%s/exported", hu_root);
  export_ok(model, weights, out, NULL);
  json_t *j = read_json(out, "config.json");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "max_position_embeddings")), 8);
  json_decref(j);
  ck_assert_int_eq(clt_hf_import(dir, 9, model, weights), CLT_EINVAL);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "max_position_embeddings=8"));
  hu_free(&h);
}
END_TEST

/* Shards and half-precision files import as the whole float32 file of the
 * same values; tensors of other heads are left out with a warning, the
 * inv_freq buffers of older files without one. */
START_TEST(files) {
  char dir[512], model[512], weights[512], model2[512], weights2[512], st[1024];
  hf_tensors h;
  hu_make_root();
  hl_write_dir("hf", &(llama_variant){.model_type = "llama", .inv_freq = 1}, NULL, NULL, &h, dir, sizeof dir);
  paths("whole", model, weights, sizeof model);
  clt_log_set(keep_log, NULL);
  logged[0] = 0;
  import_ok(dir, 0, model, weights);
  ck_assert_msg(logged[0] == 0, "warned: %s", logged);
  hu_write_sharded(&h, dir, "model-00002-of-00002.safetensors");
  paths("sharded", model2, weights2, sizeof model2);
  import_ok(dir, 0, model2, weights2);
  hl_same_imported(&h, weights2);
  for (int bf16 = 0; bf16 < 2; bf16++) {
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    char index[1024];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    unlink(index);
    hu_write_half(&h, st, bf16); /* h's values become the widened ones */
    paths("half", model2, weights2, sizeof model2);
    import_ok(dir, 0, model2, weights2);
    hl_same_imported(&h, weights2);
  }
  hu_free(&h);
  hu_teardown();
  hu_make_root();
  hl_write_dir("hf", &(llama_variant){.model_type = "qwen2", .tied = 1, .extra = "score.weight"}, NULL, NULL, &h, dir,
               sizeof dir);
  paths("m", model, weights, sizeof model);
  import_ok(dir, 0, model, weights);
  clt_log_set(NULL, NULL);
  ck_assert_msg(strstr(logged, "1 tensor(s) that are not part of Qwen2ForCausalLM") && strstr(logged, "score.weight"),
                "%s", logged);
  hu_free(&h);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hf_llama");
  TCase *tc = tcase_create("llama");
  tcase_add_test(tc, round_trips);
  tcase_add_test(tc, rope_scaling_llama3);
  tcase_add_test(tc, export_dtypes);
  tcase_add_test(tc, f16_overflow);
  tcase_add_test(tc, tokenizer_files);
  tcase_add_test(tc, class_choice);
  tcase_add_test(tc, shorter_context);
  tcase_add_test(tc, files);
  tcase_add_checked_fixture(tc, NULL, hu_teardown);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
