/*
 * raw.c: cltrain's raw dataset format for users' own float data, its reader
 * (clt_dataset_open_raw) and writer (clt_dataset_write_raw). The layout is
 * documented in cltrain.h above clt_dataset_open_raw and in doc/data.md: a
 * little-endian header ("CLTRAW1\0", version, count, ndims, dims, classes),
 * float32 samples, int32 labels, nothing after. Plain or gzip, via zlib.
 */
#include "data/data.h"
#include "core/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RAW_MAGIC "CLTRAW1"  /* 8 bytes with its NUL */
#define RAW_VERSION 1u

/* Little-endian 32-bit words in place (a no-op on little-endian hosts). */
static void from_le32(void *data, uint64_t n) {
  if (!clt__host_is_big_endian()) return;
  unsigned char *p = data;
  for (uint64_t i = 0; i < n; i++, p += 4) {
    uint32_t v = clt__le32(p);
    memcpy(p, &v, 4);
  }
}

/* First non-finite value of x (count, F); 0 if none. */
static int find_nonfinite(const float *x, int64_t count, int64_t F, int64_t *sample, int64_t *pos) {
  for (int64_t i = 0; i < count; i++)
    for (int64_t j = 0; j < F; j++)
      if (!isfinite(x[i * F + j])) {
        *sample = i;
        *pos = j;
        return 1;
      }
  return 0;
}

/* The magic number, the version, the sample count and the number of
 * dimensions, each checked. */
static int read_header(clt__reader *r, const char *path, uint64_t *count, uint32_t *ndims, uint64_t *hash) {
  int rc = CLT_OK;
  unsigned char head[24];
  CLT_TRY(clt__reader_read(r, head, 8, "the magic number"));
  if (memcmp(head, RAW_MAGIC, 8) != 0) {
    if (head[0] == 0 && head[1] == 0)
      return clt__error(CLT_EFORMAT, "%s: this looks like an IDX file, not a cltrain raw file; open it with "
                        "clt_dataset_open_idx_files", path);
    return clt__error(CLT_EFORMAT, "%s: not a cltrain raw file: it starts with %02x %02x %02x %02x %02x %02x %02x "
                      "%02x, not \"CLTRAW1\\0\"", path, head[0], head[1], head[2], head[3], head[4], head[5],
                      head[6], head[7]);
  }
  CLT_TRY(clt__reader_read(r, head + 8, 16, "the header (version, count, ndims)"));
  *hash = clt__hash(CLT__HASH_START, head, sizeof head);
  const uint32_t version = clt__le32(head + 8);
  *count = clt__le64(head + 12);
  *ndims = clt__le32(head + 20);
  if (version != RAW_VERSION)
    return clt__error(CLT_EFORMAT, "%s: raw format version %u; this cltrain reads version %u", path, version,
                      RAW_VERSION);
  if (*count == 0 || *count > (UINT64_C(1) << 40))
    return clt__error(CLT_EFORMAT, "%s: the header declares %llu samples (1 to 2^40 allowed)", path,
                      (unsigned long long)*count);
  if (*ndims < 1 || *ndims > CLT_DATASET_MAX_DIMS)
    return clt__error(CLT_EFORMAT, "%s: a sample has %u dimensions (1 to %d allowed)", path, *ndims,
                      CLT_DATASET_MAX_DIMS);
fail:
  return rc;
}

