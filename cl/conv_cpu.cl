// conv_cpu.cl: stride-1 convolutions (1-D, 2-D, 3-D, any dilation) on CPU
// devices as implicit GEMMs: gemm_cpu.cl's register tiles, with B's rows
// read straight from a zero-padded copy of the input instead of from an
// im2col matrix (src/nn/conv_cpu.c says when).
//
// Why: im2col writes K = Cin*KD*KH*KW copies of the input and the GEMM
// reads them back. For a 3x3 convolution over a 64x64 plane that matrix
// is 9 times the input and leaves the cache; on PoCL, one thread, writing
// it took 3/4 of the forward of a 32 -> 16 channel conv2d at batch 8
// (16.7 ms, of which 3.3 GEMM) and col2im with its K x P GEMM of inner
// dimension Cout most of the backward of a 24 -> 8 conv3d (bench/nn_bench
// --unet). Here a tap's 16 (or 8, 4) outputs of one row read 16
// consecutive floats of the padded input, a vector load at an offset the
// compiler knows but for the channel.
//
// Every geometry is 3-D (D = H = 1 for 1-D, D = 1 for 2-D); the layer's
// is compiled in: CC_CIN channels in, the kernel CC_KD x CC_KH x CC_KW
// with dilation CC_DD, CC_DH, CC_DW, the padded input CC_PD x CC_PH x
// CC_PW, the output CC_OD x CC_OH x CC_OW, CC_VW output columns a vector
// (16, 8 or 4, dividing CC_OW), and the tile: CC_R output channels by CC_V
// vectors.
//
// conv_cpu_forward also runs the input gradient: dx is the convolution of
// dy, padded by (k - 1)*d - p, with the weights' taps reversed and their
// two channel axes swapped (CC_FLIP), read in place.
//
// Sums: each output is a sequential fma over k = ((ci*KD + kd)*KH + kh)*KW
// + kw, as gemm_cpu's over im2col's rows, then the bias: the forward's
// bits are those of the im2col path on the CPU tiles. The weight
// gradient's are, per sample, 16 (8, 4) lanes of fmas over the positions
// added in a fixed tree, then the samples' in order: the same bits every
// run and for every tile.

#pragma OPENCL FP_CONTRACT OFF

#define CC_CAT(a, b) a##b
#define CC_XCAT(a, b) CC_CAT(a, b)
typedef CC_XCAT(float, CC_VW) vec;
#define VLOADF CC_XCAT(vload, CC_VW)
#define VSTOREF CC_XCAT(vstore, CC_VW)
#ifdef CLT_HALF
#define VLOADA(p) CC_XCAT(vload_half, CC_VW)(0, (p))
#define VSTOREA(v, p) CC_XCAT(CC_XCAT(vstore_half, CC_VW), _rte)((v), 0, (p))
#else
#define VLOADA(p) VLOADF(0, (p))
#define VSTOREA(v, p) VSTOREF((v), 0, (p))
#endif

#define CC_KK (CC_KD * CC_KH * CC_KW)
#define CC_PHW (CC_PH * CC_PW)
#define CC_PVOL (CC_PD * CC_PHW)
#define CC_P (CC_OD * CC_OH * CC_OW)
#define CC_VPR (CC_OW / CC_VW) // vectors a row

// The padded copy the kernels read: xp[b, c, d, h, w] = x[b, c, d - pd,
// h - ph, w - pw], 0 outside x, widened to float. Range (PW, PH, B*C*PD).
__kernel void conv_cpu_pad(__global const act_t *x, const ulong xoff, __global float *xp, const ulong xpoff,
                           const uint D, const uint H, const uint W, const int pd, const int ph, const int pw) {
  const uint w = get_global_id(0), h = get_global_id(1), z = get_global_id(2);
  const uint bc = z / CC_PD, d = z - bc * CC_PD;
  const int id = (int)d - pd, ih = (int)h - ph, iw = (int)w - pw;
  float v = 0.0f;
  if (id >= 0 && id < (int)D && ih >= 0 && ih < (int)H && iw >= 0 && iw < (int)W)
    v = ALOAD(x, xoff + (((ulong)bc * D + id) * H + ih) * W + iw);
  xp[xpoff + ((ulong)z * CC_PH + h) * CC_PW + w] = v;
}

