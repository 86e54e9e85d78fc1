/*
 * decoder.c: tokenizer.json's "decoder", which turns tokens back into text,
 * as tokenizers/src/decoders does: the token strings go through each step
 * (a Sequence is flattened) and are then joined.
 *
 *   ByteLevel     every token whose characters are all in the byte-level
 *                 alphabet as those bytes, else as it is; all joined, and
 *                 what is not UTF-8 as U+FFFD (from_utf8_lossy)
 *   Replace       in every token, the pattern's matches by the content
 *   ByteFallback  runs of <0xXX> tokens as their bytes: the string when
 *                 they are UTF-8, else one U+FFFD a byte
 *   Fuse          all tokens joined into one
 *   Strip         up to `start` leading and `stop` trailing copies of a
 *                 character off every token
 *   Metaspace     the replacement character as a space, except in the
 *                 first token, which loses it, unless prepend_scheme is never
 */
#include "text/text.h"

#include <stdlib.h>
#include <string.h>

typedef struct dec_kind {
  const char *name;
  /* read the component at j into steps of d (a Sequence: its members') */
  int (*parse)(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth);
  /* the tokens of in through the step into out (empty), with scratch */
  int (*run)(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch);
} dec_kind;

static int parse_sequence(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth);
static int parse_plain(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth);
static int parse_replace(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth);
static int parse_strip(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth);
static int run_bytelevel(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch);
static int run_replace(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch);
static int run_bytefallback(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch);
static int run_fuse(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch);
static int run_strip(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch);
static int parse_metaspace(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth);
static int run_metaspace(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch);

static const dec_kind kinds[] = {
    {"Sequence", parse_sequence, NULL},
    {"ByteLevel", parse_plain, run_bytelevel},
    {"Replace", parse_replace, run_replace},
    {"ByteFallback", parse_plain, run_bytefallback},
    {"Fuse", parse_plain, run_fuse},
    {"Strip", parse_strip, run_strip},
    {"Metaspace", parse_metaspace, run_metaspace},
};
static const int nkinds = (int)(sizeof kinds / sizeof *kinds);

int clt__toklist_add(clt__toklist *l, const char *s, size_t n) {
  if (l->n == l->cap) {
    size_t want = l->cap ? l->cap * 2 : 64;
    size_t *off = realloc(l->off, want * sizeof *off);
    if (off) l->off = off;
    size_t *len = off ? realloc(l->len, want * sizeof *len) : NULL;
    if (!len) return clt__error(CLT_ENOMEM, "out of host memory for %zu tokens to decode", want);
    l->len = len, l->cap = want;
  }
  l->off[l->n] = l->text.n, l->len[l->n] = n;
  if (clt__buf_put(&l->text, s, n) < 0) return CLT_ENOMEM;
  l->n++;
  return CLT_OK;
}

void clt__toklist_free(clt__toklist *l) {
  clt__buf_free(&l->text);
  free(l->off), free(l->len);
  memset(l, 0, sizeof *l);
}

static int add_step(clt__decoder *d, int kind, clt__dec_step **out) {
  clt__dec_step *p = realloc(d->steps, (size_t)(d->n + 1) * sizeof *p);
  if (!p) return clt__error(CLT_ENOMEM, "out of host memory reading the decoder");
  d->steps = p;
  *out = memset(&p[d->n++], 0, sizeof *p);
  (*out)->kind = kind;
  return CLT_OK;
}

static int parse(const clt__jctx *c, json_t *j, clt__decoder *d, int depth) {
  int kind, rc;
  if ((rc = clt__json_kind(c, j, "decoder", kinds, sizeof *kinds, nkinds, &kind)) < 0) return rc;
  return kinds[kind].parse(c, j, d, kind, depth);
}

static int parse_sequence(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth) {
  json_t *list = json_object_get(j, "decoders");
  int rc;
  (void)kind;
  if (!json_is_array(list))
    return clt__error(CLT_EFORMAT, "%s: %s: a Sequence needs a list \"decoders\"", c->file, c->where);
  if (depth > 16) return clt__error(CLT_EFORMAT, "%s: %s: Sequences nested too deep", c->file, c->where);
  for (size_t i = 0; i < json_array_size(list); i++) {
    clt__jctx sub;
    clt__jctx_sub(&sub, c, "decoders", 0);
    clt__jctx_sub(&sub, &sub, NULL, (int)i);
    if ((rc = parse(&sub, json_array_get(list, i), d, depth + 1)) < 0) return rc;
  }
  return CLT_OK;
}

