/*
 * half.c: IEEE 754 binary16 ("half", stored as uint16_t) to and from
 * binary32 on the host, for the fp16 all-reduce.
 *
 * Plain C11 integer arithmetic: no _Float16, no F16C, no dependence on the
 * floating-point rounding mode or on excess precision, so every rank on
 * every architecture rounds the same way and the ranks' bits agree.
 *
 * binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
 * Largest finite 65504, smallest normal 2^-14, smallest subnormal 2^-24.
 */
#include "internal.h"

#include <string.h>

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Every half is exactly a float: move the fields and rebias the exponent
 * (15 -> 127); subnormal halves become normal floats. */
float clt__float_from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return float_of(sign | 0x7f800000u | mant << 13); /* inf, NaN (payload kept) */
  if (exp != 0) return float_of(sign | (exp + 112) << 23 | mant << 13);
  if (mant == 0) return float_of(sign);
  /* Subnormal: mant 2^-24. Shift the leading 1 up to the hidden bit. */
  int e = 113;
  while (!(mant & 0x400u)) mant <<= 1, e--;
  return float_of(sign | (uint32_t)e << 23 | (mant & 0x3ffu) << 13);
}

/* Round to nearest, ties to even. In the normal range the low 13 of the
 * float's 23 mantissa bits go: adding 0xfff plus the lowest kept bit
 * carries exactly when the dropped part is above half, or is half and the
 * kept part is odd; a carry out of the mantissa bumps the exponent, which
 * is right (and gives inf at the top). */
