/*
 * pretokenizer.c: tokenizer.json's "pre_tokenizer", the kinds byte-level
 * BPE tokenizers use (GPT-2: ByteLevel; Llama 3, Qwen2: Sequence [Split
 * with the model's pattern, ByteLevel without its own]). A Sequence is
 * flattened into steps; each step cuts a piece of text into pieces that go
 * on, one by one and in order, to the next step and, after the last, to the
 * model, as tokenizers/src/pre_tokenizers does (empty pieces are dropped
 * after every step):
 *
 *   Split      at the matches of a pattern, the matches kept as pieces of
 *              their own (Isolated), dropped (Removed), joined to the piece
 *              before (MergedWithPrevious) or after (MergedWithNext), or runs
 *              of matches and of non-matches joined (Contiguous); `invert`
 *              swaps matches and the text between them
 *   Digits     the numbers (Unicode's N) apart from the rest, each digit on
 *              its own with individual_digits
 *   ByteLevel  a space in front unless the piece starts with one
 *              (add_prefix_space), the cut of GPT-2's pattern (use_regex),
 *              then every byte as its character of the byte-level alphabet
 */
#include "text/text.h"

#include <stdlib.h>
#include <string.h>

typedef struct pre_kind {
  const char *name;
  /* read the component at j into steps of pt (a Sequence: its members') */
  int (*parse)(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth);
  /* cut one piece, sending the pieces on to step + 1 */
  int (*run)(clt__pretok_step *st, int step, const char *s, size_t n, int first, clt__piece_fn next, void *user);
} pre_kind;

static int parse_sequence(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth);
static int parse_split(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth);
static int parse_bytelevel(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth);
static int parse_digits(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth);
static int parse_metaspace(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth);
static int run_split(clt__pretok_step *st, int step, const char *s, size_t n, int first, clt__piece_fn next,
                     void *user);
static int run_bytelevel(clt__pretok_step *st, int step, const char *s, size_t n, int first, clt__piece_fn next,
                         void *user);
static int run_metaspace(clt__pretok_step *st, int step, const char *s, size_t n, int first, clt__piece_fn next,
                         void *user);

static const pre_kind kinds[] = {
    {"Sequence", parse_sequence, NULL},
    {"Split", parse_split, run_split},
    {"ByteLevel", parse_bytelevel, run_bytelevel},
    {"Digits", parse_digits, run_split},
    {"Metaspace", parse_metaspace, run_metaspace},
};
static const int nkinds = (int)(sizeof kinds / sizeof *kinds);

