/*
 * hf_import.c: clt_hf_gpt2_import, a Hugging Face GPT-2 directory
 * (config.json and model.safetensors as GPT2LMHeadModel.save_pretrained
 * writes them) into a cltrain model spec and weights file. The config is
 * read key by key: what cltrain's GPT computes differently from what the
 * config asks for is refused, naming config.json and the key, rather than
 * imported into a model that gives other logits.
 */
#include "io/hf_gpt2.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/outfile.h"
#include "io/safetensors.h"
#include "io/weights.h"

#define MAX_DIM 1000000

/* A positive integer key: required (dflt < 0), or dflt when absent or null. */
static int int_key(const char *path, json_t *cfg, const char *key, int dflt, int *out) {
  json_t *v = json_object_get(cfg, key);
  if (!v || json_is_null(v)) {
    if (dflt >= 0) {
      *out = dflt;
      return CLT_OK;
    }
    return clt__error(CLT_EFORMAT, "%s: no \"%s\", which a GPT-2 config needs (n_embd, n_head, n_layer, "
                      "n_positions and vocab_size)", path, key);
  }
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > MAX_DIM) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    int rc = clt__error(CLT_EFORMAT, "%s: \"%s\" is %s, not an integer from 1 to %d", path, key,
                        text ? text : "?", MAX_DIM);
    free(text);
    return rc;
  }
  *out = (int)json_integer_value(v);
  return CLT_OK;
}

/* A boolean key that must have the value cltrain computes (absent: fine). */
static int bool_key(const char *path, json_t *cfg, const char *key, int want, const char *why) {
  json_t *v = json_object_get(cfg, key);
  if (!v || json_is_null(v)) return CLT_OK;
  if (!json_is_boolean(v)) return clt__error(CLT_EFORMAT, "%s: \"%s\" is not true or false", path, key);
  if (json_is_true(v) != want)
    return clt__error(CLT_EFORMAT, "%s: \"%s\": %s is not supported: %s", path, key, want ? "false" : "true", why);
  return CLT_OK;
}

