/*
 * safetensors.c: the safetensors reader and atomic writer (see
 * safetensors.h). It writes float32 tensors, which is all cltrain stores,
 * and 16-bit ones for hf export; it reads F16 and BF16, widened to float32.
 */
#include "core/internal.h"
#include "io/safetensors.h"
#include "core/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Headers bigger than this are not ours (the Python package allows 100 MB). */
#define MAX_HEADER (100u << 20)

struct clt__st_file {
  char *path;
  FILE *fp;
  json_t *header;
  uint64_t data_start, data_len;
};

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* zlib's crc32 takes an unsigned int length: feed it a GiB at a time. */
static uint32_t crc_update(uint32_t crc, const void *buf, size_t len) {
  const Bytef *p = buf;
  while (len) {
    uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
    crc = (uint32_t)crc32(crc, p, n);
    p += n;
    len -= n;
  }
  return crc;
}

static int64_t numel(const clt__st_tensor *t) {
  int64_t count = 1;
  for (int d = 0; d < t->ndim; d++) count *= t->shape[d];
  return count;
}

static const char *const dtype_name[] = {[CLT__ST_F32] = "F32", [CLT__ST_F16] = "F16", [CLT__ST_BF16] = "BF16"};

/* Writing: bytes a value, and where they are. */
static int64_t stored_size(const clt__st_tensor *t) { return t->dtype == CLT__ST_F32 ? 4 : 2; }
static const void *tensor_bytes(const clt__st_tensor *t) {
  return t->dtype == CLT__ST_F32 ? (const void *)t->data : (const void *)t->data16;
}

/* The text whose CRC32 is header_crc32: the header without that key,
 * compact, keys sorted (jansson writes the same object the same way). */
static char *header_crc_text(const json_t *h) {
  json_t *copy = json_deep_copy(h);
  json_t *meta = copy ? json_object_get(copy, "__metadata__") : NULL;
  if (meta) json_object_del(meta, "header_crc32");
  char *text = copy ? json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(copy);
  return text;
}

char *clt__st_tmp_path(const char *path) { return clt__tmp_path(path); }

int clt__st_write(const char *path, const clt__st_tensor *t, int n, const char *const *metadata) {
  int rc = CLT_OK, fd = -1;
  char *text = NULL, *tmp = NULL, *target = NULL, *hdr = NULL, hex[16], num[32];
  json_t *h = json_object(), *meta = json_object();
  uint64_t off = 0;
  uint32_t crc = 0;
  for (int i = 0; i < n; i++) {
    int64_t bytes = numel(&t[i]) * stored_size(&t[i]);
    json_t *shape = json_array();
    for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer(t[i].shape[d]));
    json_object_set_new(h, t[i].name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_name[t[i].dtype], "shape",
                                                shape, "data_offsets", (json_int_t)off, (json_int_t)(off + bytes)));
    off += (uint64_t)bytes;
    crc = crc_update(crc, tensor_bytes(&t[i]), (size_t)bytes);
  }
  for (int i = 0; metadata && metadata[i]; i += 2) json_object_set_new(meta, metadata[i], json_string(metadata[i + 1]));
  /* Integrity: the data section's size and CRC32, then the header's CRC32
   * (over everything but itself), so a flipped bit anywhere is found. */
  snprintf(num, sizeof num, "%llu", (unsigned long long)off);
  snprintf(hex, sizeof hex, "%08x", (unsigned)crc);
  json_object_set_new(meta, "data_bytes", json_string(num));
  json_object_set_new(meta, "data_crc32", json_string(hex));
  json_object_set_new(h, "__metadata__", meta);
  if (!(text = header_crc_text(h))) goto nomem;
  snprintf(hex, sizeof hex, "%08x", (unsigned)crc_update(0, text, strlen(text)));
  free(text);
  json_object_set_new(meta, "header_crc32", json_string(hex));
  text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(h);
  h = NULL;
  if (!text) goto nomem;
  /* Pad the header with spaces to 8 bytes so the data is aligned. */
  size_t hlen = strlen(text), padded = (hlen + 7) / 8 * 8;
  hdr = clt__calloc(1, padded + 8);
  if (!hdr) goto nomem;
  /* Only nothing or a regular file is replaced; a symbolic link's file is. */
  CLT_TRY(clt__output_resolve(NULL, path, &target));
  if (!(tmp = clt__st_tmp_path(target))) goto nomem;
  uint64_t le = padded;
  for (int i = 0; i < 8; i++) hdr[i] = (char)(le >> (8 * i));
  memcpy(hdr + 8, text, hlen);
  memset(hdr + 8 + hlen, ' ', padded - hlen);

  /* What a failure leaves: the file at path as it was, or no file. */
  struct stat st;
  const char *left = stat(path, &st) == 0 ? "is as it was" : "was not made";
  if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0) {
    rc = clt__error(CLT_EIO, "cannot create %s: %s (%s %s)", tmp, strerror(errno), path, left);
    goto fail;
  }
  int bad = write_all(fd, hdr, padded + 8);
  for (int i = 0; !bad && i < n; i++)
    bad = write_all(fd, tensor_bytes(&t[i]), (size_t)(numel(&t[i]) * stored_size(&t[i]))); /* little-endian hosts only */
  if (bad || fsync(fd) != 0) {
    rc = clt__error(CLT_EIO, "writing %s failed: %s (the temporary file is removed; %s %s)", tmp, strerror(errno),
                    path, left);
    goto fail;
  }
  int closed = close(fd);
  fd = -1;
  if (closed != 0) { /* network file systems report late write errors here */
    rc = clt__error(CLT_EIO, "writing %s failed when closing it: %s (the temporary file is removed; %s %s)", tmp,
                    strerror(errno), path, left);
    goto fail;
  }
  rc = clt__output_replace(tmp, target);
  free(text), free(hdr), free(tmp), free(target);
  return rc;
