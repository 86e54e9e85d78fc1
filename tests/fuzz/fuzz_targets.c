/*
 * fuzz_targets.c: the fuzz targets of fuzz_targets.h and their valid seed
 * inputs. A target that accepts an input also uses it (a model's summary,
 * every sample of a dataset, every tensor of a weights file), so a parser
 * that accepts what it cannot back is caught by the sanitizers too.
 */
#include "fuzz_targets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain.h>

#include "io/safetensors.h"
#include "npywrite.h"

const char *const fuzz_seed_specs[] = {
    "# Fashion-MNIST CNN\ninput 1 28 28\nconv2d 32 kernel=3 pad=1\nrelu\nmaxpool 2\nconv2d 64 kernel=3 pad=1\n"
    "relu\nmaxpool 2\nflatten\nlinear 128\nrelu\ndropout 0.25\nlinear 10\n",
    "input 784\nlinear 256\nrelu\nlinear 128\nrelu\nlinear 10\n",
    "input 3 8 8\nconv2d 4 kernel=3 stride=2 pad=1 bias=false\nflatten\nlayernorm\nlinear 10 bias=false\n",
    "input 16   # comment\n\n  linear 10\n",
    "input 8\nlinear 16\ntanh\nlinear 3\nloss huber delta=0.5\n",
    NULL};

const char *const fuzz_seed_tokenizers[] = {
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":["
    "{\"id\":7,\"content\":\"<|end|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":true,\"normalized\":false,"
    "\"special\":true},{\"id\":8,\"content\":\"ab\",\"single_word\":true,\"lstrip\":true,\"rstrip\":false,"
    "\"normalized\":true,\"special\":false}],\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
    "\"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
    "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"Digits\",\"individual_digits\":true},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},"
    "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
    "\"trim_offsets\":false,\"use_regex\":true},{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
    "{\"id\":\"<|end|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":"
    "{\"<|end|>\":{\"id\":\"<|end|>\",\"ids\":[7],\"tokens\":[\"<|end|>\"]}}}]},"
    "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,"
    "\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":true,"
    "\"vocab\":{\"a\":0,\"b\":1,\"\\u0120\":2,\"ab\":3,\"\\u0120ab\":4,\"1\":5,\"abab\":6},"
    "\"merges\":[\"a b\",[\"\\u0120\",\"ab\"],\"ab ab\"]}}",
    "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"RobertaProcessing\",\"sep\":[\"<unk>\",0],\"cls\":[\"<s>\",1],"
    "\"trim_offsets\":true,\"add_prefix_space\":false},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"\\u2581+\"},"
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
    "\"start\":1,\"stop\":1}]},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
    "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"<0x41>\":2,\"<0xC3>\":3,\"<0xA9>\":4,\"\\u2581\":5,\"a\":6,\"b\":7,"
    "\"\\u2581a\":8,\"\\u2581ab\":9},\"merges\":[\"\\u2581 a\",\"\\u2581a b\"]}}",
    "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"\\\\s{2,}\"},\"content\":\" \"},"
    "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
    "\"prepend_scheme\":\"first\",\"split\":true},\"post_processor\":null,"
    "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"add_prefix_space\":true},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":false,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"\\u2581\":2,\"a\":3,\"b\":4,\"\\u2581a\":5},\"merges\":[\"\\u2581 a\"]}}",
    NULL};

void fuzz_write_file(const char *path, const uint8_t *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
    perror(path);
    exit(99);
  }
}

/* A failure must come with a message, and the message must name `name`. */
static int refused_well(const char *what, int rc, const char *name) {
  const char *msg = clt_last_error();
  if (rc >= 0) return 0;
  if (!msg || !*msg) {
    fprintf(stderr, "%s: refused (%s) without a message\n", what, clt_status_name(rc));
    return -1;
  }
  if (name && !strstr(msg, name)) {
    fprintf(stderr, "%s: the message does not name '%s': %s\n", what, name, msg);
    return -1;
  }
  return 0;
}

