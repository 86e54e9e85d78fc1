/*
 * test_half_layers.c: mixed precision in the layers of src/nn/ that store
 * activations as f16 (cl/prelude.cl: stored half, computed float): the
 * activations, bias add and gradient, dropout, layernorm, the attention
 * core, softmax cross-entropy and max / average / global-average pooling
 * (and 1-D and 3-D max / average pooling), batchnorm, forward and
 * backward, and flatten, on every device (PoCL and rusticl).
 *
 * Method: random f32 inputs are rounded to half on the device (clt_convert
 * f32 -> f16 -> f32, checked against a host rounding). The F32 path runs on
 * the rounded values and the F16 path on the half ones. Both kernels then
 * compute in float from the same values in the same order, so the only
 * extra rounding on the F16 path is its final store: each f16 output must
 * be EXACTLY the round-to-nearest-even to half of the F32 path's output
 * (bit for bit, signed zeros and all), and an index output (max-pool
 * argmax) or a dropout mask exactly the F32 path's. Outputs that stay f32
 * (db, dgamma, dbeta, layernorm's mean and rstd, the losses) are the same
 * float sums of the same terms; they are compared with NU_SUM_TOL of the
 * number of terms (nnutil.h), which leaves room for a compiler that orders
 * a sum differently in the two program variants.
 *
 * Also: values beyond half's range (65504; 65520 and up round to inf)
 * stored as inf, by a forward (leaky_relu, bias, dropout) and by the
 * loss-scaled gradient of softmax cross-entropy; and a call whose
 * activations mix f16 and f32 fails with CLT_ESHAPE naming both.
 *
 * f16 tensors get guard elements too, and outputs start as NaN.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/common.h"
#include "nnutil.h"

/* ---- f16 tensors and half rounding on the host ----------------------------- */

#define HF_GUARD 3
#define HF_GUARD_BITS 0x5a5a /* around every f16 tensor */
#define HF_UNSET_BITS 0x7e00 /* a NaN: an output element not written shows */

#define HF_MAX_BUFS 64
static struct {
  cl_mem buf;
  size_t n;
} hbufs[HF_MAX_BUFS];
static int nhbufs;

/* Host memory released by hf_free_all. */
#define HF_MAX_KEEP 256
static void *kept[HF_MAX_KEEP];
static int nkept;

static void *hf_keep(void *p) {
  ck_assert_int_lt(nkept, HF_MAX_KEEP);
  ck_assert_ptr_nonnull(p);
  return kept[nkept++] = p;
}

static float *hf_floats(size_t n) { return hf_keep(malloc((n ? n : 1) * sizeof(float))); }

static void hf_free_all(void) {
  for (int i = 0; i < nhbufs; i++) clt_buffer_release(hbufs[i].buf);
  nhbufs = 0;
  for (int i = 0; i < nkept; i++) free(kept[i]);
  nkept = 0;
  nu_free_all();
}

static size_t numel_of(int ndim, const int64_t *shape) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
  return n;
}

/* An f16 tensor of the given shape holding the half bit patterns `bits`,
 * or NaN everywhere when bits is NULL, with guards around it. */
static clt_tensor hf_tensor(clt_context *ctx, const uint16_t *bits, int ndim, const int64_t *shape) {
  size_t n = numel_of(ndim, shape), total = n + 2 * HF_GUARD;
  uint16_t *init = malloc(total * 2);
  for (size_t i = 0; i < total; i++) init[i] = HF_GUARD_BITS;
  for (size_t i = 0; i < n; i++) init[HF_GUARD + i] = bits ? bits[i] : HF_UNSET_BITS;
  cl_mem buf = NULL;
  ck_assert_msg(clt_buffer_create(ctx, total * 2, &buf) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clEnqueueWriteBuffer(clt_context_queue(ctx), buf, CL_TRUE, 0, total * 2, init, 0, NULL, NULL),
                   CL_SUCCESS);
  free(init);
  ck_assert_int_lt(nhbufs, HF_MAX_BUFS);
  hbufs[nhbufs].buf = buf;
  hbufs[nhbufs].n = n;
  nhbufs++;
  clt_tensor t;
  ck_assert_msg(clt_tensor_view(buf, HF_GUARD * 2, CLT_F16, ndim, shape, &t) == 0, "%s", clt_last_error());
  return t;
}

static void hf_check_guards(clt_context *ctx, const char *what) {
  for (int b = 0; b < nhbufs; b++) {
    uint16_t g[HF_GUARD];
    cl_command_queue q = clt_context_queue(ctx);
    ck_assert_int_eq(clEnqueueReadBuffer(q, hbufs[b].buf, CL_TRUE, 0, sizeof g, g, 0, NULL, NULL), CL_SUCCESS);
    for (int i = 0; i < HF_GUARD; i++)
      ck_assert_msg(g[i] == HF_GUARD_BITS, "%s: guard before f16 tensor %d overwritten", what, b);
    ck_assert_int_eq(clEnqueueReadBuffer(q, hbufs[b].buf, CL_TRUE, (HF_GUARD + hbufs[b].n) * 2, sizeof g, g, 0, NULL,
                                         NULL),
                     CL_SUCCESS);
    for (int i = 0; i < HF_GUARD; i++)
      ck_assert_msg(g[i] == HF_GUARD_BITS, "%s: guard after f16 tensor %d overwritten", what, b);
  }
  nu_check_guards(ctx, what);
}

/* IEEE half to float: exact. */
static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
  return h & 0x8000 ? -v : v;
}

/* f rounded to the nearest half, ties to even, as a float: the value is
 * scaled so that the half's last place is 1 and rounded by rint (the
 * default rounding mode is to nearest even); subnormal halves share the
 * last place 2^-24, and what rounds beyond 65504 is inf. */
static float round_half(float f) {
  if (isnan(f) || isinf(f)) return f;
  int e;
  frexp(f, &e); /* |f| in [2^(e-1), 2^e) */
  if (e - 1 < -14) e = -13;
  double ulp = ldexp(1.0, e - 1 - 10);
  double r = rint((double)f / ulp) * ulp;
  if (fabs(r) > 65504.0) return copysignf(INFINITY, f);
  return (float)r;
}

/* An f16 tensor's elements as floats (host memory released by hf_free_all). */
static float *hf_get16(clt_context *ctx, const clt_tensor *t) {
  size_t n = (size_t)clt_tensor_numel(t);
  uint16_t *bits = malloc((n ? n : 1) * 2);
  nu_get(ctx, t, bits);
  float *v = hf_floats(n);
  for (size_t i = 0; i < n; i++) v[i] = half_to_float(bits[i]);
  free(bits);
  return v;
}

static float *hf_get32(clt_context *ctx, const clt_tensor *t) {
  float *v = hf_floats((size_t)clt_tensor_numel(t));
  nu_get(ctx, t, v);
  return v;
}

/* The same values as f32 (for the F32 path) and f16 (for the F16 path). */
typedef struct hf_pair {
  clt_tensor f32, f16;
  const float *v; /* the values, on the host */
} hf_pair;