static int read_config(const char *path, clt__hf_config *c) {
  int rc = CLT_OK;
  json_error_t err;
  json_t *cfg = json_load_file(path, 0, &err);
  memset(c, 0, sizeof *c);
  if (!cfg) {
    FILE *f = fopen(path, "r");
    if (!f)
      return clt__error(CLT_ENOTFOUND, "%s: cannot read it; is this a directory GPT2LMHeadModel.save_pretrained "
                        "wrote?", path);
    fclose(f);
    return clt__error(CLT_EFORMAT, "%s:%d:%d: not JSON: %s", path, err.line, err.column, err.text);
  }
  if (!json_is_object(cfg)) {
    rc = clt__error(CLT_EFORMAT, "%s: not a JSON object", path);
    goto fail;
  }
  json_t *mt = json_object_get(cfg, "model_type");
  if (mt && (!json_is_string(mt) || strcmp(json_string_value(mt), "gpt2") != 0)) {
    rc = clt__error(CLT_EFORMAT, "%s: \"model_type\" is %s%s%s: hf import reads GPT-2 checkpoints only (model_type "
                    "\"gpt2\")", path, json_is_string(mt) ? "\"" : "", json_is_string(mt) ? json_string_value(mt) :
                    "not a string", json_is_string(mt) ? "\"" : "");
    goto fail;
  }
  CLT_TRY(int_key(path, cfg, "n_embd", -1, &c->n_embd));
  CLT_TRY(int_key(path, cfg, "n_head", -1, &c->n_head));
  CLT_TRY(int_key(path, cfg, "n_layer", -1, &c->n_layer));
  /* n_ctx is the old name of n_positions */
  int n_ctx;
  CLT_TRY(int_key(path, cfg, "n_ctx", 0, &n_ctx));
  CLT_TRY(int_key(path, cfg, "n_positions", n_ctx ? n_ctx : -1, &c->n_positions));
  CLT_TRY(int_key(path, cfg, "vocab_size", -1, &c->vocab_size));
  if (c->vocab_size > (1 << 24)) {
    rc = clt__error(CLT_EFORMAT, "%s: \"vocab_size\": %d is more than the 2^24 token ids cltrain carries", path,
                    c->vocab_size);
    goto fail;
  }
  if (c->n_embd % c->n_head) {
    rc = clt__error(CLT_EFORMAT, "%s: \"n_head\": %d does not divide \"n_embd\": %d", path, c->n_head, c->n_embd);
    goto fail;
  }
  CLT_TRY(int_key(path, cfg, "n_inner", 4 * c->n_embd, &c->n_inner));
  json_t *eps = json_object_get(cfg, "layer_norm_epsilon");
  double e = 1e-5;
  if (eps && !json_is_null(eps)) {
    e = json_is_number(eps) ? json_number_value(eps) : -1;
    if (!(e > 0 && e < 1)) {
      rc = clt__error(CLT_EFORMAT, "%s: \"layer_norm_epsilon\" is not a number between 0 and 1", path);
      goto fail;
    }
  }
  c->eps = (float)e;
  json_t *act = json_object_get(cfg, "activation_function");
  const char *a = act ? json_string_value(act) : "gelu_new";
  if (!a || (strcmp(a, "gelu_new") != 0 && strcmp(a, "gelu_pytorch_tanh") != 0)) {
    char *text = json_dumps(act, JSON_ENCODE_ANY | JSON_COMPACT);
    rc = clt__error(CLT_EFORMAT, "%s: \"activation_function\": %s is not supported: cltrain's GPT uses GPT-2's tanh "
                    "GELU (\"gelu_new\" or \"gelu_pytorch_tanh\")", path, text ? text : "?");
    free(text);
    goto fail;
  }
  /* What the attention computes. reorder_and_upcast_attn only changes how
   * fp16 models round (the scores are computed in f32 either way here), so
   * it is accepted. */
  CLT_TRY(bool_key(path, cfg, "scale_attn_weights", 1,
                   "cltrain's attention always scales the scores by 1/sqrt(head size)"));
  CLT_TRY(bool_key(path, cfg, "scale_attn_by_inverse_layer_idx", 0,
                   "cltrain's attention scales every layer's scores alike"));
  CLT_TRY(bool_key(path, cfg, "add_cross_attention", 0, "cltrain's GPT has self-attention only"));
  CLT_TRY(bool_key(path, cfg, "is_encoder_decoder", 0, "cltrain's GPT is a decoder only"));
  json_t *tie = json_object_get(cfg, "tie_word_embeddings");
  if (tie && !json_is_boolean(tie)) {
    rc = clt__error(CLT_EFORMAT, "%s: \"tie_word_embeddings\" is not true or false", path);
    goto fail;
  }
  c->tied = !tie || json_is_true(tie);
  const char *arch = NULL;
  json_t *archs = json_object_get(cfg, "architectures");
  if (json_is_array(archs) && json_array_size(archs) > 0) arch = json_string_value(json_array_get(archs, 0));
  if (arch && strcmp(arch, "GPT2LMHeadModel") != 0 && strcmp(arch, "GPT2Model") != 0)
    clt__log(CLT_LOG_WARN, "%s: \"architectures\" is [\"%s\"]: only the GPT2LMHeadModel part (the transformer and "
             "the tied language-model head) is imported", path, arch);
fail:
  json_decref(cfg);
  return rc;
}

/* Where the tensors are: model.safetensors, or the shards that
 * model.safetensors.index.json maps each tensor to (save_pretrained splits
 * a model above max_shard_size, 5 GB by default: GPT-2 XL in float32). */
#define MAX_SHARDS 64

typedef struct hf_files {
  const char *dir;
  char *path;                   /* model.safetensors, or the index: for messages */
  json_t *map;                  /* the index's weight_map, or NULL for one file */
  int n;
  char *names[MAX_SHARDS];      /* the shards opened so far (one without an index) */
  clt__st_file *files[MAX_SHARDS];
} hf_files;

static void files_close(hf_files *fs) {
  for (int i = 0; i < fs->n; i++) {
    clt__st_close(fs->files[i]);
    free(fs->names[i]);
  }
  json_decref(fs->map);
  free(fs->path);
}

