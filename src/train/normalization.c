/*
 * normalization.c: the per-feature normalisation a model was trained with,
 * kept by the trainer (clt_trainer_set_normalization) and written into the
 * metadata of its weights files and checkpoints (key "normalization", a
 * JSON object {"kind": "standard", "shift": [...], "scale": [...]}, each
 * float in 9 significant digits: read back bit for bit), so that whoever
 * uses the weights elsewhere (cltrain eval, export, summary, PyTorch)
 * preprocesses as training did. clt_weights_normalization reads it back.
 */
#include "train/trainer.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

int clt_trainer_set_normalization(clt_trainer *t, clt_normalize_kind kind, const float *shift, const float *scale) {
  CLT_HANDLE(t, "trainer");
  if (!clt_normalize_name(kind)) return clt__error(CLT_EINVAL, "clt_trainer_set_normalization: kind %d is unknown", (int)kind);
  const int64_t n = clt_model_input_size(t->model);
  float *sh = NULL, *sc = NULL;
  if (kind != CLT_NORMALIZE_NONE) {
    CLT_ARG(shift);
    CLT_ARG(scale);
    for (int64_t j = 0; j < n; j++)
      if (!isfinite(shift[j]) || !isfinite(scale[j]) || !(scale[j] > 0))
        return clt__error(CLT_EINVAL, "clt_trainer_set_normalization: feature %lld has shift %g scale %g; the scale "
                          "must be finite and above 0", (long long)j, (double)shift[j], (double)scale[j]);
    sh = clt__calloc((size_t)n, sizeof *sh), sc = clt__calloc((size_t)n, sizeof *sc);
    if (!sh || !sc) {
      free(sh), free(sc);
      return CLT_ENOMEM;
    }
    memcpy(sh, shift, (size_t)n * sizeof *sh);
    memcpy(sc, scale, (size_t)n * sizeof *sc);
  }
  free(t->norm.shift), free(t->norm.scale);
  t->norm.kind = kind, t->norm.shift = sh, t->norm.scale = sc;
  return CLT_OK;
}

int clt__trainer_norm_input(const clt_trainer *t, const float *x, int64_t n, const float **use, float **copy) {
  *use = x, *copy = NULL;
  if (t->norm.kind == CLT_NORMALIZE_NONE || !x || n <= 0) return CLT_OK;
  const int64_t F = clt_model_input_size(t->model);
  float *c = malloc((size_t)(n * F) * sizeof *c);
  if (!c) return clt__error(CLT_ENOMEM, "cannot allocate the normalised copy of %lld samples", (long long)n);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < F; j++) c[i * F + j] = (x[i * F + j] - t->norm.shift[j]) / t->norm.scale[j];
  *use = c, *copy = c;
  return CLT_OK;
}

char *clt__norm_json(clt_normalize_kind kind, const float *shift, const float *scale, int64_t n) {
  if (kind == CLT_NORMALIZE_NONE) return NULL;
  json_t *o = json_object(), *a = json_array(), *b = json_array();
  for (int64_t j = 0; j < n; j++) {
    json_array_append_new(a, json_real(shift[j]));
    json_array_append_new(b, json_real(scale[j]));
  }
  json_object_set_new(o, "kind", json_string(clt_normalize_name(kind)));
  json_object_set_new(o, "shift", a);
  json_object_set_new(o, "scale", b);
  char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
  json_decref(o);
  return s;
}

char *clt__trainer_norm_json(const clt_trainer *t) {
  return clt__norm_json(t->norm.kind, t->norm.shift, t->norm.scale, clt_model_input_size(t->model));
}

int clt__norm_parse(const char *path, const char *text, clt_normalize_kind *kind, float *shift, float *scale,
                    int64_t cap, int64_t *n) {
  json_error_t err;
  json_t *o = json_loads(text, 0, &err), *a, *b, *k;
  int rc = CLT_OK;
  *kind = CLT_NORMALIZE_NONE, *n = 0;
  if (!o || !json_is_object(o) || !json_is_string(k = json_object_get(o, "kind")) ||
      !json_is_array(a = json_object_get(o, "shift")) || !json_is_array(b = json_object_get(o, "scale")) ||
      json_array_size(a) != json_array_size(b)) {
    rc = clt__error(CLT_EFORMAT, "%s: the metadata 'normalization' is not {\"kind\": ..., \"shift\": [...], \"scale\": "
                    "[...]} with shift and scale as long", path);
    goto out;
  }
  if ((rc = clt_normalize_parse(json_string_value(k), kind)) < 0) {
    rc = clt__error(CLT_EFORMAT, "%s: the metadata 'normalization': %s", path, clt_last_error());
    goto out;
  }
  *n = (int64_t)json_array_size(a);
  for (int64_t j = 0; j < *n; j++) {
    double s = json_number_value(json_array_get(a, (size_t)j)), c = json_number_value(json_array_get(b, (size_t)j));
    if (!json_is_number(json_array_get(a, (size_t)j)) || !json_is_number(json_array_get(b, (size_t)j)) ||
        !isfinite(s) || !(c > 0) || !isfinite(c)) {
      rc = clt__error(CLT_EFORMAT, "%s: the metadata 'normalization': feature %lld's shift or scale is no finite "
                      "number (a scale > 0)", path, (long long)j);
      goto out;
    }
    if (j < cap) {
      if (shift) shift[j] = (float)s;
      if (scale) scale[j] = (float)c;
    }
  }
out:
  json_decref(o);
  return rc;
}

int clt_weights_normalization(const char *path, clt_normalize_kind *kind, float *shift, float *scale, int64_t cap,
                              int64_t *n) {
  clt__st_file *f = NULL;
  int rc = CLT_OK;
  CLT_PATH_ARG(path);
  CLT_ARG(kind);
  CLT_ARG(n);
  *kind = CLT_NORMALIZE_NONE, *n = 0;
  CLT_TRY(clt__st_open(path, &f));
  const char *text = clt__st_metadata(f, "normalization");
  if (text) rc = clt__norm_parse(path, text, kind, shift, scale, cap, n);
fail:
  clt__st_close(f);
  return rc;
}
