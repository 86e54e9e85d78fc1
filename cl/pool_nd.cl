// pool_nd.cl: max and average pooling over 1-D and 3-D windows (and 2-D
// ones seen the same way), no padding, (N, C, spatial...) seen as planes of
// (D, H, W) with D = H = 1 for 1-D (src/nn/pool_nd.c). Computed in float,
// stored as act_t (cl/prelude.cl); the argmax indices are int. One
// work-item per element written; the backward gathers over the windows
// that cover an input, so there are no atomics and the same bits every run.
// Exact 3-D ranges, id 0 the contiguous index (see cl/conv.cl).

#define PND_ARGS                                                                                               \
  const uint D, const uint H, const uint W, const uint OD, const uint OH, const uint OW, const int kd_arg,      \
      const int kh_arg, const int kw_arg, const int sd_arg, const int sh_arg, const int sw_arg

// The host builds this file with the window and the strides as constants
// (-DPND_KD=..., -DPND_KH, -DPND_KW, -DPND_SD, -DPND_SH, -DPND_SW), so the
// window loops unroll (PoCL runs the loops of a work-item's body as loops
// inside its work-item loop, see cl/pool.cl) and the divisions by the
// strides become shifts (maxpool3d 2's backward over (8, 8, 16^3): 0.52 ->
// 0.2 ms).
#ifdef PND_KD
#define WINDOW3                                                                                               \
  const int KD = PND_KD, KH = PND_KH, KW = PND_KW;                                                           \
  const int sd = PND_SD, sh = PND_SH, sw = PND_SW
#else
#define WINDOW3                                                                                               \
  const int KD = kd_arg, KH = kh_arg, KW = kw_arg;                                                           \
  const int sd = sd_arg, sh = sh_arg, sw = sw_arg
#endif

// The outputs [*lo, *hi) along one axis whose window (k at stride s, no
// padding) covers input i.
void pnd_covering(int i, int k, int s, int outs, int *lo, int *hi) {
  const int t = i - k + 1; // first o with o*s + k - 1 >= i
  *lo = t <= 0 ? 0 : (t + s - 1) / s;
  *hi = min(i / s + 1, outs);
}

// y = each window's maximum, argmax its index (id*H + ih)*W + iw in the
// plane; the first wins ties, a NaN wins over numbers. Range (OW, OH,
// NC*OD): item (ow, oh, plane*OD + od).
__kernel void maxpoolnd_forward(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff,
                                __global int *argmax, const ulong aoff, PND_ARGS) {
  WINDOW3;
  const uint ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
  const uint plane = z / OD, od = z - plane * OD;
  const ulong in = xoff + (ulong)plane * D * H * W;
  float best = 0.0f;
  int besti = -1;
  _Pragma("unroll") for (int kd = 0; kd < KD; kd++)
    _Pragma("unroll") for (int kh = 0; kh < KH; kh++)
      _Pragma("unroll") for (int kw = 0; kw < KW; kw++) {
        const int at = (((int)od * sd + kd) * (int)H + (int)oh * sh + kh) * (int)W + (int)ow * sw + kw;
        const float v = ALOAD(x, in + at);
        const int take = (besti < 0) | (v > best) | ((v != v) & (best == best));
        best = take ? v : best;
        besti = take ? at : besti;
      }
  const ulong o = ((ulong)z * OH + oh) * OW + ow;
  ASTORE(y, yoff + o, best);
  argmax[aoff + o] = besti;
}

// dx = the sum of dy over the windows whose argmax is this input, in
// window order. Range (W, H, NC*D): item (iw, ih, plane*D + id).
__kernel void maxpoolnd_backward(__global const int *argmax, const ulong aoff, __global const act_t *dy,
                                 const ulong dyoff, __global act_t *dx, const ulong dxoff, PND_ARGS) {
  WINDOW3;
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  const uint plane = z / D, id = z - plane * D;
  int d0, d1, h0, h1, w0, w1;
  pnd_covering((int)id, KD, sd, (int)OD, &d0, &d1);
  pnd_covering((int)ih, KH, sh, (int)OH, &h0, &h1);
  pnd_covering((int)iw, KW, sw, (int)OW, &w0, &w1);
  const int me = ((int)id * (int)H + (int)ih) * (int)W + (int)iw;
  const ulong out = (ulong)plane * OD * OH * OW;
  float acc = 0.0f;
  for (int od = d0; od < d1; od++)
    for (int oh = h0; oh < h1; oh++)
      for (int ow = w0; ow < w1; ow++) {
        const ulong o = out + ((ulong)od * OH + oh) * OW + ow;
        if (argmax[aoff + o] == me) acc += ALOAD(dy, dyoff + o);
      }
  ASTORE(dx, dxoff + ((ulong)z * H + ih) * W + iw, acc);
}

