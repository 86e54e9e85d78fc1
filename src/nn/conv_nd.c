/*
 * conv_nd.c: 1-D, 2-D and 3-D convolution with stride, padding and
 * dilation, (N, C, spatial...) as PyTorch lays it out, forward and
 * backward, as vol2col + one GEMM per chunk of samples (cl/conv_nd.cl,
 * src/core/blas.c). conv1d and conv3d layers run here, and conv2d layers
 * with a dilation; undilated conv2d keeps its own tuned path (conv.c).
 *
 * Every geometry is seen as 3-D (a 1-D one as D = H = 1). For a chunk of B
 * samples, with K = Cin*KD*KH*KW and P = OD*OH*OW:
 *   forward   col (K, B*P) = vol2col(x)
 *             T (Cout, B*P) = w (Cout, K) col
 *             y (B, Cout, P) = T reordered, + b
 *   backward  T (Cout, B*P) = dy reordered        db += sums of dy
 *             col = vol2col(x)                    dw += T col^T  (one GEMM)
 *             col = w^T T  (reusing col's space)  dx = col2vol(col)
 * The workspace (col then T) is the caller's; a smaller one only means
 * more chunks. On a CPU device chunks are kept small enough for col to
 * stay in the cache, as conv.c does, and on PoCL vol2col and col2vol move
 * whole rows with the width axis compiled in (by_rows). Stride-1
 * convolutions on PoCL run as implicit GEMMs instead (src/nn/conv_cpu.c).
 */
#include "nn/common.h"

#include <stdio.h>

typedef struct nd_geom {
  int64_t N, Cin, Cout;
  int64_t in[3], k[3], out[3];   /* (D, H, W), kernel, output; leading axes 1 below 3-D */
  int s[3], p[3], d[3];
  int64_t K, P, chunk;
  clt_tensor ws;                 /* col (K, chunk*P) then T (Cout, chunk*P) */
  int half;
} nd_geom;

int64_t clt_nn_out_size_dilated(int64_t in, int64_t k, int stride, int pad, int dilation) {
  if (dilation < 1 || k < 1) return 0;
  return clt_nn_out_size(in, (k - 1) * dilation + 1, stride, pad);
}

size_t clt_nn_convnd_workspace_bytes(int64_t samples, int64_t cin, int64_t cout, int64_t kernel_elems,
                                     int64_t out_elems) {
  return (size_t)samples * (size_t)(cin * kernel_elems + cout) * (size_t)out_elems * sizeof(float);
}

static const char *const layouts[4][2] = {
    {"", ""}, {"(N, C, L)", "(Cout, Cin, K)"}, {"(N, C, H, W)", "(Cout, Cin, KH, KW)"},
    {"(N, C, D, H, W)", "(Cout, Cin, KD, KH, KW)"}};

/* Check the tensors of a call and work out its geometry; dy_like is y
 * (forward) or dy (backward), bname b or db. */