static int open_shard(hf_files *fs, const char *name, clt__st_file **out) {
  int rc = CLT_OK;
  for (int i = 0; i < fs->n; i++)
    if (strcmp(fs->names[i], name) == 0) {
      *out = fs->files[i];
      return CLT_OK;
    }
  if (fs->n == MAX_SHARDS)
    return clt__error(CLT_EFORMAT, "%s names more than %d shards", fs->path, MAX_SHARDS);
  if (strchr(name, '/'))
    return clt__error(CLT_EFORMAT, "%s: shard '%s' is not a file of %s", fs->path, name, fs->dir);
  char *path = clt__hf_path(fs->dir, name);
  if (!path || !(fs->names[fs->n] = clt__strdup(name))) {
    free(path);
    return CLT_ENOMEM;
  }
  rc = clt__st_open(path, &fs->files[fs->n]);
  free(path);
  if (rc < 0) {
    free(fs->names[fs->n]);
    return rc;
  }
  *out = fs->files[fs->n++];
  return CLT_OK;
}

static int files_open(const char *dir, hf_files *fs) {
  int rc = CLT_OK;
  memset(fs, 0, sizeof *fs);
  fs->dir = dir;
  char *single = clt__hf_path(dir, "model.safetensors"), *index = clt__hf_path(dir, "model.safetensors.index.json");
  if (!single || !index) {
    rc = CLT_ENOMEM;
    goto out;
  }
  FILE *probe = fopen(single, "rb");
  if (probe || !(probe = fopen(index, "r"))) { /* one file (or neither: its open says so) */
    if (probe) fclose(probe);
    fs->path = single;
    single = NULL;
    clt__st_file *f;
    rc = open_shard(fs, "model.safetensors", &f);
    if (rc == CLT_ENOTFOUND) {
      char why[512];
      clt__strlcpy(why, clt_last_error(), sizeof why);
      rc = clt__error(rc, "%s: hf import reads the safetensors files save_pretrained writes (pytorch_model.bin is "
                      "not read: save with safe_serialization=True)", why);
    }
    goto out;
  }
  fclose(probe);
  fs->path = index;
  index = NULL;
  json_error_t err;
  json_t *j = json_load_file(fs->path, 0, &err);
  json_t *map = j ? json_object_get(j, "weight_map") : NULL;
  if (!json_is_object(map)) {
    rc = clt__error(CLT_EFORMAT, "%s: %s", fs->path, j ? "no \"weight_map\" object" : err.text);
  } else {
    fs->map = json_incref(map);
  }
  json_decref(j);
out:
  free(single);
  free(index);
  return rc;
}

/* Tensor `name`: 0, or 1 when no file has it, or an error (a shard the
 * index names that cannot be read is one, and so is a shard that lacks
 * what the index puts in it). */
static int files_find(hf_files *fs, const char *name, clt__st_file **f, clt__st_tensor *t) {
  const char *shard = "model.safetensors";
  if (fs->map) {
    json_t *v = json_object_get(fs->map, name);
    if (!v) return 1;
    if (!json_is_string(v))
      return clt__error(CLT_EFORMAT, "%s: the weight_map entry of '%s' is not a file name", fs->path, name);
    shard = json_string_value(v);
  }
  int rc = open_shard(fs, shard, f);
  if (rc < 0) return fs->map ? clt__error_prefix(rc, "%s puts '%s' in %s", fs->path, name, shard) : rc;
  rc = clt__st_find(*f, name, t);
  if (rc == CLT_ENOTFOUND && fs->map) /* the index has it, the shard it names has not */
    return clt__error(CLT_EFORMAT, "%s puts '%s' in %s, but %s/%s has no tensor '%s'; the index does not belong to "
                      "these shards (was a shard replaced, or the index edited?)", fs->path, name, shard, fs->dir,
                      shard, name);
  if (rc == CLT_ENOTFOUND) {
    clt_clear_error();
    return 1;
  }
  return rc;
}

/* Tensors of the files that the import leaves out, with a warning: the
 * heads of GPT2DoubleHeadsModel and the like. The attention masks of older
 * files are buffers, not weights, and lm_head.weight is wte's when tied. */
