/*
 * npy.c: NumPy's .npy files and .npz archives of them, as clt__array.
 *
 * A .npy file is the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), the
 * length of a header (u16 for 1.0, u32 after), the header itself, a Python
 * dict literal such as {'descr': '<f4', 'fortran_order': False,
 * 'shape': (1000, 16), }, then the values in C order and nothing after.
 * The file is mapped, not read: a 1 GiB array costs the pages the sampler
 * touches. An .npz is a zip archive of .npy members (np.savez stores them,
 * np.savez_compressed deflates them): a stored member is mapped in place,
 * a deflated one inflated through zlib into memory.
 */
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void clt__array_release(clt__array *a) {
  if (a->map) munmap(a->map, a->map_len);
  if (a->fd1) close(a->fd1 - 1);
  free(a->owned);
  memset(a, 0, sizeof *a);
}

/* The whole file mapped read-only (an empty file is CLT_EFORMAT). */
size_t clt__map_resident_max(void) {
  const char *e = getenv("CLT_DATA_MAP_MAX");
  char *end;
  unsigned long long mib = e && *e ? strtoull(e, &end, 10) : 256;
  if (e && *e && *end) mib = 256; /* not a number: the default */
  return mib > (SIZE_MAX >> 20) ? SIZE_MAX : (size_t)mib << 20;
}

int clt__map_file(const char *path, void **map, size_t *len, int *fd1) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  *map = NULL;
  if (fd1) *fd1 = 0;
  if (fd < 0)
    return clt__error(errno == ENOENT ? CLT_ENOTFOUND : CLT_EIO, "%s: cannot open: %s", path, strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int e = errno;
    close(fd);
    return clt__error(CLT_EIO, "%s: %s", path, S_ISREG(st.st_mode) ? strerror(e) : "not a regular file");
  }
  if (st.st_size == 0) {
    close(fd);
    return clt__error(CLT_EFORMAT, "%s: the file is empty", path);
  }
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  if (m == MAP_FAILED || !fd1) close(fd);
  if (m == MAP_FAILED) return clt__error(CLT_EIO, "%s: cannot map the file: %s", path, strerror(e));
  *map = m, *len = (size_t)st.st_size;
  if (fd1) *fd1 = fd + 1;
  return CLT_OK;
}

/* The value of 'key' in the header dict: a pointer just past "'key':" and
 * its spaces, or NULL. */
static const char *dict_value(const char *h, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, "'%s'", key);
  const char *p = strstr(h, pat);
  if (!p) {
    snprintf(pat, sizeof pat, "\"%s\"", key);
    if (!(p = strstr(h, pat))) return NULL;
  }
  p += strlen(pat);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