static int check_nd(const char *op, const clt_nn_convnd_cfg *cfg, const clt_tensor *x, const clt_tensor *w,
                    const clt_tensor *b, const char *bname, const clt_tensor *y, const char *yname,
                    const clt_tensor *ws, nd_geom *g) {
  int rc;
  if (!cfg) return clt__error(CLT_EINVAL, "%s: no configuration (stride, padding, dilation) given", op);
  int nd = cfg->dims;
  if (nd < 1 || nd > CLT_NN_MAX_SPATIAL)
    return clt__error(CLT_EINVAL, "%s: %d spatial dimensions (1, 2 or 3 are supported)", op, nd);
  for (int a = 0; a < nd; a++)
    if (cfg->stride[a] < 1 || cfg->pad[a] < 0 || cfg->dilation[a] < 0)
      return clt__error(CLT_EINVAL, "%s: axis %d: stride %d must be at least 1, padding %d and dilation %d at least 0",
                        op, a, cfg->stride[a], cfg->pad[a], cfg->dilation[a]);
  if ((rc = clt__nn_check_act(op, "x", x, 2 + nd, layouts[nd][0])) < 0) return rc;
  if ((rc = clt__nn_check(op, "w", w, CLT_F32, 2 + nd, layouts[nd][1])) < 0) return rc;
  if ((rc = clt__nn_check_act(op, yname, y, 2 + nd, layouts[nd][0])) < 0) return rc;
  if (b && (rc = clt__nn_check(op, bname, b, CLT_F32, 1, "(Cout)")) < 0) return rc;
  if ((rc = clt__nn_check(op, "workspace", ws, CLT_F32, 0, "(any shape)")) < 0) return rc;
  clt__nn_named ts[] = {{"x", x}, {"w", w}, {bname, b}, {yname, y}};
  if (x->dtype != y->dtype) return clt__nn_shape_error(op, ts, 4, "x and %s must be of one type", yname);
  g->half = x->dtype == CLT_F16;
  g->N = x->shape[0], g->Cin = x->shape[1], g->Cout = w->shape[0];
  if (w->shape[1] != g->Cin)
    return clt__nn_shape_error(op, ts, 4, "x has %lld channels, w expects %lld", (long long)g->Cin,
                               (long long)w->shape[1]);
  if (b && b->shape[0] != g->Cout)
    return clt__nn_shape_error(op, ts, 4, "%s must have %lld elements", bname, (long long)g->Cout);
  g->K = g->Cin, g->P = 1;
  for (int a = 0; a < 3; a++) {
    int i = a - (3 - nd); /* the cfg's axis, or < 0 for a leading axis of size 1 */
    g->in[a] = i < 0 ? 1 : x->shape[2 + i];
    g->k[a] = i < 0 ? 1 : w->shape[2 + i];
    g->s[a] = i < 0 ? 1 : cfg->stride[i];
    g->p[a] = i < 0 ? 0 : cfg->pad[i];
    g->d[a] = i < 0 || cfg->dilation[i] == 0 ? 1 : cfg->dilation[i];
    g->out[a] = clt_nn_out_size_dilated(g->in[a], g->k[a], g->s[a], g->p[a], g->d[a]);
    if (g->out[a] < 1)
      return clt__nn_shape_error(op, ts, 4, "axis %d: a kernel of %lld with dilation %d spans %lld, more than the "
                                 "input's %lld with padding %d on each side", i, (long long)g->k[a], g->d[a],
                                 (long long)((g->k[a] - 1) * g->d[a] + 1), (long long)g->in[a], g->p[a]);
    if (i >= 0 && y->shape[2 + i] != g->out[a])
      return clt__nn_shape_error(op, ts, 4, "%s must have %lld along spatial axis %d (stride %d, padding %d, "
                                 "dilation %d)", yname, (long long)g->out[a], i, g->s[a], g->p[a], g->d[a]);
    g->K *= g->k[a], g->P *= g->out[a];
  }
  if (y->shape[0] != g->N || y->shape[1] != g->Cout)
    return clt__nn_shape_error(op, ts, 4, "%s must be (%lld, %lld, ...)", yname, (long long)g->N, (long long)g->Cout);
  /* As many samples as the workspace holds, none whose col exceeds what
   * the kernels index with 32 bits. */
  int64_t per_sample = (g->K + g->Cout) * g->P, widest = (g->K > g->Cout ? g->K : g->Cout) * g->P;
  g->chunk = clt_tensor_numel(ws) / per_sample;
  if (g->chunk > g->N) g->chunk = g->N;
  if (g->chunk > NN_MAX_ELEMS / widest) g->chunk = NN_MAX_ELEMS / widest;
  if (g->chunk < 1) {
    char s[128];
    return clt__error(CLT_ESHAPE,
                      "%s: workspace %s holds %zu bytes, but one sample needs %zu "
                      "(clt_nn_convnd_workspace_bytes(1, %lld, %lld, %lld, %lld))",
                      op, clt_tensor_shape_str(ws, s, sizeof s), clt_tensor_bytes(ws),
                      (size_t)per_sample * sizeof(float), (long long)g->Cin, (long long)g->Cout,
                      (long long)(g->K / g->Cin), (long long)g->P);
  }
  g->ws = *ws;
  return CLT_OK;
}

