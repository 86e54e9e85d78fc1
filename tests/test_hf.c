/*
 * test_hf.c: Hugging Face GPT-2 import and export without Python and
 * without a device. A GPT-2 directory is written here by hand (config.json,
 * and model.safetensors with GPT-2's names and Conv1D layout, random
 * values), imported, exported and imported again: the exported tensors are
 * GPT-2's bit for bit, the second import cltrain's; Conv1D weights land
 * transposed. Then each bad input (an unsupported or malformed config key,
 * a missing or misshapen tensor, a spec without GPT-2's structure) is
 * refused with a message naming the file and the key, tensor or line.
 * (tests/hf_check.sh compares against transformers itself.)
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cltrain.h>

#include "internal.h"
#include "io/safetensors.h"

/* The small GPT-2 of these tests. */
enum { C = 16, H = 2, L = 2, P = 8, V = 32, MAXT = 64 };

static char root[256];

static void make_root(void) {
  snprintf(root, sizeof root, "/tmp/test_hf.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
}

static void rm_rf(const char *path) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  ck_assert_int_eq(system(cmd), 0);
}

static void teardown(void) {
  if (root[0]) rm_rf(root);
  root[0] = 0;
}

/* A random float in (-1, 1), from a fixed sequence. */
static float rnd(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) / 8388608.0 - 1.0);
}

typedef struct hf_tensors {
  clt__st_tensor t[MAXT];
  float *data[MAXT];
  int n;
} hf_tensors;

static void add(hf_tensors *h, const char *name, int64_t a, int64_t b, unsigned *seed) {
  clt__st_tensor *t = &h->t[h->n];
  int64_t count = b ? a * b : a;
  float *d = malloc((size_t)count * sizeof *d);
  ck_assert_ptr_nonnull(d);
  for (int64_t i = 0; i < count; i++) d[i] = rnd(seed);
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = b ? 2 : 1;
  t->shape[0] = a;
  t->shape[1] = b;
  t->data = d;
  h->data[h->n++] = d;
}

/* Options of the GPT-2 directory to write. */
typedef struct variant {
  const char *prefix;      /* "transformer." or "" */
  int inner;               /* the MLP's width */
  int untied;              /* an lm_head.weight of its own */
  int buffers;             /* attn.bias / attn.masked_bias, as older files have */
  const char *skip;        /* leave this tensor out */
  const char *bad_shape;   /* give this tensor one row too many */
  const char *extra;       /* one more tensor, of no GPT2LMHeadModel */
} variant;

/* GPT-2's tensors, in its (in, out) Conv1D layout. */
static void hf_make(hf_tensors *h, const variant *v) {
  unsigned seed = 12345;
  char name[128];
  memset(h, 0, sizeof *h);
#define ADD(a, b, ...)                                                                        \
  do {                                                                                        \
    snprintf(name, sizeof name, __VA_ARGS__);                                                 \
    if (v->skip && strcmp(name, v->skip) == 0) break;                                         \
    add(h, name, (a) + (v->bad_shape && strcmp(name, v->bad_shape) == 0), (b), &seed);        \
  } while (0)
  ADD(V, C, "%swte.weight", v->prefix);
  ADD(P, C, "%swpe.weight", v->prefix);
  for (int k = 0; k < L; k++) {
    ADD(C, 0, "%sh.%d.ln_1.weight", v->prefix, k);
    ADD(C, 0, "%sh.%d.ln_1.bias", v->prefix, k);
    ADD(C, 3 * C, "%sh.%d.attn.c_attn.weight", v->prefix, k);
    ADD(3 * C, 0, "%sh.%d.attn.c_attn.bias", v->prefix, k);
    ADD(C, C, "%sh.%d.attn.c_proj.weight", v->prefix, k);
    ADD(C, 0, "%sh.%d.attn.c_proj.bias", v->prefix, k);
    if (v->buffers) {
      ADD(P, P, "%sh.%d.attn.bias", v->prefix, k);
      ADD(1, 0, "%sh.%d.attn.masked_bias", v->prefix, k);
    }
    ADD(C, 0, "%sh.%d.ln_2.weight", v->prefix, k);
    ADD(C, 0, "%sh.%d.ln_2.bias", v->prefix, k);
    ADD(C, v->inner, "%sh.%d.mlp.c_fc.weight", v->prefix, k);
    ADD(v->inner, 0, "%sh.%d.mlp.c_fc.bias", v->prefix, k);
    ADD(v->inner, C, "%sh.%d.mlp.c_proj.weight", v->prefix, k);
    ADD(C, 0, "%sh.%d.mlp.c_proj.bias", v->prefix, k);
  }
  ADD(C, 0, "%sln_f.weight", v->prefix);
  ADD(C, 0, "%sln_f.bias", v->prefix);
  if (v->untied) ADD(V, C, "lm_head.weight");
  if (v->extra) ADD(C, 0, "%s", v->extra);
#undef ADD
}

