/*
 * reader.c: checked reading of dataset files through zlib. gzread reads plain
 * and gzip files alike; every short read is turned into a message that says
 * which file, what was being read, how far it got and why it stopped
 * (truncated file, truncated or corrupt gzip stream, I/O error).
 */
#include "data/data.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CLT__GZ_BUFFER (256 * 1024)
#define CLT__READ_CHUNK (1u << 30)        /* gzread takes an unsigned, returns an int */
#define CLT__ALLOC_FIRST (1u << 20)       /* read_alloc starts with 1 MiB and doubles */

int clt__reader_open(clt__reader *r, const char *path) {
  struct stat st;
  memset(r, 0, sizeof *r);
  r->path = path;
  if (!path || !*path) return clt__error(CLT_EINVAL, "no file name given");
  if (stat(path, &st) != 0) {
    int e = errno;
    return clt__error(e == ENOENT || e == ENOTDIR ? CLT_ENOTFOUND : CLT_EIO, "%s: cannot open: %s", path,
                      strerror(e));
  }
  if (S_ISDIR(st.st_mode)) return clt__error(CLT_EIO, "%s: is a directory, not a data file", path);
  errno = 0;
  r->gz = gzopen(path, "rb");
  if (!r->gz) {
    int e = errno;
    return clt__error(e == ENOENT ? CLT_ENOTFOUND : e == ENOMEM ? CLT_ENOMEM : CLT_EIO, "%s: cannot open: %s",
                      path, e ? strerror(e) : "zlib could not allocate its state");
  }
  gzbuffer(r->gz, CLT__GZ_BUFFER);
  return CLT_OK;
}

void clt__reader_close(clt__reader *r) {
  if (r->gz) gzclose_r(r->gz);
  r->gz = NULL;
}

/* Read up to n bytes; *got says how many came. Returns 0, or -1 when zlib
 * reports an error (left for fail_short to describe). */
static int read_some(clt__reader *r, void *buf, uint64_t n, uint64_t *got) {
  *got = 0;
  while (*got < n) {
    uint64_t left = n - *got;
    unsigned chunk = left > CLT__READ_CHUNK ? CLT__READ_CHUNK : (unsigned)left;
    int k = gzread(r->gz, (char *)buf + *got, chunk);
    if (k < 0) return -1;
    if (k == 0) break;
    *got += (uint64_t)k;
    r->offset += (uint64_t)k;
  }
  /* zlib inflates ahead: a stream that breaks beyond the bytes asked for
   * is reported by the read that needs them, not blamed on these. */
  if (*got == n) return 0;
  int zerr = Z_OK;
  gzerror(r->gz, &zerr);
  return zerr == Z_OK || zerr == Z_STREAM_END ? 0 : -1;
}

/* zlib's message without the "path: " it puts in front. */
static const char *zlib_message(clt__reader *r, int *zerr) {
  const char *msg = gzerror(r->gz, zerr);
  size_t len = strlen(r->path);
  if (strncmp(msg, r->path, len) == 0 && strncmp(msg + len, ": ", 2) == 0) msg += len + 2;
  return msg;
}

/* Describe why reading `what` stopped after got of n bytes. zlib inflates
 * ahead of what we ask for, so a broken stream is reported where it is
 * noticed, which may be before the bad bytes' place in the data. */
