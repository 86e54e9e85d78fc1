// attention.cl: causal multi-head self-attention, fused: the scores, the
// softmax and the products with v in one kernel per pass (forward; dq;
// dk and dv), register-tiled. Nothing of size T x T is ever stored.
// (FlashAttention's algorithm, with a work-item's registers as its tile.)
//
// A work-item takes QB neighbouring rows of one head (queries in the
// forward and dq, keys in dk/dv) against the other side's rows KL at a
// time, the KL lanes of one lane_t vector. The QB x KL scores of a tile
// are rank-1 updates over the head's D columns: for each column d, one
// load of the other side's column d (KL rows, from a transposed f32 copy:
// attention_transpose, into scratch) and QB multiply-adds by this item's
// own elements, broadcast. No lane sums, each loaded vector used QB times.
// The softmax and its gradient run KL wide. The products that go back to
// rows (P V, dS K, P^T dY, dS^T Q) are row updates, each other-side row
// loaded once for the QB rows of the item: row vectors of VW floats
// (vec_t, the widest of 16, 8, 4, 2, 1 dividing D), QB x D / VW of them
// accumulated in registers.
//
// On a CPU (PoCL) a work-item is a loop iteration, its vectors are SIMD
// registers (float16 in a function's arguments lets LLVM use 512-bit ones
// where the CPU has them), and the other side's rows of a head stay in
// cache; on a GPU the host picks fewer lanes and rows (a work-item's
// registers are fewer). The host passes -DHEAD_DIM, -DQB and -DKL.
//
// qkv, y, dy and dqkv are act_t (cl/prelude.cl): an f16 variant loads the
// same floats and does the same float arithmetic, so its results are the
// f32 path's on the same half values, rounded once. Each item sums in a
// fixed order that depends on its own rows only (lanes past the causal
// limit or the sequence's end hold -inf scores, whose exp is exactly 0,
// and add exact zeros): the same inputs give the same bits on every run,
// and a query's forward results are the same whatever follows it (as long
// as what follows is finite: a row of the tile past the causal limit is
// multiplied by an exact 0, and 0 * inf is NaN).
//
// Grouped-query attention (Llama's): H query heads share K key and value
// heads, G = H / K queries a group (G = 1: GPT's multi-head attention; K =
// 1: multi-query). Layout: qkv (B, T, (H + 2K) D), its rows q | k | v, query
// head h at columns h*D, its key head g = h / G at H*D + g*D, its value at
// (H + K)*D + g*D; y, dy (B, T, H*D) with head h at h*D; lse and delta (B,
// H, T); the transposed copies (B, heads, D, TP) f32 (H heads for q and dy,
// K for k and v), TP = T rounded up to a multiple of 16, rows T .. TP-1
// zero. The forward and dq kernels are launched over (ceil(T / QB), H, B)
// items, dk/dv over (ceil(T / QB), K, B): an item of a key head walks the
// queries of every head of its group in turn, so the group's sum is in its
// registers, in a fixed order.
#ifndef HEAD_DIM
#error "attention.cl needs -DHEAD_DIM=<the head width>"
#endif
#ifndef QB
#define QB 4
#endif
#ifndef KL
#define KL 16
#endif

#if HEAD_DIM % 16 == 0
#define VW 16
typedef float16 vec_t;
#define VLOADN vload16
#define VSTOREN vstore16
#elif HEAD_DIM % 8 == 0
#define VW 8
typedef float8 vec_t;
#define VLOADN vload8
#define VSTOREN vstore8
#elif HEAD_DIM % 4 == 0
#define VW 4
typedef float4 vec_t;
#define VLOADN vload4
#define VSTOREN vstore4
#elif HEAD_DIM % 2 == 0
#define VW 2
typedef float2 vec_t;
#define VLOADN vload2
#define VSTOREN vstore2
#else
#define VW 1
typedef float vec_t;
#define VLOADN(o, p) ((p)[o])
#define VSTOREN(v, o, p) ((p)[o] = (v))
#endif
#define NV (HEAD_DIM / VW)

