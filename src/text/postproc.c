/*
 * postproc.c: tokenizer.json's "post_processor", which puts special tokens
 * around an encoded text when asked to (the library's add_special_tokens,
 * CLT_ENCODE_SPECIAL): the BOS of Llama 2 and 3, BERT's [CLS] ... [SEP].
 * Each kind is read into passes of a single-sequence template (the sequence
 * and special tokens' ids, in order), run one after the other:
 *
 *   TemplateProcessing  its "single" template, the special tokens' ids from
 *                       its "special_tokens"
 *   RobertaProcessing,  cls, the sequence, sep
 *   BertProcessing
 *   ByteLevel           nothing (it only trims offsets)
 *   Sequence            its processors in order
 *
 * Pairs of sequences are not encoded here, so "pair" templates are not
 * read.
 */
#include "text/text.h"

#include <stdlib.h>
#include <string.h>

typedef struct post_kind {
  const char *name;
  /* read the component at j into passes of pp (a Sequence: its members') */
  int (*parse)(const clt__jctx *c, json_t *j, clt__postproc *pp, int depth);
} post_kind;

static int parse_sequence(const clt__jctx *c, json_t *j, clt__postproc *pp, int depth);
static int parse_template(const clt__jctx *c, json_t *j, clt__postproc *pp, int depth);
static int parse_cls_sep(const clt__jctx *c, json_t *j, clt__postproc *pp, int depth);
static int parse_nothing(const clt__jctx *c, json_t *j, clt__postproc *pp, int depth);

static const post_kind kinds[] = {
    {"Sequence", parse_sequence},       {"TemplateProcessing", parse_template}, {"RobertaProcessing", parse_cls_sep},
    {"BertProcessing", parse_cls_sep},  {"ByteLevel", parse_nothing},
};
static const int nkinds = (int)(sizeof kinds / sizeof *kinds);

static int add_pass(clt__postproc *pp, struct clt__post_pass **out) {
  struct clt__post_pass *p = realloc(pp->pass, (size_t)(pp->n + 1) * sizeof *p);
  if (!p) return clt__error(CLT_ENOMEM, "out of host memory reading the post-processor");
  pp->pass = p;
  *out = memset(&p[pp->n++], 0, sizeof *p);
  return CLT_OK;
}

static int add_item(struct clt__post_pass *ps, int is_sequence, const uint32_t *ids, int n) {
  clt__post_item *p = realloc(ps->items, (size_t)(ps->n + 1) * sizeof *p);
  if (!p) return clt__error(CLT_ENOMEM, "out of host memory reading the post-processor");
  ps->items = p;
  p[ps->n] = (clt__post_item){is_sequence, NULL, n};
  if (n && !(p[ps->n].ids = malloc((size_t)n * sizeof *ids)))
    return clt__error(CLT_ENOMEM, "out of host memory reading the post-processor");
  if (n) memcpy(p[ps->n].ids, ids, (size_t)n * sizeof *ids);
  ps->n++;
  return CLT_OK;
}

/* A ["token", id] pair of RobertaProcessing and BertProcessing. */
static int token_pair(const clt__jctx *c, json_t *j, const char *key, uint32_t *id) {
  json_t *v = json_object_get(j, key), *i = json_array_get(v, 1);
  if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_string(json_array_get(v, 0)) || !json_is_integer(i) ||
      json_integer_value(i) < 0 || json_integer_value(i) >= (1 << 24))
    return clt__error(CLT_EFORMAT, "%s: %s: \"%s\" is not a pair [\"token\", id] with an id below 2^24", c->file,
                      c->where, key);
  *id = (uint32_t)json_integer_value(i);
  return CLT_OK;
}

static int parse_template(const clt__jctx *c, json_t *j, clt__postproc *pp, int depth) {
  struct clt__post_pass *ps;
  int rc;
  (void)depth;
  if ((rc = add_pass(pp, &ps)) < 0) return rc;
  json_t *single = json_object_get(j, "single"), *specials = json_object_get(j, "special_tokens");
  uint32_t ids[64];
  if (!json_is_array(single)) return clt__error(CLT_EFORMAT, "%s: %s has no list \"single\"", c->file, c->where);
  for (size_t i = 0; i < json_array_size(single); i++) {
    json_t *e = json_array_get(single, i), *sp = json_object_get(e, "SpecialToken"), *sq = json_object_get(e, "Sequence");
    if (sq) {
      const char *which = json_string_value(json_object_get(sq, "id"));
      if (!which || strcmp(which, "A") != 0)
        return clt__error(CLT_EFORMAT, "%s: %s.single[%zu]: a single-sequence template takes the sequence A, not %s",
                          c->file, c->where, i, which ? which : "(no id)");
      int rc = add_item(ps, 1, NULL, 0);
      if (rc < 0) return rc;
      continue;
    }
    const char *name = json_string_value(json_object_get(sp, "id"));
    if (!name)
      return clt__error(CLT_EFORMAT, "%s: %s.single[%zu] is neither {\"SpecialToken\": {\"id\": ...}} nor "
                        "{\"Sequence\": {\"id\": \"A\"}}", c->file, c->where, i);
    json_t *list = json_object_get(json_object_get(specials, name), "ids");
    if (!json_is_array(list) || json_array_size(list) > 64)
      return clt__error(CLT_EFORMAT, "%s: %s: the special token \"%s\" of \"single\" has no \"ids\" in "
                        "\"special_tokens\"", c->file, c->where, name);
    int n = 0;
    for (size_t k = 0; k < json_array_size(list); k++) {
      json_t *v = json_array_get(list, k);
      if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24))
        return clt__error(CLT_EFORMAT, "%s: %s: special_tokens \"%s\": ids[%zu] is not an id below 2^24", c->file,
                          c->where, name, k);
      ids[n++] = (uint32_t)json_integer_value(v);
    }
    int rc = add_item(ps, 0, ids, n);
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