static void hf_free(hf_tensors *h) {
  for (int i = 0; i < h->n; i++) free(h->data[i]);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  ck_assert_int_eq(fclose(f), 0);
}

/* The config save_pretrained writes for our small GPT-2, with `extra`
 * ("\"key\": value, " pairs) in front and `drop` left out. */
static void write_config(const char *dir, const char *extra, const char *drop, int inner, int untied) {
  char path[512], text[2048], inner_s[32];
  snprintf(inner_s, sizeof inner_s, inner == 4 * C ? "null" : "%d", inner);
  const char *keys[][2] = {{"activation_function", "\"gelu_new\""}, {"model_type", "\"gpt2\""},
                           {"n_embd", "16"}, {"n_head", "2"}, {"n_layer", "2"}, {"n_positions", "8"},
                           {"n_ctx", "8"}, {"vocab_size", "32"}, {"layer_norm_epsilon", "1e-05"},
                           {"n_inner", inner_s}, {"tie_word_embeddings", untied ? "false" : "true"},
                           {"scale_attn_weights", "true"}, {"reorder_and_upcast_attn", "false"},
                           {"architectures", "[\"GPT2LMHeadModel\"]"}};
  size_t at = (size_t)snprintf(text, sizeof text, "{%s", extra ? extra : "");
  int first = 1;
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    if (drop && strcmp(drop, keys[i][0]) == 0) continue;
    if (extra && strstr(extra, keys[i][0])) continue; /* extra replaces it */
    at += (size_t)snprintf(text + at, sizeof text - at, "%s\"%s\": %s", first && !extra ? "" : ", ", keys[i][0],
                           keys[i][1]);
    first = 0;
  }
  snprintf(text + at, sizeof text - at, "}\n");
  snprintf(path, sizeof path, "%s/config.json", dir);
  write_file(path, text);
}

/* A GPT-2 directory under root. */
static void write_hf(const char *name, const variant *v, const char *extra, const char *drop, hf_tensors *h,
                     char *dir, size_t len) {
  char path[1024];
  snprintf(dir, len, "%s/%s", root, name);
  ck_assert_int_eq(mkdir(dir, 0777), 0);
  write_config(dir, extra, drop, v->inner, v->untied);
  hf_make(h, v);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  const char *meta[] = {"format", "pt", NULL};
  ck_assert_int_eq(clt__st_write(path, h->t, h->n, meta), CLT_OK);
}

/* Tensor `name` of the file at path, as floats (malloc'd), and its shape. */
static float *read_tensor(const char *path, const char *name, int64_t shape[2], int *ndim) {
  clt__st_file *f;
  clt__st_tensor t;
  ck_assert_msg(clt__st_open(path, &f) == CLT_OK, "%s", clt_last_error());
  ck_assert_msg(clt__st_find(f, name, &t) == CLT_OK, "%s", clt_last_error());
  int64_t count = 1;
  for (int d = 0; d < t.ndim; d++) count *= t.shape[d];
  float *x = malloc((size_t)count * sizeof *x);
  ck_assert_ptr_nonnull(x);
  ck_assert_int_eq(clt__st_read(f, &t, x, count), CLT_OK);
  *ndim = t.ndim;
  shape[0] = t.shape[0];
  shape[1] = t.ndim > 1 ? t.shape[1] : 0;
  clt__st_close(f);
  return x;
}

