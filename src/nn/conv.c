/*
 * conv.c: 2-D convolution, NCHW, forward and backward, as im2col + one GEMM
 * per chunk of samples (cl/conv.cl, src/core/blas.c).
 *
 * For a chunk of B samples, with K = Cin*KH*KW and P = OH*OW:
 *   forward   col (K, B*P) = im2col(x)
 *             T (Cout, B*P) = w (Cout, K) col
 *             y (B, Cout, P) = T reordered, + b
 *   backward  T (Cout, B*P) = dy reordered        db += sums of dy
 *             col = im2col(x)                     dw += T col^T
 *             col = w^T T  (reusing col's space)  dx = col2im(col)
 * Layers with few inputs per output (K <= CONV_DIRECT_MAX_K) are convolved
 * directly instead, forward and, when no dx is wanted, backward; the other
 * stride-1 ones on PoCL as implicit GEMMs (src/nn/conv_cpu.c).
 * One large GEMM per chunk instead of B small ones: GEMM libraries reach
 * their speed on large shapes, and CLBlast's batched GEMM would need a
 * weight copy per sample. The workspace (col and T) is the caller's, sized
 * by clt_nn_conv2d_workspace_bytes; a smaller one only means more chunks.
 * On a CPU device chunks are also kept small enough for col to stay in
 * the cache, and on PoCL im2col and col2im move whole rows with the
 * layer's geometry compiled in (fit_chunk_to_cache, by_rows).
 * Activations may be stored as f16 (mixed precision): the kernels that read
 * or write them widen and round (cl/prelude.cl), and the workspace and the
 * GEMMs stay f32.
 */
#include "nn/common.h"

#include <stdio.h>

typedef struct geom {
  int64_t N, Cin, H, W;   /* x (N, Cin, H, W) */
  int64_t Cout, KH, KW;   /* w (Cout, Cin, KH, KW) */
  int64_t OH, OW, K, P;   /* y (N, Cout, OH, OW); K = Cin*KH*KW; P = OH*OW */
  int sh, sw, ph, pw;
  int64_t chunk;          /* samples per GEMM */
  clt_tensor ws;          /* the workspace: col (K, chunk*P) then T (Cout, chunk*P) */
  int half;               /* activations (x, y, dx, dy) stored as f16; the workspace is f32 */
} geom;

/* The kernel of cl/conv.cl for the layer's activation storage. */
static int conv_kernel(clt_context *ctx, const geom *g, const char *name, cl_kernel *k) {
  return clt_context_kernel(ctx, "conv", name, g->half ? "-DCLT_HALF" : "", k);
}

int64_t clt_nn_out_size(int64_t in, int64_t k, int stride, int pad) {
  if (in < 1 || k < 1 || stride < 1 || pad < 0 || in + 2 * (int64_t)pad < k) return 0;
  return (in + 2 * (int64_t)pad - k) / stride + 1;
}

size_t clt_nn_conv2d_workspace_bytes(int64_t samples, int64_t cin, int64_t cout, int64_t kh, int64_t kw,
                                     int64_t oh, int64_t ow) {
  return (size_t)samples * (size_t)(cin * kh * kw + cout) * (size_t)(oh * ow) * sizeof(float);
}

/* Check every tensor of a conv2d call and work out its geometry.
 * dy_like is y (forward) or dy (backward); bname names b or db. */