nomem:
  rc = clt__error(CLT_ENOMEM, "%s: out of memory making the safetensors header", path);
fail:
  json_decref(h);
  if (fd >= 0) close(fd);
  if (tmp) unlink(tmp);
  free(text), free(hdr), free(tmp), free(target);
  return rc;
}

/* Parse a metadata value written as a decimal or hex number. */
static int meta_u64(const clt__st_file *f, const char *key, int base, uint64_t *out) {
  const char *v = clt__st_metadata((clt__st_file *)f, key);
  char *end;
  if (!v) return 0;
  errno = 0;
  unsigned long long x = strtoull(v, &end, base);
  if (!*v || *end || errno) return clt__error(CLT_EFORMAT, "%s: metadata '%s' is '%s', not a number", f->path, key, v);
  *out = x;
  return 1;
}

/* "__metadata__" is a map of strings to strings (the format says so, and
 * PyTorch's reader refuses anything else): a value of another type would
 * read here as a missing one, and an edit would pass as an older file. */
static int check_metadata(clt__st_file *f) {
  static const char *const types[] = {"an object", "an array", "a string", "a number", "a number", "true",
                                      "false", "null"};
  json_t *meta = json_object_get(f->header, "__metadata__"), *v;
  const char *key;
  if (!meta) return CLT_OK;
  if (!json_is_object(meta))
    return clt__error(CLT_EFORMAT, "%s: the header's __metadata__ is %s, not a map of names to strings; not a "
                      "safetensors file, or edited", f->path, types[json_typeof(meta)]);
  json_object_foreach(meta, key, v) {
    if (!json_is_string(v))
      return clt__error(CLT_EFORMAT, "%s: the metadata '%s' is %s, not a string (safetensors metadata maps names to "
                        "strings); the file was edited or not written by a safetensors writer", f->path, key,
                        types[json_typeof(v)]);
  }
  return CLT_OK;
}

/* What the header itself can tell: its metadata's types, its CRC32, and
 * the size of the data section it records (written by clt__st_write;
 * files from elsewhere carry neither, and pass). */
static int check_integrity(clt__st_file *f) {
  const char *want = clt__st_metadata(f, "header_crc32");
  uint64_t v;
  int rc = check_metadata(f);
  if (rc < 0) return rc;
  if (want) {
    char *text = header_crc_text(f->header), have[16];
    if (!text) return clt__error(CLT_ENOMEM, "%s: out of memory checking the header", f->path);
    snprintf(have, sizeof have, "%08x", (unsigned)crc_update(0, text, strlen(text)));
    free(text);
    if (strcmp(have, want) != 0)
      return clt__error(CLT_EFORMAT, "%s: the header fails its CRC32 check (computed %s, recorded %s): the file is "
                        "damaged", f->path, have, want);
  }
  if ((rc = meta_u64(f, "data_bytes", 10, &v)) < 0) return rc;
  if (rc == 1 && v != f->data_len) {
    if (f->data_len < v)
      return clt__error(CLT_EFORMAT, "%s: truncated: %llu of its %llu bytes of tensor data are there (the file has "
                        "%llu bytes, %llu expected); was the write interrupted?", f->path,
                        (unsigned long long)f->data_len, (unsigned long long)v,
                        (unsigned long long)(f->data_start + f->data_len), (unsigned long long)(f->data_start + v));
    return clt__error(CLT_EFORMAT, "%s: %llu bytes after the %llu bytes of tensor data the header records (the file "
                      "has %llu bytes, %llu expected); the file is damaged", f->path,
                      (unsigned long long)(f->data_len - v), (unsigned long long)v,
                      (unsigned long long)(f->data_start + f->data_len), (unsigned long long)(f->data_start + v));
  }
  return CLT_OK;
}