static void warn_unused(hf_files *fs, char (*used)[96], int n, int tied) {
  int left_out = 0;
  char first[128] = "";
  void *iter = NULL;
  const char *name;
  for (;;) {
    if (fs->map) {
      iter = iter ? json_object_iter_next(fs->map, iter) : json_object_iter(fs->map);
      name = iter ? json_object_iter_key(iter) : NULL;
    } else {
      name = clt__st_next_name(fs->files[0], &iter);
    }
    if (!name) break;
    size_t len = strlen(name);
    int mask = (len >= 10 && strcmp(name + len - 10, ".attn.bias") == 0) ||
               (len >= 17 && strcmp(name + len - 17, ".attn.masked_bias") == 0);
    if (mask || (tied && strcmp(name, "lm_head.weight") == 0)) continue;
    int known = 0;
    for (int i = 0; i < n && !known; i++) known = strcmp(used[i], name) == 0;
    if (!known && left_out++ == 0) clt__strlcpy(first, name, sizeof first);
  }
  if (left_out)
    clt__log(CLT_LOG_WARN, "%s: %d tensor(s) that are not part of GPT2LMHeadModel are left out ('%s'%s)", fs->path,
             left_out, first, left_out > 1 ? ", ..." : "");
}

/* Tensor t of GPT-2's files into the parameter arena, transposed back when
 * it is a Conv1D weight; buf holds the largest tensor; full gets the name
 * it has in the file. */
static int take_tensor(hf_files *fs, const char *cfg_path, const clt_model_spec *spec, const clt__hf_tensor *t,
                       float *params, float *buf, char full[96]) {
  int rc = CLT_OK;
  char shape_want[64], shape_have[96];
  clt__st_tensor have;
  clt__st_file *f;
  snprintf(full, 96, "%s%s", t->base ? "transformer." : "", t->name);
  rc = files_find(fs, full, &f, &have);
  if (rc == 1 && t->base) { /* GPT2Model's files, and some others, have no "transformer." */
    snprintf(full, 96, "%s", t->name);
    rc = files_find(fs, full, &f, &have);
  }
  if (rc == 1)
    return clt__error(CLT_ESHAPE, "%s has no tensor '%s%s'%s%s%s, which a GPT-2 of %s has", fs->path,
                      t->base ? "transformer." : "", t->name, t->base ? " (nor '" : "", t->base ? t->name : "",
                      t->base ? "')" : "", cfg_path);
  if (rc < 0) return rc;
  const char *path = fs->map ? json_string_value(json_object_get(fs->map, full)) : fs->path;
  int64_t want[2];
  int ndim;
  clt__hf_shape(spec, t, want, &ndim);
  int same = have.ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = have.shape[d] == want[d];
  if (!same) {
    size_t at = (size_t)snprintf(shape_have, sizeof shape_have, "(");
    for (int d = 0; d < have.ndim && at < sizeof shape_have; d++)
      at += (size_t)snprintf(shape_have + at, sizeof shape_have - at, "%s%lld", d ? ", " : "",
                             (long long)have.shape[d]);
    if (at < sizeof shape_have) snprintf(shape_have + at, sizeof shape_have - at, ")");
    if (ndim == 1) snprintf(shape_want, sizeof shape_want, "(%lld)", (long long)want[0]);
    else snprintf(shape_want, sizeof shape_want, "(%lld, %lld)", (long long)want[0], (long long)want[1]);
    return clt__error(CLT_ESHAPE, "%s%s%s: tensor '%s' has shape %s but %s makes it %s", fs->map ? fs->dir : "",
                      fs->map ? "/" : "", path, full, shape_have, cfg_path, shape_want);
  }
  const clt_param_spec *p = &spec->layers[t->layer].param[t->param];
  float *dst = params + p->offset;
  if (!t->transposed) return clt__st_read(f, &have, dst, p->count);
  CLT_TRY(clt__st_read(f, &have, buf, p->count));
  /* GPT-2's (in, out) = want into cltrain's (out, in). */
  int64_t rows = want[0], cols = want[1];
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = buf[r * cols + c];
fail:
  return rc;
}

/* Neither output is a file the import reads (config.json, model.safetensors
 * or the index and every shard it names) or the other output: writing it
 * would replace the checkpoint being imported. */
