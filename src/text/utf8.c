/*
 * utf8.c: UTF-8's structure, all the Unicode the tokenizers know by
 * themselves (the rest is PCRE2's). Text to encode is made valid first:
 * the tokenizers library only ever sees valid text (a Python str, a Rust
 * String), and what Python gives it for bytes that are not UTF-8 is
 * bytes.decode(errors="replace"): one U+FFFD for each maximal subpart of an
 * ill-formed sequence (Unicode 15, section 3.9, "U+FFFD Substitution of
 * Maximal Subparts"), which is also what Rust's String::from_utf8_lossy
 * gives when the ByteLevel decoder joins bytes that are not UTF-8.
 */
#include "text/text.h"

#include <string.h>

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* The valid range of the second byte after lead byte c (Table 3-7 of the
 * standard), or 0 when c starts no sequence. The third and fourth bytes are
 * always 80..BF. */
static int second_range(unsigned char c, unsigned char *lo, unsigned char *hi) {
  *lo = 0x80, *hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c == 0xE0) return *lo = 0xA0, 3;
  if (c == 0xED) return *hi = 0x9F, 3;
  if (c >= 0xE1 && c <= 0xEF) return 3;
  if (c == 0xF0) return *lo = 0x90, 4;
  if (c == 0xF4) return *hi = 0x8F, 4;
  if (c >= 0xF1 && c <= 0xF3) return 4;
  return 0;
}

/* How many bytes at s[0..n) form a valid character (> 0), or minus the
 * length of the maximal subpart to replace (< 0). */
static long char_at(const unsigned char *s, size_t n) {
  if (s[0] < 0x80) return 1;
  unsigned char lo, hi;
  const int len = second_range(s[0], &lo, &hi);
  if (!len) return -1;
  for (int k = 1; k < len; k++) {
    if ((size_t)k >= n || s[k] < lo || s[k] > hi) return -k;
    lo = 0x80, hi = 0xBF;
  }
  return len;
}

int clt__utf8_valid(const char *s, size_t n, const char **out, size_t *out_n, clt__buf *out_buf) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) { /* the valid prefix, ASCII eight bytes at a time */
    if (n - i >= 8) {
      uint64_t x;
      memcpy(&x, u + i, 8);
      if (!(x & 0x8080808080808080ull)) {
        i += 8;
        continue;
      }
    }
    const long k = char_at(u + i, n - i);
    if (k < 0) break;
    i += (size_t)k;
  }
  if (i == n) {
    *out = s, *out_n = n;
    return CLT_OK;
  }
  out_buf->n = 0;
  if (clt__buf_put(out_buf, s, i) < 0) return CLT_ENOMEM;
  while (i < n) {
    const long k = char_at(u + i, n - i);
    if (k > 0) {
      if (clt__buf_put(out_buf, s + i, (size_t)k) < 0) return CLT_ENOMEM;
      i += (size_t)k;
    } else {
      if (clt__buf_put(out_buf, replacement, 3) < 0) return CLT_ENOMEM;
      i += (size_t)-k;
    }
  }
  *out = out_buf->p, *out_n = out_buf->n;
  return CLT_OK;
}

int clt__utf8_put(clt__buf *b, uint32_t c) {
  char u[4];
  size_t n;
  if (c < 0x80) {
    u[0] = (char)c, n = 1;
  } else if (c < 0x800) {
    u[0] = (char)(0xC0 | c >> 6), u[1] = (char)(0x80 | (c & 0x3F)), n = 2;
  } else if (c < 0x10000) {
    u[0] = (char)(0xE0 | c >> 12), u[1] = (char)(0x80 | (c >> 6 & 0x3F)), u[2] = (char)(0x80 | (c & 0x3F)), n = 3;
  } else {
    u[0] = (char)(0xF0 | c >> 18), u[1] = (char)(0x80 | (c >> 12 & 0x3F)), u[2] = (char)(0x80 | (c >> 6 & 0x3F));
    u[3] = (char)(0x80 | (c & 0x3F)), n = 4;
  }
  return clt__buf_put(b, u, n);
}

uint32_t clt__utf8_decode(const char *s, size_t n, size_t *len) {
  const unsigned char *u = (const unsigned char *)s;
  size_t k = clt__utf8_len(u[0]);
  if (k > n) k = n;
  *len = k;
  switch (k) {
  case 1: return u[0];
  case 2: return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
  case 3: return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
  default: return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
  }
}