static int check_conv(const char *op, const clt_nn_conv2d_cfg *cfg, const clt_tensor *x, const clt_tensor *w,
                      const clt_tensor *b, const char *bname, const clt_tensor *y, const char *yname,
                      const clt_tensor *ws, geom *g) {
  int rc;
  if (!cfg) return clt__error(CLT_EINVAL, "%s: no configuration (stride, padding) given", op);
  if (cfg->stride_h < 1 || cfg->stride_w < 1 || cfg->pad_h < 0 || cfg->pad_w < 0)
    return clt__error(CLT_EINVAL, "%s: stride %dx%d must be at least 1 and padding %dx%d at least 0", op,
                      cfg->stride_h, cfg->stride_w, cfg->pad_h, cfg->pad_w);
  if ((rc = clt__nn_check_act(op, "x", x, 4, "(N, Cin, H, W)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "w", w, CLT_F32, 4, "(Cout, Cin, KH, KW)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, yname, y, 4, "(N, Cout, OH, OW)")) < 0) return rc;
  if (b && (rc = clt__nn_check(op, bname, b, CLT_F32, 1, "(Cout)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "workspace", ws, CLT_F32, 0, "(any shape)")) < 0) return rc;
  clt__nn_named ts[] = {{"x", x}, {"w", w}, {bname, b}, {yname, y}};
  if (x->dtype != y->dtype) return clt__nn_shape_error(op, ts, 4, "x and %s must be of one type", yname);
  g->half = x->dtype == CLT_F16;
  g->N = x->shape[0], g->Cin = x->shape[1], g->H = x->shape[2], g->W = x->shape[3];
  g->Cout = w->shape[0], g->KH = w->shape[2], g->KW = w->shape[3];
  g->sh = cfg->stride_h, g->sw = cfg->stride_w, g->ph = cfg->pad_h, g->pw = cfg->pad_w;
  if (w->shape[1] != g->Cin)
    return clt__nn_shape_error(op, ts, 4, "x has %lld channels, w expects %lld", (long long)g->Cin,
                               (long long)w->shape[1]);
  g->OH = clt_nn_out_size(g->H, g->KH, g->sh, g->ph);
  g->OW = clt_nn_out_size(g->W, g->KW, g->sw, g->pw);
  if (g->OH < 1 || g->OW < 1)
    return clt__nn_shape_error(op, ts, 4, "a %lldx%lld kernel does not fit a %lldx%lld input with padding %dx%d",
                               (long long)g->KH, (long long)g->KW, (long long)g->H, (long long)g->W, g->ph, g->pw);
  if (y->shape[0] != g->N || y->shape[1] != g->Cout || y->shape[2] != g->OH || y->shape[3] != g->OW)
    return clt__nn_shape_error(op, ts, 4, "%s must be (%lld, %lld, %lld, %lld) for stride %dx%d, padding %dx%d",
                               yname, (long long)g->N, (long long)g->Cout, (long long)g->OH, (long long)g->OW, g->sh,
                               g->sw, g->ph, g->pw);
  if (b && b->shape[0] != g->Cout)
    return clt__nn_shape_error(op, ts, 4, "%s must have %lld elements", bname, (long long)g->Cout);
  g->K = g->Cin * g->KH * g->KW;
  g->P = g->OH * g->OW;
  /* As many samples as the workspace holds, but no chunk whose col exceeds
   * what the kernels index with 32 bits. */
  int64_t per_sample = (g->K + g->Cout) * g->P;
  g->chunk = clt_tensor_numel(ws) / per_sample;
  if (g->chunk > g->N) g->chunk = g->N;
  if (g->chunk > NN_MAX_ELEMS / (g->K > g->Cout ? g->K * g->P : g->Cout * g->P))
    g->chunk = NN_MAX_ELEMS / (g->K > g->Cout ? g->K * g->P : g->Cout * g->P);
  if (g->chunk < 1) {
    char s[128];
    return clt__error(CLT_ESHAPE,
                      "%s: workspace %s holds %zu bytes, but one sample needs %zu "
                      "(clt_nn_conv2d_workspace_bytes(1, %lld, %lld, %lld, %lld, %lld, %lld))",
                      op, clt_tensor_shape_str(ws, s, sizeof s), clt_tensor_bytes(ws),
                      (size_t)per_sample * sizeof(float), (long long)g->Cin, (long long)g->Cout, (long long)g->KH,
                      (long long)g->KW, (long long)g->OH, (long long)g->OW);
  }
  g->ws = *ws;
  return CLT_OK;
}

/* The geometry arguments shared by im2col and col2im, from index 4 on. */
static int geom_args(cl_kernel k, const geom *g, int64_t B) {
  int rc = CLT_OK;
  cl_uint v[8] = {(cl_uint)B, (cl_uint)g->Cin, (cl_uint)g->H, (cl_uint)g->W,
                  (cl_uint)g->KH, (cl_uint)g->KW, (cl_uint)g->OH, (cl_uint)g->OW};
  cl_int s[4] = {g->sh, g->sw, g->ph, g->pw};
  for (int i = 0; i < 8; i++) NN_ARG(k, 4 + i, v[i]);
  for (int i = 0; i < 4; i++) NN_ARG(k, 12 + i, s[i]);
fail:
  return rc;
}

static cl_ulong ws_col(const geom *g) { return clt__nn_off(&g->ws); }
static cl_ulong ws_t(const geom *g) { return clt__nn_off(&g->ws) + (cl_ulong)(g->K * g->chunk * g->P); }

/* On a CPU device, chunks whose col fits in about CONV_CPU_COL_BYTES: the
 * GEMM then reads col while it is still in the cache im2col wrote it to.
 * And chunks of a multiple of 16 / gcd(P, 16) samples, so that the GEMM's
 * B * P columns are whole 16s: src/core/blas_cpu.c's tiles then need no
 * element-a-work-item edge. The Fashion CNN's second layer on PoCL, batch
 * 64, one thread (bench/nn_bench --only conv2), forward and backward ms:
 * chunks of 18 samples (4 MB) 5.8-6.1 and 10.7-11.5; of 16 5.2-5.3 and
 * 10.4-10.7; of 4 (1 MB) 4.3-4.7 and 9.9-10.8; of 3 (no whole 16s) 9.3
 * and 13.5. A GPU keeps one large GEMM. */
#define CONV_CPU_COL_BYTES (1 << 20)
static void fit_chunk_to_cache(const clt_context *ctx, geom *g) {
  if (ctx->info.type != CLT_DEVICE_CPU) return;
  int64_t fit = CONV_CPU_COL_BYTES / (g->K * g->P * (int64_t)sizeof(float));
  if (fit < 1) fit = 1;
  int64_t q = 16, p = g->P; /* q = 16 / gcd(P, 16): chunks of q samples have B*P a multiple of 16 */
  while (p % 2 == 0 && q > 1) p /= 2, q /= 2;
  if (fit > q) fit -= fit % q;
  if (g->chunk > fit) g->chunk = fit;
}

/* cl/conv.cl built for this layer's geometry: the direct kernels, and
 * im2col_rows and col2im_rows. */
static int geom_kernel(clt_context *ctx, const geom *g, const char *name, cl_kernel *k) {
  char opts[256];
  snprintf(opts, sizeof opts,
           "-DCONV_CIN=%lld -DCONV_KH=%lld -DCONV_KW=%lld -DCONV_SH=%d -DCONV_SW=%d -DCONV_PH=%d -DCONV_PW=%d "
           "-DCONV_H=%lld -DCONV_W=%lld -DCONV_OH=%lld -DCONV_OW=%lld%s",
           (long long)g->Cin, (long long)g->KH, (long long)g->KW, g->sh, g->sw, g->ph, g->pw, (long long)g->H,
           (long long)g->W, (long long)g->OH, (long long)g->OW, g->half ? " -DCLT_HALF" : "");
  return clt_context_kernel(ctx, "conv", name, opts, k);
}

/* Whether im2col and col2im move rows (im2col_rows, col2im_rows): on
 * PoCL, whose work-items run as loops, for planes narrow enough to unroll. */
#define CONV_ROWS_MAX_W 64
static int by_rows(const clt_context *ctx, const geom *g) {
  return clt__items_run_as_loops(ctx) && g->W <= CONV_ROWS_MAX_W && g->OW <= CONV_ROWS_MAX_W;
}

/* col (K, B*P) = im2col of samples [n0, n0 + B) of x. */
static int im2col(clt_context *ctx, const geom *g, const clt_tensor *x, int64_t n0, int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x) + (cl_ulong)(n0 * g->Cin * g->H * g->W), coff = ws_col(g);
  int rows = by_rows(ctx, g);
  CLT_TRY(rows ? geom_kernel(ctx, g, "im2col_rows", &k) : conv_kernel(ctx, g, "im2col", &k));
  NN_ARG(k, 0, x->buf);
  NN_ARG(k, 1, xoff);
  NN_ARG(k, 2, g->ws.buf);
  NN_ARG(k, 3, coff);
  if (rows) {
    cl_uint ub = (cl_uint)B;
    NN_ARG(k, 4, ub);
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->OH, (size_t)(g->Cin * g->KH * B), 1));
  } else {
    CLT_TRY(geom_args(k, g, B));
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->OW, (size_t)g->OH, (size_t)(g->K * B)));
  }
