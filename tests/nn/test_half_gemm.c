/*
 * test_half_gemm.c: linear, conv2d, conv1d and conv3d with activations stored as f16
 * (mixed precision), on every device.
 *
 * f16 storage means: the same f32 arithmetic on the stored (half) values,
 * with every stored result rounded to half once. So the f16 path, given
 * inputs that are halves, must give EXACTLY the f32 path's results on the
 * same values rounded to nearest-even half (y, dx), and exactly the f32
 * path's parameter gradients (dw, db are f32 and see the same f32 values).
 * Rounding is done on the device (clt_convert), which test_ops checks
 * against the IEEE rules.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnutil.h"

/* Device tensors of one shape, f32 and f16, released by release_all. */
#define MAX_BUFS 64
static cl_mem bufs[MAX_BUFS];
static int nbufs;

static clt_tensor make(clt_context *ctx, clt_dtype dt, int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  ck_assert_int_lt(nbufs, MAX_BUFS);
  cl_mem b;
  ck_assert_int_eq(clt_buffer_create(ctx, (size_t)n * clt_dtype_size(dt), &b), 0);
  bufs[nbufs++] = b;
  clt_tensor t;
  ck_assert_int_eq(clt_tensor_view(b, 0, dt, ndim, shape, &t), 0);
  return t;
}

static void release_all(void) {
  for (int i = 0; i < nbufs; i++) clt_buffer_release(bufs[i]);
  nbufs = 0;
}

/* host -> t32 (rounded to half: t32 holds halves' values) and t16. */
static void halves(clt_context *ctx, const float *host, const clt_tensor *t32, const clt_tensor *t16) {
  ck_assert_int_eq(clt_tensor_upload(ctx, t32, host, clt_tensor_bytes(t32)), 0);
  ck_assert_int_eq(clt_convert(ctx, t32, t16), 0);
  ck_assert_int_eq(clt_convert(ctx, t16, t32), 0);
}

/* Read t (f32, or f16 widened through scratch s32 of its shape). */
static float *read_back(clt_context *ctx, const clt_tensor *t, const clt_tensor *s32) {
  size_t n = (size_t)clt_tensor_numel(t);
  float *h = malloc(n * sizeof *h);
  if (t->dtype == CLT_F16) {
    ck_assert_int_eq(clt_convert(ctx, t, s32), 0);
    t = s32;
  }
  ck_assert_int_eq(clt_tensor_download(ctx, t, h, n * sizeof *h), 0);
  return h;
}

/* The f32 result t32 rounded to half, read back (t32 is overwritten). */
static float *rounded(clt_context *ctx, const clt_tensor *t32, const clt_tensor *t16) {
  ck_assert_int_eq(clt_convert(ctx, t32, t16), 0);
  return read_back(ctx, t16, t32);
}

static void same_bits(const float *got, const float *want, size_t n, const char *what, const char *name) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(memcmp(&got[i], &want[i], sizeof(float)) == 0, "%s: %s[%zu] is %.9g in f16, want %.9g", what, name,
                  i, got[i], want[i]);
}

/* ---- linear ------------------------------------------------------------------ */

