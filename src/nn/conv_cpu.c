/*
 * conv_cpu.c: stride-1 convolutions on the CPU devices whose GEMMs run on
 * cltrain's own tiles (PoCL; src/core/blas_cpu.c), as implicit GEMMs that
 * read a zero-padded copy of the input instead of an im2col matrix
 * (cl/conv_cpu.cl says why). conv.c and conv_nd.c ask here first and keep
 * their im2col paths for the rest: strides above 1, output rows that are
 * not a multiple of 4 wide, other devices, CLT_CONV_IMPLICIT=0.
 *
 *   forward   xp = x padded by p                y = conv(xp, w) + b
 *   backward  xp = x padded by p                dw += sums of dy * xp's taps,
 *                                               a sample at a time
 *             db += sums of dy, a sample at a time
 *             dyp = dy padded by (k - 1)*d - p  dx = conv(dyp, w's taps
 *                                                reversed, channels swapped)
 * The padded copies are the workspace's (clt_nn_conv2d_workspace_bytes and
 * clt_nn_convnd_workspace_bytes size it for im2col, which is never
 * smaller for these geometries; when it is, the im2col path runs); as
 * many samples a call as it holds.
 */
#include "nn/common.h"

#include <stdio.h>

/* Floats of per-sample weight gradients one backward pass keeps (16 MB):
 * a layer of 256 x 256 3x3 kernels takes 7 samples a pass. */
#define PART_FLOATS ((int64_t)1 << 22)

/* Samples a weight-gradient pass takes: as many as part holds, at least 1. */
static int64_t part_samples(int64_t samples, int64_t nw) {
  int64_t s = PART_FLOATS / nw;
  if (s < 1) s = 1;
  return s < samples ? s : samples;
}

size_t clt_nn_conv_scratch_bytes(int64_t samples, int64_t cin, int64_t cout, int64_t kernel_elems) {
  int64_t nw = cin * cout * kernel_elems;
  if (samples < 1 || nw < 1) return 0;
  return (size_t)(part_samples(samples, nw) * nw) * sizeof(float);
}

/* The vector width of a row of `w` outputs: 16, 8 or 4 that divides it, or 0. */
static int vec_width(int64_t w) { return w % 16 == 0 ? 16 : w % 8 == 0 ? 8 : w % 4 == 0 ? 4 : 0; }

int clt__conv_cpu_takes(clt_context *ctx, const clt__conv3 *g) {
  if (clt__env_switch("CLT_CONV_IMPLICIT") == 0 || !clt__cpu_gemm_on(ctx)) return 0;
  for (int a = 0; a < 3; a++)
    if (g->s[a] != 1 || g->p[a] > (g->k[a] - 1) * g->d[a]) return 0; /* the dx pass pads by (k - 1)*d - p */
  return vec_width(g->out[2]) && vec_width(g->in[2]);
}

/* One convolution pass: out (N, rows, OD, OH, OW) from a padded input of
 * cin channels, with the layer's kernel and dilation compiled in. */
typedef struct pass {
  int64_t cin, rows, pad_in[3], out[3];
  int vw, flip;
} pass;

static int pass_kernel(clt_context *ctx, const clt__conv3 *g, const pass *ps, const char *name, int r, int v,
                       cl_kernel *k) {
  char opts[512];
  snprintf(opts, sizeof opts,
           "-DCC_CIN=%lld -DCC_ROWS=%lld -DCC_KD=%lld -DCC_KH=%lld -DCC_KW=%lld -DCC_DD=%d -DCC_DH=%d -DCC_DW=%d "
           "-DCC_PD=%lld -DCC_PH=%lld -DCC_PW=%lld -DCC_OD=%lld -DCC_OH=%lld -DCC_OW=%lld -DCC_VW=%d -DCC_R=%d "
           "-DCC_V=%d%s%s",
           (long long)ps->cin, (long long)ps->rows, (long long)g->k[0], (long long)g->k[1], (long long)g->k[2],
           g->d[0], g->d[1], g->d[2], (long long)ps->pad_in[0], (long long)ps->pad_in[1], (long long)ps->pad_in[2],
           (long long)ps->out[0], (long long)ps->out[1], (long long)ps->out[2], ps->vw, r, v,
           ps->flip ? " -DCC_FLIP" : "", g->half ? " -DCLT_HALF" : "");
  return clt_context_kernel(ctx, "conv_cpu", name, opts, k);
}

/* gx x gy x gz work-groups of one item (PoCL pays little for a group; see
 * blas_cpu.c), the kernels' ranges rounded up to whole tiles. */
static int launch(clt_context *ctx, cl_kernel k, size_t gx, size_t gy, size_t gz) {
  int rc = CLT_OK;
  size_t global[3] = {gx, gy, gz}, local[3] = {1, 1, 1};
  CLT_CL_TRY(clEnqueueNDRangeKernel(ctx->queue, k, 3, NULL, global, local, 0, NULL, NULL));
fail:
  return rc;
}