fail:
  return rc;
}

/* Samples [n0, n0 + B) of dx = col2im(col). */
static int col2im(clt_context *ctx, const geom *g, const clt_tensor *dx, int64_t n0, int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong coff = ws_col(g), dxoff = clt__nn_off(dx) + (cl_ulong)(n0 * g->Cin * g->H * g->W);
  int rows = by_rows(ctx, g);
  CLT_TRY(rows ? geom_kernel(ctx, g, "col2im_rows", &k) : conv_kernel(ctx, g, "col2im", &k));
  NN_ARG(k, 0, g->ws.buf);
  NN_ARG(k, 1, coff);
  NN_ARG(k, 2, dx->buf);
  NN_ARG(k, 3, dxoff);
  if (rows) {
    cl_uint ub = (cl_uint)B;
    NN_ARG(k, 4, ub);
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->H, (size_t)(B * g->Cin), 1));
  } else {
    CLT_TRY(geom_args(k, g, B));
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->W, (size_t)g->H, (size_t)(B * g->Cin)));
  }
fail:
  return rc;
}

/* Samples [n0, n0 + B) of y (N, Cout, P) = T (Cout, B*P) reordered, + b. */
static int t_to_y(clt_context *ctx, const geom *g, const clt_tensor *b, const clt_tensor *y, int64_t n0,
                  int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong toff = ws_t(g), yoff = clt__nn_off(y) + (cl_ulong)(n0 * g->Cout * g->P);
  cl_ulong boff = b ? clt__nn_off(b) : 0;
  cl_mem bbuf = b ? b->buf : g->ws.buf; /* never read without a bias */
  cl_int has_bias = b != NULL;
  cl_uint ub = (cl_uint)B, uc = (cl_uint)g->Cout, up = (cl_uint)g->P;
  CLT_TRY(conv_kernel(ctx, g, "cbp_to_bcp", &k));
  NN_ARG(k, 0, g->ws.buf);
  NN_ARG(k, 1, toff);
  NN_ARG(k, 2, y->buf);
  NN_ARG(k, 3, yoff);
  NN_ARG(k, 4, bbuf);
  NN_ARG(k, 5, boff);
  NN_ARG(k, 6, has_bias);
  NN_ARG(k, 7, ub);
  NN_ARG(k, 8, uc);
  NN_ARG(k, 9, up);
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->P, (size_t)g->Cout, (size_t)B));
fail:
  return rc;
}

