// conv.cl: the data movement around conv2d's GEMMs (src/nn/conv.c).
//
// A chunk of B samples is convolved with one GEMM: the weights (Cout, K),
// K = Cin*KH*KW, times the column matrix col (K, B*P), P = OH*OW, whose
// column b*P + oh*OW + ow holds the input patch under output (oh, ow) of
// sample b, zeros where the window hangs over the padding. The GEMM's
// result is channel-major (Cout, B*P); the output tensor is (B, Cout, P),
// hence the two reorder kernels.
//
// Every kernel maps one work-item to one element it writes, and gathers
// instead of scattering, so nothing needs atomics and results repeat bitwise.
// They run over exact 3-D ranges (clt__nn_launch_3d): id 0 walks the
// innermost, contiguous index; ids 1 and 2 carry the rest, so no item
// divides its id (per-row divisions of id 2 are hoisted out of the CPU's
// work-item loops), and no item lies outside, so no kernel tests its ids: on
// PoCL an early return made a 3x3 convolution 7x slower.

// col[k, b*P + p] = x[b, ci, oh*sh - ph + kh, ow*sw - pw + kw] (0 outside)
// with k = (ci*KH + kh)*KW + kw and p = oh*OW + ow. Range (OW, OH, K*B):
// item (ow, oh, k*B + b), whose column index k*B*P + b*P + p is id 2 * P + p.
__kernel void im2col(__global const act_t *x, const ulong xoff, __global float *col, const ulong coff,
                     const uint B, const uint Cin, const uint H, const uint W, const uint KH, const uint KW,
                     const uint OH, const uint OW, const int sh, const int sw, const int ph, const int pw) {
  const uint ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
  const uint k = z / B, b = z - k * B;
  const uint ci = k / (KH * KW), r = k - ci * (KH * KW);
  const uint kh = r / KW, kw = r - kh * KW;
  const int ih = (int)(oh * sh) - ph + (int)kh, iw = (int)(ow * sw) - pw + (int)kw;
  float v = 0.0f;
  if (ih >= 0 && ih < (int)H && iw >= 0 && iw < (int)W) v = ALOAD(x, xoff + ((b * Cin + ci) * H + ih) * W + iw);
  col[coff + (z * OH + oh) * OW + ow] = v;
}

// The adjoint of im2col: dx[b, ci, ih, iw] = the sum of col[k, b*P + p]
// over the (kh, kw) whose window puts output p on input (ih, iw).
// Range (W, H, B*Cin): item (iw, ih, b*Cin + ci).
__kernel void col2im(__global const float *col, const ulong coff, __global act_t *dx, const ulong dxoff,
                     const uint B, const uint Cin, const uint H, const uint W, const uint KH, const uint KW,
                     const uint OH, const uint OW, const int sh, const int sw, const int ph, const int pw) {
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  const uint P = OH * OW, BP = B * P;
  const uint b = z / Cin, ci = z - b * Cin;
  float acc = 0.0f;
  for (uint kh = 0; kh < KH; kh++) {
    int th = (int)ih + ph - (int)kh; // = oh * sh
    if (th < 0 || (sh > 1 && th % sh)) continue;
    uint oh = (uint)(sh > 1 ? th / sh : th);
    if (oh >= OH) continue;
    for (uint kw = 0; kw < KW; kw++) {
      int tw = (int)iw + pw - (int)kw;
      if (tw < 0 || (sw > 1 && tw % sw)) continue;
      uint ow = (uint)(sw > 1 ? tw / sw : tw);
      if (ow >= OW) continue;
      acc += col[coff + (ulong)((ci * KH + kh) * KW + kw) * BP + b * P + oh * OW + ow];
    }
  }
  ASTORE(dx, dxoff + (z * H + ih) * W + iw, acc);
}