#if KL == 16
typedef float16 lane_t;
typedef int16 ilane_t;
#define LVLOAD vload16
#define LVSTORE vstore16
#define LANE_IDS ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
float lane_max(const float16 v) {
  const float8 a = fmax(v.lo, v.hi);
  const float4 b = fmax(a.lo, a.hi);
  const float2 c = fmax(b.lo, b.hi);
  return fmax(c.x, c.y);
}
float lane_sum(const float16 v) {
  const float8 a = v.lo + v.hi;
  const float4 b = a.lo + a.hi;
  const float2 c = b.lo + b.hi;
  return c.x + c.y;
}
#elif KL == 8
typedef float8 lane_t;
typedef int8 ilane_t;
#define LVLOAD vload8
#define LVSTORE vstore8
#define LANE_IDS ((int8)(0, 1, 2, 3, 4, 5, 6, 7))
float lane_max(const float8 v) {
  const float4 b = fmax(v.lo, v.hi);
  const float2 c = fmax(b.lo, b.hi);
  return fmax(c.x, c.y);
}
float lane_sum(const float8 v) {
  const float4 b = v.lo + v.hi;
  const float2 c = b.lo + b.hi;
  return c.x + c.y;
}
#elif KL == 4
typedef float4 lane_t;
typedef int4 ilane_t;
#define LVLOAD vload4
#define LVSTORE vstore4
#define LANE_IDS ((int4)(0, 1, 2, 3))
float lane_max(const float4 v) {
  const float2 c = fmax(v.lo, v.hi);
  return fmax(c.x, c.y);
}
float lane_sum(const float4 v) {
  const float2 c = v.lo + v.hi;
  return c.x + c.y;
}
#else
#error "KL (lanes of the other side's rows) must be 4, 8 or 16"
#endif

// exp(s) where the lane is kept, exactly 0 where it is masked (s is -inf there).
lane_t masked_exp(const lane_t s, const ilane_t out) { return exp(select(s, (lane_t)(-INFINITY), out)); }

// VW act_t values from element i of p, as floats.
vec_t load_vec(__global const act_t *p, const ulong i) {
#ifdef CLT_HALF
  float t[VW];
  #pragma unroll
  for (int l = 0; l < VW; l++) t[l] = vload_half(i + l, p);
  return VLOADN(0, t);
#else
  return VLOADN(0, p + i);
#endif
}

// v rounded to act_t at elements i .. i + VW - 1 of p.
void store_vec(__global act_t *p, const ulong i, const vec_t v) {
#ifdef CLT_HALF
  float t[VW];
  VSTOREN(v, 0, t);
  #pragma unroll
  for (int l = 0; l < VW; l++) vstore_half_rte(t[l], i + l, p);
#else
  VSTOREN(v, 0, p + i);
#endif
}

// The row of D floats at element i of p into r.
void load_row(vec_t *r, __global const act_t *p, const ulong i) {
  #pragma unroll
  for (int n = 0; n < NV; n++) r[n] = load_vec(p, i + (ulong)(n * VW));
}

// sum_d a[d] b[d] of two rows of D floats, in a fixed order.
float row_dot(const vec_t *a, const vec_t *b) {
  vec_t t = a[0] * b[0];
  #pragma unroll
  for (int n = 1; n < NV; n++) t += a[n] * b[n];
#if VW == 1
  return t;
#else
  float l[VW];
  VSTOREN(t, 0, l);
  float s = l[0];
  #pragma unroll
  for (int e = 1; e < VW; e++) s += l[e];
  return s;
#endif
}

// The scores of a tile: s[r] = sum_d x_r[d] * colT[d * TP + j0 .. + KL) for
// the QB rows r of this item at elements xr[r] of x, rank-1 updates over d.
// Always inlined, with the sums in locals: called, PoCL kept s in memory
// (s might alias x) and stored every multiply-add. z is 0, but opaque to
// the compiler (the host's `zero` times the walk's position): with plain
// offsets LLVM hoisted the QB x D broadcasts of x out of the walk, as
// QB x D vectors spilled to the stack (8 KiB an item, stored before every
// walk); with z they stay loads folded into the multiply-adds.
__attribute__((always_inline)) void tile_scores(lane_t *s, __global const act_t *x, const ulong *xr, const ulong z,
                                                __global const float *colT, const ulong c0, const uint TP) {
  lane_t a[QB];
  ulong o[QB];
  #pragma unroll
  for (int r = 0; r < QB; r++) a[r] = 0.0f, o[r] = xr[r] + z;
  #pragma unroll
  for (int d = 0; d < HEAD_DIM; d++) {
    const lane_t c = LVLOAD(0, colT + c0 + (ulong)d * TP);
    #pragma unroll
    for (int r = 0; r < QB; r++) a[r] += ALOAD(x, o[r] + d) * c;
  }
  #pragma unroll
  for (int r = 0; r < QB; r++) s[r] = a[r];
}