/* As conv.c's fit_chunk_to_cache: on a CPU device, chunks whose col fits
 * in about 1 MB, a multiple of 16 / gcd(P, 16) samples when more than one
 * fits (whole 16-column tiles for src/core/blas_cpu.c). */
#define ND_CPU_COL_BYTES (1 << 20)
static void fit_chunk_to_cache(const clt_context *ctx, nd_geom *g) {
  if (ctx->info.type != CLT_DEVICE_CPU) return;
  int64_t fit = ND_CPU_COL_BYTES / (g->K * g->P * (int64_t)sizeof(float));
  if (fit < 1) fit = 1;
  int64_t q = 16, p = g->P;
  while (p % 2 == 0 && q > 1) p /= 2, q /= 2;
  if (fit > q) fit -= fit % q;
  if (g->chunk > fit) g->chunk = fit;
}

static cl_ulong ws_col(const nd_geom *g) { return clt__nn_off(&g->ws); }
static cl_ulong ws_t(const nd_geom *g) { return clt__nn_off(&g->ws) + (cl_ulong)(g->K * g->chunk * g->P); }

/* Whether vol2col and col2vol move rows (vol2col_rows, col2vol_rows): on
 * PoCL, whose work-items run as loops, for rows narrow enough to unroll. */
#define ND_ROWS_MAX_W 64
static int by_rows(const clt_context *ctx, const nd_geom *g) {
  return clt__items_run_as_loops(ctx) && g->in[2] <= ND_ROWS_MAX_W && g->out[2] <= ND_ROWS_MAX_W;
}

/* Run vol2col or col2vol on samples [n0, n0 + B): act is x or dx. */
static int move(clt_context *ctx, const nd_geom *g, const char *name, const clt_tensor *act, int64_t n0, int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  int to_col = name[0] == 'v', rows = by_rows(ctx, g);
  cl_ulong aoff = clt__nn_off(act) + (cl_ulong)(n0 * g->Cin * g->in[0] * g->in[1] * g->in[2]), coff = ws_col(g);
  if (rows) { /* the width axis compiled in */
    char opts[192], kname[32];
    snprintf(opts, sizeof opts, "-DND_W=%lld -DND_OW=%lld -DND_KW=%lld -DND_SW=%d -DND_PW=%d -DND_DW=%d%s",
             (long long)g->in[2], (long long)g->out[2], (long long)g->k[2], g->s[2], g->p[2], g->d[2],
             g->half ? " -DCLT_HALF" : "");
    snprintf(kname, sizeof kname, "%s_rows", name);
    CLT_TRY(clt_context_kernel(ctx, "conv_nd", kname, opts, &k));
  } else {
    CLT_TRY(clt_context_kernel(ctx, "conv_nd", name, g->half ? "-DCLT_HALF" : "", &k));
  }
  cl_mem from = to_col ? act->buf : g->ws.buf, to = to_col ? g->ws.buf : act->buf;
  cl_ulong from_off = to_col ? aoff : coff, to_off = to_col ? coff : aoff;
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(from), NN_VAL(from_off), NN_VAL(to), NN_VAL(to_off)));
  cl_uint u[11] = {(cl_uint)B, (cl_uint)g->Cin};
  for (int i = 0; i < 3; i++)
    u[2 + i] = (cl_uint)g->in[i], u[5 + i] = (cl_uint)g->k[i], u[8 + i] = (cl_uint)g->out[i];
  cl_int s[9];
  for (int i = 0; i < 3; i++) s[i] = g->s[i], s[3 + i] = g->p[i], s[6 + i] = g->d[i];
  CLT_TRY(clt__nn_args_array(k, 4, u, sizeof u[0], 11));
  CLT_TRY(clt__nn_args_array(k, 15, s, sizeof s[0], 9));
  if (rows && to_col) /* item (oh, (q*B + b)*OD + od), q a row of taps (ci, kd, kh) */
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->out[1], (size_t)(g->K / g->k[2] * B * g->out[0]), 1));
  else if (rows) /* item (ih, (b*Cin + ci)*D + id) */
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->in[1], (size_t)(B * g->Cin * g->in[0]), 1));
  else if (to_col)
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->out[2], (size_t)g->out[1], (size_t)(g->K * B * g->out[0])));
  else
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->in[2], (size_t)g->in[1], (size_t)(B * g->Cin * g->in[0])));
fail:
  return rc;
}

