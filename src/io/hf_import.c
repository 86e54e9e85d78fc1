/*
 * hf_import.c: clt_hf_import, a Hugging Face checkpoint directory
 * (config.json and model.safetensors or its shards, as save_pretrained
 * writes them) into a cltrain model spec and weights file, for any class of
 * the table (hf_arch.h); clt_hf_gpt2_import is the same restricted to
 * GPT-2. config.json picks the class ("architectures", else "model_type")
 * and is read key by key by its row: what cltrain computes differently from
 * what the config asks for is refused, naming config.json and the key,
 * rather than imported into a model that gives other logits. Nothing is
 * written unless all of it reads.
 */
#include "io/hf_arch.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/outfile.h"
#include "io/hf_files.h"
#include "io/safetensors.h"
#include "io/weights.h"

/* config.json, parsed; CLT_ENOTFOUND when it cannot be read. */
static int load_config(const char *path, json_t **out) {
  json_error_t err;
  *out = json_load_file(path, 0, &err);
  if (!*out) {
    FILE *f = fopen(path, "r");
    if (!f)
      return clt__error(CLT_ENOTFOUND, "%s: cannot read it; is this a directory a model's save_pretrained wrote?",
                        path);
    fclose(f);
    return clt__error(CLT_EFORMAT, "%s:%d:%d: not JSON: %s", path, err.line, err.column, err.text);
  }
  if (!json_is_object(*out)) {
    json_decref(*out);
    *out = NULL;
    return clt__error(CLT_EFORMAT, "%s: not a JSON object", path);
  }
  return CLT_OK;
}

/* Is arch the class's model without its head ("GPT2Model", "LlamaModel"),
 * whose files hold the same tensors less lm_head? */
static int base_model(const char *arch, const clt__hf_arch *a) {
  size_t n = strlen(arch);
  return n > 5 && strcmp(arch + n - 5, "Model") == 0 && strncmp(arch, a->hf_class, n - 5) == 0;
}

/* The row config.json asks for: its "model_type" (as transformers'
 * AutoConfig reads it), else its "architectures"; without either, GPT-2
 * (as the oldest GPT-2 configs are). `only` restricts it to one row. */
static int pick_arch(const char *path, json_t *cfg, const clt__hf_arch *only, const clt__hf_arch **out) {
  char list[256];
  const char *arch = NULL, *type = NULL;
  json_t *archs = json_object_get(cfg, "architectures"), *mt = json_object_get(cfg, "model_type");
  if (json_is_array(archs) && json_array_size(archs) > 0) arch = json_string_value(json_array_get(archs, 0));
  if (mt && !json_is_string(mt)) return clt__error(CLT_EFORMAT, "%s: \"model_type\" is not a string", path);
  type = mt ? json_string_value(mt) : NULL;
  const clt__hf_arch *a = type ? clt__hf_arch_find(type) : arch ? clt__hf_arch_find(arch) : clt__hf_arch_find("gpt2");
  if (only && type && a != only)
    return clt__error(CLT_EFORMAT, "%s: \"model_type\" is \"%s\": hf import reads %s checkpoints only here "
                      "(model_type \"%s\")", path, type, only->hf_class, only->model_type);
  if (only) a = only;
  if (!a)
    return clt__error(CLT_EFORMAT, "%s: \"%s\" is \"%s\": hf import reads %s", path, type ? "model_type" :
                      "architectures", type ? type : arch, clt__hf_arch_list(list, sizeof list));
  if (arch && strcmp(arch, a->hf_class) != 0 && !base_model(arch, a))
    clt__log(CLT_LOG_WARN, "%s: \"architectures\" is [\"%s\"]: only the %s part (the transformer and the "
             "language-model head) is imported", path, arch, a->hf_class);
  *out = a;
  return CLT_OK;
}