static void linear_case(clt_context *ctx, int N, int in, int out, int bias) {
  char what[160];
  snprintf(what, sizeof what, "linear N=%d in=%d out=%d bias=%d on %s", N, in, out, bias, tu_name(ctx));
  size_t nx = (size_t)N * in, ny = (size_t)N * out, nw = (size_t)out * in;
  float *x = nu_random(nx, 11), *w = nu_random(nw, 12), *b = nu_random(out, 13), *dy = nu_random(ny, 14);
  for (size_t i = 0; i < ny; i++) dy[i] *= 1000; /* gradients are scaled by the loss scale */
  clt_tensor x32 = make(ctx, CLT_F32, 2, (int64_t[]){N, in}), x16 = make(ctx, CLT_F16, 2, (int64_t[]){N, in});
  clt_tensor y32 = make(ctx, CLT_F32, 2, (int64_t[]){N, out}), y16 = make(ctx, CLT_F16, 2, (int64_t[]){N, out});
  clt_tensor dy32 = make(ctx, CLT_F32, 2, (int64_t[]){N, out}), dy16 = make(ctx, CLT_F16, 2, (int64_t[]){N, out});
  clt_tensor dx32 = make(ctx, CLT_F32, 2, (int64_t[]){N, in}), dx16 = make(ctx, CLT_F16, 2, (int64_t[]){N, in});
  clt_tensor tw = make(ctx, CLT_F32, 2, (int64_t[]){out, in}), tb = make(ctx, CLT_F32, 1, (int64_t[]){out});
  clt_tensor dwa = make(ctx, CLT_F32, 2, (int64_t[]){out, in}), dwb = make(ctx, CLT_F32, 2, (int64_t[]){out, in});
  clt_tensor dba = make(ctx, CLT_F32, 1, (int64_t[]){out}), dbb = make(ctx, CLT_F32, 1, (int64_t[]){out});
  ck_assert_int_eq(clt_tensor_upload(ctx, &tw, w, nw * 4), 0);
  ck_assert_int_eq(clt_tensor_upload(ctx, &tb, b, (size_t)out * 4), 0);
  halves(ctx, x, &x32, &x16);
  halves(ctx, dy, &dy32, &dy16);
  for (clt_tensor *t = &dwa; t; t = t == &dwa ? &dwb : NULL) ck_assert_int_eq(clt_fill(ctx, t, 0.5f), 0);
  ck_assert_int_eq(clt_fill(ctx, &dba, 0.25f), 0);
  ck_assert_int_eq(clt_fill(ctx, &dbb, 0.25f), 0);
  const clt_tensor *tbias = bias ? &tb : NULL;

  /* y: read the f16 result (widened into a fresh f32), then round the f32 one. */
  clt_tensor yw = make(ctx, CLT_F32, 2, (int64_t[]){N, out});
  ck_assert_msg(clt_nn_linear_forward(ctx, &x16, &tw, tbias, &y16) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_linear_forward(ctx, &x32, &tw, tbias, &y32) == 0, "%s", clt_last_error());
  float *gy = read_back(ctx, &y16, &yw), *wy = rounded(ctx, &y32, &y16);
  same_bits(gy, wy, ny, what, "y");

  ck_assert_msg(clt_nn_linear_backward(ctx, &x16, &tw, &dy16, &dx16, &dwa, bias ? &dba : NULL) == 0, "%s",
                clt_last_error());
  ck_assert_msg(clt_nn_linear_backward(ctx, &x32, &tw, &dy32, &dx32, &dwb, bias ? &dbb : NULL) == 0, "%s",
                clt_last_error());
  clt_tensor dxw = make(ctx, CLT_F32, 2, (int64_t[]){N, in});
  float *gdx = read_back(ctx, &dx16, &dxw), *wdx = rounded(ctx, &dx32, &dx16);
  same_bits(gdx, wdx, nx, what, "dx");
  float *gdw = read_back(ctx, &dwa, NULL), *wdw = read_back(ctx, &dwb, NULL);
  same_bits(gdw, wdw, nw, what, "dw");
  float *gdb = read_back(ctx, &dba, NULL), *wdb = read_back(ctx, &dbb, NULL);
  same_bits(gdb, wdb, (size_t)out, what, "db");

  /* Mixed dtypes in one call are refused, naming both. */
  ck_assert_int_eq(clt_nn_linear_forward(ctx, &x16, &tw, tbias, &y32), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "f16"));
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "f32"));
  release_all();
  free(x), free(w), free(b), free(dy), free(gy), free(wy), free(gdx), free(wdx), free(gdw), free(wdw), free(gdb),
      free(wdb);
}

START_TEST(linear_f16_is_f32_rounded_once) {
  for (int d = 0; d < tu_ndev; d++) {
    linear_case(tu_ctx[d], 5, 33, 7, 1);
    linear_case(tu_ctx[d], 64, 128, 10, 0);
    linear_case(tu_ctx[d], 9, 5, 24, 1); /* out a multiple of 8 (the bias gradient's vectors) */
  }
}
END_TEST

