/*
 * test_hf.c: Hugging Face GPT-2 import and export without Python and
 * without a device. A GPT-2 directory is written here by hand (hfutil.h),
 * imported, exported and imported again: the exported tensors are GPT-2's
 * bit for bit, the second import cltrain's; Conv1D weights land
 * transposed. The variants: no "transformer." prefix, an untied head, a
 * narrower MLP, the mask buffers of older files, another epsilon and a
 * shorter context, half precision, shards, tensors of other heads, dropout
 * in the spec, the GPT examples. (test_hf_refusals has the bad inputs;
 * tests/io/hf_check.sh compares against transformers itself.)
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hfutil.h"

/* Import h's directory, export it, import the export; check all three. */
static void round_trip(const char *name, const variant *v) {
  char dir[512], model[512], weights[512], out[512], st[1024], model2[512], weights2[512];
  hf_tensors h;
  hu_make_root();
  hu_write_hf(name, v, NULL, NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());

  /* cltrain's tensors: the Conv1D weights transposed, the rest as they were. */
  clt_model *m;
  ck_assert_msg(clt_model_load(model, &m) == CLT_OK, "%s", clt_last_error());
  int64_t want = (int64_t)V * C + P * C + 2 * C +
                 L * (4 * C + 3 * C * C + 3 * C + C * C + C + 2 * C * v->inner + v->inner + C) +
                 (v->untied ? (int64_t)V * C : 0);
  ck_assert_int_eq(clt_model_param_count(m), want);
  clt_model_destroy(m);
  int64_t shape[2];
  int ndim;
  char hfname[128];
  float *qkv = hu_read_tensor(weights, "3.qkv.weight", shape, &ndim); /* block 0's attention is layer 4 */
  ck_assert(ndim == 2 && shape[0] == 3 * C && shape[1] == C);
  snprintf(hfname, sizeof hfname, "%sh.0.attn.c_attn.weight", v->prefix);
  const float *src = NULL;
  for (int i = 0; i < h.n; i++)
    if (strcmp(h.t[i].name, hfname) == 0) src = h.t[i].data;
  ck_assert_ptr_nonnull(src);
  for (int o = 0; o < 3 * C; o++)
    for (int in = 0; in < C; in++) ck_assert(qkv[o * C + in] == src[in * 3 * C + o]);
  free(qkv);

  /* Export: GPT-2's own tensors, bit for bit, under "transformer.". */
  snprintf(out, sizeof out, "%s/exported", hu_root);
  ck_assert_msg(clt_hf_gpt2_export(model, weights, out) == CLT_OK, "%s", clt_last_error());
  snprintf(st, sizeof st, "%s/model.safetensors", out);
  if (v->prefix[0]) hu_same_tensors(&h, st, v->buffers);
  char cfg[1024];
  snprintf(cfg, sizeof cfg, "%s/config.json", out);
  json_error_t err;
  json_t *j = json_load_file(cfg, 0, &err);
  ck_assert_ptr_nonnull(j);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "n_embd")), C);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "n_head")), H);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "n_layer")), L);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "n_positions")), P);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "vocab_size")), V);
  ck_assert_str_eq(json_string_value(json_object_get(j, "model_type")), "gpt2");
  ck_assert(json_is_true(json_object_get(j, "tie_word_embeddings")) == !v->untied);
  ck_assert(json_real_value(json_object_get(j, "layer_norm_epsilon")) == 1e-5);
  if (v->inner == 4 * C) ck_assert(json_is_null(json_object_get(j, "n_inner")));
  else ck_assert_int_eq(json_integer_value(json_object_get(j, "n_inner")), v->inner);
  json_decref(j);

  /* And back: cltrain's weights again, bit for bit. */
  snprintf(model2, sizeof model2, "%s/m2.model", hu_root);
  snprintf(weights2, sizeof weights2, "%s/m2.safetensors", hu_root);
  ck_assert_msg(clt_hf_gpt2_import(out, 0, model2, weights2) == CLT_OK, "%s", clt_last_error());
  const char *names[] = {"0.weight", "1.weight", "2.weight", "2.bias", "3.qkv.weight", "3.qkv.bias", "3.proj.weight",
                         "3.proj.bias", "5.weight", "5.bias", "6.weight", "6.bias", "8.weight", "8.bias",
                         "10.weight", "11.qkv.weight", "11.proj.bias", "13.bias", "14.weight", "16.weight",
                         "16.bias", "18.weight", "18.bias", NULL};
  hu_same_files(weights, weights2, names);
  if (v->untied) hu_same_files(weights, weights2, (const char *[]){"19.weight", NULL});
  hu_free(&h);
}