// Rows t of the head columns col + h*D of src (B, T, ld) into dst (B, H,
// D, TP) as f32, transposed, and of the next parts - 1 groups of H*D
// columns into dst + stride, + 2 stride (k and v of qkv at once); rows T ..
// TP-1 zero. Over (TP, H, B) items, H the heads of the part (H for q and
// dy, K for k and v).
__kernel void attention_transpose(__global const act_t *src, const ulong soff, const uint ld, const uint T,
                                  __global float *dst, const ulong doff, const uint parts, const ulong stride) {
  const uint t = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
  const uint TP = get_global_size(0), H = get_global_size(1);
  const ulong s = soff + ((ulong)b * T + min(t, T - 1)) * ld + (ulong)h * HEAD_DIM;
  const ulong o = doff + ((ulong)b * H + h) * HEAD_DIM * TP + t;
  for (uint part = 0; part < parts; part++) {
    const ulong sp = s + (ulong)part * H * HEAD_DIM, op = o + part * stride;
    #pragma unroll
    for (int d = 0; d < HEAD_DIM; d++) dst[op + (ulong)d * TP] = t < T ? ALOAD(src, sp + d) : 0.0f;
  }
}

#if HEAD_DIM % 8 == 0
// Swaps bit `h` of the row and the column index of an 8 x 8 tile held as 8
// rows r[i]: the off-diagonal h x h blocks of every 2h x 2h block trade
// places. Doing it for h = 4, 2, 1 transposes the tile; each step is 8
// shuffles of two vectors (vector literals of swizzles, which clang turns
// into shuffles). 8 x 8 tiles of float8 stay in registers with their
// temporaries (16 x 16 of float16 spilled).
#define SWAP_BLOCKS(r, h, LO, HI)                                                                                    \
  _Pragma("unroll") for (int i = 0; i < 8; i++) if ((i & (h)) == 0) {                                               \
    const float8 a = r[i], b = r[i + (h)];                                                                           \
    r[i] = LO, r[i + (h)] = HI;                                                                                      \
  }

// attention_transpose for CPUs, 16 rows an item: each 8 x 8 tile of a head's
// columns read as 8 row vectors, transposed in registers, written as 8
// column vectors (one item a row, PoCL gathered each column from 8 rows
// apart, and took as long as the dq kernel). Over (TP / 16, H, B) items.
__kernel void attention_transpose16(__global const act_t *src, const ulong soff, const uint ld, const uint T,
                                    __global float *dst, const ulong doff, const uint parts, const ulong stride) {
  const uint h = get_global_id(1), b = get_global_id(2);
  const uint TP = get_global_size(0) * 16, H = get_global_size(1);
  const ulong s = soff + (ulong)b * T * ld + (ulong)h * HEAD_DIM;
  for (uint part = 0; part < parts; part++) {
    const ulong sp = s + (ulong)part * H * HEAD_DIM;
    #pragma unroll
    for (int part8 = 0; part8 < 2; part8++) {
      const uint t0 = get_global_id(0) * 16 + part8 * 8;
      const ulong op = doff + ((ulong)b * H + h) * HEAD_DIM * TP + t0 + part * stride;
      #pragma unroll
      for (int c = 0; c < HEAD_DIM; c += 8) {
        float8 r[8];
        #pragma unroll
        for (int i = 0; i < 8; i++) {
          const ulong e = sp + (ulong)min(t0 + i, T - 1) * ld + c;
          r[i] = t0 + i < T ? aload8(src, e) : (float8)0.0f;
        }
        SWAP_BLOCKS(r, 4, ((float8)(a.lo, b.lo)), ((float8)(a.hi, b.hi)));
        SWAP_BLOCKS(r, 2, ((float8)(a.s01, b.s01, a.s45, b.s45)), ((float8)(a.s23, b.s23, a.s67, b.s67)));
        SWAP_BLOCKS(r, 1, ((float8)(a.s0, b.s0, a.s2, b.s2, a.s4, b.s4, a.s6, b.s6)),
                    ((float8)(a.s1, b.s1, a.s3, b.s3, a.s5, b.s5, a.s7, b.s7)));
        #pragma unroll
        for (int j = 0; j < 8; j++) vstore8(r[j], 0, dst + op + (ulong)(c + j) * TP);
      }
    }
  }
}
#endif

