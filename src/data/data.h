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
};

/* An empty dataset owning a copy of path (NULL and CLT_ENOMEM on failure). */
clt_dataset *clt__dataset_alloc(const char *path);
/* Check every label against num_classes (0: set it to max + 1); errors name
 * labels_path and the first offending index. */
int clt__dataset_check_labels(clt_dataset *ds, const char *labels_path);

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
