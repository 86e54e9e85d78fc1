/*
 * elem.c: the numeric element types of users' files (NumPy's float16/32/64,
 * int8..int64, uint8..uint64; HDF5's and CSV's values come to the same
 * table), each one row: its NumPy kind and size, its name, and how a run of
 * little-endian values becomes float32. Big-endian files go through a
 * bounded staging buffer, byte-swapped, then the same row.
 *
 * The conversions are plain loops over memcpy'd values, which the compiler
 * vectorises: reading stays far above 1 GB/s a core (bench/data_read.sh).
 */
#include "data/data.h"

#include <string.h>

#define CONVERT(fn, T, expr)                                              \
  static void fn(const unsigned char *src, int64_t n, float *dst) {       \
    for (int64_t i = 0; i < n; i++) {                                     \
      T v;                                                                \
      memcpy(&v, src + i * (int64_t)sizeof(T), sizeof(T));               \
      dst[i] = (expr);                                                    \
    }                                                                     \
  }

/* The host is little-endian here; clt__elem_convert swaps on a big-endian
 * host as it does for a big-endian file. */
CONVERT(f32_to_f32, float, v)
CONVERT(f64_to_f32, double, (float)v)
CONVERT(i8_to_f32, int8_t, (float)v)
CONVERT(u8_to_f32, uint8_t, (float)v)
CONVERT(i16_to_f32, int16_t, (float)v)
CONVERT(u16_to_f32, uint16_t, (float)v)
CONVERT(i32_to_f32, int32_t, (float)v)
CONVERT(u32_to_f32, uint32_t, (float)v)
CONVERT(i64_to_f32, int64_t, (float)v)
CONVERT(u64_to_f32, uint64_t, (float)v)
CONVERT(f16_to_f32, uint16_t, clt__float_from_half(v))

static const clt__elem elems[] = {
    {'f', 2, "float16", f16_to_f32}, {'f', 4, "float32", f32_to_f32}, {'f', 8, "float64", f64_to_f32},
    {'i', 1, "int8", i8_to_f32},     {'i', 2, "int16", i16_to_f32},   {'i', 4, "int32", i32_to_f32},
    {'i', 8, "int64", i64_to_f32},   {'u', 1, "uint8", u8_to_f32},    {'u', 2, "uint16", u16_to_f32},
    {'u', 4, "uint32", u32_to_f32},  {'u', 8, "uint64", u64_to_f32},
};

const clt__elem *clt__elem_find(char kind, int size) {
  for (size_t i = 0; i < sizeof elems / sizeof elems[0]; i++)
    if (elems[i].kind == kind && elems[i].size == size) return &elems[i];
  return NULL;
}

const char *clt__elem_names(void) {
  return "float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64";
}

void clt__elem_convert(const clt__elem *e, const void *src, int64_t n, int big, float *dst) {
  const unsigned char *s = src;
  if (big == clt__host_is_big_endian() || e->size == 1) {
    if (e->kind == 'f' && e->size == 4)
      memcpy(dst, s, (size_t)n * 4); /* float32 as stored: a copy */
    else
      e->to_f32(s, n, dst);
    return;
  }
  unsigned char buf[4096];
  const int64_t per = (int64_t)sizeof buf / e->size;
  for (int64_t at = 0; at < n; at += per) {
    int64_t k = n - at < per ? n - at : per;
    for (int64_t i = 0; i < k; i++)
      for (int b = 0; b < e->size; b++) buf[i * e->size + b] = s[(at + i) * e->size + (e->size - 1 - b)];
    e->to_f32(buf, k, dst + at);
  }
}
