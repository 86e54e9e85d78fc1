/* commtest.c: shared inputs and checks of the collective tests (see commtest.h). */
#include "commtest.h"

#include <string.h>

float ct_value(size_t i, int who, int salt) {
  return (float)((int)((i * 7 + (size_t)who * 13 + (size_t)salt * 5) % 31) - 15);
}

void ct_fill(float *x, size_t n, int who, int salt) {
  for (size_t i = 0; i < n; i++) x[i] = ct_value(i, who, salt);
}

void ct_expect(float *x, size_t n, int nranks, int replicas, int salt, int avg) {
  for (size_t i = 0; i < n; i++) {
    float sum = 0;
    for (int r = 0; r < nranks; r++)
      for (int q = 0; q < replicas; q++) sum += ct_value(i, r * CT_MAX_REPLICAS + q, salt);
    x[i] = avg ? sum / (float)(nranks * replicas) : sum;
  }
}

long ct_first_diff(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) return (long)i;
  return -1;
}

uint64_t ct_hash(const void *p, size_t bytes) {
  const unsigned char *c = p;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < bytes; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}
