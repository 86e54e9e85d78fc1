/* datautil.c: helpers of the data-layer suites (see datautil.h). */
#include "datautil.h"
#include "fashion.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

char *du_mkdtemp(void) {
  const char *tmp = getenv("TMPDIR");
  char buf[4096];
  snprintf(buf, sizeof buf, "%s/cltrain-data-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  char *dir = mkdtemp(buf);
  ck_assert_msg(dir != NULL, "mkdtemp(%s) failed", buf);
  return strdup(dir);
}

void du_rmdir(char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[4096];
  if (d) {
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      du_join(path, sizeof path, dir, e->d_name);
      struct stat st;
      if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        rmdir(path);
      else
        unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
  free(dir);
}

const char *du_join(char *buf, size_t len, const char *dir, const char *name) {
  snprintf(buf, len, "%s/%s", dir, name);
  return buf;
}

void du_write(const char *path, const void *data, size_t n, int gz) {
  if (gz) {
    gzFile f = gzopen(path, "wb9");
    ck_assert_msg(f != NULL, "gzopen(%s) failed", path);
    ck_assert_int_eq(n == 0 ? 0 : gzwrite(f, data, (unsigned)n), (int)n);
    ck_assert_int_eq(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "fopen(%s) failed", path);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
  }
}

unsigned char *du_read(const char *path, size_t *n) {
  gzFile f = gzopen(path, "rb");
  ck_assert_msg(f != NULL, "gzopen(%s) failed", path);
  size_t cap = 1 << 20, len = 0;
  unsigned char *buf = malloc(cap);
  int k;
  while ((k = gzread(f, buf + len, (unsigned)(cap - len))) > 0) {
    len += (size_t)k;
    if (len == cap) buf = realloc(buf, cap *= 2);
  }
  ck_assert_int_eq(k, 0);
  gzclose(f);
  *n = len;
  return buf;
}

void du_write_idx(const char *path, int type, int ndims, const uint32_t *dims, const void *data, size_t n, int gz) {
  size_t head = 4 + 4 * (size_t)ndims;
  unsigned char *buf = malloc(head + n);
  buf[0] = 0;
  buf[1] = 0;
  buf[2] = (unsigned char)type;
  buf[3] = (unsigned char)ndims;
  for (int i = 0; i < ndims; i++) {
    buf[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
    buf[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
    buf[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
    buf[7 + 4 * i] = (unsigned char)dims[i];
  }
  if (n) memcpy(buf + head, data, n);
  du_write(path, buf, head + n, gz);
  free(buf);
}

void du_expect_error_(const char *file, int line, int rc, int want, ...) {
  ck_assert_msg(rc == want, "%s:%d: expected %s, got %s (%s)", file, line, clt_status_name(want),
                clt_status_name(rc), clt_last_error());
  if (getenv("CLT_TEST_VERBOSE")) fprintf(stderr, "%s:%d: %s: %s\n", file, line, clt_status_name(rc), clt_last_error());
  va_list ap;
  va_start(ap, want);
  const char *needle;
  while ((needle = va_arg(ap, const char *)) != NULL)
    ck_assert_msg(strstr(clt_last_error(), needle) != NULL, "%s:%d: the message lacks '%s': %s", file, line,
                  needle, clt_last_error());
  va_end(ap);
}

const char *du_fashion_dir(void) { return fashion_dir(); }

double du_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
