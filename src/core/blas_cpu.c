/*
 * blas_cpu.c: GEMMs of CPU devices through our own kernels
 * (cl/gemm_cpu.cl), which the device's compiler turns into vector code at
 * its own width: C = alpha op(A) op(B) + beta C, strided batches too.
 *
 * Why: on a CPU device the GEMMs are most of a convolution's time, and
 * the host's BLAS runs whatever kernels it chose or was told to
 * (OPENBLAS_CORETYPE can keep OpenBLAS on AVX2 where the CPU has AVX-512,
 * and Debian's 0.3.21 runs its SSE3 "Prescott" kernels on CPUs newer than
 * itself, such as Intel's family 6 model 207), while PoCL compiles for the
 * CPU it runs on. The tiles of C each work-item keeps in registers ran the
 * CNN's conv2 forward GEMM (64 x 12544 x 288, one thread, bench/nn_bench
 * --only sgemm compares the backends) in 3.7-4.0 ms where OpenBLAS took
 * 4.6-4.8 with its AVX-512 kernels and 4.9 with its Haswell ones (another
 * machine, 6 x 64 tiles: 2.6 against 2.9 and 4.8).
 *
 * The tiles read B's rows as vectors, so a B that is transposed (a linear
 * layer's forward, a convolution's weight gradient) is either read as rows
 * by gemm_cpu_nt, each element a dot product of a row of A and one of B
 * (up to a training batch's rows), or first transposed into the context's
 * GEMM scratch: one pass over B for m passes of the GEMM. (A chunk's
 * weight gradient in the CNN's conv2, NT 64 x 288 x 784, took 0.35-0.57 ms
 * transposed against 1.0-1.2 on OpenBLAS's Prescott kernels, and the NN
 * GEMM of the same flops 0.37-0.45.)
 *
 * C is cut into the widest tiles that fit: GEMM_R = 8 rows by 48 columns
 * (24 float16 accumulators of the 32 registers; of 4 x 32 to 14 x 32,
 * 3 x 64 to 6 x 64 and 8 x 48, 8 x 48 was the fastest here, and 6 x 64
 * close), then the last rows in a tile of their own height and the last
 * columns in tiles of 16 or 32, and the final
 * columns short of 16 one element a work-item. Every element is the same
 * sequential sum over k in every tile (in gemm_cpu_nt, the same sums of
 * 16 lanes), so results are deterministic for a given device and shape,
 * and replicas on one kind of device agree bit for bit.
 *
 * Which devices: by default those that run a work-group's items as a loop
 * (PoCL's CPU devices), where a work-item's float16 is a SIMD register.
 * Mesa's rusticl on llvmpipe, which runs items in SIMD lanes instead, runs
 * the same kernels correctly but about 40 times slower than the host BLAS
 * (the MLP's 40 steps: 29 s against 0.7), so its GEMMs stay with the host
 * BLAS. CLT_CPU_GEMM=0
 * turns the tiles off; CLT_CPU_GEMM=1 puts every CPU device on them (the
 * tests check they agree on both drivers).
 */
#include "core/internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TILE_R = 8, TILE_V = 3 }; /* rows, and columns / 16 */

/* A B^T with at most NT_DOT_M_MAX rows of C and k of at least
 * NT_DOT_K_MIN (a training batch's linear forward, a convolution chunk's
 * weight gradient) goes to gemm_cpu_nt, a dot product of rows an element,
 * without the transpose: at batch 64, one thread, the MLP's 784-256
 * forward took 0.19-0.29 ms against 0.30-0.35, the CNN's 3136-128 0.41-0.52
 * against 0.57-0.61 and its conv2 backward (the weight gradient's GEMMs)
 * 10.3-10.5 against 11.7-12.2 (bench/nn_bench --only linear, --only conv,
 * minima of alternating runs). More rows than NT_DOT_M_MAX make the
 * transpose a small part of the GEMM, and the tiles are faster (the tiny
 * GPT's linears, 2048 rows); a short k (attention's scores, k = the head
 * size) leaves the 16 lanes' sum a large part of each element. NT_R rows
 * by NT_COLS columns a work-item, NT_J columns at a time: of 4 x 4, 4 x 6,
 * 6 x 4, 6 x 3, 5 x 4, 8 x 3, 8 x 2 and 2 x 8, 6 x 4 was the fastest. */
enum { NT_DOT_M_MAX = 256, NT_DOT_K_MIN = 64, NT_R = 6, NT_J = 4, NT_COLS = 64 };

/* k runs in blocks of at most this many: a column panel of B (k x 48)
 * then stays near the core while the row tiles pass over it, and C takes
 * each block's sums in turn. With k = 2048 in one block (a GPT linear's
 * weight gradient over 16 x 128 tokens, TN) the tiles took 1.4 to 1.8
 * times OpenBLAS's time (384x128x2048: 2.1 against 1.5 ms; 128x512x2048:
 * 3.8 against 2.2), and the tiny GPT trained 12% slower; with k up to 512
 * they were as fast or faster (bench/nn_bench --gpt). */