int clt__st_check_data(clt__st_file *f, int required) {
  uint64_t want = 0, left = f->data_len;
  int rc = meta_u64(f, "data_crc32", 16, &want);
  if (rc < 0) return rc;
  if (rc == 0)
    return required ? clt__error(CLT_EFORMAT, "%s: no data_crc32 metadata, so its data cannot be checked; it was not "
                                 "written by cltrain", f->path)
                    : CLT_OK;
  enum { CHUNK = 1 << 20 };
  unsigned char *buf = clt__calloc(1, CHUNK);
  uint32_t crc = 0;
  if (!buf) return CLT_ENOMEM;
  rc = fseeko(f->fp, (off_t)f->data_start, SEEK_SET) == 0 ? CLT_OK : CLT_EIO;
  while (rc == CLT_OK && left) {
    size_t n = left < CHUNK ? (size_t)left : CHUNK;
    if (fread(buf, 1, n, f->fp) != n) rc = CLT_EIO;
    crc = crc_update(crc, buf, n);
    left -= n;
  }
  free(buf);
  if (rc < 0) return clt__error(CLT_EIO, "%s: reading the tensor data failed: %s", f->path, strerror(errno));
  if (crc != (uint32_t)want)
    return clt__error(CLT_EFORMAT, "%s: the tensor data fails its CRC32 check (computed %08x, recorded %08x): the "
                      "file is damaged", f->path, (unsigned)crc, (unsigned)want);
  return CLT_OK;
}

typedef struct range {
  int64_t lo, hi;
  const char *name;
} range;

static int by_start(const void *a, const void *b) {
  const range *x = a, *y = b;
  return (x->lo > y->lo) - (x->lo < y->lo);
}

/* No two tensors may share bytes: a reader would see one tensor's values
 * as the other's, and a writer of either would change both. */
static int check_overlaps(clt__st_file *f, size_t n) {
  range *r = n ? clt__calloc(n, sizeof *r) : NULL;
  const char *key;
  json_t *v;
  size_t i = 0;
  int rc = CLT_OK;
  if (n && !r) return clt__error(CLT_ENOMEM, "%s: out of memory checking the header", f->path);
  json_object_foreach(f->header, key, v) {
    if (strcmp(key, "__metadata__") == 0) continue;
    json_t *offs = json_object_get(v, "data_offsets");
    r[i].lo = json_integer_value(json_array_get(offs, 0));
    r[i].hi = json_integer_value(json_array_get(offs, 1));
    r[i++].name = key;
  }
  if (n > 0) qsort(r, n, sizeof *r, by_start);
  /* Sorted by start, a tensor overlaps an earlier one when it starts
   * before the furthest end so far (empty tensors hold no bytes). */
  size_t far = 0;
  for (i = 1; i < n; i++) {
    if (r[i].hi == r[i].lo) continue;
    if (r[i].lo < r[far].hi) {
      rc = clt__error(CLT_EFORMAT, "%s: tensors '%s' (bytes [%lld, %lld)) and '%s' (bytes [%lld, %lld)) overlap; not "
                      "a valid safetensors file", f->path, r[far].name, (long long)r[far].lo, (long long)r[far].hi,
                      r[i].name, (long long)r[i].lo, (long long)r[i].hi);
      break;
    }
    if (r[i].hi > r[far].hi) far = i;
  }
  free(r);
  return rc;
}

