/* commtest.c: shared inputs and checks of the collective tests (see commtest.h). */
#include "commtest.h"
#include "testutil.h"

#include <math.h>
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

/* ---- fp16 ------------------------------------------------------------------ */

uint16_t ct_half(float x) {
  if (isnan(x)) return 0x7e00;
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  double a = fabs((double)x);
  if (a >= 65520.0) return sign | 0x7c00; /* halfway to 2^16 rounds up (65504 is odd) */
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  int lo = e - 1 < -14 ? -14 : e - 1;
  double q = nearbyint(ldexp(a, 10 - lo)); /* units of 2^(lo-10): 1024..2048, or below for subnormals */
  if (q >= 2048) q /= 2, lo++;
  if (q < 1024) return sign | (uint16_t)q;
  return sign | (uint16_t)((lo + 15) << 10) | (uint16_t)(q - 1024);
}

double ct_half_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double s = h & 0x8000 ? -1.0 : 1.0;
  if (e == 31) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexp(m, -24);
  return s * ldexp(1024 + m, e - 25);
}

int ct_half_finite(uint16_t h) { return (h & 0x7c00) != 0x7c00; }

uint16_t ct_half_input(size_t i, int who, int salt) {
  uint64_t z = (uint64_t)i * 0x9e3779b97f4a7c15ull + (uint64_t)who * 0xbf58476d1ce4e5b9ull +
               (uint64_t)salt * 0x94d049bb133111ebull; /* a hash of (i, who, salt) */
  z ^= z >> 31;
  z *= 0xd6e9e3c2bbab3a5dull;
  z ^= z >> 29;
  float m = 1.0f + (float)(z & 0x3ff) / 1024.0f;
  int e = (int)((z >> 10) % 25) - 18;
  return ct_half((z >> 20) & 1 ? -ldexpf(m, e) : ldexpf(m, e));
}

static float f16(uint16_t h) { return (float)ct_half_value(h); }
static uint16_t add16(uint16_t a, uint16_t b) { return ct_half(f16(a) + f16(b)); }
uint16_t ct_half_add(uint16_t a, uint16_t b) { return add16(a, b); }

/* Rank r's contribution to element i: its replicas added in float, rounded once. */
static uint16_t local_sum(size_t i, int r, int replicas, int salt) {
  float acc = f16(ct_half_input(i, r * CT_MAX_REPLICAS, salt));
  for (int q = 1; q < replicas; q++) acc += f16(ct_half_input(i, r * CT_MAX_REPLICAS + q, salt));
  return ct_half(acc);
}

/* Element i of segment j: summed from rank j going right (src/comm/ring.c). */
static uint16_t ring_sum(size_t i, size_t count, int nranks, const uint16_t *local) {
  size_t base = count / (size_t)nranks, rem = count % (size_t)nranks, off = 0;
  int j = 0;
  for (; j < nranks - 1; j++) {
    size_t len = base + ((size_t)j < rem);
    if (i < off + len) break;
    off += len;
  }
  uint16_t acc = local[j];
  for (int k = 1; k < nranks; k++) acc = add16(acc, local[(j + k) % nranks]);
  return acc;
}

/* Pairs below 2E folded first, then a butterfly over P = 2^k ranks, pairs
 * differing in bit 0 first (small.c), or in the highest bit first
 * (Rabenseifner's halving, halving.c). */
static uint16_t butterfly_sum(int nranks, const uint16_t *local, int highest_first) {
  uint16_t v[64];
  int p = 1;
  while (p * 2 <= nranks) p *= 2;
  int extra = nranks - p;
  for (int r = 0; r < nranks; r++) {
    if (r < 2 * extra && r % 2 == 1) v[r / 2] = add16(local[r - 1], local[r]);
    if (r >= 2 * extra) v[r - extra] = local[r];
  }
  for (int k = 1; k < p; k <<= 1) {
    int mask = highest_first ? p / (2 * k) : k;
    uint16_t next[64];
    for (int r = 0; r < p; r++) next[r] = add16(v[r], v[r ^ mask]);
    memcpy(v, next, (size_t)p * sizeof *v);
  }
  return v[0];
}

void ct_expect_f16(uint16_t *x, size_t n, int nranks, int replicas, int salt, int avg, const char *algorithm) {
  uint16_t local[64];
  for (size_t i = 0; i < n; i++) {
    for (int r = 0; r < nranks; r++) local[r] = local_sum(i, r, replicas, salt);
    uint16_t acc = local[0];
    if (strcmp(algorithm, "ring") == 0) {
      acc = ring_sum(i, n, nranks, local);
    } else if (strcmp(algorithm, "recursive-doubling") == 0) {
      acc = butterfly_sum(nranks, local, 0);
    } else if (strcmp(algorithm, "rabenseifner") == 0) {
      acc = butterfly_sum(nranks, local, 1);
    } else if (strcmp(algorithm, "shm") == 0) {
      /* Added in float in rank order, rounded once (src/comm/shm.c). */
      float sum = f16(local[0]);
      for (int r = 1; r < nranks; r++) sum += f16(local[r]);
      acc = ct_half(sum);
    } else { /* "gather": in rank order on rank 0; "local": one rank */
      for (int r = 1; r < nranks; r++) acc = add16(acc, local[r]);
    }
    x[i] = avg ? ct_half(f16(acc) / (float)(nranks * replicas)) : acc;
  }
}

long ct_f16_off_exact(const uint16_t *x, size_t n, int nranks, int replicas, int salt) {
  /* Each of the at most nranks * replicas roundings to half is off by at
   * most 2^-11 of a partial sum (<= the sum of magnitudes), or 2^-25 in
   * the subnormal range; the float additions before them by far less. */
  int steps = nranks * replicas;
  for (size_t i = 0; i < n; i++) {
    double exact = 0, mag = 0;
    for (int r = 0; r < nranks; r++)
      for (int q = 0; q < replicas; q++) {
        double v = ct_half_value(ct_half_input(i, r * CT_MAX_REPLICAS + q, salt));
        exact += v, mag += fabs(v);
      }
    double tol = steps * (ldexp(mag, -10) + ldexp(1.0, -24));
    if (!(fabs(ct_half_value(x[i]) - exact) <= tol)) return (long)i;
  }
  return -1;
}

long ct_first_diff_f16(const uint16_t *a, const uint16_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) return (long)i;
  return -1;
}

cl_mem ct_f16_buffer(clt_context *ctx, const uint16_t *host, size_t n) {
  cl_mem buf = NULL;
  ck_assert_msg(clt_buffer_create(ctx, n * sizeof *host, &buf) == 0, "%s", clt_last_error());
  if (host)
    ck_assert_int_eq(clEnqueueWriteBuffer(clt_context_queue(ctx), buf, CL_TRUE, 0, n * sizeof *host, host, 0, NULL,
                                          NULL),
                     CL_SUCCESS);
  return buf;
}

void ct_f16_read(clt_context *ctx, cl_mem buf, size_t off, uint16_t *host, size_t n) {
  ck_assert_int_eq(clEnqueueReadBuffer(clt_context_queue(ctx), buf, CL_TRUE, off * sizeof *host, n * sizeof *host, host,
                                       0, NULL, NULL),
                   CL_SUCCESS);
}