/* The header dict h of an .npy whose values fill `avail` bytes. */
static int parse_header(const char *what, const char *h, uint64_t avail, clt__array *a) {
  const char *d = dict_value(h, "descr"), *fo = dict_value(h, "fortran_order"), *sh = dict_value(h, "shape");
  if (!d || !fo || !sh)
    return clt__error(CLT_EFORMAT, "%s: the .npy header lacks '%s': '%.120s'", what, !d ? "descr" : !fo ? "fortran_order" : "shape", h);
  char q = *d;
  if ((q != '\'' && q != '"') || strlen(d) < 5 || d[4] == '\0')
    return clt__error(CLT_EFORMAT, "%s: the .npy 'descr' is not a simple type like '<f4' (a structured array?): "
                      "'%.40s'", what, d);
  char order = d[1], kind = d[2];
  char *end;
  long size = strtol(d + 3, &end, 10);
  if (*end != q || (order != '<' && order != '>' && order != '|' && order != '='))
    return clt__error(CLT_EFORMAT, "%s: the .npy 'descr' %.12s is not a simple type like '<f4'", what, d);
  if (!(a->elem = clt__elem_find(kind, (int)size)))
    return clt__error(CLT_EFORMAT, "%s: the array's type is '%c%ld' (NumPy descr %.*s); cltrain reads %s", what,
                      kind, size, (int)(end - d + 1), d, clt__elem_names());
  a->big = order == '>' || (order == '=' && clt__host_is_big_endian());
  if (strncmp(fo, "False", 5) != 0)
    return clt__error(CLT_EFORMAT, "%s: the array is in Fortran order; cltrain reads C order: save "
                      "np.ascontiguousarray(x)", what);
  if (*sh != '(') return clt__error(CLT_EFORMAT, "%s: the .npy 'shape' is not a tuple: '%.40s'", what, sh);
  const char *p = sh + 1;
  uint64_t total = 1;
  a->ndims = 0;
  for (;;) {
    while (*p == ' ') p++;
    if (*p == ')') break;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || errno)
      return clt__error(CLT_EFORMAT, "%s: the .npy 'shape' %.60s holds something that is not a dimension", what, sh);
    if (a->ndims == CLT_DATASET_MAX_DIMS + 1)
      return clt__error(CLT_EFORMAT, "%s: the array has more than %d dimensions", what, CLT_DATASET_MAX_DIMS + 1);
    if (v > 0 && total > (UINT64_C(1) << 50) / (uint64_t)v)
      return clt__error(CLT_EFORMAT, "%s: the shape %.60s declares more than 2^50 values", what, sh);
    a->shape[a->ndims++] = v;
    total *= (uint64_t)v;
    p = end;
    while (*p == ' ') p++;
    if (*p == ',') p++;
    else if (*p != ')') return clt__error(CLT_EFORMAT, "%s: the .npy 'shape' %.60s is not a tuple of numbers", what, sh);
  }
  if (a->ndims == 0) return clt__error(CLT_EFORMAT, "%s: the array is a scalar (shape ()); give one row a sample", what);
  if (total == 0) return clt__error(CLT_EFORMAT, "%s: the array is empty (a dimension is 0)", what);
  uint64_t need = total * (uint64_t)a->elem->size;
  if (avail < need)
    return clt__error(CLT_EFORMAT, "%s: truncated: the shape and type need %llu bytes of values, the file holds %llu",
                      what, (unsigned long long)need, (unsigned long long)avail);
  if (avail > need)
    return clt__error(CLT_EFORMAT, "%s: %llu bytes of trailing data after the %llu bytes of values", what,
                      (unsigned long long)(avail - need), (unsigned long long)need);
  return CLT_OK;
}

/* An .npy image of n bytes at p: a->data set into it. */
static int parse_npy(const char *what, const unsigned char *p, size_t n, clt__array *a) {
  if (n < 10 || memcmp(p, "\x93NUMPY", 6) != 0)
    return clt__error(CLT_EFORMAT, "%s: not a NumPy .npy file: it does not start with \\x93NUMPY", what);
  unsigned major = p[6];
  size_t at, hlen;
  if (major == 1) {
    hlen = (size_t)p[8] | (size_t)p[9] << 8, at = 10;
  } else if (major == 2 || major == 3) {
    if (n < 12) return clt__error(CLT_EFORMAT, "%s: truncated in the .npy header", what);
    hlen = clt__le32(p + 8), at = 12;
  } else {
    return clt__error(CLT_EFORMAT, "%s: .npy version %u.%u; cltrain reads 1.0, 2.0 and 3.0", what, major, p[7]);
  }
  if (hlen > n - at) return clt__error(CLT_EFORMAT, "%s: truncated: the .npy header of %zu bytes runs past the end", what, hlen);
  char *h = malloc(hlen + 1);
  if (!h) return CLT_ENOMEM;
  memcpy(h, p + at, hlen);
  h[hlen] = '\0';
  if (strlen(h) != hlen) h[strlen(h)] = '\0'; /* a NUL inside: the dict ends there */
  int rc = parse_header(what, h, (uint64_t)(n - at - hlen), a);
  a->header = clt__hash(CLT__HASH_START, p, at + hlen);
  free(h);
  a->data = (void *)(p + at + hlen);
  return rc;
}

