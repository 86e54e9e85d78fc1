/*
 * source.c: users' own data through one entry, clt_dataset_open: the
 * sources (CSV, NumPy .npy and .npz, HDF5, cltrain raw) each one row of a
 * table that says how to recognise a file and how to open it; the arrays
 * they give become a dataset here (samples, and class labels or float
 * targets from a column or a separate file). Also the validation split and
 * the per-feature normalisation (statistics of a part, for ranks to
 * combine; applied as a batch is taken, dataset.c).
 */
#include "data/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *const norm_names[] = {"none", "standard", "minmax"};

const char *clt_normalize_name(clt_normalize_kind kind) {
  return (unsigned)kind < sizeof norm_names / sizeof norm_names[0] ? norm_names[kind] : NULL;
}

int clt_normalize_parse(const char *name, clt_normalize_kind *kind) {
  CLT_ARG(name);
  CLT_ARG(kind);
  for (unsigned i = 0; i < sizeof norm_names / sizeof norm_names[0]; i++)
    if (strcmp(name, norm_names[i]) == 0) return *kind = (clt_normalize_kind)i, CLT_OK;
  return clt__error(CLT_EINVAL, "unknown normalisation '%s' (known: none, standard, minmax)", name);
}

/* ---- labels and targets ---------------------------------------------------- */

int clt__dataset_set_targets(clt_dataset *ds, const clt__elem *e, const void *src, int64_t k, int big,
                             int regression, int num_classes, const char *what) {
  const int64_t n = ds->count;
  float *v = clt__calloc((size_t)(n * k), sizeof *v);
  if (!v) return CLT_ENOMEM;
  clt__elem_convert(e, src, n * k, big, v);
  for (int64_t i = 0; i < n * k; i++)
    if (!isfinite(v[i])) {
      int rc = clt__error(CLT_EFORMAT, "%s: the target of row %lld (value %lld) is %g; targets must be finite", what,
                          (long long)(i / k), (long long)(i % k), (double)v[i]);
      free(v);
      return rc;
    }
  if (regression) {
    ds->targets = v;
    ds->labels_per_sample = k;
    ds->num_classes = 0;
    return CLT_OK;
  }
  int rc = CLT_OK;
  if (k != 1)
    rc = clt__error(CLT_EFORMAT, "%s: %lld label columns per row; a classifier takes one class label a sample (for "
                    "several targets the spec needs 'loss mse')", what, (long long)k);
  if (rc == CLT_OK && !(ds->y = clt__calloc((size_t)n, sizeof *ds->y))) rc = CLT_ENOMEM;
  for (int64_t i = 0; rc == CLT_OK && i < n; i++) {
    if (v[i] != floorf(v[i]) || v[i] < 0 || v[i] >= 2147483648.0f)
      rc = clt__error(CLT_EFORMAT, "%s: the label of row %lld is %g, not a class (a whole number from 0); for "
                      "real-valued targets the spec needs 'loss mse'", what, (long long)i, (double)v[i]);
    else
      ds->y[i] = (int32_t)v[i];
  }
  free(v);
  ds->labels_per_sample = 1;
  ds->num_classes = num_classes;
  return rc < 0 ? rc : clt__dataset_check_labels(ds, what);
}

/* ---- columns ----------------------------------------------------------------- */

/* Column indices from a list "a,3,b" of names (looked up in names, may be
 * NULL) or 0-based numbers, below ncols; *out malloc'd. */
int clt__parse_columns(const char *path, const char *opt, const char *list, char *const *names, int64_t ncols,
                       int64_t **out, int64_t *n) {
  int64_t cap = 1;
  for (const char *p = list; *p; p++) cap += *p == ',';
  int64_t *c = clt__calloc((size_t)cap, sizeof *c);
  if (!c) return CLT_ENOMEM;
  *n = 0;
  const char *p = list;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    int64_t at = -1;
    for (int64_t j = 0; names && j < ncols; j++)
      if (strlen(names[j]) == len && strncmp(names[j], p, len) == 0) at = j;
    if (at < 0 && len > 0 && strspn(p, "0123456789") == len) at = strtoll(p, NULL, 10);
    if (at < 0 || at >= ncols) {
      int rc = clt__error(CLT_EINVAL, "%s: %s '%.*s' is no column of its %lld (%s)", path, opt, (int)len, p,
                          (long long)ncols, names ? "a header name, or a 0-based number" : "0-based numbers");
      free(c);
      return rc;
    }
    c[(*n)++] = at;
    if (!end) break;
    p = end + 1;
  }
  *out = c;
  return CLT_OK;
}