/* ws[0 ..) = samples [n0, n0 + B) of src (B, C, in...) padded by pad on
 * each side to ps->pad_in; or, without padding and with f32 activations,
 * *buf and *off point at src itself. */
static int pad(clt_context *ctx, const clt__conv3 *g, const pass *ps, const clt_tensor *src, const int64_t *in,
               const int *padding, const clt_tensor *ws, int64_t n0, int64_t B, cl_mem *buf, cl_ulong *off) {
  int rc = CLT_OK;
  int64_t vol = in[0] * in[1] * in[2];
  cl_ulong soff = clt__nn_off(src) + (cl_ulong)(n0 * ps->cin * vol);
  if (!padding[0] && !padding[1] && !padding[2] && !g->half) {
    *buf = src->buf, *off = soff;
    return CLT_OK;
  }
  *buf = ws->buf, *off = clt__nn_off(ws);
  cl_kernel k;
  cl_uint D = (cl_uint)in[0], H = (cl_uint)in[1], W = (cl_uint)in[2];
  cl_int pd = padding[0], ph = padding[1], pw = padding[2];
  CLT_TRY(pass_kernel(ctx, g, ps, "conv_cpu_pad", 1, 1, &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(src->buf), NN_VAL(soff), NN_VAL(*buf), NN_VAL(*off), NN_VAL(D), NN_VAL(H), NN_VAL(W),
                      NN_VAL(pd), NN_VAL(ph), NN_VAL(pw)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)ps->pad_in[2], (size_t)ps->pad_in[1],
                            (size_t)(B * ps->cin * ps->pad_in[0])));
fail:
  return rc;
}

/* Samples a call can take: as many padded copies as the workspace holds. */
static int64_t chunk_of(const clt__conv3 *g, const pass *ps, const clt_tensor *ws) {
  int64_t per = ps->cin * ps->pad_in[0] * ps->pad_in[1] * ps->pad_in[2];
  int64_t c = clt_tensor_numel(ws) / per;
  if (c > NN_MAX_ELEMS / per) c = NN_MAX_ELEMS / per;
  return c < g->N ? c : g->N;
}

/* out (samples [n0, n0 + B)) = the convolution of the padded input at
 * buf/off with w (+ b). */
static int run_pass(clt_context *ctx, const clt__conv3 *g, const pass *ps, cl_mem xp, cl_ulong xpoff,
                    const clt_tensor *w, const clt_tensor *b, const clt_tensor *out, int64_t n0, int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  /* Tiles of 24 accumulators: 8 rows by 3 float16s, as gemm_cpu's; with
   * float8s (rows 8 wide) 4 by 6, which took a 16-16 conv3d over 8^3 at
   * batch 8 from 1.05 to 0.73 ms (nn_bench --unet, one thread). Fewer
   * rows: more vectors, up to 6. */
  int r = ps->vw == 16 ? 8 : 4, v;
  if (r > ps->rows) r = (int)ps->rows;
  v = 24 / r > 6 ? 6 : 24 / r;
  int64_t P = ps->out[0] * ps->out[1] * ps->out[2];
  cl_uint nvec = (cl_uint)(B * P / ps->vw);
  cl_ulong woff = clt__nn_off(w), boff = b ? clt__nn_off(b) : 0, ooff = clt__nn_off(out) + (cl_ulong)(n0 * ps->rows * P);
  cl_mem bbuf = b ? b->buf : w->buf; /* never read without a bias */
  cl_int has_bias = b != NULL;
  CLT_TRY(pass_kernel(ctx, g, ps, "conv_cpu_forward", r, v, &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(xp), NN_VAL(xpoff), NN_VAL(w->buf), NN_VAL(woff), NN_VAL(bbuf), NN_VAL(boff),
                      NN_VAL(has_bias), NN_VAL(out->buf), NN_VAL(ooff), NN_VAL(nvec)));
  CLT_TRY(launch(ctx, k, (size_t)((ps->rows + r - 1) / r), (size_t)((nvec + (cl_uint)v - 1) / (cl_uint)v), 1));
fail:
  return rc;
}

/* The forward's pass: g's input padded by p, Cout rows. */
static pass forward_pass(const clt__conv3 *g) {
  pass ps = {g->Cin, g->Cout, {0}, {0}, vec_width(g->out[2]), 0};
  for (int a = 0; a < 3; a++) ps.pad_in[a] = g->in[a] + 2 * g->p[a], ps.out[a] = g->out[a];
  return ps;
}

