/*
 * commtest.h: what the collective tests share: inputs whose sums are exact
 * in float32 in any order (small integers), so results can be compared bit
 * for bit, the expected sums, and a hash for comparing buffers across ranks;
 * and for fp16, a reference conversion and the documented reduction order.
 */
#ifndef CLT_COMMTEST_H
#define CLT_COMMTEST_H

#include <stddef.h>
#include <stdint.h>

#include <cltrain/opencl.h>

/* Contributor `who` (rank * CT_MAX_REPLICAS + replica), element i: an
 * integer in [-15, 15], different for every contributor and salt. */
#define CT_MAX_REPLICAS 8
float ct_value(size_t i, int who, int salt);
void ct_fill(float *x, size_t n, int who, int salt);
/* x[i] = sum over ranks 0..nranks-1 and replicas 0..replicas-1 of ct_value,
 * divided by (nranks * replicas) when avg. */
void ct_expect(float *x, size_t n, int nranks, int replicas, int salt, int avg);
/* Index of the first element where a and b differ in bits, or -1. */
long ct_first_diff(const float *a, const float *b, size_t n);
uint64_t ct_hash(const void *p, size_t bytes);

/* ---- fp16 (IEEE binary16 in uint16_t) -----------------------------------
 * A reference independent of src/core/half.c: through double with frexp, ldexp
 * and nearbyint (round to nearest even in the default rounding mode). */
uint16_t ct_half(float x);          /* NaN gives 0x7e00 */
double ct_half_value(uint16_t h);   /* exact; NaN for NaN */
int ct_half_finite(uint16_t h);
/* One reduction step of the fp16 collectives: a + b in float, rounded to half. */
uint16_t ct_half_add(uint16_t a, uint16_t b);
/* Contributor who's element i: a half of either sign and a magnitude from
 * 2^-18 to 2^7 (some subnormal), different for every contributor and salt. */
uint16_t ct_half_input(size_t i, int who, int salt);
/* The fp16 all-reduce of ct_half_input over nranks ranks of `replicas`
 * replicas, step by step as the library documents it: each rank's replicas
 * added in float and rounded once, then pairwise float additions rounded
 * to half in the order of `algorithm` (clt_allreduce_plan_algorithm; "shm":
 * all ranks added in float in rank order, rounded once), then
 * for an average one division by nranks * replicas, rounded. */
void ct_expect_f16(uint16_t *x, size_t n, int nranks, int replicas, int salt, int avg, const char *algorithm);
/* |x[i] - exact sum| within the rounding of every step, for every i: the
 * first element that is not, or -1. */
long ct_f16_off_exact(const uint16_t *x, size_t n, int nranks, int replicas, int salt);
/* Index of the first element where a and b differ in bits, or -1. */
long ct_first_diff_f16(const uint16_t *a, const uint16_t *b, size_t n);

/* A device buffer of n halves copied from host (NULL: left as made; needs
 * testutil.h's Check and OpenCL), and reading n halves back from element off. */
cl_mem ct_f16_buffer(clt_context *ctx, const uint16_t *host, size_t n);
void ct_f16_read(clt_context *ctx, cl_mem buf, size_t off, uint16_t *host, size_t n);

#endif
