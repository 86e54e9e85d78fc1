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
 * Unicode's normalization forms (NFC, NFD, NFKC, NFKD: Qwen2's tokenizer has
 * NFC) are refused by name, saying why: they need Unicode's decomposition
 * and composition tables, which no library of cltrain's build stack has
 * (and cltrain writes no Unicode tables of its own). Others (Lowercase,
 * Strip, BertNormalizer, ...) are refused as unknown.
 */
#include "text/text.h"

#include <stdlib.h>
#include <string.h>

typedef struct norm_kind {
  const char *name;
  /* read the component at j into steps of nz (a Sequence: its members') */
  int (*parse)(const clt__jctx *c, json_t *j, clt__normalizer *nz, int kind, int depth);
  /* s[0..n) normalized, appended to out */
  int (*run)(const clt__norm_step *st, const char *s, size_t n, int utf_checked, clt__buf *out);
} norm_kind;

static int parse_sequence(const clt__jctx *c, json_t *j, clt__normalizer *nz, int kind, int depth);
static int parse_prepend(const clt__jctx *c, json_t *j, clt__normalizer *nz, int kind, int depth);
static int parse_replace(const clt__jctx *c, json_t *j, clt__normalizer *nz, int kind, int depth);
static int run_prepend(const clt__norm_step *st, const char *s, size_t n, int utf_checked, clt__buf *out);
static int run_replace(const clt__norm_step *st, const char *s, size_t n, int utf_checked, clt__buf *out);

static const norm_kind kinds[] = {
    {"Sequence", parse_sequence, NULL},
    {"Prepend", parse_prepend, run_prepend},
    {"Replace", parse_replace, run_replace},
};
static const int nkinds = (int)(sizeof kinds / sizeof *kinds);

/* The kinds refused with a reason rather than as unknown. */
static const char no_unicode[] = "cltrain has no Unicode normalization (its build stack has no library for it)";
static const struct {
  const char *name, *why;
} refused[] = {
    {"NFC", no_unicode},
    {"NFD", no_unicode},
    {"NFKC", no_unicode},
    {"NFKD", no_unicode},
};
static const int nrefused = (int)(sizeof refused / sizeof *refused);

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

static int add_step(clt__normalizer *nz, int kind, clt__norm_step **out) {
  clt__norm_step *p = realloc(nz->steps, (size_t)(nz->n + 1) * sizeof *p);
  if (!p) return clt__error(CLT_ENOMEM, "out of host memory reading a normalizer");
  nz->steps = p;
  *out = memset(&p[nz->n++], 0, sizeof *p);
  (*out)->kind = kind;
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
  json_t *type = json_object_get(j, "type");
  for (int i = 0; i < nrefused && json_is_string(type); i++)
    if (strcmp(json_string_value(type), refused[i].name) == 0)
      return clt__error(CLT_EFORMAT, "%s: %s type \"%s\" is not supported: %s", c->file, c->where, refused[i].name,
                        refused[i].why);
  if ((rc = clt__json_kind(c, j, "normalizer", kinds, sizeof *kinds, nkinds, &kind)) < 0) return rc;
  return kinds[kind].parse(c, j, nz, kind, depth);
}

static int parse_sequence(const clt__jctx *c, json_t *j, clt__normalizer *nz, int kind, int depth) {
  json_t *list = json_object_get(j, "normalizers");
  int rc;
  (void)kind;
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

static int parse_prepend(const clt__jctx *c, json_t *j, clt__normalizer *nz, int kind, int depth) {
  clt__norm_step *st = NULL;
  const char *s;
  size_t n;
  int rc;
  (void)depth;
  if ((rc = add_step(nz, kind, &st)) < 0 || (rc = clt__json_string(c, j, "prepend", &s, &n)) < 0) return rc;
  return copy_text(s, n, &st->text, &st->text_n);
}

static int parse_replace(const clt__jctx *c, json_t *j, clt__normalizer *nz, int kind, int depth) {
  clt__norm_step *st = NULL;
  const char *s;
  size_t n;
  int rc;
  (void)depth;
  if ((rc = add_step(nz, kind, &st)) < 0 || (rc = clt__json_string(c, j, "content", &s, &n)) < 0 ||
      (rc = copy_text(s, n, &st->text, &st->text_n)) < 0)
    return rc;
  return clt__parse_pattern(c, j, "pattern", (clt__regex *)&st->re);
}

static int run_prepend(const clt__norm_step *st, const char *s, size_t n, int utf_checked, clt__buf *out) {
  (void)utf_checked;
  if (n && clt__buf_put(out, st->text, st->text_n) < 0) return CLT_ENOMEM;
  return clt__buf_put(out, s, n);
}

static int run_replace(const clt__norm_step *st, const char *s, size_t n, int utf_checked, clt__buf *out) {
  return clt__regex_replace((clt__regex *)&st->re, s, n, st->text, st->text_n, utf_checked, out);
}

int clt__normalizer_parse(const clt__jctx *c, json_t *j, clt__normalizer *out) {
  memset(out, 0, sizeof *out);
  int rc = parse(c, j, out, 0);
  if (rc < 0) clt__normalizer_free(out);
  return rc;
}

int clt__normalizer_run(clt__normalizer *nz, const char *s, size_t n, int utf_checked, const char **res,
                        size_t *res_n) {
  int rc;
  for (int i = 0; i < nz->n; i++) {
    clt__buf *o = &nz->tmp[i & 1]; /* s is the other one */
    o->n = 0;
    if ((rc = kinds[nz->steps[i].kind].run(&nz->steps[i], s, n, utf_checked, o)) < 0) return rc;
    s = o->p, n = o->n;
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
