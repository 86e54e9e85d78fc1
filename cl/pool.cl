// pool.cl: 2-D max and average pooling and global average pooling, NCHW,
// computed in float; x, y, dy and dx are stored as act_t (cl/prelude.cl),
// the max-pool argmax indices are int. One work-item per element written;
// backward passes gather over the windows that cover an input instead of
// scattering, so no atomics are needed and results repeat bitwise.

// Window geometry shared by the kernels.
#define POOL_ARGS                                                                                          \
  const uint NC, const uint H, const uint W, const uint OH, const uint OW, const int kh_arg, const int kw_arg, \
      const int sh, const int sw, const int ph, const int pw

// The host builds this file with -DPOOL_KH=<KH> -DPOOL_KW=<KW> (one program
// per window size, and -DPOOL_NOPAD without padding): with the window a
// compile-time constant the loops over it unroll (UNROLL) into
// straight-line code, which PoCL runs 3x faster than the loops: it splits
// a work-item loop at every loop of the kernel. Without them the arguments
// decide.
#ifdef POOL_KH
#define WINDOW_SIZE const int KH = POOL_KH, KW = POOL_KW
#define UNROLL _Pragma("unroll")
#else
#define WINDOW_SIZE const int KH = kh_arg, KW = kw_arg
#define UNROLL
#endif

// The range [*lo, *hi) of outputs along one axis whose window covers input i.
void covering(int i, int pad, int k, int stride, int outs, int *lo, int *hi) {
  int t = i + pad - k + 1; // first output o with o*stride + k - 1 >= i + pad
  *lo = t <= 0 ? 0 : (t + stride - 1) / stride;
  int last = (i + pad) / stride; // last output o with o*stride <= i + pad
  *hi = min(last + 1, outs);
}

// The window kernels run over exact 3-D ranges (clt__nn_launch_3d) of
// (column, row, plane) of the tensor they write, so no item divides its id
// or tests it against the bounds (see cl/conv.cl).

// y = the maximum of each window; argmax = its index ih*W + iw in the plane.
// The first maximum wins ties; a NaN wins over numbers so NaNs propagate.
// Range (OW, OH, NC). Written without branches on the data (selects, and
// v != v for isnan): data-dependent branches mispredict on every other
// window and cost 4x. With POOL_NOPAD (no padding, so every window lies
// inside the plane) the bounds tests go too.
__kernel void maxpool_forward(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff,
                              __global int *argmax, const ulong aoff, POOL_ARGS) {
  WINDOW_SIZE;
  const uint ow = get_global_id(0), oh = get_global_id(1), plane = get_global_id(2);
  const int h0 = (int)oh * sh - ph, w0 = (int)ow * sw - pw;
  const ulong in = xoff + (ulong)plane * H * W; // the plane's first element
  float best = 0.0f;
  int besti = -1;
  UNROLL for (int kh = 0; kh < KH; kh++)
    UNROLL for (int kw = 0; kw < KW; kw++) {
      const int ih = h0 + kh, iw = w0 + kw;
#ifdef POOL_NOPAD
      const int at = ih * (int)W + iw;
      const float v = ALOAD(x, in + at);
      const int take = (besti < 0) | (v > best) | ((v != v) & (best == best));
#else
      const int inside = (ih >= 0) & (ih < (int)H) & (iw >= 0) & (iw < (int)W);
      const int at = inside ? ih * (int)W + iw : 0;
      const float v = ALOAD(x, in + at);
      const int take = inside & ((besti < 0) | (v > best) | ((v != v) & (best == best)));
#endif
      best = take ? v : best;
      besti = take ? at : besti;
    }
  const ulong o = ((ulong)plane * OH + oh) * OW + ow;
  ASTORE(y, yoff + o, best);
  argmax[aoff + o] = besti;
}

// dx[plane, ih, iw] = the sum of dy over the windows whose argmax is (ih, iw).
// Range (W, H, NC).
__kernel void maxpool_backward(__global const int *argmax, const ulong aoff, __global const act_t *dy,
                               const ulong dyoff, __global act_t *dx, const ulong dxoff, POOL_ARGS) {
  WINDOW_SIZE;
  const uint iw = get_global_id(0), ih = get_global_id(1), plane = get_global_id(2);
  int oh0, oh1, ow0, ow1;
  covering(ih, ph, KH, sh, OH, &oh0, &oh1);
  covering(iw, pw, KW, sw, OW, &ow0, &ow1);
  const int me = ih * (int)W + iw;
  float acc = 0.0f;
  for (int oh = oh0; oh < oh1; oh++)
    for (int ow = ow0; ow < ow1; ow++) {
      ulong o = (ulong)plane * OH * OW + oh * OW + ow;
      if (argmax[aoff + o] == me) acc += ALOAD(dy, dyoff + o);
    }
  ASTORE(dx, dxoff + ((ulong)plane * H + ih) * W + iw, acc);
}

