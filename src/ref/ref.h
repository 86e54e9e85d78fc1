/* ref.h: plain-C reference versions of the library's kernels. Not part of
 * libcltrain: compiled into the tests and into `cltrain bench`'s self-check. */
#ifndef CLT_REF_H
#define CLT_REF_H

#include <stddef.h>

/* Row-major C = alpha op(A) op(B) + beta C, accumulated in double. */
void ref_sgemm(int ta, int tb, size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
               const float *b, size_t ldb, float beta, float *c, size_t ldc);
double ref_sum(const float *x, size_t n);
double ref_sumsq(const float *x, size_t n);

/* Largest |got - want| / (1 + |want|) over n values; NaN anywhere gives inf. */
double ref_max_rel_error(const float *got, const float *want, size_t n);

/* Uniform floats in [-1, 1) from a fixed LCG, the same on every machine. */
void ref_random(float *x, size_t n, unsigned seed);

#endif
