/*
 * dataset.c: the dataset object every reader fills: accessors, label checks,
 * normalisation and its statistics, and clt_dataset_get_batch, the one
 * decoder of samples to normalised float32 (the prefetch thread runs it too,
 * so prefetched batches are bitwise the direct ones); token windows are
 * decoded by tokens.c.
 */
#include "data/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

clt_dataset *clt__dataset_alloc(const char *path) {
  clt_dataset *ds = clt__calloc(1, sizeof *ds);
  if (!ds) return NULL;
  ds->path = clt__strdup(path ? path : "(memory)");
  if (!ds->path) {
    free(ds);
    return NULL;
  }
  ds->range = 1.0f;
  ds->mean = 0.0f;
  ds->std = 1.0f;
  ds->labels_per_sample = 1;
  ds->read_fd = -1;
  return ds;
}

void clt_dataset_destroy(clt_dataset *ds) {
  if (!ds) return;
  if (ds->map)
    munmap(ds->map, ds->map_len);
  else
    free(ds->x);
  if (ds->read_fd >= 0) {
    /* what this process read of the file: under MPI, each rank its own share of the batches */
    clt__log(CLT_LOG_INFO, "%s: read %lld rows for batches, %lld bytes by pread", ds->path,
             (long long)ds->rows_read, (long long)ds->bytes_read);
    close(ds->read_fd);
  }
  free(ds->y);
  free(ds->targets);
  free(ds->shift);
  free(ds->scale);
  free(ds->cols);
  free(ds->target);
  free(ds->window_labels);
  free(ds->path);
  free(ds);
}

int64_t clt_dataset_count(const clt_dataset *ds) { return ds ? ds->count : 0; }
int clt_dataset_num_classes(const clt_dataset *ds) { return ds ? ds->num_classes : 0; }
int64_t clt_dataset_sample_size(const clt_dataset *ds) { return ds ? ds->sample_size : 0; }
int64_t clt_dataset_labels_per_sample(const clt_dataset *ds) { return ds ? ds->labels_per_sample : 0; }
int64_t clt_dataset_label_count(const clt_dataset *ds) {
  return !ds ? 0 : ds->window_labels ? ds->labels_counted : ds->count * ds->labels_per_sample;
}
int64_t clt__dataset_sample_labels(const clt_dataset *ds, int64_t k) {
  return ds->window_labels ? ds->window_labels[k] : ds->labels_per_sample;
}
const char *clt_dataset_path(const clt_dataset *ds) { return ds ? ds->path : ""; }

int clt_dataset_sample_shape(const clt_dataset *ds, int64_t *dims) {
  if (!ds) return 0;
  if (dims)
    for (int i = 0; i < ds->ndims; i++) dims[i] = ds->dims[i];
  return ds->ndims;
}

const char *clt__dims_str(int ndims, const int64_t *dims, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < ndims && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "x" : "", (long long)dims[i]);
  return buf;
}

int clt__dataset_check_labels(clt_dataset *ds, const char *labels_path) {
  int64_t bad = 0, first = -1;
  if (ds->num_classes == 0) {
    int32_t max = 0;
    for (int64_t i = 0; i < ds->count; i++) {
      if (ds->y[i] < 0 && first < 0) first = i;
      if (ds->y[i] > max) max = ds->y[i];
    }
    if (first >= 0)
      return clt__error(CLT_EFORMAT, "%s: label %d at index %lld is negative", labels_path, (int)ds->y[first],
                        (long long)first);
    if (max == INT32_MAX) return clt__error(CLT_EFORMAT, "%s: a label is %d, too large", labels_path, (int)max);
    ds->num_classes = max + 1;
    return CLT_OK;
  }
  for (int64_t i = 0; i < ds->count; i++) {
    if (ds->y[i] < 0 || ds->y[i] >= ds->num_classes) {
      if (first < 0) first = i;
      bad++;
    }
  }
  if (bad == 1)
    return clt__error(CLT_EFORMAT, "%s: label %d at index %lld is not in [0, %d), the range of %d classes",
                      labels_path, (int)ds->y[first], (long long)first, ds->num_classes, ds->num_classes);
  if (bad)
    return clt__error(CLT_EFORMAT, "%s: label %d at index %lld is not in [0, %d), the range of %d classes "
                      "(%lld bad labels in all)",
                      labels_path, (int)ds->y[first], (long long)first, ds->num_classes, ds->num_classes,
                      (long long)bad);
  return CLT_OK;
}

