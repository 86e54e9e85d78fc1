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
// They run over 3-D ranges (clt__nn_launch_3d): id 0 walks the innermost,
// contiguous index; ids 1 and 2 carry the rest, so no item divides its id
// (per-row divisions of id 2 are hoisted out of the CPU's work-item loops).
// The x range is rounded up to whole work-groups: items past it return.

// col[k, b*P + p] = x[b, ci, oh*sh - ph + kh, ow*sw - pw + kw] (0 outside)
// with k = (ci*KH + kh)*KW + kw and p = oh*OW + ow. Range (OW, OH, K*B):
// item (ow, oh, k*B + b), whose column index k*B*P + b*P + p is id 2 * P + p.
__kernel void im2col(__global const float *x, const ulong xoff, __global float *col, const ulong coff,
                     const uint B, const uint Cin, const uint H, const uint W, const uint KH, const uint KW,
                     const uint OH, const uint OW, const int sh, const int sw, const int ph, const int pw) {
  const uint ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
  if (ow >= OW) return;
  const uint k = z / B, b = z - k * B;
  const uint ci = k / (KH * KW), r = k - ci * (KH * KW);
  const uint kh = r / KW, kw = r - kh * KW;
  const int ih = (int)(oh * sh) - ph + (int)kh, iw = (int)(ow * sw) - pw + (int)kw;
  float v = 0.0f;
  if (ih >= 0 && ih < (int)H && iw >= 0 && iw < (int)W) v = x[xoff + ((b * Cin + ci) * H + ih) * W + iw];
  col[coff + (z * OH + oh) * OW + ow] = v;
}

// The adjoint of im2col: dx[b, ci, ih, iw] = the sum of col[k, b*P + p]
// over the (kh, kw) whose window puts output p on input (ih, iw).
// Range (W, H, B*Cin): item (iw, ih, b*Cin + ci).
__kernel void col2im(__global const float *col, const ulong coff, __global float *dx, const ulong dxoff,
                     const uint B, const uint Cin, const uint H, const uint W, const uint KH, const uint KW,
                     const uint OH, const uint OW, const int sh, const int sw, const int ph, const int pw) {
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  if (iw >= W) return;
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
  dx[dxoff + (z * H + ih) * W + iw] = acc;
}

// y[b, c, p] = t[c, b*P + p] (+ bias[c] when has_bias). Range (P, C, B).
__kernel void cbp_to_bcp(__global const float *t, const ulong toff, __global float *y, const ulong yoff,
                         __global const float *bias, const ulong boff, const int has_bias, const uint B,
                         const uint C, const uint P) {
  const uint p = get_global_id(0), c = get_global_id(1), b = get_global_id(2);
  if (p >= P) return;
  float v = t[toff + (c * B + b) * P + p];
  if (has_bias) v += bias[boff + c];
  y[yoff + (b * C + c) * P + p] = v;
}

// t[c, b*P + p] = y[b, c, p]. Range (P, B, C).
__kernel void bcp_to_cbp(__global const float *y, const ulong yoff, __global float *t, const ulong toff,
                         const uint B, const uint C, const uint P) {
  const uint p = get_global_id(0), b = get_global_id(1), c = get_global_id(2);
  if (p >= P) return;
  t[toff + (c * B + b) * P + p] = y[yoff + (b * C + c) * P + p];
}
