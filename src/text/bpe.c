/*
 * bpe.c: tokenizer.json's BPE model, as tokenizers/src/models/bpe does it.
 * A word (one piece from the pre-tokenizer) starts as its characters' ids
 * (with continuing_subword_prefix / end_of_word_suffix; a character not in
 * the vocabulary becomes its bytes' <0xXX> tokens with byte_fallback, else
 * the unknown token, runs of them fused with fuse_unk, else nothing); then
 * the adjacent pair of lowest merge rank (the leftmost of equals) is merged,
 * over and over, through a heap of candidate merges whose stale entries are
 * skipped as the library skips them (Word::merge_all). With ignore_merges
 * a word that is itself in the vocabulary is that token. Words under 256
 * bytes are cached with their ids.
 *
 * Merges are read in both of tokenizer.json's forms, "a b" strings and
 * ["a", "b"] pairs; a merge's rank is its index.
 */
#include "text/text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_WORD_MAX 256   /* the library's MAX_LENGTH */
#define CACHE_ENTRIES 65536  /* then the cache starts again */
#define ID_LIMIT (1u << 24)  /* token ids cltrain carries as exact float32 */

static int copy_opt(const clt__jctx *c, json_t *m, const char *key, char **out, size_t *n) {
  const char *s;
  int rc = clt__json_string_or_null(c, m, key, &s, n);
  if (rc < 0 || !s) return rc;
  if (!(*out = malloc(*n + 1))) return clt__error(CLT_ENOMEM, "out of host memory reading tokenizer.json");
  memcpy(*out, s, *n);
  (*out)[*n] = 0;
  return CLT_OK;
}

static int parse_vocab(const clt__jctx *c, json_t *vocab, clt__bpe *m) {
  const char *key;
  json_t *v;
  if (!json_is_object(vocab)) return clt__error(CLT_EFORMAT, "%s: %s has no object \"vocab\"", c->file, c->where);
  /* id -> the first token seen with it, to name both of a pair that share one */
  size_t nv = json_object_size(vocab);
  json_object_foreach(vocab, key, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= ID_LIMIT)
      return clt__error(CLT_EFORMAT, "%s: %s.vocab: the id of \"%s\" is not a whole number from 0 to 2^24 - 1 (%s)",
                        c->file, c->where, key, json_is_integer(v) ? "out of range" : "not a number");
    int had;
    /* jansson's keys are NUL-terminated; a token with a NUL in it is cut there */
    if (clt__strmap_put(&m->vocab, key, strlen(key), (uint32_t)json_integer_value(v), &had) < 0) return CLT_ENOMEM;
  }
  (void)nv;
  return CLT_OK;
}

/* The merge at list[i] as its two halves. */
static int merge_halves(const clt__jctx *c, json_t *e, size_t i, const char **a, size_t *an, const char **b,
                        size_t *bn) {
  if (json_is_string(e)) {
    const char *s = json_string_value(e), *sp = memchr(s, ' ', json_string_length(e));
    const size_t n = json_string_length(e);
    if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s)))
      return clt__error(CLT_EFORMAT, "%s: %s.merges[%zu] \"%.*s\" is not two tokens with one space between them",
                        c->file, c->where, i, (int)(n > 80 ? 80 : n), s);
    *a = s, *an = (size_t)(sp - s), *b = sp + 1, *bn = n - *an - 1;
    return CLT_OK;
  }
  if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
      json_is_string(json_array_get(e, 1))) {
    *a = json_string_value(json_array_get(e, 0)), *an = json_string_length(json_array_get(e, 0));
    *b = json_string_value(json_array_get(e, 1)), *bn = json_string_length(json_array_get(e, 1));
    return CLT_OK;
  }
  return clt__error(CLT_EFORMAT, "%s: %s.merges[%zu] is neither a string \"a b\" nor a pair [\"a\", \"b\"]", c->file,
                    c->where, i);
}