/* The feature columns: those of features, or every column not a target. */
int clt__feature_columns(const char *path, const char *features, char *const *names, int64_t ncols,
                         const int64_t *tcols, int64_t nt, int64_t **out, int64_t *n) {
  if (features) return clt__parse_columns(path, "--features", features, names, ncols, out, n);
  int64_t *c = clt__calloc((size_t)ncols, sizeof *c);
  if (!c) return CLT_ENOMEM;
  *n = 0;
  for (int64_t j = 0; j < ncols; j++) {
    int is_target = 0;
    for (int64_t t = 0; t < nt; t++) is_target |= tcols[t] == j;
    if (!is_target) c[(*n)++] = j;
  }
  if (*n == 0) {
    free(c);
    return clt__error(CLT_EFORMAT, "%s: every one of its %lld columns is a target; no column is left for the features",
                      path, (long long)ncols);
  }
  *out = c;
  return CLT_OK;
}

/* ---- arrays into a dataset ---------------------------------------------------- */

/* A dataset over array x (taken: its mapping or buffer becomes the
 * dataset's), with labels from array lab (may be NULL: then x is a 2-D
 * table whose target columns are o->target, by default the last). */
static int from_arrays(const char *path, clt__array *x, clt__array *lab, const char *lab_path,
                       const clt_data_options *o, clt_dataset **out) {
  int rc = CLT_OK;
  int64_t *tcols = NULL, nt = 0, *fcols = NULL, nf = 0;
  float *tv = NULL;
  clt_dataset *ds = clt__dataset_alloc(path);
  if (!ds) return CLT_ENOMEM;
  const int64_t N = x->shape[0];
  ds->count = N;
  ds->header_hash = clt__hash(x->header, lab ? &lab->header : NULL, lab ? sizeof lab->header : 0);
  ds->elem = x->elem, ds->elem_big = x->big, ds->x = x->data;
  ds->range = 1.0f;
  ds->dtype = CLT_F32;
  if (lab) {
    if (x->ndims < 2) { /* one value a sample */
      x->shape[1] = 1;
      x->ndims = 2;
    }
    if (lab->shape[0] != N) {
      rc = clt__error(CLT_EFORMAT, "%s: %lld rows of labels, but %s has %lld samples", lab_path,
                      (long long)lab->shape[0], path, (long long)N);
      goto fail;
    }
    ds->ndims = x->ndims - 1;
    ds->sample_size = 1;
    for (int i = 1; i < x->ndims; i++) ds->dims[i - 1] = x->shape[i], ds->sample_size *= x->shape[i];
    int64_t k = 1;
    for (int i = 1; i < lab->ndims; i++) k *= lab->shape[i];
    CLT_TRY(clt__dataset_set_targets(ds, lab->elem, lab->data, k, lab->big, o->regression, o->num_classes, lab_path));
  } else {
    if (x->ndims != 2) {
      rc = clt__error(CLT_EINVAL, "%s: an array of %d dimensions holds no target column; give the labels or targets "
                      "in a file of their own (--labels FILE), or a 2-D table whose last column is the target",
                      path, x->ndims);
      goto fail;
    }
    const int64_t C = x->shape[1];
    if (C < 2) {
      rc = clt__error(CLT_EFORMAT, "%s: one column: there is no room for both features and a target (give --labels)",
                      path);
      goto fail;
    }
    char last[32];
    snprintf(last, sizeof last, "%lld", (long long)(C - 1));
    CLT_TRY(clt__parse_columns(path, "--target", o->target ? o->target : last, NULL, C, &tcols, &nt));
    CLT_TRY(clt__feature_columns(path, o->features, NULL, C, tcols, nt, &fcols, &nf));
    tv = clt__calloc((size_t)(N * nt), sizeof *tv);
    if (!tv) { rc = CLT_ENOMEM; goto fail; }
    const size_t sz = (size_t)x->elem->size;
    for (int64_t i = 0; i < N; i++)
      for (int64_t t = 0; t < nt; t++)
        clt__elem_convert(x->elem, (const unsigned char *)x->data + ((size_t)i * (size_t)C + (size_t)tcols[t]) * sz, 1,
                          x->big, tv + i * nt + t);
    CLT_TRY(clt__dataset_set_targets(ds, clt__elem_find('f', 4), tv, nt, 0, o->regression, o->num_classes, path));
    /* that pass touched every page of the mapping: let them go back to the page cache */
    if (x->map) madvise(x->map, x->map_len, MADV_DONTNEED);
    ds->ndims = 1;
    ds->dims[0] = ds->sample_size = nf;
    ds->row_len = C;
    int contiguous = 1;
    for (int64_t j = 0; j < nf; j++) contiguous &= fcols[j] == j;
    if (!contiguous) ds->cols = fcols, fcols = NULL;
  }
  /* The dataset owns the values now: the mapping, or the buffer with the
   * values moved to its start (an inflated .npz member follows its header). */
  if (x->map) {
    ds->map = x->map, ds->map_len = x->map_len;
    if (x->fd1 && x->map_len > clt__map_resident_max()) ds->read_fd = x->fd1 - 1, x->fd1 = 0;
  } else {
    size_t bytes = (size_t)x->elem->size;
    for (int i = 0; i < x->ndims; i++) bytes *= (size_t)x->shape[i];
    memmove(x->owned, x->data, bytes);
    ds->x = x->owned;
  }
  if (x->fd1) close(x->fd1 - 1);
  memset(x, 0, sizeof *x);
  *out = ds;
  free(tcols), free(fcols), free(tv);
  return CLT_OK;
fail:
  ds->x = NULL; /* still the array's */
  clt_dataset_destroy(ds);
  free(tcols), free(fcols), free(tv);
  return rc;
}