START_TEST(round_trip_tied) {
  round_trip("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C});
  /* The spec is GPT-2's: 2 blocks of width 16, context 8, tied head. */
  char model[512];
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  const char *text = hu_slurp(model);
  ck_assert_ptr_nonnull(strstr(text, "input tokens 8 vocab=32\n"));
  ck_assert_ptr_nonnull(strstr(text, "block repeat=2\n"));
  ck_assert_ptr_nonnull(strstr(text, "attention heads=2\n"));
  ck_assert_ptr_nonnull(strstr(text, "linear 32 tie=wte bias=false\n"));
  ck_assert_ptr_null(strstr(text, "eps="));
}
END_TEST

START_TEST(round_trip_variants) {
  /* GPT2Model's names (no "transformer."), a narrower MLP, an untied head
   * and the mask buffers of older files. */
  round_trip("gpt2", &(variant){.prefix = "", .inner = 24, .untied = 1, .buffers = 1});
  hu_teardown();
  round_trip("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C, .buffers = 1});
}
END_TEST

START_TEST(context_and_eps) {
  char dir[512], model[512], weights[512];
  hf_tensors h;
  hu_make_root();
  hu_write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C}, "\"layer_norm_epsilon\": 1e-06", NULL, &h,
           dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 4, model, weights) == CLT_OK, "%s", clt_last_error());
  const char *text = hu_slurp(model);
  ck_assert_ptr_nonnull(strstr(text, "input tokens 4 vocab=32\n"));
  ck_assert_ptr_nonnull(strstr(text, "posembedding positions=8\n"));
  ck_assert_ptr_nonnull(strstr(text, "layernorm eps=9.99999997e-07\n"));
  /* exported back, the epsilon reads 1e-06 again */
  char out[512], cfg[1024];
  snprintf(out, sizeof out, "%s/exported", hu_root);
  ck_assert_msg(clt_hf_gpt2_export(model, weights, out) == CLT_OK, "%s", clt_last_error());
  snprintf(cfg, sizeof cfg, "%s/config.json", out);
  json_error_t err;
  json_t *j = json_load_file(cfg, 0, &err);
  ck_assert(json_real_value(json_object_get(j, "layer_norm_epsilon")) == 1e-6);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "n_positions")), 8);
  json_decref(j);
  /* a context longer than the position table */
  ck_assert_int_eq(clt_hf_gpt2_import(dir, 9, model, weights), CLT_EINVAL);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "n_positions"));
  hu_free(&h);
}
END_TEST

/* The GPT examples have GPT-2's structure: their export gets as far as
 * reading the weights. */
START_TEST(examples_fit) {
  const char *examples[] = {"gpt2_124m.model", "gpt_tiny.model", NULL};
  for (int i = 0; examples[i]; i++) {
    char model[1024];
    snprintf(model, sizeof model, "%s/examples/%s", SRCDIR, examples[i]);
    int rc = clt_hf_gpt2_export(model, "/nonexistent/w.safetensors", "/nonexistent/out");
    ck_assert_msg(rc == CLT_ENOTFOUND && strstr(clt_last_error(), "/nonexistent/w.safetensors"), "%s: %d (%s)",
                  examples[i], rc, clt_last_error());
  }
}
END_TEST

/* Dropout layers are the identity in evaluation: a spec with them exports
 * to the same GPT-2. Its weights are m.model's under the layer numbers the
 * dropout lines shift them to. */
