// gemm_cpu.cl: row-major SGEMM for CPU devices (PoCL, rusticl's llvmpipe),
// C = alpha op(A) B + beta C, op(A) = A or A^T, B as stored (src/core/blas_cpu.c).
//
// Why a kernel of our own: a CPU device's compiler vectorizes a kernel
// across work-items only where the work-item has no loop of its own, so a
// GEMM written for GPUs (CLBlast's) runs there as scalar code. Here every
// work-item computes a tile of C of GEMM_R rows by 16 GEMM_V columns in
// explicit float16 vectors, held in registers across the whole k loop: per
// k, GEMM_V vector loads of B's row, GEMM_R broadcasts of A, and
// GEMM_R * GEMM_V vector FMAs. On the AVX-512 host PoCL compiles for,
// 8 x 48 tiles (24 accumulators of 32 registers) ran the CNN's
// 64 x 12544 x 288 in 3.7-4.0 ms where OpenBLAS's AVX-512 kernels took
// 4.6-4.8. Consecutive work-items take the row tiles of one column panel,
// so the panel of B (k x 48) stays in cache while A's rows pass over it:
// columns first read B from memory once per row tile, and ran 2 times
// slower.
//
// Each element of C is a sequential fused multiply-add over k = 0 .. K-1,
// then alpha and beta unfused (FP_CONTRACT OFF: OpenCL C may otherwise fuse
// a * b + c in one kernel and not in another), whatever the tile, so how C
// is cut (a convolution's chunks of samples cut it differently) does not
// show in the bits. The host cuts C into the widest tiles that fit (a
// smaller GEMM_R for the last rows, GEMM_V for the last columns), and
// gemm_cpu_edge takes the columns short of 16, a row a work-item.
//
// Range: (row tiles, column tiles, batch); the tiles start at (m0, n0).

#pragma OPENCL FP_CONTRACT OFF

#ifndef GEMM_R
#define GEMM_R 8
#endif
#ifndef GEMM_V
#define GEMM_V 3
#endif

#if GEMM_TRANS_A
#define A_AT(i, k) a[(ulong)(k) * lda + (i)]
#else
#define A_AT(i, k) a[(ulong)(i) * lda + (k)]
#endif

__kernel void gemm_cpu(const uint m0, const uint n0, const uint K, const float alpha, const float beta,
                       __global const float *A, const ulong aoff, const uint lda, const ulong as,
                       __global const float *B, const ulong boff, const uint ldb, const ulong bs,
                       __global float *C, const ulong coff, const uint ldc, const ulong cs) {
  const uint j0 = n0 + get_global_id(1) * 16 * GEMM_V, i0 = m0 + get_global_id(0) * GEMM_R;
  const ulong z = get_global_id(2);
  __global const float *a = A + aoff + z * as;
  __global const float *b = B + boff + z * bs + j0;
  __global float *c = C + coff + z * cs + (ulong)i0 * ldc + j0;
  float16 acc[GEMM_R][GEMM_V];
#pragma unroll
  for (int r = 0; r < GEMM_R; r++)
#pragma unroll
    for (int v = 0; v < GEMM_V; v++) acc[r][v] = (float16)(0.0f);
  for (uint k = 0; k < K; k++) {
    float16 bv[GEMM_V];
#pragma unroll
    for (int v = 0; v < GEMM_V; v++) bv[v] = vload16(v, b + (ulong)k * ldb);
#pragma unroll
    for (int r = 0; r < GEMM_R; r++) {
      const float16 av = (float16)(A_AT(i0 + r, k));
#pragma unroll
      for (int v = 0; v < GEMM_V; v++) acc[r][v] = fma(av, bv[v], acc[r][v]);
    }
  }
#pragma unroll
  for (int r = 0; r < GEMM_R; r++)
#pragma unroll
    for (int v = 0; v < GEMM_V; v++) {
#if GEMM_BETA0
      vstore16(alpha * acc[r][v], v, c + (ulong)r * ldc);
#else
      vstore16(alpha * acc[r][v] + beta * vload16(v, c + (ulong)r * ldc), v, c + (ulong)r * ldc);
#endif
    }
}

// The columns short of 16, [n0, n0 + GEMM_EDGE), of a row of C a
// work-item, over the rows [m0, m0 + range 0): the tiles' edges. Each
// element is the same sequential fma over k as in gemm_cpu. (An element a
// work-item, one work-group each, took 119 us for the 64 x 10 x 128 of a
// linear layer's output on PoCL, which pays for every work-group.) Range:
// (rows, 1, batch).
#ifndef GEMM_EDGE
#define GEMM_EDGE 1
#endif
__kernel void gemm_cpu_edge(const uint m0, const uint n0, const uint K, const float alpha, const float beta,
                            __global const float *A, const ulong aoff, const uint lda, const ulong as,
                            __global const float *B, const ulong boff, const uint ldb, const ulong bs,
                            __global float *C, const ulong coff, const uint ldc, const ulong cs) {
  const uint i = m0 + get_global_id(0);
  const ulong z = get_global_id(2);
  __global const float *a = A + aoff + z * as;
  __global const float *b = B + boff + z * bs + n0;
  float acc[GEMM_EDGE];
#pragma unroll
  for (int j = 0; j < GEMM_EDGE; j++) acc[j] = 0.0f;
  for (uint k = 0; k < K; k++) {
    const float av = A_AT(i, k);
#pragma unroll
    for (int j = 0; j < GEMM_EDGE; j++) acc[j] = fma(av, b[(ulong)k * ldb + j], acc[j]);
  }
  __global float *c = C + coff + z * cs + (ulong)i * ldc + n0;
#pragma unroll
  for (int j = 0; j < GEMM_EDGE; j++) {
#if GEMM_BETA0
    c[j] = alpha * acc[j];
#else
    c[j] = alpha * acc[j] + beta * c[j];
#endif
  }
}

