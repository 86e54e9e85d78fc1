/*
 * data.h: what the data layer's sources share: the dataset's layout, the
 * checked reading of plain or gzip files that the IDX, raw and token readers
 * are built on, and the slice decoder the prefetch thread runs.
 */
#ifndef CLT_DATA_H
#define CLT_DATA_H

#include "core/internal.h"

#include <stdint.h>
#include <zlib.h>

struct clt_dataset {
  char *path;         /* the sample file, for messages */
  int64_t count;
  int ndims;
  int64_t dims[CLT_DATASET_MAX_DIMS];
  int64_t sample_size;  /* prod(dims) */
  int num_classes;
  clt_dtype dtype;    /* CLT_U8 (IDX) or CLT_F32 (raw); unused for tokens */
  void *x;            /* (count, sample_size) of dtype; for tokens (ntokens) of token_bytes each */
  int32_t *y;         /* (count); NULL for tokens, whose labels are x shifted by one */
  int64_t labels_per_sample;  /* 1, or T for tokens */
  int token_bytes;    /* 0 for sample datasets; 2 (uint16) or 4 (uint32) for a token stream */
  int64_t ntokens;
  uint8_t *target;    /* tokens with a targets shard (token_targets.c): 1 where the token counts as a target,
                         0 where it is masked; NULL: every token counts */
  int32_t *window_labels; /* with target: the labels that count in each window (count) */
  int64_t labels_counted; /* every window's labels that count */
  float range;        /* values are divided by this first: 255 for CLT_U8, 1 for CLT_F32 */
  float mean, std;
  float lut[256];     /* CLT_U8: the normalised value of every byte */
  uint64_t header_hash; /* of the files' headers as read (clt__hash), for the fingerprint */
  /* The sources of users' own data (source.c: CSV, NumPy, HDF5): */
  const struct clt__elem *elem; /* x's element type as stored (elem.c), converted as a batch is taken;
                                   NULL: dtype above (IDX bytes, raw float32, tokens) */
  int elem_big;       /* elem stored big-endian */
  void *map;          /* the file mapped (x points into it; munmap'd, not freed); NULL: x is malloc'd */
  size_t map_len;
  int read_fd;        /* >= 0: a mapping larger than clt__map_resident_max(): the batches' rows are pread()
                         from this file at offset x - map + row, not touched in the mapping (closed by destroy) */
  int64_t row_len;    /* elem: values per stored row (0: sample_size) */
  int64_t *cols;      /* elem: the stored columns that make a sample (sample_size); NULL: the first ones */
  float *targets;     /* regression: (count, labels_per_sample) float32, y NULL */
  float *shift, *scale; /* per-feature normalisation, (sample_size) each: (x - shift) / scale; NULL: none */
  int norm_kind;      /* clt_normalize_kind of shift/scale */
  int64_t rows_read;  /* read_fd: the rows batches asked for, and the bytes pread() gave (atomic: the */
  int64_t bytes_read; /* prefetch thread and the caller may both read), logged by destroy at info level */
};

/* An empty dataset owning a copy of path (NULL and CLT_ENOMEM on failure). */
clt_dataset *clt__dataset_alloc(const char *path);
/* Check every label against num_classes (0: set it to max + 1); errors name
 * labels_path and the first offending index. */
int clt__dataset_check_labels(clt_dataset *ds, const char *labels_path);

/* ---- element types of users' files (elem.c) ---- */

/* One numeric type as a file stores it (NumPy's kind and size) and how n
 * of them, little-endian, become float32. A table (elem.c), not a switch:
 * NumPy, HDF5 and the labels' checks all look types up in it. */
typedef struct clt__elem {
  char kind;          /* 'f' float, 'i' signed, 'u' unsigned (NumPy's kind) */
  int size;           /* bytes */
  const char *name;   /* "float32", "int64", ... */
  void (*to_f32)(const unsigned char *src, int64_t n, float *dst);
} clt__elem;
/* The element type of kind and size; NULL when cltrain reads no such type. */
const clt__elem *clt__elem_find(char kind, int size);
/* n values at src (little-endian, or big-endian when big) as float32. */
void clt__elem_convert(const clt__elem *e, const void *src, int64_t n, int big, float *dst);
/* "float16, float32, ..., uint64": what cltrain reads, for messages. */
const char *clt__elem_names(void);

/* An n-dimensional array as a file holds it (npy.c, hdf5.c), in C order:
 * mapped from the file when it can be, else read into a buffer. */