int fuzz_spec(const uint8_t *data, size_t n) {
  char *text = malloc(n + 1);
  clt_model *m = NULL;
  int ret = 0;
  if (!text) return 0;
  memcpy(text, data, n);
  text[n] = 0;
  int rc = clt_model_parse(text, "fuzz.model", &m);
  if (rc < 0) {
    ret = refused_well("spec", rc, "fuzz.model");
  } else {
    char *summary = NULL;
    if (clt_model_layer_count(m) < 1 || clt_model_param_count(m) < 0 || clt_model_input_size(m) < 1 ||
        (clt_model_loss(m) == CLT_LOSS_CROSSENTROPY ? clt_model_num_classes(m) < 2 : clt_model_num_classes(m) != 0) ||
        clt_model_labels_per_sample(m) < 1 || !clt_loss_name(clt_model_loss(m))) {
      fprintf(stderr, "spec: accepted a model with impossible sizes\n");
      ret = -1;
    }
    if (clt_model_summary(m, &summary) == 0 && (!summary || !*summary)) {
      fprintf(stderr, "spec: empty summary\n");
      ret = -1;
    }
    free(summary);
    clt_model_destroy(m);
    if (ret == 0) ret = 1;
  }
  free(text);
  return ret;
}

/* Use every sample of an accepted dataset. */
static int use_dataset(const char *what, clt_dataset *ds) {
  int64_t count = clt_dataset_count(ds), size = clt_dataset_sample_size(ds);
  int64_t labels = clt_dataset_labels_per_sample(ds);
  float mean, std;
  if (count < 1 || size < 1 || labels < 1 || clt_dataset_num_classes(ds) < 1) {
    fprintf(stderr, "%s: accepted a dataset of %lld samples of %lld values and %lld labels\n", what,
            (long long)count, (long long)size, (long long)labels);
    return -1;
  }
  if (count > 4096 || size > 4096 || labels > 4096) return 0; /* bigger than any seed: do not spend memory on it */
  float *x = malloc((size_t)(count * size) * sizeof *x);
  int32_t *y = malloc((size_t)(count * labels) * sizeof *y);
  int64_t *idx = malloc((size_t)count * sizeof *idx);
  int ret = 0;
  if (x && y && idx) {
    for (int64_t i = 0; i < count; i++) idx[i] = count - 1 - i;
    int rc = clt_dataset_get_batch(ds, idx, count, x, y);
    if (rc < 0) ret = refused_well(what, rc, NULL);
    for (int64_t i = 0; rc == 0 && i < count * labels; i++)
      if (y[i] < 0 || y[i] >= clt_dataset_num_classes(ds)) {
        fprintf(stderr, "%s: label %d outside [0, %d) came through\n", what, y[i], clt_dataset_num_classes(ds));
        ret = -1;
        break;
      }
    if (clt_dataset_stats(ds, &mean, &std) == 0 && std > 0) clt_dataset_normalize(ds, mean, std);
  }
  free(x), free(y), free(idx);
  return ret;
}

/* IDX seeds: 8 images of 3x2 bytes, and their 8 labels. */
static const uint8_t idx_images[] = {0, 0, 8, 3, 0, 0, 0, 8, 0, 0, 0, 3, 0, 0, 0, 2,
                                     1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                     23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42,
                                     43, 44, 45, 46, 47, 255};
static const uint8_t idx_labels[] = {0, 0, 8, 1, 0, 0, 0, 8, 0, 1, 2, 3, 4, 5, 6, 9};

static uint8_t *dup_bytes(const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n);
  if (!q) exit(99);
  memcpy(q, p, n);
  return q;
}
void fuzz_seed_idx_images(uint8_t **out, size_t *n) { *out = dup_bytes(idx_images, *n = sizeof idx_images); }
void fuzz_seed_idx_labels(uint8_t **out, size_t *n) { *out = dup_bytes(idx_labels, *n = sizeof idx_labels); }