int clt__st_open(const char *path, clt__st_file **out) {
  int rc = CLT_OK;
  unsigned char lenb[8];
  char *text = NULL;
  json_error_t jerr;
  clt__st_file *f = clt__calloc(1, sizeof *f);
  *out = NULL;
  if (!f || !(f->path = clt__strdup(path))) { free(f); return CLT_ENOMEM; }
  if (!(f->fp = fopen(path, "rb"))) {
    rc = clt__error(errno == ENOENT ? CLT_ENOTFOUND : CLT_EIO, "%s: %s", path, strerror(errno));
    goto fail;
  }
  struct stat st;
  if (fstat(fileno(f->fp), &st) == 0 && S_ISDIR(st.st_mode)) {
    rc = clt__error(CLT_EINVAL, "%s is a directory, not a safetensors file", path);
    goto fail;
  }
  if (fstat(fileno(f->fp), &st) != 0 || fread(lenb, 1, 8, f->fp) != 8) {
    rc = clt__error(CLT_EFORMAT, "%s: too short to be a safetensors file", path);
    goto fail;
  }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenb[i];
  if (hlen == 0 || hlen > MAX_HEADER || hlen > (uint64_t)st.st_size - 8) {
    rc = clt__error(CLT_EFORMAT, "%s: header length %llu does not fit a %lld-byte file; not a safetensors file, or "
                    "truncated", path, (unsigned long long)hlen, (long long)st.st_size);
    goto fail;
  }
  if (!(text = clt__calloc(1, hlen + 1))) { rc = CLT_ENOMEM; goto fail; }
  if (fread(text, 1, hlen, f->fp) != hlen) {
    rc = clt__error(CLT_EFORMAT, "%s: truncated in its header", path);
    goto fail;
  }
  /* A key given twice would be read as whichever jansson keeps: refuse. */
  if (!(f->header = json_loadb(text, hlen, JSON_REJECT_DUPLICATES, &jerr)) || !json_is_object(f->header)) {
    rc = clt__error(CLT_EFORMAT, "%s: the header is not a JSON object (%s at byte %d); not a safetensors file, or "
                    "damaged", path, f->header ? "not an object" : jerr.text, jerr.position);
    goto fail;
  }
  f->data_start = 8 + hlen;
  f->data_len = (uint64_t)st.st_size - f->data_start;
  CLT_TRY(check_integrity(f));
  const char *key;
  json_t *v;
  size_t ntensors = 0;
  json_object_foreach(f->header, key, v) {
    if (strcmp(key, "__metadata__") == 0) continue;
    clt__st_tensor t;
    if ((rc = clt__st_find(f, key, &t)) < 0) goto fail;
    ntensors++;
  }
  CLT_TRY(check_overlaps(f, ntensors));
  free(text);
  *out = f;
  return CLT_OK;
fail:
  free(text);
  clt__st_close(f);
  return rc;
}

void clt__st_close(clt__st_file *f) {
  if (!f) return;
  if (f->fp) fclose(f->fp);
  json_decref(f->header);
  free(f->path);
  free(f);
}

int clt__st_find(clt__st_file *f, const char *name, clt__st_tensor *out) {
  json_t *v = json_object_get(f->header, name);
  memset(out, 0, sizeof *out);
  if (!v) return clt__error(CLT_ENOTFOUND, "%s has no tensor '%s'", f->path, name);
  json_t *dtype = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
         *offs = json_object_get(v, "data_offsets");
  if (!json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offs) || json_array_size(offs) != 2)
    return clt__error(CLT_EFORMAT, "%s: tensor '%s' lacks a dtype, shape or data_offsets", f->path, name);
  const char *dt = json_string_value(dtype);
  out->dtype = strcmp(dt, "F16") == 0 ? CLT__ST_F16 : strcmp(dt, "BF16") == 0 ? CLT__ST_BF16 : CLT__ST_F32;
  int64_t esize = out->dtype == CLT__ST_F32 ? 4 : 2;
  if (out->dtype == CLT__ST_F32 && strcmp(dt, "F32") != 0)
    return clt__error(CLT_EFORMAT, "%s: tensor '%s' is %s; cltrain reads F32, F16 and BF16", f->path, name, dt);
  if (json_array_size(shape) > 6) return clt__error(CLT_EFORMAT, "%s: tensor '%s' has over 6 dimensions", f->path, name);
  int64_t count = 1;
  out->ndim = (int)json_array_size(shape);
  for (int d = 0; d < out->ndim; d++) {
    json_t *e = json_array_get(shape, (size_t)d);
    if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > (1LL << 40))
      return clt__error(CLT_EFORMAT, "%s: tensor '%s' has a bad shape", f->path, name);
    out->shape[d] = json_integer_value(e);
    /* each dimension may be up to 2^40: the product can overflow */
    if (__builtin_mul_overflow(count, out->shape[d], &count) || count > INT64_MAX / 4)
      return clt__error(CLT_EFORMAT, "%s: tensor '%s' has a shape too large for any file", f->path, name);
  }
  json_t *a = json_array_get(offs, 0), *b = json_array_get(offs, 1);
  if (!json_is_integer(a) || !json_is_integer(b))
    return clt__error(CLT_EFORMAT, "%s: tensor '%s' has bad data_offsets", f->path, name);
  int64_t lo = json_integer_value(a), hi = json_integer_value(b);
  if (lo < 0 || hi < lo || hi - lo != count * esize)
    return clt__error(CLT_EFORMAT, "%s: tensor '%s' covers bytes [%lld, %lld) but its shape needs %lld", f->path,
                      name, (long long)lo, (long long)hi, (long long)(count * esize));
  if ((uint64_t)hi > f->data_len)
    return clt__error(CLT_EFORMAT, "%s: tensor '%s' ends at byte %lld of the data but the file holds %llu; truncated?",
                      f->path, name, (long long)hi, (unsigned long long)f->data_len);
  clt__strlcpy(out->name, name, sizeof out->name);
  out->offset = lo;
  return CLT_OK;
}