// Where vector g (of all B*P/VW) of the output starts: in the padded input
// of its sample (channel 0), and in y (B, ROWS, P) (channel 0).
static inline void vec_at(const uint g, ulong *in, ulong *out) {
  const uint b = g / (CC_P / CC_VW), r = g - b * (CC_P / CC_VW);
  const uint row = r / CC_VPR, ow = (r - row * CC_VPR) * CC_VW;
  const uint od = row / CC_OH, oh = row - od * CC_OH;
  *in = (ulong)b * CC_CIN * CC_PVOL + ((ulong)od * CC_PH + oh) * CC_PW + ow;
  *out = (ulong)b * CC_ROWS * CC_P + ((ulong)od * CC_OH + oh) * CC_OW + ow;
}

// The weight of output row `row`, input channel c, tap t (in k order).
#ifdef CC_FLIP // dx: rows are the forward's input channels, c its outputs
#define W_AT(row, c, t) w[woff + ((ulong)(c) * CC_ROWS + (row)) * CC_KK + (CC_KK - 1 - (t))]
#else
#define W_AT(row, c, t) w[woff + ((ulong)(row) * CC_CIN + (c)) * CC_KK + (t)]
#endif

// y[b, co, p] = sum over k of w[co, k] * xp's tap k under p (+ b[co]).
// Work-item: CC_R output channels from co0 by CC_V vectors from vector
// tile*CC_V; the last tiles' rows and vectors past the end are computed on
// the last ones and not stored. Rows: CC_ROWS (the output channels).
// Range (ceil(ROWS / R), ceil(nvec / V)), row tiles of one column panel
// consecutive (the panel's input stays in cache while the weights pass).
__kernel void conv_cpu_forward(__global const float *xp, const ulong xpoff, __global const float *w, const ulong woff,
                               __global const float *bias, const ulong boff, const int has_bias, __global act_t *y,
                               const ulong yoff, const uint nvec) {
  const uint co0 = get_global_id(0) * CC_R, g0 = get_global_id(1) * CC_V;
  ulong in[CC_V], out[CC_V];
#pragma unroll
  for (int v = 0; v < CC_V; v++) vec_at(min(g0 + v, nvec - 1), &in[v], &out[v]);
  uint row[CC_R];
#pragma unroll
  for (int r = 0; r < CC_R; r++) row[r] = min(co0 + r, (uint)CC_ROWS - 1);
  vec acc[CC_R][CC_V];
#pragma unroll
  for (int r = 0; r < CC_R; r++)
#pragma unroll
    for (int v = 0; v < CC_V; v++) acc[r][v] = (vec)(0.0f);
  for (uint c = 0; c < CC_CIN; c++) {
    __global const float *xc = xp + xpoff + (ulong)c * CC_PVOL;
#pragma unroll
    for (int kd = 0; kd < CC_KD; kd++)
#pragma unroll
      for (int kh = 0; kh < CC_KH; kh++)
#pragma unroll
        for (int kw = 0; kw < CC_KW; kw++) {
          const int t = (kd * CC_KH + kh) * CC_KW + kw;
          const uint tap = (kd * CC_DD * CC_PH + kh * CC_DH) * CC_PW + kw * CC_DW;
          vec bv[CC_V];
#pragma unroll
          for (int v = 0; v < CC_V; v++) bv[v] = VLOADF(0, xc + in[v] + tap);
#pragma unroll
          for (int r = 0; r < CC_R; r++) {
            const vec av = (vec)(W_AT(row[r], c, t));
#pragma unroll
            for (int v = 0; v < CC_V; v++) acc[r][v] = fma(av, bv[v], acc[r][v]);
          }
        }
  }
#pragma unroll
  for (int r = 0; r < CC_R; r++) {
    if (co0 + r >= CC_ROWS) break;
    const float bs = has_bias ? bias[boff + co0 + r] : 0.0f;
#pragma unroll
    for (int v = 0; v < CC_V; v++) {
      if (g0 + v >= nvec) break;
      VSTOREA(has_bias ? acc[r][v] + bs : acc[r][v], y + yoff + out[v] + (ulong)(co0 + r) * CC_P);
    }
  }
}

// The 16 (8, 4) lanes of v added in a fixed tree.
static inline float lanes_sum(vec v) {
#if CC_VW == 16
  const float8 h8 = v.lo + v.hi;
  const float4 h4 = h8.lo + h8.hi;
#elif CC_VW == 8
  const float4 h4 = v.lo + v.hi;
#else
  const float4 h4 = v;
#endif
  const float2 h2 = h4.lo + h4.hi;
  return h2.x + h2.y;
}