/* x rounded to half on the device: f32 -> f16 (the F16 path's input) ->
 * f32 (the F32 path's). The rounding must be the host's. */
static hf_pair hf_pair_of(clt_context *ctx, const float *x, int ndim, const int64_t *shape) {
  size_t n = numel_of(ndim, shape);
  hf_pair p;
  clt_tensor raw = nu_f32(ctx, x, ndim, shape);
  p.f16 = hf_tensor(ctx, NULL, ndim, shape);
  p.f32 = nu_f32(ctx, NULL, ndim, shape);
  ck_assert_msg(clt_convert(ctx, &raw, &p.f16) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_convert(ctx, &p.f16, &p.f32) == 0, "%s", clt_last_error());
  float *v = hf_get32(ctx, &p.f32);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(v[i] == round_half(x[i]) || (isnan(v[i]) && isnan(x[i])),
                  "clt_convert on %s rounded %.9g to half as %.9g, want %.9g", tu_name(ctx), x[i], v[i],
                  round_half(x[i]));
  p.v = v;
  return p;
}

/* Outputs of both paths, NaN until written. */
static hf_pair hf_out(clt_context *ctx, int ndim, const int64_t *shape) {
  hf_pair p = {nu_f32(ctx, NULL, ndim, shape), hf_tensor(ctx, NULL, ndim, shape), NULL};
  return p;
}

/* n random values in [-scale, scale) + shift, never 0 (nu_random). */
static float *hf_random(size_t n, unsigned seed, float scale, float shift) {
  float *x = hf_keep(nu_random(n, seed));
  for (size_t i = 0; i < n; i++) x[i] = x[i] * scale + shift;
  return x;
}

/* got (the F16 path's output) must be want (the F32 path's) rounded to
 * half: the same bits, NaN for NaN. */
static void hf_expect_rounded(const float *got, const float *want, size_t n, const char *what, const char *name) {
  for (size_t i = 0; i < n; i++) {
    float r = round_half(want[i]);
    int same = isnan(r) ? isnan(got[i]) != 0 : got[i] == r && signbit(got[i]) == signbit(r);
    ck_assert_msg(same, "%s: f16 %s[%zu] = %.9g, but the f32 path's %.9g rounds to %.9g", what, name, i, got[i],
                  want[i], r);
  }
}

/* Float outputs of both paths: the same sums of the same terms. */
static void hf_expect_close(const float *got, const float *want, size_t n, double tol, const char *what,
                            const char *name) {
  double *w = nu_to_double(want, n), e = nu_err(got, w, n);
  free(w);
  ck_assert_msg(e <= tol, "%s: %s from f16 differs from f32's by %g" NU_AT, what, name, e, NU_AT_ARGS);
}

/* ---- activations ------------------------------------------------------------ */

