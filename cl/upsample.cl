// upsample.cl: nearest and (bi/tri)linear up-sampling by whole factors,
// as torch.nn.Upsample(scale_factor=S, align_corners=False), forward and
// backward, over (N*C, D, H, W) planes (a 1-D or 2-D input has D = H = 1 or
// D = 1 with factor 1 there). x, y, dy and dx are stored as act_t
// (cl/prelude.cl) and computed in float.
//
// The host builds one program per layer with -DUP_SD, -DUP_SH and -DUP_SW
// (the factor of each axis; 1 for the axes the input lacks) and -DUP_LINEAR
// for linear mode: the divisions by the factors become shifts or
// multiplications and the loops over them unroll.
//
// Every kernel writes one element per work-item and GATHERS: the backward
// computes each input cell's gradient from the outputs that read it, so no
// atomics are needed and results repeat bitwise. Ranges are exact 3-D
// (clt__nn_launch_3d): (width, height, planes * depth) of what is written.

#ifndef UP_SD
#define UP_SD 1
#define UP_SH 1
#define UP_SW 1
#endif

// Linear mode's source of output o along an axis of `in` cells and factor
// S, as PyTorch computes it in float: src = max(0, (o + 0.5) / S - 0.5),
// i0 = floor(src), i1 = i0 + 1 except at the last cell, l1 = src - i0.
void lin_source(const int o, const int S, const int in, int *i0, int *i1, float *l1) {
  float src = (1.0f / (float)S) * ((float)o + 0.5f) - 0.5f;
  src = src < 0.0f ? 0.0f : src;
  const int i = (int)src;
  *i0 = i;
  *i1 = i + (i < in - 1 ? 1 : 0);
  *l1 = clamp(src - (float)i, 0.0f, 1.0f);
}

// The weight with which output o reads input i along one axis (linear).
float lin_weight(const int o, const int i, const int S, const int in) {
  int i0, i1;
  float l1;
  lin_source(o, S, in, &i0, &i1, &l1);
  return (i0 == i ? 1.0f - l1 : 0.0f) + (i1 == i ? l1 : 0.0f);
}

// y[nc, od, oh, ow] from x (NC, D, H, W). Range (OW, OH, NC*OD).
__kernel void upsample_forward(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff,
                               const uint D, const uint H, const uint W) {
  const uint ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
  const uint OD = D * UP_SD, OH = H * UP_SH, OW = W * UP_SW;
  const uint nc = z / OD, od = z - nc * OD;
  const ulong plane = xoff + (ulong)nc * D * H * W;
#ifndef UP_LINEAR
  const float v = ALOAD(x, plane + ((ulong)(od / UP_SD) * H + oh / UP_SH) * W + ow / UP_SW);
#else
  int d0 = (int)od, d1 = (int)od, h0, h1, w0, w1;
  float ld = 0.0f, lh, lw;
#if UP_SD > 1
  lin_source((int)od, UP_SD, (int)D, &d0, &d1, &ld);
#endif
  lin_source((int)oh, UP_SH, (int)H, &h0, &h1, &lh);
  lin_source((int)ow, UP_SW, (int)W, &w0, &w1, &lw);
  const ulong r00 = plane + ((ulong)d0 * H + h0) * W, r01 = plane + ((ulong)d0 * H + h1) * W;
  float v = (1.0f - lh) * ((1.0f - lw) * ALOAD(x, r00 + w0) + lw * ALOAD(x, r00 + w1)) +
            lh * ((1.0f - lw) * ALOAD(x, r01 + w0) + lw * ALOAD(x, r01 + w1));
#if UP_SD > 1
  const ulong r10 = plane + ((ulong)d1 * H + h0) * W, r11 = plane + ((ulong)d1 * H + h1) * W;
  const float v1 = (1.0f - lh) * ((1.0f - lw) * ALOAD(x, r10 + w0) + lw * ALOAD(x, r10 + w1)) +
                   lh * ((1.0f - lw) * ALOAD(x, r11 + w0) + lw * ALOAD(x, r11 + w1));
  v = (1.0f - ld) * v + ld * v1;
#endif
#endif
  ASTORE(y, yoff + ((ulong)z * OH + oh) * OW + ow, v);
}

#if defined(UP_LINEAR) && UP_SW == 2 && UP_SH <= 2 && UP_SD <= 2
// Linear up-sampling by 2: an item per input cell writes the 2 (1-D), 4
// (2-D) or 8 (3-D) outputs of its block, whose sources along an axis are
// the cell and a neighbour: output 2i reads i - 1 and i with weights 1/4,
// 3/4 (at i = 0: i alone, weight 1, as PyTorch clamps), output 2i + 1
// reads i and i + 1 (the last cell: i alone) with 3/4, 1/4 -- what
// lin_source gives, exactly, without computing it for each output. PoCL
// (the host's choice) ran upsample_forward's item per output at 2.0 ms
// over (8, 16, 8^3) x 2. Range (W, H, NC*D), as the backward's.
void lin2_source(const int i, const int a, const int n, int *i0, int *i1, float *l1) {
  if (a == 0) {
    *i0 = i > 0 ? i - 1 : 0, *i1 = i > 0 ? i : min(1, n - 1), *l1 = i > 0 ? 0.75f : 0.0f;
  } else {
    *i0 = i, *i1 = min(i + 1, n - 1), *l1 = 0.25f;
  }
}

