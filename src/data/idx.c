/*
 * idx.c: the IDX reader (the format of MNIST and Fashion-MNIST), plain or
 * gzip-compressed, and clt_dataset_open_idx / _open_idx_files.
 *
 * An IDX file is a 4-byte magic number (two zero bytes, a type byte, the
 * number of dimensions), that many big-endian u32 dimensions, then the data,
 * row-major, and nothing else. We read unsigned-byte files (type 0x08):
 * images (count, rows, cols, ...) and labels (count). Every fault is reported
 * with the file's name and what is wrong.
 */
#include "data/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define IDX_MAX_DIMS (1 + CLT_DATASET_MAX_DIMS)

typedef struct idx_file {
  int ndims;
  uint64_t dims[IDX_MAX_DIMS];
  uint64_t count;       /* dims[0] */
  uint64_t item_size;   /* product of the other dimensions */
  unsigned char *data;  /* (count, item_size) */
  uint64_t header;      /* clt__hash of the magic number and the dimensions */
} idx_file;

static const char *idx_type_name(unsigned type) {
  switch (type) {
  case 0x08: return "unsigned byte";
  case 0x09: return "signed byte";
  case 0x0B: return "16-bit integer";
  case 0x0C: return "32-bit integer";
  case 0x0D: return "float32";
  case 0x0E: return "float64";
  default: return NULL;
  }
}

/* Read an IDX file of unsigned bytes whose number of dimensions lies in
 * [min_dims, max_dims]. kind is "image" or "label", for messages. */
static int idx_read(const char *path, int min_dims, int max_dims, const char *kind, idx_file *f) {
  int rc = CLT_OK;
  clt__reader r;
  unsigned char magic[4], dimbytes[4 * IDX_MAX_DIMS];
  char what[64];

  memset(f, 0, sizeof *f);
  CLT_TRY(clt__reader_open(&r, path));
  CLT_TRY(clt__reader_read(&r, magic, 4, "the magic number"));
  if (memcmp(magic, "CLTR", 4) == 0) {
    rc = clt__error(CLT_EFORMAT, "%s: this is a cltrain raw file, not an IDX file; open it with "
                    "clt_dataset_open_raw", path);
    goto fail;
  }
  if (magic[0] != 0 || magic[1] != 0) {
    rc = clt__error(CLT_EFORMAT, "%s: not an IDX file: it starts with the bytes %02x %02x %02x %02x, and an "
                    "IDX file starts with 00 00, a type byte and the number of dimensions",
                    path, magic[0], magic[1], magic[2], magic[3]);
    goto fail;
  }
  if (magic[2] != 0x08) {
    const char *name = idx_type_name(magic[2]);
    if (name)
      rc = clt__error(CLT_EFORMAT, "%s: the IDX type byte is 0x%02X (%s); cltrain reads %s files of unsigned "
                      "bytes (0x08)", path, magic[2], name, kind);
    else
      rc = clt__error(CLT_EFORMAT, "%s: the IDX type byte 0x%02X is no IDX type (0x08 unsigned byte, 0x09, "
                      "0x0B, 0x0C, 0x0D, 0x0E)", path, magic[2]);
    goto fail;
  }
  f->ndims = magic[3];
  if (f->ndims < min_dims || f->ndims > max_dims) {
    const char *plural = f->ndims == 1 ? "" : "s";
    if (min_dims == max_dims)
      rc = clt__error(CLT_EFORMAT, "%s: has %d dimension%s; %s %s file has exactly %d%s", path, f->ndims, plural,
                      kind[0] == 'i' ? "an" : "a", kind, min_dims, f->ndims > 1 ? " (is this an image file?)" : "");
    else
      rc = clt__error(CLT_EFORMAT, "%s: has %d dimension%s; %s %s file has %d to %d (count, rows, cols, ...)%s",
                      path, f->ndims, plural, kind[0] == 'i' ? "an" : "a", kind, min_dims, max_dims,
                      f->ndims == 1 ? " (is this a label file?)" : "");
    goto fail;
  }
  CLT_TRY(clt__reader_read(&r, dimbytes, 4 * (uint64_t)f->ndims, "the dimensions"));
  f->header = clt__hash(clt__hash(CLT__HASH_START, magic, 4), dimbytes, 4 * (size_t)f->ndims);
  f->item_size = 1;
  for (int i = 0; i < f->ndims; i++) {
    f->dims[i] = clt__be32(dimbytes + 4 * i);
    if (f->dims[i] == 0) {
      rc = i == 0 ? clt__error(CLT_EFORMAT, "%s: declares 0 %ss", path, kind)
                  : clt__error(CLT_EFORMAT, "%s: dimension %d of the %ss is 0", path, i, kind);
      goto fail;
    }
    if (i > 0 && f->item_size > (UINT64_C(1) << 40) / f->dims[i]) {
      rc = clt__error(CLT_EFORMAT, "%s: the dimensions declare %ss of more than 2^40 bytes each", path, kind);
      goto fail;
    }
    if (i > 0) f->item_size *= f->dims[i];
  }
  f->count = f->dims[0];
  if (f->count > UINT64_MAX / f->item_size) {
    rc = clt__error(CLT_EFORMAT, "%s: the dimensions declare more data than any file can hold", path);
    goto fail;
  }
  snprintf(what, sizeof what, "%s data", kind);
  CLT_TRY(clt__reader_read_alloc(&r, f->count * f->item_size, what, (void **)&f->data));
  snprintf(what, sizeof what, "the %llu bytes of %s data", (unsigned long long)(f->count * f->item_size), kind);
  CLT_TRY(clt__reader_expect_end(&r, what));
  clt__reader_close(&r);
  return CLT_OK;

fail:
  clt__reader_close(&r);
  free(f->data);
  f->data = NULL;
  return rc;
}