// The weight gradient of one sample b: part[b, co, ci, kd, kh, kw] = the
// sum over positions p of dy[b, co, p] * xp[b, ci, tap (kd, kh, kw) under
// p]; conv_cpu_sum_samples adds the samples' in order to dw.
// Work-item: CC_R output channels from co0 by the CC_KW taps of one tap
// row (ci, kd, kh) of sample b; rows past ROWS computed on the last and
// not stored. Range (ceil(ROWS / R), CIN*KD*KH, B). A work-item a sample,
// not one over every sample: the items of one sample run together and
// its dy (R channels of P values) stays in cache while the tap rows pass;
// summed over all samples in one item, dy came again from memory for
// every tap row (a 32 -> 16 conv2d over 64x64 at batch 8, one thread:
// 4.5 ms against 2.x, nn_bench --unet's "backward (no dx)").
__kernel void conv_cpu_weight_grad(__global const float *xp, const ulong xpoff, __global const act_t *dy,
                                   const ulong dyoff, __global float *part) {
  const uint co0 = get_global_id(0) * CC_R, q = get_global_id(1), b = get_global_id(2);
  const uint ci = q / (CC_KD * CC_KH), r2 = q - ci * (CC_KD * CC_KH);
  const uint kd = r2 / CC_KH, kh = r2 - kd * CC_KH;
  uint row[CC_R];
#pragma unroll
  for (int r = 0; r < CC_R; r++) row[r] = min(co0 + r, (uint)CC_ROWS - 1);
  vec acc[CC_R][CC_KW];
#pragma unroll
  for (int r = 0; r < CC_R; r++)
#pragma unroll
    for (int t = 0; t < CC_KW; t++) acc[r][t] = (vec)(0.0f);
  __global const float *xb =
      xp + xpoff + ((ulong)b * CC_CIN + ci) * CC_PVOL + (kd * CC_DD * CC_PH + kh * CC_DH) * CC_PW;
  __global const act_t *db = dy + dyoff + (ulong)b * CC_ROWS * CC_P;
  for (uint od = 0; od < CC_OD; od++)
    for (uint oh = 0; oh < CC_OH; oh++) {
      __global const float *xr = xb + ((ulong)od * CC_PH + oh) * CC_PW;
      const uint pr = (od * CC_OH + oh) * CC_OW;
#pragma unroll
      for (int ow = 0; ow < CC_OW; ow += CC_VW) {
        vec dv[CC_R], xv[CC_KW];
#pragma unroll
        for (int r = 0; r < CC_R; r++) dv[r] = VLOADA(db + (ulong)row[r] * CC_P + pr + ow);
#pragma unroll
        for (int t = 0; t < CC_KW; t++) xv[t] = VLOADF(0, xr + ow + t * CC_DW);
#pragma unroll
        for (int r = 0; r < CC_R; r++)
#pragma unroll
          for (int t = 0; t < CC_KW; t++) acc[r][t] = fma(dv[r], xv[t], acc[r][t]);
      }
    }
#pragma unroll
  for (int r = 0; r < CC_R; r++) {
    if (co0 + r >= CC_ROWS) break;
    __global float *d = part + (((ulong)b * CC_ROWS + co0 + r) * CC_CIN + ci) * CC_KK + (kd * CC_KH + kh) * CC_KW;
#pragma unroll
    for (int t = 0; t < CC_KW; t++) d[t] = lanes_sum(acc[r][t]);
  }
}

// The bias gradient of one sample b: part[b, co] = the sum of dy[b, co, p]
// over positions p, in CC_VW lanes added in a fixed tree. Range (ROWS, B).
// (bias.c's kernel walks a channel one float at a time on PoCL, where its
// work-group is one item.)
__kernel void conv_cpu_bias_grad(__global const act_t *dy, const ulong dyoff, __global float *part) {
  const uint co = get_global_id(0), b = get_global_id(1);
  __global const act_t *d = dy + dyoff + ((ulong)b * CC_ROWS + co) * CC_P;
  vec acc = (vec)(0.0f);
  for (uint p = 0; p < CC_P; p += CC_VW) acc += VLOADA(d + p);
  part[(ulong)b * CC_ROWS + co] = lanes_sum(acc);
}

// out[i] += the sum over samples b of part[b*n + i], in b's order (the
// weight and bias gradients of conv_cpu_weight_grad and _bias_grad).
// Range (n).
__kernel void conv_cpu_sum_samples(__global const float *part, const uint B, const uint n, __global float *out,
                                   const ulong outoff) {
  const uint i = get_global_id(0);
  float s = part[i];
  for (uint b = 1; b < B; b++) s += part[(ulong)b * n + i];
  out[outoff + i] += s;
}
