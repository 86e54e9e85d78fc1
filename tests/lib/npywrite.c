/*
 * npywrite.c: .npy images and .npz archives for the tests (npywrite.h).
 */
#include "npywrite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

unsigned char *npy_image(const char *descr, const int64_t *shape, int ndims, const void *data, size_t nbytes,
                         size_t *len) {
  char dict[512], dims[256] = "";
  size_t at = 0;
  for (int i = 0; i < ndims; i++)
    at += (size_t)snprintf(dims + at, sizeof dims - at, "%lld,%s", (long long)shape[i], i + 1 < ndims ? " " : "");
  if (ndims > 1) dims[at - 1] = '\0'; /* (3, 4) but (3,) */
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, dims);
  size_t hlen = ((size_t)n + 1 + 10 + 63) / 64 * 64 - 10; /* dict, spaces, '\n': 10 + hlen a multiple of 64 */
  unsigned char *out = malloc(10 + hlen + nbytes);
  memcpy(out, "\x93NUMPY\x01\x00", 8);
  out[8] = (unsigned char)(hlen & 0xff), out[9] = (unsigned char)(hlen >> 8);
  memset(out + 10, ' ', hlen);
  memcpy(out + 10, dict, (size_t)n);
  out[10 + hlen - 1] = '\n';
  if (nbytes) memcpy(out + 10 + hlen, data, nbytes);
  *len = 10 + hlen + nbytes;
  return out;
}

static void le16(unsigned char *p, unsigned v) { p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8); }
static void le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

unsigned char *npz_image(int k, const char *const *names, unsigned char *const *imgs, const size_t *lens,
                         int deflated, size_t *len) {
  size_t cap = 1024;
  for (int i = 0; i < k; i++) cap += 2 * lens[i] + 256;
  unsigned char *z = malloc(cap), *cd = malloc(256 * (size_t)k + 64);
  size_t at = 0, cdn = 0;
  for (int i = 0; i < k; i++) {
    char fname[256];
    int fl = snprintf(fname, sizeof fname, "%s.npy", names[i]);
    uint32_t crc = (uint32_t)crc32(0, imgs[i], (uInt)lens[i]);
    unsigned char *data = imgs[i];
    size_t clen = lens[i];
    unsigned char *packed = NULL;
    if (deflated) {
      z_stream s;
      memset(&s, 0, sizeof s);
      deflateInit2(&s, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
      packed = malloc(deflateBound(&s, (uLong)lens[i]));
      s.next_in = imgs[i], s.avail_in = (uInt)lens[i], s.next_out = packed, s.avail_out = (uInt)deflateBound(&s, (uLong)lens[i]);
      deflate(&s, Z_FINISH);
      clen = s.total_out;
      deflateEnd(&s);
      data = packed;
    }
    size_t local = at;
    unsigned char *h = z + at;
    le32(h, 0x04034b50), le16(h + 4, 20), le16(h + 6, 0), le16(h + 8, deflated ? 8 : 0), le16(h + 10, 0),
        le16(h + 12, 0x21), le32(h + 14, crc), le32(h + 18, (uint32_t)clen), le32(h + 22, (uint32_t)lens[i]),
        le16(h + 26, (unsigned)fl), le16(h + 28, 0);
    memcpy(h + 30, fname, (size_t)fl);
    at += 30 + (size_t)fl;
    memcpy(z + at, data, clen);
    at += clen;
    unsigned char *c = cd + cdn;
    le32(c, 0x02014b50), le16(c + 4, 20), le16(c + 6, 20), le16(c + 8, 0), le16(c + 10, deflated ? 8 : 0),
        le16(c + 12, 0), le16(c + 14, 0x21), le32(c + 16, crc), le32(c + 20, (uint32_t)clen),
        le32(c + 24, (uint32_t)lens[i]), le16(c + 28, (unsigned)fl), le16(c + 30, 0), le16(c + 32, 0),
        le16(c + 34, 0), le16(c + 36, 0), le32(c + 38, 0), le32(c + 42, (uint32_t)local);
    memcpy(c + 46, fname, (size_t)fl);
    cdn += 46 + (size_t)fl;
    free(packed);
  }
  size_t cdat = at;
  memcpy(z + at, cd, cdn);
  at += cdn;
  unsigned char *e = z + at;
  le32(e, 0x06054b50), le16(e + 4, 0), le16(e + 6, 0), le16(e + 8, (unsigned)k), le16(e + 10, (unsigned)k),
      le32(e + 12, (uint32_t)cdn), le32(e + 16, (uint32_t)cdat), le16(e + 20, 0);
  at += 22;
  free(cd);
  *len = at;
  return z;
}

void npy_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
    perror(path);
    exit(99);
  }
}