static int idx_pair(const char *dir, const uint8_t *img, size_t ni, const uint8_t *lab, size_t nl) {
  char ip[4096], lp[4096];
  clt_dataset *ds = NULL;
  snprintf(ip, sizeof ip, "%s/images-idx", dir);
  snprintf(lp, sizeof lp, "%s/labels-idx", dir);
  fuzz_write_file(ip, img, ni);
  fuzz_write_file(lp, lab, nl);
  int rc = clt_dataset_open_idx_files(ip, lp, 0, &ds);
  if (rc < 0) return refused_well("idx", rc, dir); /* either file may be the one named */
  rc = use_dataset("idx", ds);
  clt_dataset_destroy(ds);
  return rc < 0 ? rc : 1;
}
int fuzz_idx_images(const char *dir, const uint8_t *data, size_t n) {
  return idx_pair(dir, data, n, idx_labels, sizeof idx_labels);
}
int fuzz_idx_labels(const char *dir, const uint8_t *data, size_t n) {
  return idx_pair(dir, idx_images, sizeof idx_images, data, n);
}

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  long len;
  if (!f || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
      !(buf = malloc((size_t)len + 1)) || fread(buf, 1, (size_t)len, f) != (size_t)len) {
    perror(path);
    exit(99);
  }
  fclose(f);
  *n = (size_t)len;
  return buf;
}

void fuzz_seed_raw(const char *dir, uint8_t **out, size_t *n) {
  char p[4096];
  const int64_t dims[2] = {2, 3};
  float x[4 * 6];
  int32_t y[4] = {0, 1, 2, 1};
  for (int i = 0; i < 24; i++) x[i] = (float)i * 0.25f - 2.0f;
  snprintf(p, sizeof p, "%s/seed.raw", dir);
  if (clt_dataset_write_raw(p, 4, 2, dims, 3, x, y) < 0) {
    fprintf(stderr, "writing the raw seed: %s\n", clt_last_error());
    exit(99);
  }
  *out = slurp(p, n);
  remove(p);
}

int fuzz_raw(const char *dir, const uint8_t *data, size_t n) {
  char p[4096];
  clt_dataset *ds = NULL;
  snprintf(p, sizeof p, "%s/data.raw", dir);
  fuzz_write_file(p, data, n);
  int rc = clt_dataset_open_raw(p, &ds);
  if (rc < 0) return refused_well("raw", rc, p);
  rc = use_dataset("raw", ds);
  clt_dataset_destroy(ds);
  return rc < 0 ? rc : 1;
}

/* A users' dataset (clt_dataset_open) opened for regression: every sample
 * and target taken, and the per-feature statistics of all of it. */
static int use_user_dataset(const char *what, clt_dataset *ds) {
  int64_t count = clt_dataset_count(ds), size = clt_dataset_sample_size(ds);
  int64_t k = clt_dataset_targets_per_sample(ds);
  if (count < 1 || size < 1 || k < 1) {
    fprintf(stderr, "%s: accepted a dataset of %lld samples of %lld values and %lld targets\n", what,
            (long long)count, (long long)size, (long long)k);
    return -1;
  }
  if (count > 4096 || size > 4096 || k > 4096) return 0;
  float *x = malloc((size_t)(count * size) * sizeof *x), *t = malloc((size_t)(count * k) * sizeof *t);
  int64_t *idx = malloc((size_t)count * sizeof *idx);
  double *st = malloc((size_t)(4 * size) * sizeof *st);
  int ret = 0;
  if (x && t && idx && st) {
    for (int64_t i = 0; i < count; i++) idx[i] = count - 1 - i;
    int rc = clt_dataset_get_batch_targets(ds, idx, count, x, t);
    if (rc < 0) ret = refused_well(what, rc, NULL);
    for (int64_t i = 0; rc == 0 && i < count * k; i++)
      if (!isfinite(t[i])) {
        fprintf(stderr, "%s: target %lld is %g\n", what, (long long)i, (double)t[i]);
        ret = -1;
        break;
      }
    if (clt_dataset_feature_stats(ds, 0, count, st) < 0) ret = -1;
  }
  free(x), free(t), free(idx), free(st);
  return ret;
}