/* An F16 or BF16 tensor's count values as float32 (every one exactly). */
static int read_widened(clt__st_file *f, const clt__st_tensor *t, float *dst, int64_t count) {
  uint16_t *h = clt__calloc((size_t)count ? (size_t)count : 1, sizeof *h);
  if (!h) return CLT_ENOMEM;
  int bad = fseeko(f->fp, (off_t)(f->data_start + (uint64_t)t->offset), SEEK_SET) != 0 ||
            fread(h, 2, (size_t)count, f->fp) != (size_t)count;
  for (int64_t i = 0; !bad && i < count; i++) {
    if (t->dtype == CLT__ST_F16) {
      dst[i] = clt__float_from_half(h[i]);
    } else { /* bfloat16 is the high half of a float32 */
      uint32_t bits = (uint32_t)h[i] << 16;
      memcpy(&dst[i], &bits, 4);
    }
  }
  free(h);
  return bad ? clt__error(CLT_EIO, "%s: reading tensor '%s' failed", f->path, t->name) : CLT_OK;
}

int clt__st_read(clt__st_file *f, const clt__st_tensor *t, float *dst, int64_t count) {
  int64_t have = 1;
  for (int d = 0; d < t->ndim; d++) have *= t->shape[d];
  if (have != count)
    return clt__error(CLT_ESHAPE, "%s: tensor '%s' holds %lld values, %lld expected", f->path, t->name,
                      (long long)have, (long long)count);
  if (t->dtype != CLT__ST_F32) {
    int rc = read_widened(f, t, dst, count);
    if (rc < 0) return rc;
  } else if (fseeko(f->fp, (off_t)(f->data_start + (uint64_t)t->offset), SEEK_SET) != 0 ||
             fread(dst, 4, (size_t)count, f->fp) != (size_t)count) {
    return clt__error(CLT_EIO, "%s: reading tensor '%s' failed", f->path, t->name);
  }
  /* Parameters and optimizer state are all cltrain reads: a NaN or Inf
   * among them would train on silently (ReLU hides it) and be saved again. */
  for (int64_t i = 0; i < count; i++)
    if (!isfinite(dst[i])) {
      char at[160];
      size_t n = 0;
      int64_t rest = i, stride = count;
      for (int d = 0; d < t->ndim && n < sizeof at; d++) {
        stride /= t->shape[d] ? t->shape[d] : 1;
        n += (size_t)snprintf(at + n, sizeof at - n, d ? ", %lld" : "%lld", (long long)(rest / stride));
        rest %= stride;
      }
      return clt__error(CLT_ENONFINITE, "%s: tensor '%s' holds %s at index [%s] (element %lld of %lld); parameters "
                        "and optimizer state must be finite (did the run that saved them diverge?)", f->path, t->name,
                        isnan(dst[i]) ? "NaN" : dst[i] > 0 ? "+Inf" : "-Inf", at, (long long)i, (long long)count);
    }
  return CLT_OK;
}

const char *clt__st_next_name(clt__st_file *f, void **iter) {
  *iter = *iter ? json_object_iter_next(f->header, *iter) : json_object_iter(f->header);
  if (*iter && strcmp(json_object_iter_key(*iter), "__metadata__") == 0)
    *iter = json_object_iter_next(f->header, *iter);
  return *iter ? json_object_iter_key(*iter) : NULL;
}

const char *clt__st_metadata(clt__st_file *f, const char *key) {
  json_t *m = json_object_get(f->header, "__metadata__");
  json_t *v = m ? json_object_get(m, key) : NULL;
  return json_is_string(v) ? json_string_value(v) : NULL;
}