#define TILE_K_MAX 1024

/* A B that is transposed (stored n x k) is first transposed into scratch
 * (k x n), one pass over B against m passes of the GEMM: worth it from
 * a few rows of C up. */
#define NT_M_MIN 16

/* The kernels index with 32-bit integers (offsets and strides are 64). */
static int fits_u32(size_t x) { return x <= UINT32_MAX; }

int clt__cpu_gemm_on(const clt_context *ctx) {
  int env = clt__env_switch("CLT_CPU_GEMM");
  if (ctx->info.type != CLT_DEVICE_CPU || env == 0) return 0;
  return env == 1 || clt__items_run_as_loops(ctx);
}

int clt__cpu_gemm_use(const clt_context *ctx, clt_transpose tb, size_t m, size_t n, size_t k, clt_matrix a,
                      clt_matrix b, clt_matrix c) {
  if (m == 0 || n == 0 || k == 0) return 0;
  if (tb == CLT_TRANS && m < NT_M_MIN) return 0; /* the transpose would cost about what the GEMM does */
  if (!fits_u32(m) || !fits_u32(n) || !fits_u32(k) || !fits_u32(a.ld) || !fits_u32(b.ld) || !fits_u32(c.ld))
    return 0; /* the host BLAS or CLBlast takes it */
  return clt__cpu_gemm_on(ctx);
}

/* T_i = B_i^T into ctx's GEMM scratch for i < batch, B_i stored n x k:
 * the tiles' B, k x n (leading dimension n), k * n floats apart. */
static int transpose_b(clt_context *ctx, size_t n, size_t k, clt_matrix b, size_t bs, size_t batch, clt_matrix *t) {
  int rc = CLT_OK;
  cl_kernel kern;
  cl_mem buf;
  CLT_TRY(clt__context_buffer(ctx, &ctx->gemm_scratch, n * k * batch * sizeof(float), "a GEMM's transposed B", &buf));
  CLT_TRY(clt_context_kernel(ctx, "gemm_cpu", "gemm_cpu_transpose", "", &kern));
  cl_uint rows = (cl_uint)n, cols = (cl_uint)k, ldb = (cl_uint)b.ld;
  cl_ulong bo = b.offset, sb = bs;
  CLT_CL_TRY(clSetKernelArg(kern, 0, sizeof rows, &rows));
  CLT_CL_TRY(clSetKernelArg(kern, 1, sizeof cols, &cols));
  CLT_CL_TRY(clSetKernelArg(kern, 2, sizeof b.buf, &b.buf));
  CLT_CL_TRY(clSetKernelArg(kern, 3, sizeof bo, &bo));
  CLT_CL_TRY(clSetKernelArg(kern, 4, sizeof ldb, &ldb));
  CLT_CL_TRY(clSetKernelArg(kern, 5, sizeof sb, &sb));
  CLT_CL_TRY(clSetKernelArg(kern, 6, sizeof buf, &buf));
  size_t global[3] = {(n + 15) / 16, (k + 255) / 256, batch}, local[3] = {1, 1, 1};
  CLT_CL_TRY(clEnqueueNDRangeKernel(ctx->queue, kern, 3, NULL, global, local, 0, NULL, NULL));
  *t = (clt_matrix){buf, 0, n};
fail:
  return rc;
}

/* The arguments every GEMM kernel here takes (the first two: where its
 * tiles start, or gemm_cpu_nt's m and n), and the launch, a work-item a
 * work-group. */
static int launch(clt_context *ctx, cl_kernel kern, size_t x0, size_t x1, size_t k, float alpha, clt_matrix a,
                  size_t as, clt_matrix b, size_t bs, float beta, clt_matrix c, size_t cs, const size_t *global) {
  int rc = CLT_OK;
  cl_uint m0 = (cl_uint)x0, n0 = (cl_uint)x1, K = (cl_uint)k, lda = (cl_uint)a.ld, ldb = (cl_uint)b.ld,
          ldc = (cl_uint)c.ld;
  cl_ulong ao = a.offset, bo = b.offset, co = c.offset, sa = as, sb = bs, sc = cs;
  const struct {
    size_t size;
    const void *value;
  } args[] = {{sizeof m0, &m0}, {sizeof n0, &n0},   {sizeof K, &K},     {sizeof alpha, &alpha}, {sizeof beta, &beta},
              {sizeof a.buf, &a.buf}, {sizeof ao, &ao}, {sizeof lda, &lda}, {sizeof sa, &sa},
              {sizeof b.buf, &b.buf}, {sizeof bo, &bo}, {sizeof ldb, &ldb}, {sizeof sb, &sb},
              {sizeof c.buf, &c.buf}, {sizeof co, &co}, {sizeof ldc, &ldc}, {sizeof sc, &sc}};
  for (cl_uint i = 0; i < sizeof args / sizeof *args; i++)
    CLT_CL_TRY(clSetKernelArg(kern, i, args[i].size, args[i].value));
  size_t local[3] = {1, 1, 1};
  CLT_CL_TRY(clEnqueueNDRangeKernel(ctx->queue, kern, 3, NULL, global, local, 0, NULL, NULL));
fail:
  return rc;
}