int clt__npy_open(const char *path, clt__array *out) {
  memset(out, 0, sizeof *out);
  int rc = clt__map_file(path, &out->map, &out->map_len, &out->fd1);
  if (rc < 0) return rc;
  if ((rc = parse_npy(path, out->map, out->map_len, out)) < 0) clt__array_release(out);
  return rc;
}

/* ---- .npz: a zip archive of .npy members ---------------------------------- */

typedef struct zip_entry {
  uint16_t method;
  uint64_t csize, usize, local;
} zip_entry;

/* The end of central directory record, then the entry named name. */
static int zip_find(const char *path, const unsigned char *z, size_t n, const char *name, zip_entry *e) {
  size_t eocd = 0;
  int found = 0;
  for (size_t back = 22; back <= n && back <= 22 + 65535; back++)
    if (clt__le32(z + n - back) == 0x06054b50) {
      eocd = n - back, found = 1;
      break;
    }
  if (!found) return clt__error(CLT_EFORMAT, "%s: not a zip archive (.npz): no end of central directory record", path);
  uint64_t entries = (uint64_t)z[eocd + 10] | (uint64_t)z[eocd + 11] << 8, cd = clt__le32(z + eocd + 16);
  if (cd == 0xffffffffu && eocd >= 20 && clt__le32(z + eocd - 20) == 0x07064b50) { /* zip64 locator */
    uint64_t rec = clt__le64(z + eocd - 12);
    if (rec > n - 56 || clt__le32(z + rec) != 0x06064b50)
      return clt__error(CLT_EFORMAT, "%s: the zip64 end of central directory is not where its locator says", path);
    entries = clt__le64(z + rec + 32), cd = clt__le64(z + rec + 48);
  }
  size_t at = (size_t)cd, nlen = strlen(name);
  for (uint64_t i = 0; i < entries; i++) {
    if (at > n || n - at < 46 || clt__le32(z + at) != 0x02014b50)
      return clt__error(CLT_EFORMAT, "%s: the zip central directory is broken at entry %llu (byte %zu)", path,
                        (unsigned long long)i, at);
    size_t fl = (size_t)z[at + 28] | (size_t)z[at + 29] << 8, xl = (size_t)z[at + 30] | (size_t)z[at + 31] << 8,
           cl = (size_t)z[at + 32] | (size_t)z[at + 33] << 8;
    if (n - at - 46 < fl + xl + cl) return clt__error(CLT_EFORMAT, "%s: truncated in the zip central directory", path);
    const unsigned char *fname = z + at + 46;
    if (fl == nlen + 4 && memcmp(fname, name, nlen) == 0 && memcmp(fname + nlen, ".npy", 4) == 0) {
      e->method = (uint16_t)(z[at + 10] | z[at + 11] << 8);
      e->csize = clt__le32(z + at + 20), e->usize = clt__le32(z + at + 24), e->local = clt__le32(z + at + 42);
      for (size_t x = 0; x + 4 <= xl;) { /* zip64 sizes */
        const unsigned char *f = fname + fl + x;
        size_t id = f[0] | f[1] << 8, sz = f[2] | f[3] << 8, k = 4;
        if (id == 1) {
          if (e->usize == 0xffffffffu && k + 8 <= 4 + sz) e->usize = clt__le64(f + k), k += 8;
          if (e->csize == 0xffffffffu && k + 8 <= 4 + sz) e->csize = clt__le64(f + k), k += 8;
          if (e->local == 0xffffffffu && k + 8 <= 4 + sz) e->local = clt__le64(f + k);
        }
        x += 4 + sz;
      }
      return CLT_OK;
    }
    at += 46 + fl + xl + cl;
  }
  return clt__error(CLT_ENOTFOUND, "%s: the archive has no member %s.npy (np.savez(path, %s=...) writes it)", path,
                    name, name);
}

