// attention.cl: causal multi-head self-attention, fused: the scores, the
// softmax and the products with v in one kernel per pass, one work-item
// per query (forward, dq) or key (dk, dv) row of one head, walking the
// rows the causal mask lets it see in increasing order. Nothing of size
// T x T is ever stored. (FlashAttention's algorithm, without its tiles:
// on a CPU (PoCL) a work-item is a loop iteration and the rows it reads
// stay in cache, so each item reading the head's k and v itself costs
// less than staging them through local memory, and the launch count is
// what matters: three kernels a layer instead of dozens of GEMMs.)
//
// Built with -DHEAD_DIM=D (the head width, known to the host) so the D
// floats of a row are a private array of float vectors, vec_t, that the
// compiler keeps in registers: every dot product is VW-wide multiply-adds
// then a fixed tree over the VW lanes, every row update VW-wide. qkv, y,
// dy and dqkv are act_t (cl/prelude.cl): an f16 variant loads the same
// floats and does the same float arithmetic, so its results are the f32
// path's on the same half values, rounded once. Each item sums in a fixed
// order: the same inputs give the same bits on every run.
//
// Every loop over lanes, vectors of a row or keys of a block has a fixed
// trip count and is marked `#pragma unroll`: PoCL left them rolled, and
// unrolled they ran forward 3.4 -> 2.75 ms, backward 8.0 -> 5.3 (one PoCL
// thread, nn_bench --gpt).
//
// Layout: qkv (B, T, 3C) with head h of q at columns h*D of each row, of k
// at C + h*D, of v at 2C + h*D; y, dy (B, T, C) with head h at h*D; lse and
// delta (B, H, T). Launched over exactly (T, H, B) items.
#ifndef HEAD_DIM
#error "attention.cl needs -DHEAD_DIM=<the head width>"
#endif

#if HEAD_DIM % 8 == 0
#define VW 8
typedef float8 vec_t;
#define VLOADN vload8
#define VSTOREN vstore8
float hsum(const float8 v) {
  const float4 a = v.lo + v.hi;
  const float2 b = a.lo + a.hi;
  return b.x + b.y;
}
#elif HEAD_DIM % 4 == 0
#define VW 4
typedef float4 vec_t;
#define VLOADN vload4
#define VSTOREN vstore4
float hsum(const float4 v) {
  const float2 b = v.lo + v.hi;
  return b.x + b.y;
}
#elif HEAD_DIM % 2 == 0
#define VW 2
typedef float2 vec_t;
#define VLOADN vload2
#define VSTOREN vstore2
float hsum(const float2 v) { return v.x + v.y; }
#else
#define VW 1
typedef float vec_t;
#define VLOADN(o, p) ((p)[o])
#define VSTOREN(v, o, p) ((p)[o] = (v))
float hsum(const float v) { return v; }
#endif
#define NV (HEAD_DIM / VW)

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

// sum_d a[d] b[d] of a private row and the row at element i of p: lane
// sums over d = lane, lane + VW, ..., then the tree over the lanes.
float dot_row(const vec_t *a, __global const act_t *p, const ulong i) {
  vec_t t = a[0] * load_vec(p, i);
  #pragma unroll
  for (int n = 1; n < NV; n++) t += a[n] * load_vec(p, i + (ulong)(n * VW));
  return hsum(t);
}

// r += c * (the row at element i of p).
void axpy_row(vec_t *r, const float c, __global const act_t *p, const ulong i) {
  #pragma unroll
  for (int n = 0; n < NV; n++) r[n] += c * load_vec(p, i + (ulong)(n * VW));
}

// The walks take keys (queries) KB at a time: their KB scores are one
// float8, so exp and the softmax's bookkeeping run 8 wide; lanes past the
// causal limit (or the sequence's end) hold -inf, whose exp is exactly 0,
// and their rows are never read.
#define KB 8

float max8(const float8 v) {
  const float4 a = fmax(v.lo, v.hi);
  const float2 b = fmax(a.lo, a.hi);
  return fmax(b.x, b.y);
}