/* GPT-2's pattern (openai/gpt-2 encoder.py), ByteLevel's with use_regex. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char *const behaviors[] = {[CLT__SPLIT_REMOVED] = "Removed", [CLT__SPLIT_ISOLATED] = "Isolated",
                                        [CLT__SPLIT_MERGED_PREV] = "MergedWithPrevious",
                                        [CLT__SPLIT_MERGED_NEXT] = "MergedWithNext",
                                        [CLT__SPLIT_CONTIGUOUS] = "Contiguous"};
#define NBEHAVIORS ((int)(sizeof behaviors / sizeof *behaviors))

static int add_step(clt__pretokenizer *pt, int kind, clt__pretok_step **out) {
  clt__pretok_step *p = realloc(pt->steps, (size_t)(pt->n + 1) * sizeof *p);
  if (!p) return clt__error(CLT_ENOMEM, "out of host memory reading a pre-tokenizer");
  pt->steps = p;
  *out = memset(&p[pt->n++], 0, sizeof *p);
  (*out)->kind = kind;
  return CLT_OK;
}

static int parse_behavior(const clt__jctx *c, json_t *j, int *out) {
  const char *s;
  size_t n;
  int rc = clt__json_string(c, j, "behavior", &s, &n);
  if (rc < 0) return rc;
  for (int i = 0; i < NBEHAVIORS; i++)
    if (strlen(behaviors[i]) == n && memcmp(behaviors[i], s, n) == 0) return *out = i, CLT_OK;
  return clt__error(CLT_EFORMAT, "%s: %s: \"behavior\" \"%.*s\" is none of Removed, Isolated, MergedWithPrevious, "
                    "MergedWithNext, Contiguous", c->file, c->where, (int)(n > 60 ? 60 : n), s);
}

static int parse(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int depth) {
  int kind, rc;
  if ((rc = clt__json_kind(c, j, "pre-tokenizer", kinds, sizeof *kinds, nkinds, &kind)) < 0) return rc;
  return kinds[kind].parse(c, j, pt, kind, depth);
}

static int parse_sequence(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth) {
  json_t *list = json_object_get(j, "pretokenizers");
  int rc;
  (void)kind;
  if (!json_is_array(list))
    return clt__error(CLT_EFORMAT, "%s: %s: a Sequence needs a list \"pretokenizers\"", c->file, c->where);
  if (depth > 16) return clt__error(CLT_EFORMAT, "%s: %s: Sequences nested too deep", c->file, c->where);
  for (size_t i = 0; i < json_array_size(list); i++) {
    clt__jctx sub;
    clt__jctx_sub(&sub, c, "pretokenizers", 0);
    clt__jctx_sub(&sub, &sub, NULL, (int)i);
    if ((rc = parse(&sub, json_array_get(list, i), pt, depth + 1)) < 0) return rc;
  }
  return CLT_OK;
}

static int parse_split(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth) {
  clt__pretok_step *st = NULL;
  int rc;
  (void)depth;
  if ((rc = add_step(pt, kind, &st)) < 0 || (rc = parse_behavior(c, j, &st->behavior)) < 0 ||
      (rc = clt__json_bool(c, j, "invert", 0, &st->invert)) < 0)
    return rc;
  return clt__parse_pattern(c, j, "pattern", &st->re);
}

/* Digits: Split at Unicode's numbers (Rust's char::is_numeric), runs of them
 * joined (Contiguous) unless individual_digits. */
static int parse_digits(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth) {
  clt__pretok_step *st = NULL;
  int rc, each;
  (void)depth;
  if ((rc = add_step(pt, kind, &st)) < 0 || (rc = clt__json_bool(c, j, "individual_digits", 0, &each)) < 0) return rc;
  st->behavior = CLT__SPLIT_ISOLATED;
  return clt__regex_compile(&st->re, each ? "\\p{N}" : "\\p{N}+", each ? 5 : 6, 0, c->file, c->where);
}

/* Metaspace's replacement (one character) and prepend_scheme (or the older
 * add_prefix_space: true always, false never; shared with the decoder). */
int clt__parse_metaspace(const clt__jctx *c, json_t *j, char *rep, size_t *rep_n, int *prepend) {
  static const char *const schemes[] = {[CLT__PREPEND_NEVER] = "never", [CLT__PREPEND_ALWAYS] = "always",
                                        [CLT__PREPEND_FIRST] = "first"};
  const char *s;
  size_t n;
  int rc, add;
  if ((rc = clt__json_string(c, j, "replacement", &s, &n)) < 0) return rc;
  if (n == 0 || n > 4 || clt__utf8_len((unsigned char)s[0]) != n)
    return clt__error(CLT_EFORMAT, "%s: %s: \"replacement\" is not one character", c->file, c->where);
  memcpy(rep, s, n);
  rep[n] = 0, *rep_n = n;
  *prepend = CLT__PREPEND_ALWAYS;
  if (json_object_get(j, "prepend_scheme")) {
    if ((rc = clt__json_string(c, j, "prepend_scheme", &s, &n)) < 0) return rc;
    for (int i = 0; i < 3; i++)
      if (strlen(schemes[i]) == n && memcmp(schemes[i], s, n) == 0) return *prepend = i, CLT_OK;
    return clt__error(CLT_EFORMAT, "%s: %s: \"prepend_scheme\" \"%.*s\" is none of always, first, never", c->file,
                      c->where, (int)(n > 40 ? 40 : n), s);
  }
  if (json_object_get(j, "add_prefix_space")) {
    if ((rc = clt__json_bool(c, j, "add_prefix_space", 0, &add)) < 0) return rc;
    *prepend = add ? CLT__PREPEND_ALWAYS : CLT__PREPEND_NEVER;
  }
  return CLT_OK;
}