static int parse_merges(const clt__jctx *c, json_t *list, clt__bpe *m) {
  int rc = CLT_OK;
  clt__buf joined = {0};
  if (!json_is_array(list)) return clt__error(CLT_EFORMAT, "%s: %s has no list \"merges\"", c->file, c->where);
  uint32_t rank = 0;
  for (size_t i = 0; i < json_array_size(list); i++) {
    json_t *e = json_array_get(list, i);
    const char *a = NULL, *b = NULL;
    size_t an = 0, bn = 0;
    if (json_is_string(e) && strncmp(json_string_value(e), "#version", 8) == 0) continue; /* as merges.txt */
    CLT_TRY(merge_halves(c, e, i, &a, &an, &b, &bn));
    uint32_t ia, ib, inew;
    if (!clt__strmap_get(&m->vocab, a, an, &ia) || !clt__strmap_get(&m->vocab, b, bn, &ib)) {
      const int left = !clt__strmap_get(&m->vocab, a, an, &ia);
      rc = clt__error(CLT_EFORMAT, "%s: %s.merges[%zu]: its %s token \"%.*s\" is not in the vocabulary", c->file,
                      c->where, i, left ? "first" : "second", (int)(left ? an : bn), left ? a : b);
      goto fail;
    }
    if (bn < m->prefix_n) {
      rc = clt__error(CLT_EFORMAT, "%s: %s.merges[%zu]: \"%.*s\" is shorter than continuing_subword_prefix", c->file,
                      c->where, i, (int)bn, b);
      goto fail;
    }
    joined.n = 0;
    if (clt__buf_put(&joined, a, an) < 0 || clt__buf_put(&joined, b + m->prefix_n, bn - m->prefix_n) < 0) {
      rc = CLT_ENOMEM;
      goto fail;
    }
    if (!clt__strmap_get(&m->vocab, joined.p, joined.n, &inew)) {
      rc = clt__error(CLT_EFORMAT, "%s: %s.merges[%zu]: the merged token \"%.*s\" is not in the vocabulary", c->file,
                      c->where, i, (int)joined.n, joined.p);
      goto fail;
    }
    CLT_TRY(clt__pairmap_put(&m->merges, ia, ib, rank++, inew)); /* a later duplicate wins, as in the library */
  }
fail:
  clt__buf_free(&joined);
  return rc;
}

int clt__bpe_parse(const clt__jctx *c, json_t *j, clt__bpe *m) {
  int rc;
  const char *unk;
  size_t unk_n;
  memset(m, 0, sizeof *m);
  json_t *dropout = json_object_get(j, "dropout");
  if (dropout && !json_is_null(dropout)) {
    if (!json_is_number(dropout) || json_number_value(dropout) < 0 || json_number_value(dropout) > 1) {
      rc = clt__error(CLT_EFORMAT, "%s: %s: \"dropout\" is not null or a number from 0 to 1", c->file, c->where);
      goto fail;
    }
    if (json_number_value(dropout) > 0) {
      rc = clt__error(CLT_EFORMAT, "%s: %s: \"dropout\" is %g; BPE dropout drops merges at random, which cltrain does "
                      "not do (set it to null)", c->file, c->where, json_number_value(dropout));
      goto fail;
    }
  }
  CLT_TRY(clt__json_bool(c, j, "fuse_unk", 0, &m->fuse_unk));
  CLT_TRY(clt__json_bool(c, j, "byte_fallback", 0, &m->byte_fallback));
  CLT_TRY(clt__json_bool(c, j, "ignore_merges", 0, &m->ignore_merges));
  CLT_TRY(copy_opt(c, j, "continuing_subword_prefix", &m->prefix, &m->prefix_n));
  CLT_TRY(copy_opt(c, j, "end_of_word_suffix", &m->suffix, &m->suffix_n));
  CLT_TRY(parse_vocab(c, json_object_get(j, "vocab"), m));
  CLT_TRY(clt__json_string_or_null(c, j, "unk_token", &unk, &unk_n));
  if (unk) {
    if (!clt__strmap_get(&m->vocab, unk, unk_n, &m->unk_id)) {
      rc = clt__error(CLT_EFORMAT, "%s: %s: \"unk_token\" \"%.*s\" is not in the vocabulary", c->file, c->where,
                      (int)unk_n, unk);
      goto fail;
    }
    m->has_unk = 1;
  }
  for (int b = 0; b < 256; b++) {
    char name[8];
    uint32_t id;
    snprintf(name, sizeof name, "<0x%02X>", b);
    m->byte_id[b] = clt__strmap_get(&m->vocab, name, 6, &id) ? (int32_t)id : -1;
  }
  CLT_TRY(parse_merges(c, json_object_get(j, "merges"), m));
  return CLT_OK;

fail:
  clt__bpe_free(m);
  return rc;
}