static void act_case(clt_context *ctx, clt_nn_act act, float alpha, int rows, int cols) {
  size_t n = (size_t)rows * cols;
  char what[200];
  snprintf(what, sizeof what, "%s (%d, %d) on %s", clt_nn_act_name(act), rows, cols, tu_name(ctx));
  hf_pair x = hf_pair_of(ctx, hf_random(n, 11u + (unsigned)act, 4.0f, 0.0f), NU_SHAPE(rows, cols));
  hf_pair y = hf_out(ctx, NU_SHAPE(rows, cols));
  ck_assert_msg(clt_nn_act_forward(ctx, act, alpha, &x.f32, &y.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_act_forward(ctx, act, alpha, &x.f16, &y.f16) == 0, "%s", clt_last_error());
  float *y32 = hf_get32(ctx, &y.f32), *y16 = hf_get16(ctx, &y.f16);
  hf_expect_rounded(y16, y32, n, what, "y");

  /* Backward from x or from y, as the F16 forward stored it (y32 rounded). */
  hf_pair s = clt_nn_act_backward_needs_input(act) ? x : hf_pair_of(ctx, y32, NU_SHAPE(rows, cols));
  hf_pair dy = hf_pair_of(ctx, hf_random(n, 21u + (unsigned)act, 1.0f, 0.0f), NU_SHAPE(rows, cols));
  hf_pair dx = hf_out(ctx, NU_SHAPE(rows, cols));
  ck_assert_msg(clt_nn_act_backward(ctx, act, alpha, &x.f32, &s.f32, &dy.f32, &dx.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_act_backward(ctx, act, alpha, &x.f16, &s.f16, &dy.f16, &dx.f16) == 0, "%s", clt_last_error());
  float *dx32 = hf_get32(ctx, &dx.f32), *dx16 = hf_get16(ctx, &dx.f16);
  hf_expect_rounded(dx16, dx32, n, what, "dx");
  /* in place, dx = dy */
  ck_assert_msg(clt_nn_act_backward(ctx, act, alpha, &x.f16, &s.f16, &dy.f16, &dy.f16) == 0, "%s", clt_last_error());
  float *inplace = hf_get16(ctx, &dy.f16);
  for (size_t i = 0; i < n; i++) ck_assert_msg(inplace[i] == dx16[i], "%s: in-place dx[%zu] differs", what, i);
  hf_check_guards(ctx, what);
  hf_free_all();
}

START_TEST(activations_in_f16_are_the_f32_results_rounded) {
  for (int d = 0; d < tu_ndev; d++)
    for (int a = CLT_NN_RELU; a <= CLT_NN_SILU; a++) {
      act_case(tu_ctx[d], (clt_nn_act)a, 0.1f, 8, 125);
      act_case(tu_ctx[d], (clt_nn_act)a, 0.1f, 8, 128); /* PoCL's GELU and SiLU 16 an item */
    }
}
END_TEST

/* ---- bias ------------------------------------------------------------------- */

static void bias_case(clt_context *ctx, int N, int C, int P) {
  size_t n = (size_t)N * C * P;
  char what[200];
  snprintf(what, sizeof what, "bias (N, C, P) = (%d, %d, %d) on %s", N, C, P, tu_name(ctx));
  unsigned seed = (unsigned)(N * 100 + C * 10 + P);
  hf_pair y = hf_pair_of(ctx, hf_random(n, seed, 2.0f, 0.0f), NU_SHAPE(N, C, P));
  clt_tensor b = nu_f32(ctx, hf_random((size_t)C, seed + 1, 1.0f, 0.0f), NU_SHAPE(C));
  ck_assert_msg(clt__nn_bias_add(ctx, &y.f32, &b, C, P) == 0, "%s", clt_last_error());
  ck_assert_msg(clt__nn_bias_add(ctx, &y.f16, &b, C, P) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &y.f16), hf_get32(ctx, &y.f32), n, what, "y + b");

  /* db accumulates: both start from the same values */
  hf_pair dy = hf_pair_of(ctx, hf_random(n, seed + 2, 1.0f, 0.0f), NU_SHAPE(N, C, P));
  const float *db0 = hf_random((size_t)C, seed + 3, 1.0f, 0.0f);
  clt_tensor db32 = nu_f32(ctx, db0, NU_SHAPE(C)), db16 = nu_f32(ctx, db0, NU_SHAPE(C));
  ck_assert_msg(clt__nn_bias_grad(ctx, &dy.f32, &db32, N, C, P) == 0, "%s", clt_last_error());
  ck_assert_msg(clt__nn_bias_grad(ctx, &dy.f16, &db16, N, C, P) == 0, "%s", clt_last_error());
  hf_expect_close(hf_get32(ctx, &db16), hf_get32(ctx, &db32), (size_t)C, NU_SUM_TOL(N * P), what, "db");
  hf_check_guards(ctx, what);
  hf_free_all();
}

/* P = 1 (linear; db sums a flat run), 7 and 100 (conv; rows walked when P
 * >= 64). */
START_TEST(bias_in_f16_is_the_f32_result_rounded) {
  for (int d = 0; d < tu_ndev; d++) {
    bias_case(tu_ctx[d], 33, 10, 1);
    bias_case(tu_ctx[d], 4, 5, 7);
    bias_case(tu_ctx[d], 3, 4, 100);
  }
}
END_TEST

/* ---- dropout ---------------------------------------------------------------- */

static void dropout_case(clt_context *ctx, float p, uint64_t base, int n) {
  const uint64_t seed = 0x123456789abcdefull, step = 7;
  char what[200];
  snprintf(what, sizeof what, "dropout p=%g base=%llu n=%d on %s", (double)p, (unsigned long long)base, n,
           tu_name(ctx));
  uint32_t threshold = ref_dropout_threshold(p);
  hf_pair x = hf_pair_of(ctx, hf_random((size_t)n, 31, 3.0f, 0.0f), NU_SHAPE(n));
  hf_pair y = hf_out(ctx, NU_SHAPE(n));
  ck_assert_msg(clt_nn_dropout_forward(ctx, p, seed, step, base, &x.f32, &y.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_dropout_forward(ctx, p, seed, step, base, &x.f16, &y.f16) == 0, "%s", clt_last_error());
  float *y32 = hf_get32(ctx, &y.f32), *y16 = hf_get16(ctx, &y.f16);
  hf_expect_rounded(y16, y32, (size_t)n, what, "y");
  /* The mask is the reference's on both paths (no input is 0). */
  int dropped = 0;
  for (int i = 0; i < n; i++) {
    int keep = ref_dropout_keep(seed, step, base + (uint64_t)i, threshold);
    dropped += !keep;
    ck_assert_msg((y16[i] != 0) == keep && (y32[i] != 0) == keep, "%s: element %d should be %s", what, i,
                  keep ? "kept" : "dropped");
  }
  ck_assert_msg(dropped > 0 && dropped < n, "%s: %d of %d dropped", what, dropped, n);

  hf_pair dy = hf_pair_of(ctx, hf_random((size_t)n, 32, 1.0f, 0.0f), NU_SHAPE(n));
  hf_pair dx = hf_out(ctx, NU_SHAPE(n));
  ck_assert_msg(clt_nn_dropout_backward(ctx, p, seed, step, base, &dy.f32, &dx.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_dropout_backward(ctx, p, seed, step, base, &dy.f16, &dx.f16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &dx.f16), hf_get32(ctx, &dx.f32), (size_t)n, what, "dx");
  /* in place, y = x */
  ck_assert_msg(clt_nn_dropout_forward(ctx, p, seed, step, base, &x.f16, &x.f16) == 0, "%s", clt_last_error());
  float *inplace = hf_get16(ctx, &x.f16);
  for (int i = 0; i < n; i++) ck_assert_msg(inplace[i] == y16[i], "%s: in-place y[%d] differs", what, i);
  hf_check_guards(ctx, what);
  hf_free_all();
}

/* An odd count from an index base that is not a multiple of 4: the first
 * and last Philox blocks are partial. */
START_TEST(dropout_in_f16_has_the_f32_mask_and_rounded_values) {
  for (int d = 0; d < tu_ndev; d++) {
    dropout_case(tu_ctx[d], 0.3f, 0, 1000);
    dropout_case(tu_ctx[d], 0.5f, 4099, 777);
  }
}
END_TEST

/* ---- layernorm -------------------------------------------------------------- */

static void layernorm_case(clt_context *ctx, int M, int D) {
  size_t n = (size_t)M * D;
  char what[200];
  snprintf(what, sizeof what, "layernorm M=%d D=%d on %s", M, D, tu_name(ctx));
  unsigned seed = (unsigned)(M * 1000 + D);
  /* an offset mean, so that (x - mean) matters */
  hf_pair x = hf_pair_of(ctx, hf_random(n, seed, 2.0f, 0.75f), NU_SHAPE(M, D)), y = hf_out(ctx, NU_SHAPE(M, D));
  clt_tensor gamma = nu_f32(ctx, hf_random((size_t)D, seed + 1, 1.0f, 1.0f), NU_SHAPE(D));
  clt_tensor beta = nu_f32(ctx, hf_random((size_t)D, seed + 2, 0.5f, 0.0f), NU_SHAPE(D));
  clt_tensor mean32 = nu_f32(ctx, NULL, NU_SHAPE(M)), rstd32 = nu_f32(ctx, NULL, NU_SHAPE(M));
  clt_tensor mean16 = nu_f32(ctx, NULL, NU_SHAPE(M)), rstd16 = nu_f32(ctx, NULL, NU_SHAPE(M));
  ck_assert_msg(clt_nn_layernorm_forward(ctx, 1e-5f, &x.f32, &gamma, &beta, &y.f32, &mean32, &rstd32) == 0, "%s",
                clt_last_error());
  ck_assert_msg(clt_nn_layernorm_forward(ctx, 1e-5f, &x.f16, &gamma, &beta, &y.f16, &mean16, &rstd16) == 0, "%s",
                clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &y.f16), hf_get32(ctx, &y.f32), n, what, "y");
  hf_expect_close(hf_get32(ctx, &mean16), hf_get32(ctx, &mean32), (size_t)M, NU_SUM_TOL(D), what, "mean");
  hf_expect_close(hf_get32(ctx, &rstd16), hf_get32(ctx, &rstd32), (size_t)M, NU_SUM_TOL(D), what, "rstd");

  /* backward, each path from its own saved mean and rstd; dgamma and dbeta
   * accumulate from the same start */
  hf_pair dy = hf_pair_of(ctx, hf_random(n, seed + 3, 1.0f, 0.0f), NU_SHAPE(M, D)), dx = hf_out(ctx, NU_SHAPE(M, D));
  const float *dg0 = hf_random((size_t)D, seed + 4, 1.0f, 0.0f), *db0 = hf_random((size_t)D, seed + 5, 1.0f, 0.0f);
  clt_tensor dg32 = nu_f32(ctx, dg0, NU_SHAPE(D)), db32 = nu_f32(ctx, db0, NU_SHAPE(D));
  clt_tensor dg16 = nu_f32(ctx, dg0, NU_SHAPE(D)), db16 = nu_f32(ctx, db0, NU_SHAPE(D));
  ck_assert_msg(
      clt_nn_layernorm_backward(ctx, &x.f32, &gamma, &mean32, &rstd32, &dy.f32, &dx.f32, &dg32, &db32) == 0, "%s",
      clt_last_error());
  ck_assert_msg(
      clt_nn_layernorm_backward(ctx, &x.f16, &gamma, &mean16, &rstd16, &dy.f16, &dx.f16, &dg16, &db16) == 0, "%s",
      clt_last_error());
  float *dx16 = hf_get16(ctx, &dx.f16);
  hf_expect_rounded(dx16, hf_get32(ctx, &dx.f32), n, what, "dx");
  hf_expect_close(hf_get32(ctx, &dg16), hf_get32(ctx, &dg32), (size_t)D, NU_SUM_TOL(M), what, "dgamma");
  hf_expect_close(hf_get32(ctx, &db16), hf_get32(ctx, &db32), (size_t)D, NU_SUM_TOL(M), what, "dbeta");
  /* in place, dx = dy (dgamma, dbeta accumulate once more) */
  ck_assert_msg(
      clt_nn_layernorm_backward(ctx, &x.f16, &gamma, &mean16, &rstd16, &dy.f16, &dy.f16, &dg16, &db16) == 0, "%s",
      clt_last_error());
  float *inplace = hf_get16(ctx, &dy.f16);
  for (size_t i = 0; i < n; i++) ck_assert_msg(inplace[i] == dx16[i], "%s: in-place dx[%zu] differs", what, i);
  hf_check_guards(ctx, what);
  hf_free_all();
}

/* D below, at and above the 256-item work-group (items loop over a row). */
START_TEST(layernorm_in_f16_is_the_f32_result_rounded) {
  for (int d = 0; d < tu_ndev; d++) {
    layernorm_case(tu_ctx[d], 6, 37);
    layernorm_case(tu_ctx[d], 3, 300);
    layernorm_case(tu_ctx[d], 4, 128); /* rows read as vectors */
  }
}
END_TEST

/* ---- attention ---------------------------------------------------------------- */

/* The attention core: y from f16 qkv is f32's y rounded, lse the same
 * float sums; the backward from the same y (rounded, as f16 stores it) and
 * lse gives f32's dqkv rounded. */
static void attention_case(clt_context *ctx, int B, int T, int C, int H) {
  size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
  char what[200];
  snprintf(what, sizeof what, "attention B=%d T=%d C=%d heads=%d on %s", B, T, C, H, tu_name(ctx));
  unsigned seed = (unsigned)(B * 1000 + T * 100 + C * 10 + H);
  hf_pair qkv = hf_pair_of(ctx, hf_random(nq, seed, 2.0f, 0.0f), NU_SHAPE(B, T, 3 * C));
  hf_pair y = hf_out(ctx, NU_SHAPE(B, T, C));
  clt_tensor l32 = nu_f32(ctx, NULL, NU_SHAPE(B, H, T)), l16 = nu_f32(ctx, NULL, NU_SHAPE(B, H, T));
  ck_assert_msg(clt_nn_attention_forward(ctx, H, &qkv.f32, &y.f32, &l32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_attention_forward(ctx, H, &qkv.f16, &y.f16, &l16) == 0, "%s", clt_last_error());
  float *y32 = hf_get32(ctx, &y.f32), *lse = hf_get32(ctx, &l32);
  hf_expect_rounded(hf_get16(ctx, &y.f16), y32, ny, what, "y");
  hf_expect_close(hf_get32(ctx, &l16), lse, nl, NU_SUM_TOL(T + C / H), what, "lse");

  hf_pair ys = hf_pair_of(ctx, y32, NU_SHAPE(B, T, C));
  hf_pair dy = hf_pair_of(ctx, hf_random(ny, seed + 1, 1.0f, 0.0f), NU_SHAPE(B, T, C));
  hf_pair dq = hf_out(ctx, NU_SHAPE(B, T, 3 * C));
  ck_assert_msg(clt_nn_attention_backward(ctx, H, &qkv.f32, &ys.f32, &l32, &dy.f32, &dq.f32) == 0, "%s",
                clt_last_error());
  ck_assert_msg(clt_nn_attention_backward(ctx, H, &qkv.f16, &ys.f16, &l32, &dy.f16, &dq.f16) == 0, "%s",
                clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &dq.f16), hf_get32(ctx, &dq.f32), nq, what, "dqkv");
  hf_check_guards(ctx, what);
  hf_free_all();
}

/* Heads of 8 (vectors of 8) and of 32 (of 16), both through PoCL's tiled transposes. */
START_TEST(attention_in_f16_is_the_f32_result_rounded) {
  for (int d = 0; d < tu_ndev; d++) {
    attention_case(tu_ctx[d], 2, 19, 16, 2);
    attention_case(tu_ctx[d], 2, 37, 64, 2);
  }
}
END_TEST

/* ---- softmax cross-entropy -------------------------------------------------- */

static void xent_case(clt_context *ctx, int N, int C, float scale) {
  size_t n = (size_t)N * C;
  char what[200];
  snprintf(what, sizeof what, "softmax_xent N=%d C=%d scale=%g on %s", N, C, (double)scale, tu_name(ctx));
  unsigned seed = (unsigned)(N * 1000 + C);
  int32_t *labels = hf_keep(malloc((size_t)N * sizeof *labels));
  for (int i = 0; i < N; i++) labels[i] = (int32_t)((i * 7919u + seed) % (unsigned)C);
  labels[1] = -1; /* the ignore index: a zero row on both paths */
  hf_pair z = hf_pair_of(ctx, hf_random(n, seed, 3.0f, 0.0f), NU_SHAPE(N, C)), dz = hf_out(ctx, NU_SHAPE(N, C));
  clt_tensor lab = nu_tensor(ctx, CLT_I32, labels, NU_SHAPE(N));
  clt_tensor losses32 = nu_f32(ctx, NULL, NU_SHAPE(N)), loss32 = nu_f32(ctx, NULL, NU_SHAPE(1));
  clt_tensor losses16 = nu_f32(ctx, NULL, NU_SHAPE(N)), loss16 = nu_f32(ctx, NULL, NU_SHAPE(1));
  clt_tensor c32 = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(1)), c16 = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(1));
  ck_assert_msg(clt_nn_softmax_xent(ctx, &z.f32, &lab, -1, scale, &dz.f32, &losses32, &loss32, &c32) == 0, "%s",
                clt_last_error());
  ck_assert_msg(clt_nn_softmax_xent(ctx, &z.f16, &lab, -1, scale, &dz.f16, &losses16, &loss16, &c16) == 0, "%s",
                clt_last_error());
  float *dz16 = hf_get16(ctx, &dz.f16);
  hf_expect_rounded(dz16, hf_get32(ctx, &dz.f32), n, what, "dlogits");
  hf_expect_close(hf_get32(ctx, &losses16), hf_get32(ctx, &losses32), (size_t)N, NU_SUM_TOL(C), what, "losses");
  hf_expect_close(hf_get32(ctx, &loss16), hf_get32(ctx, &loss32), 1, NU_SUM_TOL(n), what, "loss");
  int32_t k32, k16;
  nu_get(ctx, &c32, &k32);
  nu_get(ctx, &c16, &k16);
  ck_assert_msg(k16 == k32, "%s: %d correct from f16, %d from f32", what, k16, k32);
  /* in place, dlogits = logits */
  ck_assert_msg(clt_nn_softmax_xent(ctx, &z.f16, &lab, -1, scale, &z.f16, &losses16, &loss16, NULL) == 0, "%s",
                clt_last_error());
  float *inplace = hf_get16(ctx, &z.f16);
  for (size_t i = 0; i < n; i++) ck_assert_msg(inplace[i] == dz16[i], "%s: in-place dlogits[%zu] differs", what, i);
  hf_check_guards(ctx, what);
  hf_free_all();
}

