/*
 * nnutil.h: what the nn test suites share: tensors made from host data in
 * buffers with guard elements around them (so a kernel that writes outside
 * its view is caught), conversions between float and double, errors
 * measured against double references, and central finite differences.
 */
#ifndef CLT_NNUTIL_H
#define CLT_NNUTIL_H

#include "testutil.h"

#include "nn/nn.h"
#include "ref/ref_nn.h"

/* Guard elements before and after every test tensor, and their value. */
#define NU_GUARD 3
#define NU_SENTINEL 1234.5f

/* A tensor of dtype (f32 or i32) with the given shape whose elements are
 * copied from host, or set to NaN (f32) / -7 (i32) when host is NULL, so an
 * output that is not written shows. Released by nu_free_all. */
clt_tensor nu_tensor(clt_context *ctx, clt_dtype dtype, const void *host, int ndim, const int64_t *shape);
#define NU_SHAPE(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), ((const int64_t[]){__VA_ARGS__})
/* nu_f32(ctx, host, NU_SHAPE(2, 3)) */
clt_tensor nu_f32(clt_context *ctx, const float *host, int ndim, const int64_t *shape);
/* Read the tensor's elements (n of them) to host. */
void nu_get(clt_context *ctx, const clt_tensor *t, void *host);
/* Assert that no guard element of any tensor made since nu_free_all changed. */
void nu_check_guards(clt_context *ctx, const char *what);
void nu_free_all(void);

/* n floats in [-1, 1) from ref_random, with exact zeros moved to 2^-16 (a
 * kink of relu must not sit under a finite difference); caller frees. */
float *nu_random(size_t n, unsigned seed);
/* n distinct values in [-1, 1), at least 2/n apart, in a shuffled order:
 * max pooling has no ties to break. */
float *nu_distinct(size_t n, unsigned seed);
double *nu_to_double(const float *x, size_t n);
float *nu_to_float(const double *x, size_t n);

/* Largest |got - want| / (1 + |want|); NaN or inf anywhere gives inf.
 * nu_err and nu_fd_error leave where the worst one was in nu_worst (the
 * index), nu_worst_got and nu_worst_want, for failure messages (NU_AT). */
double nu_err(const float *got, const double *want, size_t n);
extern size_t nu_worst;
extern double nu_worst_got, nu_worst_want;
#define NU_AT " at [%zu]: %.9g, want %.9g"
#define NU_AT_ARGS nu_worst, nu_worst_got, nu_worst_want

/* f(state) is a scalar function of the doubles p[0..n). Returns the largest
 * |grad[i] - fd_i| / (1 + |fd_i|) over up to max_points indices spread over
 * [0, n) (all when n <= max_points), fd_i the central difference
 * (f(p + h e_i) - f(p - h e_i)) / 2h. p is restored. */
typedef double (*nu_scalar_fn)(void *state);
double nu_fd_error(nu_scalar_fn f, void *state, double *p, size_t n, const float *grad, double h, size_t max_points);

/* sum(y * r) over n elements. */
double nu_dot(const double *y, const double *r, size_t n);

/* got - start in double, rounded to float: what a backward added to an
 * accumulating gradient that held `start`. Caller frees. */
float *nu_added(const float *got, const float *start, size_t n);
/* start + delta in double: the accumulator a backward should leave. */
double *nu_plus(const float *start, const double *delta, size_t n);

/* A float32 sum of k products of values of size ~1 errs by at most about
 * k * 2^-24 times the sum of |terms|, and with random signs typically by
 * sqrt(k) * 2^-24; 1e-5 + 1e-6 k sits between that and the O(1) errors of
 * a wrong index, window or missing term. Used wherever a result sums k
 * terms. */
#define NU_SUM_TOL(k) (1e-5 + 1e-6 * (double)(k))

/* Finite differences: central, step h = 1e-5 on inputs of size ~1, in
 * double. Truncation (h^2 times the third derivative) and rounding
 * (1e-16 |f| / h) both stay below 1e-8, far below float32's errors.
 * Piecewise-linear ops are exact as long as no kink lies within h of an
 * input (nu_random and nu_distinct see to that). At most NU_FD_POINTS
 * indices per tensor keep the suites fast. */
#define NU_FD_H 1e-5
#define NU_FD_POINTS 40

/* Assert that rc is `want` and that clt_last_error() contains every string:
 * NU_EXPECT(rc, CLT_ESHAPE, "conv2d forward", "x (2, 3) f32"). */
void nu_expect_error(int rc, int want, const char *const *parts);
#define NU_EXPECT(rc, want, ...) nu_expect_error((rc), (want), (const char *const[]){__VA_ARGS__, NULL})

/* Add a test case of the given tests to s: one case per layer family, so
 * CK_RUN_CASE=dropout runs just that one. */
void nu_add_case(Suite *s, const char *name, const TTest *const *tests);
#define NU_ADD_CASE(s, name, ...) nu_add_case((s), (name), (const TTest *const[]){__VA_ARGS__, NULL})

#endif