// Queries i0 .. i0 + QB - 1 of head h of sample b: with s_j = q_i . k_j *
// scale for j <= i, lse_i = m + log(sum_j exp(s_j - m)) and y_i = sum_j
// exp(s_j - m) v_j / sum_j exp(s_j - m), m the largest s_j, kept as the
// walk goes (the online softmax: when a tile brings a larger score, what
// was summed is rescaled by exp(m_old - m_new), so every exp is at most 1
// whatever the scores). The sums of exps stay KL lanes until the end.
// kT: the keys transposed (B, K, D, TP).
__kernel void attention_forward(__global const act_t *qkv, const ulong qoff, __global const float *kT,
                                const ulong ktoff, const uint T, const uint TP, __global act_t *y, const ulong yoff,
                                __global float *lse, const ulong loff, const float scale, const uint zero,
                                const uint G) {
  const uint i0 = get_global_id(0) * QB, h = get_global_id(1), b = get_global_id(2);
  const uint H = get_global_size(1), K = H / G, g = h / G, C = H * HEAD_DIM, last = min(i0 + QB, T) - 1;
  const ulong ld = (ulong)(H + 2 * K) * HEAD_DIM, head = qoff + (ulong)b * T * ld + (ulong)h * HEAD_DIM;
  const ulong vhead = qoff + (ulong)b * T * ld + (ulong)(H + K + g) * HEAD_DIM;
  const ulong kt = ktoff + ((ulong)b * K + g) * HEAD_DIM * TP;
  ulong qr[QB]; // query rows past the end clamped to the last (computed, never stored)
  lane_t l[QB];
  float m[QB], pb[QB][KL];
  vec_t acc[QB][NV];
  #pragma unroll
  for (int r = 0; r < QB; r++) {
    qr[r] = head + min(i0 + r, T - 1) * ld;
    l[r] = 0.0f, m[r] = -INFINITY;
    #pragma unroll
    for (int n = 0; n < NV; n++) acc[r][n] = 0.0f;
  }
  for (uint j0 = 0; j0 <= last; j0 += KL) {
    lane_t s[QB];
    tile_scores(s, qkv, qr, (ulong)zero * j0, kT, kt + j0, TP);
    #pragma unroll
    for (int r = 0; r < QB; r++) {
      const ilane_t out = (ilane_t)(int)j0 + LANE_IDS > (ilane_t)(int)(i0 + r);
      const lane_t sr = select(s[r] * scale, (lane_t)(-INFINITY), out);
      const float bm = lane_max(sr);
      if (bm > m[r]) {
        const float c = exp(m[r] - bm);
        l[r] *= c;
        #pragma unroll
        for (int n = 0; n < NV; n++) acc[r][n] *= c;
        m[r] = bm;
      }
      const lane_t p = exp(sr - m[r]);
      l[r] += p;
      LVSTORE(p, 0, pb[r]);
    }
    const uint ne = min((uint)KL, last + 1 - j0);
    for (uint e = 0; e < ne; e++) {
      vec_t v[NV];
      load_row(v, qkv, vhead + (j0 + e) * ld);
      #pragma unroll
      for (int r = 0; r < QB; r++) {
        #pragma unroll
        for (int n = 0; n < NV; n++) acc[r][n] += pb[r][e] * v[n];
      }
    }
  }
  float sum[QB], lg[QB];
  #pragma unroll
  for (int r = 0; r < QB; r++) sum[r] = lane_sum(l[r]);
#if QB == 4 // one vector log, not 4 calls
  vstore4(log(vload4(0, sum)), 0, lg);
#else
  #pragma unroll
  for (int r = 0; r < QB; r++) lg[r] = log(sum[r]);
#endif
  #pragma unroll
  for (int r = 0; r < QB; r++) {
    if (i0 + r < T) {
      const ulong yr = yoff + ((ulong)b * T + i0 + r) * C + (ulong)h * HEAD_DIM;
      #pragma unroll
      for (int n = 0; n < NV; n++) store_vec(y, yr + (ulong)(n * VW), acc[r][n] / sum[r]);
      lse[loff + ((ulong)b * H + h) * T + i0 + r] = m[r] + lg[r];
    }
  }
}

