/*
 * hdf5.c: an HDF5 dataset ("file.h5:/group/dataset") as clt__array, when
 * cltrain is built with HDF5 (configure --with-hdf5). A dataset stored
 * contiguously and unfiltered is mapped from the file like an .npy (each
 * rank then reads only the rows of its batches); a chunked or compressed
 * one is read whole into memory in its stored type (integers and floats
 * of 1 to 8 bytes, as NumPy's). Its first dimension is the samples. HDF5's own error
 * stack is silenced: every fault comes back as one message naming the
 * file, the dataset and what is wrong.
 */
#include "config.h"

#include "data/data.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if HAVE_HDF5
#include <hdf5.h>

/* A dataset stored contiguously, unfiltered, in a standard integer or
 * IEEE float type (what h5py and H5Dcreate write by default) lies in the
 * file as an .npy's values do: map the file, and the batches touch (or,
 * past CLT_DATA_MAP_MAX, pread) only the rows they take, so a rank reads
 * only its slices and a large dataset stays out of the resident set.
 * 1: mapped; 0: not so stored (read whole through HDF5); < 0: an error. */
static int map_contiguous(const char *path, const char *name, hid_t ds, hid_t type, char kind,
                          uint64_t bytes, clt__array *out) {
  hid_t dcpl = H5Dget_create_plist(ds);
  if (dcpl < 0) return 0;
  const int contiguous = H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl) == 0;
  H5Pclose(dcpl);
  const haddr_t at = contiguous ? H5Dget_offset(ds) : HADDR_UNDEF;
  const H5T_order_t order = H5Tget_order(type);
  int standard = order == H5T_ORDER_LE || order == H5T_ORDER_BE;
  if (kind == 'f')
    standard &= H5Tequal(type, H5T_IEEE_F32LE) > 0 || H5Tequal(type, H5T_IEEE_F32BE) > 0 ||
                H5Tequal(type, H5T_IEEE_F64LE) > 0 || H5Tequal(type, H5T_IEEE_F64BE) > 0;
  else
    standard &= H5Tget_precision(type) == 8 * H5Tget_size(type) && H5Tget_offset(type) == 0;
  if (at == HADDR_UNDEF || !standard) return 0;
  void *map;
  size_t len;
  int fd1;
  int rc = clt__map_file(path, &map, &len, &fd1);
  if (rc < 0) return rc;
  if ((uint64_t)at > len || bytes > len - (uint64_t)at) {
    munmap(map, len);
    close(fd1 - 1);
    return clt__error(CLT_EFORMAT, "%s:%s: its values would lie at bytes %llu to %llu, past the file's end (%zu "
                      "bytes): the file is cut short", path, name, (unsigned long long)at,
                      (unsigned long long)(at + bytes), len);
  }
  out->map = map, out->map_len = len, out->fd1 = fd1;
  out->data = (unsigned char *)map + at;
  out->big = order == H5T_ORDER_BE;
  return 1;
}

int clt__h5_open(const char *path, const char *name, clt__array *out) {
  int rc = CLT_OK;
  hid_t file = H5I_INVALID_HID, ds = H5I_INVALID_HID, space = H5I_INVALID_HID, type = H5I_INVALID_HID;
  hsize_t dims[CLT_DATASET_MAX_DIMS + 1];
  memset(out, 0, sizeof *out);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  if ((file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
    rc = clt__error(CLT_EFORMAT, "%s: HDF5 cannot open the file (is it an HDF5 file, whole?)", path);
    goto fail;
  }
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0 || (ds = H5Dopen2(file, name, H5P_DEFAULT)) < 0) {
    rc = clt__error(CLT_ENOTFOUND, "%s: no dataset %s in the file (h5ls -r %s lists them)", path, name, path);
    goto fail;
  }
  space = H5Dget_space(ds);
  int nd = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
  if (nd < 1 || nd > CLT_DATASET_MAX_DIMS + 1) {
    rc = clt__error(CLT_EFORMAT, "%s:%s: %d dimensions; a dataset of samples has 1 to %d", path, name, nd,
                    CLT_DATASET_MAX_DIMS + 1);
    goto fail;
  }
  H5Sget_simple_extent_dims(space, dims, NULL);
  type = H5Dget_type(ds);
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  char kind = cls == H5T_FLOAT ? 'f' : cls == H5T_INTEGER ? (H5Tget_sign(type) == H5T_SGN_NONE ? 'u' : 'i') : 0;
  if (!kind || !(out->elem = clt__elem_find(kind, (int)size))) {
    rc = clt__error(CLT_EFORMAT, "%s:%s: its values are of an HDF5 type of class %d and %zu bytes; cltrain reads %s",
                    path, name, (int)cls, size, clt__elem_names());
    goto fail;
  }
  uint64_t total = 1;
  out->ndims = nd;
  for (int i = 0; i < nd; i++) {
    out->shape[i] = (int64_t)dims[i];
    if (dims[i] == 0) {
      rc = clt__error(CLT_EFORMAT, "%s:%s: dimension %d is 0: the dataset is empty", path, name, i);
      goto fail;
    }
    if (total > (UINT64_C(1) << 40) / dims[i]) {
      rc = clt__error(CLT_EFORMAT, "%s:%s: more than 2^40 values", path, name);
      goto fail;
    }
    total *= dims[i];
  }
  char head[512];
  int hn = snprintf(head, sizeof head, "%s %c%zu", name, kind, size);
  out->header = clt__hash(clt__hash(CLT__HASH_START, head, (size_t)hn), dims, (size_t)nd * sizeof dims[0]);
  /* Stored whole in one place, as is: mapped like an .npy. */
  if ((rc = map_contiguous(path, name, ds, type, kind, total * size, out)) != 0) {
    if (rc == 1) rc = CLT_OK;
    goto fail; /* the way out, mapped or not */
  }
  /* Read as the same type in the host's order: HDF5 converts the byte order. */
  hid_t mem = kind == 'f' ? (size == 2 ? H5I_INVALID_HID : size == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE)
                          : H5Tget_native_type(type, H5T_DIR_ASCEND);
  if (mem == H5I_INVALID_HID) mem = H5Tcopy(type);
  else if (kind == 'f') mem = H5Tcopy(mem);
  if (!(out->owned = malloc((size_t)(total * size)))) {
    H5Tclose(mem);
    rc = clt__error(CLT_ENOMEM, "%s:%s: cannot allocate %llu bytes", path, name, (unsigned long long)(total * size));
    goto fail;
  }
  herr_t err = H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->owned);
  H5Tclose(mem);
  if (err < 0) {
    rc = clt__error(CLT_EFORMAT, "%s:%s: reading its values failed (a damaged or cut file?)", path, name);
    goto fail;
  }
  out->data = out->owned;
  out->big = clt__host_is_big_endian();
fail:
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  if (ds >= 0) H5Dclose(ds);
  if (file >= 0) H5Fclose(file);
  if (rc < 0) clt__array_release(out);
  return rc;
}

#else

int clt__h5_open(const char *path, const char *name, clt__array *out) {
  memset(out, 0, sizeof *out);
  return clt__error(CLT_EUNSUPPORTED, "%s:%s: this cltrain was built without HDF5 (configure --with-hdf5 with "
                    "libhdf5-dev installed); or save the data as .npy", path, name);
}

#endif