/* A file named name in dir holding data, opened for regression. */
static int fuzz_user(const char *what, const char *dir, const char *name, const uint8_t *data, size_t n) {
  char p[4096];
  clt_dataset *ds = NULL;
  clt_data_options o = {.regression = 1};
  snprintf(p, sizeof p, "%s/%s", dir, name);
  fuzz_write_file(p, data, n);
  int rc = clt_dataset_open(p, &o, &ds);
  if (rc < 0) return refused_well(what, rc, p);
  rc = use_user_dataset(what, ds);
  clt_dataset_destroy(ds);
  return rc < 0 ? rc : 1;
}

int fuzz_npy(const char *dir, const uint8_t *data, size_t n) { return fuzz_user("npy", dir, "data.npy", data, n); }
int fuzz_npz(const char *dir, const uint8_t *data, size_t n) { return fuzz_user("npz", dir, "data.npz", data, n); }
int fuzz_csv(const char *dir, const uint8_t *data, size_t n) { return fuzz_user("csv", dir, "data.csv", data, n); }

void fuzz_seed_npy(int which, uint8_t **out, size_t *n) {
  const int64_t shape[2] = {4, 3}, one[1] = {4};
  float v[12], t[4];
  for (int i = 0; i < 12; i++) v[i] = (float)i * 0.5f - 2.0f;
  for (int i = 0; i < 4; i++) t[i] = (float)i;
  if (which == 0) {
    *out = npy_image("<f4", shape, 2, v, sizeof v, n);
    return;
  }
  const int64_t xs[2] = {4, 2};
  size_t l[2];
  unsigned char *imgs[2] = {npy_image("<f4", xs, 2, v, 8 * sizeof(float), &l[0]), npy_image("<f4", one, 1, t, sizeof t, &l[1])};
  const char *names[2] = {"x", "y"};
  *out = npz_image(2, names, imgs, l, which == 2, n);
  free(imgs[0]), free(imgs[1]);
}

const char *const fuzz_seed_csv = "a,b,c,y\n1,2.5,-3e2,0.25\n4,5,6,7\n# c\n\n8,9,10,-11.5\n";

void fuzz_seed_tokens(const char *dir, int wide, uint8_t **out, size_t *n) {
  char p[4096];
  uint32_t t[41];
  for (int i = 0; i < 41; i++) t[i] = (uint32_t)(i * 37 % 50) + (wide ? 70000u : 0u);
  snprintf(p, sizeof p, "%s/seed.bin", dir);
  if (clt_tokens_write(p, t, 41, wide) < 0) {
    fprintf(stderr, "writing the token seed: %s\n", clt_last_error());
    exit(99);
  }
  *out = slurp(p, n);
  remove(p);
}

int fuzz_tokens(const char *dir, const uint8_t *data, size_t n) {
  char p[4096];
  clt_dataset *ds = NULL;
  snprintf(p, sizeof p, "%s/tokens.bin", dir);
  fuzz_write_file(p, data, n);
  const char *paths[1] = {p};
  int rc = clt_dataset_open_tokens(paths, 1, 4, 0, &ds);
  if (rc < 0) return refused_well("tokens", rc, p);
  rc = use_dataset("tokens", ds);
  clt_dataset_destroy(ds);
  return rc < 0 ? rc : 1;
}

/* Tensor names as cltrain writes them for a small two-layer model. */
static const char *const st_names[] = {"0.weight", "0.bias", "2.weight", "2.bias", "1.weight", NULL};