static int fail_short(clt__reader *r, const char *what, uint64_t got, uint64_t n) {
  int zerr = Z_OK;
  const char *zmsg = zlib_message(r, &zerr);
  const unsigned long long start = (unsigned long long)(r->offset - got);
  char where[64] = "";
  if (start > 0) snprintf(where, sizeof where, ", which start at byte %llu", start);
  if (zerr == Z_ERRNO)
    return clt__error(CLT_EIO, "%s: read error in %s at byte %llu: %s", r->path, what,
                      (unsigned long long)r->offset, strerror(errno));
  if (zerr == Z_MEM_ERROR)
    return clt__error(CLT_ENOMEM, "%s: zlib ran out of memory reading %s", r->path, what);
  if (zerr == Z_BUF_ERROR)
    return clt__error(CLT_EFORMAT, "%s: truncated: the gzip stream ends early (%s), noticed after %llu of the %llu "
                      "bytes of %s%s; is the download complete?",
                      r->path, zmsg, (unsigned long long)got, (unsigned long long)n, what, where);
  if (zerr != Z_OK && zerr != Z_STREAM_END)
    return clt__error(CLT_EFORMAT, "%s: corrupt gzip stream (%s), noticed after %llu of the %llu bytes of %s%s",
                      r->path, zmsg, (unsigned long long)got, (unsigned long long)n, what, where);
  return clt__error(CLT_EFORMAT, "%s: truncated: the file ends after %llu of the %llu bytes of %s%s", r->path,
                    (unsigned long long)got, (unsigned long long)n, what, where);
}

int clt__reader_read(clt__reader *r, void *buf, uint64_t n, const char *what) {
  uint64_t got = 0;
  int err = read_some(r, buf, n, &got);
  if (err < 0 || got < n) return fail_short(r, what, got, n);
  return CLT_OK;
}

int clt__reader_read_alloc(clt__reader *r, uint64_t n, const char *what, void **out) {
  *out = NULL;
  if (n > SIZE_MAX)
    return clt__error(CLT_EFORMAT, "%s: %s would be %llu bytes, more than this machine can address", r->path,
                      what, (unsigned long long)n);
  uint64_t cap = n < CLT__ALLOC_FIRST ? n : CLT__ALLOC_FIRST, got = 0;
  unsigned char *buf = malloc(cap ? (size_t)cap : 1);
  if (!buf) return clt__error(CLT_ENOMEM, "%s: cannot allocate %llu bytes for %s", r->path,
                              (unsigned long long)cap, what);
  while (got < n) {
    if (got == cap) {
      uint64_t want = cap * 2 < n ? cap * 2 : n;
      unsigned char *bigger = realloc(buf, (size_t)want);
      if (!bigger) {
        free(buf);
        return clt__error(CLT_ENOMEM, "%s: cannot allocate %llu bytes for %s", r->path,
                          (unsigned long long)want, what);
      }
      buf = bigger;
      cap = want;
    }
    uint64_t k = 0;
    int err = read_some(r, buf + got, cap - got, &k);
    got += k;
    if (err < 0 || got < cap) {
      free(buf);
      return fail_short(r, what, got, n);
    }
  }
  *out = buf;
  return CLT_OK;
}

int clt__reader_expect_end(clt__reader *r, const char *after) {
  unsigned char buf[65536];
  uint64_t start = r->offset, extra = 0, k = 0;
  /* Count up to 1 MiB of trailing bytes; that is enough to say how bad it is. */
  do {
    if (read_some(r, buf, sizeof buf, &k) < 0) {
      int zerr = Z_OK;
      const char *zmsg = zlib_message(r, &zerr);
      if (zerr == Z_ERRNO)
        return clt__error(CLT_EIO, "%s: read error after %s: %s", r->path, after, strerror(errno));
      if (zerr == Z_BUF_ERROR)
        return clt__error(CLT_EFORMAT, "%s: truncated: the gzip stream ends early (%s) after %s; is the download "
                          "complete?", r->path, zmsg, after);
      return clt__error(CLT_EFORMAT, "%s: corrupt gzip stream (%s) after %s", r->path, zmsg, after);
    }
    extra += k;
  } while (k == sizeof buf && extra < (1u << 20));
  if (extra > 0)
    return clt__error(CLT_EFORMAT, "%s: %s%llu bytes of trailing data after %s (from byte %llu); the header "
                      "does not describe them",
                      r->path, extra >= (1u << 20) ? "at least " : "", (unsigned long long)extra, after,
                      (unsigned long long)start);
  return CLT_OK;
}