/* T (Cout, B*P) = samples [n0, n0 + B) of dy (N, Cout, P) reordered. */
static int dy_to_t(clt_context *ctx, const geom *g, const clt_tensor *dy, int64_t n0, int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong dyoff = clt__nn_off(dy) + (cl_ulong)(n0 * g->Cout * g->P), toff = ws_t(g);
  cl_uint ub = (cl_uint)B, uc = (cl_uint)g->Cout, up = (cl_uint)g->P;
  CLT_TRY(conv_kernel(ctx, g, "bcp_to_cbp", &k));
  NN_ARG(k, 0, dy->buf);
  NN_ARG(k, 1, dyoff);
  NN_ARG(k, 2, g->ws.buf);
  NN_ARG(k, 3, toff);
  NN_ARG(k, 4, ub);
  NN_ARG(k, 5, uc);
  NN_ARG(k, 6, up);
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->P, (size_t)B, (size_t)g->Cout));
fail:
  return rc;
}

/* ---- direct convolution for small K (cl/conv.cl) ---------------------------
 * Up to this many inputs per output, forward and (for a first layer, which
 * needs no dx) the weight gradient skip im2col and the GEMM: on a 1-input
 * 3x3 layer (K = 9) those wrote and streamed 9 copies of the input for 9
 * multiply-adds per output. The kernels read a zero-padded copy of the
 * input (in the workspace, a chunk of samples at a time) so they need no
 * bounds tests; without padding they read x itself. Measured with
 * bench/nn_bench. */