// C = alpha A B^T + beta C where A (m x k) and B (n x k) are both stored
// row-major: each element a dot product of two rows, read as float16
// vectors, so B needs no transpose first. For the m of a training batch
// (a linear layer's forward: B is its weight, out x in) the transpose cost
// a pass over the whole weight, scalar, for every forward: the MLP's 784 x
// 256 forward took 0.36 ms where the TN GEMM of the same flops (its weight
// gradient) took 0.23 (src/core/blas_cpu.c says which GEMMs come here).
//
// A work-item takes NT_R rows by NT_COLS columns, NT_J columns at a time
// (NT_R * NT_J float16 accumulators, NT_R + NT_J vector loads a step of
// 16 k), and rows or columns past m or n are computed on the last row or
// column and not stored (PoCL pays for every work-group, so no edge
// kernels). Each element: lane l sums k = l, l + 16, ... by fma, the 16
// lanes are added in a fixed tree, the k past the last 16 follow by fma,
// then alpha and beta unfused: the same bits wherever the element falls.
// Range: (ceil(m / NT_R), ceil(n / NT_COLS), batch).
#ifndef NT_R
#define NT_R 4
#endif
#ifndef NT_J
#define NT_J 4
#endif
#ifndef NT_COLS
#define NT_COLS 64
#endif
__kernel void gemm_cpu_nt(const uint m, const uint n, const uint K, const float alpha, const float beta,
                          __global const float *A, const ulong aoff, const uint lda, const ulong as,
                          __global const float *B, const ulong boff, const uint ldb, const ulong bs,
                          __global float *C, const ulong coff, const uint ldc, const ulong cs) {
  const uint i0 = get_global_id(0) * NT_R, n0 = get_global_id(1) * NT_COLS;
  const ulong z = get_global_id(2);
  const uint K16 = K / 16, n1 = min(n0 + (uint)NT_COLS, n);
  __global const float *ar[NT_R];
#pragma unroll
  for (int r = 0; r < NT_R; r++) ar[r] = A + aoff + z * as + (ulong)min(i0 + r, m - 1) * lda;
  for (uint j0 = n0; j0 < n1; j0 += NT_J) {
    __global const float *br[NT_J];
#pragma unroll
    for (int j = 0; j < NT_J; j++) br[j] = B + boff + z * bs + (ulong)min(j0 + j, n - 1) * ldb;
    float16 acc[NT_R][NT_J];
#pragma unroll
    for (int r = 0; r < NT_R; r++)
#pragma unroll
      for (int j = 0; j < NT_J; j++) acc[r][j] = (float16)(0.0f);
    for (uint q = 0; q < K16; q++) {
      float16 bv[NT_J];
#pragma unroll
      for (int j = 0; j < NT_J; j++) bv[j] = vload16(q, br[j]);
#pragma unroll
      for (int r = 0; r < NT_R; r++) {
        const float16 av = vload16(q, ar[r]);
#pragma unroll
        for (int j = 0; j < NT_J; j++) acc[r][j] = fma(av, bv[j], acc[r][j]);
      }
    }
#pragma unroll
    for (int r = 0; r < NT_R; r++)
#pragma unroll
      for (int j = 0; j < NT_J; j++) {
        const float8 s8 = acc[r][j].lo + acc[r][j].hi;
        const float4 s4 = s8.lo + s8.hi;
        const float2 s2 = s4.lo + s4.hi;
        float s = s2.x + s2.y;
        for (uint k = K16 * 16; k < K; k++) s = fma(ar[r][k], br[j][k], s);
        if (i0 + r < m && j0 + j < n) {
          __global float *c = C + coff + z * cs + (ulong)(i0 + r) * ldc + j0 + j;
#if GEMM_BETA0
          *c = alpha * s;
#else
          *c = alpha * s + beta * *c;
#endif
        }
      }
  }
}

// T = B^T for each of a batch of rows x cols matrices B (leading dimension
// ldb, bs floats apart), into rows-long rows of T, rows * cols floats
// apart: a GEMM whose B is transposed then runs on the tiles above as
// op(A) T. A work-item moves 16 rows of B by up to 256 columns (a
// work-item a 16 x 16 block ran 5 times slower on PoCL, which pays for
// every work-group it schedules). Range: (ceil(rows / 16), ceil(cols /
// 256), batch).
__kernel void gemm_cpu_transpose(const uint rows, const uint cols, __global const float *B, const ulong boff,
                                 const uint ldb, const ulong bs, __global float *T) {
  const uint i0 = get_global_id(0) * 16, j0 = get_global_id(1) * 256;
  const uint nr = min(16u, rows - i0), j1 = min(j0 + 256u, cols);
  const ulong z = get_global_id(2);
  __global const float *b = B + boff + z * bs + (ulong)i0 * ldb;
  __global float *t = T + z * rows * (ulong)cols + i0;
  for (uint j = j0; j < j1; j++)
    for (uint i = 0; i < nr; i++) t[(ulong)j * rows + i] = b[(ulong)i * ldb + j];
}