static int64_t numel_nd(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/* ---- conv2d ------------------------------------------------------------------ */

typedef struct conv_case {
  int N, Cin, H, W, Cout, K, s, p, bias, ws_samples;
} conv_case;

static const conv_case conv_cases[] = {
    {2, 1, 8, 8, 4, 3, 1, 1, 1, 2}, /* direct (K = 9), padded */
    {3, 2, 7, 6, 3, 3, 2, 0, 1, 3}, /* direct, no padding: f16 inputs are copied all the same */
    {2, 8, 9, 9, 5, 3, 1, 1, 1, 1}, /* im2col (K = 72), one sample per chunk */
    {3, 6, 6, 5, 4, 2, 1, 0, 0, 2}, /* im2col, no bias, chunks (2, 1) */
};

static void conv_case_run(clt_context *ctx, const conv_case *c) {
  char what[200];
  snprintf(what, sizeof what, "conv2d N=%d Cin=%d %dx%d Cout=%d k=%d s=%d p=%d bias=%d on %s", c->N, c->Cin, c->H,
           c->W, c->Cout, c->K, c->s, c->p, c->bias, tu_name(ctx));
  int64_t OH = clt_nn_out_size(c->H, c->K, c->s, c->p), OW = clt_nn_out_size(c->W, c->K, c->s, c->p);
  int64_t xs[4] = {c->N, c->Cin, c->H, c->W}, ys[4] = {c->N, c->Cout, OH, OW}, ws[4] = {c->Cout, c->Cin, c->K, c->K};
  size_t nx = (size_t)(c->N * c->Cin * c->H * c->W), ny = (size_t)(c->N * c->Cout * OH * OW);
  size_t nw = (size_t)(c->Cout * c->Cin * c->K * c->K);
  float *x = nu_random(nx, 21), *w = nu_random(nw, 22), *b = nu_random(c->Cout, 23), *dy = nu_random(ny, 24);
  clt_tensor x32 = make(ctx, CLT_F32, 4, xs), x16 = make(ctx, CLT_F16, 4, xs);
  clt_tensor y32 = make(ctx, CLT_F32, 4, ys), y16 = make(ctx, CLT_F16, 4, ys), yw = make(ctx, CLT_F32, 4, ys);
  clt_tensor dy32 = make(ctx, CLT_F32, 4, ys), dy16 = make(ctx, CLT_F16, 4, ys);
  clt_tensor dx32 = make(ctx, CLT_F32, 4, xs), dx16 = make(ctx, CLT_F16, 4, xs), dxw = make(ctx, CLT_F32, 4, xs);
  clt_tensor tw = make(ctx, CLT_F32, 4, ws), tb = make(ctx, CLT_F32, 1, (int64_t[]){c->Cout});
  clt_tensor dwa = make(ctx, CLT_F32, 4, ws), dwb = make(ctx, CLT_F32, 4, ws);
  clt_tensor dba = make(ctx, CLT_F32, 1, (int64_t[]){c->Cout}), dbb = make(ctx, CLT_F32, 1, (int64_t[]){c->Cout});
  int64_t wsn = (int64_t)(clt_nn_conv2d_workspace_bytes(c->ws_samples, c->Cin, c->Cout, c->K, c->K, OH, OW) / 4);
  clt_tensor tws = make(ctx, CLT_F32, 1, &wsn);
  ck_assert_int_eq(clt_tensor_upload(ctx, &tw, w, nw * 4), 0);
  ck_assert_int_eq(clt_tensor_upload(ctx, &tb, b, (size_t)c->Cout * 4), 0);
  halves(ctx, x, &x32, &x16);
  halves(ctx, dy, &dy32, &dy16);
  const clt_tensor *tbias = c->bias ? &tb : NULL;

  for (int algo = CLT_NN_CONV_AUTO; algo <= CLT_NN_CONV_DIRECT; algo++) {
    clt_nn_conv2d_cfg cfg = {c->s, c->s, c->p, c->p, (clt_nn_conv2d_algo)algo};
    ck_assert_msg(clt_nn_conv2d_forward(ctx, &cfg, &x16, &tw, tbias, &y16, &tws) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_nn_conv2d_forward(ctx, &cfg, &x32, &tw, tbias, &y32, &tws) == 0, "%s", clt_last_error());
    float *gy = read_back(ctx, &y16, &yw), *wy = rounded(ctx, &y32, &y16);
    same_bits(gy, wy, ny, what, algo == 0 ? "y (auto)" : algo == 1 ? "y (im2col)" : "y (direct)");
    free(gy), free(wy);
  }
  clt_nn_conv2d_cfg cfg = {c->s, c->s, c->p, c->p, CLT_NN_CONV_AUTO};
  for (int with_dx = 0; with_dx <= 1; with_dx++) { /* without dx: the direct weight gradient when K is small */
    ck_assert_int_eq(clt_fill(ctx, &dwa, 0.5f), 0);
    ck_assert_int_eq(clt_fill(ctx, &dwb, 0.5f), 0);
    ck_assert_int_eq(clt_fill(ctx, &dba, 0.25f), 0);
    ck_assert_int_eq(clt_fill(ctx, &dbb, 0.25f), 0);
    const clt_tensor *dba_p = c->bias ? &dba : NULL, *dbb_p = c->bias ? &dbb : NULL;
    ck_assert_msg(clt_nn_conv2d_backward(ctx, &cfg, &x16, &tw, &dy16, with_dx ? &dx16 : NULL, &dwa, dba_p, &tws) == 0,
                  "%s", clt_last_error());
    ck_assert_msg(clt_nn_conv2d_backward(ctx, &cfg, &x32, &tw, &dy32, with_dx ? &dx32 : NULL, &dwb, dbb_p, &tws) == 0,
                  "%s", clt_last_error());
    float *gdw = read_back(ctx, &dwa, NULL), *wdw = read_back(ctx, &dwb, NULL);
    float *gdb = read_back(ctx, &dba, NULL), *wdb = read_back(ctx, &dbb, NULL);
    same_bits(gdw, wdw, nw, what, "dw");
    same_bits(gdb, wdb, (size_t)c->Cout, what, "db");
    free(gdw), free(wdw), free(gdb), free(wdb);
    if (with_dx) {
      float *gdx = read_back(ctx, &dx16, &dxw), *wdx = rounded(ctx, &dx32, &dx16);
      same_bits(gdx, wdx, nx, what, "dx");
      free(gdx), free(wdx);
    }
  }
  release_all();
  free(x), free(w), free(b), free(dy);
}

START_TEST(conv2d_f16_is_f32_rounded_once) {
  for (int d = 0; d < tu_ndev; d++)
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) conv_case_run(tu_ctx[d], &conv_cases[i]);
}
END_TEST

