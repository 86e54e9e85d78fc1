/*
 * normalizer.c: tokenizer.json's "normalizer", the kinds SentencePiece-style
 * tokenizers use (Llama 2, Mistral: Sequence [Prepend "▁", Replace " " ->
 * "▁"]). A Sequence is flattened into its steps, run in order; each step
 * maps a piece of text to a new one, as tokenizers/src/normalizers does:
 *
 *   Prepend  its text in front of a piece that is not empty
 *   Replace  every match of its pattern (a literal String or a Regex) by
 *            its content
 *
 * Normalizers that need Unicode's case or decomposition tables (NFC, NFKC,
 * Lowercase, ...) are refused by name.
 */
#include "text/text.h"

#include <stdlib.h>
#include <string.h>

enum { NORM_SEQUENCE, NORM_PREPEND, NORM_REPLACE };

typedef struct norm_kind {
  const char *name;
} norm_kind;

static const norm_kind kinds[] = {[NORM_SEQUENCE] = {"Sequence"}, [NORM_PREPEND] = {"Prepend"},
                                  [NORM_REPLACE] = {"Replace"}};
#define NKINDS ((int)(sizeof kinds / sizeof *kinds))

int clt__parse_pattern(const clt__jctx *c, json_t *obj, const char *key, clt__regex *re) {
  clt__jctx sub, leaf;
  clt__jctx_sub(&sub, c, key, 0);
  json_t *p = json_object_get(obj, key);
  json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
  if (!json_is_object(p) || json_object_size(p) != 1 || !(json_is_string(s) || json_is_string(r)))
    return clt__error(CLT_EFORMAT, "%s: %s is not {\"String\": TEXT} or {\"Regex\": PATTERN}", c->file, sub.where);
  json_t *v = s ? s : r;
  clt__jctx_sub(&leaf, &sub, s ? "String" : "Regex", 0);
  return clt__regex_compile(re, json_string_value(v), json_string_length(v), s != NULL, c->file, leaf.where);
}

static int add_step(clt__normalizer *nz, clt__norm_step **out) {
  clt__norm_step *p = realloc(nz->steps, (size_t)(nz->n + 1) * sizeof *p);
  if (!p) return clt__error(CLT_ENOMEM, "out of host memory reading a normalizer");
  nz->steps = p;
  *out = memset(&p[nz->n++], 0, sizeof *p);
  return CLT_OK;
}

static int copy_text(const char *s, size_t n, char **out, size_t *out_n) {
  if (!(*out = malloc(n + 1))) return clt__error(CLT_ENOMEM, "out of host memory reading tokenizer.json");
  memcpy(*out, s, n);
  (*out)[n] = 0;
  *out_n = n;
  return CLT_OK;
}

static int parse(const clt__jctx *c, json_t *j, clt__normalizer *nz, int depth) {
  int kind, rc;
  if ((rc = clt__json_kind(c, j, "normalizer", kinds, sizeof *kinds, NKINDS, &kind)) < 0) return rc;
  if (kind == NORM_SEQUENCE) {
    json_t *list = json_object_get(j, "normalizers");
    if (!json_is_array(list))
      return clt__error(CLT_EFORMAT, "%s: %s: a Sequence needs a list \"normalizers\"", c->file, c->where);
    if (depth > 16) return clt__error(CLT_EFORMAT, "%s: %s: Sequences nested too deep", c->file, c->where);
    for (size_t i = 0; i < json_array_size(list); i++) {
      clt__jctx sub;
      clt__jctx_sub(&sub, c, "normalizers", 0);
      clt__jctx_sub(&sub, &sub, NULL, (int)i);
      if ((rc = parse(&sub, json_array_get(list, i), nz, depth + 1)) < 0) return rc;
    }
    return CLT_OK;
  }
  clt__norm_step *st = NULL;
  const char *s;
  size_t n;
  if ((rc = add_step(nz, &st)) < 0) return rc;
  st->kind = kind;
  if (kind == NORM_PREPEND) {
    if ((rc = clt__json_string(c, j, "prepend", &s, &n)) < 0) return rc;
    return copy_text(s, n, &st->text, &st->text_n);
  }
  /* NORM_REPLACE */
  if ((rc = clt__json_string(c, j, "content", &s, &n)) < 0 || (rc = copy_text(s, n, &st->text, &st->text_n)) < 0)
    return rc;
  return clt__parse_pattern(c, j, "pattern", &st->re);
}

int clt__normalizer_parse(const clt__jctx *c, json_t *j, clt__normalizer *out) {
  memset(out, 0, sizeof *out);
  int rc = parse(c, j, out, 0);
  if (rc < 0) clt__normalizer_free(out);
  return rc;
}

int clt__normalizer_run(clt__normalizer *nz, const char *s, size_t n, int utf_checked, const char **res,
                        size_t *res_n) {
  int rc = CLT_OK, w = 0;
  for (int i = 0; i < nz->n; i++) {
    const clt__norm_step *st = &nz->steps[i];
    clt__buf *o = &nz->tmp[w];
    o->n = 0;
    if (st->kind == NORM_PREPEND) {
      if (n && (clt__buf_put(o, st->text, st->text_n) < 0 || clt__buf_put(o, s, n) < 0)) return CLT_ENOMEM;
      if (!n) continue; /* nothing to prepend to: s stays */
    } else if ((rc = clt__regex_replace((clt__regex *)&st->re, s, n, st->text, st->text_n, utf_checked, o)) < 0) {
      return rc;
    }
    s = o->p, n = o->n;
    w ^= 1;
  }
  *res = s, *res_n = n;
  return CLT_OK;
}

void clt__normalizer_free(clt__normalizer *nz) {
  for (int i = 0; i < nz->n; i++) {
    free(nz->steps[i].text);
    clt__regex_free(&nz->steps[i].re);
  }
  free(nz->steps);
  clt__buf_free(&nz->tmp[0]);
  clt__buf_free(&nz->tmp[1]);
  memset(nz, 0, sizeof *nz);
}