int clt_dataset_normalize(clt_dataset *ds, float mean, float std) {
  CLT_HANDLE(ds, "dataset");
  if (!isfinite(mean) || !isfinite(std) || !(std > 0.0f))
    return clt__error(CLT_EINVAL, "%s: normalising needs a finite mean and a finite std > 0, not mean %g std %g%s",
                      ds->path, (double)mean, (double)std,
                      std == 0.0f ? " (a dataset whose values are all equal has std 0)" : "");
  /* Token ids are indices into an embedding, not measurements: scaling them
   * would make them name other tokens. (0, 1) is allowed, as it changes
   * nothing, so code that normalises every dataset keeps working. */
  if (ds->token_bytes) {
    if (mean == 0.0f && std == 1.0f) return CLT_OK;
    return clt__error(CLT_EINVAL, "%s: a token dataset is not normalised (its values are token ids); mean %g "
                      "std %g asked", ds->path, (double)mean, (double)std);
  }
  if (ds->dtype == CLT_U8) {
    float lut[256];
    for (int v = 0; v < 256; v++) {
      lut[v] = ((float)v / ds->range - mean) / std;
      if (!isfinite(lut[v]))
        return clt__error(CLT_ENONFINITE, "%s: normalising byte value %d with mean %g std %g gives %g", ds->path,
                          v, (double)mean, (double)std, (double)lut[v]);
    }
    memcpy(ds->lut, lut, sizeof lut);
  }
  ds->mean = mean;
  ds->std = std;
  return CLT_OK;
}

void clt_dataset_get_normalization(const clt_dataset *ds, float *mean, float *std) {
  if (mean) *mean = ds ? ds->mean : 0.0f;
  if (std) *std = ds ? ds->std : 1.0f;
}

/* One stored row (row_len values) as float32 into out: the columns that
 * make the sample, or all of them. */
static void convert_row(const clt_dataset *ds, const unsigned char *row, float *out) {
  const int64_t F = ds->sample_size, size = ds->elem->size;
  if (!ds->cols)
    clt__elem_convert(ds->elem, row, F, ds->elem_big, out);
  else
    for (int64_t j = 0; j < F; j++) clt__elem_convert(ds->elem, row + ds->cols[j] * size, 1, ds->elem_big, out + j);
}

static int64_t row_bytes(const clt_dataset *ds) {
  return (ds->row_len ? ds->row_len : ds->sample_size) * ds->elem->size;
}

void clt__dataset_scan_row(const clt_dataset *ds, int64_t k, float *out) {
  convert_row(ds, (const unsigned char *)ds->x + k * row_bytes(ds), out);
}

/* Sample k of a users' source as float32, not normalised. A large mapped
 * file's row is pread() into a buffer: random rows touched in a mapping
 * stay mapped (Linux maps up to 64 KiB around each fault), so a 1 GiB
 * file would grow the resident set by 1 GiB; releasing them in bulk
 * instead costs a page fault per row afterwards, slower than a read. */