/* The classifier's 10 classes, and rows longer than the 256-item group;
 * scale 1 and a loss scale. */
START_TEST(softmax_xent_in_f16_is_the_f32_result_rounded) {
  for (int d = 0; d < tu_ndev; d++) {
    xent_case(tu_ctx[d], 16, 10, 1.0f);
    xent_case(tu_ctx[d], 5, 300, 1024.0f);
    xent_case(tu_ctx[d], 6, 256, 1024.0f); /* C a multiple of 16: rows read as vectors (of 16 on PoCL) */
  }
}
END_TEST

/* ---- pooling ---------------------------------------------------------------- */

static void pool_case(clt_context *ctx, int N, int C, int H, int W, clt_nn_pool2d_cfg cfg) {
  int OH = (int)clt_nn_out_size(H, cfg.kernel_h, cfg.stride_h, cfg.pad_h);
  int OW = (int)clt_nn_out_size(W, cfg.kernel_w, cfg.stride_w, cfg.pad_w);
  size_t nx = (size_t)N * C * H * W, ny = (size_t)N * C * OH * OW;
  char what[200];
  snprintf(what, sizeof what, "pool %dx%d stride %d pad %d on (%d, %d, %d, %d) on %s", cfg.kernel_h, cfg.kernel_w,
           cfg.stride_h, cfg.pad_h, N, C, H, W, tu_name(ctx));
  /* distinct values that stay distinct in half: max pooling has no ties */
  float *xv = hf_keep(nu_distinct(nx, (unsigned)nx));
  hf_pair x = hf_pair_of(ctx, xv, NU_SHAPE(N, C, H, W)), y = hf_out(ctx, NU_SHAPE(N, C, OH, OW));
  hf_pair dy = hf_pair_of(ctx, hf_random(ny, (unsigned)ny, 1.0f, 0.0f), NU_SHAPE(N, C, OH, OW));
  hf_pair dx = hf_out(ctx, NU_SHAPE(N, C, H, W));
  clt_tensor a32 = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(N, C, OH, OW));
  clt_tensor a16 = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(N, C, OH, OW));

  ck_assert_msg(clt_nn_maxpool2d_forward(ctx, &cfg, &x.f32, &y.f32, &a32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_maxpool2d_forward(ctx, &cfg, &x.f16, &y.f16, &a16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &y.f16), hf_get32(ctx, &y.f32), ny, what, "max y");
  int32_t *i32 = hf_keep(malloc(ny * 4)), *i16 = hf_keep(malloc(ny * 4));
  nu_get(ctx, &a32, i32);
  nu_get(ctx, &a16, i16);
  for (size_t i = 0; i < ny; i++) ck_assert_msg(i16[i] == i32[i], "%s: argmax[%zu] %d, want %d", what, i, i16[i], i32[i]);
  ck_assert_msg(clt_nn_maxpool2d_backward(ctx, &cfg, &a32, &dy.f32, &dx.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_maxpool2d_backward(ctx, &cfg, &a16, &dy.f16, &dx.f16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &dx.f16), hf_get32(ctx, &dx.f32), nx, what, "max dx");

  ck_assert_msg(clt_nn_avgpool2d_forward(ctx, &cfg, &x.f32, &y.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_avgpool2d_forward(ctx, &cfg, &x.f16, &y.f16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &y.f16), hf_get32(ctx, &y.f32), ny, what, "avg y");
  ck_assert_msg(clt_nn_avgpool2d_backward(ctx, &cfg, &dy.f32, &dx.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_avgpool2d_backward(ctx, &cfg, &dy.f16, &dx.f16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &dx.f16), hf_get32(ctx, &dx.f32), nx, what, "avg dx");

  /* global average pooling to (N, C) */
  hf_pair g = hf_out(ctx, NU_SHAPE(N, C));
  hf_pair dg = hf_pair_of(ctx, hf_random((size_t)N * C, 77, 1.0f, 0.0f), NU_SHAPE(N, C));
  ck_assert_msg(clt_nn_global_avgpool_forward(ctx, &x.f32, &g.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_global_avgpool_forward(ctx, &x.f16, &g.f16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &g.f16), hf_get32(ctx, &g.f32), (size_t)N * C, what, "global y");
  ck_assert_msg(clt_nn_global_avgpool_backward(ctx, &dg.f32, &dx.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_global_avgpool_backward(ctx, &dg.f16, &dx.f16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &dx.f16), hf_get32(ctx, &dx.f32), nx, what, "global dx");
  hf_check_guards(ctx, what);
  hf_free_all();
}

/* Disjoint 2x2 / 2 windows (the backward writes bands) and overlapping,
 * padded 3x3 / 1 ones (the backward gathers). */
START_TEST(pooling_in_f16_is_the_f32_result_rounded) {
  clt_nn_pool2d_cfg two = {2, 2, 2, 2, 0, 0}, three = {3, 3, 1, 1, 1, 1};
  for (int d = 0; d < tu_ndev; d++) {
    pool_case(tu_ctx[d], 2, 3, 8, 6, two);
    pool_case(tu_ctx[d], 2, 2, 5, 7, three);
  }
}
END_TEST

/* 1-D and 3-D max and average pooling (src/nn/pool_nd.c): overlapping
 * windows, so the backward sums several windows' gradients. */
static void poolnd_case(clt_context *ctx, int dims) {
  int64_t xs[5] = {2, 3}, ys[5] = {2, 3};
  clt_nn_poolnd_cfg cfg = {.dims = dims};
  for (int i = 0; i < dims; i++) {
    cfg.kernel[i] = 3, cfg.stride[i] = 2;
    xs[2 + i] = dims == 1 ? 15 : 5 + i, ys[2 + i] = clt_nn_out_size(xs[2 + i], 3, 2, 0);
  }
  size_t nx = numel_of(2 + dims, xs), ny = numel_of(2 + dims, ys);
  char what[80];
  snprintf(what, sizeof what, "pool%dd 3 stride 2 on %s", dims, tu_name(ctx));
  float *xv = hf_keep(nu_distinct(nx, (unsigned)nx));
  hf_pair x = hf_pair_of(ctx, xv, 2 + dims, xs), y = hf_out(ctx, 2 + dims, ys);
  hf_pair dy = hf_pair_of(ctx, hf_random(ny, (unsigned)ny, 1.0f, 0.0f), 2 + dims, ys), dx = hf_out(ctx, 2 + dims, xs);
  clt_tensor a32 = nu_tensor(ctx, CLT_I32, NULL, 2 + dims, ys), a16 = nu_tensor(ctx, CLT_I32, NULL, 2 + dims, ys);
  ck_assert_msg(clt_nn_maxpoolnd_forward(ctx, &cfg, &x.f32, &y.f32, &a32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_maxpoolnd_forward(ctx, &cfg, &x.f16, &y.f16, &a16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &y.f16), hf_get32(ctx, &y.f32), ny, what, "max y");
  int32_t *i32 = hf_keep(malloc(ny * 4)), *i16 = hf_keep(malloc(ny * 4));
  nu_get(ctx, &a32, i32);
  nu_get(ctx, &a16, i16);
  for (size_t i = 0; i < ny; i++) ck_assert_msg(i16[i] == i32[i], "%s: argmax[%zu] %d, want %d", what, i, i16[i], i32[i]);
  ck_assert_msg(clt_nn_maxpoolnd_backward(ctx, &cfg, &a32, &dy.f32, &dx.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_maxpoolnd_backward(ctx, &cfg, &a16, &dy.f16, &dx.f16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &dx.f16), hf_get32(ctx, &dx.f32), nx, what, "max dx");
  ck_assert_msg(clt_nn_avgpoolnd_forward(ctx, &cfg, &x.f32, &y.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_avgpoolnd_forward(ctx, &cfg, &x.f16, &y.f16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &y.f16), hf_get32(ctx, &y.f32), ny, what, "avg y");
  ck_assert_msg(clt_nn_avgpoolnd_backward(ctx, &cfg, &dy.f32, &dx.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_avgpoolnd_backward(ctx, &cfg, &dy.f16, &dx.f16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &dx.f16), hf_get32(ctx, &dx.f32), nx, what, "avg dx");
  hf_check_guards(ctx, what);
  hf_free_all();
}

START_TEST(poolnd_in_f16_is_the_f32_result_rounded) {
  for (int d = 0; d < tu_ndev; d++) {
    poolnd_case(tu_ctx[d], 1);
    poolnd_case(tu_ctx[d], 3);
  }
}
END_TEST

/* ---- overflow --------------------------------------------------------------- */

static uint16_t half_bits(float f) {
  /* exact for the values used here (all representable in half) */
  ck_assert(round_half(f) == f);
  if (f == 0) return signbit(f) ? 0x8000 : 0;
  int e;
  float m = frexpf(fabsf(f), &e); /* m in [0.5, 1) */
  ck_assert_int_ge(e - 1, -14);
  return (uint16_t)((f < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10) | ((int)ldexpf(m, 11) & 1023));
}

/* A value that rounds beyond 65504 (from 65520 on, ties to even) is stored
 * as inf: the trainer's loss scaling detects the step by it. */
START_TEST(values_beyond_half_range_are_stored_as_inf) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    char what[200];
    snprintf(what, sizeof what, "overflow on %s", tu_name(ctx));

    /* leaky_relu with slope 2 */
    const float xs[4] = {-40000.0f, 40000.0f, -32752.0f, 1.0f};
    uint16_t xb[4];
    for (int i = 0; i < 4; i++) xb[i] = half_bits(xs[i]);
    clt_tensor x = hf_tensor(ctx, xb, NU_SHAPE(4)), y = hf_tensor(ctx, NULL, NU_SHAPE(4));
    ck_assert_msg(clt_nn_act_forward(ctx, CLT_NN_LEAKY_RELU, 2.0f, &x, &y) == 0, "%s", clt_last_error());
    float *v = hf_get16(ctx, &y);
    ck_assert_msg(v[0] == -INFINITY && v[1] == 40000.0f && v[2] == -65504.0f && v[3] == 1.0f,
                  "%s: leaky_relu(2) of -40000, 40000, -32752, 1 stored %g %g %g %g", what, v[0], v[1], v[2], v[3]);

    /* bias: 65504 + 15 rounds down to 65504, 65504 + 16 = 65520 ties to inf */
    const uint16_t yb[2] = {half_bits(65504.0f), half_bits(-65504.0f)};
    const float bv[2] = {15.0f, -16.0f};
    clt_tensor yy = hf_tensor(ctx, yb, NU_SHAPE(1, 2)), b = nu_f32(ctx, bv, NU_SHAPE(2));
    ck_assert_msg(clt__nn_bias_add(ctx, &yy, &b, 2, 1) == 0, "%s", clt_last_error());
    v = hf_get16(ctx, &yy);
    ck_assert_msg(v[0] == 65504.0f && v[1] == -INFINITY, "%s: 65504 + 15 and -65504 - 16 stored %g %g", what, v[0],
                  v[1]);

    /* dropout keeps and doubles 40000: inf; a dropped element is 0 */
    uint16_t db[64];
    for (int i = 0; i < 64; i++) db[i] = half_bits(40000.0f);
    clt_tensor dx = hf_tensor(ctx, db, NU_SHAPE(64)), dy = hf_tensor(ctx, NULL, NU_SHAPE(64));
    ck_assert_msg(clt_nn_dropout_forward(ctx, 0.5f, 5, 6, 0, &dx, &dy) == 0, "%s", clt_last_error());
    v = hf_get16(ctx, &dy);
    uint32_t threshold = ref_dropout_threshold(0.5f);
    for (int i = 0; i < 64; i++)
      ck_assert_msg(v[i] == (ref_dropout_keep(5, 6, (uint64_t)i, threshold) ? INFINITY : 0.0f),
                    "%s: dropout y[%d] = %g", what, i, v[i]);

    /* softmax cross-entropy at loss scale 65536: the label's logit far
     * below the others makes its gradient 65536 (p - 1), about -65536,
     * which is -inf in half and finite in f32; the others stay finite. */
    enum { N = 2, C = 10 };
    float z[N * C];
    for (int i = 0; i < N * C; i++) z[i] = 0.0f;
    z[3] = -20.0f; /* row 0's label is 3; row 1 (label 0) is uniform */
    const int32_t labels[N] = {3, 0};
    hf_pair zp = hf_pair_of(ctx, z, NU_SHAPE(N, C)), dz = hf_out(ctx, NU_SHAPE(N, C));
    clt_tensor lab = nu_tensor(ctx, CLT_I32, labels, NU_SHAPE(N));
    clt_tensor losses = nu_f32(ctx, NULL, NU_SHAPE(N)), loss = nu_f32(ctx, NULL, NU_SHAPE(1));
    ck_assert_msg(clt_nn_softmax_xent(ctx, &zp.f32, &lab, -1, 65536.0f, &dz.f32, &losses, &loss, NULL) == 0, "%s",
                  clt_last_error());
    ck_assert_msg(clt_nn_softmax_xent(ctx, &zp.f16, &lab, -1, 65536.0f, &dz.f16, &losses, &loss, NULL) == 0, "%s",
                  clt_last_error());
    float *g32 = hf_get32(ctx, &dz.f32), *g16 = hf_get16(ctx, &dz.f16);
    ck_assert_msg(isfinite(g32[3]) && g32[3] < -65520.0f, "%s: f32 dlogits[0, 3] = %g", what, g32[3]);
    ck_assert_msg(g16[3] == -INFINITY, "%s: f16 dlogits[0, 3] = %g, want -inf", what, g16[3]);
    for (int i = 0; i < N * C; i++)
      if (i != 3) ck_assert_msg(isfinite(g16[i]), "%s: f16 dlogits[%d] = %g", what, i, g16[i]);
    hf_expect_rounded(g16, g32, N * C, what, "dlogits");
    hf_check_guards(ctx, what);
    hf_free_all();
  }
}
END_TEST

/* ---- flatten ---------------------------------------------------------------- */

/* A view change that keeps the dtype and the offset, so an f16 activation
 * flattens as an f32 one does. */
START_TEST(flatten_keeps_f16) {
  clt_tensor x = hf_tensor(tu_ctx[0], NULL, NU_SHAPE(2, 3, 4, 5)), f;
  ck_assert_msg(clt_nn_flatten(&x, &f) == 0, "%s", clt_last_error());
  ck_assert_int_eq(f.dtype, CLT_F16);
  ck_assert_int_eq(f.ndim, 2);
  ck_assert_int_eq(f.shape[0], 2);
  ck_assert_int_eq(f.shape[1], 60);
  ck_assert(f.buf == x.buf && f.offset == x.offset);
  hf_free_all();
}
END_TEST

/* ---- errors ----------------------------------------------------------------- */

START_TEST(mixed_f16_and_f32_activations_are_refused) {
  clt_context *ctx = tu_ctx[0];
  clt_tensor x16 = hf_tensor(ctx, NULL, NU_SHAPE(10)), y32 = nu_f32(ctx, NULL, NU_SHAPE(10));
  clt_tensor m16 = hf_tensor(ctx, NULL, NU_SHAPE(4, 7)), m32 = nu_f32(ctx, NULL, NU_SHAPE(4, 7));
  clt_tensor d7 = nu_f32(ctx, NULL, NU_SHAPE(7)), r4 = nu_f32(ctx, NULL, NU_SHAPE(4));
  clt_tensor p16 = hf_tensor(ctx, NULL, NU_SHAPE(2, 3, 4, 4)), q32 = nu_f32(ctx, NULL, NU_SHAPE(2, 3, 2, 2));
  clt_tensor a4 = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(2, 3, 2, 2)), g32 = nu_f32(ctx, NULL, NU_SHAPE(2, 3));
  clt_tensor i4 = nu_tensor(ctx, CLT_I32, NULL, NU_SHAPE(4)), one = nu_f32(ctx, NULL, NU_SHAPE(1));
  clt_tensor u8 = {0};
  ck_assert_msg(clt_tensor_view(y32.buf, y32.offset, CLT_U8, 1, (int64_t[]){10}, &u8) == 0, "%s", clt_last_error());
  clt_nn_pool2d_cfg two = {2, 2, 2, 2, 0, 0};

  NU_EXPECT(clt_nn_act_forward(ctx, CLT_NN_RELU, 0, &x16, &y32), CLT_ESHAPE, "relu forward", "x (10) f16",
            "y (10) f32", "same dtype");
  NU_EXPECT(clt_nn_act_backward(ctx, CLT_NN_TANH, 0, NULL, &x16, &y32, &y32), CLT_ESHAPE, "tanh backward",
            "dy (10) f32", "y (the forward's output) (10) f16");
  NU_EXPECT(clt_nn_act_forward(ctx, CLT_NN_RELU, 0, &u8, &u8), CLT_ESHAPE, "relu forward",
            "x must be a f32 tensor (any shape), got (10) u8");
  NU_EXPECT(clt_nn_dropout_forward(ctx, 0.5f, 0, 0, 0, &x16, &y32), CLT_ESHAPE, "dropout forward", "x (10) f16",
            "y (10) f32");
  NU_EXPECT(clt_nn_layernorm_forward(ctx, 1e-5f, &m16, &d7, &d7, &m32, &r4, &r4), CLT_ESHAPE, "layernorm forward",
            "x (4, 7) f16", "y (4, 7) f32");
  NU_EXPECT(clt_nn_layernorm_backward(ctx, &m16, &d7, &r4, &r4, &m32, &m16, &d7, &d7), CLT_ESHAPE,
            "layernorm backward", "x (4, 7) f16", "dy (4, 7) f32");
  NU_EXPECT(clt_nn_softmax_xent(ctx, &m16, &i4, -1, 1, &m32, &r4, &one, NULL), CLT_ESHAPE, "softmax_xent",
            "logits (4, 7) f16", "dlogits (4, 7) f32");
  NU_EXPECT(clt_nn_maxpool2d_forward(ctx, &two, &p16, &q32, &a4), CLT_ESHAPE, "maxpool2d forward",
            "x (2, 3, 4, 4) f16", "y (2, 3, 2, 2) f32");
  NU_EXPECT(clt_nn_maxpool2d_backward(ctx, &two, &a4, &q32, &p16), CLT_ESHAPE, "maxpool2d backward",
            "dx (2, 3, 4, 4) f16", "dy (2, 3, 2, 2) f32");
  NU_EXPECT(clt_nn_avgpool2d_forward(ctx, &two, &p16, &q32), CLT_ESHAPE, "avgpool2d forward", "x (2, 3, 4, 4) f16",
            "y (2, 3, 2, 2) f32");
  NU_EXPECT(clt_nn_global_avgpool_forward(ctx, &p16, &g32), CLT_ESHAPE, "global_avgpool forward",
            "x (2, 3, 4, 4) f16", "y (2, 3) f32");
  NU_EXPECT(clt_nn_global_avgpool_backward(ctx, &g32, &p16), CLT_ESHAPE, "global_avgpool backward",
            "dx (2, 3, 4, 4) f16", "dy (2, 3) f32");
  NU_EXPECT(clt__nn_bias_add(ctx, &y32, &i4, 4, 1), CLT_ESHAPE, "bias add", "b must be a 1-D f32 tensor");
  hf_free_all();
}
END_TEST

/* ---- batchnorm ---------------------------------------------------------------- */

/* Statistics, normalisation, the backward's sums and its input gradient of
 * x (N, C, S) in f16 against f32 from the same (half) values: y and dx
 * the f32 results rounded, the f32 sums (part, dw, db) close. Both paths
 * normalise with the f32 path's statistics, as the layer hands one set of
 * global statistics to every replica. */
static void batchnorm_case(clt_context *ctx, int N, int C, int S) {
  size_t n = (size_t)N * C * S;
  char what[200];
  snprintf(what, sizeof what, "batchnorm N=%d C=%d S=%d on %s", N, C, S, tu_name(ctx));
  unsigned seed = (unsigned)(N * 1000 + C * 10 + S);
  hf_pair x = hf_pair_of(ctx, hf_random(n, seed, 2.0f, 0.75f), NU_SHAPE(N, C, S)), y = hf_out(ctx, NU_SHAPE(N, C, S));
  clt_tensor part32 = nu_f32(ctx, NULL, NU_SHAPE(C, 2)), part16 = nu_f32(ctx, NULL, NU_SHAPE(C, 2));
  ck_assert_msg(clt_nn_batchnorm_stats(ctx, &x.f32, &part32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_batchnorm_stats(ctx, &x.f16, &part16) == 0, "%s", clt_last_error());
  float *p32 = hf_get32(ctx, &part32);
  hf_expect_close(hf_get32(ctx, &part16), p32, (size_t)C * 2, NU_SUM_TOL(N * S), what, "partial statistics");
  float *mean = hf_floats((size_t)C), *var = hf_floats((size_t)C);
  for (int c = 0; c < C; c++) mean[c] = p32[2 * c], var[c] = p32[2 * c + 1] / (float)(N * S);
  clt_tensor tm = nu_f32(ctx, mean, NU_SHAPE(C)), tv = nu_f32(ctx, var, NU_SHAPE(C));
  clt_tensor w = nu_f32(ctx, hf_random((size_t)C, seed + 1, 1.0f, 1.0f), NU_SHAPE(C));
  clt_tensor b = nu_f32(ctx, hf_random((size_t)C, seed + 2, 0.5f, 0.0f), NU_SHAPE(C));
  ck_assert_msg(clt_nn_batchnorm_forward(ctx, 1e-5f, &x.f32, &tm, &tv, &w, &b, &y.f32) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_batchnorm_forward(ctx, 1e-5f, &x.f16, &tm, &tv, &w, &b, &y.f16) == 0, "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &y.f16), hf_get32(ctx, &y.f32), n, what, "y");

  hf_pair dy = hf_pair_of(ctx, hf_random(n, seed + 3, 1.0f, 0.0f), NU_SHAPE(N, C, S)), dx = hf_out(ctx, NU_SHAPE(N, C, S));
  const float *dw0 = hf_random((size_t)C, seed + 4, 1.0f, 0.0f), *db0 = hf_random((size_t)C, seed + 5, 1.0f, 0.0f);
  clt_tensor dw32 = nu_f32(ctx, dw0, NU_SHAPE(C)), db32 = nu_f32(ctx, db0, NU_SHAPE(C));
  clt_tensor dw16 = nu_f32(ctx, dw0, NU_SHAPE(C)), db16 = nu_f32(ctx, db0, NU_SHAPE(C));
  clt_tensor s32 = nu_f32(ctx, NULL, NU_SHAPE(C, 2)), s16 = nu_f32(ctx, NULL, NU_SHAPE(C, 2));
  ck_assert_msg(clt_nn_batchnorm_backward_sums(ctx, 1e-5f, &x.f32, &tm, &tv, &dy.f32, &dw32, &db32, &s32) == 0, "%s",
                clt_last_error());
  ck_assert_msg(clt_nn_batchnorm_backward_sums(ctx, 1e-5f, &x.f16, &tm, &tv, &dy.f16, &dw16, &db16, &s16) == 0, "%s",
                clt_last_error());
  float *g32 = hf_get32(ctx, &s32);
  hf_expect_close(hf_get32(ctx, &s16), g32, (size_t)C * 2, NU_SUM_TOL(N * S), what, "backward sums");
  hf_expect_close(hf_get32(ctx, &dw16), hf_get32(ctx, &dw32), (size_t)C, NU_SUM_TOL(N * S), what, "dweight");
  hf_expect_close(hf_get32(ctx, &db16), hf_get32(ctx, &db32), (size_t)C, NU_SUM_TOL(N * S), what, "dbias");
  float *gdy = hf_floats((size_t)C), *gdyx = hf_floats((size_t)C);
  for (int c = 0; c < C; c++) gdy[c] = g32[2 * c] / (float)(N * S), gdyx[c] = g32[2 * c + 1] / (float)(N * S);
  clt_tensor tg = nu_f32(ctx, gdy, NU_SHAPE(C)), tgx = nu_f32(ctx, gdyx, NU_SHAPE(C));
  ck_assert_msg(clt_nn_batchnorm_backward_input(ctx, 1e-5f, &x.f32, &tm, &tv, &w, &tg, &tgx, &dy.f32, &dx.f32) == 0,
                "%s", clt_last_error());
  ck_assert_msg(clt_nn_batchnorm_backward_input(ctx, 1e-5f, &x.f16, &tm, &tv, &w, &tg, &tgx, &dy.f16, &dx.f16) == 0,
                "%s", clt_last_error());
  hf_expect_rounded(hf_get16(ctx, &dx.f16), hf_get32(ctx, &dx.f32), n, what, "dx");
  hf_check_guards(ctx, what);
  hf_free_all();
}

START_TEST(batchnorm_in_f16_is_the_f32_result_rounded) {
  for (int d = 0; d < tu_ndev; d++) {
    batchnorm_case(tu_ctx[d], 3, 4, 25);
    batchnorm_case(tu_ctx[d], 7, 5, 1); /* flat features */
  }
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn_half");
  NU_ADD_CASE(s, "activation", activations_in_f16_are_the_f32_results_rounded);
  NU_ADD_CASE(s, "bias", bias_in_f16_is_the_f32_result_rounded);
  NU_ADD_CASE(s, "dropout", dropout_in_f16_has_the_f32_mask_and_rounded_values);
  NU_ADD_CASE(s, "layernorm", layernorm_in_f16_is_the_f32_result_rounded);
  NU_ADD_CASE(s, "attention", attention_in_f16_is_the_f32_result_rounded);
  NU_ADD_CASE(s, "softmax_xent", softmax_xent_in_f16_is_the_f32_result_rounded);
  NU_ADD_CASE(s, "pool", pooling_in_f16_is_the_f32_result_rounded, poolnd_in_f16_is_the_f32_result_rounded);
  NU_ADD_CASE(s, "flatten", flatten_keeps_f16);
  NU_ADD_CASE(s, "overflow", values_beyond_half_range_are_stored_as_inf);
  NU_ADD_CASE(s, "errors", mixed_f16_and_f32_activations_are_refused);
  NU_ADD_CASE(s, "batchnorm", batchnorm_in_f16_is_the_f32_result_rounded);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