void fuzz_seed_safetensors(const char *dir, uint8_t **out, size_t *n) {
  static float w0[6 * 4], b0[6], w2[3 * 6], b2[3];
  clt__st_tensor t[4];
  char p[4096];
  memset(t, 0, sizeof t);
  for (int i = 0; i < 24; i++) w0[i] = (float)i;
  strcpy(t[0].name, "0.weight"), t[0].ndim = 2, t[0].shape[0] = 6, t[0].shape[1] = 4, t[0].data = w0;
  strcpy(t[1].name, "0.bias"), t[1].ndim = 1, t[1].shape[0] = 6, t[1].data = b0;
  strcpy(t[2].name, "2.weight"), t[2].ndim = 2, t[2].shape[0] = 3, t[2].shape[1] = 6, t[2].data = w2;
  strcpy(t[3].name, "2.bias"), t[3].ndim = 1, t[3].shape[0] = 3, t[3].data = b2;
  const char *meta[] = {"format", "cltrain-weights", "model", "input 4\nlinear 6\nrelu\nlinear 3\n", NULL};
  snprintf(p, sizeof p, "%s/seed.safetensors", dir);
  if (clt__st_write(p, t, 4, meta) < 0) {
    fprintf(stderr, "writing the safetensors seed: %s\n", clt_last_error());
    exit(99);
  }
  *out = slurp(p, n);
  remove(p);
}

int fuzz_safetensors(const char *dir, const uint8_t *data, size_t n) {
  char p[4096];
  clt__st_file *f = NULL;
  int ret = 0;
  snprintf(p, sizeof p, "%s/w.safetensors", dir);
  fuzz_write_file(p, data, n);
  int rc = clt__st_open(p, &f);
  if (rc < 0) return refused_well("safetensors", rc, p);
  (void)clt__st_metadata(f, "format");
  (void)clt__st_metadata(f, "model");
  for (int i = 0; st_names[i]; i++) {
    clt__st_tensor t;
    rc = clt__st_find(f, st_names[i], &t);
    if (rc < 0) {
      if ((ret = refused_well("safetensors find", rc, p)) < 0) break;
      continue;
    }
    int64_t count = 1;
    for (int d = 0; d < t.ndim; d++) count *= t.shape[d];
    if (count > (1 << 20)) continue; /* open checked the range lies in the file; not worth the memory */
    float *buf = malloc((size_t)(count ? count : 1) * sizeof *buf);
    if (!buf) continue;
    rc = clt__st_read(f, &t, buf, count);
    if (rc < 0 && (ret = refused_well("safetensors read", rc, p)) < 0) {
      free(buf);
      break;
    }
    free(buf);
  }
  clt__st_close(f);
  return ret < 0 ? ret : 1;
}

int fuzz_tokenizer(const uint8_t *data, size_t n) {
  static const char text[] = "ab abab 1234 <|end|>  x 'S A\xc3\xa9 \xff\xfe \xe2\x96\x81" "b<s>\n\n  Z\xcc\x81";
  clt_tokenizer *t = NULL;
  uint32_t *ids = NULL;
  int64_t k = 0;
  char *back = NULL;
  int rc = clt_tokenizer_load_json((const char *)data, n, "fuzz/tokenizer.json", &t), ret = 1;
  if (rc < 0) return refused_well("tokenizer", rc, "fuzz/tokenizer.json");
  /* a pattern may fail to match within PCRE2's limits: refused, with a message */
  if ((rc = clt_tokenizer_encode(t, text, sizeof text - 1, CLT_ENCODE_SPECIAL, &ids, &k)) < 0) {
    ret = refused_well("tokenizer encode", rc, NULL);
  } else if ((rc = clt_tokenizer_decode(t, ids, k, 0, &back, NULL)) < 0) {
    fprintf(stderr, "tokenizer: the %lld ids it encoded do not decode: %s\n", (long long)k, clt_last_error());
    ret = -1;
  }
  free(ids);
  free(back);
  clt_tokenizer_destroy(t);
  return ret;
}
