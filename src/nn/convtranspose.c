/*
 * convtranspose.c: transposed convolution in 1, 2 or 3 spatial dimensions,
 * as torch.nn.ConvTranspose1d/2d/3d (groups 1, dilation 1): forward and
 * backward, as GEMMs around col2im and im2col (cl/convtranspose.cl).
 *
 * A transposed convolution is a convolution's backward-data, so its
 * forward is that backward and its backward that forward. For a chunk of
 * B samples, with P = D*H*W (the input's cells) and R = Cout*KD*KH*KW:
 *   forward   T (Cin, B*P) = x reordered
 *             col (R, B*P) = w^T (R, Cin) T            [w is (Cin, R)]
 *             y = col2im(col) + b
 *   backward  T (Cin, B*P) = x reordered               db += sums of dy
 *             col = im2col(dy)                         dw += T col^T
 *             T = w col  (reusing T's space)           dx = T reordered
 * One large GEMM per chunk (as src/nn/conv.c). The workspace (col, then T)
 * is the caller's, sized by clt_nn_convtranspose_workspace_bytes; a smaller
 * one only means more chunks. On a CPU device chunks are kept small enough
 * for col to stay in the cache between the kernel that writes it and the
 * GEMM that reads it. Activations may be f16 (mixed precision): the
 * kernels that touch them widen and round, the workspace stays f32.
 */
#include "nn/common.h"

#include <stdio.h>

typedef struct ct_geom {
  int ns;                       /* spatial axes: 1, 2 or 3 */
  int64_t N, Cin, Cout;
  int64_t in[3], out[3], k[3];  /* (D, H, W), 1 for the axes the tensors lack */
  int s[3], p[3];
  int64_t P, OP, R;             /* P = input cells, OP = output cells, R = Cout * kernel cells */
  int64_t chunk;                /* samples per GEMM */
  clt_tensor ws;                /* col (R, chunk*P) then T (Cin, chunk*P) */
  int half;
} ct_geom;

int64_t clt_nn_convt_out_size(int64_t in, int64_t k, int stride, int pad, int output_pad) {
  if (in < 1 || k < 1 || stride < 1 || pad < 0 || output_pad < 0) return 0;
  int64_t o = (in - 1) * stride - 2 * (int64_t)pad + k + output_pad;
  return o < 1 ? 0 : o;
}

size_t clt_nn_convtranspose_workspace_bytes(int64_t samples, int64_t cin, int64_t cout, int64_t kernel_cells,
                                            int64_t in_cells) {
  return (size_t)samples * (size_t)(cout * kernel_cells + cin) * (size_t)in_cells * sizeof(float);
}

static const char *const layouts[] = {"", "(N, C, L)", "(N, C, H, W)", "(N, C, D, H, W)"};