// y[b, c, p] = t[c, b*P + p] (+ bias[c] when has_bias). Range (P, C, B).
__kernel void cbp_to_bcp(__global const float *t, const ulong toff, __global act_t *y, const ulong yoff,
                         __global const float *bias, const ulong boff, const int has_bias, const uint B,
                         const uint C, const uint P) {
  const uint p = get_global_id(0), c = get_global_id(1), b = get_global_id(2);
  float v = t[toff + (c * B + b) * P + p];
  if (has_bias) v += bias[boff + c];
  ASTORE(y, yoff + (b * C + c) * P + p, v);
}

// t[c, b*P + p] = y[b, c, p]. Range (P, B, C).
__kernel void bcp_to_cbp(__global const act_t *y, const ulong yoff, __global float *t, const ulong toff,
                         const uint B, const uint C, const uint P) {
  const uint p = get_global_id(0), b = get_global_id(1), c = get_global_id(2);
  t[toff + (c * B + b) * P + p] = ALOAD(y, yoff + (b * C + c) * P + p);
}

// ---- direct convolution for small K ---------------------------------------
// A layer with few inputs per output, K = Cin*KH*KW <= CONV_DIRECT_MAX_K
// (src/nn/conv.c), like a first layer on grayscale images (K = 9), is
// convolved directly: im2col would write K copies of the input and the GEMM
// would stream them back for K multiply-adds per output, most of the time
// going to memory. The input is first copied with its zero padding made
// real (pad_input), so the window loops read without bounds tests, and the
// kernels are built with -DCONV_CIN, -DCONV_KH, -DCONV_KW, -DCONV_SH and
// -DCONV_SW so the loops unroll and neighbouring work-items read
// neighbouring floats. On PoCL, bounds tests inside the window (4x), or a
// stride known only at run time (3.5x, the reads become gathers), made the
// K = 9 layer several times slower.

// xp[b, ci, ih, iw] = x[b, ci, ih - ph, iw - pw], 0 in the border: xp is
// (B, Cin, H + 2 ph, W + 2 pw). Range (W + 2 pw, H + 2 ph, B*Cin).
__kernel void pad_input(__global const act_t *x, const ulong xoff, __global float *xp, const ulong xpoff,
                        const uint H, const uint W, const int ph, const int pw) {
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  const uint HP = get_global_size(1), WP = get_global_size(0);
  const int r = (int)ih - ph, c = (int)iw - pw;
  const int inside = r >= 0 && r < (int)H && c >= 0 && c < (int)W;
  const float v = ALOAD(x, xoff + ((ulong)z * H + (inside ? r : 0)) * W + (inside ? c : 0));
  xp[xpoff + ((ulong)z * HP + ih) * WP + iw] = inside ? v : 0.0f;
}

#ifdef CONV_CIN // (geom_kernel, src/nn/conv.c, defines the whole geometry)
#define CONV_K (CONV_CIN * CONV_KH * CONV_KW)
// xp is the workspace's padded float copy, or the input itself when there
// is no padding (f32 storage only: half inputs are always copied).

// y[n, co, oh, ow] = sum over (ci, kh, kw) of w[co, ci, kh, kw] *
// xp[n, ci, oh*SH + kh, ow*SW + kw], + b[co] when has_bias: the sum in k
// order and the bias last, as the GEMM path. xp (N, Cin, H, W) is the
// padded input (or x itself when there is no padding). Range (OW, OH,
// N*Cout).
__kernel void conv_direct_forward(__global const float *xp, const ulong xoff, __global const float *w,
                                  const ulong woff, __global const float *bias, const ulong boff, const int has_bias,
                                  __global act_t *y, const ulong yoff, const uint Cout, const uint H, const uint W,
                                  const uint OH, const uint OW) {
  const uint ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
  const uint n = z / Cout, co = z - n * Cout;
  __global const float *wc = w + woff + (ulong)co * CONV_K;
  __global const float *xn = xp + xoff + (ulong)n * CONV_CIN * H * W + oh * CONV_SH * W + ow * CONV_SW;
  float acc = 0.0f;
  _Pragma("unroll") for (int ci = 0; ci < CONV_CIN; ci++)
    _Pragma("unroll") for (int kh = 0; kh < CONV_KH; kh++)
      _Pragma("unroll") for (int kw = 0; kw < CONV_KW; kw++)
        acc += wc[(ci * CONV_KH + kh) * CONV_KW + kw] * xn[(ci * H + kh) * W + kw];
  if (has_bias) acc += bias[boff + co];
  ASTORE(y, yoff + (z * OH + oh) * OW + ow, acc);
}