START_TEST(export_with_dropout) {
  char dir[512], model[512], weights[512], model2[512], weights2[512], out[512], st[1024];
  hf_tensors h;
  hu_make_root();
  hu_write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C}, NULL, NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
  snprintf(model2, sizeof model2, "%s/d.model", hu_root);
  hu_write_file(model2, GPT_HEAD "dropout 0.1\nblock repeat=2\n layernorm\n attention heads=2\n dropout 0.1\n residual\n"
             " layernorm\n linear 64\n gelu\n linear 16\n dropout 0.1\n residual\nend\nlayernorm\n"
             "linear 32 tie=wte bias=false\n");
  /* m.model's layers with parameters, and how many dropouts d.model has before each */
  static const struct { int layer, shift; const char *param[4]; } moved[] = {
      {1, 0, {"weight"}}, {2, 0, {"weight"}}, {3, 1, {"weight", "bias"}},
      {4, 1, {"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}}, {6, 2, {"weight", "bias"}},
      {7, 2, {"weight", "bias"}}, {9, 2, {"weight", "bias"}}, {11, 3, {"weight", "bias"}},
      {12, 3, {"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}}, {14, 4, {"weight", "bias"}},
      {15, 4, {"weight", "bias"}}, {17, 4, {"weight", "bias"}}, {19, 5, {"weight", "bias"}}};
  clt__st_tensor t[MAXT];
  float *data[MAXT];
  int n = 0;
  for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++)
    for (int k = 0; k < 4 && moved[i].param[k]; k++) {
      char name[64];
      int64_t shape[2];
      int ndim;
      snprintf(name, sizeof name, "%d.%s", moved[i].layer - 1, moved[i].param[k]);
      data[n] = hu_read_tensor(weights, name, shape, &ndim);
      memset(&t[n], 0, sizeof t[n]);
      snprintf(t[n].name, sizeof t[n].name, "%d.%s", moved[i].layer - 1 + moved[i].shift, moved[i].param[k]);
      t[n].ndim = ndim;
      t[n].shape[0] = shape[0];
      t[n].shape[1] = shape[1];
      t[n].data = data[n];
      n++;
    }
  snprintf(weights2, sizeof weights2, "%s/d.safetensors", hu_root);
  ck_assert_int_eq(clt__st_write(weights2, t, n, NULL), CLT_OK);
  snprintf(out, sizeof out, "%s/exported", hu_root);
  ck_assert_msg(clt_hf_gpt2_export(model2, weights2, out) == CLT_OK, "%s", clt_last_error());
  snprintf(st, sizeof st, "%s/model.safetensors", out);
  hu_same_tensors(&h, st, 0);
  /* m.model's weights do not fit d.model: refused as another model's */
  hu_rm_rf(out);
  ck_assert_int_eq(clt_hf_gpt2_export(model2, weights, out), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "m.safetensors"));
  for (int i = 0; i < n; i++) free(data[i]);
  hu_free(&h);
}
END_TEST

/* A checkpoint split into shards imports as the whole file does. */
START_TEST(sharded_files) {
  char dir[512], model[512], weights[512], model2[512], weights2[512];
  hf_tensors h;
  hu_make_root();
  hu_write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C}, NULL, NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/whole.model", hu_root);
  snprintf(weights, sizeof weights, "%s/whole.safetensors", hu_root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
  hu_write_sharded(&h, dir, "model-00002-of-00002.safetensors");
  snprintf(model2, sizeof model2, "%s/sharded.model", hu_root);
  snprintf(weights2, sizeof weights2, "%s/sharded.safetensors", hu_root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model2, weights2) == CLT_OK, "%s", clt_last_error());
  const char *names[] = {"0.weight", "1.weight", "2.weight", "3.qkv.weight", "3.proj.bias", "6.weight",
                         "11.qkv.weight", "16.weight", "18.bias", NULL};
  hu_same_files(weights, weights2, names);
  /* an index naming a shard that is not there */
  hu_write_sharded(&h, dir, "model-00003-of-00003.safetensors");
  ck_assert_int_eq(clt_hf_gpt2_import(dir, 0, model2, weights2), CLT_ENOTFOUND);
  ck_assert_msg(strstr(clt_last_error(), "model-00003-of-00003.safetensors"), "%s", clt_last_error());
  /* an index putting the second half's tensors in the first shard, which
   * lacks them: the shard is named, not "the index has no tensor" */
  hu_write_sharded(&h, dir, "model-00001-of-00002.safetensors");
  ck_assert_int_eq(clt_hf_gpt2_import(dir, 0, model2, weights2), CLT_EFORMAT);
  ck_assert_msg(strstr(clt_last_error(), "model.safetensors.index.json puts '") &&
                strstr(clt_last_error(), "' in model-00001-of-00002.safetensors, but ") &&
                strstr(clt_last_error(), "/model-00001-of-00002.safetensors has no tensor '"), "%s", clt_last_error());
  fprintf(stderr, "refused as it should be: %s\n", clt_last_error());
  hu_free(&h);
}
END_TEST