/* "file.npz:member" and "file.h5:/dataset": the file and what follows the
 * last ':' when the whole is no file itself. */
static void split_member(const char *path, char *file, size_t len, const char **member) {
  const char *colon = strrchr(path, ':');
  *member = NULL;
  snprintf(file, len, "%s", path);
  if (!colon || access(path, F_OK) == 0) return;
  snprintf(file, len, "%.*s", (int)(colon - path), path);
  *member = colon + 1;
}

/* An array from path by its kind: .npy, .npz[:member], .h5[:/dataset]. */
static int open_array(const char *path, const char *dflt_member, clt__array *a) {
  char file[4096];
  const char *member;
  unsigned char head[8] = {0};
  split_member(path, file, sizeof file, &member);
  FILE *f = fopen(file, "rb");
  if (!f) return clt__error(CLT_ENOTFOUND, "%s: cannot open: %s", file, strerror(errno));
  size_t got = fread(head, 1, sizeof head, f);
  fclose(f);
  if (got >= 6 && memcmp(head, "\x93NUMPY", 6) == 0) return clt__npy_open(file, a);
  if (got >= 4 && memcmp(head, "PK\x03\x04", 4) == 0) return clt__npz_open(file, member ? member : dflt_member, a);
  if (got >= 8 && memcmp(head, "\x89HDF\r\n\x1a\n", 8) == 0) {
    if (!member)
      return clt__error(CLT_EINVAL, "%s: an HDF5 file holds many datasets; name one: %s:/group/dataset", file, file);
    return clt__h5_open(file, member, a);
  }
  return clt__error(CLT_EFORMAT, "%s: neither a NumPy .npy or .npz nor an HDF5 file (it starts with %02x %02x %02x %02x)",
                    file, head[0], head[1], head[2], head[3]);
}

