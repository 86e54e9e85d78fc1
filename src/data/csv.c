/*
 * csv.c: CSV files of numbers as a dataset (clt_dataset_open). Fields are
 * separated by commas, tabs or, when a line has neither, spaces; the first
 * line is a header when one of its fields is no number (quotes around a
 * name are dropped); blank lines and lines starting with '#' are skipped.
 * Every row has as many fields as the first. The target column(s) (by
 * header name or 0-based number; default the last) become the labels or
 * targets, the other columns (or those of `features`) the samples.
 *
 * Numbers: see fast_number and fast_float below. A line is read in one
 * pass (fields parsed where they lie, no copy, no allocation); a line
 * that pass does not take whole goes field by field through parse_number,
 * which also names the faulty field.
 */
#include "data/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Numbers are read as strtod reads them, then rounded to float32 (as
 * NumPy's loadtxt does for float32 tables), by a decimal parser of our own
 * for the forms spreadsheets and savetxt write (digits, a point, an
 * exponent) with strtod behind it for everything else. Hand-written because
 * strtod is a few hundred MB/s and no maintained C library of our fixed
 * stack (glibc, zlib, jansson, OpenBLAS) parses decimals faster; the fast
 * path is exact, not close: Clinger's (1990) — a significand m <= 2^53 and
 * a power 10^k with |k| <= 22 are both exact doubles, so m * 10^k and
 * m / 10^k are each one correctly rounded IEEE operation, the very double
 * strtod returns. Anything else (more significant digits, larger powers,
 * nan, inf, hex, a field with other characters) goes to strtod, so every
 * field reads bit for bit as (float)strtod(field) (tests/data/test_csv_parse.c). */
static const double pow10_table[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The number in the common form at [p, e): the end of it and *v, or NULL
 * when it is not in that form or not exact by Clinger's rule (strtod's
 * turn then). Stops at the first character that cannot continue a number. */
static inline const char *fast_number(const char *p, const char *e, double *v) {
  const char *s = p;
  int neg = 0;
  if (s < e && (*s == '-' || *s == '+')) neg = *s++ == '-';
  uint64_t m = 0;
  int digits = 0, sig = 0, frac = 0;
  for (; s < e && (unsigned)(*s - '0') < 10; s++) {
    m = m * 10 + (uint64_t)(*s - '0');
    sig += m != 0; /* digits from the first that is not 0: m overflows past 19 */
    digits++;
  }
  if (s < e && *s == '.')
    for (s++; s < e && (unsigned)(*s - '0') < 10; s++) {
      m = m * 10 + (uint64_t)(*s - '0');
      sig += m != 0;
      digits++, frac++;
    }
  if (digits == 0) return NULL;
  int ex = 0;
  if (s < e && (*s == 'e' || *s == 'E')) {
    int eneg = 0, ed = 0;
    s++;
    if (s < e && (*s == '-' || *s == '+')) eneg = *s++ == '-';
    for (; s < e && (unsigned)(*s - '0') < 10; s++, ed++)
      if (ex < 100000) ex = ex * 10 + (*s - '0');
    if (!ed) return NULL; /* "1e": strtod reads "1" and stops */
    if (eneg) ex = -ex;
  }
  if (sig > 19 || m > (UINT64_C(1) << 53)) return NULL;
  ex -= frac;
  double d = (double)m;
  if (m == 0) /* 0 at any power is 0 */
    d = 0.0;
  else if (ex < -22 || ex > 22)
    return NULL;
  else
    d = ex < 0 ? d / pow10_table[-ex] : d * pow10_table[ex];
  *v = neg ? -d : d;
  return s;
}

/* A number in [p, end): 1 and *v when the whole field is one. */
static int parse_number(const char *p, const char *end, double *v) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '"')) p++;
  while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '"')) end--;
  if (p == end) return 0;
  if (fast_number(p, end, v) == end) return 1;
  char buf[512];
  size_t n = (size_t)(end - p);
  if (n >= sizeof buf) return 0;
  memcpy(buf, p, n);
  buf[n] = '\0';
  char *stop;
  *v = strtod(buf, &stop);
  return stop != buf && *stop == '\0';
}

typedef struct csv_shape {
  char sep;           /* ',', '\t' or ' ' (runs of spaces) */
  int64_t cols;
  char **names;       /* the header's, or NULL */
  const char *body;   /* the first data line */
  int64_t first_line; /* its number, 1-based */
} csv_shape;

static const char *line_end(const char *p, const char *end) {
  const char *nl = memchr(p, '\n', (size_t)(end - p));
  return nl ? nl : end;
}