// The KB dot products of a private row with the rows at elements r[e] +
// off of p, as one float8. With vectors of 8 lanes, the 8 sums over lanes
// are reduced together, 8 vectors to 1 in three steps of halving (for
// each dot: lanes l and l + 4, then neighbours, then neighbours again);
// otherwise each dot is dot_row's.
float8 dots8(const vec_t *a, __global const act_t *p, const ulong *r, const ulong off) {
#if VW == 8
  float8 t[KB];
  #pragma unroll
  for (int e = 0; e < KB; e++) {
    t[e] = a[0] * load_vec(p, r[e] + off);
    #pragma unroll
    for (int n = 1; n < NV; n++) t[e] += a[n] * load_vec(p, r[e] + off + (ulong)(n * VW));
  }
  const float8 a01 = (float8)(t[0].lo + t[0].hi, t[1].lo + t[1].hi), a23 = (float8)(t[2].lo + t[2].hi, t[3].lo + t[3].hi);
  const float8 a45 = (float8)(t[4].lo + t[4].hi, t[5].lo + t[5].hi), a67 = (float8)(t[6].lo + t[6].hi, t[7].lo + t[7].hi);
  const float8 b0 = (float8)(a01.even + a01.odd, a23.even + a23.odd), b1 = (float8)(a45.even + a45.odd, a67.even + a67.odd);
  return (float8)(b0.even + b0.odd, b1.even + b1.odd);
#else
  float d[KB];
  #pragma unroll
  for (int e = 0; e < KB; e++) d[e] = dot_row(a, p, r[e] + off);
  return vload8(0, d);
#endif
}

#define LANES8 ((int8)(0, 1, 2, 3, 4, 5, 6, 7))

// Query i of head h of sample b: with s_j = q_i . k_j * scale for j <= i,
// lse_i = m + log(sum_j exp(s_j - m)) and y_i = sum_j exp(s_j - m) v_j /
// sum_j exp(s_j - m), m the largest s_j, kept as the walk goes (the online
// softmax: when a block brings a larger score, what was summed is rescaled
// by exp(m_old - m_new), so every exp is at most 1 whatever the scores).
__kernel void attention_forward(__global const act_t *qkv, const ulong qoff, __global act_t *y, const ulong yoff,
                                __global float *lse, const ulong loff, const float scale) {
  const uint i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
  const uint T = get_global_size(0), H = get_global_size(1), C = H * HEAD_DIM;
  const ulong ld = 3 * (ulong)C, head = qoff + (ulong)b * T * ld + (ulong)h * HEAD_DIM;
  vec_t q[NV], acc[NV];
  load_row(q, qkv, head + i * ld);
  #pragma unroll
  for (int n = 0; n < NV; n++) acc[n] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (uint j0 = 0; j0 <= i; j0 += KB) {
    float pb[KB];
    ulong r[KB]; // key rows, past the causal limit clamped to it (read, then masked)
    #pragma unroll
    for (int e = 0; e < KB; e++) r[e] = head + min(j0 + e, i) * ld;
    const int8 out = (int8)(int)j0 + LANES8 > (int8)(int)i;
    const float8 s = select(dots8(q, qkv, r, C) * scale, (float8)(-INFINITY), out);
    const float bm = max8(s);
    if (bm > m) {
      const float c = exp(m - bm);
      l *= c;
      #pragma unroll
      for (int n = 0; n < NV; n++) acc[n] *= c;
      m = bm;
    }
    const float8 p = exp(s - m);
    l += hsum8(p);
    vstore8(p, 0, pb);
    #pragma unroll
    for (int e = 0; e < KB; e++)
      if (j0 + e <= i) axpy_row(acc, pb[e], qkv, head + (j0 + e) * ld + 2 * C);
  }
  const ulong yr = yoff + ((ulong)b * T + i) * C + (ulong)h * HEAD_DIM;
  #pragma unroll
  for (int n = 0; n < NV; n++) store_vec(y, yr + (ulong)(n * VW), acc[n] / l);
  lse[loff + ((ulong)b * H + h) * T + i] = m + log(l);
}

