/*
 * datautil.h: what the data-layer suites share: a scratch directory, writers
 * of crafted (good and broken) IDX and raw files, plain or gzip, and the
 * check that a failure has the right code and a message naming the file and
 * the fault.
 */
#ifndef CLT_DATAUTIL_H
#define CLT_DATAUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include <cltrain.h>

/* A fresh directory under $TMPDIR (or /tmp), removed with du_rmdir. */
char *du_mkdtemp(void);
/* Remove the files in dir, then dir itself (it holds no subdirectories). */
void du_rmdir(char *dir);
/* dir/name in a buffer of the caller. */
const char *du_join(char *buf, size_t len, const char *dir, const char *name);

/* Write n bytes to path, gzip-compressed when gz. */
void du_write(const char *path, const void *data, size_t n, int gz);
/* Read a whole file (decompressing gzip); *n gets its length. free() it. */
unsigned char *du_read(const char *path, size_t *n);
/* An IDX file: magic 00 00 type ndims, big-endian dims, then n data bytes. */
void du_write_idx(const char *path, int type, int ndims, const uint32_t *dims, const void *data, size_t n, int gz);

/* Assert that rc == want and that clt_last_error() contains each of the
 * NULL-terminated needles. */
void du_expect_error_(const char *file, int line, int rc, int want, ...);
#define du_expect_error(rc, want, ...) du_expect_error_(__FILE__, __LINE__, (rc), (want), __VA_ARGS__, (char *)NULL)
#define du_ok(expr)                                                                  \
  do {                                                                               \
    int du__rc = (expr);                                                             \
    ck_assert_msg(du__rc == 0, "%s returned %s: %s", #expr, clt_status_name(du__rc), \
                  clt_last_error());                                                 \
  } while (0)

/* The Fashion-MNIST directory ($CLT_FASHION_MNIST_DIR, else where the Debian
 * package dataset-fashion-mnist puts it), or NULL when its files are absent. */
const char *du_fashion_dir(void);

/* Seconds on a monotonic clock. */
double du_now(void);

#endif