int clt__conv_cpu_forward(clt_context *ctx, const clt__conv3 *g, const clt_tensor *x, const clt_tensor *w,
                          const clt_tensor *b, const clt_tensor *y, const clt_tensor *ws) {
  int rc = CLT_OK;
  pass ps = forward_pass(g);
  int64_t chunk = chunk_of(g, &ps, ws);
  if (chunk < 1) return 0;
  for (int64_t n0 = 0; n0 < g->N; n0 += chunk) {
    int64_t B = g->N - n0 < chunk ? g->N - n0 : chunk;
    cl_mem xp;
    cl_ulong xpoff;
    CLT_TRY(pad(ctx, g, &ps, x, g->in, g->p, ws, n0, B, &xp, &xpoff));
    CLT_TRY(run_pass(ctx, g, &ps, xp, xpoff, w, b, y, n0, B));
  }
  return 1;
fail:
  return rc;
}

/* out (n floats) += the sum over samples [0, B) of part[b*n ..], in order. */
static int sum_samples(clt_context *ctx, const clt__conv3 *g, const pass *ps, cl_mem part, int64_t B, int64_t n,
                       const clt_tensor *out) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_uint ub = (cl_uint)B, un = (cl_uint)n;
  cl_ulong ooff = clt__nn_off(out);
  CLT_TRY(pass_kernel(ctx, g, ps, "conv_cpu_sum_samples", 1, 1, &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(part), NN_VAL(ub), NN_VAL(un), NN_VAL(out->buf), NN_VAL(ooff)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)n, 1, 1));
fail:
  return rc;
}

int clt__conv_cpu_backward(clt_context *ctx, const clt__conv3 *g, const clt_tensor *x, const clt_tensor *w,
                           const clt_tensor *dy, const clt_tensor *dx, const clt_tensor *dw, const clt_tensor *db,
                           const clt_tensor *ws) {
  int rc = CLT_OK;
  pass fw = forward_pass(g), bw = {g->Cout, g->Cin, {0}, {0}, vec_width(g->in[2]), 1};
  int q[3];
  for (int a = 0; a < 3; a++) {
    q[a] = (int)((g->k[a] - 1) * g->d[a]) - g->p[a];
    bw.pad_in[a] = g->out[a] + 2 * q[a], bw.out[a] = g->in[a];
  }
  int64_t nw = g->Cout * g->Cin * g->k[0] * g->k[1] * g->k[2], P = g->out[0] * g->out[1] * g->out[2];
  int64_t fchunk = chunk_of(g, &fw, ws), bchunk = dx ? chunk_of(g, &bw, ws) : g->N;
  if (fchunk < 1 || bchunk < 1) return 0;
  fchunk = part_samples(fchunk, nw);
  int r = g->Cout < 8 ? (int)g->Cout : 8;
  cl_mem part; /* each sample's weight gradient, then bias gradient, each summed over the samples in order */
  CLT_TRY(clt__context_scratch(ctx, (size_t)(fchunk * nw) * sizeof(float), &part));
  for (int64_t n0 = 0; n0 < g->N; n0 += fchunk) {
    int64_t B = g->N - n0 < fchunk ? g->N - n0 : fchunk;
    cl_mem xp;
    cl_ulong xpoff, dyoff = clt__nn_off(dy) + (cl_ulong)(n0 * g->Cout * P);
    cl_kernel k;
    CLT_TRY(pad(ctx, g, &fw, x, g->in, g->p, ws, n0, B, &xp, &xpoff));
    CLT_TRY(pass_kernel(ctx, g, &fw, "conv_cpu_weight_grad", r, 1, &k));
    CLT_TRY(NN_SET_ARGS(k, NN_VAL(xp), NN_VAL(xpoff), NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(part)));
    CLT_TRY(launch(ctx, k, (size_t)((g->Cout + r - 1) / r), (size_t)(g->Cin * g->k[0] * g->k[1]), (size_t)B));
    CLT_TRY(sum_samples(ctx, g, &fw, part, B, nw, dw));
    if (!db) continue;
    CLT_TRY(pass_kernel(ctx, g, &fw, "conv_cpu_bias_grad", r, 1, &k));
    CLT_TRY(NN_SET_ARGS(k, NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(part)));
    CLT_TRY(launch(ctx, k, (size_t)g->Cout, (size_t)B, 1)); /* the queue is in order: dw's sums have read part */
    CLT_TRY(sum_samples(ctx, g, &fw, part, B, g->Cout, db));
  }
  for (int64_t n0 = 0; dx && n0 < g->N; n0 += bchunk) {
    int64_t B = g->N - n0 < bchunk ? g->N - n0 : bchunk;
    cl_mem dyp;
    cl_ulong dypoff;
    CLT_TRY(pad(ctx, g, &bw, dy, g->out, q, ws, n0, B, &dyp, &dypoff));
    CLT_TRY(run_pass(ctx, g, &bw, dyp, dypoff, w, NULL, dx, n0, B));
  }
  return 1;
fail:
  return rc;
}
