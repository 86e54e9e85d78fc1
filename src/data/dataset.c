/*
 * dataset.c: the dataset object every reader fills: accessors, label checks,
 * normalisation and its statistics, and clt_dataset_get_batch, the one
 * decoder of samples to normalised float32 (the prefetch thread runs it too,
 * so prefetched batches are bitwise the direct ones); token windows are
 * decoded by tokens.c.
 */
#include "data/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  return ds;
}

void clt_dataset_destroy(clt_dataset *ds) {
  if (!ds) return;
  free(ds->x);
  free(ds->y);
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

int clt_dataset_get_batch(const clt_dataset *ds, const int64_t *indices, int64_t n, float *x, int32_t *y) {
  CLT_HANDLE(ds, "dataset");
  if (n < 0) return clt__error(CLT_EINVAL, "clt_dataset_get_batch: n is %lld; give 0 or more samples", (long long)n);
  if (n > 0 && !indices) return clt__null_arg(__func__, "indices", NULL);
  const int64_t F = ds->sample_size;
  for (int64_t i = 0; i < n; i++) {
    const int64_t k = indices[i];
    if (k < 0 || k >= ds->count)
      return clt__error(CLT_EINVAL, "%s: sample index %lld (position %lld of the batch) is outside [0, %lld)",
                        ds->path, (long long)k, (long long)i, (long long)ds->count);
    if (ds->token_bytes) continue; /* checked all first, then decoded below */
    if (y) y[i] = ds->y[k];
    if (!x) continue;
    float *out = x + i * F; /* (F) */
    if (ds->dtype == CLT_U8) {
      const unsigned char *row = (const unsigned char *)ds->x + k * F;
      for (int64_t j = 0; j < F; j++) out[j] = ds->lut[row[j]];
    } else {
      const float *row = (const float *)ds->x + k * F;
      int finite = 1;
      for (int64_t j = 0; j < F; j++) {
        out[j] = (row[j] / ds->range - ds->mean) / ds->std;
        finite &= isfinite(out[j]) != 0;
      }
      if (!finite) {
        int64_t j = 0;
        while (isfinite(out[j])) j++;
        return clt__error(CLT_ENONFINITE, "%s: sample %lld value %lld (%g) becomes %g when normalised with mean "
                          "%g std %g", ds->path, (long long)k, (long long)j, (double)row[j], (double)out[j],
                          (double)ds->mean, (double)ds->std);
      }
    }
  }
  if (ds->token_bytes) clt__tokens_get_batch(ds, indices, n, x, y);
  return CLT_OK;
}