static int open_arrays(const char *path, const clt_data_options *o, clt_dataset **out) {
  clt__array x, lab;
  memset(&x, 0, sizeof x), memset(&lab, 0, sizeof lab);
  int rc = open_array(path, o->features ? o->features : "x", &x);
  if (rc < 0) return rc;
  /* an .npz holds its labels as member "y" (or --target's) unless --labels says otherwise */
  char file[4096];
  const char *member;
  unsigned char head[4] = {0};
  split_member(path, file, sizeof file, &member);
  FILE *f = fopen(file, "rb");
  if (f) {
    if (fread(head, 1, 4, f) != 4) head[0] = 0;
    fclose(f);
  }
  int npz = memcmp(head, "PK\x03\x04", 4) == 0;
  if (o->labels) {
    rc = open_array(o->labels, o->target ? o->target : "y", &lab);
  } else if (npz) {
    rc = clt__npz_open(file, o->target ? o->target : "y", &lab);
  }
  if (rc == CLT_OK) rc = from_arrays(path, &x, o->labels || npz ? &lab : NULL, o->labels ? o->labels : path, o, out);
  clt__array_release(&x);
  clt__array_release(&lab);
  return rc;
}

static int open_raw(const char *path, const clt_data_options *o, clt_dataset **out) {
  if (o->regression)
    return clt__error(CLT_EINVAL, "%s: a raw file holds class labels, and the model is a regression model: give "
                      "the data as CSV, .npy or HDF5", path);
  return clt_dataset_open_raw(path, out);
}

static int has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

/* The sources, in the order they are tried: by the first bytes, then by
 * the name. */
typedef struct source {
  const char *name;
  int (*is)(const char *path, const unsigned char *head, size_t n);
  int (*open)(const char *path, const clt_data_options *o, clt_dataset **out);
} source;

static int is_raw(const char *path, const unsigned char *h, size_t n) {
  return (n >= 7 && memcmp(h, "CLTRAW1", 7) == 0) || (n >= 2 && h[0] == 0x1f && h[1] == 0x8b && has_suffix(path, ".gz"));
}
static int is_array(const char *path, const unsigned char *h, size_t n) {
  (void)path;
  return (n >= 6 && memcmp(h, "\x93NUMPY", 6) == 0) || (n >= 4 && memcmp(h, "PK\x03\x04", 4) == 0) ||
         (n >= 8 && memcmp(h, "\x89HDF\r\n\x1a\n", 8) == 0);
}
static int is_csv(const char *path, const unsigned char *h, size_t n) {
  (void)h, (void)n;
  return has_suffix(path, ".csv") || has_suffix(path, ".tsv") || has_suffix(path, ".txt");
}

static const source sources[] = {
    {"cltrain raw", is_raw, open_raw},
    {"NumPy or HDF5", is_array, open_arrays},
    {"CSV", is_csv, clt__csv_open},
};

int clt_dataset_open(const char *path, const clt_data_options *o, clt_dataset **out) {
  clt_data_options none;
  CLT_ARG(out);
  *out = NULL;
  CLT_PATH_ARG(path);
  if (!o) {
    memset(&none, 0, sizeof none);
    o = &none;
  }
  char file[4096];
  const char *member;
  unsigned char head[8] = {0};
  split_member(path, file, sizeof file, &member);
  FILE *f = fopen(file, "rb");
  if (!f)
    return clt__error(errno == ENOENT ? CLT_ENOTFOUND : CLT_EIO, "%s: cannot open: %s", file, strerror(errno));
  size_t got = fread(head, 1, sizeof head, f);
  fclose(f);
  for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++)
    if (sources[i].is(file, head, got)) {
      int rc = sources[i].open(path, o, out);
      if (rc == CLT_OK && o->regression && !(*out)->targets) { /* raw */
        clt_dataset_destroy(*out);
        *out = NULL;
        return clt__error(CLT_EINVAL, "%s: class labels, but the model is a regression model", path);
      }
      return rc;
    }
  return clt__error(CLT_EFORMAT, "%s: not a file cltrain reads: not a NumPy .npy or .npz, an HDF5 or a cltrain raw "
                    "file by its first bytes, nor named .csv, .tsv or .txt (CSV); an IDX directory goes to --data as a "
                    "directory", path);
}