static int ends_with(const char *s, const char *end) {
  size_t a = strlen(s), b = strlen(end);
  return a >= b && strcmp(s + a - b, end) == 0;
}

/* Every tensor of h is in the file at path, same shape, same bits (with
 * `buffers`, but for the attention mask buffers, which are not weights). */
static void same_tensors(const hf_tensors *h, const char *path, int buffers) {
  for (int i = 0; i < h->n; i++) {
    const clt__st_tensor *t = &h->t[i];
    if (buffers && (ends_with(t->name, ".attn.bias") || ends_with(t->name, ".attn.masked_bias"))) continue;
    int64_t shape[2];
    int ndim;
    float *x = read_tensor(path, t->name, shape, &ndim);
    ck_assert_int_eq(ndim, t->ndim);
    ck_assert_int_eq(shape[0], t->shape[0]);
    if (ndim > 1) ck_assert_int_eq(shape[1], t->shape[1]);
    int64_t count = ndim > 1 ? shape[0] * shape[1] : shape[0];
    ck_assert_msg(memcmp(x, t->data, (size_t)count * 4) == 0, "%s differs after export", t->name);
    free(x);
  }
}

static void same_files(const char *a, const char *b, const char *const *names) {
  for (int i = 0; names[i]; i++) {
    int64_t sa[2], sb[2];
    int na, nb;
    float *x = read_tensor(a, names[i], sa, &na), *y = read_tensor(b, names[i], sb, &nb);
    ck_assert_int_eq(na, nb);
    ck_assert(sa[0] == sb[0] && sa[1] == sb[1]);
    ck_assert_msg(memcmp(x, y, (size_t)(sa[0] * (sa[1] ? sa[1] : 1)) * 4) == 0, "%s differs", names[i]);
    free(x), free(y);
  }
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* Import h's directory, export it, import the export; check all three. */
static void round_trip(const char *name, const variant *v) {
  char dir[512], model[512], weights[512], out[512], st[1024], model2[512], weights2[512];
  hf_tensors h;
  make_root();
  write_hf(name, v, NULL, NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", root);
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
  float *qkv = read_tensor(weights, "3.qkv.weight", shape, &ndim); /* block 0's attention is layer 4 */
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
  snprintf(out, sizeof out, "%s/exported", root);
  ck_assert_msg(clt_hf_gpt2_export(model, weights, out) == CLT_OK, "%s", clt_last_error());
  snprintf(st, sizeof st, "%s/model.safetensors", out);
  if (v->prefix[0]) same_tensors(&h, st, v->buffers);
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
  snprintf(model2, sizeof model2, "%s/m2.model", root);
  snprintf(weights2, sizeof weights2, "%s/m2.safetensors", root);
  ck_assert_msg(clt_hf_gpt2_import(out, 0, model2, weights2) == CLT_OK, "%s", clt_last_error());
  const char *names[] = {"0.weight", "1.weight", "2.weight", "2.bias", "3.qkv.weight", "3.qkv.bias", "3.proj.weight",
                         "3.proj.bias", "5.weight", "5.bias", "6.weight", "6.bias", "8.weight", "8.bias",
                         "10.weight", "11.qkv.weight", "11.proj.bias", "13.bias", "14.weight", "16.weight",
                         "16.bias", "18.weight", "18.bias", NULL};
  same_files(weights, weights2, names);
  if (v->untied) same_files(weights, weights2, (const char *[]){"19.weight", NULL});
  hf_free(&h);
}

START_TEST(round_trip_tied) {
  round_trip("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C});
  /* The spec is GPT-2's: 2 blocks of width 16, context 8, tied head. */
  char model[512];
  snprintf(model, sizeof model, "%s/m.model", root);
  const char *text = slurp(model);
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
  teardown();
  round_trip("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C, .buffers = 1});
}
END_TEST

START_TEST(context_and_eps) {
  char dir[512], model[512], weights[512];
  hf_tensors h;
  make_root();
  write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C}, "\"layer_norm_epsilon\": 1e-06", NULL, &h,
           dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 4, model, weights) == CLT_OK, "%s", clt_last_error());
  const char *text = slurp(model);
  ck_assert_ptr_nonnull(strstr(text, "input tokens 4 vocab=32\n"));
  ck_assert_ptr_nonnull(strstr(text, "posembedding positions=8\n"));
  ck_assert_ptr_nonnull(strstr(text, "layernorm eps=9.99999997e-07\n"));
  /* exported back, the epsilon reads 1e-06 again */
  char out[512], cfg[1024];
  snprintf(out, sizeof out, "%s/exported", root);
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
  hf_free(&h);
}
END_TEST

/* The import of a directory with this config change or tensor fault fails
 * with `code`, and the message holds each of the strings. */
static void refused(const char *extra, const char *drop, const variant *v0, int code, const char *const *words) {
  char dir[512], model[512], weights[512];
  hf_tensors h;
  variant v = v0 ? *v0 : (variant){.prefix = "transformer.", .inner = 4 * C};
  make_root();
  write_hf("gpt2", &v, extra, drop, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", root);
  int rc = clt_hf_gpt2_import(dir, 0, model, weights);
  ck_assert_msg(rc == code, "import with %s: %d (%s), expected %d", extra ? extra : drop ? drop : "a bad tensor", rc,
                clt_last_error(), code);
  for (int i = 0; words[i]; i++)
    ck_assert_msg(strstr(clt_last_error(), words[i]), "'%s' is not in: %s", words[i], clt_last_error());
  ck_assert_int_eq(access(model, F_OK), -1); /* nothing is written */
  ck_assert_int_eq(access(weights, F_OK), -1);
  hf_free(&h);
  teardown();
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
  make_root();
  snprintf(model, sizeof model, "%s/m.model", root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", root);
  ck_assert_int_eq(clt_hf_gpt2_import("/nonexistent/gpt2", 0, model, weights), CLT_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "/nonexistent/gpt2/config.json"));
  /* a config without its model.safetensors */
  char dir[512], path[1024];
  snprintf(dir, sizeof dir, "%s/only-config", root);
  ck_assert_int_eq(mkdir(dir, 0777), 0);
  write_config(dir, NULL, NULL, 4 * C, 0);
  ck_assert_int_eq(clt_hf_gpt2_import(dir, 0, model, weights), CLT_ENOTFOUND);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  ck_assert_msg(strstr(clt_last_error(), path) && strstr(clt_last_error(), "safe_serialization"), "%s",
                clt_last_error());
}
END_TEST

/* Export of a spec that is not GPT-2's: refused naming the line. */
static void export_refused(const char *spec, const char *const *words) {
  char model[512], out[512];
  make_root();
  snprintf(model, sizeof model, "%s/bad.model", root);
  snprintf(out, sizeof out, "%s/exported", root);
  write_file(model, spec);
  int rc = clt_hf_gpt2_export(model, "/nonexistent.safetensors", out);
  ck_assert_msg(rc == CLT_EFORMAT, "export: %d (%s)", rc, clt_last_error());
  for (int i = 0; words[i]; i++)
    ck_assert_msg(strstr(clt_last_error(), words[i]), "'%s' is not in: %s", words[i], clt_last_error());
  ck_assert_int_eq(access(out, F_OK), -1);
  teardown();
}

#define GPT_HEAD "input tokens 8 vocab=32\nembedding 16 name=wte\nposembedding\n"

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
  make_root();
  write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C}, NULL, NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
  snprintf(model2, sizeof model2, "%s/d.model", root);
  write_file(model2, GPT_HEAD "dropout 0.1\nblock repeat=2\n layernorm\n attention heads=2\n dropout 0.1\n residual\n"
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
      data[n] = read_tensor(weights, name, shape, &ndim);
      memset(&t[n], 0, sizeof t[n]);
      snprintf(t[n].name, sizeof t[n].name, "%d.%s", moved[i].layer - 1 + moved[i].shift, moved[i].param[k]);
      t[n].ndim = ndim;
      t[n].shape[0] = shape[0];
      t[n].shape[1] = shape[1];
      t[n].data = data[n];
      n++;
    }
  snprintf(weights2, sizeof weights2, "%s/d.safetensors", root);
  ck_assert_int_eq(clt__st_write(weights2, t, n, NULL), CLT_OK);
  snprintf(out, sizeof out, "%s/exported", root);
  ck_assert_msg(clt_hf_gpt2_export(model2, weights2, out) == CLT_OK, "%s", clt_last_error());
  snprintf(st, sizeof st, "%s/model.safetensors", out);
  same_tensors(&h, st, 0);
  /* m.model's weights do not fit d.model: refused as another model's */
  rm_rf(out);
  ck_assert_int_eq(clt_hf_gpt2_export(model2, weights, out), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "m.safetensors"));
  for (int i = 0; i < n; i++) free(data[i]);
  hf_free(&h);
}
END_TEST