// maxpool_backward for windows that do not overlap (stride >= kernel, the
// usual 2x2 / 2): each input lies in at most one window, so the item of
// output (ow, oh) writes the whole band of dx it owns, rows
// [oh*sh - ph, (oh+1)*sh - ph) and columns likewise, dy at the argmax and
// zero elsewhere; the first and last bands reach to the edges of the plane
// so inputs no window covers get their zero too. One read of argmax and dy
// per window instead of a search per input. Range (OW, OH, NC).
__kernel void maxpool_backward_disjoint(__global const int *argmax, const ulong aoff, __global const act_t *dy,
                                        const ulong dyoff, __global act_t *dx, const ulong dxoff, POOL_ARGS) {
  WINDOW_SIZE;
  const uint ow = get_global_id(0), oh = get_global_id(1), plane = get_global_id(2);
  const ulong o = ((ulong)plane * OH + oh) * OW + ow;
  const int a = argmax[aoff + o];
  const float g = ALOAD(dy, dyoff + o);
  const int r0 = oh == 0 ? 0 : (int)oh * sh - ph, r1 = oh + 1 == OH ? (int)H : min((int)(oh + 1) * sh - ph, (int)H);
  const int c0 = ow == 0 ? 0 : (int)ow * sw - pw, c1 = ow + 1 == OW ? (int)W : min((int)(ow + 1) * sw - pw, (int)W);
  const ulong out = dxoff + (ulong)plane * H * W;
  for (int r = r0; r < r1; r++)
    for (int c = c0; c < c1; c++) ASTORE(dx, out + r * W + c, r * (int)W + c == a ? g : 0.0f);
}

// ---- max pooling a row at a time (PoCL) ------------------------------------
// PoCL runs a work-group as a loop over its items, and an item per output
// paid the loop and the index arithmetic for every window: the Fashion
// CNN's first 2x2 pooling (32 planes of 28x28, batch 64) took 1.9 ms
// backward. With the plane's width and the window's column geometry known
// at compile time (-DPOOL_ROWS -DPOOL_W -DPOOL_OW -DPOOL_SW -DPOOL_PW,
// beside -DPOOL_KH and -DPOOL_KW), an item does a whole row of outputs in
// straight-line code whose column tests the compiler decides: 0.15 ms
// (forward 2.0 ms before, 1.7 now).
// The same windows in the same order: the same bits as the kernels above.
#ifdef POOL_ROWS
// maxpool_forward for the OW outputs of row oh of a plane. Range (OH, NC).
__kernel void maxpool_forward_rows(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff,
                                   __global int *argmax, const ulong aoff, POOL_ARGS) {
  WINDOW_SIZE;
  const uint oh = get_global_id(0), plane = get_global_id(1);
  const int h0 = (int)oh * sh - ph;
  const ulong in = xoff + (ulong)plane * H * POOL_W, o0 = ((ulong)plane * OH + oh) * POOL_OW;
#if POOL_KH == 2 && POOL_KW == 2 && POOL_SW == 2 && POOL_PW == 0 && defined(POOL_NOPAD)
  // 2 x 2 windows at stride 2, four at a time: the even and odd lanes of
  // 8 values of each of the two rows are the four candidates in window
  // order, compared as the scalar loop below compares them (the first
  // wins ties, a NaN wins over numbers). The CNN's first pooling (32
  // planes of 28 x 28, batch 64): 2.2-2.6 ms one window at a time.
#define POOL_OW4 (POOL_OW / 4 * 4)
  const int4 lane = (int4)(0, 2, 4, 6);
  for (int ow = 0; ow < POOL_OW4; ow += 4) {
    const float8 a = aload8(x, in + (ulong)h0 * POOL_W + 2 * ow), b = aload8(x, in + (ulong)(h0 + 1) * POOL_W + 2 * ow);
    const int4 at0 = h0 * POOL_W + 2 * ow + lane;
    float4 best = a.even;
    int4 besti = at0;
    int4 take = isgreater(a.odd, best) | (isnan(a.odd) & ~isnan(best));
    best = select(best, a.odd, take), besti = select(besti, at0 + 1, take);
    take = isgreater(b.even, best) | (isnan(b.even) & ~isnan(best));
    best = select(best, b.even, take), besti = select(besti, at0 + POOL_W, take);
    take = isgreater(b.odd, best) | (isnan(b.odd) & ~isnan(best));
    best = select(best, b.odd, take), besti = select(besti, at0 + POOL_W + 1, take);
    ASTORE(y, yoff + o0 + ow, best.s0), ASTORE(y, yoff + o0 + ow + 1, best.s1);
    ASTORE(y, yoff + o0 + ow + 2, best.s2), ASTORE(y, yoff + o0 + ow + 3, best.s3);
    vstore4(besti, 0, argmax + aoff + o0 + ow);
  }
#else
#define POOL_OW4 0
#endif
  UNROLL for (int ow = POOL_OW4; ow < POOL_OW; ow++) {
    const int w0 = ow * POOL_SW - POOL_PW;
    float best = 0.0f;
    int besti = -1;
    UNROLL for (int kh = 0; kh < KH; kh++)
      UNROLL for (int kw = 0; kw < KW; kw++) {
        const int ih = h0 + kh, iw = w0 + kw;
        if (iw < 0 || iw >= POOL_W) continue; // decided at compile time
#ifdef POOL_NOPAD
        const int at = ih * POOL_W + iw;
        const float v = ALOAD(x, in + at);
        const int take = (besti < 0) | (v > best) | ((v != v) & (best == best));
#else
        const int inside = (ih >= 0) & (ih < (int)H);
        const int at = (inside ? ih : 0) * POOL_W + iw;
        const float v = ALOAD(x, in + at);
        const int take = inside & ((besti < 0) | (v > best) | ((v != v) & (best == best)));
#endif
        best = take ? v : best;
        besti = take ? at : besti;
      }
    ASTORE(y, yoff + o0 + ow, best);
    argmax[aoff + o0 + ow] = besti;
  }
}