typedef struct clt__array {
  const clt__elem *elem;
  int big;             /* stored big-endian */
  int ndims;
  int64_t shape[CLT_DATASET_MAX_DIMS + 1];
  void *data;          /* the first value */
  void *map;           /* data lies in this mapping of map_len bytes (munmap), or */
  size_t map_len;
  void *owned;         /* in this malloc'd buffer */
  int fd1;             /* the mapped file's descriptor + 1, kept open for pread (0: none; closed by release) */
  uint64_t header;     /* a hash of what describes it, for the ranks' fingerprint */
} clt__array;
void clt__array_release(clt__array *a);
/* The whole of a regular file mapped read-only (npy.c); an empty file is
 * CLT_EFORMAT, a missing one CLT_ENOTFOUND. fd1: NULL closes the file,
 * else it receives its descriptor + 1 (for pread). */
int clt__map_file(const char *path, void **map, size_t *len, int *fd1);
/* The largest mapping whose rows the batches read in place (default 256
 * MiB; CLT_DATA_MAP_MAX in MiB): the file pages they touch count in the
 * resident set, so a larger file's rows are pread() instead. */
size_t clt__map_resident_max(void);
/* A NumPy .npy file, mapped (CLT_EFORMAT naming the file and the fault). */
int clt__npy_open(const char *path, clt__array *out);
/* Member `member` ("x": x.npy) of an .npz archive: mapped when stored,
 * inflated through zlib when deflated. */
int clt__npz_open(const char *path, const char *member, clt__array *out);
/* Dataset `name` ("/group/dataset") of an HDF5 file, read whole into
 * memory; CLT_EUNSUPPORTED when cltrain was built without HDF5. */
int clt__h5_open(const char *path, const char *name, clt__array *out);
/* A CSV file: numbers, an optional header line, columns picked by o. */
int clt__csv_open(const char *path, const clt_data_options *o, clt_dataset **out);

/* Column indices from a list "a,3,b" of header names (names may be NULL)
 * or 0-based numbers below ncols, for option opt; *out malloc'd. */
int clt__parse_columns(const char *path, const char *opt, const char *list, char *const *names, int64_t ncols,
                       int64_t **out, int64_t *n);
/* The feature columns: those of the list features, or (NULL) every column
 * that is not one of the nt targets. */
int clt__feature_columns(const char *path, const char *features, char *const *names, int64_t ncols,
                         const int64_t *tcols, int64_t nt, int64_t **out, int64_t *n);

/* The labels or targets of a users' dataset (source.c): count x k values
 * of elem e at src (big-endian when big). regression 0: int32 class labels
 * (k must be 1; each a whole number in [0, 2^31)), checked against
 * num_classes (0: largest + 1), naming `what` and the index of a bad one;
 * regression 1: float targets, each finite. */
int clt__dataset_set_targets(clt_dataset *ds, const clt__elem *e, const void *src, int64_t k, int big,
                             int regression, int num_classes, const char *what);

/* Sample k of a dataset with elem as float32, before any normalisation:
 * pread() when ds->read_fd >= 0 (CLT_EIO naming the file on failure). */
int clt__dataset_raw_row(const clt_dataset *ds, int64_t k, float *out);
/* The same from the mapping, for passes over every sample in order
 * (statistics), which call clt__dataset_scan_release on the rows behind
 * them: a pread dataset's pages then leave the resident set in bulk. */
void clt__dataset_scan_row(const clt_dataset *ds, int64_t k, float *out);
/* Let the mapping's pages of rows [lo, hi) go (madvise MADV_DONTNEED;
 * the page cache keeps them) when ds reads by pread; else nothing. */
void clt__dataset_scan_release(const clt_dataset *ds, int64_t lo, int64_t hi);
/* Rows of a scan between two releases: about 32 MiB of them. */
int64_t clt__dataset_scan_chunk(const clt_dataset *ds);
/* Samples and labels or targets, normalised (dataset.c); y is int32 labels
 * or float targets as the dataset holds. */
int clt__dataset_get(const clt_dataset *ds, const int64_t *indices, int64_t n, float *x, void *y);

/* Token datasets (tokens.c): windows as float32 x (n, T) and int32 y (n, T),
 * for clt_dataset_get_batch, whose index checks are done. */
void clt__tokens_get_batch(const clt_dataset *ds, const int64_t *indices, int64_t n, float *x, int32_t *y);
/* The labels of sample k that count (not CLT_IGNORE_LABEL): labels_per_sample
 * but for a token window's masked targets. */
