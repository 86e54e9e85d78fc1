/*
 * commtest.h: what the collective tests share: inputs whose sums are exact
 * in float32 in any order (small integers), so results can be compared bit
 * for bit, the expected sums, and a hash for comparing buffers across ranks.
 */
#ifndef CLT_COMMTEST_H
#define CLT_COMMTEST_H

#include <stddef.h>
#include <stdint.h>

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

#endif
