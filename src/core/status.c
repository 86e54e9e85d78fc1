/*
 * status.c: status codes and their names, the per-thread last-error detail,
 * the library version and a few string helpers every layer uses.
 */
#include "core/internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLT__ERROR_LEN 4096

static _Thread_local char last_error[CLT__ERROR_LEN];

const char *clt_strerror(int status) {
  switch (status) {
#define CLT__STATUS_MSG(name, value, msg) \
  case value:                             \
    return msg;
    CLT_STATUS_MAP(CLT__STATUS_MSG)
#undef CLT__STATUS_MSG
  }
  return "unknown status code";
}

const char *clt_status_name(int status) {
  switch (status) {
#define CLT__STATUS_NAME(name, value, msg) \
  case value:                              \
    return "CLT_" #name;
    CLT_STATUS_MAP(CLT__STATUS_NAME)
#undef CLT__STATUS_NAME
  }
  return "CLT_UNKNOWN";
}

const char *clt_last_error(void) { return last_error; }

void clt_clear_error(void) { last_error[0] = '\0'; }

int clt__error(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  clt__log(CLT_LOG_DEBUG, "%s: %s", clt_status_name(status), last_error);
  return status;
}

int clt__null_arg(const char *fn, const char *arg, const char *what) {
  if (!what) return clt__error(CLT_EINVAL, "%s: %s is NULL", fn, arg);
  if (!*what) return clt__error(CLT_EINVAL, "%s: %s is an empty string: give a path", fn, arg);
  return clt__error(CLT_EINVAL, "%s: %s is NULL: no %s (one never made, or whose making failed)", fn, arg, what);
}

int clt__path_arg(const char *fn, const char *arg, const char *path) {
  return path && *path ? CLT_OK : clt__null_arg(fn, arg, path ? "" : NULL);
}

int clt__error_prefix(int status, const char *fmt, ...) {
  char prefix[1024], old[CLT__ERROR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, last_error, sizeof old);
  /* Cut the old detail rather than the prefix if the two do not fit. */
  size_t used = (size_t)snprintf(last_error, sizeof last_error, "%s: ", prefix);
  if (used < sizeof last_error)
    clt__strlcpy(last_error + used, old[0] ? old : clt_strerror(status), sizeof last_error - used);
  return status;
}

const char *clt_version(void) { return CLT_VERSION_STRING; }

int clt_version_hex(void) { return CLT_VERSION_HEX; }

size_t clt_dtype_size(clt_dtype dtype) {
  switch (dtype) {
  case CLT_F32: return 4;
  case CLT_F16: return 2;
  case CLT_I32: return 4;
  case CLT_U8: return 1;
  }
  return 0;
}

const char *clt_dtype_name(clt_dtype dtype) {
  switch (dtype) {
  case CLT_F32: return "f32";
  case CLT_F16: return "f16";
  case CLT_I32: return "i32";
  case CLT_U8: return "u8";
  }
  return "?";
}

void *clt__calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) clt__error(CLT_ENOMEM, "could not allocate %zu x %zu bytes of host memory", n, size);
  return p;
}

char *clt__strdup(const char *s) {
  size_t len = strlen(s) + 1;
  char *p = clt__calloc(1, len);
  if (p) memcpy(p, s, len);
  return p;
}

void clt__strlcpy(char *dst, const char *src, size_t size) {
  if (size == 0) return;
  size_t len = strlen(src);
  if (len >= size) len = size - 1;
  memcpy(dst, src, len);
  dst[len] = '\0';
}

int clt__contains_nocase(const char *haystack, const char *needle) {
  size_t n = strlen(needle);
  if (n == 0) return 1;
  for (const char *h = haystack; *h; h++) {
    size_t i = 0;
    while (i < n && h[i] && tolower((unsigned char)h[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == n) return 1;
  }
  return 0;
}

const char *clt__fmt_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%llu B", (unsigned long long)bytes);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
  return buf;
}

double clt__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