// maxpool_backward_disjoint for row oh of the windows: the rows of dx that
// band holds, each column written by the window whose band holds it.
// Range (OH, NC).
__kernel void maxpool_backward_disjoint_rows(__global const int *argmax, const ulong aoff, __global const act_t *dy,
                                             const ulong dyoff, __global act_t *dx, const ulong dxoff, POOL_ARGS) {
  const uint oh = get_global_id(0), plane = get_global_id(1);
  const ulong o0 = ((ulong)plane * OH + oh) * POOL_OW, out = dxoff + (ulong)plane * H * POOL_W;
  const int r0 = oh == 0 ? 0 : (int)oh * sh - ph, r1 = oh + 1 == OH ? (int)H : min((int)(oh + 1) * sh - ph, (int)H);
  int a[POOL_OW];
  float g[POOL_OW];
  UNROLL for (int ow = 0; ow < POOL_OW; ow++) {
    a[ow] = argmax[aoff + o0 + ow];
    g[ow] = ALOAD(dy, dyoff + o0 + ow);
  }
  for (int r = r0; r < r1; r++)
    UNROLL for (int c = 0; c < POOL_W; c++) {
      const int ow = min((c + POOL_PW) / POOL_SW, POOL_OW - 1); // the band that holds column c
      ASTORE(dx, out + r * POOL_W + c, r * POOL_W + c == a[ow] ? g[ow] : 0.0f);
    }
}
#endif

// y = the mean of each window, padding counted as zeros (divides by KH*KW).
// Range (OW, OH, NC).
__kernel void avgpool_forward(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff,
                              POOL_ARGS) {
  WINDOW_SIZE;
  const uint ow = get_global_id(0), oh = get_global_id(1), plane = get_global_id(2);
  const int h0 = (int)oh * sh - ph, w0 = (int)ow * sw - pw;
  float acc = 0.0f;
  for (int kh = 0; kh < KH; kh++) {
    int ih = h0 + kh;
    if (ih < 0 || ih >= (int)H) continue;
    for (int kw = 0; kw < KW; kw++) {
      int iw = w0 + kw;
      if (iw >= 0 && iw < (int)W) acc += ALOAD(x, xoff + (ulong)plane * H * W + ih * W + iw);
    }
  }
  ASTORE(y, yoff + ((ulong)plane * OH + oh) * OW + ow, acc / (float)(KH * KW));
}

// dx[plane, ih, iw] = the sum over covering windows of dy / (KH*KW).
// Range (W, H, NC).
__kernel void avgpool_backward(__global const act_t *dy, const ulong dyoff, __global act_t *dx, const ulong dxoff,
                               POOL_ARGS) {
  WINDOW_SIZE;
  const uint iw = get_global_id(0), ih = get_global_id(1), plane = get_global_id(2);
  int oh0, oh1, ow0, ow1;
  covering(ih, ph, KH, sh, OH, &oh0, &oh1);
  covering(iw, pw, KW, sw, OW, &ow0, &ow1);
  float acc = 0.0f;
  for (int oh = oh0; oh < oh1; oh++)
    for (int ow = ow0; ow < ow1; ow++) acc += ALOAD(dy, dyoff + (ulong)plane * OH * OW + oh * OW + ow);
  ASTORE(dx, dxoff + ((ulong)plane * H + ih) * W + iw, acc / (float)(KH * KW));
}

// y[plane] = the mean of the plane's HW elements, summed in order.
__kernel void global_avgpool_forward(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff,
                                     const uint NC, const uint HW) {
  const uint i = get_global_id(0);
  if (i >= NC) return;
  float acc = 0.0f;
  for (uint j = 0; j < HW; j++) acc += ALOAD(x, xoff + (ulong)i * HW + j);
  ASTORE(y, yoff + i, acc / (float)HW);
}

// dx[plane, j] = dy[plane] / HW
__kernel void global_avgpool_backward(__global const act_t *dy, const ulong dyoff, __global act_t *dx,
                                      const ulong dxoff, const uint NC, const uint HW) {
  const uint i = get_global_id(0);
  if (i >= NC * HW) return;
  ASTORE(dx, dxoff + i, ALOAD(dy, dyoff + i / HW) / (float)HW);
}
