/*
 * half_simd.h: the vector loops of half.c's fp16 reductions, written once
 * for any vector width. half.c includes it once per width, with HS_BYTES
 * (the vector size), HS_NAME(x) (the names of this width's functions) and
 * HS_TARGET (a target attribute, or nothing) defined; it is not a header
 * of its own, and uses half.c's scalar loops for the rare groups with a
 * subnormal result.
 *
 * A vector of HS_BYTES holds HS_BYTES / 4 lanes of 32 bits, each two
 * halves: the even elements in the low halves of the lanes, the odd ones
 * in the high halves (or the other way round on big-endian machines: every
 * step is per element, so it does not matter).
 */

#define HS_STEP (HS_BYTES / 2) /* halves per vector */
#define VU HS_NAME(vu)
#define VI HS_NAME(vi)
#define VF HS_NAME(vf)
#define SPLAT(x) ((VI){0} + (x))

typedef uint32_t VU __attribute__((vector_size(HS_BYTES)));
typedef int32_t VI __attribute__((vector_size(HS_BYTES)));
typedef float VF __attribute__((vector_size(HS_BYTES)));

/* Lanes holding a half in their low 16 bits to floats, as
 * clt__float_from_half. A subnormal half is renormalised by one float
 * subtraction, (2^-14 + m 2^-24) - 2^-14, exact in every rounding mode
 * (and with denormals flushed: every value involved is a normal float). */
HS_TARGET static inline void HS_NAME(floats_from_halves)(const VU *h, VF *f) {
  VU sign = (*h & 0x8000u) << 16, bits = (*h & 0x7fffu) << 13;
  VI exp = (VI)(bits & 0x0f800000u);
  VU special = (VU)(exp == SPLAT(0x0f800000)), subnormal = (VU)(exp == SPLAT(0));
  bits += (112u << 23) + (special & (112u << 23)); /* exponent 31 -> 255: inf, NaN */
  VU renorm = (VU)((VF)(bits + (1u << 23)) - 0x1p-14f);
  *f = (VF)(sign | (subnormal & renorm) | (~subnormal & bits));
}

/* Floats to halves in the low 16 bits of the lanes, as
 * clt__half_from_float, except that results below 2^-14 come out as zero:
 * *tiny gets the lanes where that was wrong. */
HS_TARGET static inline void HS_NAME(halves_from_floats)(const VF *f, VU *h, VU *tiny) {
  VU u = (VU)*f;
  VU sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  VI a = (VI)u; /* non-negative: signed compares are the cheap ones */
  VU normal = (u - (112u << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
  VU nan = (VU)(a > SPLAT(0x7f800000)), big = (VU)(a >= SPLAT(0x47800000));
  VU small = (VU)(a < SPLAT(0x38800000));
  VU special = (nan & 0x7e00u) | (~nan & (sign | 0x7c00u));
  *h = (big & special) | (~big & (sign | (~small & normal)));
  *tiny |= small & ~(VU)(a == SPLAT(0));
}

HS_TARGET static inline int HS_NAME(any_lane)(const VU *v) {
  uint64_t w[HS_BYTES / 8], any = 0;
  memcpy(w, v, sizeof w);
  for (size_t k = 0; k < HS_BYTES / 8; k++) any |= w[k];
  return any != 0;
}

/* clt__halves_sum over the whole vectors of [0, n); returns where the
 * caller's scalar loop takes over. */
HS_TARGET static size_t HS_NAME(sum)(uint16_t *dst, const uint16_t *const *src, int nsrc, size_t n) {
  size_t i = 0;
  for (; i + HS_STEP <= n; i += HS_STEP) {
    VU w, lo, hi, tiny = {0};
    VF acc_lo, acc_hi, x;
    memcpy(&w, dst + i, sizeof w);
    lo = w & 0xffffu, hi = w >> 16;
    HS_NAME(floats_from_halves)(&lo, &acc_lo);
    HS_NAME(floats_from_halves)(&hi, &acc_hi);
    for (int k = 0; k < nsrc; k++) {
      memcpy(&w, src[k] + i, sizeof w);
      lo = w & 0xffffu, hi = w >> 16;
      HS_NAME(floats_from_halves)(&lo, &x);
      acc_lo += x;
      HS_NAME(floats_from_halves)(&hi, &x);
      acc_hi += x;
    }
    HS_NAME(halves_from_floats)(&acc_lo, &lo, &tiny);
    HS_NAME(halves_from_floats)(&acc_hi, &hi, &tiny);
    if (HS_NAME(any_lane)(&tiny)) {
      sum_scalar(dst, src, nsrc, i, i + HS_STEP);
      continue;
    }
    w = lo | hi << 16;
    memcpy(dst + i, &w, sizeof w);
  }
  return i;
}

/* clt__halves_divide likewise. */
HS_TARGET static size_t HS_NAME(divide)(uint16_t *x, size_t n, float by) {
  size_t i = 0;
  for (; i + HS_STEP <= n; i += HS_STEP) {
    VU w, lo, hi, tiny = {0};
    VF f_lo, f_hi;
    memcpy(&w, x + i, sizeof w);
    lo = w & 0xffffu, hi = w >> 16;
    HS_NAME(floats_from_halves)(&lo, &f_lo);
    HS_NAME(floats_from_halves)(&hi, &f_hi);
    f_lo /= by;
    f_hi /= by;
    HS_NAME(halves_from_floats)(&f_lo, &lo, &tiny);
    HS_NAME(halves_from_floats)(&f_hi, &hi, &tiny);
    if (HS_NAME(any_lane)(&tiny)) {
      divide_scalar(x, by, i, i + HS_STEP);
      continue;
    }
    w = lo | hi << 16;
    memcpy(x + i, &w, sizeof w);
  }
  return i;
}

#undef SPLAT
#undef VF
#undef VI
#undef VU
#undef HS_STEP
#undef HS_TARGET
#undef HS_NAME
#undef HS_BYTES