/* conv.cl's reorders between T (Cout, B*P) and (B, Cout, P) at sample n0:
 * to_y adds the bias (when b) and writes y; otherwise dy is read into T. */
static int reorder(clt_context *ctx, const nd_geom *g, int to_y, const clt_tensor *b, const clt_tensor *act,
                   int64_t n0, int64_t B) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong toff = ws_t(g), aoff = clt__nn_off(act) + (cl_ulong)(n0 * g->Cout * g->P);
  cl_uint ub = (cl_uint)B, uc = (cl_uint)g->Cout, up = (cl_uint)g->P;
  CLT_TRY(clt_context_kernel(ctx, "conv", to_y ? "cbp_to_bcp" : "bcp_to_cbp", g->half ? "-DCLT_HALF" : "", &k));
  if (to_y) {
    cl_ulong boff = b ? clt__nn_off(b) : 0;
    cl_mem bbuf = b ? b->buf : g->ws.buf; /* never read without a bias */
    cl_int has_bias = b != NULL;
    CLT_TRY(NN_SET_ARGS(k, NN_VAL(g->ws.buf), NN_VAL(toff), NN_VAL(act->buf), NN_VAL(aoff), NN_VAL(bbuf),
                        NN_VAL(boff), NN_VAL(has_bias), NN_VAL(ub), NN_VAL(uc), NN_VAL(up)));
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->P, (size_t)g->Cout, (size_t)B));
  } else {
    CLT_TRY(NN_SET_ARGS(k, NN_VAL(act->buf), NN_VAL(aoff), NN_VAL(g->ws.buf), NN_VAL(toff), NN_VAL(ub), NN_VAL(uc),
                        NN_VAL(up)));
    CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)g->P, (size_t)B, (size_t)g->Cout));
  }
fail:
  return rc;
}

/* The geometry as src/nn/conv_cpu.c sees it. */
static clt__conv3 conv3_of(const nd_geom *g) {
  clt__conv3 c = {g->N, g->Cin, g->Cout, {0}, {0}, {0}, {0}, {0}, {0}, g->half};
  for (int a = 0; a < 3; a++)
    c.in[a] = g->in[a], c.k[a] = g->k[a], c.out[a] = g->out[a], c.s[a] = g->s[a], c.p[a] = g->p[a], c.d[a] = g->d[a];
  return c;
}