/* ---- conv1d, conv3d (src/nn/conv_nd.c) --------------------------------------- */

/* A dilated conv1d (stride 2, padding) and a conv3d with padding, chunked:
 * y and dx the f32 path's rounded once, dw and db the same bits. */
static void convnd_case_run(clt_context *ctx, int dims) {
  char what[120];
  snprintf(what, sizeof what, "conv%dd on %s", dims, tu_name(ctx));
  int N = 3, Cin = 2, Cout = 3, K = 3;
  int64_t xs[5] = {N, Cin}, ys[5] = {N, Cout}, wsh[5] = {Cout, Cin}, P = 1, KE = 1;
  clt_nn_convnd_cfg cfg = {.dims = dims};
  for (int i = 0; i < dims; i++) {
    int in = dims == 1 ? 17 : 5 + i, s = dims == 1 ? 2 : 1, p = 1, d = dims == 1 ? 2 : 1;
    cfg.stride[i] = s, cfg.pad[i] = p, cfg.dilation[i] = d;
    xs[2 + i] = in, wsh[2 + i] = K, ys[2 + i] = clt_nn_out_size_dilated(in, K, s, p, d);
    P *= ys[2 + i], KE *= K;
  }
  size_t nx = (size_t)(numel_nd(2 + dims, xs)), ny = (size_t)(N * Cout * P), nw = (size_t)(Cout * Cin * KE);
  float *x = nu_random(nx, 31), *w = nu_random(nw, 32), *b = nu_random(Cout, 33), *dy = nu_random(ny, 34);
  clt_tensor x32 = make(ctx, CLT_F32, 2 + dims, xs), x16 = make(ctx, CLT_F16, 2 + dims, xs);
  clt_tensor y32 = make(ctx, CLT_F32, 2 + dims, ys), y16 = make(ctx, CLT_F16, 2 + dims, ys);
  clt_tensor yw = make(ctx, CLT_F32, 2 + dims, ys);
  clt_tensor dy32 = make(ctx, CLT_F32, 2 + dims, ys), dy16 = make(ctx, CLT_F16, 2 + dims, ys);
  clt_tensor dx32 = make(ctx, CLT_F32, 2 + dims, xs), dx16 = make(ctx, CLT_F16, 2 + dims, xs);
  clt_tensor dxw = make(ctx, CLT_F32, 2 + dims, xs);
  clt_tensor tw = make(ctx, CLT_F32, 2 + dims, wsh), tb = make(ctx, CLT_F32, 1, (int64_t[]){Cout});
  clt_tensor dwa = make(ctx, CLT_F32, 2 + dims, wsh), dwb = make(ctx, CLT_F32, 2 + dims, wsh);
  clt_tensor dba = make(ctx, CLT_F32, 1, (int64_t[]){Cout}), dbb = make(ctx, CLT_F32, 1, (int64_t[]){Cout});
  int64_t wsn = (int64_t)(clt_nn_convnd_workspace_bytes(2, Cin, Cout, KE, P) / 4); /* chunks (2, 1) */
  clt_tensor tws = make(ctx, CLT_F32, 1, &wsn);
  ck_assert_int_eq(clt_tensor_upload(ctx, &tw, w, nw * 4), 0);
  ck_assert_int_eq(clt_tensor_upload(ctx, &tb, b, (size_t)Cout * 4), 0);
  halves(ctx, x, &x32, &x16);
  halves(ctx, dy, &dy32, &dy16);
  ck_assert_msg(clt_nn_convnd_forward(ctx, &cfg, &x16, &tw, &tb, &y16, &tws) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_nn_convnd_forward(ctx, &cfg, &x32, &tw, &tb, &y32, &tws) == 0, "%s", clt_last_error());
  float *gy = read_back(ctx, &y16, &yw), *wy = rounded(ctx, &y32, &y16);
  same_bits(gy, wy, ny, what, "y");
  ck_assert_int_eq(clt_fill(ctx, &dwa, 0.5f), 0);
  ck_assert_int_eq(clt_fill(ctx, &dwb, 0.5f), 0);
  ck_assert_int_eq(clt_fill(ctx, &dba, 0.25f), 0);
  ck_assert_int_eq(clt_fill(ctx, &dbb, 0.25f), 0);
  ck_assert_msg(clt_nn_convnd_backward(ctx, &cfg, &x16, &tw, &dy16, &dx16, &dwa, &dba, &tws) == 0, "%s",
                clt_last_error());
  ck_assert_msg(clt_nn_convnd_backward(ctx, &cfg, &x32, &tw, &dy32, &dx32, &dwb, &dbb, &tws) == 0, "%s",
                clt_last_error());
  float *gdw = read_back(ctx, &dwa, NULL), *wdw = read_back(ctx, &dwb, NULL);
  float *gdb = read_back(ctx, &dba, NULL), *wdb = read_back(ctx, &dbb, NULL);
  float *gdx = read_back(ctx, &dx16, &dxw), *wdx = rounded(ctx, &dx32, &dx16);
  same_bits(gdw, wdw, nw, what, "dw");
  same_bits(gdb, wdb, (size_t)Cout, what, "db");
  same_bits(gdx, wdx, nx, what, "dx");
  free(gy), free(wy), free(gdw), free(wdw), free(gdb), free(wdb), free(gdx), free(wdx);
  release_all();
  free(x), free(w), free(b), free(dy);
}