// The backward for query i: p_j = exp(s_j - lse_i) (s_j as the forward
// computes it), dp_j = dy_i . v_j, ds_j = p_j (dp_j - delta_i) with
// delta_i = dy_i . y_i (which equals sum_j p_j dp_j); dq_i = scale sum_j
// ds_j k_j. delta_i is saved for attention_backward_dkv.
__kernel void attention_backward_dq(__global const act_t *qkv, const ulong qoff, __global const act_t *y,
                                    const ulong yoff, __global const act_t *dy, const ulong dyoff,
                                    __global const float *lse, const ulong loff, __global float *delta,
                                    const ulong doff, __global act_t *dqkv, const ulong dqoff, const float scale) {
  const uint i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
  const uint T = get_global_size(0), H = get_global_size(1), C = H * HEAD_DIM;
  const ulong ld = 3 * (ulong)C, head = qoff + (ulong)b * T * ld + (ulong)h * HEAD_DIM;
  const ulong yr = ((ulong)b * T + i) * C + (ulong)h * HEAD_DIM, lr = ((ulong)b * H + h) * T + i;
  vec_t q[NV], g[NV], acc[NV];
  load_row(q, qkv, head + i * ld);
  load_row(g, dy, dyoff + yr);
  #pragma unroll
  for (int n = 0; n < NV; n++) acc[n] = 0.0f;
  const float di = dot_row(g, y, yoff + yr), li = lse[loff + lr];
  for (uint j0 = 0; j0 <= i; j0 += KB) {
    float db[KB];
    ulong r[KB]; // as in the forward
    #pragma unroll
    for (int e = 0; e < KB; e++) r[e] = head + min(j0 + e, i) * ld;
    const int8 out = (int8)(int)j0 + LANES8 > (int8)(int)i;
    const float8 p = exp(select(dots8(q, qkv, r, C) * scale - li, (float8)(-INFINITY), out));
    vstore8(p * (dots8(g, qkv, r, 2 * (ulong)C) - di), 0, db); // ds (0 past the limit: p is)
    #pragma unroll
    for (int e = 0; e < KB; e++)
      if (j0 + e <= i) axpy_row(acc, db[e], qkv, head + (j0 + e) * ld + C);
  }
  const ulong dr = dqoff + (ulong)b * T * ld + (ulong)h * HEAD_DIM + i * ld;
  #pragma unroll
  for (int n = 0; n < NV; n++) store_vec(dqkv, dr + (ulong)(n * VW), acc[n] * scale);
  delta[doff + lr] = di;
}

// The backward for key j (after attention_backward_dq, whose delta it
// reads): over the queries i >= j, with p_ij, dp_ij and ds_ij computed as
// there, dv_j = sum_i p_ij dy_i and dk_j = scale sum_i ds_ij q_i.
__kernel void attention_backward_dkv(__global const act_t *qkv, const ulong qoff, __global const act_t *dy,
                                     const ulong dyoff, __global const float *lse, const ulong loff,
                                     __global const float *delta, const ulong doff, __global act_t *dqkv,
                                     const ulong dqoff, const float scale) {
  const uint j = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
  const uint T = get_global_size(0), H = get_global_size(1), C = H * HEAD_DIM;
  const ulong ld = 3 * (ulong)C, head = qoff + (ulong)b * T * ld + (ulong)h * HEAD_DIM;
  const ulong yhead = dyoff + (ulong)b * T * C + (ulong)h * HEAD_DIM, lrow = ((ulong)b * H + h) * T;
  vec_t k[NV], v[NV], dk[NV], dv[NV];
  load_row(k, qkv, head + j * ld + C);
  load_row(v, qkv, head + j * ld + 2 * C);
  #pragma unroll
  for (int n = 0; n < NV; n++) dk[n] = dv[n] = 0.0f;
  for (uint i0 = j; i0 < T; i0 += KB) {
    float sb[KB], db[KB], lb[KB], eb[KB];
    ulong rq[KB], rg[KB]; // query rows of qkv and dy, past the end clamped to the last (read, then masked)
    #pragma unroll
    for (int e = 0; e < KB; e++) {
      const uint i = min(i0 + e, T - 1);
      rq[e] = head + i * ld, rg[e] = yhead + i * C;
      lb[e] = lse[loff + lrow + i], eb[e] = delta[doff + lrow + i];
    }
    const int8 out = (int8)(int)i0 + LANES8 >= (int8)(int)T;
    const float8 p = exp(select(dots8(k, qkv, rq, 0) * scale - vload8(0, lb), (float8)(-INFINITY), out));
    vstore8(p * (dots8(v, dy, rg, 0) - vload8(0, eb)), 0, db); // ds
    vstore8(p, 0, sb);
    #pragma unroll
    for (int e = 0; e < KB; e++)
      if (i0 + e < T) {
        axpy_row(dv, sb[e], dy, yhead + (i0 + e) * C);
        axpy_row(dk, db[e], qkv, head + (i0 + e) * ld);
      }
  }
  const ulong dr = dqoff + (ulong)b * T * ld + (ulong)h * HEAD_DIM + j * ld + C;
  #pragma unroll
  for (int n = 0; n < NV; n++) {
    store_vec(dqkv, dr + (ulong)(n * VW), dk[n] * scale);
    store_vec(dqkv, dr + C + (ulong)(n * VW), dv[n]);
  }
}