// The backward for queries i0 .. i0 + QB - 1: p_j = exp(s_j - lse_i) (s_j
// as the forward computes it), dp_j = dy_i . v_j, ds_j = p_j (dp_j -
// delta_i) with delta_i = dy_i . y_i (which equals sum_j p_j dp_j); dq_i =
// scale sum_j ds_j k_j. delta_i is saved for attention_backward_dkv. tr
// holds the keys and values transposed (at ktoff, vtoff; (B, K, D, TP)).
__kernel void attention_backward_dq(__global const act_t *qkv, const ulong qoff, __global const float *tr,
                                    const ulong ktoff, const ulong vtoff, const uint T,
                                    const uint TP, __global const act_t *y, const ulong yoff, __global const act_t *dy,
                                    const ulong dyoff, __global const float *lse, const ulong loff,
                                    __global float *delta, const ulong doff, __global act_t *dqkv, const ulong dqoff,
                                    const float scale, const uint zero, const uint G) {
  const uint i0 = get_global_id(0) * QB, h = get_global_id(1), b = get_global_id(2);
  const uint H = get_global_size(1), K = H / G, g = h / G, C = H * HEAD_DIM, last = min(i0 + QB, T) - 1;
  const ulong ld = (ulong)(H + 2 * K) * HEAD_DIM, head = qoff + (ulong)b * T * ld + (ulong)h * HEAD_DIM;
  const ulong khead = qoff + (ulong)b * T * ld + (ulong)(H + g) * HEAD_DIM;
  const ulong tt = ((ulong)b * K + g) * HEAD_DIM * TP, lrow = ((ulong)b * H + h) * T;
  ulong qr[QB], gr[QB]; // rows of q and dy, past the end clamped to the last
  float di[QB], li[QB], db[QB][KL];
  vec_t acc[QB][NV];
  #pragma unroll
  for (int r = 0; r < QB; r++) {
    const uint i = min(i0 + r, T - 1);
    vec_t g[NV], yv[NV];
    qr[r] = head + i * ld, gr[r] = dyoff + ((ulong)b * T + i) * C + (ulong)h * HEAD_DIM;
    load_row(g, dy, gr[r]);
    load_row(yv, y, yoff + ((ulong)b * T + i) * C + (ulong)h * HEAD_DIM);
    di[r] = row_dot(g, yv), li[r] = lse[loff + lrow + i];
    #pragma unroll
    for (int n = 0; n < NV; n++) acc[r][n] = 0.0f;
  }
  for (uint j0 = 0; j0 <= last; j0 += KL) {
    lane_t s[QB], dp[QB];
    tile_scores(s, qkv, qr, (ulong)zero * j0, tr, ktoff + tt + j0, TP);
    tile_scores(dp, dy, gr, (ulong)zero * j0, tr, vtoff + tt + j0, TP);
    #pragma unroll
    for (int r = 0; r < QB; r++) {
      const ilane_t out = (ilane_t)(int)j0 + LANE_IDS > (ilane_t)(int)(i0 + r);
      const lane_t p = masked_exp(s[r] * scale - li[r], out);
      LVSTORE(p * (dp[r] - di[r]), 0, db[r]); // ds (0 past the limit: p is)
    }
    const uint ne = min((uint)KL, last + 1 - j0);
    for (uint e = 0; e < ne; e++) {
      vec_t k[NV];
      load_row(k, qkv, khead + (j0 + e) * ld);
      #pragma unroll
      for (int r = 0; r < QB; r++) {
        #pragma unroll
        for (int n = 0; n < NV; n++) acc[r][n] += db[r][e] * k[n];
      }
    }
  }
  #pragma unroll
  for (int r = 0; r < QB; r++) {
    if (i0 + r < T) {
      const ulong dr = dqoff + ((ulong)b * T + i0 + r) * ld + (ulong)h * HEAD_DIM;
      #pragma unroll
      for (int n = 0; n < NV; n++) store_vec(dqkv, dr + (ulong)(n * VW), acc[r][n] * scale);
      delta[doff + lrow + i0 + r] = di[r];
    }
  }
}