int clt_dataset_open_raw(const char *path, clt_dataset **out) {
  int rc = CLT_OK;
  clt__reader r = {0};
  clt_dataset *ds = NULL;
  unsigned char u32[4], dimbytes[8 * CLT_DATASET_MAX_DIMS];
  void *labels = NULL;
  char what[96];
  uint64_t count = 0;
  uint32_t ndims = 0;
  uint64_t hash = 0;

  CLT_ARG(out);
  *out = NULL;
  CLT_PATH_ARG(path);
  CLT_TRY(clt__reader_open(&r, path));
  CLT_TRY(read_header(&r, path, &count, &ndims, &hash));
  CLT_TRY(clt__reader_read(&r, dimbytes, 8 * (uint64_t)ndims, "the dimensions"));
  ds = clt__dataset_alloc(path);
  if (!ds) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  ds->count = (int64_t)count;
  ds->ndims = (int)ndims;
  ds->sample_size = 1;
  for (uint32_t i = 0; i < ndims; i++) {
    uint64_t d = clt__le64(dimbytes + 8 * i);
    if (d == 0 || d > (UINT64_C(1) << 38) / (uint64_t)ds->sample_size) {
      rc = clt__error(CLT_EFORMAT, "%s: sample dimension %u is %llu; dimensions must be > 0 and a sample at most "
                      "2^38 values", path, i, (unsigned long long)d);
      goto fail;
    }
    ds->dims[i] = (int64_t)d;
    ds->sample_size *= (int64_t)d;
  }
  CLT_TRY(clt__reader_read(&r, u32, 4, "the number of classes"));
  ds->header_hash = clt__hash(clt__hash(hash, dimbytes, 8 * (size_t)ndims), u32, 4);
  const uint32_t nclasses = clt__le32(u32);
  if (nclasses == 0 || nclasses > INT32_MAX) {
    rc = clt__error(CLT_EFORMAT, "%s: the header declares %u classes (1 to 2^31-1 allowed)", path, nclasses);
    goto fail;
  }
  ds->num_classes = (int)nclasses;
  if (count > UINT64_MAX / 4 / (uint64_t)ds->sample_size) {
    rc = clt__error(CLT_EFORMAT, "%s: the header declares more data than any file can hold", path);
    goto fail;
  }
  const uint64_t xbytes = count * (uint64_t)ds->sample_size * 4;
  char shape[128];
  snprintf(what, sizeof what, "sample data (%llu samples of %s float32)", (unsigned long long)count,
           clt__dims_str(ds->ndims, ds->dims, shape, sizeof shape));
  CLT_TRY(clt__reader_read_alloc(&r, xbytes, what, &ds->x));
  from_le32(ds->x, count * (uint64_t)ds->sample_size);
  snprintf(what, sizeof what, "label data (%llu int32)", (unsigned long long)count);
  CLT_TRY(clt__reader_read_alloc(&r, count * 4, what, &labels));
  from_le32(labels, count);
  ds->y = labels;
  labels = NULL;
  CLT_TRY(clt__reader_expect_end(&r, "the labels"));
  clt__reader_close(&r);

  ds->dtype = CLT_F32;
  ds->range = 1.0f;
  int64_t bad_sample, bad_pos;
  if (find_nonfinite(ds->x, ds->count, ds->sample_size, &bad_sample, &bad_pos)) {
    rc = clt__error(CLT_ENONFINITE, "%s: sample %lld value %lld is %g; raw files hold finite floats only", path,
                    (long long)bad_sample, (long long)bad_pos,
                    (double)((const float *)ds->x)[bad_sample * ds->sample_size + bad_pos]);
    goto fail;
  }
  CLT_TRY(clt__dataset_check_labels(ds, path));
  *out = ds;
  return CLT_OK;

fail:
  clt__reader_close(&r);
  free(labels);
  clt_dataset_destroy(ds);
  return rc;
}

/* ---- writer ---------------------------------------------------------------- */

int clt__gz_write_all(gzFile gz, const char *path, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n > 0) {
    unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
    int k = gzwrite(gz, p, chunk);
    if (k <= 0) {
      int zerr = Z_OK;
      const char *msg = gzerror(gz, &zerr);
      return clt__error(CLT_EIO, "%s: write failed: %s", path, zerr == Z_ERRNO ? strerror(errno) : msg);
    }
    p += k;
    n -= (size_t)k;
  }
  return CLT_OK;
}

int clt__gz_out_open(clt__gz_out *o, const char *path) {
  int rc;
  size_t len = strlen(path);
  int compress = len > 3 && strcmp(path + len - 3, ".gz") == 0;
  memset(o, 0, sizeof *o);
  if ((rc = clt__output_resolve(NULL, path, &o->target)) < 0) return rc;
  if (!(o->tmp = clt__tmp_path(o->target))) {
    clt__gz_out_abort(o);
    return CLT_ENOMEM;
  }
  errno = 0;
  if (!(o->gz = gzopen(o->tmp, compress ? "wb6" : "wbT"))) {
    rc = clt__error(CLT_EIO, "%s: cannot create %s: %s", path, o->tmp, errno ? strerror(errno) : "zlib failed");
    clt__gz_out_abort(o);
  }
  return rc;
}

