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
 * branch on the class of each value: a sum of two buffers takes about
 * 5 ns an element that way (380 MB/s of fp16 on an AMD EPYC core), far
 * below memory speed, and an all-reduce does one at every step. GCC and
 * Clang vector types convert many halves at a time, branch-free, with the
 * same integer steps (one exact float subtraction aside), so the bits are
 * those of the scalar loop (test_half checks each width against it).
 * half_simd.h has those loops; they are built for 16-byte vectors (SSE2,
 * NEON: 1.4 ns an element) and, on x86, also for AVX2's 32-byte ones
 * (0.85 ns, 2.4 GB/s), chosen at run time. */

static void sum_scalar(uint16_t *dst, const uint16_t *const *src, int nsrc, size_t i, size_t end) {
  for (; i < end; i++) {
    float acc = clt__float_from_half(dst[i]);
    for (int k = 0; k < nsrc; k++) acc += clt__float_from_half(src[k][i]);
    dst[i] = clt__half_from_float(acc);
  }
}

static void divide_scalar(uint16_t *x, float by, size_t i, size_t end) {
  for (; i < end; i++) x[i] = clt__half_from_float(clt__float_from_half(x[i]) / by);
}

#if defined(__GNUC__) && !defined(CLT_HALF_SCALAR)
#  define CLT__HALF_V16 1
#  define HS_BYTES 16
#  define HS_NAME(x) x##_v16
#  define HS_TARGET
#  include "half_simd.h"
#  if defined(__x86_64__) || defined(__i386__)
#    define CLT__HALF_AVX2 1
#    define HS_BYTES 32
#    define HS_NAME(x) x##_avx2
#    define HS_TARGET __attribute__((target("avx2")))
#    include "half_simd.h"
#  endif
#endif

static int impl_available(int impl) {
  switch (impl) {
  case CLT__HALF_IMPL_SCALAR: return 1;
#ifdef CLT__HALF_V16
  case CLT__HALF_IMPL_V16: return 1;
#endif
#ifdef CLT__HALF_AVX2
  case CLT__HALF_IMPL_AVX2: return __builtin_cpu_supports("avx2") != 0;
#endif
  }
  return 0;
}

static int best_impl(void) {
  return impl_available(CLT__HALF_IMPL_AVX2) ? CLT__HALF_IMPL_AVX2
         : impl_available(CLT__HALF_IMPL_V16) ? CLT__HALF_IMPL_V16
                                              : CLT__HALF_IMPL_SCALAR;
}

int clt__halves_sum_impl(int impl, uint16_t *dst, const uint16_t *const *src, int nsrc, size_t n) {
  size_t i = 0;
  if (!impl_available(impl)) return CLT_EUNSUPPORTED;
#ifdef CLT__HALF_V16
  if (impl == CLT__HALF_IMPL_V16) i = sum_v16(dst, src, nsrc, n);
#endif
#ifdef CLT__HALF_AVX2
  if (impl == CLT__HALF_IMPL_AVX2) i = sum_avx2(dst, src, nsrc, n);
#endif
  sum_scalar(dst, src, nsrc, i, n);
  return CLT_OK;
}

int clt__halves_divide_impl(int impl, uint16_t *x, size_t n, float by) {
  size_t i = 0;
  if (!impl_available(impl)) return CLT_EUNSUPPORTED;
#ifdef CLT__HALF_V16
  if (impl == CLT__HALF_IMPL_V16) i = divide_v16(x, n, by);
#endif
#ifdef CLT__HALF_AVX2
  if (impl == CLT__HALF_IMPL_AVX2) i = divide_avx2(x, n, by);
#endif
  divide_scalar(x, by, i, n);
  return CLT_OK;
}

void clt__halves_sum(uint16_t *dst, const uint16_t *const *src, int nsrc, size_t n) {
  clt__halves_sum_impl(best_impl(), dst, src, nsrc, n);
}

void clt__halves_divide(uint16_t *x, size_t n, float by) { clt__halves_divide_impl(best_impl(), x, n, by); }