static int parse_metaspace(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth) {
  clt__pretok_step *st = NULL;
  int rc;
  (void)depth;
  if ((rc = add_step(pt, kind, &st)) < 0 ||
      (rc = clt__parse_metaspace(c, j, st->rep, &st->rep_n, &st->prepend)) < 0 ||
      (rc = clt__json_bool(c, j, "split", 1, &st->split)) < 0)
    return rc;
  return clt__regex_compile(&st->re, st->rep, st->rep_n, 1, c->file, c->where);
}

static int parse_bytelevel(const clt__jctx *c, json_t *j, clt__pretokenizer *pt, int kind, int depth) {
  clt__pretok_step *st = NULL;
  int rc;
  (void)depth;
  if ((rc = add_step(pt, kind, &st)) < 0 ||
      (rc = clt__json_bool(c, j, "add_prefix_space", -1, &st->add_prefix_space)) < 0 ||
      (rc = clt__json_bool(c, j, "use_regex", 1, &st->use_regex)) < 0)
    return rc;
  st->behavior = CLT__SPLIT_ISOLATED;
  return st->use_regex ? clt__regex_compile(&st->re, gpt2_pattern, sizeof gpt2_pattern - 1, 0, c->file, c->where)
                       : CLT_OK;
}

int clt__pretokenizer_parse(const clt__jctx *c, json_t *j, clt__pretokenizer *out) {
  memset(out, 0, sizeof *out);
  int rc = parse(c, j, out, 0);
  if (rc < 0) clt__pretokenizer_free(out);
  return rc;
}

/* The spans joined or dropped as the behavior says (NormalizedString::split),
 * in place; a dropped span gets match = -1. */
static void apply_behavior(clt__spans *v, int behavior) {
  size_t k = 0;
  int prev = 0;
  switch (behavior) {
  case CLT__SPLIT_ISOLATED: return;
  case CLT__SPLIT_REMOVED:
    for (size_t i = 0; i < v->n; i++)
      if (v->p[i].match) v->p[i].match = -1;
    return;
  case CLT__SPLIT_CONTIGUOUS:
    for (size_t i = 0; i < v->n; i++) {
      const int m = v->p[i].match;
      if (k && m == prev) v->p[k - 1].end = v->p[i].end;
      else v->p[k++] = v->p[i];
      prev = m;
    }
    break;
  case CLT__SPLIT_MERGED_PREV:
    for (size_t i = 0; i < v->n; i++) {
      const int m = v->p[i].match;
      if (k && m && !prev) v->p[k - 1].end = v->p[i].end;
      else v->p[k++] = v->p[i];
      prev = m;
    }
    break;
  default: /* CLT__SPLIT_MERGED_NEXT: the same from the back */
    k = v->n;
    for (size_t i = v->n; i-- > 0;) {
      const int m = v->p[i].match;
      if (k < v->n && m && !prev) v->p[k].start = v->p[i].start;
      else v->p[--k] = v->p[i];
      prev = m;
    }
    memmove(v->p, v->p + k, (v->n - k) * sizeof *v->p);
    k = v->n - k;
    break;
  }
  v->n = k;
  for (size_t i = 0; i < k; i++) v->p[i].match = 0;
}

/* The spans of s on to the step after st, each mapped to the byte-level
 * alphabet first when map. */