int clt_dataset_open_idx_files(const char *images, const char *labels, int num_classes, clt_dataset **out) {
  int rc = CLT_OK;
  idx_file img = {0}, lab = {0};
  clt_dataset *ds = NULL;

  CLT_ARG(out);
  *out = NULL;
  CLT_PATH_ARG(images);
  CLT_PATH_ARG(labels);
  if (num_classes < 0 || num_classes > 256)
    return clt__error(CLT_EINVAL, "%s: %d classes asked for; byte labels allow 1 to 256 (or 0: largest label + 1)",
                      labels, num_classes);
  CLT_TRY(idx_read(images, 2, IDX_MAX_DIMS, "image", &img));
  CLT_TRY(idx_read(labels, 1, 1, "label", &lab));
  if (lab.count != img.count) {
    rc = clt__error(CLT_EFORMAT, "%s: %llu labels but %s has %llu images", labels, (unsigned long long)lab.count,
                    images, (unsigned long long)img.count);
    goto fail;
  }
  ds = clt__dataset_alloc(images);
  if (!ds) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  ds->count = (int64_t)img.count;
  ds->ndims = img.ndims - 1;
  for (int i = 0; i < ds->ndims; i++) ds->dims[i] = (int64_t)img.dims[i + 1];
  ds->sample_size = (int64_t)img.item_size;
  ds->header_hash = clt__hash(clt__hash(CLT__HASH_START, &img.header, 8), &lab.header, 8);
  ds->dtype = CLT_U8;
  ds->range = 255.0f;
  ds->x = img.data;
  img.data = NULL;
  ds->y = malloc(img.count * sizeof *ds->y);
  if (!ds->y) {
    rc = clt__error(CLT_ENOMEM, "%s: cannot allocate %llu labels", labels, (unsigned long long)img.count);
    goto fail;
  }
  for (uint64_t i = 0; i < img.count; i++) ds->y[i] = lab.data[i];
  free(lab.data);
  lab.data = NULL;
  ds->num_classes = num_classes;
  CLT_TRY(clt__dataset_check_labels(ds, labels));
  CLT_TRY(clt_dataset_normalize(ds, 0.0f, 1.0f));
  *out = ds;
  return CLT_OK;

fail:
  free(img.data);
  free(lab.data);
  clt_dataset_destroy(ds);
  return rc;
}

/* dir/name or dir/name.gz, whichever exists first; NULL in *path if neither.
 * A name that is there but cannot be reached (a symbolic link in a loop
 * or to nothing, a directory without search permission) is an error
 * naming it and why, not "neither is there". */
static int find_file(const char *dir, const char *name, char **path) {
  static const char *const suffixes[] = {"", ".gz"};
  struct stat st;
  size_t len = strlen(dir) + strlen(name) + 8;
  *path = NULL;
  for (int i = 0; i < 2; i++) {
    char *p = clt__calloc(1, len);
    if (!p) return CLT_ENOMEM;
    snprintf(p, len, "%s/%s%s", dir, name, suffixes[i]);
    if (stat(p, &st) == 0) {
      *path = p;
      return CLT_OK;
    }
    int e = errno;
    if (e != ENOENT || lstat(p, &st) == 0) {
      int rc = clt__error(CLT_EIO, "%s: cannot open: %s%s", p,
                          e == ENOENT ? "a symbolic link to a file that is not there" : strerror(e),
                          e == ELOOP ? " (symbolic links in a loop)" : "");
      free(p);
      return rc;
    }
    free(p);
  }
  return CLT_OK;
}

int clt_dataset_open_idx(const char *dir, const char *split, clt_dataset **out) {
  int rc = CLT_OK;
  char *images = NULL, *labels = NULL, name[64];
  const char *prefix;
  struct stat st;

  CLT_ARG(out);
  *out = NULL;
  CLT_PATH_ARG(dir);
  CLT_ARG(split);
  if (strcmp(split, "train") == 0)
    prefix = "train";
  else if (strcmp(split, "test") == 0 || strcmp(split, "t10k") == 0)
    prefix = "t10k";
  else
    return clt__error(CLT_EINVAL, "dataset split '%s' is neither \"train\" nor \"test\"", split);
  if (stat(dir, &st) != 0)
    return clt__error(CLT_ENOTFOUND, "dataset directory %s: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return clt__error(CLT_ENOTFOUND, "dataset directory %s: is not a directory", dir);

  snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
  CLT_TRY(find_file(dir, name, &images));
  if (!images) {
    rc = clt__error(CLT_ENOTFOUND, "%s: no %s images: neither %s nor %s.gz is there (for Fashion-MNIST install "
                    "dataset-fashion-mnist, which puts them in /usr/share/datasets/fashion-mnist)",
                    dir, split, name, name);
    goto fail;
  }
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
  CLT_TRY(find_file(dir, name, &labels));
  if (!labels) {
    rc = clt__error(CLT_ENOTFOUND, "%s: no %s labels: neither %s nor %s.gz is there, though %s is", dir, split,
                    name, name, images);
    goto fail;
  }
  CLT_TRY(clt_dataset_open_idx_files(images, labels, 10, out));
fail:
  free(images);
  free(labels);
  return rc;
}