__kernel void upsample_forward_by2(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff,
                                   const uint D, const uint H, const uint W) {
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  const uint OD = D * UP_SD, OH = H * UP_SH, OW = W * UP_SW;
  const uint nc = z / D, id = z - nc * D;
  const ulong plane = xoff + (ulong)nc * D * H * W, out = yoff + (ulong)nc * OD * OH * OW;
  _Pragma("unroll") for (int ad = 0; ad < UP_SD; ad++) {
    int d0 = (int)id, d1 = (int)id;
    float ld = 0.0f;
#if UP_SD > 1
    lin2_source((int)id, ad, (int)D, &d0, &d1, &ld);
#endif
    _Pragma("unroll") for (int ah = 0; ah < UP_SH; ah++) {
      int h0 = (int)ih, h1 = (int)ih;
      float lh = 0.0f;
#if UP_SH > 1
      lin2_source((int)ih, ah, (int)H, &h0, &h1, &lh);
#endif
      const ulong r00 = plane + ((ulong)d0 * H + h0) * W, r01 = plane + ((ulong)d0 * H + h1) * W;
#if UP_SD > 1
      const ulong r10 = plane + ((ulong)d1 * H + h0) * W, r11 = plane + ((ulong)d1 * H + h1) * W;
#endif
      const ulong orow = out + ((ulong)((int)id * UP_SD + ad) * OH + (ulong)((int)ih * UP_SH + ah)) * OW;
      _Pragma("unroll") for (int aw = 0; aw < 2; aw++) {
        int w0, w1;
        float lw;
        lin2_source((int)iw, aw, (int)W, &w0, &w1, &lw);
        float v = (1.0f - lh) * ((1.0f - lw) * ALOAD(x, r00 + w0) + lw * ALOAD(x, r00 + w1)) +
                  lh * ((1.0f - lw) * ALOAD(x, r01 + w0) + lw * ALOAD(x, r01 + w1));
#if UP_SD > 1
        const float v1 = (1.0f - lh) * ((1.0f - lw) * ALOAD(x, r10 + w0) + lw * ALOAD(x, r10 + w1)) +
                         lh * ((1.0f - lw) * ALOAD(x, r11 + w0) + lw * ALOAD(x, r11 + w1));
        v = (1.0f - ld) * v + ld * v1;
#endif
        ASTORE(y, orow + 2 * iw + aw, v);
      }
    }
  }
}
#endif

// dx[nc, id, ih, iw] = the sum over the outputs that read (id, ih, iw) of
// their weight on it times dy there. Range (W, H, NC*D).
__kernel void upsample_backward(__global const act_t *dy, const ulong dyoff, __global act_t *dx, const ulong dxoff,
                                const uint D, const uint H, const uint W) {
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  const uint OD = D * UP_SD, OH = H * UP_SH, OW = W * UP_SW;
  const uint nc = z / D, id = z - nc * D;
  const ulong plane = dyoff + (ulong)nc * OD * OH * OW;
  float acc = 0.0f;
#ifndef UP_LINEAR
  // nearest: the S^3 block of outputs at (id S, ih S, iw S)
  for (uint a = 0; a < UP_SD; a++)
    for (uint b = 0; b < UP_SH; b++) {
      const ulong row = plane + ((ulong)(id * UP_SD + a) * OH + ih * UP_SH + b) * OW + iw * UP_SW;
      for (uint c = 0; c < UP_SW; c++) acc += ALOAD(dy, row + c);
    }
#else
  // linear: output o reads cell floor(src) and the one after, src = (o +
  // 0.5) / S - 0.5, so cell i is read by the 2S outputs from S (i - 1) +
  // S / 2 (as the one after) to S (i + 1) + S / 2 (as the first), fewer
  // at the edges, where src is clamped to the first and last cells. Each
  // axis's weights first.
  // An axis of factor 1 (one the input lacks) is read by its own output only.
#define READERS(i, S, O, lo, hi)                                                                                       \
  const int lo = S == 1 ? (int)(i) : max((int)(i) * S - S + S / 2, 0);                                                \
  const int hi = S == 1 ? (int)(i) + 1 : min(((int)(i) + 1) * S + S / 2, (int)(O))
  float wd[2 * UP_SD], wh[2 * UP_SH], ww[2 * UP_SW];
  READERS(id, UP_SD, OD, d_lo, d_hi);
  READERS(ih, UP_SH, OH, h_lo, h_hi);
  READERS(iw, UP_SW, OW, w_lo, w_hi);
  // Away from the edges the weights depend on o - S i alone: those of
  // cell 1 of 3, which the compiler folds into constants.
#define WEIGHTS(wt, i, S, n, lo, hi)                                                                                   \
  if ((int)(i) > 0 && (int)(i) < (int)(n) - 1 && S > 1)                                                              \
    for (int r = 0; r < 2 * S; r++) wt[r] = lin_weight(S / 2 + r, 1, S, 3);                                            \
  else                                                                                                                 \
    for (int o = lo; o < hi; o++) wt[o - lo] = lin_weight(o, (int)(i), S, (int)(n))
  WEIGHTS(wd, id, UP_SD, D, d_lo, d_hi);
  WEIGHTS(wh, ih, UP_SH, H, h_lo, h_hi);
  WEIGHTS(ww, iw, UP_SW, W, w_lo, w_hi);
  for (int od = d_lo; od < d_hi; od++) {
    const float a = wd[od - d_lo];
    for (int oh = h_lo; oh < h_hi; oh++) {
      const float b = a * wh[oh - h_lo];
      const ulong row = plane + ((ulong)od * OH + oh) * OW;
      float s = 0.0f;
      for (int ow = w_lo; ow < w_hi; ow++) s += ww[ow - w_lo] * ALOAD(dy, row + ow);
      acc += b * s;
    }
  }
#endif
  ASTORE(dx, dxoff + ((ulong)z * H + ih) * W + iw, acc);
}
