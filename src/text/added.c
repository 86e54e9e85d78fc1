/*
 * added.c: tokenizer.json's "added_tokens" (special tokens such as
 * <|endoftext|>, <s>, <|begin_of_text|>, and tokens added for a fine-tune),
 * as tokenizers/src/tokenizer/added_vocabulary.rs treats them:
 *
 *   - each token's id is the model's id of its content, else the next one
 *     after the vocabulary (the library's rule; the file's "id" only warns
 *     when it differs);
 *   - they are found before the model sees the text, leftmost-longest
 *     (aho-corasick's MatchKind::LeftmostLongest): those with normalized
 *     false in the text as given, the others in the normalizer's output,
 *     against their content normalized the same way;
 *   - lstrip / rstrip take the whitespace (Unicode White_Space) before /
 *     after a match into it; single_word keeps a match only where the
 *     characters beside it are not word characters (Rust regex's \w:
 *     Alphabetic, M, Nd, Pc, Join_Control), both asked of PCRE2.
 */
#include "text/text.h"

#include <stdlib.h>
#include <string.h>

static int set_add(clt__added_set *s, const char *p, size_t n, int token) {
  struct clt__added_pattern *q = realloc(s->pat, (size_t)(s->n + 1) * sizeof *q);
  if (!q) return clt__error(CLT_ENOMEM, "out of host memory for the added tokens");
  s->pat = q;
  if (!(q[s->n].p = malloc(n ? n : 1))) return clt__error(CLT_ENOMEM, "out of host memory for the added tokens");
  memcpy(q[s->n].p, p, n);
  q[s->n].n = n, q[s->n].token = token;
  s->n++;
  return CLT_OK;
}

static int pattern_order(const void *x, const void *y) {
  const struct clt__added_pattern *a = x, *b = y;
  const unsigned char ca = (unsigned char)a->p[0], cb = (unsigned char)b->p[0];
  if (ca != cb) return ca < cb ? -1 : 1;
  if (a->n != b->n) return a->n > b->n ? -1 : 1; /* longest first */
  return a->token < b->token ? -1 : a->token > b->token;
}

/* Patterns grouped by first byte, longest first. */
static void set_index(clt__added_set *s) {
  if (s->n) qsort(s->pat, (size_t)s->n, sizeof *s->pat, pattern_order);
  int k = 0;
  for (int b = 0; b <= 256; b++) {
    while (b < 256 && k < s->n && (unsigned char)s->pat[k].p[0] < b) k++;
    s->first[b] = b < 256 ? k : s->n;
  }
}

static int find_token(const clt__added *a, const char *s, size_t n) {
  for (int i = 0; i < a->n; i++)
    if (a->tok[i].n == n && memcmp(a->tok[i].content, s, n) == 0) return i;
  return -1;
}

static int parse_one(const clt__jctx *c, json_t *e, const clt__bpe *model, clt__added *a, int64_t *max_id) {
  const char *s;
  size_t n;
  int64_t file_id;
  clt__added_token t = {0};
  int rc;
  if (!json_is_object(e)) return clt__error(CLT_EFORMAT, "%s: %s is not an object", c->file, c->where);
  if ((rc = clt__json_string(c, e, "content", &s, &n)) < 0 || (rc = clt__json_uint(c, e, "id", (1 << 24) - 1, &file_id)) < 0 ||
      (rc = clt__json_bool(c, e, "special", 0, &t.special)) < 0 ||
      (rc = clt__json_bool(c, e, "normalized", !t.special, &t.normalized)) < 0 ||
      (rc = clt__json_bool(c, e, "lstrip", 0, &t.lstrip)) < 0 || (rc = clt__json_bool(c, e, "rstrip", 0, &t.rstrip)) < 0 ||
      (rc = clt__json_bool(c, e, "single_word", 0, &t.single_word)) < 0)
    return rc;
  if (n == 0) return CLT_OK; /* the library ignores an empty token */
  const int had = find_token(a, s, n);
  if (had >= 0) { /* the same content again: the later flags, the same id */
    clt__added_token *o = &a->tok[had];
    t.special |= o->special;
    t.content = o->content, t.n = o->n, t.id = o->id;
    *o = t;
    return CLT_OK;
  }
  uint32_t id;
  if (!clt__strmap_get(&model->vocab, s, n, &id)) {
    const uint32_t vsize = (uint32_t)model->vocab.n;
    id = *max_id < 0 ? vsize : (*max_id >= vsize || vsize == 0) ? (uint32_t)*max_id + 1 : vsize;
  }
  if (id >= (1u << 24))
    return clt__error(CLT_EFORMAT, "%s: %s: the token gets the id %u; cltrain takes ids below 2^24", c->file,
                      c->where, id);
  if (id != file_id)
    clt__log(CLT_LOG_WARN, "%s: %s: the added token \"%.*s\" says id %lld but gets %u, as the tokenizers library "
             "gives it", c->file, c->where, (int)n, s, (long long)file_id, id);
  if ((int64_t)id > *max_id) *max_id = id;
  clt__added_token *p = realloc(a->tok, (size_t)(a->n + 1) * sizeof *p);
  if (!p) return clt__error(CLT_ENOMEM, "out of host memory for the added tokens");
  a->tok = p;
  if (!(t.content = malloc(n + 1))) return clt__error(CLT_ENOMEM, "out of host memory for the added tokens");
  memcpy(t.content, s, n);
  t.content[n] = 0;
  t.n = n, t.id = id;
  a->tok[a->n++] = t;
  return CLT_OK;
}