static int send(clt__pretok_step *st, int step, const char *s, int first, int map, clt__piece_fn next, void *user) {
  int rc;
  for (size_t i = 0; i < st->spans.n; i++) {
    const clt__span *sp = &st->spans.p[i];
    if (sp->match < 0 || sp->end == sp->start) continue;
    if (map) {
      st->mapped.n = 0;
      if ((rc = clt__bytelevel_map_bytes(s + sp->start, sp->end - sp->start, &st->mapped)) < 0) return rc;
      rc = next(user, step + 1, st->mapped.p, st->mapped.n, first && sp->start == 0);
    } else {
      rc = next(user, step + 1, s + sp->start, sp->end - sp->start, first && sp->start == 0);
    }
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

static int run_split(clt__pretok_step *st, int step, const char *s, size_t n, int first, clt__piece_fn next,
                     void *user) {
  int rc = clt__regex_spans(&st->re, s, n, st->invert, 1, &st->spans);
  if (rc < 0) return rc;
  apply_behavior(&st->spans, st->behavior);
  return send(st, step, s, first, 0, next, user);
}

static int run_bytelevel(clt__pretok_step *st, int step, const char *s, size_t n, int first, clt__piece_fn next,
                         void *user) {
  int rc;
  if (st->add_prefix_space && s[0] != ' ') {
    st->with_space.n = 0;
    if (clt__buf_put(&st->with_space, " ", 1) < 0 || clt__buf_put(&st->with_space, s, n) < 0) return CLT_ENOMEM;
    s = st->with_space.p, n = st->with_space.n;
  }
  if (!st->use_regex) {
    st->mapped.n = 0;
    if ((rc = clt__bytelevel_map_bytes(s, n, &st->mapped)) < 0) return rc;
    return next(user, step + 1, st->mapped.p, st->mapped.n, first);
  }
  if ((rc = clt__regex_spans(&st->re, s, n, 0, 1, &st->spans)) < 0) return rc;
  return send(st, step, s, first, 1, next, user);
}

/* Metaspace: every ' ' as the replacement, the replacement in front as
 * prepend_scheme says (always; first: only for the piece that starts the
 * text; never) unless the piece starts with it, then a cut before each
 * replacement (MergedWithNext). */
static int run_metaspace(clt__pretok_step *st, int step, const char *s, size_t n, int first, clt__piece_fn next,
                         void *user) {
  clt__buf *o = &st->with_space;
  int rc;
  o->n = 0;
  const int starts = (n && s[0] == ' ') || (n >= st->rep_n && memcmp(s, st->rep, st->rep_n) == 0); /* once replaced */
  if (!starts && (st->prepend == CLT__PREPEND_ALWAYS || (st->prepend == CLT__PREPEND_FIRST && first)) &&
      clt__buf_put(o, st->rep, st->rep_n) < 0)
    return CLT_ENOMEM;
  if (clt__buf_reserve(o, n + n * st->rep_n) < 0) return CLT_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == ' ') {
      memcpy(o->p + o->n, st->rep, st->rep_n);
      o->n += st->rep_n;
    } else {
      o->p[o->n++] = s[i];
    }
  }
  if (!st->split) return next(user, step + 1, o->p, o->n, first);
  if ((rc = clt__regex_spans(&st->re, o->p, o->n, 0, 1, &st->spans)) < 0) return rc;
  apply_behavior(&st->spans, CLT__SPLIT_MERGED_NEXT);
  return send(st, step, o->p, first, 0, next, user);
}

int clt__pretokenizer_step(clt__pretokenizer *pt, int step, const char *s, size_t n, int first, clt__piece_fn next,
                           void *user) {
  clt__pretok_step *st = &pt->steps[step];
  return kinds[st->kind].run(st, step, s, n, first, next, user);
}

void clt__pretokenizer_free(clt__pretokenizer *pt) {
  for (int i = 0; i < pt->n; i++) {
    clt__regex_free(&pt->steps[i].re);
    free(pt->steps[i].spans.p);
    clt__buf_free(&pt->steps[i].with_space);
    clt__buf_free(&pt->steps[i].mapped);
  }
  free(pt->steps);
  memset(pt, 0, sizeof *pt);
}