/* h's tensors stored as F16 or BF16 (what save_pretrained writes for a
 * model in half precision), as a safetensors file written by hand; h's
 * values become the float32 the stored ones widen to. */
static void write_half(hf_tensors *h, const char *path, int bf16) {
  json_t *hdr = json_object();
  size_t off = 0;
  for (int i = 0; i < h->n; i++) {
    int64_t count = h->t[i].ndim > 1 ? h->t[i].shape[0] * h->t[i].shape[1] : h->t[i].shape[0];
    json_t *shape = json_array();
    for (int d = 0; d < h->t[i].ndim; d++) json_array_append_new(shape, json_integer(h->t[i].shape[d]));
    json_object_set_new(hdr, h->t[i].name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", bf16 ? "BF16" : "F16", "shape",
                                                     shape, "data_offsets", (json_int_t)off,
                                                     (json_int_t)(off + 2 * (size_t)count)));
    off += 2 * (size_t)count;
  }
  json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
  char *text = json_dumps(hdr, JSON_COMPACT);
  json_decref(hdr);
  size_t len = strlen(text), padded = (len + 7) / 8 * 8;
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  for (int b = 0; b < 8; b++) fputc((int)((uint64_t)padded >> (8 * b)) & 0xff, f);
  fputs(text, f);
  for (size_t k = len; k < padded; k++) fputc(' ', f);
  free(text);
  for (int i = 0; i < h->n; i++) {
    int64_t count = h->t[i].ndim > 1 ? h->t[i].shape[0] * h->t[i].shape[1] : h->t[i].shape[0];
    for (int64_t k = 0; k < count; k++) {
      float v = h->data[i][k];
      uint32_t bits;
      memcpy(&bits, &v, 4);
      uint16_t half = bf16 ? (uint16_t)(bits >> 16) : clt__half_from_float(v);
      fputc(half & 0xff, f);
      fputc(half >> 8, f);
      bits = (uint32_t)half << 16;
      if (bf16) memcpy(&v, &bits, 4);
      else v = clt__float_from_half(half);
      h->data[i][k] = v;
    }
  }
  ck_assert_int_eq(fclose(f), 0);
}