// conv_direct_forward a row at a time (PoCL): item (oh, n*Cout + co)
// writes the OW outputs of row oh, each summed in the same order. Range
// (OH, N*Cout).
__kernel void conv_direct_forward_rows(__global const float *xp, const ulong xoff, __global const float *w,
                                       const ulong woff, __global const float *bias, const ulong boff,
                                       const int has_bias, __global act_t *y, const ulong yoff, const uint Cout,
                                       const uint H, const uint W) {
  const uint oh = get_global_id(0), z = get_global_id(1);
  const uint n = z / Cout, co = z - n * Cout;
  __global const float *wc = w + woff + (ulong)co * CONV_K;
  __global const float *xn = xp + xoff + (ulong)n * CONV_CIN * H * W + oh * CONV_SH * W;
  float acc[CONV_OW];
  _Pragma("unroll") for (int ow = 0; ow < CONV_OW; ow++) acc[ow] = 0.0f;
  for (int ci = 0; ci < CONV_CIN; ci++)
    _Pragma("unroll") for (int kh = 0; kh < CONV_KH; kh++)
      _Pragma("unroll") for (int kw = 0; kw < CONV_KW; kw++) {
        const float wv = wc[(ci * CONV_KH + kh) * CONV_KW + kw];
        __global const float *xr = xn + (ci * H + kh) * W + kw;
        _Pragma("unroll") for (int ow = 0; ow < CONV_OW; ow++) acc[ow] += wv * xr[ow * CONV_SW];
      }
  const float bv = has_bias ? bias[boff + co] : 0.0f;
  _Pragma("unroll") for (int ow = 0; ow < CONV_OW; ow++)
    ASTORE(y, yoff + ((ulong)z * CONV_OH + oh) * CONV_OW + ow, has_bias ? acc[ow] + bv : acc[ow]);
}

