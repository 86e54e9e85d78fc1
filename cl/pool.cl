// pool.cl: 2-D max and average pooling and global average pooling, NCHW,
// float32. One work-item per element written; backward passes gather over
// the windows that cover an input instead of scattering, so no atomics are
// needed and results repeat bitwise.

// Window geometry shared by the kernels.
#define POOL_ARGS                                                                                  \
  const uint NC, const uint H, const uint W, const uint OH, const uint OW, const int KH, const int KW, \
      const int sh, const int sw, const int ph, const int pw

// The range [*lo, *hi) of outputs along one axis whose window covers input i.
void covering(int i, int pad, int k, int stride, int outs, int *lo, int *hi) {
  int t = i + pad - k + 1; // first output o with o*stride + k - 1 >= i + pad
  *lo = t <= 0 ? 0 : (t + stride - 1) / stride;
  int last = (i + pad) / stride; // last output o with o*stride <= i + pad
  *hi = min(last + 1, outs);
}

// y = the maximum of each window; argmax = its index ih*W + iw in the plane.
// The first maximum wins ties; a NaN wins over numbers so NaNs propagate.
__kernel void maxpool_forward(__global const float *x, const ulong xoff, __global float *y, const ulong yoff,
                              __global int *argmax, const ulong aoff, POOL_ARGS) {
  const uint i = get_global_id(0);
  if (i >= NC * OH * OW) return;
  const uint ow = i % OW, oh = (i / OW) % OH, plane = i / (OW * OH);
  const int h0 = (int)oh * sh - ph, w0 = (int)ow * sw - pw;
  float best = 0.0f;
  int besti = -1;
  for (int kh = 0; kh < KH; kh++) {
    int ih = h0 + kh;
    if (ih < 0 || ih >= (int)H) continue;
    for (int kw = 0; kw < KW; kw++) {
      int iw = w0 + kw;
      if (iw < 0 || iw >= (int)W) continue;
      float v = x[xoff + (ulong)plane * H * W + ih * W + iw];
      if (besti < 0 || v > best || (isnan(v) && !isnan(best))) {
        best = v;
        besti = ih * (int)W + iw;
      }
    }
  }
  y[yoff + i] = best;
  argmax[aoff + i] = besti;
}

// dx[plane, ih, iw] = the sum of dy over the windows whose argmax is (ih, iw).
__kernel void maxpool_backward(__global const int *argmax, const ulong aoff, __global const float *dy,
                               const ulong dyoff, __global float *dx, const ulong dxoff, POOL_ARGS) {
  const uint i = get_global_id(0);
  if (i >= NC * H * W) return;
  const int iw = i % W, ih = (i / W) % H;
  const uint plane = i / (W * H);
  int oh0, oh1, ow0, ow1;
  covering(ih, ph, KH, sh, OH, &oh0, &oh1);
  covering(iw, pw, KW, sw, OW, &ow0, &ow1);
  const int me = ih * (int)W + iw;
  float acc = 0.0f;
  for (int oh = oh0; oh < oh1; oh++)
    for (int ow = ow0; ow < ow1; ow++) {
      ulong o = (ulong)plane * OH * OW + oh * OW + ow;
      if (argmax[aoff + o] == me) acc += dy[dyoff + o];
    }
  dx[dxoff + i] = acc;
}

// y = the mean of each window, padding counted as zeros (divides by KH*KW).
__kernel void avgpool_forward(__global const float *x, const ulong xoff, __global float *y, const ulong yoff,
                              POOL_ARGS) {
  const uint i = get_global_id(0);
  if (i >= NC * OH * OW) return;
  const uint ow = i % OW, oh = (i / OW) % OH, plane = i / (OW * OH);
  const int h0 = (int)oh * sh - ph, w0 = (int)ow * sw - pw;
  float acc = 0.0f;
  for (int kh = 0; kh < KH; kh++) {
    int ih = h0 + kh;
    if (ih < 0 || ih >= (int)H) continue;
    for (int kw = 0; kw < KW; kw++) {
      int iw = w0 + kw;
      if (iw >= 0 && iw < (int)W) acc += x[xoff + (ulong)plane * H * W + ih * W + iw];
    }
  }
  y[yoff + i] = acc / (float)(KH * KW);
}

// dx[plane, ih, iw] = the sum over covering windows of dy / (KH*KW).
__kernel void avgpool_backward(__global const float *dy, const ulong dyoff, __global float *dx, const ulong dxoff,
                               POOL_ARGS) {
  const uint i = get_global_id(0);
  if (i >= NC * H * W) return;
  const int iw = i % W, ih = (i / W) % H;
  const uint plane = i / (W * H);
  int oh0, oh1, ow0, ow1;
  covering(ih, ph, KH, sh, OH, &oh0, &oh1);
  covering(iw, pw, KW, sw, OW, &ow0, &ow1);
  float acc = 0.0f;
  for (int oh = oh0; oh < oh1; oh++)
    for (int ow = ow0; ow < ow1; ow++) acc += dy[dyoff + (ulong)plane * OH * OW + oh * OW + ow];
  dx[dxoff + i] = acc / (float)(KH * KW);
}

// y[plane] = the mean of the plane's HW elements, summed in order.
__kernel void global_avgpool_forward(__global const float *x, const ulong xoff, __global float *y, const ulong yoff,
                                     const uint NC, const uint HW) {
  const uint i = get_global_id(0);
  if (i >= NC) return;
  float acc = 0.0f;
  for (uint j = 0; j < HW; j++) acc += x[xoff + (ulong)i * HW + j];
  y[yoff + i] = acc / (float)HW;
}

// dx[plane, j] = dy[plane] / HW
__kernel void global_avgpool_backward(__global const float *dy, const ulong dyoff, __global float *dx,
                                      const ulong dxoff, const uint NC, const uint HW) {
  const uint i = get_global_id(0);
  if (i >= NC * HW) return;
  dx[dxoff + i] = dy[dyoff + i / HW] / (float)HW;
}