uint16_t clt__half_from_float(float f) {
  uint32_t u = bits_of(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) { /* >= 65536, inf or NaN */
    if (u > 0x7f800000u) return 0x7e00u; /* the one quiet NaN (see internal.h) */
    return (uint16_t)(sign | 0x7c00u);
  }
  if (u >= 0x38800000u) /* >= 2^-14: a normal half (or inf after rounding) */
    return (uint16_t)(sign | ((u - (112u << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13));
  if (u <= 0x33000000u) return sign; /* <= 2^-25, half the smallest subnormal: ties to 0 */
  /* Subnormal: the value is m 2^(e - 150) with the hidden bit in m; in
   * units of 2^-24 that is m >> (126 - e), rounded by the dropped bits. */
  uint32_t e = u >> 23, m = (u & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - e, r = m >> shift, rest = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (r & 1u))) r++;
  return (uint16_t)(sign | r);
}

/* ---- reductions ------------------------------------------------------------------ */

/* Through float, one rounding per element and call. The scalar functions
 * branch on the class of each value and take about 3 ns an element, well
 * below memory speed, and an all-reduce converts every element at every
 * step. GCC and Clang vector types convert 8 halves at a time, branch-free,
 * with the same integer steps (one exact float subtraction aside), so the
 * bits are those of the scalar loop; a group of 8 with a subnormal result
 * (a sum below 2^-14: rare) is redone by the scalar loop. 16-byte vectors
 * are SSE2 and NEON registers; 8 halves are 4 lanes of 32 bits, the even
 * ones in the low halves of the lanes and the odd ones in the high halves
 * (or the other way round on big-endian machines: every step is per
 * element, so it does not matter). */
#if defined(__GNUC__) && !defined(CLT_HALF_SCALAR)
#  define CLT__HALF_VECTOR 1
typedef uint32_t clt__v4u __attribute__((vector_size(16)));
typedef int32_t clt__v4i __attribute__((vector_size(16)));
typedef float clt__v4f __attribute__((vector_size(16)));
#  define SPLAT(x) ((clt__v4i){(x), (x), (x), (x)})

/* Lanes holding a half in their low 16 bits to floats, as
 * clt__float_from_half. A subnormal half is renormalised by one float
 * subtraction, (2^-14 + m 2^-24) - 2^-14, exact in every rounding mode. */
static inline void floats_from_halves4(const clt__v4u *h, clt__v4f *f) {
  clt__v4u sign = (*h & 0x8000u) << 16, bits = (*h & 0x7fffu) << 13;
  clt__v4i exp = (clt__v4i)(bits & 0x0f800000u);
  clt__v4u special = (clt__v4u)(exp == SPLAT(0x0f800000)), subnormal = (clt__v4u)(exp == SPLAT(0));
  bits += (112u << 23) + (special & (112u << 23)); /* exponent 31 -> 255: inf, NaN */
  clt__v4u renorm = (clt__v4u)((clt__v4f)(bits + (1u << 23)) - 0x1p-14f);
  *f = (clt__v4f)(sign | (subnormal & renorm) | (~subnormal & bits));
}

/* Floats to halves in the low 16 bits of the lanes, as
 * clt__half_from_float, except that results below 2^-14 come out as zero:
 * *tiny gets the lanes where that was wrong. */
static inline void halves_from_floats4(const clt__v4f *f, clt__v4u *h, clt__v4u *tiny) {
  clt__v4u u = (clt__v4u)*f;
  clt__v4u sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  clt__v4i a = (clt__v4i)u; /* non-negative: signed compares are the cheap ones */
  clt__v4u normal = (u - (112u << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
  clt__v4u nan = (clt__v4u)(a > SPLAT(0x7f800000)), big = (clt__v4u)(a >= SPLAT(0x47800000));
  clt__v4u small = (clt__v4u)(a < SPLAT(0x38800000));
  clt__v4u special = (nan & 0x7e00u) | (~nan & (sign | 0x7c00u));
  *h = (big & special) | (~big & (sign | (~small & normal)));
  *tiny |= small & ~(clt__v4u)(a == SPLAT(0));
}

static inline int any_lane(const clt__v4u *v) {
  uint64_t two[2];
  memcpy(two, v, sizeof two);
  return (two[0] | two[1]) != 0;
}
#endif

static void sum_scalar(uint16_t *dst, const uint16_t *const *src, int nsrc, size_t i, size_t end) {
  for (; i < end; i++) {
    float acc = clt__float_from_half(dst[i]);
    for (int k = 0; k < nsrc; k++) acc += clt__float_from_half(src[k][i]);
    dst[i] = clt__half_from_float(acc);
  }
}

void clt__halves_sum(uint16_t *dst, const uint16_t *const *src, int nsrc, size_t n) {
  size_t i = 0;
#ifdef CLT__HALF_VECTOR
  for (; i + 8 <= n; i += 8) {
    clt__v4u w, lo, hi, tiny = {0};
    clt__v4f acc_lo, acc_hi, x;
    memcpy(&w, dst + i, sizeof w);
    lo = w & 0xffffu, hi = w >> 16;
    floats_from_halves4(&lo, &acc_lo);
    floats_from_halves4(&hi, &acc_hi);
    for (int k = 0; k < nsrc; k++) {
      memcpy(&w, src[k] + i, sizeof w);
      lo = w & 0xffffu, hi = w >> 16;
      floats_from_halves4(&lo, &x);
      acc_lo += x;
      floats_from_halves4(&hi, &x);
      acc_hi += x;
    }
    halves_from_floats4(&acc_lo, &lo, &tiny);
    halves_from_floats4(&acc_hi, &hi, &tiny);
    if (any_lane(&tiny)) {
      sum_scalar(dst, src, nsrc, i, i + 8);
      continue;
    }
    w = lo | hi << 16;
    memcpy(dst + i, &w, sizeof w);
  }
#endif
  sum_scalar(dst, src, nsrc, i, n);
}

static void divide_scalar(uint16_t *x, float by, size_t i, size_t end) {
  for (; i < end; i++) x[i] = clt__half_from_float(clt__float_from_half(x[i]) / by);
}

void clt__halves_divide(uint16_t *x, size_t n, float by) {
  size_t i = 0;
#ifdef CLT__HALF_VECTOR
  for (; i + 8 <= n; i += 8) {
    clt__v4u w, lo, hi, tiny = {0};
    clt__v4f f_lo, f_hi;
    memcpy(&w, x + i, sizeof w);
    lo = w & 0xffffu, hi = w >> 16;
    floats_from_halves4(&lo, &f_lo);
    floats_from_halves4(&hi, &f_hi);
    f_lo /= by;
    f_hi /= by;
    halves_from_floats4(&f_lo, &lo, &tiny);
    halves_from_floats4(&f_hi, &hi, &tiny);
    if (any_lane(&tiny)) {
      divide_scalar(x, by, i, i + 8);
      continue;
    }
    w = lo | hi << 16;
    memcpy(x + i, &w, sizeof w);
  }
#endif
  divide_scalar(x, by, i, n);
}
