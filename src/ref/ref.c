/* ref.c: plain-C references for the kernels (see ref.h). */
#include "ref.h"

#include <math.h>

void ref_sgemm(int ta, int tb, size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
               const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double acc = 0;
      for (size_t p = 0; p < k; p++)
        acc += (double)(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = (float)(alpha * acc + (double)beta * c[i * ldc + j]);
    }
}

double ref_sum(const float *x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += x[i];
  return s;
}

double ref_sumsq(const float *x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return s;
}

double ref_max_rel_error(const float *got, const float *want, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]) / (1.0 + fabs(want[i]));
    if (isnan(e)) return INFINITY;
    if (e > worst) worst = e;
  }
  return worst;
}

void ref_random(float *x, size_t n, unsigned seed) {
  unsigned s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
}
