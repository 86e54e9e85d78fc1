/*
 * strmap.c: the containers of the tokenizers: growable byte strings and id
 * arrays, a map of byte strings to ids (the vocabulary, the word cache) and
 * a map of id pairs to (rank, id) (BPE's merges). Open addressing with
 * linear probing at a load of at most 1/2; keys are copied into one buffer.
 */
#include "text/text.h"

#include <stdlib.h>
#include <string.h>

int clt__buf_reserve(clt__buf *b, size_t more) {
  if (b->cap - b->n >= more) return CLT_OK;
  size_t want = b->cap ? b->cap : 256;
  while (want - b->n < more) want *= 2;
  char *p = realloc(b->p, want);
  if (!p) return clt__error(CLT_ENOMEM, "out of host memory for %zu bytes of text", want);
  b->p = p;
  b->cap = want;
  return CLT_OK;
}

int clt__buf_put(clt__buf *b, const void *p, size_t n) {
  if (clt__buf_reserve(b, n) < 0) return CLT_ENOMEM;
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
  return CLT_OK;
}

void clt__buf_free(clt__buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

int clt__ids_reserve(clt__ids *v, size_t more) {
  if (v->cap - v->n >= more) return CLT_OK;
  size_t want = v->cap ? v->cap : 256;
  while (want - v->n < more) want *= 2;
  uint32_t *p = realloc(v->p, want * sizeof *p);
  if (!p) return clt__error(CLT_ENOMEM, "out of host memory for %zu token ids", want);
  v->p = p;
  v->cap = want;
  return CLT_OK;
}

/* A 64-bit hash of a byte string, eight bytes a round (the mixing constants
 * are splitmix64's). Only ever compared within one process. */
uint64_t clt__hash_bytes(const void *key, size_t n) {
  const unsigned char *p = key;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
  while (n >= 8) {
    uint64_t x;
    memcpy(&x, p, 8);
    h = (h ^ x) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    p += 8, n -= 8;
  }
  if (n) {
    uint64_t x = 0;
    memcpy(&x, p, n);
    h = (h ^ x) * 0x94d049bb133111ebull;
    h ^= h >> 32;
  }
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

static int strmap_grow(clt__strmap *m) {
  const size_t nslots = m->mask ? (m->mask + 1) * 2 : 64;
  uint32_t *slots = calloc(nslots, sizeof *slots);
  if (!slots) return clt__error(CLT_ENOMEM, "out of host memory for a map of %zu slots", nslots);
  for (size_t i = 0; i < m->n; i++) {
    size_t j = (size_t)m->e[i].hash & (nslots - 1);
    while (slots[j]) j = (j + 1) & (nslots - 1);
    slots[j] = (uint32_t)(i + 1);
  }
  free(m->slots);
  m->slots = slots;
  m->mask = nslots - 1;
  return CLT_OK;
}

int clt__strmap_put(clt__strmap *m, const char *key, size_t len, uint32_t value, int *had) {
  if (had) *had = 0;
  if (len > UINT32_MAX || m->n >= UINT32_MAX - 1) return clt__error(CLT_EINVAL, "a map key or map too large");
  if ((m->n + 1) * 2 > (m->mask ? m->mask + 1 : 0) && strmap_grow(m) < 0) return CLT_ENOMEM;
  const uint64_t h = clt__hash_bytes(key, len);
  size_t i = (size_t)h & m->mask;
  for (; m->slots[i]; i = (i + 1) & m->mask) {
    clt__strmap_entry *e = &m->e[m->slots[i] - 1];
    if (e->hash == h && e->len == len && memcmp(m->keys.p + e->key, key, len) == 0) {
      e->value = value;
      if (had) *had = 1;
      return CLT_OK;
    }
  }
  if (m->n == m->cap) {
    size_t want = m->cap ? m->cap * 2 : 64;
    clt__strmap_entry *e = realloc(m->e, want * sizeof *e);
    if (!e) return clt__error(CLT_ENOMEM, "out of host memory for a map of %zu entries", want);
    m->e = e;
    m->cap = want;
  }
  const size_t at = m->keys.n;
  /* a NUL after each key, so a key may be read as a C string */
  if (clt__buf_put(&m->keys, key, len) < 0 || clt__buf_put(&m->keys, "", 1) < 0) return CLT_ENOMEM;
  m->e[m->n] = (clt__strmap_entry){h, at, (uint32_t)len, value};
  m->slots[i] = (uint32_t)++m->n;
  return CLT_OK;
}

int clt__strmap_get(const clt__strmap *m, const char *key, size_t len, uint32_t *value) {
  if (!m->n) return 0;
  const uint64_t h = clt__hash_bytes(key, len);
  for (size_t i = (size_t)h & m->mask; m->slots[i]; i = (i + 1) & m->mask) {
    const clt__strmap_entry *e = &m->e[m->slots[i] - 1];
    if (e->hash == h && e->len == len && memcmp(m->keys.p + e->key, key, len) == 0) {
      *value = e->value;
      return 1;
    }
  }
  return 0;
}

void clt__strmap_clear(clt__strmap *m) {
  if (m->slots) memset(m->slots, 0, (m->mask + 1) * sizeof *m->slots);
  m->n = 0;
  m->keys.n = 0;
}

void clt__strmap_free(clt__strmap *m) {
  free(m->slots);
  free(m->e);
  clt__buf_free(&m->keys);
  memset(m, 0, sizeof *m);
}

static int pairmap_grow(clt__pairmap *m) {
  const size_t nslots = m->keys ? (m->mask + 1) * 2 : 1024;
  uint64_t *keys = calloc(nslots, sizeof *keys);
  uint32_t *rank = malloc(nslots * sizeof *rank), *id = malloc(nslots * sizeof *id);
  if (!keys || !rank || !id) {
    free(keys), free(rank), free(id);
    return clt__error(CLT_ENOMEM, "out of host memory for %zu merges", nslots / 2);
  }
  for (size_t i = 0; m->keys && i <= m->mask; i++) {
    if (!m->keys[i]) continue;
    size_t j = (size_t)((m->keys[i] * 0x9E3779B97F4A7C15ull) >> 20) & (nslots - 1);
    while (keys[j]) j = (j + 1) & (nslots - 1);
    keys[j] = m->keys[i], rank[j] = m->rank[i], id[j] = m->id[i];
  }
  free(m->keys), free(m->rank), free(m->id);
  m->keys = keys, m->rank = rank, m->id = id;
  m->mask = nslots - 1;
  return CLT_OK;
}

int clt__pairmap_put(clt__pairmap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id) {
  if ((!m->keys || (m->n + 1) * 2 > m->mask + 1) && pairmap_grow(m) < 0) return CLT_ENOMEM;
  const uint64_t k = ((uint64_t)a << 32 | b) + 1;
  size_t i = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & m->mask;
  while (m->keys[i] && m->keys[i] != k) i = (i + 1) & m->mask;
  if (!m->keys[i]) m->n++;
  m->keys[i] = k, m->rank[i] = rank, m->id[i] = id;
  return CLT_OK;
}

void clt__pairmap_free(clt__pairmap *m) {
  free(m->keys), free(m->rank), free(m->id);
  memset(m, 0, sizeof *m);
}
