// conv.cl: the data movement around conv2d's GEMMs (src/nn/conv.c), and a
// direct forward kernel for layers with few input terms per output.
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

// col[k, b*P + p] = x[b, ci, oh*sh - ph + kh, ow*sw - pw + kw] (0 outside)
// with k = (ci*KH + kh)*KW + kw and p = oh*OW + ow.
__kernel void im2col(__global const float *x, const ulong xoff, __global float *col, const ulong coff,
                     const uint B, const uint Cin, const uint H, const uint W, const uint KH, const uint KW,
                     const uint OH, const uint OW, const int sh, const int sw, const int ph, const int pw) {
  const uint P = OH * OW, BP = B * P;
  const uint i = get_global_id(0);
  if (i >= Cin * KH * KW * BP) return;
  const uint k = i / BP, j = i - k * BP;
  const uint b = j / P, p = j - b * P;
  const uint oh = p / OW, ow = p - oh * OW;
  const uint ci = k / (KH * KW), r = k - ci * (KH * KW);
  const uint kh = r / KW, kw = r - kh * KW;
  const int ih = (int)(oh * sh) - ph + (int)kh, iw = (int)(ow * sw) - pw + (int)kw;
  float v = 0.0f;
  if (ih >= 0 && ih < (int)H && iw >= 0 && iw < (int)W) v = x[xoff + ((b * Cin + ci) * H + ih) * W + iw];
  col[coff + i] = v;
}

// The adjoint of im2col: dx[b, ci, ih, iw] = the sum of col[k, b*P + p]
// over the (kh, kw) whose window puts output p on input (ih, iw).
__kernel void col2im(__global const float *col, const ulong coff, __global float *dx, const ulong dxoff,
                     const uint B, const uint Cin, const uint H, const uint W, const uint KH, const uint KW,
                     const uint OH, const uint OW, const int sh, const int sw, const int ph, const int pw) {
  const uint P = OH * OW, BP = B * P;
  const uint i = get_global_id(0);
  if (i >= B * Cin * H * W) return;
  const uint iw = i % W, ih = (i / W) % H, ci = (i / (W * H)) % Cin, b = i / (W * H * Cin);
  float acc = 0.0f;
  for (uint kh = 0; kh < KH; kh++) {
    int th = (int)ih + ph - (int)kh; // = oh * sh
    if (th < 0 || th % sh) continue;
    uint oh = (uint)(th / sh);
    if (oh >= OH) continue;
    for (uint kw = 0; kw < KW; kw++) {
      int tw = (int)iw + pw - (int)kw;
      if (tw < 0 || tw % sw) continue;
      uint ow = (uint)(tw / sw);
      if (ow >= OW) continue;
      acc += col[coff + (ulong)((ci * KH + kh) * KW + kw) * BP + b * P + oh * OW + ow];
    }
  }
  dx[dxoff + i] = acc;
}

// y[b, c, p] = t[c, b*P + p] (+ bias[c] when has_bias)
__kernel void cbp_to_bcp(__global const float *t, const ulong toff, __global float *y, const ulong yoff,
                         __global const float *bias, const ulong boff, const int has_bias, const uint B,
                         const uint C, const uint P) {
  const uint i = get_global_id(0);
  if (i >= B * C * P) return;
  const uint p = i % P, c = (i / P) % C, b = i / (P * C);
  float v = t[toff + (ulong)c * (B * P) + b * P + p];
  if (has_bias) v += bias[boff + c];
  y[yoff + i] = v;
}

// t[c, b*P + p] = y[b, c, p]
__kernel void bcp_to_cbp(__global const float *y, const ulong yoff, __global float *t, const ulong toff,
                         const uint B, const uint C, const uint P) {
  const uint i = get_global_id(0);
  if (i >= B * C * P) return;
  const uint j = i % (B * P), c = i / (B * P);
  const uint b = j / P, p = j - b * P;
  t[toff + i] = y[yoff + ((ulong)b * C + c) * P + p];
}

// Direct convolution, one work-item per output y[n, co, oh, ow], summing
// x * w over (ci, kh, kw) in that order, then adding the bias. Faster than
// im2col + GEMM when K = Cin*KH*KW is small (a first layer on 1-channel
// images): the GEMM's inner dimension is then too short to pay for the
// column matrix (see src/nn/conv.c).
__kernel void conv_direct_forward(__global const float *x, const ulong xoff, __global const float *w,
                                  const ulong woff, __global const float *bias, const ulong boff,
                                  const int has_bias, __global float *y, const ulong yoff, const uint N,
                                  const uint Cin, const uint H, const uint W, const uint Cout, const uint KH,
                                  const uint KW, const uint OH, const uint OW, const int sh, const int sw,
                                  const int ph, const int pw) {
  const uint i = get_global_id(0);
  if (i >= N * Cout * OH * OW) return;
  const uint ow = i % OW, oh = (i / OW) % OH, co = (i / (OW * OH)) % Cout, n = i / (OW * OH * Cout);
  const int h0 = (int)(oh * sh) - ph, w0 = (int)(ow * sw) - pw;
  float acc = 0.0f;
  for (uint ci = 0; ci < Cin; ci++) {
    __global const float *xp = x + xoff + (ulong)(n * Cin + ci) * H * W;
    __global const float *wp = w + woff + (ulong)(co * Cin + ci) * KH * KW;
    for (uint kh = 0; kh < KH; kh++) {
      int ih = h0 + (int)kh;
      if (ih < 0 || ih >= (int)H) continue;
      for (uint kw = 0; kw < KW; kw++) {
        int iw = w0 + (int)kw;
        if (iw >= 0 && iw < (int)W) acc += xp[ih * W + iw] * wp[kh * KW + kw];
      }
    }
  }
  if (has_bias) acc += bias[boff + co];
  y[yoff + i] = acc;
}
