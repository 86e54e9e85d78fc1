/*
 * hf_common.c: what every Hugging Face class's import and export share
 * (hf_arch.h): config.json's keys read with messages that name the file
 * and the key, the hf- record in an imported spec's comment, numbers
 * written as the shortest decimal that reads back, and atomic writes of the
 * files of a checkpoint directory.
 */
#include "io/hf_arch.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/outfile.h"

#define MAX_DIM 1000000

char *clt__hf_json_text(const json_t *v) {
  return v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : clt__strdup("null");
}

int clt__hf_int_key(const char *path, json_t *j, const char *key, int dflt, const char *needs, int *out) {
  json_t *v = json_object_get(j, key);
  if (!v || json_is_null(v)) {
    if (dflt >= 0) {
      *out = dflt;
      return CLT_OK;
    }
    return clt__error(CLT_EFORMAT, "%s: no \"%s\", which %s", path, key, needs);
  }
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > MAX_DIM * 10LL) {
    char *text = clt__hf_json_text(v);
    int rc = clt__error(CLT_EFORMAT, "%s: \"%s\" is %s, not an integer from 1 to %d", path, key, text ? text : "?",
                        MAX_DIM * 10);
    free(text);
    return rc;
  }
  *out = (int)json_integer_value(v);
  return CLT_OK;
}

int clt__hf_float_key(const char *path, json_t *j, const char *key, double dflt, double lo, double hi, double *out) {
  json_t *v = json_object_get(j, key);
  if (!v || json_is_null(v)) {
    *out = dflt;
    return CLT_OK;
  }
  double x = json_is_number(v) ? json_number_value(v) : lo;
  if (!(x > lo && x <= hi)) {
    char *text = clt__hf_json_text(v);
    int rc = clt__error(CLT_EFORMAT, "%s: \"%s\" is %s, not a number above %g and at most %g", path, key,
                        text ? text : "?", lo, hi);
    free(text);
    return rc;
  }
  *out = x;
  return CLT_OK;
}

int clt__hf_bool_key(const char *path, json_t *j, const char *key, int dflt, int *out) {
  json_t *v = json_object_get(j, key);
  if (!v || json_is_null(v)) {
    *out = dflt;
    return CLT_OK;
  }
  if (!json_is_boolean(v)) return clt__error(CLT_EFORMAT, "%s: \"%s\" is not true or false", path, key);
  *out = json_is_true(v);
  return CLT_OK;
}

int clt__hf_bool_must(const char *path, json_t *j, const char *key, int want, const char *why) {
  int have = want;
  int rc = clt__hf_bool_key(path, j, key, want, &have);
  if (rc < 0) return rc;
  if (have != want)
    return clt__error(CLT_EFORMAT, "%s: \"%s\": %s is not supported: %s", path, key, want ? "false" : "true", why);
  return CLT_OK;
}

double clt__hf_short_decimal(float v) {
  char buf[32];
  clt__hf_short_text(v, buf, sizeof buf);
  return strtod(buf, NULL);
}

void clt__hf_short_text(float v, char *buf, size_t len) {
  if (v == (float)(int64_t)v && fabsf(v) < 1e15f) { /* rope_theta 500000, not 5e+05 */
    snprintf(buf, len, "%.0f", (double)v);
    return;
  }
  for (int p = 1; p < 10; p++) {
    snprintf(buf, len, "%.*g", p, (double)v);
    if ((float)strtod(buf, NULL) == v) return;
  }
}

/* ---- the record in an imported spec's comment ---- */

char *clt__hf_record_text(const clt__hf_arch *a, const char *source, int max_positions) {
  size_t size = strlen(source) + 256;
  char *text = clt__calloc(1, size), *src = clt__strdup(source);
  if (!text || !src) {
    free(text), free(src);
    return NULL;
  }
  for (char *p = src; *p; p++) /* the comment stays one line whatever the path holds */
    if (*p == '\n' || *p == '\r') *p = ' ';
  size_t at = (size_t)snprintf(text, size,
                               "# %s imported from Hugging Face by cltrain hf import; hf export reads the\n"
                               "# hf- lines (cltrain(1)): the class to export to and where the tokenizer is\n"
                               "# hf-class: %s\n# hf-source: %s\n", a->hf_class, a->hf_class, src);
  if (max_positions) snprintf(text + at, size - at, "# hf-max-positions: %d\n", max_positions);
  free(src);
  return text;
}

/* The value of "# KEY: value" on the line at p (up to its end), or NULL. */
static const char *record_value(const char *p, const char *key, size_t *len) {
  size_t n = strlen(key);
  if (strncmp(p, "# ", 2) != 0 || strncmp(p + 2, key, n) != 0 || p[2 + n] != ':') return NULL;
  p += 3 + n;
  while (*p == ' ') p++;
  const char *end = strchr(p, '\n');
  *len = end ? (size_t)(end - p) : strlen(p);
  while (*len && (p[*len - 1] == ' ' || p[*len - 1] == '\r')) (*len)--;
  return p;
}

void clt__hf_record_read(const char *text, clt__hf_record *r) {
  memset(r, 0, sizeof *r);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    size_t len;
    const char *v;
    if ((v = record_value(p, "hf-class", &len)) && len < sizeof r->hf_class) {
      memcpy(r->hf_class, v, len);
      r->hf_class[len] = 0;
    } else if ((v = record_value(p, "hf-source", &len)) && len < sizeof r->source) {
      memcpy(r->source, v, len);
      r->source[len] = 0;
    } else if ((v = record_value(p, "hf-max-positions", &len))) {
      long n = strtol(v, NULL, 10);
      r->max_positions = n > 0 && n <= (1L << 30) ? (int)n : 0;
    }
  }
}

/* ---- shapes and files ---- */

void clt__hf_shape(const clt_model_spec *spec, const clt__hf_tensor *t, int64_t shape[2], int *ndim) {
  const clt_param_spec *p = &spec->layers[t->layer].param[t->param];
  *ndim = p->ndim;
  shape[0] = p->shape[0];
  shape[1] = p->ndim > 1 ? p->shape[1] : 0;
  if (t->transposed) {
    shape[0] = p->shape[1];
    shape[1] = p->shape[0];
  }
}

char *clt__hf_path(const char *dir, const char *file) {
  size_t len = strlen(dir) + strlen(file) + 2;
  char *p = clt__calloc(1, len);
  if (p) snprintf(p, len, "%s/%s", dir, file);
  return p;
}

int clt__hf_write_bytes(const char *path, const void *data, size_t len) {
  int rc = CLT_OK;
  char *target = NULL, *tmp = NULL;
  CLT_TRY(clt__output_resolve(NULL, path, &target));
  if (!(tmp = clt__tmp_path(target))) { rc = CLT_ENOMEM; goto fail; }
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    rc = clt__error(CLT_EIO, "cannot create %s: %s", tmp, strerror(errno));
    goto fail;
  }
  int bad = (len && fwrite(data, 1, len, f) != len) || fflush(f) != 0 || fsync(fileno(f)) != 0;
  if (fclose(f) != 0 || bad) {
    rc = clt__error(CLT_EIO, "writing %s failed: %s", tmp, strerror(errno));
    unlink(tmp);
    goto fail;
  }
  rc = clt__output_replace(tmp, target);
fail:
  free(tmp), free(target);
  return rc;
}

int clt__hf_write_text(const char *path, const char *text) { return clt__hf_write_bytes(path, text, strlen(text)); }

char *clt__hf_json_dump(const json_t *j) {
  char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
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