static int check_outputs(const hf_files *fs, const char *cfg_path, const char *model_path, const char *weights_path) {
  const char *out[2] = {model_path, weights_path};
  if (clt__same_file(model_path, weights_path))
    return clt__error(CLT_EINVAL, "the model spec %s and the weights %s are one file; name two", model_path,
                      weights_path);
  for (int o = 0; o < 2; o++) {
    char in[PATH_MAX] = "";
    if (clt__same_file(out[o], cfg_path)) clt__strlcpy(in, cfg_path, sizeof in);
    else if (clt__same_file(out[o], fs->path)) clt__strlcpy(in, fs->path, sizeof in);
    const char *key;
    json_t *v;
    json_object_foreach(fs->map, key, v) {
      char *shard = json_is_string(v) ? clt__hf_path(fs->dir, json_string_value(v)) : NULL;
      if (shard && !in[0] && clt__same_file(out[o], shard)) clt__strlcpy(in, shard, sizeof in);
      free(shard);
    }
    if (in[0])
      return clt__error(CLT_EINVAL, "writing %s would replace %s, which the import reads; write the "
                        "output elsewhere (-o PREFIX outside %s)", out[o], in, fs->dir);
  }
  return CLT_OK;
}

int clt_hf_gpt2_import(const char *dir, int context, const char *model_path, const char *weights_path) {
  int rc = CLT_OK, n = 0, nw = 0;
  char *cfg_path = NULL, *text = NULL;
  clt_model_spec *spec = NULL;
  clt__hf_tensor *map = NULL;
  clt__st_tensor *out = NULL;
  hf_files fs = {0};
  float *params = NULL, *buf = NULL;
  char (*used)[96] = NULL;
  clt__hf_config cfg, got;
  CLT_PATH_ARG(dir);
  CLT_PATH_ARG(model_path);
  CLT_PATH_ARG(weights_path);
  if (!(cfg_path = clt__hf_path(dir, "config.json"))) return CLT_ENOMEM;
  CLT_TRY(read_config(cfg_path, &cfg));
  if (context < 0 || context > cfg.n_positions) {
    rc = clt__error(CLT_EINVAL, "a context of %d positions: %s's n_positions=%d allows 1 to %d", context, cfg_path,
                    cfg.n_positions, cfg.n_positions);
    goto fail;
  }
  cfg.context = context ? context : cfg.n_positions;
  if (!(text = clt__hf_gpt2_spec_text(&cfg, dir))) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(clt__spec_parse(text, model_path, &spec));
  CLT_TRY(clt__hf_gpt2_match(spec, &got, &map, &n));
  if (got.n_embd != cfg.n_embd || got.n_head != cfg.n_head || got.n_layer != cfg.n_layer ||
      got.n_positions != cfg.n_positions || got.vocab_size != cfg.vocab_size || got.n_inner != cfg.n_inner ||
      got.eps != cfg.eps || got.tied != cfg.tied || got.context != cfg.context) {
    rc = clt__error(CLT_EINTERNAL, "hf import: the spec made for %s does not read back as its config", cfg_path);
    goto fail;
  }

  /* The weights, tensor by tensor, into one arena. */
  int64_t largest = 0;
  for (int i = 0; i < n; i++) {
    int64_t c = spec->layers[map[i].layer].param[map[i].param].count;
    if (c > largest) largest = c;
  }
  if (!(params = clt__calloc((size_t)spec->param_count, sizeof *params)) ||
      !(buf = clt__calloc((size_t)largest, sizeof *buf))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  CLT_TRY(files_open(dir, &fs));
  if (!(used = clt__calloc((size_t)n, sizeof *used))) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < n; i++) CLT_TRY(take_tensor(&fs, cfg_path, spec, &map[i], params, buf, used[i]));
  warn_unused(&fs, used, n, cfg.tied);

  if (!(out = clt__calloc((size_t)spec->nlayers * CLT_MAX_LAYER_PARAMS, sizeof *out))) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(clt__arena_tensors(spec, "", params, out, &nw));
  const char *meta[] = {"format", "cltrain-weights", "version", "1", "model", text, "step", "0",
                        "source", "hugging face gpt2", NULL};
  CLT_TRY(check_outputs(&fs, cfg_path, model_path, weights_path));
  CLT_TRY(clt_check_output(weights_path, CLT_OUTPUT_FILE)); /* both, before either is written */
  CLT_TRY(clt_check_output(model_path, CLT_OUTPUT_FILE));
  CLT_TRY(clt__st_write(weights_path, out, nw, meta));
  CLT_TRY(clt__hf_write_text(model_path, text));
fail:
  files_close(&fs);
  clt__spec_destroy(spec);
  free(map), free(out), free(params), free(buf), free(text), free(cfg_path), free(used);
  return rc;
}