int clt__npz_open(const char *path, const char *member, clt__array *out) {
  int rc;
  zip_entry e = {0};
  char what[1024];
  memset(out, 0, sizeof *out);
  CLT_TRY(clt__map_file(path, &out->map, &out->map_len, &out->fd1));
  const unsigned char *z = out->map;
  size_t n = out->map_len;
  CLT_TRY(zip_find(path, z, n, member, &e));
  snprintf(what, sizeof what, "%.900s:%.100s.npy", path, member);
  if (e.local > n || n - e.local < 30 || clt__le32(z + e.local) != 0x04034b50) {
    rc = clt__error(CLT_EFORMAT, "%s: no zip local header at byte %llu", what, (unsigned long long)e.local);
    goto fail;
  }
  uint64_t data = e.local + 30 + (z[e.local + 26] | z[e.local + 27] << 8) + (z[e.local + 28] | z[e.local + 29] << 8);
  if (data > n || n - data < e.csize) {
    rc = clt__error(CLT_EFORMAT, "%s: truncated: the member's %llu bytes run past the end of the archive", what,
                    (unsigned long long)e.csize);
    goto fail;
  }
  if (e.method == 0) { /* stored: the .npy lies in the mapping as it is */
    if (e.csize != e.usize) {
      rc = clt__error(CLT_EFORMAT, "%s: a stored member of %llu bytes that says it inflates to %llu", what,
                      (unsigned long long)e.csize, (unsigned long long)e.usize);
      goto fail;
    }
    CLT_TRY(parse_npy(what, z + data, (size_t)e.csize, out));
    return CLT_OK;
  }
  if (e.method != 8) {
    rc = clt__error(CLT_EFORMAT, "%s: zip compression method %u; cltrain reads stored (0) and deflated (8) members",
                    what, e.method);
    goto fail;
  }
  if (e.usize > (UINT64_C(1) << 40)) {
    rc = clt__error(CLT_EFORMAT, "%s: the member says it inflates to %llu bytes", what, (unsigned long long)e.usize);
    goto fail;
  }
  unsigned char *buf = malloc(e.usize ? (size_t)e.usize : 1);
  if (!buf) {
    rc = clt__error(CLT_ENOMEM, "%s: cannot allocate %llu bytes to inflate it into", what, (unsigned long long)e.usize);
    goto fail;
  }
  z_stream s;
  memset(&s, 0, sizeof s);
  if (inflateInit2(&s, -15) != Z_OK) {
    free(buf);
    rc = CLT_ENOMEM;
    goto fail;
  }
  uint64_t in_left = e.csize, out_done = 0;
  const unsigned char *in = z + data;
  int zr = Z_OK;
  while (zr == Z_OK) {
    unsigned ic = in_left > (1u << 30) ? (1u << 30) : (unsigned)in_left;
    unsigned oc = e.usize - out_done > (1u << 30) ? (1u << 30) : (unsigned)(e.usize - out_done);
    s.next_in = (unsigned char *)in, s.avail_in = ic, s.next_out = buf + out_done, s.avail_out = oc;
    zr = inflate(&s, Z_NO_FLUSH);
    in += ic - s.avail_in, in_left -= ic - s.avail_in, out_done += oc - s.avail_out;
    if (zr == Z_OK && ic == s.avail_in && oc == s.avail_out) zr = Z_BUF_ERROR; /* no progress */
  }
  inflateEnd(&s);
  if (zr != Z_STREAM_END || out_done != e.usize) {
    free(buf);
    rc = clt__error(CLT_EFORMAT, "%s: corrupt deflate stream (%s) after %llu of %llu bytes", what,
                    zr == Z_STREAM_END ? "wrong size" : zr == Z_BUF_ERROR ? "cut short" : "bad data",
                    (unsigned long long)out_done, (unsigned long long)e.usize);
    goto fail;
  }
  clt__array_release(out); /* the archive's mapping: the member is in buf now */
  out->owned = buf;
  rc = parse_npy(what, buf, (size_t)e.usize, out);
  if (rc < 0) goto fail;
  return CLT_OK;
fail:
  clt__array_release(out);
  return rc;
}
