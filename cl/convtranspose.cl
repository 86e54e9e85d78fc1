// convtranspose.cl: the data movement around the transposed convolution's
// GEMMs (src/nn/convtranspose.c), in 1, 2 or 3 spatial dimensions seen as
// (D, H, W) with 1s for the axes a tensor lacks.
//
// The transposed convolution of x (B, Cin, D, H, W) with w (Cin, Cout, KD,
// KH, KW) is a convolution's backward-data: with P = D*H*W and R =
// Cout*KD*KH*KW,
//   forward   T (Cin, B*P) = x reordered; col (R, B*P) = w^T T;
//             y (B, Cout, OD, OH, OW) = col2im(col) + b
//   backward  col = im2col(dy); dw += T col^T; T = w col; dx = T reordered
// where col's row r = ((co*KD + kd)*KH + kh)*KW + kw, column b*P + p,
// holds what input cell p of sample b sends to output cell
// (id*SD - PD + kd, ih*SH - PH + kh, iw*SW - PW + kw).
//
// The host builds one program per layer with its geometry as -D constants
// (CT_C = Cout, the input's CT_D, CT_H, CT_W, the output's CT_OD, CT_OH,
// CT_OW, the kernel CT_KD.., stride CT_SD.., padding CT_PD..): divisions
// by them become multiplications and the loops over the kernel unroll.
// Every kernel writes one element per work-item and gathers, so no atomics
// and results repeat bitwise; ranges are exact (clt__nn_launch_3d).

#ifndef CT_C
#define CT_C 1
#define CT_D 1
#define CT_H 1
#define CT_W 1
#define CT_OD 1
#define CT_OH 1
#define CT_OW 1
#define CT_KD 1
#define CT_KH 1
#define CT_KW 1
#define CT_SD 1
#define CT_SH 1
#define CT_SW 1
#define CT_PD 0
#define CT_PH 0
#define CT_PW 0
#endif
#define CT_P (CT_D * CT_H * CT_W)

// y[b, co, od, oh, ow] = bias[co] + the sum of col[r, b*P + p] over the
// kernel cells (kd, kh, kw) whose input cell (id, ih, iw) sends to it.
// Range (OW, OH, B*Cout*OD).
__kernel void ct_col2im(__global const float *col, const ulong coff, __global act_t *y, const ulong yoff,
                        __global const float *bias, const ulong boff, const int has_bias, const uint B) {
  const uint ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
  const uint bc = z / CT_OD, od = z - bc * CT_OD;
  const uint b = bc / CT_C, co = bc - b * CT_C;
  const ulong BP = (ulong)B * CT_P;
  const ulong base = coff + (ulong)b * CT_P;
  float acc = has_bias ? bias[boff + co] : 0.0f;
#if CT_KD == CT_SD && CT_KH == CT_SH && CT_KW == CT_SW && CT_PD == 0 && CT_PH == 0 && CT_PW == 0
  // Kernel = stride, no padding (a U-Net's kernel=2 stride=2): the
  // windows tile the output, so each output cell has exactly one source
  // (none in the output padding): no loop, no branch.
  const uint id = od / CT_SD, ih = oh / CT_SH, iw = ow / CT_SW;
  const uint r = ((co * CT_KD + od - id * CT_SD) * CT_KH + oh - ih * CT_SH) * CT_KW + ow - iw * CT_SW;
  const int inside = id < CT_D && ih < CT_H && iw < CT_W;
  const float v = col[base + r * BP + (inside ? (id * CT_H + ih) * CT_W + iw : 0)];
  acc += inside ? v : 0.0f;
#else
  for (int kd = 0; kd < CT_KD; kd++) {
    const int td = (int)od + CT_PD - kd;
    if (td < 0 || td % CT_SD) continue;
    const int id = td / CT_SD;
    if (id >= CT_D) continue;
    for (int kh = 0; kh < CT_KH; kh++) {
      const int th = (int)oh + CT_PH - kh;
      if (th < 0 || th % CT_SH) continue;
      const int ih = th / CT_SH;
      if (ih >= CT_H) continue;
      for (int kw = 0; kw < CT_KW; kw++) {
        const int tw = (int)ow + CT_PW - kw;
        if (tw < 0 || tw % CT_SW) continue;
        const int iw = tw / CT_SW;
        if (iw >= CT_W) continue;
        const uint r = ((co * CT_KD + kd) * CT_KH + kh) * CT_KW + kw;
        acc += col[base + r * BP + (uint)((id * CT_H + ih) * CT_W + iw)];
      }
    }
  }
#endif
  ASTORE(y, yoff + ((ulong)z * CT_OH + oh) * CT_OW + ow, acc);
}

// col[r, b*P + p] = dy[b, co, id*SD - PD + kd, ...] (0 outside), the
// adjoint of ct_col2im. Range (W, H, R*B*D): item (iw, ih, (r*B + b)*D + id),
// whose column index is (id 2 * H + ih) * W + iw.
__kernel void ct_im2col(__global const act_t *dy, const ulong dyoff, __global float *col, const ulong coff,
                        const uint B) {
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  const uint rb = z / CT_D, id = z - rb * CT_D;
  const uint r = rb / B, b = rb - r * B;
  const uint kw = r % CT_KW, kh = (r / CT_KW) % CT_KH, kd = (r / (CT_KW * CT_KH)) % CT_KD;
  const uint co = r / (CT_KW * CT_KH * CT_KD);
  const int od = (int)(id * CT_SD) - CT_PD + (int)kd, oh = (int)(ih * CT_SH) - CT_PH + (int)kh,
            ow = (int)(iw * CT_SW) - CT_PW + (int)kw;
#if CT_KD == CT_SD && CT_KH == CT_SH && CT_KW == CT_SW && CT_PD == 0 && CT_PH == 0 && CT_PW == 0
  // kernel = stride, no padding: every window lies inside the output
  const float v = ALOAD(dy, dyoff + ((((ulong)b * CT_C + co) * CT_OD + od) * CT_OH + oh) * CT_OW + ow);
#else
  float v = 0.0f;
  if (od >= 0 && od < CT_OD && oh >= 0 && oh < CT_OH && ow >= 0 && ow < CT_OW)
    v = ALOAD(dy, dyoff + ((((ulong)b * CT_C + co) * CT_OD + od) * CT_OH + oh) * CT_OW + ow);
#endif
  col[coff + ((ulong)z * CT_H + ih) * CT_W + iw] = v;
}

// t[c, b*P + p] = x[b, c, p]. Range (P, B, C).
__kernel void ct_bcp_to_cbp(__global const act_t *x, const ulong xoff, __global float *t, const ulong toff,
                            const uint B, const uint C, const uint P) {
  const uint p = get_global_id(0), b = get_global_id(1), c = get_global_id(2);
  t[toff + ((ulong)c * B + b) * P + p] = ALOAD(x, xoff + ((ulong)b * C + c) * P + p);
}

// x[b, c, p] = t[c, b*P + p]. Range (P, C, B).
__kernel void ct_cbp_to_bcp(__global const float *t, const ulong toff, __global act_t *x, const ulong xoff,
                            const uint B, const uint C, const uint P) {
  const uint p = get_global_id(0), c = get_global_id(1), b = get_global_id(2);
  ASTORE(x, xoff + ((ulong)b * C + c) * P + p, t[toff + ((ulong)c * B + b) * P + p]);
}