#define CONV_DIRECT_MAX_K 32

/* Samples per direct chunk (0: the im2col path: asked for, or K too large
 * under CLT_NN_CONV_AUTO, or the padded copy of one sample does not fit the
 * workspace). */
static int64_t direct_chunk(const geom *g, clt_nn_conv2d_algo algo) {
  if (algo == CLT_NN_CONV_IM2COL || (algo == CLT_NN_CONV_AUTO && g->K > CONV_DIRECT_MAX_K)) return 0;
  if (g->ph == 0 && g->pw == 0 && !g->half) return g->N;
  int64_t per = g->Cin * (g->H + 2 * g->ph) * (g->W + 2 * g->pw);
  int64_t c = clt_tensor_numel(&g->ws) / per;
  if (c > NN_MAX_ELEMS / per) c = NN_MAX_ELEMS / per;
  return c < g->N ? c : g->N;
}

/* Where the direct kernels read samples [n0, n0 + B) of x: a padded f32
 * copy at the start of the workspace, or x itself when it is f32 and needs
 * no padding. */
typedef struct direct_src {
  cl_mem buf;
  cl_ulong off;
  cl_uint H, W;
} direct_src;

static int direct_source(clt_context *ctx, const geom *g, const clt_tensor *x, int64_t n0, int64_t B,
                         direct_src *src) {
  int rc = CLT_OK;
  cl_ulong xoff = clt__nn_off(x) + (cl_ulong)(n0 * g->Cin * g->H * g->W);
  if (g->ph == 0 && g->pw == 0 && !g->half) {
    *src = (direct_src){x->buf, xoff, (cl_uint)g->H, (cl_uint)g->W};
    return CLT_OK;
  }
  *src = (direct_src){g->ws.buf, ws_col(g), (cl_uint)(g->H + 2 * g->ph), (cl_uint)(g->W + 2 * g->pw)};
  cl_kernel k;
  cl_uint H = (cl_uint)g->H, W = (cl_uint)g->W;
  cl_int ph = g->ph, pw = g->pw;
  CLT_TRY(conv_kernel(ctx, g, "pad_input", &k));
  NN_ARG(k, 0, x->buf);
  NN_ARG(k, 1, xoff);
  NN_ARG(k, 2, src->buf);
  NN_ARG(k, 3, src->off);
  NN_ARG(k, 4, H);
  NN_ARG(k, 5, W);
  NN_ARG(k, 6, ph);
  NN_ARG(k, 7, pw);
  CLT_TRY(clt__nn_launch_3d(ctx, k, src->W, src->H, (size_t)(B * g->Cin)));
fail:
  return rc;
}