static int parse(const clt__jctx *c, json_t *j, clt__postproc *pp, int depth) {
  int kind, rc;
  if ((rc = clt__json_kind(c, j, "post-processor", kinds, sizeof *kinds, nkinds, &kind)) < 0) return rc;
  return kinds[kind].parse(c, j, pp, depth);
}

static int parse_sequence(const clt__jctx *c, json_t *j, clt__postproc *pp, int depth) {
  json_t *list = json_object_get(j, "processors");
  int rc;
  if (!json_is_array(list))
    return clt__error(CLT_EFORMAT, "%s: %s: a Sequence needs a list \"processors\"", c->file, c->where);
  if (depth > 16) return clt__error(CLT_EFORMAT, "%s: %s: Sequences nested too deep", c->file, c->where);
  for (size_t i = 0; i < json_array_size(list); i++) {
    clt__jctx sub;
    clt__jctx_sub(&sub, c, "processors", 0);
    clt__jctx_sub(&sub, &sub, NULL, (int)i);
    if ((rc = parse(&sub, json_array_get(list, i), pp, depth + 1)) < 0) return rc;
  }
  return CLT_OK;
}

/* RobertaProcessing, BertProcessing: cls, the sequence, sep. */
static int parse_cls_sep(const clt__jctx *c, json_t *j, clt__postproc *pp, int depth) {
  struct clt__post_pass *ps;
  uint32_t cls, sep;
  int rc;
  (void)depth;
  if ((rc = token_pair(c, j, "cls", &cls)) < 0 || (rc = token_pair(c, j, "sep", &sep)) < 0 ||
      (rc = add_pass(pp, &ps)) < 0 || (rc = add_item(ps, 0, &cls, 1)) < 0 || (rc = add_item(ps, 1, NULL, 0)) < 0)
    return rc;
  return add_item(ps, 0, &sep, 1);
}

/* ByteLevel: it only trims offsets. */
static int parse_nothing(const clt__jctx *c, json_t *j, clt__postproc *pp, int depth) {
  (void)c, (void)j, (void)pp, (void)depth;
  return CLT_OK;
}

int clt__postproc_parse(const clt__jctx *c, json_t *j, clt__postproc *out) {
  memset(out, 0, sizeof *out);
  int rc = parse(c, j, out, 0);
  if (rc < 0) clt__postproc_free(out);
  return rc;
}

int clt__postproc_run(const clt__postproc *pp, clt__ids *v, clt__ids *tmp) {
  for (int p = 0; p < pp->n; p++) {
    const struct clt__post_pass *ps = &pp->pass[p];
    tmp->n = 0;
    for (int i = 0; i < ps->n; i++) {
      const uint32_t *ids = ps->items[i].is_sequence ? v->p : ps->items[i].ids;
      const size_t n = ps->items[i].is_sequence ? v->n : (size_t)ps->items[i].n;
      if (clt__ids_reserve(tmp, n) < 0) return CLT_ENOMEM;
      if (n) memcpy(tmp->p + tmp->n, ids, n * sizeof *ids);
      tmp->n += n;
    }
    clt__ids t = *v;
    *v = *tmp, *tmp = t;
  }
  return CLT_OK;
}

void clt__postproc_ends(const clt__postproc *pp, const uint32_t **before, int *nbefore, const uint32_t **after,
                        int *nafter) {
  *before = *after = NULL, *nbefore = *nafter = 0;
  if (!pp->n) return;
  const struct clt__post_pass *ps = &pp->pass[0];
  int seen = 0;
  for (int i = 0; i < ps->n; i++) {
    if (ps->items[i].is_sequence) {
      seen = 1;
    } else if (!seen && !*nbefore) {
      *before = ps->items[i].ids, *nbefore = ps->items[i].n;
    } else if (seen && !*nafter) {
      *after = ps->items[i].ids, *nafter = ps->items[i].n;
    }
  }
}

void clt__postproc_free(clt__postproc *pp) {
  for (int p = 0; p < pp->n; p++) {
    for (int i = 0; i < pp->pass[p].n; i++) free(pp->pass[p].items[i].ids);
    free(pp->pass[p].items);
  }
  free(pp->pass);
  memset(pp, 0, sizeof *pp);
}
