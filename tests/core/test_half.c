/*
 * test_half.c: the host fp16 conversions and reductions of src/core/half.c
 * against the independent reference of commtest.c: every half round-trips
 * exactly, float to half rounds to nearest even at every boundary
 * (65504, 65520 -> inf, 2^-24, 2^-25, ties, -0), and every vector loop of
 * the reductions (16-byte, AVX2) gives the bits of the scalar one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#include "commtest.h"
#include "testutil.h"

static int is_nan16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

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

START_TEST(every_half_round_trips) {
  for (uint32_t h = 0; h <= 0xffff; h++) {
    float f = clt__float_from_half((uint16_t)h);
    if (is_nan16((uint16_t)h)) {
      ck_assert_msg(isnan(f), "half 0x%04x is NaN, float %g", h, f);
      ck_assert_msg(clt__half_from_float(f) == 0x7e00, "NaN 0x%04x came back as 0x%04x", h, clt__half_from_float(f));
      continue;
    }
    /* == would let -0 pass for +0: compare bits, with the reference's value. */
    double want = ct_half_value((uint16_t)h);
    ck_assert_msg((double)f == want && !signbit(f) == !signbit(want), "half 0x%04x: float %.9g, expected %.9g", h, f,
                  want);
    ck_assert_msg(clt__half_from_float(f) == h, "half 0x%04x came back as 0x%04x", h, clt__half_from_float(f));
  }
}
END_TEST

static void check_to_half(float x) {
  uint16_t got = clt__half_from_float(x), want = ct_half(x);
  ck_assert_msg(got == want, "%.9g (0x%08x): 0x%04x, expected 0x%04x", x, bits_of(x), got, want);
}

START_TEST(boundaries_round_to_nearest_even) {
  const struct {
    float x;
    uint16_t h;
  } cases[] = {
      {0.0f, 0x0000},          {-0.0f, 0x8000},        {1.0f, 0x3c00},         {-2.0f, 0xc000},
      {65504.0f, 0x7bff},      {65519.99f, 0x7bff},    {65520.0f, 0x7c00},     {-65520.0f, 0xfc00},
      {1e9f, 0x7c00},          {INFINITY, 0x7c00},     {-INFINITY, 0xfc00},    {0x1p-24f, 0x0001},
      {0x1p-25f, 0x0000},      {0x1.000002p-25f, 0x0001}, {-0x1p-25f, 0x8000}, {0x1.8p-24f, 0x0002},
      {0x1p-14f, 0x0400},      {0x1.ff8p-15f, 0x03ff}, {0x1.ff0p-15f, 0x03fe},
      {0x1.ffcp-15f, 0x0400}, /* tie: 1023.5 2^-24 to even (up, to the smallest normal) */
      {0x1.ff4p-15f, 0x03fe}, /* tie: 1022.5 2^-24 to even (down) */
      {1.0f + 0x1p-11f, 0x3c00}, /* tie: to even (down) */
      {1.0f + 0x3p-11f, 0x3c02}, /* tie: to even (up) */
      {0x1.002002p+0f, 0x3c01}, /* one float ulp above the tie */
      {2048.0f + 1.0f, 0x6800}, /* 2049: tie between 2048 and 2050 */
      {2048.0f + 3.0f, 0x6802},
      {1e-10f, 0x0000},        {0x1p-149f, 0x0000},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    ck_assert_msg(ct_half(cases[k].x) == cases[k].h, "the reference: %a gives 0x%04x, not 0x%04x", cases[k].x,
                  ct_half(cases[k].x), cases[k].h);
    ck_assert_msg(clt__half_from_float(cases[k].x) == cases[k].h, "%a gives 0x%04x, expected 0x%04x", cases[k].x,
                  clt__half_from_float(cases[k].x), cases[k].h);
  }
  ck_assert(clt__half_from_float(NAN) == 0x7e00);
  ck_assert(clt__half_from_float(-NAN) == 0x7e00);
  ck_assert(clt__half_from_float(float_of(0x7f800001u)) == 0x7e00); /* a NaN with only low payload bits */
}
END_TEST

/* Around every half: the midpoints to its neighbours, and one float ulp
 * either side of them and of the half itself. */
START_TEST(around_every_half) {
  for (uint32_t h = 0; h < 0x7c00; h++) {
    double v = ct_half_value((uint16_t)h), next = h < 0x7bff ? ct_half_value((uint16_t)(h + 1)) : 65536.0;
    float mid = (float)((v + next) / 2); /* exact: 12 bits */
    float probes[] = {(float)v, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), nextafterf((float)v, 0),
                      nextafterf((float)v, INFINITY)};
    for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
      check_to_half(probes[k]);
      check_to_half(-probes[k]);
    }
  }
}
END_TEST

/* A stride through every float bit pattern (a prime, so every mantissa
 * position is hit): NaNs, infinities, float subnormals, the lot. */
START_TEST(strided_floats) {
  for (uint64_t u = 0; u <= 0xffffffffu; u += 65521) {
    float x = float_of((uint32_t)u);
    if (isnan(x))
      ck_assert(clt__half_from_float(x) == 0x7e00);
    else
      check_to_half(x);
  }
}
END_TEST