/* ---- validation split ------------------------------------------------------- */

int clt_dataset_split(clt_dataset *ds, double fraction, clt_dataset **val) {
  CLT_ARG(val);
  *val = NULL;
  CLT_HANDLE(ds, "dataset");
  if (!(fraction > 0 && fraction < 1))
    return clt__error(CLT_EINVAL, "%s: a validation fraction of %g; give a number between 0 and 1", ds->path, fraction);
  if (!ds->elem && ds->dtype != CLT_F32)
    return clt__error(CLT_EINVAL, "%s: only a dataset of clt_dataset_open is split", ds->path);
  if (ds->token_bytes) return clt__error(CLT_EINVAL, "%s: a token dataset is not split", ds->path);
  int64_t nv = (int64_t)llround(fraction * (double)ds->count);
  if (nv < 1 || nv >= ds->count)
    return clt__error(CLT_EINVAL, "%s: a validation fraction of %g of %lld samples leaves %s empty", ds->path,
                      fraction, (long long)ds->count, nv < 1 ? "the validation split" : "the training split");
  const int64_t nt = ds->count - nv, K = ds->labels_per_sample;
  const size_t row = (size_t)(ds->elem ? (ds->row_len ? ds->row_len : ds->sample_size) * ds->elem->size
                                       : ds->sample_size * 4);
  clt_dataset *v = clt__dataset_alloc(ds->path);
  if (!v) return CLT_ENOMEM;
  int rc = CLT_OK;
  memcpy(v->dims, ds->dims, sizeof v->dims);
  v->ndims = ds->ndims, v->sample_size = ds->sample_size, v->num_classes = ds->num_classes;
  v->labels_per_sample = K, v->dtype = ds->dtype, v->range = ds->range, v->mean = ds->mean, v->std = ds->std;
  v->elem = ds->elem, v->elem_big = ds->elem_big, v->row_len = ds->row_len;
  v->header_hash = clt__hash(ds->header_hash, "val", 3);
  v->count = nv;
  if (!(v->x = malloc((size_t)nv * row))) { rc = CLT_ENOMEM; goto fail; }
  memcpy(v->x, (const unsigned char *)ds->x + (size_t)nt * row, (size_t)nv * row);
  clt__dataset_scan_release(ds, nt, ds->count);
  if (ds->cols) {
    if (!(v->cols = clt__calloc((size_t)ds->sample_size, sizeof *v->cols))) { rc = CLT_ENOMEM; goto fail; }
    memcpy(v->cols, ds->cols, (size_t)ds->sample_size * sizeof *v->cols);
  }
  if (ds->targets) {
    if (!(v->targets = clt__calloc((size_t)(nv * K), sizeof *v->targets))) { rc = CLT_ENOMEM; goto fail; }
    memcpy(v->targets, ds->targets + nt * K, (size_t)(nv * K) * sizeof *v->targets);
  } else {
    if (!(v->y = clt__calloc((size_t)nv, sizeof *v->y))) { rc = CLT_ENOMEM; goto fail; }
    memcpy(v->y, ds->y + nt, (size_t)nv * sizeof *v->y);
  }
  ds->count = nt;
  ds->header_hash = clt__hash(ds->header_hash, "train", 5);
  *val = v;
  return CLT_OK;
fail:
  clt_dataset_destroy(v);
  return rc;
}

/* ---- per-feature normalisation --------------------------------------------------- */

