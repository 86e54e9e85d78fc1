/*
 * hfutil.c: the Hugging Face GPT-2 suites' shared helpers (hfutil.h).
 */
#include "hfutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"

char hu_root[256];

void hu_make_root(void) {
  snprintf(hu_root, sizeof hu_root, "/tmp/test_hf.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(hu_root));
}

void hu_rm_rf(const char *path) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  ck_assert_int_eq(system(cmd), 0);
}

void hu_teardown(void) {
  if (hu_root[0]) hu_rm_rf(hu_root);
  hu_root[0] = 0;
}

/* A random float in (-1, 1), from a fixed sequence. */
static float rnd(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) / 8388608.0 - 1.0);
}

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

/* GPT-2's tensors, in its (in, out) Conv1D layout. */
void hu_make(hf_tensors *h, const variant *v) {
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

void hu_free(hf_tensors *h) {
  for (int i = 0; i < h->n; i++) free(h->data[i]);
}

void hu_write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  ck_assert_int_eq(fclose(f), 0);
}

void hu_write_config(const char *dir, const char *extra, const char *drop, int inner, int untied) {
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
  hu_write_file(path, text);
}

void hu_write_hf(const char *name, const variant *v, const char *extra, const char *drop, hf_tensors *h,
                     char *dir, size_t len) {
  char path[1024];
  snprintf(dir, len, "%s/%s", hu_root, name);
  ck_assert_int_eq(mkdir(dir, 0777), 0);
  hu_write_config(dir, extra, drop, v->inner, v->untied);
  hu_make(h, v);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  const char *meta[] = {"format", "pt", NULL};
  ck_assert_int_eq(clt__st_write(path, h->t, h->n, meta), CLT_OK);
}

/* Tensor `name` of the file at path, as floats (malloc'd), and its shape. */
float *hu_read_tensor(const char *path, const char *name, int64_t shape[2], int *ndim) {
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
void hu_same_tensors(const hf_tensors *h, const char *path, int buffers) {
  for (int i = 0; i < h->n; i++) {
    const clt__st_tensor *t = &h->t[i];
    if (buffers && (ends_with(t->name, ".attn.bias") || ends_with(t->name, ".attn.masked_bias"))) continue;
    int64_t shape[2];
    int ndim;
    float *x = hu_read_tensor(path, t->name, shape, &ndim);
    ck_assert_int_eq(ndim, t->ndim);
    ck_assert_int_eq(shape[0], t->shape[0]);
    if (ndim > 1) ck_assert_int_eq(shape[1], t->shape[1]);
    int64_t count = ndim > 1 ? shape[0] * shape[1] : shape[0];
    ck_assert_msg(memcmp(x, t->data, (size_t)count * 4) == 0, "%s differs after export", t->name);
    free(x);
  }
}

void hu_same_files(const char *a, const char *b, const char *const *names) {
  for (int i = 0; names[i]; i++) {
    int64_t sa[2], sb[2];
    int na, nb;
    float *x = hu_read_tensor(a, names[i], sa, &na), *y = hu_read_tensor(b, names[i], sb, &nb);
    ck_assert_int_eq(na, nb);
    ck_assert(sa[0] == sb[0] && sa[1] == sb[1]);
    ck_assert_msg(memcmp(x, y, (size_t)(sa[0] * (sa[1] ? sa[1] : 1)) * 4) == 0, "%s differs", names[i]);
    free(x), free(y);
  }
}

char *hu_slurp(const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* h's tensors stored as F16 or BF16 (what save_pretrained writes for a
 * model in half precision), as a safetensors file written by hand; h's
 * values become the float32 the stored ones widen to. */
void hu_write_half(hf_tensors *h, const char *path, int bf16) {
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

/* h's tensors over two shards and the index save_pretrained writes for
 * them (the second shard named `second`). */
void hu_write_sharded(const hf_tensors *h, const char *dir, const char *second) {
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