int clt__gz_out_commit(clt__gz_out *o, const char *path) {
  int zerr = gzclose_w(o->gz), rc = CLT_OK;
  o->gz = NULL;
  if (zerr != Z_OK)
    rc = clt__error(CLT_EIO, "%s: finishing the file failed: %s", path, zerr == Z_ERRNO ? strerror(errno) : zError(zerr));
  int fd = rc == CLT_OK ? open(o->tmp, O_RDONLY) : -1;
  if (rc == CLT_OK && (fd < 0 || fsync(fd) != 0))
    rc = clt__error(CLT_EIO, "%s: flushing %s failed: %s", path, o->tmp, strerror(errno));
  if (fd >= 0) close(fd);
  if (rc == CLT_OK) {
    rc = clt__output_replace(o->tmp, o->target); /* removes tmp when it fails */
    free(o->tmp);
    o->tmp = NULL;
  }
  clt__gz_out_abort(o);
  return rc;
}

void clt__gz_out_abort(clt__gz_out *o) {
  if (o->gz) gzclose_w(o->gz);
  if (o->tmp) unlink(o->tmp);
  free(o->tmp), free(o->target);
  memset(o, 0, sizeof *o);
}

/* n 32-bit words as little-endian bytes, through a bounded staging buffer. */
static int write_le32_words(gzFile gz, const char *path, const void *words, uint64_t n) {
  unsigned char buf[65536];
  const unsigned char *src = words;
  while (n > 0) {
    size_t k = n > sizeof buf / 4 ? sizeof buf / 4 : (size_t)n;
    for (size_t i = 0; i < k; i++) {
      uint32_t v;
      memcpy(&v, src + 4 * i, 4);
      clt__put_le32(buf + 4 * i, v);
    }
    int rc = clt__gz_write_all(gz, path, buf, 4 * k);
    if (rc < 0) return rc;
    src += 4 * k;
    n -= k;
  }
  return CLT_OK;
}

int clt_dataset_write_raw(const char *path, int64_t count, int ndims, const int64_t *dims, int num_classes,
                          const float *x, const int32_t *y) {
  int rc = CLT_OK;
  clt__gz_out out = {0};
  unsigned char head[28 + 8 * CLT_DATASET_MAX_DIMS];
  int64_t F = 1, bad_sample, bad_pos;

  CLT_PATH_ARG(path);
  CLT_ARG(dims);
  CLT_ARG(x);
  CLT_ARG(y);
  if (count < 1 || ndims < 1 || ndims > CLT_DATASET_MAX_DIMS || num_classes < 1)
    return clt__error(CLT_EINVAL, "%s: cannot write %lld samples of %d dimensions in %d classes (need count >= 1, "
                      "1 to %d dimensions, classes >= 1)", path, (long long)count, ndims, num_classes,
                      CLT_DATASET_MAX_DIMS);
  for (int i = 0; i < ndims; i++) {
    if (dims[i] < 1 || dims[i] > (INT64_C(1) << 38) / F)
      return clt__error(CLT_EINVAL, "%s: sample dimension %d is %lld; dimensions must be > 0 and a sample at most "
                        "2^38 values", path, i, (long long)dims[i]);
    F *= dims[i];
  }
  if (find_nonfinite(x, count, F, &bad_sample, &bad_pos))
    return clt__error(CLT_ENONFINITE, "%s: sample %lld value %lld is %g; raw files hold finite floats only", path,
                      (long long)bad_sample, (long long)bad_pos, (double)x[bad_sample * F + bad_pos]);
  for (int64_t i = 0; i < count; i++)
    if (y[i] < 0 || y[i] >= num_classes)
      return clt__error(CLT_EINVAL, "%s: label %d at index %lld is not in [0, %d)", path, (int)y[i], (long long)i,
                        num_classes);

  CLT_TRY(clt__gz_out_open(&out, path));
  gzFile gz = out.gz;
  memcpy(head, RAW_MAGIC, 8);
  clt__put_le32(head + 8, RAW_VERSION);
  clt__put_le64(head + 12, (uint64_t)count);
  clt__put_le32(head + 20, (uint32_t)ndims);
  for (int i = 0; i < ndims; i++) clt__put_le64(head + 24 + 8 * i, (uint64_t)dims[i]);
  clt__put_le32(head + 24 + 8 * ndims, (uint32_t)num_classes);
  CLT_TRY(clt__gz_write_all(gz, path, head, 28 + 8 * (size_t)ndims));
  CLT_TRY(write_le32_words(gz, path, x, (uint64_t)count * (uint64_t)F));
  CLT_TRY(write_le32_words(gz, path, y, (uint64_t)count));
  return clt__gz_out_commit(&out, path);

fail:
  clt__gz_out_abort(&out);
  return rc;
}