/* ByteLevel, ByteFallback, Fuse: nothing to read */
static int parse_plain(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth) {
  clt__dec_step *st;
  (void)c, (void)j, (void)depth;
  return add_step(d, kind, &st);
}

/* Replace's content, Strip's character. */
static int parse_content(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, clt__dec_step **st) {
  const char *s;
  size_t n;
  int rc;
  if ((rc = add_step(d, kind, st)) < 0 || (rc = clt__json_string(c, j, "content", &s, &n)) < 0) return rc;
  if (!((*st)->text = malloc(n + 1))) return clt__error(CLT_ENOMEM, "out of host memory reading the decoder");
  memcpy((*st)->text, s, n);
  (*st)->text[n] = 0, (*st)->text_n = n;
  return CLT_OK;
}

static int parse_replace(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth) {
  clt__dec_step *st = NULL;
  int rc;
  (void)depth;
  if ((rc = parse_content(c, j, d, kind, &st)) < 0) return rc;
  return clt__parse_pattern(c, j, "pattern", &st->re);
}

static int parse_strip(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth) {
  clt__dec_step *st = NULL;
  int rc;
  (void)depth;
  if ((rc = parse_content(c, j, d, kind, &st)) < 0) return rc;
  if (st->text_n == 0 || clt__utf8_len((unsigned char)st->text[0]) != st->text_n)
    return clt__error(CLT_EFORMAT, "%s: %s: \"content\" is not one character", c->file, c->where);
  if ((rc = clt__json_uint(c, j, "start", 1 << 30, &st->start)) < 0 ||
      (rc = clt__json_uint(c, j, "stop", 1 << 30, &st->stop)) < 0)
    return rc;
  return CLT_OK;
}

int clt__decoder_parse(const clt__jctx *c, json_t *j, clt__decoder *out) {
  memset(out, 0, sizeof *out);
  int rc = parse(c, j, out, 0);
  if (rc < 0) clt__decoder_free(out);
  return rc;
}

#define TOK(l, i) ((l)->text.p + (l)->off[i])

static int run_bytelevel(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch) {
  (void)st;
  const char *s;
  size_t n;
  scratch->n = 0;
  for (size_t i = 0; i < in->n; i++)
    if (clt__bytelevel_unmap(TOK(in, i), in->len[i], scratch) < 0) return CLT_ENOMEM;
  clt__buf valid = {0};
  int rc = clt__utf8_valid(scratch->p, scratch->n, &s, &n, &valid);
  if (rc == CLT_OK) rc = clt__toklist_add(out, s, n);
  clt__buf_free(&valid);
  return rc;
}

/* A run of byte tokens as text: the string, or one U+FFFD a byte. */
static int flush_bytes(clt__buf *bytes, clt__toklist *out) {
  int rc = CLT_OK;
  if (!bytes->n) return CLT_OK;
  const char *s;
  size_t n;
  clt__buf valid = {0};
  if ((rc = clt__utf8_valid(bytes->p, bytes->n, &s, &n, &valid)) < 0) goto done;
  if (s == bytes->p) {
    rc = clt__toklist_add(out, s, n);
  } else {
    for (size_t i = 0; i < bytes->n && rc == CLT_OK; i++) rc = clt__toklist_add(out, "\xEF\xBF\xBD", 3);
  }
done:
  clt__buf_free(&valid);
  bytes->n = 0;
  return rc;
}