/* y for samples [n0, n0 + B), read from src. */
static int direct_forward(clt_context *ctx, const geom *g, const direct_src *src, const clt_tensor *w,
                          const clt_tensor *b, const clt_tensor *y, int64_t n0, int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong woff = clt__nn_off(w), boff = b ? clt__nn_off(b) : 0;
  cl_ulong yoff = clt__nn_off(y) + (cl_ulong)(n0 * g->Cout * g->P);
  cl_mem bbuf = b ? b->buf : w->buf; /* never read without a bias */
  cl_int has_bias = b != NULL;
  cl_uint v[3] = {(cl_uint)g->Cout, (cl_uint)g->OH, (cl_uint)g->OW};
  int rows = by_rows(ctx, g);
  CLT_TRY(geom_kernel(ctx, g, rows ? "conv_direct_forward_rows" : "conv_direct_forward", &k));
  NN_ARG(k, 0, src->buf);
  NN_ARG(k, 1, src->off);
  NN_ARG(k, 2, w->buf);
  NN_ARG(k, 3, woff);
  NN_ARG(k, 4, bbuf);
  NN_ARG(k, 5, boff);
  NN_ARG(k, 6, has_bias);
  NN_ARG(k, 7, y->buf);
  NN_ARG(k, 8, yoff);
  NN_ARG(k, 9, v[0]);
  NN_ARG(k, 10, src->H);
  NN_ARG(k, 11, src->W);
  if (rows) {
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->OH, (size_t)(B * g->Cout), 1));
  } else {
    NN_ARG(k, 12, v[1]);
    NN_ARG(k, 13, v[2]);
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->OW, (size_t)g->OH, (size_t)(B * g->Cout)));
  }
fail:
  return rc;
}

/* direct_backward_weights on PoCL: per-row sums into the context's
 * scratch, then their sums in row order into dw and db (cl/conv.cl). */
static int direct_backward_weights_rows(clt_context *ctx, const geom *g, const direct_src *src,
                                        const clt_tensor *dy, const clt_tensor *dw, const clt_tensor *db,
                                        int64_t n0, int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_mem part;
  cl_ulong dyoff = clt__nn_off(dy) + (cl_ulong)(n0 * g->Cout * g->P), dwoff = clt__nn_off(dw);
  cl_ulong dboff = db ? clt__nn_off(db) : 0;
  cl_mem dbbuf = db ? db->buf : dw->buf; /* never written without a bias */
  cl_int has_bias = db != NULL;
  cl_uint v[2] = {(cl_uint)B, (cl_uint)g->Cout};
  CLT_TRY(clt__context_scratch(ctx, (size_t)(g->Cout * g->OH * (g->K + 1)) * sizeof(float), &part));
  CLT_TRY(geom_kernel(ctx, g, "conv_direct_backward_weights_rows", &k));
  NN_ARG(k, 0, src->buf);
  NN_ARG(k, 1, src->off);
  NN_ARG(k, 2, dy->buf);
  NN_ARG(k, 3, dyoff);
  NN_ARG(k, 4, part);
  NN_ARG(k, 5, v[0]);
  NN_ARG(k, 6, v[1]);
  NN_ARG(k, 7, src->H);
  NN_ARG(k, 8, src->W);
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->OH, (size_t)g->Cout, 1));
  CLT_TRY(geom_kernel(ctx, g, "conv_direct_backward_weights_sum", &k));
  NN_ARG(k, 0, part);
  NN_ARG(k, 1, dw->buf);
  NN_ARG(k, 2, dwoff);
  NN_ARG(k, 3, dbbuf);
  NN_ARG(k, 4, dboff);
  NN_ARG(k, 5, has_bias);
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)(g->K + 1), (size_t)g->Cout, 1));
fail:
  return rc;
}

