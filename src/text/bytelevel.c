/*
 * bytelevel.c: GPT-2's byte-level alphabet. Each of the 256 bytes stands
 * for a printable code point, so a vocabulary of strings covers every byte
 * sequence (openai/gpt-2 encoder.py, bytes_to_unicode): the bytes that are
 * printable in Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand
 * for themselves, and the other 68, in order, for U+0100, U+0101, ...
 * An arithmetic construction, not a Unicode table: the space is U+0120 'Ġ',
 * the newline U+010A 'Ċ'.
 */
#include "text/text.h"

#include <pthread.h>
#include <string.h>

static clt__bytelevel_map the_map;
static pthread_once_t the_map_once = PTHREAD_ONCE_INIT;

static int printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

static void build(void) {
  clt__bytelevel_map *m = &the_map;
  int next = 0x100;
  for (int i = 0; i < 0x144; i++) m->byte_of[i] = -1;
  for (int b = 0; b < 256; b++) {
    const int c = printable(b) ? b : next++;
    m->byte_of[c] = (int16_t)b;
    if (c < 0x80) {
      m->utf8[b][0] = (char)c, m->len[b] = 1;
    } else {
      m->utf8[b][0] = (char)(0xC0 | c >> 6), m->utf8[b][1] = (char)(0x80 | (c & 0x3F)), m->len[b] = 2;
    }
  }
}

const clt__bytelevel_map *clt__bytelevel(void) {
  pthread_once(&the_map_once, build);
  return &the_map;
}

int clt__bytelevel_map_bytes(const char *s, size_t n, clt__buf *out) {
  const clt__bytelevel_map *m = clt__bytelevel();
  if (clt__buf_reserve(out, 2 * n) < 0) return CLT_ENOMEM;
  char *o = out->p + out->n;
  for (size_t i = 0; i < n; i++) {
    const unsigned char b = (unsigned char)s[i];
    o[0] = m->utf8[b][0];
    o[1] = m->utf8[b][1];
    o += m->len[b];
  }
  out->n = (size_t)(o - out->p);
  return CLT_OK;
}

int clt__bytelevel_unmap(const char *s, size_t n, clt__buf *out) {
  const clt__bytelevel_map *m = clt__bytelevel();
  const size_t at = out->n;
  if (clt__buf_reserve(out, n) < 0) return CLT_ENOMEM;
  for (size_t i = 0; i < n;) {
    size_t k;
    const uint32_t c = clt__utf8_decode(s + i, n - i, &k);
    if (c >= 0x144 || m->byte_of[c] < 0) { /* not in the alphabet: the token as it is */
      out->n = at;
      return clt__buf_put(out, s, n);
    }
    out->p[out->n++] = (char)m->byte_of[c];
    i += k;
  }
  return CLT_OK;
}