static int skip_line(const char *p, const char *e) {
  while (p < e && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
  return p == e || *p == '#';
}

/* The next field of a line: [*p, field end); *p moves past its separator. */
static const char *next_field(const char **p, const char *e, char sep) {
  const char *s = *p;
  if (sep == ' ') {
    while (s < e && (*s == ' ' || *s == '\r')) s++;
    const char *f = s;
    while (f < e && *f != ' ' && *f != '\r') f++;
    *p = f;
    while (*p < e && (**p == ' ' || **p == '\r')) (*p)++;
    return f;
  }
  const char *f = memchr(s, sep, (size_t)(e - s));
  if (!f) f = e;
  *p = f < e ? f + 1 : e + 1; /* e + 1: past the last field */
  return f;
}

/* 10^k, k < 64, each the double nearest (exact up to 10^22). */
static const double pow10_wide[64] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31, 1e32, 1e33, 1e34, 1e35, 1e36, 1e37, 1e38, 1e39, 1e40, 1e41, 1e42, 1e43, 1e44, 1e45, 1e46, 1e47, 1e48, 1e49, 1e50, 1e51, 1e52, 1e53, 1e54, 1e55, 1e56, 1e57, 1e58, 1e59, 1e60, 1e61, 1e62, 1e63};

/* The float32 nearest strtod's double of the number at s, in the common
 * form, without strtod: the end of it and *out, or NULL (strtod's turn).
 * Two ways. Clinger's, exact: m <= 2^53 and |k| <= 22. And for longer
 * significands (NumPy's savetxt writes 19 digits, "%.18e") or other powers:
 * a = m * 10^k in doubles is within 3 roundings (3 * 2^-53 relative, under
 * 7 units of a's last place) of the value x, and strtod's double within
 * half a unit; rounding to float32 changes only at the midpoints between
 * two floats, so when a lies more than 64 units from every midpoint (and
 * in the range of normal floats) a, strtod's double and x all round to the
 * same float32. The midpoints are the doubles whose low 29 mantissa bits
 * are 1 followed by 28 zeros; about one field in 2^22 is that close and
 * goes to strtod. No bound checks: the caller ends the text with a '\n',
 * which stops every scan here. */
static inline const char *fast_float(const char *s, float *out) {
  int neg = 0;
  if (*s == '-' || *s == '+') neg = *s++ == '-';
  const char *d0 = s;
  uint64_t m = 0;
  while ((unsigned)(*s - '0') < 10) m = m * 10 + (uint64_t)(*s++ - '0');
  int n = (int)(s - d0), frac = 0;
  if (*s == '.') {
    const char *f0 = ++s;
    while ((unsigned)(*s - '0') < 10) m = m * 10 + (uint64_t)(*s++ - '0');
    frac = (int)(s - f0);
    n += frac;
  }
  if (n == 0 || n > 19) return NULL; /* 19 digits: m < 10^19 < 2^64 */
  int ex = 0;
  if ((*s | 0x20) == 'e') {
    int eneg = 0;
    s++;
    if (*s == '-' || *s == '+') eneg = *s++ == '-';
    const char *e0 = s;
    for (; (unsigned)(*s - '0') < 10; s++)
      if (ex < 100000) ex = ex * 10 + (*s - '0');
    if (s == e0) return NULL;
    if (eneg) ex = -ex;
  }
  ex -= frac;
  float f;
  if (m == 0) {
    f = 0.0f;
  } else if (m <= (UINT64_C(1) << 53) && ex >= -22 && ex <= 22) {
    f = (float)(ex < 0 ? (double)m / pow10_table[-ex] : (double)m * pow10_table[ex]);
  } else if (ex > -64 && ex < 64) {
    const double a = ex < 0 ? (double)m / pow10_wide[-ex] : (double)m * pow10_wide[ex];
    uint64_t bits;
    memcpy(&bits, &a, sizeof bits);
    const int biased = (int)(bits >> 52); /* a > 0 */
    const int64_t from_mid = (int64_t)(bits & ((UINT64_C(1) << 29) - 1)) - (INT64_C(1) << 28);
    if (biased < 1023 - 126 || biased > 1023 + 126 || (from_mid > -64 && from_mid < 64)) return NULL;
    f = (float)a;
  } else {
    return NULL;
  }
  *out = neg ? -f : f;
  return s;
}

/* Line [p, e) into row in one pass: 1 when it is C fields, each a number
 * in fast_float's form; 0 otherwise (the line then goes field by field
 * through parse_number, which reads the other forms and names a fault).
 * *e must be the line's '\n'. */