/* dw and db += the sums over samples [n0, n0 + B), read from src. */
static int direct_backward_weights(clt_context *ctx, const geom *g, const direct_src *src, const clt_tensor *dy,
                                   const clt_tensor *dw, const clt_tensor *db, int64_t n0, int64_t B) {
  if (by_rows(ctx, g)) return direct_backward_weights_rows(ctx, g, src, dy, dw, db, n0, B);
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong dyoff = clt__nn_off(dy) + (cl_ulong)(n0 * g->Cout * g->P), dwoff = clt__nn_off(dw);
  cl_ulong dboff = db ? clt__nn_off(db) : 0;
  cl_mem dbbuf = db ? db->buf : dw->buf; /* never written without a bias */
  cl_int has_bias = db != NULL;
  cl_uint v[4] = {(cl_uint)B, (cl_uint)g->Cout, (cl_uint)g->OH, (cl_uint)g->OW};
  CLT_TRY(geom_kernel(ctx, g, "conv_direct_backward_weights", &k));
  /* Each item keeps K + 1 sums in scratch: fit the group to local memory. */
  size_t wgs = clt__nn_row_wgs(ctx, k, g->P, 256);
  size_t row = (size_t)(g->K + 1) * sizeof(float);
  while (wgs > 1 && wgs * row > ctx->info.local_mem_bytes / 2) wgs /= 2;
  NN_ARG(k, 0, src->buf);
  NN_ARG(k, 1, src->off);
  NN_ARG(k, 2, dy->buf);
  NN_ARG(k, 3, dyoff);
  NN_ARG(k, 4, dw->buf);
  NN_ARG(k, 5, dwoff);
  NN_ARG(k, 6, dbbuf);
  NN_ARG(k, 7, dboff);
  NN_ARG(k, 8, has_bias);
  NN_ARG(k, 9, v[0]);
  NN_ARG(k, 10, v[1]);
  NN_ARG(k, 11, src->H);
  NN_ARG(k, 12, src->W);
  NN_ARG(k, 13, v[2]);
  NN_ARG(k, 14, v[3]);
  CLT_CL_TRY(clSetKernelArg(k, 15, wgs * row, NULL));
  CLT_TRY(clt__nn_launch_groups(ctx, k, (size_t)g->Cout, wgs));
fail:
  return rc;
}

/* The geometry as src/nn/conv_cpu.c sees it. */
static clt__conv3 conv3_of(const geom *g) {
  clt__conv3 c = {g->N, g->Cin, g->Cout, {1, g->H, g->W}, {1, g->KH, g->KW}, {1, g->OH, g->OW},
                  {1, g->sh, g->sw}, {0, g->ph, g->pw}, {1, 1, 1}, g->half};
  return c;
}