START_TEST(convnd_f16_is_f32_rounded_once) {
  for (int d = 0; d < tu_ndev; d++) {
    convnd_case_run(tu_ctx[d], 1);
    convnd_case_run(tu_ctx[d], 3);
  }
}
END_TEST

/* ---- conversion -------------------------------------------------------------- */

START_TEST(convert_rounds_to_nearest_even_and_overflows_to_inf) {
  /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even is 1. 1 + 3*2^-11
   * rounds up to 1 + 2^-9. 65504 is the largest half; 65520 rounds to
   * inf; 2^-24 is the smallest subnormal, 2^-26 rounds to 0. */
  const float in[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65520.0f, -70000.0f, 0x1p-24f, 0x1p-26f,
                      -0.0f, NAN};
  const float want[] = {1.0f, 1.0f + 0x1p-9f, 65504.0f, INFINITY, -INFINITY, 0x1p-24f, 0.0f, -0.0f, NAN};
  int64_t n = sizeof in / sizeof in[0];
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    clt_tensor a = make(ctx, CLT_F32, 1, &n), h = make(ctx, CLT_F16, 1, &n);
    ck_assert_int_eq(clt_tensor_upload(ctx, &a, in, sizeof in), 0);
    ck_assert_int_eq(clt_convert(ctx, &a, &h), 0);
    float *got = read_back(ctx, &h, &a);
    for (int64_t i = 0; i < n; i++) {
      if (isnan(want[i])) {
        ck_assert_msg(isnan(got[i]), "%s: NaN became %g", tu_name(ctx), got[i]);
        continue;
      }
      ck_assert_msg(memcmp(&got[i], &want[i], 4) == 0, "%s: %.9g -> half -> %.9g, want %.9g", tu_name(ctx), in[i],
                    got[i], want[i]);
    }
    free(got);
    ck_assert_int_eq(clt_convert(ctx, &a, &a), CLT_EINVAL); /* f32 to f32 is no conversion */
    release_all();
  }
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("nn_half_gemm");
  TCase *tc = tcase_create("f16");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, convert_rounds_to_nearest_even_and_overflows_to_inf);
  tcase_add_test(tc, linear_f16_is_f32_rounded_once);
  tcase_add_test(tc, conv2d_f16_is_f32_rounded_once);
  tcase_add_test(tc, convnd_f16_is_f32_rounded_once);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