// y = each window's mean, summed in window order. Range as maxpoolnd_forward.
__kernel void avgpoolnd_forward(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff,
                                PND_ARGS) {
  WINDOW3;
  const uint ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
  const uint plane = z / OD, od = z - plane * OD;
  const ulong in = xoff + (ulong)plane * D * H * W;
  float acc = 0.0f;
  _Pragma("unroll") for (int kd = 0; kd < KD; kd++)
    _Pragma("unroll") for (int kh = 0; kh < KH; kh++)
      _Pragma("unroll") for (int kw = 0; kw < KW; kw++)
        acc += ALOAD(x, in + (((int)od * sd + kd) * (int)H + (int)oh * sh + kh) * (int)W + (int)ow * sw + kw);
  ASTORE(y, yoff + ((ulong)z * OH + oh) * OW + ow, acc / (float)(KD * KH * KW));
}

// dx = the sum over the covering windows of dy, / the window's size.
// Range as maxpoolnd_backward.
__kernel void avgpoolnd_backward(__global const act_t *dy, const ulong dyoff, __global act_t *dx, const ulong dxoff,
                                 PND_ARGS) {
  WINDOW3;
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  const uint plane = z / D, id = z - plane * D;
  int d0, d1, h0, h1, w0, w1;
  pnd_covering((int)id, KD, sd, (int)OD, &d0, &d1);
  pnd_covering((int)ih, KH, sh, (int)OH, &h0, &h1);
  pnd_covering((int)iw, KW, sw, (int)OW, &w0, &w1);
  const ulong out = dyoff + (ulong)plane * OD * OH * OW;
  float acc = 0.0f;
  for (int od = d0; od < d1; od++)
    for (int oh = h0; oh < h1; oh++)
      for (int ow = w0; ow < w1; ow++) acc += ALOAD(dy, out + ((ulong)od * OH + oh) * OW + ow);
  ASTORE(dx, dxoff + ((ulong)z * H + ih) * W + iw, acc / (float)(KD * KH * KW));
}

// The backward of windows that do not overlap (stride >= window on every
// axis, as maxpool3d 2 and avgpool1d 2): an input lies in at most one
// window, o = i / stride along each axis, so an item reads one dy and
// needs no loop. The same values as the gathers above. Range as theirs.
__kernel void maxpoolnd_backward_disjoint(__global const int *argmax, const ulong aoff, __global const act_t *dy,
                                          const ulong dyoff, __global act_t *dx, const ulong dxoff, PND_ARGS) {
  WINDOW3;
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  const uint plane = z / D, id = z - plane * D;
  const uint od = id / sd, oh = ih / sh, ow = iw / sw;
  const int hit = od < OD && oh < OH && ow < OW && (int)(id - od * sd) < KD && (int)(ih - oh * sh) < KH &&
                  (int)(iw - ow * sw) < KW;
  const ulong o = (((ulong)plane * OD + (hit ? od : 0)) * OH + (hit ? oh : 0)) * OW + (hit ? ow : 0);
  const int me = ((int)id * (int)H + (int)ih) * (int)W + (int)iw;
  const float g = ALOAD(dy, dyoff + o);
  ASTORE(dx, dxoff + ((ulong)z * H + ih) * W + iw, hit && argmax[aoff + o] == me ? g : 0.0f);
}

// The backward of windows that tile the input exactly (stride = window,
// every axis a whole number of windows: maxpool3d 2 on even sizes): an
// item per window writes its inputs, dy at the argmax and 0 elsewhere, so
// nothing is gathered (8 inputs read each dy above). The same values as
// the gathers. Range as maxpoolnd_forward's.
__kernel void maxpoolnd_backward_tiles(__global const int *argmax, const ulong aoff, __global const act_t *dy,
                                       const ulong dyoff, __global act_t *dx, const ulong dxoff, PND_ARGS) {
  WINDOW3;
  const uint ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
  const uint plane = z / OD, od = z - plane * OD;
  const ulong o = ((ulong)z * OH + oh) * OW + ow, in = dxoff + (ulong)plane * D * H * W;
  const int best = argmax[aoff + o];
  const float g = ALOAD(dy, dyoff + o);
  _Pragma("unroll") for (int kd = 0; kd < KD; kd++)
    _Pragma("unroll") for (int kh = 0; kh < KH; kh++)
      _Pragma("unroll") for (int kw = 0; kw < KW; kw++) {
        const int at = (((int)od * sd + kd) * (int)H + (int)oh * sh + kh) * (int)W + (int)ow * sw + kw;
        ASTORE(dx, in + at, at == best ? g : 0.0f);
      }
}

__kernel void avgpoolnd_backward_disjoint(__global const act_t *dy, const ulong dyoff, __global act_t *dx,
                                          const ulong dxoff, PND_ARGS) {
  WINDOW3;
  const uint iw = get_global_id(0), ih = get_global_id(1), z = get_global_id(2);
  const uint plane = z / D, id = z - plane * D;
  const uint od = id / sd, oh = ih / sh, ow = iw / sw;
  const int hit = od < OD && oh < OH && ow < OW && (int)(id - od * sd) < KD && (int)(ih - oh * sh) < KH &&
                  (int)(iw - ow * sw) < KW;
  const ulong o = (((ulong)plane * OD + (hit ? od : 0)) * OH + (hit ? oh : 0)) * OW + (hit ? ow : 0);
  const float g = ALOAD(dy, dyoff + o);
  ASTORE(dx, dxoff + ((ulong)z * H + ih) * W + iw, hit ? g / (float)(KD * KH * KW) : 0.0f);
}