// dw[co, k] += sum over (n, p) of dy[n, co, p] * xp-patch[n, k, p], and
// db[co] += sum of dy[n, co, p] when has_bias; xp as above. One work-group
// per output channel: item t takes positions p = t, t + L, ... of the plane
// (their (oh, ow) worked out once) and every sample n at each, summing K + 1
// products in registers, then a tree in local memory (K + 1 rows of L) adds
// the items' sums in a fixed order: the same bits every run. L, the group
// size, is a power of two.
__kernel void conv_direct_backward_weights(__global const float *xp, const ulong xoff, __global const act_t *dy,
                                           const ulong dyoff, __global float *dw, const ulong dwoff,
                                           __global float *db, const ulong dboff, const int has_bias,
                                           const uint N, const uint Cout, const uint H, const uint W,
                                           const uint OH, const uint OW, __local float *scratch) {
  const uint co = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
  const uint P = OH * OW;
  float acc[CONV_K + 1];
  _Pragma("unroll") for (int k = 0; k <= CONV_K; k++) acc[k] = 0.0f;
  for (uint p = lid; p < P; p += L) {
    const uint oh = p / OW, ow = p - oh * OW;
    for (uint n = 0; n < N; n++) {
      const float g = ALOAD(dy, dyoff + ((ulong)n * Cout + co) * P + p);
      __global const float *xn = xp + xoff + (ulong)n * CONV_CIN * H * W + oh * CONV_SH * W + ow * CONV_SW;
      _Pragma("unroll") for (int ci = 0; ci < CONV_CIN; ci++)
        _Pragma("unroll") for (int kh = 0; kh < CONV_KH; kh++)
          _Pragma("unroll") for (int kw = 0; kw < CONV_KW; kw++)
            acc[(ci * CONV_KH + kh) * CONV_KW + kw] += g * xn[(ci * H + kh) * W + kw];
      acc[CONV_K] += g;
    }
  }
  // One tree over the K + 1 rows of scratch (K + 1, L) at once.
  for (int k = 0; k <= CONV_K; k++) scratch[k * L + lid] = acc[k];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = L / 2; s > 0; s >>= 1) {
    if (lid < s)
      for (int k = 0; k <= CONV_K; k++) scratch[k * L + lid] += scratch[k * L + lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (uint k = lid; k < CONV_K; k += L) dw[dwoff + (ulong)co * CONV_K + k] += scratch[k * L];
  if (lid == 0 && has_bias) db[dboff + co] += scratch[CONV_K * L];
}
// conv_direct_backward_weights in two steps for PoCL, whose work-group
// trees above run as loops over mostly idle items. Step 1: item (oh, co)
// sums, over every sample n and then along its row (ow, unrolled), the
// K + 1 products of its row into part[(co*OH + oh)*(K + 1) + k]. Range (OH,
// Cout).
//
// With stride 1 along the row, an item takes the row 16 columns at a time
// (then 8, 4, 2 and 1 for the rest: CONV_OW is known), K + 1 float16 sums
// of 16 lanes, added in a fixed tree at the end: the products of a column
// stay in one lane whatever the batch. The scalar body above it did the
// same work one column at a time, and took the Fashion CNN's first layer
// (1 input, 3 x 3, 28 x 28, 32 outputs, batch 64) 3.2-5.1 ms a step on
// one PoCL thread, most of its backward (bench/nn_bench --only conv1).
#if CONV_SW == 1
#ifdef CLT_HALF
#define GLOAD(n, p) vload_half##n(0, (p))
#else
#define GLOAD(n, p) vload##n(0, (p))
#endif
// The columns [c, c + n) into lanes L (an lvalue of n floats) of every sum.
#define ROW_PIECE(n, c, L)                                                           \
  {                                                                                 \
    const float##n gv = GLOAD(n, dy + g0 + (c));                                    \
    acc[CONV_K] L += gv;                                                            \
    _Pragma("unroll") for (int ci = 0; ci < CONV_CIN; ci++)                         \
      _Pragma("unroll") for (int kh = 0; kh < CONV_KH; kh++)                        \
        _Pragma("unroll") for (int kw = 0; kw < CONV_KW; kw++) {                    \
          const int k = (ci * CONV_KH + kh) * CONV_KW + kw;                         \
          acc[k] L = fma(gv, vload##n(0, xn + (ci * H + kh) * W + (c) + kw), acc[k] L); \
        }                                                                           \
  }
#define ROW_TAIL (CONV_OW / 16 * 16)
#endif
__kernel void conv_direct_backward_weights_rows(__global const float *xp, const ulong xoff,
                                                __global const act_t *dy, const ulong dyoff,
                                                __global float *part, const uint N, const uint Cout,
                                                const uint H, const uint W) {
  const uint oh = get_global_id(0), co = get_global_id(1);
#if CONV_SW == 1
  float16 acc[CONV_K + 1];
  _Pragma("unroll") for (int k = 0; k <= CONV_K; k++) acc[k] = (float16)(0.0f);
  for (uint n = 0; n < N; n++) {
    const ulong g0 = dyoff + (((ulong)n * Cout + co) * CONV_OH + oh) * CONV_OW;
    __global const float *xn = xp + xoff + (ulong)n * CONV_CIN * H * W + oh * CONV_SH * W;
    _Pragma("unroll") for (int c = 0; c < ROW_TAIL; c += 16) ROW_PIECE(16, c, )
#if CONV_OW % 16 >= 8
    ROW_PIECE(8, ROW_TAIL, .lo)
#endif
#if CONV_OW % 8 >= 4
    ROW_PIECE(4, CONV_OW / 8 * 8, .s89ab)
#endif
#if CONV_OW % 4 >= 2
    ROW_PIECE(2, CONV_OW / 4 * 4, .scd)
#endif
#if CONV_OW % 2
    {
      const int c = CONV_OW - 1;
      const float g = ALOAD(dy, g0 + c);
      acc[CONV_K].sf += g;
      _Pragma("unroll") for (int ci = 0; ci < CONV_CIN; ci++)
        _Pragma("unroll") for (int kh = 0; kh < CONV_KH; kh++)
          _Pragma("unroll") for (int kw = 0; kw < CONV_KW; kw++) {
            const int k = (ci * CONV_KH + kh) * CONV_KW + kw;
            acc[k].sf = fma(g, xn[(ci * H + kh) * W + c + kw], acc[k].sf);
          }
    }
#endif
  }
  __global float *out = part + ((ulong)co * CONV_OH + oh) * (CONV_K + 1);
  _Pragma("unroll") for (int k = 0; k <= CONV_K; k++) {
    const float8 s8 = acc[k].lo + acc[k].hi;
    const float4 s4 = s8.lo + s8.hi;
    const float2 s2 = s4.lo + s4.hi;
    out[k] = s2.x + s2.y;
  }
#else
  float acc[CONV_K + 1];
  _Pragma("unroll") for (int k = 0; k <= CONV_K; k++) acc[k] = 0.0f;
  for (uint n = 0; n < N; n++) {
    const ulong g0 = dyoff + (((ulong)n * Cout + co) * CONV_OH + oh) * CONV_OW;
    __global const float *xn = xp + xoff + (ulong)n * CONV_CIN * H * W + oh * CONV_SH * W;
    _Pragma("unroll") for (int ow = 0; ow < CONV_OW; ow++) {
      const float g = ALOAD(dy, g0 + ow);
      _Pragma("unroll") for (int ci = 0; ci < CONV_CIN; ci++)
        _Pragma("unroll") for (int kh = 0; kh < CONV_KH; kh++)
          _Pragma("unroll") for (int kw = 0; kw < CONV_KW; kw++)
            acc[(ci * CONV_KH + kh) * CONV_KW + kw] += g * xn[(ci * H + kh) * W + ow * CONV_SW + kw];
      acc[CONV_K] += g;
    }
  }
  __global float *out = part + ((ulong)co * CONV_OH + oh) * (CONV_K + 1);
  _Pragma("unroll") for (int k = 0; k <= CONV_K; k++) out[k] = acc[k];
#endif
}

// Step 2: dw[co, k] += the OH partial sums of step 1 in row order, db[co]
// += those of the bias (k = K) when has_bias. Range (K + 1, Cout).
__kernel void conv_direct_backward_weights_sum(__global const float *part, __global float *dw, const ulong dwoff,
                                               __global float *db, const ulong dboff, const int has_bias) {
  const uint k = get_global_id(0), co = get_global_id(1);
  __global const float *p = part + (ulong)co * CONV_OH * (CONV_K + 1) + k;
  float sum = 0.0f;
  for (int oh = 0; oh < CONV_OH; oh++) sum += p[(ulong)oh * (CONV_K + 1)];
  if (k < CONV_K) dw[dwoff + (ulong)co * CONV_K + k] += sum;
  else if (has_bias) db[dboff + co] += sum;
}
#endif

// ---- im2col and col2im a row at a time (PoCL) ------------------------------
// PoCL runs a work-group as a loop over its items, so an item per element
// pays the loop and the index arithmetic for every float it moves: the
// kernels above took 4.9 and 4.0 ms for the Fashion CNN's second layer
// (32 channels of 14x14, 3x3, batch 64). With the whole geometry known at
// compile time (the host adds -DCONV_H, -DCONV_W, -DCONV_OH, -DCONV_OW,
// -DCONV_PH and -DCONV_PW to the direct kernels' options) an item moves
// whole rows in unrolled straight-line code whose bounds tests are decided
// by the compiler: 1.8 and 0.4 ms, the same bits. The host uses them on PoCL
// for planes up to 64 wide.
#ifdef CONV_OW
// col as im2col above, for x[b, ci] rows: item (oh, (ci*KH + kh)*B + b)
// writes the OW columns of row oh for each of the KW values of kw. Range
// (OH, Cin*KH*B).
__kernel void im2col_rows(__global const act_t *x, const ulong xoff, __global float *col, const ulong coff,
                          const uint B) {
  const uint oh = get_global_id(0), z = get_global_id(1);
  const uint q = z / B, b = z - q * B; // q = ci*KH + kh
  const uint ci = q / CONV_KH, kh = q - ci * CONV_KH;
  const int ih = (int)(oh * CONV_SH + kh) - CONV_PH;
  const int inside = ih >= 0 && ih < CONV_H;
  const ulong src = xoff + ((ulong)(b * CONV_CIN + ci) * CONV_H + (inside ? ih : 0)) * CONV_W;
  const ulong BP = (ulong)B * (CONV_OH * CONV_OW);
  __global float *dst = col + coff + ((ulong)q * CONV_KW * B + b) * (CONV_OH * CONV_OW) + oh * CONV_OW;
  _Pragma("unroll") for (int kw = 0; kw < CONV_KW; kw++)
    _Pragma("unroll") for (int ow = 0; ow < CONV_OW; ow++) {
      const int iw = ow * CONV_SW + kw - CONV_PW;
      float v = 0.0f;
      if (iw >= 0 && iw < CONV_W) v = ALOAD(x, src + iw); // decided at compile time
      dst[kw * BP + ow] = inside ? v : 0.0f;
    }
}

// dx as col2im above, a row at a time: item (ih, b*Cin + ci) sums the W
// values of row ih over (kh, kw) in that order, as col2im does. Range
// (H, B*Cin).
__kernel void col2im_rows(__global const float *col, const ulong coff, __global act_t *dx, const ulong dxoff,
                          const uint B) {
  const uint ih = get_global_id(0), z = get_global_id(1);
  const uint b = z / CONV_CIN, ci = z - b * CONV_CIN;
  const ulong BP = (ulong)B * (CONV_OH * CONV_OW);
  __global const float *cb = col + coff + (ulong)ci * (CONV_KH * CONV_KW) * BP + (ulong)b * (CONV_OH * CONV_OW);
  float acc[CONV_W];
  _Pragma("unroll") for (int iw = 0; iw < CONV_W; iw++) acc[iw] = 0.0f;
  _Pragma("unroll") for (int kh = 0; kh < CONV_KH; kh++) {
    const int th = (int)ih + CONV_PH - kh, oh = th / CONV_SH; // th = oh * SH
    const int hit = th >= 0 && th % CONV_SH == 0 && oh < CONV_OH;
    __global const float *row = cb + (ulong)kh * CONV_KW * BP + (hit ? oh : 0) * CONV_OW;
    _Pragma("unroll") for (int kw = 0; kw < CONV_KW; kw++)
      _Pragma("unroll") for (int iw = 0; iw < CONV_W; iw++) {
        const int tw = iw + CONV_PW - kw; // = ow * SW; decided at compile time
        if (tw >= 0 && tw % CONV_SW == 0 && tw / CONV_SW < CONV_OW) {
          const float v = row[(ulong)kw * BP + tw / CONV_SW];
          acc[iw] += hit ? v : 0.0f;
        }
      }
  }
  _Pragma("unroll") for (int iw = 0; iw < CONV_W; iw++) ASTORE(dx, dxoff + ((ulong)z * CONV_H + ih) * CONV_W + iw, acc[iw]);
}
#endif
