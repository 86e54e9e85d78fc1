/* nnutil.c: shared helpers of the nn test suites (see nnutil.h). */
#include "nnutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUFS 256
static struct {
  cl_mem buf;
  size_t n; /* elements in the view */
} bufs[MAX_BUFS];
static int nbufs;

clt_tensor nu_tensor(clt_context *ctx, clt_dtype dtype, const void *host, int ndim, const int64_t *shape) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
  size_t total = n + 2 * NU_GUARD;
  uint32_t *init = malloc(total * 4);
  float sentinel = NU_SENTINEL, nan = NAN;
  int32_t fill_i = -7;
  for (size_t i = 0; i < total; i++) memcpy(init + i, &sentinel, 4);
  if (host)
    memcpy(init + NU_GUARD, host, n * 4);
  else
    for (size_t i = 0; i < n; i++) memcpy(init + NU_GUARD + i, dtype == CLT_I32 ? (void *)&fill_i : (void *)&nan, 4);
  cl_mem buf = tu_buffer(ctx, (const float *)init, total);
  free(init);
  ck_assert_int_lt(nbufs, MAX_BUFS);
  bufs[nbufs].buf = buf;
  bufs[nbufs].n = n;
  nbufs++;
  clt_tensor t;
  ck_assert_msg(clt_tensor_view(buf, NU_GUARD * 4, dtype, ndim, shape, &t) == 0, "%s", clt_last_error());
  return t;
}

clt_tensor nu_f32(clt_context *ctx, const float *host, int ndim, const int64_t *shape) {
  return nu_tensor(ctx, CLT_F32, host, ndim, shape);
}

void nu_get(clt_context *ctx, const clt_tensor *t, void *host) {
  ck_assert_msg(clt_tensor_download(ctx, t, host, clt_tensor_bytes(t)) == 0, "%s", clt_last_error());
}

void nu_check_guards(clt_context *ctx, const char *what) {
  for (int b = 0; b < nbufs; b++) {
    float g[NU_GUARD];
    tu_read(ctx, bufs[b].buf, 0, g, NU_GUARD);
    for (int i = 0; i < NU_GUARD; i++)
      ck_assert_msg(g[i] == NU_SENTINEL, "%s on %s: guard before tensor %d overwritten", what, tu_name(ctx), b);
    tu_read(ctx, bufs[b].buf, NU_GUARD + bufs[b].n, g, NU_GUARD);
    for (int i = 0; i < NU_GUARD; i++)
      ck_assert_msg(g[i] == NU_SENTINEL, "%s on %s: guard after tensor %d overwritten", what, tu_name(ctx), b);
  }
}

void nu_free_all(void) {
  for (int b = 0; b < nbufs; b++) clt_buffer_release(bufs[b].buf);
  nbufs = 0;
}

float *nu_random(size_t n, unsigned seed) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  ref_random(x, n, seed);
  for (size_t i = 0; i < n; i++)
    if (x[i] == 0.0f) x[i] = 1.0f / 65536;
  return x;
}

float *nu_distinct(size_t n, unsigned seed) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = -1.0f + 2.0f * (float)i / (float)n;
  unsigned s = seed * 2654435761u + 12345u;
  for (size_t i = n; i > 1; i--) { /* Fisher-Yates with a fixed LCG */
    s = s * 1664525u + 1013904223u;
    size_t j = (s >> 8) % i;
    float t = x[i - 1];
    x[i - 1] = x[j];
    x[j] = t;
  }
  return x;
}

double *nu_to_double(const float *x, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

float *nu_to_float(const double *x, size_t n) {
  float *f = malloc((n ? n : 1) * sizeof *f);
  for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
  return f;
}

size_t nu_worst;
double nu_worst_got, nu_worst_want;

double nu_err(const float *got, const double *want, size_t n) {
  double worst = 0;
  nu_worst = 0, nu_worst_got = nu_worst_want = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]) / (1.0 + fabs(want[i]));
    if (!isfinite(e)) e = INFINITY;
    if (e > worst || (i == 0 && e == worst)) worst = e, nu_worst = i, nu_worst_got = got[i], nu_worst_want = want[i];
    if (isinf(e)) break;
  }
  return worst;
}

double nu_fd_error(nu_scalar_fn f, void *state, double *p, size_t n, const float *grad, double h, size_t max_points) {
  double worst = 0;
  nu_worst = 0, nu_worst_got = nu_worst_want = 0;
  size_t step = n <= max_points ? 1 : (n + max_points - 1) / max_points;
  for (size_t i = (n > max_points) ? (n * 7919) % step : 0; i < n; i += step) {
    double keep = p[i];
    p[i] = keep + h;
    double fp = f(state);
    p[i] = keep - h;
    double fm = f(state);
    p[i] = keep;
    double fd = (fp - fm) / (2 * h);
    double e = fabs((double)grad[i] - fd) / (1.0 + fabs(fd));
    if (!isfinite(e)) e = INFINITY;
    if (e > worst || (i == 0 && e == worst)) worst = e, nu_worst = i, nu_worst_got = grad[i], nu_worst_want = fd;
    if (isinf(e)) break;
  }
  return worst;
}

double nu_dot(const double *y, const double *r, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += y[i] * r[i];
  return s;
}

float *nu_added(const float *got, const float *start, size_t n) {
  float *g = malloc((n ? n : 1) * sizeof *g);
  for (size_t i = 0; i < n; i++) g[i] = (float)((double)got[i] - (double)start[i]);
  return g;
}

double *nu_plus(const float *start, const double *delta, size_t n) {
  double *s = malloc((n ? n : 1) * sizeof *s);
  for (size_t i = 0; i < n; i++) s[i] = (double)start[i] + delta[i];
  return s;
}

void nu_expect_error(int rc, int want, const char *const *parts) {
  ck_assert_msg(rc == want, "got %s, expected %s: %s", clt_status_name(rc), clt_status_name(want), clt_last_error());
  for (; *parts; parts++)
    ck_assert_msg(strstr(clt_last_error(), *parts) != NULL, "no '%s' in: %s", *parts, clt_last_error());
}

void nu_add_case(Suite *s, const char *name, const TTest *const *tests) {
  TCase *tc = tcase_create(name);
  for (; *tests; tests++) tcase_add_test(tc, *tests);
  suite_add_tcase(s, tc);
}