/* ---- one word -------------------------------------------------------------- */

static int add_symbol(clt__bpe *m, uint32_t id, size_t len) {
  if (m->nsym == m->symcap) {
    size_t want = m->symcap ? m->symcap * 2 : 256;
    clt__bpe_symbol *p = realloc(m->sym, want * sizeof *p);
    if (!p) return clt__error(CLT_ENOMEM, "out of host memory for a word of %zu characters", want);
    m->sym = p, m->symcap = want;
  }
  const int32_t i = (int32_t)m->nsym++;
  m->sym[i] = (clt__bpe_symbol){id, i - 1, i + 1, (uint32_t)len};
  return CLT_OK;
}

/* Merge entries ordered by rank, then position: the heap's top is the least. */
static int before(const clt__bpe_merge *x, const clt__bpe_merge *y) {
  return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static int heap_push(clt__bpe *m, uint32_t rank, uint32_t pos, uint32_t id) {
  if (m->nheap == m->heapcap) {
    size_t want = m->heapcap ? m->heapcap * 2 : 256;
    clt__bpe_merge *p = realloc(m->heap, want * sizeof *p);
    if (!p) return clt__error(CLT_ENOMEM, "out of host memory for %zu merges of a word", want);
    m->heap = p, m->heapcap = want;
  }
  clt__bpe_merge *h = m->heap, e = {rank, pos, id};
  size_t i = m->nheap++;
  while (i > 0 && before(&e, &h[(i - 1) / 2])) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = e;
  return CLT_OK;
}

static clt__bpe_merge heap_pop(clt__bpe *m) {
  clt__bpe_merge *h = m->heap, top = h[0], last = h[--m->nheap];
  size_t i = 0, n = m->nheap;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && before(&h[c + 1], &h[c])) c++;
    if (!before(&h[c], &last)) break;
    h[i] = h[c];
    i = c;
  }
  if (n) h[i] = last;
  return top;
}

/* A candidate merge of the symbol at pos with the one after it, if any. */
static int candidate(clt__bpe *m, int32_t pos) {
  const int32_t next = m->sym[pos].next;
  uint32_t rank, id;
  if (next >= (int32_t)m->nsym || !clt__pairmap_get(&m->merges, m->sym[pos].id, m->sym[next].id, &rank, &id))
    return CLT_OK;
  return heap_push(m, rank, (uint32_t)pos, id);
}

/* Word::merge_all. */
static int merge_all(clt__bpe *m) {
  int rc;
  m->nheap = 0;
  for (int32_t i = 0; i + 1 < (int32_t)m->nsym; i++)
    if ((rc = candidate(m, i)) < 0) return rc;
  while (m->nheap) {
    const clt__bpe_merge top = heap_pop(m);
    clt__bpe_symbol *s = &m->sym[top.pos];
    if (!s->len || s->next >= (int32_t)m->nsym) continue; /* merged away, or the last */
    clt__bpe_symbol *right = &m->sym[s->next];
    uint32_t rank, id;
    if (!clt__pairmap_get(&m->merges, s->id, right->id, &rank, &id) || id != top.id) continue; /* stale */
    s->id = top.id;
    s->len += right->len;
    right->len = 0;
    s->next = right->next;
    if (s->next < (int32_t)m->nsym) m->sym[s->next].prev = (int32_t)top.pos;
    if (s->prev >= 0 && (rc = candidate(m, s->prev)) < 0) return rc;
    if ((rc = candidate(m, (int32_t)top.pos)) < 0) return rc;
  }
  return CLT_OK;
}

