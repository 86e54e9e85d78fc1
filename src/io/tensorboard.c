/*
 * tensorboard.c: TensorFlow event files (see tensorboard.h). The messages
 * are encoded by protobuf-c from tb_event.proto; the record framing and its
 * CRC-32C are TensorFlow's (tensorflow/core/lib/io/record_writer.cc): no
 * C library for CRC-32C is packaged in Debian 12, so it is the table-driven
 * one here, checked against the standard's check value in the tests.
 */
#include "core/internal.h"
#include "io/tb_event.pb-c.h"
#include "io/tensorboard.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct clt__tb {
  FILE *f;
  char path[4096];
};

uint32_t clt__crc32c(uint32_t crc, const void *data, size_t n) {
  static uint32_t table[256];
  static int ready;
  if (!ready) { /* idempotent, so a race only computes it twice */
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      table[i] = c;
    }
    ready = 1;
  }
  const unsigned char *p = data;
  crc = ~crc;
  while (n--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

static uint32_t masked_crc(const void *data, size_t n) {
  uint32_t c = clt__crc32c(0, data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void le64(unsigned char *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static void le32(unsigned char *b, uint32_t v) {
  for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static double wall_time(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* One record: the event, framed. */
static int write_event(clt__tb *w, const Tensorboard__Event *ev) {
  size_t n = tensorboard__event__get_packed_size(ev);
  unsigned char *buf = clt__calloc(1, n + 16), head[12], tail[4];
  if (!buf) return CLT_ENOMEM;
  tensorboard__event__pack(ev, buf);
  le64(head, n);
  le32(head + 8, masked_crc(head, 8));
  le32(tail, masked_crc(buf, n));
  int bad = fwrite(head, 1, sizeof head, w->f) != sizeof head || fwrite(buf, 1, n, w->f) != n ||
            fwrite(tail, 1, sizeof tail, w->f) != sizeof tail || fflush(w->f) != 0;
  free(buf);
  return bad ? clt__error(CLT_EIO, "writing the TensorBoard events to %s failed: %s", w->path, strerror(errno))
             : CLT_OK;
}

int clt__tb_open(const char *dir, clt__tb **out) {
  int rc;
  *out = NULL;
  if ((rc = clt__make_dirs(dir, "the TensorBoard directory")) < 0) return rc;
  clt__tb *w = clt__calloc(1, sizeof *w);
  if (!w) return CLT_ENOMEM;
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  /* TensorBoard finds files by "tfevents" in the name; the rest keeps
   * runs in one directory apart. */
  snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010ld.%s.%ld.0", dir, (long)time(NULL), host,
           (long)getpid());
  if (!(w->f = fopen(w->path, "wb"))) {
    rc = clt__error(CLT_EIO, "cannot create the TensorBoard events file %s: %s", w->path, strerror(errno));
    free(w);
    return rc;
  }
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_time();
  ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
  ev.file_version = "brain.Event:2";
  if ((rc = write_event(w, &ev)) < 0) {
    clt__tb_close(w);
    return rc;
  }
  *out = w;
  return CLT_OK;
}

int clt__tb_scalars(clt__tb *w, int64_t step, int n, const char *const *tags, const double *values) {
  Tensorboard__Summary__Value *vals = clt__calloc((size_t)(n > 0 ? n : 1), sizeof *vals);
  Tensorboard__Summary__Value **ptrs = clt__calloc((size_t)(n > 0 ? n : 1), sizeof *ptrs);
  int rc = CLT_ENOMEM;
  if (!vals || !ptrs) goto done;
  Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
  for (int i = 0; i < n; i++) {
    if (!isfinite(values[i])) continue;
    Tensorboard__Summary__Value v = TENSORBOARD__SUMMARY__VALUE__INIT;
    v.tag = (char *)tags[i];
    v.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)values[i];
    vals[sum.n_value] = v;
    ptrs[sum.n_value] = &vals[sum.n_value];
    sum.n_value++;
  }
  sum.value = ptrs;
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_time();
  ev.step = step;
  ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
  ev.summary = &sum;
  rc = write_event(w, &ev);
done:
  free(vals);
  free(ptrs);
  return rc;
}

const char *clt__tb_path(const clt__tb *w) { return w->path; }

void clt__tb_close(clt__tb *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  free(w);
}