/* A checkpoint saved in half precision imports as the float32 of its
 * values: the same bits as a float32 file of those values. */
START_TEST(half_precision_files) {
  for (int bf16 = 0; bf16 < 2; bf16++) {
    char dir[512], st[1024], model[512], weights[512], model2[512], weights2[512];
    hf_tensors h;
    make_root();
    write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C}, NULL, NULL, &h, dir, sizeof dir);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    write_half(&h, st, bf16);
    snprintf(model, sizeof model, "%s/half.model", root);
    snprintf(weights, sizeof weights, "%s/half.safetensors", root);
    ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
    const char *meta[] = {"format", "pt", NULL};
    ck_assert_int_eq(clt__st_write(st, h.t, h.n, meta), CLT_OK); /* the widened values as F32 */
    snprintf(model2, sizeof model2, "%s/full.model", root);
    snprintf(weights2, sizeof weights2, "%s/full.safetensors", root);
    ck_assert_msg(clt_hf_gpt2_import(dir, 0, model2, weights2) == CLT_OK, "%s", clt_last_error());
    const char *names[] = {"0.weight", "1.weight", "2.weight", "3.qkv.weight", "3.proj.bias", "6.weight",
                           "16.weight", "18.bias", NULL};
    same_files(weights, weights2, names);
    hf_free(&h);
    teardown();
  }
}
END_TEST