int clt__added_parse(const clt__jctx *c, json_t *list, const clt__bpe *model, clt__added *out) {
  int rc = CLT_OK;
  int64_t max_id = -1;
  memset(out, 0, sizeof *out);
  if (!list || json_is_null(list)) return CLT_OK;
  if (!json_is_array(list)) return clt__error(CLT_EFORMAT, "%s: \"added_tokens\" is not a list", c->file);
  for (size_t i = 0; i < json_array_size(list); i++) {
    clt__jctx sub;
    clt__jctx_sub(&sub, c, "added_tokens", 0);
    clt__jctx_sub(&sub, &sub, NULL, (int)i);
    if ((rc = parse_one(&sub, json_array_get(list, i), model, out, &max_id)) < 0) {
      clt__added_free(out);
      return rc;
    }
  }
  return CLT_OK;
}

int clt__added_build(clt__added *a, clt__normalizer *nz, const clt__jctx *c) {
  int rc;
  int any_word = 0;
  /* the special tokens' patterns first, then the others, each in file order */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < a->n; i++) {
      const clt__added_token *t = &a->tok[i];
      if (t->special != !pass) continue;
      any_word |= t->single_word | t->lstrip | t->rstrip;
      if (!t->normalized) {
        if ((rc = set_add(&a->raw, t->content, t->n, i)) < 0) return rc;
        continue;
      }
      const char *p = t->content;
      size_t n = t->n;
      if (nz && (rc = clt__normalizer_run(nz, t->content, t->n, 0, &p, &n)) < 0) return rc;
      if (n && (rc = set_add(&a->normalized, p, n, i)) < 0) return rc;
    }
  set_index(&a->raw);
  set_index(&a->normalized);
  if (any_word) {
    static const char word[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";
    static const char space[] = "\\p{White_Space}";
    if ((rc = clt__regex_compile(&a->word, word, sizeof word - 1, 0, c->file, "added_tokens")) < 0 ||
        (rc = clt__regex_compile(&a->space, space, sizeof space - 1, 0, c->file, "added_tokens")) < 0)
      return rc;
    a->have_word = 1;
  }
  return CLT_OK;
}

/* Whether the character at s[at..) is of the class re (anchored there). */
static int is_class(clt__regex *re, const char *s, size_t at) {
  size_t k = clt__utf8_len((unsigned char)s[at]);
  return pcre2_match(re->code, (PCRE2_SPTR)(s + at), k, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, re->md, NULL) > 0;
}

/* The start of the character that ends at s[end) (end > 0). */
static size_t char_before(const char *s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
  return i;
}

/* The leftmost match at or after `from`: its pattern, or -1. */
static int find(const clt__added_set *set, const char *s, size_t n, size_t from, size_t *at) {
  for (size_t i = from; i < n; i++) {
    const unsigned char b = (unsigned char)s[i];
    for (int k = set->first[b]; k < set->first[b + 1]; k++) {
      const struct clt__added_pattern *p = &set->pat[k];
      if (p->n <= n - i && memcmp(s + i, p->p, p->n) == 0) {
        *at = i;
        return k;
      }
    }
  }
  return -1;
}

int clt__added_split(clt__added *a, const clt__added_set *set, const char *s, size_t n,
                     int (*piece)(void *user, const char *s, size_t n, size_t at),
                     int (*token)(void *user, uint32_t id), void *user) {
  size_t start_offset = 0, from = 0, at;
  int k, rc;
  if (!set->n) return n ? piece(user, s, n, 0) : CLT_OK;
  while (from < n && (k = find(set, s, n, from, &at)) >= 0) {
    const clt__added_token *t = &a->tok[set->pat[k].token];
    size_t start = at, stop = at + set->pat[k].n;
    from = stop;
    if (t->single_word) {
      const int word_before = start > 0 && is_class(&a->word, s, char_before(s, start));
      const int word_after = stop < n && is_class(&a->word, s, stop);
      if (word_before || word_after) continue;
    }
    if (t->lstrip) {
      size_t b = start;
      while (b > 0 && is_class(&a->space, s, char_before(s, b))) b = char_before(s, b);
      start = b > start_offset ? b : start_offset;
    }
    if (t->rstrip)
      while (stop < n && is_class(&a->space, s, stop)) stop += clt__utf8_len((unsigned char)s[stop]);
    if (start_offset < start && (rc = piece(user, s + start_offset, start - start_offset, start_offset)) < 0)
      return rc;
    if ((rc = token(user, t->id)) < 0) return rc;
    start_offset = stop;
  }
  if (start_offset < n) return piece(user, s + start_offset, n - start_offset, start_offset);
  return CLT_OK;
}

const clt__added_token *clt__added_by_id(const clt__added *a, uint32_t id) {
  for (int i = 0; i < a->n; i++)
    if (a->tok[i].id == id) return &a->tok[i];
  return NULL;
}

const clt__added_token *clt__added_by_content(const clt__added *a, const char *s, size_t n) {
  const int i = find_token(a, s, n);
  return i < 0 ? NULL : &a->tok[i];
}

void clt__added_free(clt__added *a) {
  for (int i = 0; i < a->n; i++) free(a->tok[i].content);
  free(a->tok);
  for (int i = 0; i < a->raw.n; i++) free(a->raw.pat[i].p);
  for (int i = 0; i < a->normalized.n; i++) free(a->normalized.pat[i].p);
  free(a->raw.pat), free(a->normalized.pat);
  clt__regex_free(&a->word);
  clt__regex_free(&a->space);
  memset(a, 0, sizeof *a);
}