/* Check every tensor and work out the geometry; big is y (forward) or dy. */
static int check_ct(const char *op, const clt_nn_convt_cfg *cfg, const clt_tensor *x, const clt_tensor *w,
                    const clt_tensor *b, const char *bname, const clt_tensor *big, const char *yname,
                    const clt_tensor *ws, ct_geom *g) {
  int rc;
  if (!cfg) return clt__error(CLT_EINVAL, "%s: no configuration (stride, padding) given", op);
  if ((rc = clt__nn_check_act(op, "x", x, 0, "(N, Cin, L), (N, Cin, H, W) or (N, Cin, D, H, W)")) < 0) return rc;
  if (x->ndim < 3 || x->ndim > 5)
    return clt__nn_shape_error(op, (clt__nn_named[]){{"x", x}}, 1,
                               "x must be (N, Cin, L), (N, Cin, H, W) or (N, Cin, D, H, W)");
  g->ns = x->ndim - 2;
  const char *lay = layouts[g->ns];
  if ((rc = clt__nn_check(op, "w", w, CLT_F32, x->ndim, "(Cin, Cout, kernel...)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, yname, big, x->ndim, lay)) < 0) return rc;
  if ((rc = clt__nn_check_same_act(op, "x", x, yname, big)) < 0) return rc;
  if (b && (rc = clt__nn_check(op, bname, b, CLT_F32, 1, "(Cout)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "workspace", ws, CLT_F32, 0, "(any shape)")) < 0) return rc;
  clt__nn_named ts[] = {{"x", x}, {"w", w}, {bname, b}, {yname, big}};
  g->half = x->dtype == CLT_F16;
  g->N = x->shape[0], g->Cin = x->shape[1], g->Cout = w->shape[1];
  if (w->shape[0] != g->Cin)
    return clt__nn_shape_error(op, ts, 4, "x has %lld channels, w expects %lld", (long long)g->Cin,
                               (long long)w->shape[0]);
  g->P = g->OP = 1;
  g->R = g->Cout;
  for (int a = 0; a < 3; a++) {
    int t = a - (3 - g->ns); /* the tensor's spatial axis, or < 0 */
    g->in[a] = t < 0 ? 1 : x->shape[2 + t];
    g->k[a] = t < 0 ? 1 : w->shape[2 + t];
    g->s[a] = t < 0 ? 1 : cfg->stride[t];
    g->p[a] = t < 0 ? 0 : cfg->pad[t];
    int op_pad = t < 0 ? 0 : cfg->output_pad[t];
    if (g->s[a] < 1 || g->p[a] < 0 || op_pad < 0 || op_pad >= g->s[a])
      return clt__error(CLT_EINVAL, "%s: axis %d: stride %d must be at least 1, padding %d at least 0 and "
                        "output padding %d from 0 to stride - 1", op, t, g->s[a], g->p[a], op_pad);
    g->out[a] = t < 0 ? 1 : clt_nn_convt_out_size(g->in[a], g->k[a], g->s[a], g->p[a], op_pad);
    if (g->out[a] < 1)
      return clt__nn_shape_error(op, ts, 4, "axis %d: kernel %lld, stride %d, padding %d leave no output", t,
                                 (long long)g->k[a], g->s[a], g->p[a]);
    g->P *= g->in[a], g->OP *= g->out[a], g->R *= g->k[a];
  }
  if (big->shape[0] != g->N || big->shape[1] != g->Cout)
    return clt__nn_shape_error(op, ts, 4, "%s must have %lld samples of %lld channels", yname, (long long)g->N,
                               (long long)g->Cout);
  for (int t = 0; t < g->ns; t++)
    if (big->shape[2 + t] != g->out[3 - g->ns + t])
      return clt__nn_shape_error(op, ts, 4, "%s's axis %d must be %lld for stride %d, padding %d, output padding %d",
                                 yname, t, (long long)g->out[3 - g->ns + t], cfg->stride[t], cfg->pad[t],
                                 cfg->output_pad[t]);
  if (b && b->shape[0] != g->Cout)
    return clt__nn_shape_error(op, ts, 4, "%s must have %lld elements", bname, (long long)g->Cout);
  int64_t per_sample = (g->R + g->Cin) * g->P;
  g->chunk = clt_tensor_numel(ws) / per_sample;
  if (g->chunk > g->N) g->chunk = g->N;
  int64_t widest = (g->R > g->Cin ? g->R : g->Cin) * g->P;
  if (widest < g->Cout * g->OP) widest = g->Cout * g->OP;
  if (g->chunk > NN_MAX_ELEMS / widest) g->chunk = NN_MAX_ELEMS / widest;
  if (g->chunk < 1)
    return clt__error(CLT_ESHAPE, "%s: the workspace holds %zu bytes, but one sample needs %zu "
                      "(clt_nn_convtranspose_workspace_bytes(1, %lld, %lld, %lld, %lld))",
                      op, clt_tensor_bytes(ws), (size_t)per_sample * sizeof(float), (long long)g->Cin,
                      (long long)g->Cout, (long long)(g->R / g->Cout), (long long)g->P);
  g->ws = *ws;
  return CLT_OK;
}

/* On a CPU device, chunks whose col fits in about CT_CPU_COL_BYTES, so the
 * GEMM reads it from the cache (as conv2d: src/nn/conv.c). */
#define CT_CPU_COL_BYTES (1 << 20)
static void fit_chunk_to_cache(const clt_context *ctx, ct_geom *g) {
  if (ctx->info.type != CLT_DEVICE_CPU) return;
  int64_t fit = CT_CPU_COL_BYTES / (g->R * g->P * (int64_t)sizeof(float));
  if (fit < 1) fit = 1;
  if (g->chunk > fit) g->chunk = fit;
}

static cl_ulong ws_col(const ct_geom *g) { return clt__nn_off(&g->ws); }
static cl_ulong ws_t(const ct_geom *g) { return clt__nn_off(&g->ws) + (cl_ulong)(g->R * g->chunk * g->P); }

/* cl/convtranspose.cl built for this geometry. */
static int ct_kernel(clt_context *ctx, const ct_geom *g, const char *name, cl_kernel *k) {
  char opts[512];
  snprintf(opts, sizeof opts,
           "-DCT_C=%lld -DCT_D=%lld -DCT_H=%lld -DCT_W=%lld -DCT_OD=%lld -DCT_OH=%lld -DCT_OW=%lld -DCT_KD=%lld "
           "-DCT_KH=%lld -DCT_KW=%lld -DCT_SD=%d -DCT_SH=%d -DCT_SW=%d -DCT_PD=%d -DCT_PH=%d -DCT_PW=%d%s",
           (long long)g->Cout, (long long)g->in[0], (long long)g->in[1], (long long)g->in[2], (long long)g->out[0],
           (long long)g->out[1], (long long)g->out[2], (long long)g->k[0], (long long)g->k[1], (long long)g->k[2],
           g->s[0], g->s[1], g->s[2], g->p[0], g->p[1], g->p[2], g->half ? " -DCLT_HALF" : "");
  return clt_context_kernel(ctx, "convtranspose", name, opts, k);
}

/* T (C, B*P) = samples [n0, n0 + B) of a (N, C, P) reordered, or back. */
static int reorder(clt_context *ctx, const ct_geom *g, const clt_tensor *a, int64_t C, int64_t n0, int64_t B,
                   int to_t) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong aoff = clt__nn_off(a) + (cl_ulong)(n0 * C * g->P), toff = ws_t(g);
  cl_uint ub = (cl_uint)B, uc = (cl_uint)C, up = (cl_uint)g->P;
  CLT_TRY(ct_kernel(ctx, g, to_t ? "ct_bcp_to_cbp" : "ct_cbp_to_bcp", &k));
  if (to_t) {
    CLT_TRY(NN_SET_ARGS(k, NN_VAL(a->buf), NN_VAL(aoff), NN_VAL(g->ws.buf), NN_VAL(toff), NN_VAL(ub), NN_VAL(uc),
                        NN_VAL(up)));
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->P, (size_t)B, (size_t)C));
  } else {
    CLT_TRY(NN_SET_ARGS(k, NN_VAL(g->ws.buf), NN_VAL(toff), NN_VAL(a->buf), NN_VAL(aoff), NN_VAL(ub), NN_VAL(uc),
                        NN_VAL(up)));
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->P, (size_t)C, (size_t)B));
  }
fail:
  return rc;
}

/* Samples [n0, n0 + B) of y = col2im(col) + b. */
static int col2im(clt_context *ctx, const ct_geom *g, const clt_tensor *b, const clt_tensor *y, int64_t n0,
                  int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong coff = ws_col(g), yoff = clt__nn_off(y) + (cl_ulong)(n0 * g->Cout * g->OP);
  cl_ulong boff = b ? clt__nn_off(b) : 0;
  cl_mem bbuf = b ? b->buf : g->ws.buf; /* never read without a bias */
  cl_int has_bias = b != NULL;
  cl_uint ub = (cl_uint)B;
  CLT_TRY(ct_kernel(ctx, g, "ct_col2im", &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(g->ws.buf), NN_VAL(coff), NN_VAL(y->buf), NN_VAL(yoff), NN_VAL(bbuf), NN_VAL(boff),
                      NN_VAL(has_bias), NN_VAL(ub)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->out[2], (size_t)g->out[1], (size_t)(B * g->Cout * g->out[0])));
fail:
  return rc;
}

/* col = im2col of samples [n0, n0 + B) of dy. */
static int im2col(clt_context *ctx, const ct_geom *g, const clt_tensor *dy, int64_t n0, int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong dyoff = clt__nn_off(dy) + (cl_ulong)(n0 * g->Cout * g->OP), coff = ws_col(g);
  cl_uint ub = (cl_uint)B;
  CLT_TRY(ct_kernel(ctx, g, "ct_im2col", &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(g->ws.buf), NN_VAL(coff), NN_VAL(ub)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->in[2], (size_t)g->in[1], (size_t)(g->R * B * g->in[0])));
fail:
  return rc;
}

int clt_nn_convtranspose_forward(clt_context *ctx, const clt_nn_convt_cfg *cfg, const clt_tensor *x,
                                 const clt_tensor *w, const clt_tensor *b, const clt_tensor *y,
                                 const clt_tensor *workspace) {
  static const char op[] = "convtranspose forward";
  ct_geom g;
  int rc = check_ct(op, cfg, x, w, b, "b", y, "y", workspace, &g);
  if (rc < 0) return rc;
  fit_chunk_to_cache(ctx, &g);
  clt_matrix mw = clt__nn_mat(w, g.R);
  for (int64_t n0 = 0; n0 < g.N; n0 += g.chunk) {
    int64_t B = g.N - n0 < g.chunk ? g.N - n0 : g.chunk, BP = B * g.P;
    clt_matrix col = {g.ws.buf, (size_t)ws_col(&g), (size_t)BP}, t = {g.ws.buf, (size_t)ws_t(&g), (size_t)BP};
    CLT_TRY(reorder(ctx, &g, x, g.Cin, n0, B, 1));
    /* col (R, BP) = w^T (R, Cin) T (Cin, BP) */
    CLT_TRY(clt_sgemm(ctx, CLT_TRANS, CLT_NO_TRANS, (size_t)g.R, (size_t)BP, (size_t)g.Cin, 1.0f, mw, t, 0.0f, col));
    CLT_TRY(col2im(ctx, &g, b, y, n0, B));
  }
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_convtranspose_backward(clt_context *ctx, const clt_nn_convt_cfg *cfg, const clt_tensor *x,
                                  const clt_tensor *w, const clt_tensor *dy, const clt_tensor *dx,
                                  const clt_tensor *dw, const clt_tensor *db, const clt_tensor *workspace) {
  static const char op[] = "convtranspose backward";
  ct_geom g;
  int rc = check_ct(op, cfg, x, w, db, "db", dy, "dy", workspace, &g);
  if (rc < 0) return rc;
  fit_chunk_to_cache(ctx, &g);
  if ((rc = clt__nn_check_like(op, "dw", dw, "w", w)) < 0) return rc;
  if (dx && (rc = clt__nn_check_like(op, "dx", dx, "x", x)) < 0) return rc;
  clt_matrix mw = clt__nn_mat(w, g.R), mdw = clt__nn_mat(dw, g.R);
  if (db) CLT_TRY(clt__nn_bias_grad(ctx, dy, db, g.N, g.Cout, g.OP));
  for (int64_t n0 = 0; n0 < g.N; n0 += g.chunk) {
    int64_t B = g.N - n0 < g.chunk ? g.N - n0 : g.chunk, BP = B * g.P;
    clt_matrix col = {g.ws.buf, (size_t)ws_col(&g), (size_t)BP}, t = {g.ws.buf, (size_t)ws_t(&g), (size_t)BP};
    CLT_TRY(reorder(ctx, &g, x, g.Cin, n0, B, 1));
    CLT_TRY(im2col(ctx, &g, dy, n0, B));
    /* dw (Cin, R) += T (Cin, BP) col^T (BP, R) */
    CLT_TRY(clt_sgemm(ctx, CLT_NO_TRANS, CLT_TRANS, (size_t)g.Cin, (size_t)g.R, (size_t)BP, 1.0f, t, col, 1.0f, mdw));
    if (!dx) continue;
    /* T (Cin, BP) = w (Cin, R) col (R, BP); the queue is in order, so the
     * GEMM above has read T before this one overwrites it. */
    CLT_TRY(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, (size_t)g.Cin, (size_t)BP, (size_t)g.R, 1.0f, mw, col, 0.0f,
                      t));
    CLT_TRY(reorder(ctx, &g, dx, g.Cin, n0, B, 0));
  }
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