/* h's tensors over two shards and the index save_pretrained writes for
 * them (the second shard named `second`). */
static void write_sharded(const hf_tensors *h, const char *dir, const char *second) {
  char path[1024];
  int half = h->n / 2;
  const char *meta[] = {"format", "pt", NULL};
  snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
  ck_assert_int_eq(clt__st_write(path, h->t, half, meta), CLT_OK);
  snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
  ck_assert_int_eq(clt__st_write(path, h->t + half, h->n - half, meta), CLT_OK);
  json_t *map = json_object();
  for (int i = 0; i < h->n; i++)
    json_object_set_new(map, h->t[i].name, json_string(i < half ? "model-00001-of-00002.safetensors" : second));
  json_t *index = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", map);
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  ck_assert_int_eq(json_dump_file(index, path, JSON_INDENT(2)), 0);
  json_decref(index);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  unlink(path);
}

/* A checkpoint split into shards imports as the whole file does. */
START_TEST(sharded_files) {
  char dir[512], model[512], weights[512], model2[512], weights2[512];
  hf_tensors h;
  make_root();
  write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C}, NULL, NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/whole.model", root);
  snprintf(weights, sizeof weights, "%s/whole.safetensors", root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
  write_sharded(&h, dir, "model-00002-of-00002.safetensors");
  snprintf(model2, sizeof model2, "%s/sharded.model", root);
  snprintf(weights2, sizeof weights2, "%s/sharded.safetensors", root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model2, weights2) == CLT_OK, "%s", clt_last_error());
  const char *names[] = {"0.weight", "1.weight", "2.weight", "3.qkv.weight", "3.proj.bias", "6.weight",
                         "11.qkv.weight", "16.weight", "18.bias", NULL};
  same_files(weights, weights2, names);
  /* an index naming a shard that is not there */
  write_sharded(&h, dir, "model-00003-of-00003.safetensors");
  ck_assert_int_eq(clt_hf_gpt2_import(dir, 0, model2, weights2), CLT_ENOTFOUND);
  ck_assert_msg(strstr(clt_last_error(), "model-00003-of-00003.safetensors"), "%s", clt_last_error());
  hf_free(&h);
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
  make_root();
  write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C, .buffers = 1}, NULL, NULL, &h, dir,
           sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", root);
  logged[0] = 0;
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
  ck_assert_msg(logged[0] == 0, "warned: %s", logged);
  hf_free(&h);
  teardown();
  make_root();
  write_hf("gpt2", &(variant){.prefix = "transformer.", .inner = 4 * C, .extra = "multiple_choice_head.summary.bias"},
           NULL, NULL, &h, dir, sizeof dir);
  snprintf(model, sizeof model, "%s/m.model", root);
  snprintf(weights, sizeof weights, "%s/m.safetensors", root);
  ck_assert_msg(clt_hf_gpt2_import(dir, 0, model, weights) == CLT_OK, "%s", clt_last_error());
  ck_assert_msg(strstr(logged, "model.safetensors: 1 tensor(s)") && strstr(logged, "multiple_choice_head.summary.bias"),
                "%s", logged);
  clt_log_set(NULL, NULL);
  hf_free(&h);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hf");
  TCase *tc = tcase_create("gpt2");
  tcase_add_test(tc, round_trip_tied);
  tcase_add_test(tc, round_trip_variants);
  tcase_add_test(tc, context_and_eps);
  tcase_add_test(tc, bad_configs);
  tcase_add_test(tc, bad_tensors);
  tcase_add_test(tc, export_structure);
  tcase_add_test(tc, examples_fit);
  tcase_add_test(tc, export_with_dropout);
  tcase_add_test(tc, half_precision_files);
  tcase_add_test(tc, sharded_files);
  tcase_add_test(tc, other_tensors);
  tcase_add_checked_fixture(tc, NULL, teardown);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
