/*
 * hf_export.c: clt_hf_gpt2_export, a cltrain GPT (its spec and weights)
 * into a directory transformers' GPT2LMHeadModel.from_pretrained loads:
 * config.json and model.safetensors with GPT-2's names and its Conv1D
 * weights transposed to (in, out).
 */
#include "io/hf_gpt2.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/outfile.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "model/model.h"

/* The shortest decimal that reads back as the float v, as a double:
 * layer_norm_epsilon 1e-05, not 9.99999974737875e-06. */
static double short_decimal(float v) {
  char buf[32];
  for (int p = 1; p < 10; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, v);
    if ((float)strtod(buf, NULL) == v) break;
  }
  return strtod(buf, NULL);
}

/* What GPT2Config needs, and what cltrain computes in the keys that could
 * say otherwise; dropout is 0 everywhere (cltrain's dropout layers, if the
 * spec has any, do not correspond to GPT-2's). */
static char *config_text(const clt__hf_config *c) {
  json_t *j = json_pack("{s:s, s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:f, s:f, s:f, s:f, s:f, s:b, s:b, "
                        "s:b, s:b, s:b, s:s}",
                        "model_type", "gpt2", "architectures", "GPT2LMHeadModel", "n_embd", c->n_embd, "n_head",
                        c->n_head, "n_layer", c->n_layer, "n_positions", c->n_positions, "n_ctx", c->n_positions,
                        "vocab_size", c->vocab_size, "layer_norm_epsilon", short_decimal(c->eps),
                        "activation_function", "gelu_new", "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0,
                        "summary_first_dropout", 0.0, "initializer_range", 0.02, "tie_word_embeddings", c->tied,
                        "scale_attn_weights", 1, "scale_attn_by_inverse_layer_idx", 0, "reorder_and_upcast_attn", 0,
                        "use_cache", 1, "torch_dtype", "float32");
  if (!j) return NULL;
  json_object_set_new(j, "n_inner", c->n_inner == 4 * c->n_embd ? json_null() : json_integer(c->n_inner));
  char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
  json_decref(j);
  if (!text) return NULL;
  size_t len = strlen(text);
  char *nl = realloc(text, len + 2); /* end the file with a newline */
  if (!nl) {
    free(text);
    return NULL;
  }
  nl[len] = '\n';
  nl[len + 1] = 0;
  return nl;
}

int clt_hf_gpt2_export(const char *model_path, const char *weights_path, const char *dir) {
  int rc = CLT_OK, n = 0;
  clt_model *m = NULL;
  clt__hf_tensor *map = NULL;
  clt__st_tensor *out = NULL;
  float *params = NULL, *hf = NULL;
  char *cfg_path = NULL, *st_path = NULL, *cfg_text = NULL;
  clt__hf_config cfg;
  CLT_PATH_ARG(model_path);
  CLT_PATH_ARG(weights_path);
  CLT_PATH_ARG(dir);
  CLT_TRY(clt_model_load(model_path, &m));
  const clt_model_spec *spec = m->spec;
  CLT_TRY(clt__hf_gpt2_match(spec, &cfg, &map, &n));
  if (!(params = clt__calloc((size_t)spec->param_count, sizeof *params)) ||
      !(hf = clt__calloc((size_t)spec->param_count, sizeof *hf)) || !(out = clt__calloc((size_t)n, sizeof *out))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  CLT_TRY(clt__weights_read(spec, weights_path, params));

  /* Each tensor in GPT-2's layout, at the same offset of a second arena. */
  for (int i = 0; i < n; i++) {
    const clt_param_spec *p = &spec->layers[map[i].layer].param[map[i].param];
    const float *src = params + p->offset;
    float *dst = hf + p->offset;
    clt__st_tensor *t = &out[i];
    snprintf(t->name, sizeof t->name, "%s%s", map[i].base ? "transformer." : "", map[i].name);
    clt__hf_shape(spec, &map[i], t->shape, &t->ndim);
    t->data = dst;
    if (!map[i].transposed) {
      memcpy(dst, src, (size_t)p->count * sizeof *dst);
      continue;
    }
    int64_t rows = p->shape[0], cols = p->shape[1]; /* cltrain's (out, in) to GPT-2's (in, out) */
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
  }

  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    rc = clt__error(CLT_EIO, "cannot make the directory %s: %s", dir, strerror(errno));
    goto fail;
  }
  if (!(cfg_path = clt__hf_path(dir, "config.json")) || !(st_path = clt__hf_path(dir, "model.safetensors")) ||
      !(cfg_text = config_text(&cfg))) {
    rc = clt__error(CLT_ENOMEM, "out of memory writing %s", dir);
    goto fail;
  }
  /* Neither file written is one read: --weights DIR/model.safetensors
   * would be replaced by its own export. */
  const char *in[2] = {model_path, weights_path}, *made[2] = {st_path, cfg_path};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      if (clt__same_file(made[i], in[j])) {
        rc = clt__error(CLT_EINVAL, "writing %s would replace %s, which the export reads; export into "
                        "another directory", made[i], in[j]);
        goto fail;
      }
  /* Both can be written (a FIFO as config.json would otherwise be found
   * only after model.safetensors was replaced). */
  CLT_TRY(clt_check_output(st_path, CLT_OUTPUT_FILE));
  CLT_TRY(clt_check_output(cfg_path, CLT_OUTPUT_FILE));
  /* transformers refuses a safetensors file without format "pt". */
  const char *meta[] = {"format", "pt", NULL};
  CLT_TRY(clt__st_write(st_path, out, n, meta));
  CLT_TRY(clt__hf_write_text(cfg_path, cfg_text));
fail:
  clt_model_destroy(m);
  free(map), free(out), free(params), free(hf), free(cfg_path), free(st_path), free(cfg_text);
  return rc;
}