/* Halves from every class, so the vector loops meet subnormal results,
 * overflow, inf, NaN, inf - inf, signed zeros. */
static uint16_t mixed_half(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  uint16_t h = (uint16_t)(*state >> 48);
  switch ((*state >> 40) & 15) {
  case 0: return h & 0x83ff;                /* subnormal or zero */
  case 1: return (h & 0x8000) | 0x7c00;     /* inf */
  case 2: return (h & 0x8000) | 0x7bff;     /* the largest finite */
  case 3: return (h & 0x8000) | 0x0400 | (h & 7); /* just above subnormal */
  default: return h;
  }
}

/* Each loop this build and CPU have (16-byte vectors, AVX2, F16C), and the one
 * the library picks, against the scalar functions. */
static void check_loops(int impl) {
  enum { N = 4099 }; /* not a multiple of 8 or 16: the scalar tail runs too */
  uint64_t state = 42;
  uint16_t *dst = malloc(N * sizeof *dst), *want = malloc(N * sizeof *want), *src[3];
  for (int k = 0; k < 3; k++) src[k] = malloc(N * sizeof *src[k]);
  for (int round = 0; round < 50; round++) {
    for (int nsrc = 1; nsrc <= 3; nsrc++) {
      for (size_t i = 0; i < N; i++) {
        dst[i] = mixed_half(&state);
        for (int k = 0; k < nsrc; k++) src[k][i] = mixed_half(&state);
        float acc = clt__float_from_half(dst[i]);
        for (int k = 0; k < nsrc; k++) acc += clt__float_from_half(src[k][i]);
        want[i] = clt__half_from_float(acc);
      }
      if (impl < 0)
        clt__halves_sum(dst, (const uint16_t *const *)src, nsrc, N);
      else
        ck_assert_int_eq(clt__halves_sum_impl(impl, dst, (const uint16_t *const *)src, nsrc, N), 0);
      long bad = ct_first_diff_f16(dst, want, N);
      ck_assert_msg(bad < 0, "loop %d, %d sources, element %ld: 0x%04x, expected 0x%04x", impl, nsrc, bad,
                    bad < 0 ? 0 : dst[bad], bad < 0 ? 0 : want[bad]);
    }
    const float by[] = {2.0f, 3.0f, 7.0f, 1024.0f};
    for (size_t i = 0; i < N; i++) {
      dst[i] = mixed_half(&state);
      want[i] = clt__half_from_float(clt__float_from_half(dst[i]) / by[round % 4]);
    }
    if (impl < 0)
      clt__halves_divide(dst, N, by[round % 4]);
    else
      ck_assert_int_eq(clt__halves_divide_impl(impl, dst, N, by[round % 4]), 0);
    long bad = ct_first_diff_f16(dst, want, N);
    ck_assert_msg(bad < 0, "loop %d, divided by %g, element %ld: 0x%04x, expected 0x%04x", impl, by[round % 4], bad,
                  bad < 0 ? 0 : dst[bad], bad < 0 ? 0 : want[bad]);
  }
  for (int k = 0; k < 3; k++) free(src[k]);
  free(dst), free(want);
}

START_TEST(vector_loops_match_scalar) {
  uint16_t one = 0;
  int tested = 0;
  for (int impl = 0; impl < CLT__HALF_NIMPL; impl++) {
    if (clt__halves_sum_impl(impl, &one, NULL, 0, 0) < 0) {
      fprintf(stderr, "half loop %d: not in this build or CPU\n", impl);
      continue;
    }
    check_loops(impl);
    tested++;
  }
  ck_assert_int_ge(tested, 1);
  check_loops(-1);
  /* A tie: 1 + 2^-11 rounds to even, 1. */
  uint16_t x = 0x3c00, tiny = 0x1000;
  const uint16_t *s1[1] = {&tiny};
  clt__halves_sum(&x, s1, 1, 1);
  ck_assert_uint_eq(x, 0x3c00);
}
END_TEST

/* Non-finite inputs stay non-finite through a sum; overflow gives inf. */
START_TEST(sums_keep_non_finite) {
  uint16_t d[9] = {0x7c00, 0x3c00, 0x7e00, 0x7bff, 0xfc00, 0x7c00, 0, 0x7bff, 0xfbff};
  uint16_t s[9] = {0x3c00, 0x7c00, 0x3c00, 0x7bff, 0x3c00, 0xfc00, 0x7e01, 0x0001, 0xfbff};
  const uint16_t *src[1] = {s};
  clt__halves_sum(d, src, 1, 9);
  const uint16_t want[9] = {0x7c00, 0x7c00, 0x7e00, 0x7c00, 0xfc00, 0x7e00, 0x7e00, 0x7bff, 0xfc00};
  for (int i = 0; i < 9; i++) ck_assert_msg(d[i] == want[i], "element %d: 0x%04x, expected 0x%04x", i, d[i], want[i]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("half");
  TCase *tc = tcase_create("conversions");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, every_half_round_trips);
  tcase_add_test(tc, boundaries_round_to_nearest_even);
  tcase_add_test(tc, around_every_half);
  tcase_add_test(tc, strided_floats);
  tcase_add_test(tc, vector_loops_match_scalar);
  tcase_add_test(tc, sums_keep_non_finite);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
