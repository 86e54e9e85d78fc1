// conv_nd.cl: vol2col and col2vol, the data movement around the GEMMs of
// 1-D, 3-D and dilated 2-D convolutions (src/nn/conv_nd.c).
//
// Every geometry is seen as 3-D: x (B, Cin, D, H, W) with D = H = 1 for a
// 1-D convolution and D = 1 for a 2-D one, the kernel (KD, KH, KW) with
// stride (sd, sh, sw), zero padding (pd, ph, pw) and dilation (dd, dh, dw).
// A chunk of B samples is convolved with one GEMM: the weights (Cout, K),
// K = Cin*KD*KH*KW, times col (K, B*P), P = OD*OH*OW, whose column b*P + p
// holds the input patch under output p of sample b (zeros in the padding).
// The reorders between the GEMM's (Cout, B*P) and the tensors' (B, Cout, P)
// are conv.cl's cbp_to_bcp and bcp_to_cbp.
//
// One work-item per element written, gathers instead of scatters (no
// atomics, the same bits every run), exact 3-D ranges (no id tests), id 0
// the contiguous index and the divisions on id 2 only (see cl/conv.cl).

#define ND_GEOM                                                                                                 \
  const uint B, const uint Cin, const uint D, const uint H, const uint W, const uint KD, const uint KH,            \
      const uint KW, const uint OD, const uint OH, const uint OW, const int sd, const int sh, const int sw,     \
      const int pd, const int ph, const int pw, const int dd, const int dh, const int dw

// col[k, b*P + p] = x[b, ci, od*sd - pd + kd*dd, oh*sh - ph + kh*dh,
// ow*sw - pw + kw*dw] (0 outside), k = ((ci*KD + kd)*KH + kh)*KW + kw,
// p = (od*OH + oh)*OW + ow. Range (OW, OH, K*B*OD): item (ow, oh,
// (k*B + b)*OD + od), whose column index is id 2 * OH*OW + oh*OW + ow.
__kernel void vol2col(__global const act_t *x, const ulong xoff, __global float *col, const ulong coff, ND_GEOM) {
  const uint ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
  const uint kb = z / OD, od = z - kb * OD;
  const uint k = kb / B, b = kb - k * B;
  const uint KHW = KH * KW;
  const uint ci = k / (KD * KHW), r = k - ci * (KD * KHW);
  const uint kd = r / KHW, r2 = r - kd * KHW;
  const uint kh = r2 / KW, kw = r2 - kh * KW;
  const int id = (int)(od * sd) - pd + (int)kd * dd;
  const int ih = (int)(oh * sh) - ph + (int)kh * dh;
  const int iw = (int)(ow * sw) - pw + (int)kw * dw;
  float v = 0.0f;
  if (id >= 0 && id < (int)D && ih >= 0 && ih < (int)H && iw >= 0 && iw < (int)W)
    v = ALOAD(x, xoff + (((ulong)(b * Cin + ci) * D + id) * H + ih) * W + iw);
  col[coff + ((ulong)z * OH + oh) * OW + ow] = v;
}

// The output index o along one axis whose window tap k lands on input i,
// or -1: i + pad - k*dil = o*stride with 0 <= o < outs.
int tap_out(int i, int pad, int k, int dil, int stride, int outs) {
  const int t = i + pad - k * dil;
  if (t < 0 || t % stride) return -1;
  const int o = t / stride;
  return o < outs ? o : -1;
}

// The adjoint of vol2col: dx[b, ci, id, ih, iw] = the sum of col[k, b*P + p]
// over the taps (kd, kh, kw) that put output p on the input, in k order.
// Range (W, H, B*Cin*D): item (iw, ih, (b*Cin + ci)*D + id).
__kernel void col2vol(__global const float *col, const ulong coff, __global act_t *dx, const ulong dxoff, ND_GEOM) {
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  const uint bc = z / D, id = z - bc * D;
  const uint b = bc / Cin, ci = bc - b * Cin;
  const ulong P = (ulong)OD * OH * OW, BP = (ulong)B * P;
  __global const float *cb = col + coff + (ulong)ci * KD * KH * KW * BP + (ulong)b * P;
  float acc = 0.0f;
  for (uint kd = 0; kd < KD; kd++) {
    const int od = tap_out((int)id, pd, (int)kd, dd, sd, (int)OD);
    if (od < 0) continue;
    for (uint kh = 0; kh < KH; kh++) {
      const int oh = tap_out((int)ih, ph, (int)kh, dh, sh, (int)OH);
      if (oh < 0) continue;
      for (uint kw = 0; kw < KW; kw++) {
        const int ow = tap_out((int)iw, pw, (int)kw, dw, sw, (int)OW);
        if (ow < 0) continue;
        acc += cb[((kd * KH + kh) * KW + kw) * BP + ((ulong)od * OH + oh) * OW + ow];
      }
    }
  }
  ASTORE(dx, dxoff + ((ulong)z * H + ih) * W + iw, acc);
}

