/*
 * safetensors.h: reading and writing the safetensors format (an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype,
 * shape and byte range, then the raw data), the format PyTorch and the
 * Python safetensors package load. Writes are atomic: a temporary file is
 * written, flushed and renamed over the target, then the directory flushed
 * (core/outfile.h: only nothing or a regular file is replaced, and a
 * symbolic link's file rather than the link).
 *
 * Every file written here carries three more metadata strings: data_bytes
 * (the size of the data section), data_crc32 (zlib CRC32 of the data
 * section, 8 hex digits) and header_crc32 (CRC32 of the header as compact
 * JSON with sorted keys, without the header_crc32 entry itself). Readers
 * check the header's when present; clt__st_check_data checks the data's.
 */
#ifndef CLT_IO_SAFETENSORS_H
#define CLT_IO_SAFETENSORS_H

#include <stdint.h>

#include "core/outfile.h"

/* How a tensor is stored. cltrain's own files are F32; it reads F16 and
 * BF16 too (Hugging Face checkpoints saved in half precision), widened to
 * float32 exactly as they are read, and writes them for hf export. */
typedef enum clt__st_dtype { CLT__ST_F32 = 0, CLT__ST_F16 = 1, CLT__ST_BF16 = 2 } clt__st_dtype;

typedef struct clt__st_tensor {
  char name[128];
  int ndim;
  int64_t shape[6];
  const float *data;   /* writing: float32 values (dtype F32) */
  const uint16_t *data16; /* writing: the 16-bit values of an F16 or BF16 tensor, already rounded */
  int64_t offset;      /* reading: byte offset of the data in the file's data section */
  clt__st_dtype dtype; /* reading: how it is stored; writing: how to store it */
} clt__st_tensor;

/* Write n tensors (float32, or 16-bit values already rounded) and string metadata (key/value pairs, NULL-ended
 * list of 2*k strings; may be NULL) to path atomically: to path +
 * CLT__ST_TMP_INFIX + the process id, flushed, then renamed. On failure the
 * temporary file is removed and path is untouched. */
#define CLT__ST_TMP_INFIX CLT__TMP_INFIX
int clt__st_write(const char *path, const clt__st_tensor *t, int n, const char *const *metadata);
/* The temporary name clt__st_write uses for path (malloc'd, or NULL): path
 * + CLT__ST_TMP_INFIX + the process id, with the file name shortened first
 * where that would pass NAME_MAX, so a valid name stays valid. */
char *clt__st_tmp_path(const char *path);

typedef struct clt__st_file clt__st_file;
/* Open and check a file: header length, JSON, the header's CRC32 and the
 * recorded data size when present, no key given twice, every tensor F32,
 * F16 or BF16 with a shape whose size matches its byte range, ranges inside
 * the file and no two of them overlapping. Errors name the file and
 * the fault. */
int clt__st_open(const char *path, clt__st_file **out);
void clt__st_close(clt__st_file *f);
/* The tensor called name, or CLT_ENOTFOUND naming it and the file. */
int clt__st_find(clt__st_file *f, const char *name, clt__st_tensor *out);
/* Read count floats of tensor t into dst; a NaN or Inf among them is
 * CLT_ENONFINITE naming the file, the tensor and the first bad index. */
int clt__st_read(clt__st_file *f, const clt__st_tensor *t, float *dst, int64_t count);
/* Read the whole data section and compare its CRC32 with data_crc32:
 * CLT_EFORMAT naming the file when it differs, or when it is missing and
 * required is set (without, a file that has none passes). */
int clt__st_check_data(clt__st_file *f, int required);
/* The tensors' names one by one: start with *iter NULL; NULL at the end. */
const char *clt__st_next_name(clt__st_file *f, void **iter);
/* A metadata value, or NULL. */
const char *clt__st_metadata(clt__st_file *f, const char *key);

#endif