int clt__dataset_raw_row(const clt_dataset *ds, int64_t k, float *out) {
  const int64_t rb = row_bytes(ds);
  if (ds->read_fd < 0) {
    convert_row(ds, (const unsigned char *)ds->x + k * rb, out);
    return CLT_OK;
  }
  unsigned char stack[8192], *buf = rb <= (int64_t)sizeof stack ? stack : malloc((size_t)rb);
  if (!buf) return CLT_ENOMEM;
  off_t at = (off_t)((const unsigned char *)ds->x - (const unsigned char *)ds->map) + (off_t)(k * rb);
  int64_t got = 0;
  while (got < rb) {
    ssize_t n = pread(ds->read_fd, buf + got, (size_t)(rb - got), at + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      if (buf != stack) free(buf);
      return clt__error(CLT_EIO, "%s: reading sample %lld (byte %lld): %s", ds->path, (long long)k,
                        (long long)(at + got), n < 0 ? strerror(e) : "the file was cut short while open");
    }
    got += n;
  }
  convert_row(ds, buf, out);
  if (buf != stack) free(buf);
  __atomic_fetch_add((int64_t *)&ds->rows_read, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add((int64_t *)&ds->bytes_read, rb, __ATOMIC_RELAXED);
  return CLT_OK;
}

int64_t clt__dataset_scan_chunk(const clt_dataset *ds) {
  int64_t rb = ds->elem ? row_bytes(ds) : ds->sample_size * 4, n = (INT64_C(32) << 20) / (rb > 0 ? rb : 1);
  return n > 0 ? n : 1;
}

void clt__dataset_scan_release(const clt_dataset *ds, int64_t lo, int64_t hi) {
  if (ds->read_fd < 0 || !ds->map || hi <= lo) return;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), base = (uintptr_t)ds->map;
  const int64_t rb = row_bytes(ds);
  uintptr_t a = (uintptr_t)ds->x + (uintptr_t)(lo * rb), b = (uintptr_t)ds->x + (uintptr_t)(hi * rb);
  a = a & ~(page - 1);                        /* whole pages: a row's neighbours fault back in if needed */
  b = (b + page - 1) & ~(page - 1);
  if (b > base + ds->map_len) b = (base + ds->map_len + page - 1) & ~(page - 1);
  if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Two passes in double (mean, then squared deviations): no cancellation. */
int clt_dataset_stats(const clt_dataset *ds, float *mean, float *std) {
  CLT_HANDLE(ds, "dataset");
  CLT_ARG(mean);
  CLT_ARG(std);
  if (ds->token_bytes) { /* the identity, which is all clt_dataset_normalize takes for tokens */
    *mean = 0.0f;
    *std = 1.0f;
    return CLT_OK;
  }
  const int64_t total = ds->count * ds->sample_size;
  double m = 0.0, var = 0.0;
  if (ds->dtype == CLT_U8) {
    /* A histogram of the byte values makes both passes 256 terms long. */
    int64_t hist[256] = {0};
    const unsigned char *x = ds->x;
    for (int64_t i = 0; i < total; i++) hist[x[i]]++;
    for (int v = 0; v < 256; v++) m += (double)hist[v] * ((double)v / ds->range);
    m /= (double)total;
    for (int v = 0; v < 256; v++) {
      double d = (double)v / ds->range - m;
      var += (double)hist[v] * d * d;
    }
  } else if (ds->elem) { /* a row at a time, as read */
    float *row = clt__calloc((size_t)ds->sample_size, sizeof *row);
    if (!row) return CLT_ENOMEM;
    const int64_t chunk = clt__dataset_scan_chunk(ds);
    for (int pass = 0; pass < 2; pass++) {
      int64_t behind = 0; /* rows before this are released */
      for (int64_t k = 0; k < ds->count; k++) {
        clt__dataset_scan_row(ds, k, row);
        if (k + 1 - behind >= chunk || k + 1 == ds->count) clt__dataset_scan_release(ds, behind, k + 1), behind = k + 1;
        for (int64_t j = 0; j < ds->sample_size; j++) {
          if (pass == 0) m += row[j];
          else var += (row[j] - m) * (row[j] - m);
        }
      }
      if (pass == 0) m /= (double)total;
    }
    free(row);
  } else {
    const float *x = ds->x;
    for (int64_t i = 0; i < total; i++) m += x[i];
    m /= (double)total;
    for (int64_t i = 0; i < total; i++) {
      double d = x[i] - m;
      var += d * d;
    }
  }
  *mean = (float)m;
  *std = (float)sqrt(var / (double)total);
  return CLT_OK;
}

/* Sample k's values, already float32 in out (F), normalised and checked:
 * the last part of the one decoder of every kind of sample file. */
static int finish_sample(const clt_dataset *ds, int64_t k, float *out) {
  const int64_t F = ds->sample_size;
  if (ds->elem && (ds->mean != 0.0f || ds->std != 1.0f))
    for (int64_t j = 0; j < F; j++) out[j] = (out[j] - ds->mean) / ds->std;
  if (ds->shift)
    for (int64_t j = 0; j < F; j++) out[j] = (out[j] - ds->shift[j]) / ds->scale[j];
  /* NaN and Inf are the floats whose exponent bits are all set: an
   * integer test that vectorises, where isfinite's branches do not. */
  uint32_t bad = 0;
  for (int64_t j = 0; j < F; j++) {
    uint32_t b;
    memcpy(&b, out + j, 4);
    bad |= (b & 0x7f800000u) == 0x7f800000u;
  }
  if (!bad) return CLT_OK;
  int64_t j = 0;
  while (isfinite(out[j])) j++;
  return clt__error(CLT_ENONFINITE, "%s: sample %lld value %lld becomes %g as read and normalised (mean %g std %g%s); "
                    "the samples must be finite", ds->path, (long long)k, (long long)j, (double)out[j],
                    (double)ds->mean, (double)ds->std, ds->shift ? ", and per feature" : "");
}

/* Sample k's values as float32 into out (F), normalised: the one decoder
 * of every kind of sample file. */
static int decode_sample(const clt_dataset *ds, int64_t k, float *out) {
  const int64_t F = ds->sample_size;
  if (ds->dtype == CLT_U8 && !ds->elem) {
    const unsigned char *row = (const unsigned char *)ds->x + k * F;
    for (int64_t j = 0; j < F; j++) out[j] = ds->lut[row[j]];
  } else if (!ds->elem) {
    const float *row = (const float *)ds->x + k * F;
    for (int64_t j = 0; j < F; j++) out[j] = (row[j] / ds->range - ds->mean) / ds->std;
  } else {
    int rc = clt__dataset_raw_row(ds, k, out);
    if (rc < 0) return rc;
  }
  return finish_sample(ds, k, out);
}

/* ---- a batch of a pread dataset, read in runs ----
 * A pread() costs a few microseconds of system call before its first byte
 * (about 3.5 us on the virtual machines we measure on), as much as copying
 * 10-30 KiB: rows one at a time are then bound by the calls (1 KiB rows:
 * 0.27 GB/s). The batch's rows are taken in file order instead, and
 * neighbours closer than RUN_GAP bytes read by one call with what lies
 * between (up to RUN_MAX bytes a call): an evaluation's or an unshuffled
 * epoch's batches become a few large reads; the values, and so the bits of
 * training, are those of the row-by-row reading. */
/* RUN_MAX stays below malloc's mmap threshold (128 KiB): the buffer is
 * reused, not faulted in anew each batch. */
enum { RUN_GAP = 16 << 10, RUN_MAX = 64 << 10 };

typedef struct row_at {
  int64_t row, pos; /* the row, and its position in the batch */
} row_at;

static int by_row(const void *a, const void *b) {
  const row_at *x = a, *y = b;
  return x->row < y->row ? -1 : x->row > y->row ? 1 : x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Bytes [at, at + n) of the file into buf; CLT_EIO naming the sample. */
static int pread_all(const clt_dataset *ds, int64_t k, unsigned char *buf, int64_t n, off_t at) {
  int64_t got = 0;
  while (got < n) {
    ssize_t r = pread(ds->read_fd, buf + got, (size_t)(n - got), at + got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return clt__error(CLT_EIO, "%s: reading sample %lld (byte %lld): %s", ds->path, (long long)k,
                        (long long)(at + got), r < 0 ? strerror(errno) : "the file was cut short while open");
    got += r;
  }
  __atomic_fetch_add((int64_t *)&ds->bytes_read, n, __ATOMIC_RELAXED); /* not const: allocated as ours */
  return CLT_OK;
}

static int read_batch_runs(const clt_dataset *ds, const int64_t *indices, int64_t n, float *x) {
  const int64_t F = ds->sample_size, rb = row_bytes(ds);
  const off_t base = (off_t)((const unsigned char *)ds->x - (const unsigned char *)ds->map);
  row_at *order = malloc((size_t)n * sizeof *order);
  int64_t cap = rb > RUN_MAX ? rb : RUN_MAX;
  unsigned char *buf = malloc((size_t)cap);
  int rc = CLT_OK;
  if (!order || !buf) rc = CLT_ENOMEM;
  for (int64_t i = 0; rc == CLT_OK && i < n; i++) order[i].row = indices[i], order[i].pos = i;
  if (rc == CLT_OK) qsort(order, (size_t)n, sizeof *order, by_row);
  for (int64_t a = 0; rc == CLT_OK && a < n;) {
    int64_t b = a + 1; /* the run: order[a, b) */
    while (b < n && (order[b].row - order[b - 1].row - 1) * rb <= RUN_GAP &&
           (order[b].row - order[a].row + 1) * rb <= cap)
      b++;
    const int64_t first = order[a].row, rows = order[b - 1].row - first + 1;
    rc = pread_all(ds, first, buf, rows * rb, base + (off_t)(first * rb));
    for (int64_t i = a; rc == CLT_OK && i < b; i++) convert_row(ds, buf + (order[i].row - first) * rb, x + order[i].pos * F);
    a = b;
  }
  free(order), free(buf);
  if (rc < 0) return rc;
  __atomic_fetch_add((int64_t *)&ds->rows_read, n, __ATOMIC_RELAXED);
  for (int64_t i = 0; i < n; i++) /* in the batch's order: the first bad sample is named, as row by row */
    if ((rc = finish_sample(ds, indices[i], x + i * F)) < 0) return rc;
  return CLT_OK;
}

/* The checks of the public entries, naming fn. */
static int get_args(const char *fn, const clt_dataset *ds, const int64_t *indices, int64_t n) {
  if (!ds) return clt__null_arg(fn, "ds", "dataset");
  if (n < 0) return clt__error(CLT_EINVAL, "%s: n is %lld; give 0 or more samples", fn, (long long)n);
  if (n > 0 && !indices) return clt__null_arg(fn, "indices", NULL);
  return CLT_OK;
}

int clt__dataset_get(const clt_dataset *ds, const int64_t *indices, int64_t n, float *x, void *y) {
  int rc = get_args("clt_dataset_get_batch", ds, indices, n);
  if (rc < 0) return rc;
  const int64_t F = ds->sample_size, K = ds->labels_per_sample;
  const int batched = x && n > 1 && ds->elem && ds->read_fd >= 0 && !ds->token_bytes; /* pread in runs */
  for (int64_t i = 0; i < n; i++) {
    const int64_t k = indices[i];
    if (k < 0 || k >= ds->count)
      return clt__error(CLT_EINVAL, "%s: sample index %lld (position %lld of the batch) is outside [0, %lld)",
                        ds->path, (long long)k, (long long)i, (long long)ds->count);
    if (ds->token_bytes) continue; /* checked all first, then decoded below */
    if (y && ds->targets)
      memcpy((float *)y + i * K, ds->targets + k * K, (size_t)K * sizeof(float));
    else if (y)
      ((int32_t *)y)[i] = ds->y[k];
    if (x && !batched && (rc = decode_sample(ds, k, x + i * F)) < 0) return rc;
  }
  if (ds->token_bytes) clt__tokens_get_batch(ds, indices, n, x, (int32_t *)y);
  if (batched) return read_batch_runs(ds, indices, n, x);
  return CLT_OK;
}

int clt_dataset_get_batch(const clt_dataset *ds, const int64_t *indices, int64_t n, float *x, int32_t *y) {
  int rc = get_args(__func__, ds, indices, n);
  if (rc < 0) return rc;
  if (ds->targets && y)
    return clt__error(CLT_EINVAL, "%s: holds float targets for regression, not class labels: take them with "
                      "clt_dataset_get_batch_targets", ds->path);
  return clt__dataset_get(ds, indices, n, x, y);
}

int clt_dataset_get_batch_targets(const clt_dataset *ds, const int64_t *indices, int64_t n, float *x,
                                  float *targets) {
  int rc = get_args(__func__, ds, indices, n);
  if (rc < 0) return rc;
  if (!ds->targets && targets)
    return clt__error(CLT_EINVAL, "%s: holds class labels, not float targets: take them with "
                      "clt_dataset_get_batch", ds->path);
  return clt__dataset_get(ds, indices, n, x, targets);
}

int64_t clt_dataset_targets_per_sample(const clt_dataset *ds) {
  return ds && ds->targets ? ds->labels_per_sample : 0;
}