static char logged[2048];

static void keep_log(clt_log_level level, const char *msg, void *user) {
  (void)user;
  if (level <= CLT_LOG_WARN) snprintf(logged + strlen(logged), sizeof logged - strlen(logged), "%s\n", msg);
}

/* Tensors of other heads are left out with a warning naming them; the mask
 * buffers of older files without one. */
START_TEST(other_tensors) {
  char dir[512], model[512], weights[512];
  hf_tensors h;
  clt_log_set(keep_log, NULL);
  hu_make_root();
  hu_write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C, .buffers = 1}, NULL, NULL, &h, dir,
           sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  logged[0] = 0;
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
  ck_assert_msg(logged[0] == 0, "warned: %s", logged);
  hu_free(&h);
  hu_teardown();
  hu_make_root();
  hu_write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C, .extra = "multiple_choice_head.summary.bias"},
           NULL, NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", hu_root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", hu_root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
  ck_assert_msg(strstr(logged, "model.safetensors: 1 tensor(s)") && strstr(logged, "multiple_choice_head.summary.bias"),
                "%s", logged);
  clt_log_set(NULL, NULL);
  hu_free(&h);
}
END_TEST

/* A checkpoint saved in half precision imports as the float32 of its
 * values: the same bits as a float32 file of those values. */
START_TEST(half_precision_files) {
  for (int bf16 = 0; bf16 < 2; bf16++) {
    char dir[512], st[1024], model[512], weights[512], model2[512], weights2[512];
    hf_tensors h;
    hu_make_root();
    hu_write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C}, NULL, NULL, &h, dir, sizeof dir);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    hu_write_half(&h, st, bf16);
    snprintf(model, sizeof model, "%s/half.model", hu_root);
    snprintf(weights, sizeof weights, "%s/half.safetensors", hu_root);
    ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
    const char *meta[] = {"format", "pt", NULL};
    ck_assert_int_eq(clt__st_write(st, h.t, h.n, meta), CLT_OK); /* the widened values as F32 */
    snprintf(model2, sizeof model2, "%s/full.model", hu_root);
    snprintf(weights2, sizeof weights2, "%s/full.safetensors", hu_root);
    ck_assert_msg(clt_hf_gpt2_import(dir, 0, model2, weights2) == CLT_OK, "%s", clt_last_error());
    const char *names[] = {"0.weight", "1.weight", "2.weight", "3.qkv.weight", "3.proj.bias", "6.weight",
                           "16.weight", "18.bias", NULL};
    hu_same_files(weights, weights2, names);
    hu_free(&h);
    hu_teardown();
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("hf");
  TCase *tc = tcase_create("gpt2");
  tcase_add_test(tc, round_trip_tied);
  tcase_add_test(tc, round_trip_variants);
  tcase_add_test(tc, context_and_eps);
  tcase_add_test(tc, examples_fit);
  tcase_add_test(tc, export_with_dropout);
  tcase_add_test(tc, half_precision_files);
  tcase_add_test(tc, sharded_files);
  tcase_add_test(tc, other_tensors);
  tcase_add_checked_fixture(tc, NULL, hu_teardown);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