int clt_nn_convnd_forward(clt_context *ctx, const clt_nn_convnd_cfg *cfg, const clt_tensor *x, const clt_tensor *w,
                          const clt_tensor *b, const clt_tensor *y, const clt_tensor *workspace) {
  static const char op[] = "convnd forward";
  nd_geom g;
  int rc = check_nd(op, cfg, x, w, b, "b", y, "y", workspace, &g);
  if (rc < 0) return rc;
  fit_chunk_to_cache(ctx, &g);
  clt__conv3 c3 = conv3_of(&g);
  if (clt__conv_cpu_takes(ctx, &c3) && (rc = clt__conv_cpu_forward(ctx, &c3, x, w, b, y, workspace)) != 0)
    return rc < 0 ? clt__error_prefix(rc, "%s on %s", op, ctx->info.name) : CLT_OK;
  clt_matrix mw = clt__nn_mat(w, g.K);
  for (int64_t n0 = 0; n0 < g.N; n0 += g.chunk) {
    int64_t B = g.N - n0 < g.chunk ? g.N - n0 : g.chunk, BP = B * g.P;
    clt_matrix col = {g.ws.buf, (size_t)ws_col(&g), (size_t)BP}, t = {g.ws.buf, (size_t)ws_t(&g), (size_t)BP};
    CLT_TRY(move(ctx, &g, "vol2col", x, n0, B));
    /* T (Cout, BP) = w (Cout, K) col (K, BP) */
    CLT_TRY(clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, (size_t)g.Cout, (size_t)BP, (size_t)g.K, 1.0f, mw, col, 0.0f,
                      t));
    CLT_TRY(reorder(ctx, &g, 1, b, y, n0, B));
  }
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_convnd_backward(clt_context *ctx, const clt_nn_convnd_cfg *cfg, const clt_tensor *x, const clt_tensor *w,
                           const clt_tensor *dy, const clt_tensor *dx, const clt_tensor *dw, const clt_tensor *db,
                           const clt_tensor *workspace) {
  static const char op[] = "convnd backward";
  nd_geom g;
  int rc = check_nd(op, cfg, x, w, db, "db", dy, "dy", workspace, &g);
  if (rc < 0) return rc;
  fit_chunk_to_cache(ctx, &g);
  if ((rc = clt__nn_check_like(op, "dw", dw, "w", w)) < 0) return rc;
  if (dx && (rc = clt__nn_check_like(op, "dx", dx, "x", x)) < 0) return rc;
  clt__conv3 c3 = conv3_of(&g);
  if (clt__conv_cpu_takes(ctx, &c3) &&
      (rc = clt__conv_cpu_backward(ctx, &c3, x, w, dy, dx, dw, db, workspace)) != 0)
    return rc < 0 ? clt__error_prefix(rc, "%s on %s", op, ctx->info.name) : CLT_OK;
  clt_matrix mw = clt__nn_mat(w, g.K), mdw = clt__nn_mat(dw, g.K);
  if (db) CLT_TRY(clt__nn_bias_grad(ctx, dy, db, g.N, g.Cout, g.P));
  for (int64_t n0 = 0; n0 < g.N; n0 += g.chunk) {
    int64_t B = g.N - n0 < g.chunk ? g.N - n0 : g.chunk, BP = B * g.P;
    clt_matrix col = {g.ws.buf, (size_t)ws_col(&g), (size_t)BP}, t = {g.ws.buf, (size_t)ws_t(&g), (size_t)BP};
    CLT_TRY(reorder(ctx, &g, 0, NULL, dy, n0, B));
    CLT_TRY(move(ctx, &g, "vol2col", x, n0, B));
    /* dw (Cout, K) += T (Cout, BP) col^T (BP, K) */
    CLT_TRY(clt_sgemm(ctx, CLT_NO_TRANS, CLT_TRANS, (size_t)g.Cout, (size_t)g.K, (size_t)BP, 1.0f, t, col, 1.0f,
                      mdw));
    if (!dx) continue;
    /* col (K, BP) = w^T (K, Cout) T (Cout, BP); the queue is in order, so
     * the GEMM above has read col before this one overwrites it. */
    CLT_TRY(clt_sgemm(ctx, CLT_TRANS, CLT_NO_TRANS, (size_t)g.K, (size_t)BP, (size_t)g.Cout, 1.0f, mw, t, 0.0f,
                      col));
    CLT_TRY(move(ctx, &g, "col2vol", dx, n0, B));
  }
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