int clt_dataset_feature_stats(const clt_dataset *ds, int64_t lo, int64_t hi, double *out) {
  CLT_HANDLE(ds, "dataset");
  CLT_ARG(out);
  if (lo < 0 || hi < lo || hi > ds->count)
    return clt__error(CLT_EINVAL, "%s: samples [%lld, %lld) are not within its %lld", ds->path, (long long)lo,
                      (long long)hi, (long long)ds->count);
  if (ds->token_bytes) return clt__error(CLT_EINVAL, "%s: token ids are not normalised", ds->path);
  const int64_t F = ds->sample_size;
  double *mean = out, *m2 = out + F, *mn = out + 2 * F, *mx = out + 3 * F;
  float *row = clt__calloc((size_t)F, sizeof *row);
  if (!row) return CLT_ENOMEM;
  for (int64_t j = 0; j < F; j++) mean[j] = m2[j] = 0, mn[j] = INFINITY, mx[j] = -INFINITY;
  /* Welford's update, one sample at a time: no cancellation, one pass. */
  const int64_t chunk = clt__dataset_scan_chunk(ds);
  int64_t behind = lo; /* rows before this are released */
  for (int64_t k = lo; k < hi; k++) {
    if (k - behind >= chunk) clt__dataset_scan_release(ds, behind, k), behind = k;
    if (ds->elem)
      clt__dataset_scan_row(ds, k, row);
    else if (ds->dtype == CLT_U8)
      for (int64_t j = 0; j < F; j++) row[j] = ((const unsigned char *)ds->x)[k * F + j] / ds->range;
    else
      for (int64_t j = 0; j < F; j++) row[j] = ((const float *)ds->x)[k * F + j] / ds->range;
    const double n = (double)(k - lo + 1);
    for (int64_t j = 0; j < F; j++) {
      double v = row[j], d = v - mean[j];
      mean[j] += d / n;
      m2[j] += d * (v - mean[j]);
      if (v < mn[j]) mn[j] = v;
      if (v > mx[j]) mx[j] = v;
    }
  }
  clt__dataset_scan_release(ds, behind, hi);
  free(row);
  return CLT_OK;
}

int clt_dataset_normalize_features(clt_dataset *ds, clt_normalize_kind kind, const float *shift, const float *scale) {
  CLT_HANDLE(ds, "dataset");
  if (kind == CLT_NORMALIZE_NONE) {
    free(ds->shift), free(ds->scale);
    ds->shift = ds->scale = NULL;
    ds->norm_kind = 0;
    return CLT_OK;
  }
  if (!clt_normalize_name(kind)) return clt__error(CLT_EINVAL, "normalisation kind %d is unknown", (int)kind);
  CLT_ARG(shift);
  CLT_ARG(scale);
  if (ds->token_bytes) return clt__error(CLT_EINVAL, "%s: token ids are not normalised", ds->path);
  const int64_t F = ds->sample_size;
  for (int64_t j = 0; j < F; j++)
    if (!isfinite(shift[j]) || !isfinite(scale[j]) || !(scale[j] > 0))
      return clt__error(CLT_EINVAL, "%s: feature %lld: shift %g scale %g; the scale must be finite and above 0 (a "
                        "feature that is the same in every sample has std 0: give it scale 1)", ds->path,
                        (long long)j, (double)shift[j], (double)scale[j]);
  float *sh = clt__calloc((size_t)F, sizeof *sh), *sc = clt__calloc((size_t)F, sizeof *sc);
  if (!sh || !sc) {
    free(sh), free(sc);
    return CLT_ENOMEM;
  }
  memcpy(sh, shift, (size_t)F * sizeof *sh);
  memcpy(sc, scale, (size_t)F * sizeof *sc);
  free(ds->shift), free(ds->scale);
  ds->shift = sh, ds->scale = sc, ds->norm_kind = (int)kind;
  return CLT_OK;
}

clt_normalize_kind clt_dataset_feature_normalization(const clt_dataset *ds, float *shift, float *scale) {
  if (!ds || !ds->shift) return CLT_NORMALIZE_NONE;
  if (shift) memcpy(shift, ds->shift, (size_t)ds->sample_size * sizeof *shift);
  if (scale) memcpy(scale, ds->scale, (size_t)ds->sample_size * sizeof *scale);
  return (clt_normalize_kind)ds->norm_kind;
}