int64_t clt__dataset_sample_labels(const clt_dataset *ds, int64_t k);

/* ---- checked reading (gzread reads plain and gzip files alike) ---- */

typedef struct clt__reader {
  gzFile gz;
  const char *path;
  uint64_t offset;    /* uncompressed bytes read so far */
} clt__reader;

/* Open path: a missing file is CLT_ENOTFOUND, any other failure CLT_EIO,
 * both naming the file and the system's reason. */
int clt__reader_open(clt__reader *r, const char *path);
void clt__reader_close(clt__reader *r);
/* Read exactly n bytes of `what` ("the magic number", "image data"). A short
 * read is CLT_EFORMAT "truncated", a broken gzip stream CLT_EFORMAT
 * "corrupt", a read error CLT_EIO; each names the file, what was being read,
 * and how far it got. */
int clt__reader_read(clt__reader *r, void *buf, uint64_t n, const char *what);
/* Read n bytes into a buffer that grows as data arrives, so that a header
 * declaring more than the file holds fails as truncated before it can make
 * us allocate what it declares. *out is malloc'd; free it. */
int clt__reader_read_alloc(clt__reader *r, uint64_t n, const char *what, void **out);
/* The file must end here: trailing bytes are CLT_EFORMAT naming how many
 * (and the offset where they start). */
int clt__reader_expect_end(clt__reader *r, const char *after);

/* Big- and little-endian integers from bytes. */
static inline uint32_t clt__be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
static inline uint32_t clt__le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t clt__le64(const unsigned char *p) {
  return (uint64_t)clt__le32(p) | (uint64_t)clt__le32(p + 4) << 32;
}

static inline int clt__host_is_big_endian(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 0;
}
static inline void clt__put_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void clt__put_le64(unsigned char *p, uint64_t v) {
  clt__put_le32(p, (uint32_t)v);
  clt__put_le32(p + 4, (uint32_t)(v >> 32));
}

/* ---- fingerprints: ranks agreeing that they read the same data ---- */

/* 64-bit FNV-1a of n bytes, going on from h (CLT__HASH_START to begin). */
#define CLT__HASH_START UINT64_C(0xcbf29ce484222325)
static inline uint64_t clt__hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * UINT64_C(0x100000001b3);
  return h;
}

/* What every rank compares before training or evaluating on a dataset
 * (train/same_data.c): its shape, a hash of its files' headers, and the
 * hashes of the samples at CLT__DATA_PROBES fixed positions (first, last
 * and evenly between; clt__probe_sample), so it costs the same for a file
 * of any size. Plain and gzip copies of a file give the same. */
#define CLT__DATA_PROBES 16
typedef struct clt__data_fingerprint {
  int64_t count, sample_size, labels_per_sample, ntokens;
  int64_t dims[CLT_DATASET_MAX_DIMS];
  int32_t ndims, num_classes, dtype, token_bytes;
  uint64_t header;
  uint64_t probe[CLT__DATA_PROBES];
  float mean, std;           /* the normalisation, which decoding applies */
  char path[256];            /* for messages: ranks may read copies of a file in other places */
} clt__data_fingerprint;

void clt__dataset_fingerprint(const clt_dataset *ds, clt__data_fingerprint *out);
/* The sample probe i (< CLT__DATA_PROBES) of a dataset of count samples hashes. */
int64_t clt__probe_sample(int64_t count, int i);

/* Write n bytes through zlib (plain or gzip); a failure is CLT_EIO naming
 * path and the reason. */
int clt__gz_write_all(gzFile gz, const char *path, const void *buf, size_t n);

/* A file written whole through zlib (core/outfile.h's rules): into a
 * temporary file beside path (or beside the regular file a symbolic link
 * leads to), gzip-compressed when path ends in .gz, flushed and renamed
 * over it by commit; nothing but a regular file is replaced, and a failure
 * leaves what was at path as it was. abort (also after a failed commit: a
 * no-op then) removes the temporary file. */
typedef struct clt__gz_out {
  gzFile gz;
  char *target, *tmp;
} clt__gz_out;
int clt__gz_out_open(clt__gz_out *o, const char *path);
int clt__gz_out_commit(clt__gz_out *o, const char *path);
void clt__gz_out_abort(clt__gz_out *o);

/* "28x28" into buf. */
const char *clt__dims_str(int ndims, const int64_t *dims, char *buf, size_t len);

#endif /* CLT_DATA_H */