// ---- vol2col and col2vol a row at a time (PoCL) ----------------------------
// PoCL runs a work-group as a loop over its items, and an item per element
// paid the loop and the index arithmetic for every float it moved: the
// kernels above took 3/4 of a 3x3x3 convolution's time (bench/nn_bench
// --only conv3d). With the width axis's geometry known at compile time
// (-DND_W, -DND_OW, -DND_KW, -DND_SW, -DND_PW, -DND_DW from the host) an
// item moves whole rows in unrolled straight-line code whose column tests
// the compiler decides, as conv.cl's im2col_rows. The same values and, for
// col2vol, the same order of sums: the same bits.
#ifdef ND_OW
// col as vol2col, the KW*OW values of output row (od, oh) for tap row
// q = (ci*KD + kd)*KH + kh of sample b. Range (OH, (q*B + b)*OD + od).
__kernel void vol2col_rows(__global const act_t *x, const ulong xoff, __global float *col, const ulong coff,
                           ND_GEOM) {
  const uint oh = get_global_id(0), z = get_global_id(1);
  const uint qb = z / OD, od = z - qb * OD;
  const uint q = qb / B, b = qb - q * B;
  const uint cd = q / KH, kh = q - cd * KH;
  const uint ci = cd / KD, kd = cd - ci * KD;
  const int id = (int)(od * sd) - pd + (int)kd * dd, ih = (int)(oh * sh) - ph + (int)kh * dh;
  const int inside = id >= 0 && id < (int)D && ih >= 0 && ih < (int)H;
  const ulong src = xoff + (((ulong)(b * Cin + ci) * D + (inside ? id : 0)) * H + (inside ? ih : 0)) * ND_W;
  const ulong P = (ulong)OD * OH * ND_OW, BP = (ulong)B * P;
  __global float *dst = col + coff + ((ulong)q * ND_KW * B + b) * P + ((ulong)od * OH + oh) * ND_OW;
  // Rows in the padding are zeros; the others copy, with the columns in
  // the padding decided at compile time: straight copies the compiler
  // turns into vector moves (a select per element kept them scalar).
  if (!inside) {
    _Pragma("unroll") for (int kw = 0; kw < ND_KW; kw++)
      _Pragma("unroll") for (int ow = 0; ow < ND_OW; ow++) dst[kw * BP + ow] = 0.0f;
    return;
  }
  _Pragma("unroll") for (int kw = 0; kw < ND_KW; kw++)
    _Pragma("unroll") for (int ow = 0; ow < ND_OW; ow++) {
      const int iw = ow * ND_SW - ND_PW + kw * ND_DW;
      dst[kw * BP + ow] = iw >= 0 && iw < ND_W ? ALOAD(x, src + iw) : 0.0f; // decided at compile time
    }
}

// dx as col2vol, the W values of input row (id, ih) of (b, ci), summed over
// (kd, kh, kw) in that order. Range (H, (b*Cin + ci)*D + id).
__kernel void col2vol_rows(__global const float *col, const ulong coff, __global act_t *dx, const ulong dxoff,
                           ND_GEOM) {
  const uint ih = get_global_id(0), z = get_global_id(1);
  const uint bc = z / D, id = z - bc * D;
  const uint b = bc / Cin, ci = bc - b * Cin;
  const ulong P = (ulong)OD * OH * ND_OW, BP = (ulong)B * P;
  __global const float *cb = col + coff + (ulong)ci * KD * KH * ND_KW * BP + (ulong)b * P;
  float acc[ND_W];
  _Pragma("unroll") for (int iw = 0; iw < ND_W; iw++) acc[iw] = 0.0f;
  for (uint kd = 0; kd < KD; kd++) {
    const int od = tap_out((int)id, pd, (int)kd, dd, sd, (int)OD);
    for (uint kh = 0; kh < KH; kh++) {
      const int oh = tap_out((int)ih, ph, (int)kh, dh, sh, (int)OH);
      if (od < 0 || oh < 0) continue;
      __global const float *row = cb + (ulong)((kd * KH + kh) * ND_KW) * BP + ((ulong)od * OH + oh) * ND_OW;
      _Pragma("unroll") for (int kw = 0; kw < ND_KW; kw++)
        _Pragma("unroll") for (int iw = 0; iw < ND_W; iw++) {
          const int tw = iw + ND_PW - kw * ND_DW; // = ow * SW; decided at compile time
          if (tw >= 0 && tw % ND_SW == 0 && tw / ND_SW < ND_OW) acc[iw] += row[(ulong)kw * BP + tw / ND_SW];
        }
    }
  }
  _Pragma("unroll") for (int iw = 0; iw < ND_W; iw++) ASTORE(dx, dxoff + ((ulong)z * H + ih) * ND_W + iw, acc[iw]);
}
#endif