static int hex(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The byte of a "<0xXX>" token as Rust's u8::from_str_radix(XX, 16) reads
 * XX (a '+' sign allowed), or -1. */
static int byte_token(const char *s, size_t n) {
  if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
  if (s[3] == '+') return hex(s[4]);
  const int hi = hex(s[3]), lo = hex(s[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static int run_bytefallback(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *bytes) {
  (void)st;
  int rc;
  bytes->n = 0;
  for (size_t i = 0; i < in->n; i++) {
    const int b = byte_token(TOK(in, i), in->len[i]);
    if (b >= 0) {
      const char c = (char)b;
      if (clt__buf_put(bytes, &c, 1) < 0) return CLT_ENOMEM;
      continue;
    }
    if ((rc = flush_bytes(bytes, out)) < 0 || (rc = clt__toklist_add(out, TOK(in, i), in->len[i])) < 0) return rc;
  }
  return flush_bytes(bytes, out);
}

static int run_strip(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch) {
  (void)scratch;
  const size_t cn = st->text_n;
  for (size_t i = 0; i < in->n; i++) {
    const char *s = TOK(in, i);
    size_t a = 0, b = in->len[i];
    for (int64_t k = 0; k < st->start && b - a >= cn && memcmp(s + a, st->text, cn) == 0; k++) a += cn;
    for (int64_t k = 0; k < st->stop && b - a >= cn && memcmp(s + b - cn, st->text, cn) == 0; k++) b -= cn;
    int rc = clt__toklist_add(out, s + a, b - a);
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

static int parse_metaspace(const clt__jctx *c, json_t *j, clt__decoder *d, int kind, int depth) {
  clt__dec_step *st = NULL;
  char rep[8];
  size_t n;
  int rc;
  (void)depth;
  if ((rc = add_step(d, kind, &st)) < 0 || (rc = clt__parse_metaspace(c, j, rep, &n, &st->prepend)) < 0) return rc;
  if (!(st->text = malloc(n + 1))) return clt__error(CLT_ENOMEM, "out of host memory reading the decoder");
  memcpy(st->text, rep, n + 1);
  st->text_n = n;
  return CLT_OK;
}

static int run_metaspace(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch) {
  const size_t rn = st->text_n;
  for (size_t i = 0; i < in->n; i++) {
    const char *s = TOK(in, i);
    const size_t n = in->len[i];
    scratch->n = 0;
    for (size_t k = 0; k < n;) {
      if (n - k >= rn && memcmp(s + k, st->text, rn) == 0) {
        if ((i > 0 || st->prepend == CLT__PREPEND_NEVER) && clt__buf_put(scratch, " ", 1) < 0) return CLT_ENOMEM;
        k += rn;
        continue;
      }
      const size_t c = clt__utf8_len((unsigned char)s[k]);
      if (clt__buf_put(scratch, s + k, c > n - k ? n - k : c) < 0) return CLT_ENOMEM;
      k += c;
    }
    int rc = clt__toklist_add(out, scratch->p, scratch->n);
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

static int run_fuse(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch) {
  (void)st, (void)scratch;
  if (in->n == 0) return clt__toklist_add(out, "", 0);
  return clt__toklist_add(out, in->text.p, in->text.n); /* the tokens lie end to end */
}

static int run_replace(clt__dec_step *st, clt__toklist *in, clt__toklist *out, clt__buf *scratch) {
  int rc = CLT_OK;
  for (size_t i = 0; i < in->n && rc == CLT_OK; i++) {
    scratch->n = 0;
    rc = clt__regex_replace(&st->re, TOK(in, i), in->len[i], st->text, st->text_n, 1, scratch);
    if (rc == CLT_OK) rc = clt__toklist_add(out, scratch->p, scratch->n);
  }
  return rc;
}

int clt__decoder_run(clt__decoder *d, clt__toklist *in, clt__toklist *tmp, clt__buf *out) {
  clt__buf scratch = {0};
  int rc = CLT_OK;
  for (int i = 0; i < d->n && rc == CLT_OK; i++) {
    tmp->n = 0, tmp->text.n = 0;
    rc = kinds[d->steps[i].kind].run(&d->steps[i], in, tmp, &scratch);
    clt__toklist t = *in;
    *in = *tmp, *tmp = t;
  }
  clt__buf_free(&scratch);
  if (rc < 0) return rc;
  out->n = 0;
  for (size_t i = 0; i < in->n; i++)
    if (clt__buf_put(out, TOK(in, i), in->len[i]) < 0) return CLT_ENOMEM;
  return CLT_OK;
}

void clt__decoder_free(clt__decoder *d) {
  for (int i = 0; i < d->n; i++) {
    free(d->steps[i].text);
    clt__regex_free(&d->steps[i].re);
  }
  free(d->steps);
  memset(d, 0, sizeof *d);
}