// The backward for keys j0 .. j0 + QB - 1 of key head g (after
// attention_backward_dq, whose delta it reads): over the query heads h of
// its group in turn and, for each, the queries i >= j, with p_ij, dp_ij and
// ds_ij computed as there, dv_j = sum_h sum_i p_ij dy_i and dk_j = scale
// sum_h sum_i ds_ij q_i. qgT: the queries and dy transposed (at qtoff,
// gtoff; (B, H, D, TP)).
__kernel void attention_backward_dkv(__global const act_t *qkv, const ulong qoff, __global const float *qgT,
                                     const ulong qtoff, const ulong gtoff, const uint T, const uint TP,
                                     __global const act_t *dy, const ulong dyoff, __global const float *lse,
                                     const ulong loff, __global const float *delta, const ulong doff,
                                     __global act_t *dqkv, const ulong dqoff, const float scale, const uint zero,
                                     const uint G) {
  const uint j0 = get_global_id(0) * QB, g = get_global_id(1), b = get_global_id(2);
  const uint K = get_global_size(1), H = K * G, C = H * HEAD_DIM;
  const ulong ld = (ulong)(H + 2 * K) * HEAD_DIM, row0 = qoff + (ulong)b * T * ld;
  ulong kr[QB], vr[QB]; // key and value rows, past the end clamped to the last
  float pb[QB][KL], db[QB][KL];
  vec_t dk[QB][NV], dv[QB][NV];
  #pragma unroll
  for (int r = 0; r < QB; r++) {
    kr[r] = row0 + min(j0 + r, T - 1) * ld + (ulong)(H + g) * HEAD_DIM, vr[r] = kr[r] + (ulong)K * HEAD_DIM;
    #pragma unroll
    for (int n = 0; n < NV; n++) dk[r][n] = dv[r][n] = 0.0f;
  }
  for (uint h = g * G; h < g * G + G; h++) {
    const ulong head = row0 + (ulong)h * HEAD_DIM;
    const ulong yhead = dyoff + (ulong)b * T * C + (ulong)h * HEAD_DIM;
    const ulong tt = ((ulong)b * H + h) * HEAD_DIM * TP, lrow = ((ulong)b * H + h) * T;
    for (uint i0 = j0 / KL * KL; i0 < T; i0 += KL) {
      lane_t s[QB], dp[QB];
      lane_t lv, ev;
      if (i0 + KL <= T) {
        lv = LVLOAD(0, lse + loff + lrow + i0), ev = LVLOAD(0, delta + doff + lrow + i0);
      } else { // the last tile: rows past the end clamped to the last
        float lb[KL], eb[KL];
        #pragma unroll
        for (int e = 0; e < KL; e++) {
          const uint i = min(i0 + e, T - 1);
          lb[e] = lse[loff + lrow + i], eb[e] = delta[doff + lrow + i];
        }
        lv = LVLOAD(0, lb), ev = LVLOAD(0, eb);
      }
      tile_scores(s, qkv, kr, (ulong)zero * i0, qgT, qtoff + tt + i0, TP);
      tile_scores(dp, qkv, vr, (ulong)zero * i0, qgT, gtoff + tt + i0, TP);
      const ilane_t ids = (ilane_t)(int)i0 + LANE_IDS;
      #pragma unroll
      for (int r = 0; r < QB; r++) {
        const ilane_t out = ids < (ilane_t)(int)(j0 + r) || ids >= (ilane_t)(int)T;
        const lane_t p = masked_exp(s[r] * scale - lv, out);
        LVSTORE(p, 0, pb[r]);
        LVSTORE(p * (dp[r] - ev), 0, db[r]); // ds
      }
      const uint e0 = j0 > i0 ? j0 - i0 : 0, ne = min((uint)KL, T - i0);
      for (uint e = e0; e < ne; e++) {
        vec_t q[NV], gy[NV];
        load_row(q, qkv, head + (i0 + e) * ld);
        load_row(gy, dy, yhead + (i0 + e) * C);
        #pragma unroll
        for (int r = 0; r < QB; r++) {
          #pragma unroll
          for (int n = 0; n < NV; n++) {
            dv[r][n] += pb[r][e] * gy[n];
            dk[r][n] += db[r][e] * q[n];
          }
        }
      }
    }
  }
  #pragma unroll
  for (int r = 0; r < QB; r++) {
    if (j0 + r < T) {
      const ulong dr = dqoff + ((ulong)b * T + j0 + r) * ld + (ulong)(H + g) * HEAD_DIM;
      #pragma unroll
      for (int n = 0; n < NV; n++) {
        store_vec(dqkv, dr + (ulong)(n * VW), dk[r][n] * scale);
        store_vec(dqkv, dr + (ulong)K * HEAD_DIM + (ulong)(n * VW), dv[r][n]);
      }
    }
  }
}