/* "(17, 48)" */
static void shape_text(const int64_t *shape, int ndim, char *buf, size_t len) {
  size_t at = (size_t)snprintf(buf, len, "(");
  for (int d = 0; d < ndim && at < len; d++)
    at += (size_t)snprintf(buf + at, len - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (at < len) snprintf(buf + at, len - at, ")");
}

/* Tensor t of the files into the parameter arena, transposed back when it
 * is a Conv1D weight; buf holds the largest tensor; full gets the name it
 * has in the file. */
static int take_tensor(clt__hf_files *fs, const char *cfg_path, const clt__hf_arch *a, const clt_model_spec *spec,
                       const clt__hf_tensor *t, float *params, float *buf, char full[96]) {
  int rc = CLT_OK;
  char shape_want[64], shape_have[96];
  clt__st_tensor have;
  clt__st_file *f;
  const char *file;
  clt__strlcpy(full, t->name, 96);
  rc = clt__hf_files_find(fs, full, &f, &have, &file);
  if (rc == 1 && t->optional) { /* GPT2Model's and LlamaModel's files have no "transformer." or "model." */
    clt__strlcpy(full, t->name + t->optional, 96);
    rc = clt__hf_files_find(fs, full, &f, &have, &file);
  }
  if (rc == 1) {
    if (t->optional)
      return clt__error(CLT_ESHAPE, "%s has no tensor '%s' (nor '%s'), which a %s of %s has", fs->path, t->name,
                        t->name + t->optional, a->hf_class, cfg_path);
    return clt__error(CLT_ESHAPE, "%s has no tensor '%s', which a %s of %s has", fs->path, t->name, a->hf_class,
                      cfg_path);
  }
  if (rc < 0) return rc;
  int64_t want[2];
  int ndim;
  clt__hf_shape(spec, t, want, &ndim);
  int same = have.ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = have.shape[d] == want[d];
  if (!same) {
    shape_text(have.shape, have.ndim, shape_have, sizeof shape_have);
    shape_text(want, ndim, shape_want, sizeof shape_want);
    return clt__error(CLT_ESHAPE, "%s%s%s: tensor '%s' has shape %s but %s makes it %s", fs->map ? fs->dir : "",
                      fs->map ? "/" : "", file, full, shape_have, cfg_path, shape_want);
  }
  const clt_param_spec *p = &spec->layers[t->layer].param[t->param];
  float *dst = params + p->offset;
  if (!t->transposed) return clt__st_read(f, &have, dst, p->count);
  CLT_TRY(clt__st_read(f, &have, buf, p->count));
  /* the file's (in, out) = want into cltrain's (out, in) */
  int64_t rows = want[0], cols = want[1];
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = buf[r * cols + c];
fail:
  return rc;
}

/* Neither output is a file the import reads (config.json, model.safetensors
 * or the index and every shard it names) or the other output: writing it
 * would replace the checkpoint being imported. */
static int check_outputs(const clt__hf_files *fs, const char *cfg_path, const char *model_path,
                         const char *weights_path) {
  const char *out[2] = {model_path, weights_path};
  if (clt__same_file(model_path, weights_path))
    return clt__error(CLT_EINVAL, "the model spec %s and the weights %s are one file; name two", model_path,
                      weights_path);
  for (int o = 0; o < 2; o++) {
    char in[PATH_MAX] = "";
    if (clt__same_file(out[o], cfg_path)) clt__strlcpy(in, cfg_path, sizeof in);
    else clt__hf_files_reads(fs, out[o], in, sizeof in);
    if (in[0])
      return clt__error(CLT_EINVAL, "writing %s would replace %s, which the import reads; write the "
                        "output elsewhere (-o PREFIX outside %s)", out[o], in, fs->dir);
  }
  return CLT_OK;
}

/* Does the spec made from c read back as c? (What the importer writes and
 * the exporter reads must be one correspondence.) */
static int same_config(const clt__hf_config *a, const clt__hf_config *b) {
  return a->hidden == b->hidden && a->heads == b->heads && a->layers == b->layers && a->vocab == b->vocab &&
         a->inner == b->inner && a->context == b->context && a->eps == b->eps && a->tied == b->tied &&
         a->kv_heads == b->kv_heads && a->attn_bias == b->attn_bias && a->mlp_bias == b->mlp_bias &&
         a->rope.theta == b->rope.theta && a->rope.scaling == b->rope.scaling && a->rope.factor == b->rope.factor &&
         a->rope.low_freq_factor == b->rope.low_freq_factor && a->rope.high_freq_factor == b->rope.high_freq_factor &&
         a->rope.original_max == b->rope.original_max;
}

static int import_dir(const char *dir, int context, const char *model_path, const char *weights_path,
                      const clt__hf_arch *only) {
  int rc = CLT_OK, n = 0, nw = 0;
  char *cfg_path = NULL, *text = NULL, *record = NULL, source[PATH_MAX];
  json_t *j = NULL;
  const clt__hf_arch *a = NULL;
  clt_model_spec *spec = NULL;
  clt__hf_tensor *map = NULL;
  clt__st_tensor *out = NULL;
  clt__hf_files fs = {0};
  float *params = NULL, *buf = NULL;
  char (*used)[96] = NULL;
  clt__hf_config cfg, got;
  if (!(cfg_path = clt__hf_path(dir, "config.json"))) return CLT_ENOMEM;
  CLT_TRY(load_config(cfg_path, &j));
  CLT_TRY(pick_arch(cfg_path, j, only, &a));
  memset(&cfg, 0, sizeof cfg);
  CLT_TRY(clt__hf_bool_must(cfg_path, j, "is_encoder_decoder", 0, "cltrain's models are decoders only"));
  CLT_TRY(clt__hf_bool_must(cfg_path, j, "add_cross_attention", 0, "cltrain's models have self-attention only"));
  if (json_object_get(j, "quantization_config")) {
    rc = clt__error(CLT_EFORMAT, "%s: \"quantization_config\": the weights are quantized, which cltrain does not "
                    "read; import the model's float32, float16 or bfloat16 checkpoint", cfg_path);
    goto fail;
  }
  CLT_TRY(a->read_config(a, cfg_path, j, &cfg));
  if (cfg.vocab > (1 << 24)) {
    rc = clt__error(CLT_EFORMAT, "%s: \"vocab_size\": %d is more than the 2^24 token ids cltrain carries", cfg_path,
                    cfg.vocab);
    goto fail;
  }
  if (context < 0 || context > cfg.positions) {
    rc = clt__error(CLT_EINVAL, "a context of %d positions: %s's %s=%d allows 1 to %d", context, cfg_path,
                    a->positions_key, cfg.positions, cfg.positions);
    goto fail;
  }
  cfg.context = context ? context : cfg.positions;
  /* A window shorter than the context masks keys cltrain's attention sees;
   * at most as long, it masks none. */
  if (cfg.window && cfg.window < cfg.context) {
    rc = clt__error(CLT_EFORMAT, "%s: \"sliding_window\": %d is shorter than the context of %d: cltrain's attention "
                    "sees the whole context (no sliding window); import with --context %d or less", cfg_path,
                    cfg.window, cfg.context, cfg.window);
    goto fail;
  }
  if (!realpath(dir, source)) clt__strlcpy(source, dir, sizeof source);
  if (!(record = clt__hf_record_text(a, source, cfg.context < cfg.positions ? cfg.positions : 0)) ||
      !(text = a->spec_text(a, &cfg, record))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  CLT_TRY(clt__spec_parse(text, model_path, &spec));
  CLT_TRY(a->match(spec, &got, &map, &n));
  if (!same_config(&cfg, &got)) {
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
  CLT_TRY(clt__hf_files_open(dir, &fs));
  if (!(used = clt__calloc((size_t)n, sizeof *used))) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < n; i++) CLT_TRY(take_tensor(&fs, cfg_path, a, spec, &map[i], params, buf, used[i]));
  clt__hf_files_warn_unused(&fs, a, used, n, cfg.tied);

  if (!(out = clt__calloc((size_t)spec->nlayers * CLT_MAX_LAYER_PARAMS, sizeof *out))) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(clt__arena_tensors(spec, "", params, out, &nw));
  char src[96];
  snprintf(src, sizeof src, "hugging face %s", a->model_type);
  const char *meta[] = {"format", "cltrain-weights", "version", "1", "model", text, "step", "0", "source", src, NULL};
  CLT_TRY(check_outputs(&fs, cfg_path, model_path, weights_path));
  CLT_TRY(clt_check_output(weights_path, CLT_OUTPUT_FILE)); /* both, before either is written */
  CLT_TRY(clt_check_output(model_path, CLT_OUTPUT_FILE));
  CLT_TRY(clt__st_write(weights_path, out, nw, meta));
  CLT_TRY(clt__hf_write_text(model_path, text));
  clt__log(CLT_LOG_INFO, "%s: %s, %d layers of width %d over %d tokens, context %d", dir, a->hf_class, cfg.layers,
           cfg.hidden, cfg.vocab, cfg.context);
fail:
  clt__hf_files_close(&fs);
  clt__spec_destroy(spec);
  json_decref(j);
  free(map), free(out), free(params), free(buf), free(text), free(record), free(cfg_path), free(used);
  return rc;
}

int clt_hf_import(const char *dir, int context, const char *model_path, const char *weights_path) {
  CLT_PATH_ARG(dir);
  CLT_PATH_ARG(model_path);
  CLT_PATH_ARG(weights_path);
  return import_dir(dir, context, model_path, weights_path, NULL);
}

int clt_hf_gpt2_import(const char *dir, int context, const char *model_path, const char *weights_path) {
  CLT_PATH_ARG(dir);
  CLT_PATH_ARG(model_path);
  CLT_PATH_ARG(weights_path);
  return import_dir(dir, context, model_path, weights_path, clt__hf_arch_find("gpt2"));
}