/* BPE::merge_word: the word's first symbols. */
static int first_symbols(clt__bpe *m, const char *w, size_t n) {
  int has_unk = 0, rc;
  uint32_t unk_len = 0;
  m->nsym = 0;
  for (size_t i = 0; i < n;) {
    size_t k = clt__utf8_len((unsigned char)w[i]);
    if (k > n - i) k = n - i;
    const char *s = w + i;
    size_t sn = k;
    if ((i > 0 && m->prefix) || (i + k == n && m->suffix)) {
      m->piece.n = 0;
      if ((i > 0 && m->prefix && clt__buf_put(&m->piece, m->prefix, m->prefix_n) < 0) ||
          clt__buf_put(&m->piece, s, k) < 0 || (i + k == n && m->suffix && clt__buf_put(&m->piece, m->suffix, m->suffix_n) < 0))
        return CLT_ENOMEM;
      s = m->piece.p, sn = m->piece.n;
    }
    i += k;
    uint32_t id;
    if (clt__strmap_get(&m->vocab, s, sn, &id)) {
      if (has_unk && (rc = add_symbol(m, m->unk_id, unk_len)) < 0) return rc;
      has_unk = 0;
      if ((rc = add_symbol(m, id, k)) < 0) return rc;
      continue;
    }
    if (m->byte_fallback) {
      size_t b = 0;
      while (b < sn && m->byte_id[(unsigned char)s[b]] >= 0) b++;
      if (b == sn) { /* the library adds these before a pending unknown token */
        for (b = 0; b < sn; b++)
          if ((rc = add_symbol(m, (uint32_t)m->byte_id[(unsigned char)s[b]], 1)) < 0) return rc;
        continue;
      }
    }
    if (!m->has_unk) continue; /* dropped */
    if (has_unk && m->fuse_unk) {
      unk_len += (uint32_t)k;
    } else {
      if (has_unk && (rc = add_symbol(m, m->unk_id, unk_len)) < 0) return rc;
      has_unk = 1, unk_len = (uint32_t)k;
    }
  }
  if (has_unk) return add_symbol(m, m->unk_id, unk_len);
  return CLT_OK;
}

int clt__bpe_tokenize(clt__bpe *m, const char *s, size_t n, clt__ids *out) {
  int rc;
  uint32_t id, at;
  if (n == 0) return CLT_OK;
  if (m->ignore_merges && clt__strmap_get(&m->vocab, s, n, &id)) return clt__ids_push(out, id);
  if (n < CACHE_WORD_MAX && clt__strmap_get(&m->cache, s, n, &at)) {
    const uint32_t k = m->cache_ids.p[at];
    if (clt__ids_reserve(out, k) < 0) return CLT_ENOMEM;
    memcpy(out->p + out->n, m->cache_ids.p + at + 1, k * sizeof *out->p);
    out->n += k;
    return CLT_OK;
  }
  if ((rc = first_symbols(m, s, n)) < 0 || (rc = merge_all(m)) < 0) return rc;
  const size_t start = out->n;
  for (size_t i = 0; i < m->nsym; i = (size_t)m->sym[i].next)
    if ((rc = clt__ids_push(out, m->sym[i].id)) < 0) return rc;
  if (n < CACHE_WORD_MAX) {
    const size_t k = out->n - start;
    if (m->cache.n >= CACHE_ENTRIES) {
      clt__strmap_clear(&m->cache);
      m->cache_ids.n = 0;
    }
    const uint32_t off = (uint32_t)m->cache_ids.n;
    if (clt__ids_reserve(&m->cache_ids, k + 1) < 0) return CLT_ENOMEM;
    m->cache_ids.p[m->cache_ids.n++] = (uint32_t)k;
    memcpy(m->cache_ids.p + m->cache_ids.n, out->p + start, k * sizeof *out->p);
    m->cache_ids.n += k;
    if ((rc = clt__strmap_put(&m->cache, s, n, off, NULL)) < 0) return rc;
  }
  return CLT_OK;
}

void clt__bpe_free(clt__bpe *m) {
  clt__strmap_free(&m->vocab);
  clt__pairmap_free(&m->merges);
  clt__strmap_free(&m->cache);
  free(m->cache_ids.p);
  free(m->prefix), free(m->suffix);
  free(m->sym), free(m->heap);
  clt__buf_free(&m->piece);
  memset(m, 0, sizeof *m);
}