static int fast_row(const char *p, const char *e, char sep, int64_t C, float *row) {
  for (int64_t j = 0;; j++) {
    while (*p == ' ') p++;
    const char *s = fast_float(p, &row[j]);
    if (!s) return 0;
    if (j + 1 == C) {
      while (*s == ' ') s++;
      if (*s == '\r') s++;
      return s == e;
    }
    if (*s != sep) return 0;
    p = s + 1;
  }
}

/* A buffer the parse fills whole, its pages made at once: first touches
 * of fresh memory, a page fault each 4 KiB, cost a third of the parse
 * (huge pages where the system grants them on request, and one populating
 * call; both are advice, ignored where the kernel lacks them). The same
 * for the file's mapping, read through once. */
static void populate(void *p, size_t n, int write) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + n) & ~(page - 1);
  if (b <= a) return;
#ifdef MADV_HUGEPAGE
  if (write) madvise((void *)a, b - a, MADV_HUGEPAGE);
#endif
#if defined(MADV_POPULATE_READ) && defined(MADV_POPULATE_WRITE)
  madvise((void *)a, b - a, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
#endif
}

static void *alloc_filled(size_t n) {
  void *p = malloc(n);
  if (p) populate(p, n, 1);
  return p;
}

static void free_names(char **names, int64_t n) {
  for (int64_t i = 0; names && i < n; i++) free(names[i]);
  free(names);
}

/* The separator, the number of columns and the header of the first line. */
static int csv_head(const char *path, const char *p, const char *end, csv_shape *sh) {
  int64_t line = 1;
  while (p < end && skip_line(p, line_end(p, end))) p = line_end(p, end) + 1, line++;
  if (p >= end) return clt__error(CLT_EFORMAT, "%s: no rows: the file holds no line of numbers", path);
  const char *e = line_end(p, end);
  sh->sep = memchr(p, ',', (size_t)(e - p)) ? ',' : memchr(p, '\t', (size_t)(e - p)) ? '\t' : ' ';
  int64_t n = 0, words = 0;
  for (const char *q = p; q <= e && (sh->sep != ' ' || q < e);) {
    const char *f0 = q, *f1 = next_field(&q, e, sh->sep);
    if (sh->sep == ' ') while (f0 < f1 && *f0 == ' ') f0++;
    double v;
    if (!parse_number(f0, f1, &v)) words++;
    n++;
  }
  sh->cols = n;
  sh->first_line = line;
  sh->body = p;
  if (!words) return CLT_OK;
  sh->names = clt__calloc((size_t)n, sizeof *sh->names);
  if (!sh->names) return CLT_ENOMEM;
  int64_t j = 0;
  for (const char *q = p; q <= e && j < n && (sh->sep != ' ' || q < e); j++) {
    const char *f0 = q, *f1 = next_field(&q, e, sh->sep);
    while (f0 < f1 && (*f0 == ' ' || *f0 == '"')) f0++;
    while (f1 > f0 && (f1[-1] == ' ' || f1[-1] == '"' || f1[-1] == '\r')) f1--;
    if (!(sh->names[j] = clt__calloc((size_t)(f1 - f0) + 1, 1))) return CLT_ENOMEM;
    memcpy(sh->names[j], f0, (size_t)(f1 - f0));
  }
  sh->body = e < end ? e + 1 : end;
  sh->first_line = line + 1;
  return CLT_OK;
}