/* The region of C rows [m0, m0 + rows) by columns [n0, n0 + cols) in
 * tiles of r rows by 16 v columns (v = 0: cols < 16, a row a work-item). */
typedef struct region {
  size_t m0, n0, rows, cols;
  int r, v;
} region;

static int run_region(clt_context *ctx, clt_transpose ta, size_t k, float alpha, clt_matrix a, size_t as,
                      clt_matrix b, size_t bs, float beta, clt_matrix c, size_t cs, size_t batch, const region *g) {
  int rc = CLT_OK;
  cl_kernel kern;
  char opts[128];
  if (g->rows == 0 || g->cols == 0) return CLT_OK;
  snprintf(opts, sizeof opts, "-DGEMM_R=%d -DGEMM_V=%d -DGEMM_TRANS_A=%d -DGEMM_BETA0=%d -DGEMM_EDGE=%d", g->r,
           g->v ? g->v : 1, ta == CLT_TRANS, beta == 0.0f, g->v ? 1 : (int)g->cols);
  CLT_TRY(clt_context_kernel(ctx, "gemm_cpu", g->v ? "gemm_cpu" : "gemm_cpu_edge", opts, &kern));
  size_t global[3] = {g->rows / (size_t)g->r, g->v ? g->cols / (16 * (size_t)g->v) : 1, batch};
  return launch(ctx, kern, g->m0, g->n0, k, alpha, a, as, b, bs, beta, c, cs, global);
fail:
  return rc;
}

/* NT for up to NT_DOT_M_MAX rows of C, without the transpose: see
 * gemm_cpu_nt. */
static int run_nt(clt_context *ctx, size_t m, size_t n, size_t k, float alpha, clt_matrix a, size_t as, clt_matrix b,
                  size_t bs, float beta, clt_matrix c, size_t cs, size_t batch) {
  int rc = CLT_OK;
  cl_kernel kern;
  char opts[96];
  snprintf(opts, sizeof opts, "-DNT_R=%d -DNT_J=%d -DNT_COLS=%d -DGEMM_BETA0=%d", NT_R, NT_J, NT_COLS, beta == 0.0f);
  CLT_TRY(clt_context_kernel(ctx, "gemm_cpu", "gemm_cpu_nt", opts, &kern));
  size_t global[3] = {(m + NT_R - 1) / NT_R, (n + NT_COLS - 1) / NT_COLS, batch};
  return launch(ctx, kern, m, n, k, alpha, a, as, b, bs, beta, c, cs, global);
fail:
  return rc;
}

int clt__cpu_sgemm(clt_context *ctx, clt_transpose ta, clt_transpose tb, size_t m, size_t n, size_t k, float alpha,
                   clt_matrix a, size_t as, clt_matrix b, size_t bs, float beta, clt_matrix c, size_t cs,
                   size_t batch) {
  int rc = CLT_OK;
  if (tb == CLT_TRANS && ta == CLT_NO_TRANS && m <= NT_DOT_M_MAX && k >= NT_DOT_K_MIN) {
    CLT_TRY(run_nt(ctx, m, n, k, alpha, a, as, b, bs, beta, c, cs, batch));
    return CLT_OK;
  }
  if (tb == CLT_TRANS) {
    CLT_TRY(transpose_b(ctx, n, k, b, bs, batch, &b));
    bs = n * k;
  }
  size_t mr = m / TILE_R * TILE_R, nv = n / (16 * TILE_V) * (16 * TILE_V), n16 = n / 16 * 16;
  int last_r = (int)(m - mr), last_v = (int)((n16 - nv) / 16);
  region regions[] = {
      {0, 0, mr, nv, TILE_R, TILE_V},           /* the body */
      {mr, 0, m - mr, nv, last_r, TILE_V},      /* the last rows */
      {0, nv, mr, n16 - nv, TILE_R, last_v},    /* the last columns in 16s */
      {mr, nv, m - mr, n16 - nv, last_r, last_v},
      {0, n16, m, n - n16, 1, 0},               /* the columns short of 16 */
  };
  /* k in blocks of at most TILE_K_MAX, the later ones added to C */
  size_t blocks = (k + TILE_K_MAX - 1) / TILE_K_MAX, kb = (k + blocks - 1) / blocks;
  for (size_t k0 = 0; k0 < k; k0 += kb) {
    clt_matrix ak = a, bk = b;
    ak.offset += ta == CLT_TRANS ? k0 * a.ld : k0;
    bk.offset += k0 * b.ld;
    for (size_t i = 0; i < sizeof regions / sizeof *regions; i++) /* an empty one launches nothing */
      CLT_TRY(run_region(ctx, ta, k - k0 < kb ? k - k0 : kb, alpha, ak, as, bk, bs, k0 ? 1.0f : beta, c, cs, batch,
                         &regions[i]));
  }
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "cpu sgemm(m=%zu, n=%zu, k=%zu, batch=%zu) on %s", m, n, k, batch, ctx->info.name);
}
