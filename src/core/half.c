/*
 * half.c: IEEE 754 binary16 ("half", stored as uint16_t) to and from
 * binary32 on the host, for the fp16 all-reduce.
 *
 * Plain C11 integer arithmetic: no _Float16, no dependence on the
 * floating-point rounding mode or on excess precision, so every rank on
 * every architecture rounds the same way and the ranks' bits agree. The
 * reductions' vector loops give the same bits (F16C's instructions on x86
 * where the CPU has them; test_half checks each loop against these).
 *
 * binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
 * Largest finite 65504, smallest normal 2^-14, smallest subnormal 2^-24.
 */
#include "core/internal.h"

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
 * (0.85 ns, 2.4 GB/s), chosen at run time, as is F16C's (below), which
 * converts in one instruction where these take a dozen. */

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
#    define CLT__HALF_F16C 1
#    include <immintrin.h>
#  endif
#endif

#ifdef CLT__HALF_F16C
/* x86's F16C instructions convert 8 halves at a time. From half they are
 * exact; to half, with the rounding given in the instruction (not the
 * MXCSR's), they round to nearest, ties to even, subnormals included, and
 * give +-inf from 65520 up: the integer steps' bits, but for a NaN, whose
 * sign and payload they keep. NaN lanes become 0x7e00 as in
 * clt__half_from_float. The float additions are the other loops' (the
 * same order, the MXCSR's rounding). A sum of two buffers of 1M halves
 * on a Xeon (Skylake-AVX512): 0.18 ns an element, against 1.28 for the
 * AVX2 loop, 1.94 for 16-byte vectors and 5.8 for the scalar one. */
#  define F16C_TARGET __attribute__((target("avx,f16c")))

F16C_TARGET static inline __m128i halves_f16c(__m256 f) {
  __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  __m128i nan = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extractf128_si256(nan32, 1));
  return _mm_or_si128(_mm_andnot_si128(nan, h), _mm_and_si128(nan, _mm_set1_epi16(0x7e00)));
}

F16C_TARGET static inline __m256 floats_f16c(const uint16_t *h) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)h));
}

F16C_TARGET static size_t sum_f16c(uint16_t *dst, const uint16_t *const *src, int nsrc, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 acc = floats_f16c(dst + i);
    for (int k = 0; k < nsrc; k++) acc = _mm256_add_ps(acc, floats_f16c(src[k] + i));
    _mm_storeu_si128((__m128i *)(void *)(dst + i), halves_f16c(acc));
  }
  return i;
}

F16C_TARGET static size_t divide_f16c(uint16_t *x, size_t n, float by) {
  size_t i = 0;
  __m256 d = _mm256_set1_ps(by);
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(void *)(x + i), halves_f16c(_mm256_div_ps(floats_f16c(x + i), d)));
  return i;
}
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
#ifdef CLT__HALF_F16C
  case CLT__HALF_IMPL_F16C: return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#endif
  }
  return 0;
}

static int best_impl(void) {
  return impl_available(CLT__HALF_IMPL_F16C)   ? CLT__HALF_IMPL_F16C
         : impl_available(CLT__HALF_IMPL_AVX2) ? CLT__HALF_IMPL_AVX2
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
#ifdef CLT__HALF_F16C
  if (impl == CLT__HALF_IMPL_F16C) i = sum_f16c(dst, src, nsrc, n);
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
#ifdef CLT__HALF_F16C
  if (impl == CLT__HALF_IMPL_F16C) i = divide_f16c(x, n, by);
#endif
  divide_scalar(x, by, i, n);
  return CLT_OK;
}

void clt__halves_sum(uint16_t *dst, const uint16_t *const *src, int nsrc, size_t n) {
  clt__halves_sum_impl(best_impl(), dst, src, nsrc, n);
}

void clt__halves_divide(uint16_t *x, size_t n, float by) { clt__halves_divide_impl(best_impl(), x, n, by); }