int clt__csv_open(const char *path, const clt_data_options *o, clt_dataset **out) {
  int rc = CLT_OK;
  void *map = NULL;
  size_t len = 0;
  csv_shape sh;
  float *row = NULL, *x = NULL, *t = NULL;
  int64_t *tcols = NULL, nt = 0, *fcols = NULL, nf = 0, rows = 0, cap = 0;
  clt_dataset *ds = NULL;
  memset(&sh, 0, sizeof sh);
  CLT_TRY(clt__map_file(path, &map, &len, NULL));
  populate(map, len, 0);
  const char *end = (const char *)map + len;
  CLT_TRY(csv_head(path, map, end, &sh));
  const int64_t C = sh.cols;
  char last[32];
  snprintf(last, sizeof last, "%lld", (long long)(C - 1));
  if (C < 2 && !o->labels) {
    rc = clt__error(CLT_EFORMAT, "%s: one column: there is no room for both features and a target", path);
    goto fail;
  }
  if (o->labels) {
    rc = clt__error(CLT_EINVAL, "%s: a CSV file holds its targets in a column (--target COL); --labels is for NumPy "
                    "and HDF5 data", path);
    goto fail;
  }
  CLT_TRY(clt__parse_columns(path, "--target", o->target ? o->target : last, sh.names, C, &tcols, &nt));
  CLT_TRY(clt__feature_columns(path, o->features, sh.names, C, tcols, nt, &fcols, &nf));
  /* The features, C order, and the targets, straight from each line,
   * in buffers sized by the first line's length (doubled when short). */
  const int64_t first_len = line_end(sh.body, end) - sh.body + 1;
  cap = (int64_t)(end - sh.body) / (first_len > 0 ? first_len : 1) + 1024;
  if (!(row = malloc((size_t)C * sizeof *row)) || !(x = alloc_filled((size_t)(cap * nf) * sizeof *x)) ||
      !(t = alloc_filled((size_t)(cap * nt) * sizeof *t))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  int64_t line = sh.first_line;
  for (const char *p = sh.body; p < end; line++) {
    const char *e = line_end(p, end);
    if (skip_line(p, e)) {
      p = e + 1;
      continue;
    }
    if (rows == cap) {
      int64_t grow = 2 * cap;
      float *gx = realloc(x, (size_t)(grow * nf) * sizeof *gx);
      if (gx) x = gx;
      float *gt = gx ? realloc(t, (size_t)(grow * nt) * sizeof *gt) : NULL;
      if (gt) t = gt;
      if (!gx || !gt) { rc = CLT_ENOMEM; goto fail; }
      cap = grow;
    }
    if (e == end || !fast_row(p, e, sh.sep, C, row)) { /* e == end: no '\n' ends the last line */
      int64_t j = 0;
      const char *q = p;
      while (q <= e && (sh.sep != ' ' || q < e)) {
        const char *f0 = q, *f1 = next_field(&q, e, sh.sep);
        if (sh.sep == ' ') while (f0 < f1 && *f0 == ' ') f0++;
        double v;
        if (j >= C) {
          rc = clt__error(CLT_EFORMAT, "%s: line %lld has more than the %lld fields of the first row", path,
                          (long long)line, (long long)C);
          goto fail;
        }
        if (!parse_number(f0, f1, &v) || !isfinite((float)v)) {
          int n = (int)(f1 - f0 > 40 ? 40 : f1 - f0);
          if (n > 0 && f0[n - 1] == '\r') n--;
          rc = clt__error(CLT_EFORMAT, "%s: line %lld, column %lld%s%s%s: '%.*s' is %s", path, (long long)line,
                          (long long)j + 1, sh.names ? " (" : "", sh.names ? sh.names[j] : "", sh.names ? ")" : "", n,
                          f0, f0 == f1 ? "empty, not a number" : parse_number(f0, f1, &v) ? "not finite as a float32"
                                                                            : "not a number");
          goto fail;
        }
        row[j++] = (float)v;
      }
      if (j != C) {
        rc = clt__error(CLT_EFORMAT, "%s: line %lld has %lld fields; the first row has %lld", path, (long long)line,
                        (long long)j, (long long)C);
        goto fail;
      }
    }
    for (int64_t j = 0; j < nf; j++) x[rows * nf + j] = row[fcols[j]];
    for (int64_t j = 0; j < nt; j++) t[rows * nt + j] = row[tcols[j]];
    rows++;
    p = e + 1;
  }
  if (rows == 0) {
    rc = clt__error(CLT_EFORMAT, "%s: a header and no rows of numbers", path);
    goto fail;
  }
  if (rows < cap) { /* give back what the estimate over-reserved */
    float *gx = realloc(x, (size_t)(rows * nf) * sizeof *gx);
    if (gx) x = gx;
  }
  if (!(ds = clt__dataset_alloc(path))) { rc = CLT_ENOMEM; goto fail; }
  ds->count = rows;
  ds->ndims = 1;
  ds->dims[0] = ds->sample_size = nf;
  ds->dtype = CLT_F32;
  ds->elem = clt__elem_find('f', 4);
  ds->x = x, x = NULL;
  ds->header_hash = clt__hash(CLT__HASH_START, map, (size_t)(sh.body - (const char *)map));
  char what[4200];
  snprintf(what, sizeof what, "%s (target column%s %s)", path, nt > 1 ? "s" : "", o->target ? o->target : last);
  CLT_TRY(clt__dataset_set_targets(ds, clt__elem_find('f', 4), t, nt, 0, o->regression, o->num_classes, what));
  *out = ds;
  ds = NULL;
fail:
  if (map) munmap(map, len);
  free_names(sh.names, sh.cols);
  free(row), free(x), free(t), free(tcols), free(fcols);
  clt_dataset_destroy(ds);
  return rc;
}