int clt_nn_conv2d_forward(clt_context *ctx, const clt_nn_conv2d_cfg *cfg, const clt_tensor *x,
                          const clt_tensor *w, const clt_tensor *b, const clt_tensor *y,
                          const clt_tensor *workspace) {
  static const char op[] = "conv2d forward";
  geom g;
  int rc = check_conv(op, cfg, x, w, b, "b", y, "y", workspace, &g);
  if (rc < 0) return rc;
  fit_chunk_to_cache(ctx, &g);
  if ((unsigned)cfg->algo > CLT_NN_CONV_DIRECT)
    return clt__error(CLT_EINVAL, "%s: unknown algorithm %d (auto, im2col or direct)", op, (int)cfg->algo);
  int64_t dc = direct_chunk(&g, cfg->algo);
  for (int64_t n0 = 0; dc > 0 && n0 < g.N; n0 += dc) {
    int64_t B = g.N - n0 < dc ? g.N - n0 : dc;
    direct_src src;
    CLT_TRY(direct_source(ctx, &g, x, n0, B, &src));
    CLT_TRY(direct_forward(ctx, &g, &src, w, b, y, n0, B));
  }
  if (dc > 0) return CLT_OK;
  clt__conv3 c3 = conv3_of(&g);
  if (cfg->algo == CLT_NN_CONV_AUTO && clt__conv_cpu_takes(ctx, &c3) &&
      (rc = clt__conv_cpu_forward(ctx, &c3, x, w, b, y, workspace)) != 0)
    return rc < 0 ? clt__error_prefix(rc, "%s on %s", op, ctx->info.name) : CLT_OK;
  clt_matrix mw = clt__nn_mat(w, g.K);
  for (int64_t n0 = 0; n0 < g.N; n0 += g.chunk) {
    int64_t B = g.N - n0 < g.chunk ? g.N - n0 : g.chunk, BP = B * g.P;
    clt_matrix col = {g.ws.buf, (size_t)ws_col(&g), (size_t)BP}, t = {g.ws.buf, (size_t)ws_t(&g), (size_t)BP};
    CLT_TRY(im2col(ctx, &g, x, n0, B));
    /* T (Cout, BP) = w (Cout, K) col (K, BP) */
    CLT_TRY(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, (size_t)g.Cout, (size_t)BP, (size_t)g.K, 1.0f, mw, col, 0.0f,
                      t));
    CLT_TRY(t_to_y(ctx, &g, b, y, n0, B));
  }
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_conv2d_backward(clt_context *ctx, const clt_nn_conv2d_cfg *cfg, const clt_tensor *x,
                           const clt_tensor *w, const clt_tensor *dy, const clt_tensor *dx, const clt_tensor *dw,
                           const clt_tensor *db, const clt_tensor *workspace) {
  static const char op[] = "conv2d backward";
  geom g;
  int rc = check_conv(op, cfg, x, w, db, "db", dy, "dy", workspace, &g);
  if (rc < 0) return rc;
  fit_chunk_to_cache(ctx, &g);
  if ((rc = clt__nn_check_like(op, "dw", dw, "w", w)) < 0) return rc;
  if (dx && (rc = clt__nn_check_like(op, "dx", dx, "x", x)) < 0) return rc;
  int64_t dc = dx ? 0 : direct_chunk(&g, CLT_NN_CONV_AUTO); /* a first layer: dw and db only */
  for (int64_t n0 = 0; dc > 0 && n0 < g.N; n0 += dc) {
    int64_t B = g.N - n0 < dc ? g.N - n0 : dc;
    direct_src src;
    CLT_TRY(direct_source(ctx, &g, x, n0, B, &src));
    CLT_TRY(direct_backward_weights(ctx, &g, &src, dy, dw, db, n0, B));
  }
  if (dc > 0) return CLT_OK;
  clt__conv3 c3 = conv3_of(&g);
  if (cfg->algo == CLT_NN_CONV_AUTO && clt__conv_cpu_takes(ctx, &c3) &&
      (rc = clt__conv_cpu_backward(ctx, &c3, x, w, dy, dx, dw, db, workspace)) != 0)
    return rc < 0 ? clt__error_prefix(rc, "%s on %s", op, ctx->info.name) : CLT_OK;
  clt_matrix mw = clt__nn_mat(w, g.K), mdw = clt__nn_mat(dw, g.K);
  if (db) CLT_TRY(clt__nn_bias_grad(ctx, dy, db, g.N, g.Cout, g.P));
  for (int64_t n0 = 0; n0 < g.N; n0 += g.chunk) {
    int64_t B = g.N - n0 < g.chunk ? g.N - n0 : g.chunk, BP = B * g.P;
    clt_matrix col = {g.ws.buf, (size_t)ws_col(&g), (size_t)BP}, t = {g.ws.buf, (size_t)ws_t(&g), (size_t)BP};
    CLT_TRY(dy_to_t(ctx, &g, dy, n0, B));
    CLT_TRY(im2col(ctx, &g, x, n0, B));
    /* dw (Cout, K) += T (Cout, BP) col^T (BP, K) */
    CLT_TRY(clt_sgemm(ctx, CLT_NO_TRANS, CLT_TRANS, (size_t)g.Cout, (size_t)g.K, (size_t)BP, 1.0f, t, col, 1.0f,
                      mdw));
    if (!dx) continue;
    /* col (K, BP) = w^T (K, Cout) T (Cout, BP); the queue is in order, so
     * the GEMM above has read col before this one overwrites it. */
    CLT_TRY(clt_sgemm(ctx, CLT_TRANS, CLT_NO_TRANS, (size_t)g.K, (size_t)BP, (size_t)g.Cout, 1.0f, mw, t, 0.0f,
                      col));
    CLT_TRY(col2im(ctx, &g, dx, n0, B));
  }
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
