/*
 * npywrite.h: NumPy .npy images and .npz archives (stored or deflated
 * members) made in C, byte for byte as NumPy writes them, so the data
 * tests, the fuzz seeds and tests/data/make_data need no Python.
 */
#ifndef CLT_NPYWRITE_H
#define CLT_NPYWRITE_H

#include <stddef.h>
#include <stdint.h>

/* An .npy image (malloc'd, *len bytes) of nbytes of values: descr such as
 * "<f4", shape of ndims, header padded to 64 bytes as NumPy 1.0 does. */
unsigned char *npy_image(const char *descr, const int64_t *shape, int ndims, const void *data, size_t nbytes,
                         size_t *len);
/* An .npz archive of k members names[i] (".npy" appended) holding the
 * images imgs[i]; deflated when deflated. */
unsigned char *npz_image(int k, const char *const *names, unsigned char *const *imgs, const size_t *lens,
                         int deflated, size_t *len);
/* Write n bytes to path; exits 99 on failure. */
void npy_write_file(const char *path, const void *data, size_t n);

#endif
