// rmsnorm.cl: RMS normalization over the last dimension D of M rows (Llama's
// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, no mean subtracted, no bias),
// computed in float. x, y, dy and dx are stored as act_t (cl/prelude.cl);
// w, its gradient and the saved rstd are float. As cl/layernorm.cl: the
// forward and the input gradient one work-group per row, reducing in local
// memory in a fixed order (the same bits every run); the weight's gradient
// one work-item per RN_VW columns, summing the rows in order.
//
// RN_VW (-D, 8 when it divides D, else 1): each item takes its row's
// elements RN_VW at a time, as one vector.
#ifndef RN_VW
#define RN_VW 1
#endif
#if RN_VW == 8
typedef float8 rv_t;
#define RLOAD(p, i) aload8(p, i)
#define RSTORE(p, i, v) astore8(p, i, v)
#define FLOAD(p, i) vload8(0, (p) + (i))
#define RSUM(v) hsum8(v)
#else
typedef float rv_t;
#define RLOAD(p, i) ALOAD(p, i)
#define RSTORE(p, i, v) ASTORE(p, i, v)
#define FLOAD(p, i) ((p)[i])
#define RSUM(v) (v)
#endif

// The sum of v over the work-group, in a fixed tree order.
float rms_group_sum(__local float *scratch, float v) {
  const uint lid = get_local_id(0), wgs = get_local_size(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = wgs / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE); // everyone has read it before scratch is reused
  return r;
}

// y = (x * rstd) * w with rstd = 1 / sqrt(mean(x^2) + eps), saved; the
// order of transformers' LlamaRMSNorm (x * rsqrt(variance + eps), then
// times the weight).
__kernel void rmsnorm_forward(__global const act_t *x, const ulong xoff, __global const float *w, const ulong woff,
                              __global act_t *y, const ulong yoff, __global float *rstd, const ulong roff,
                              const uint D, const float eps, __local float *scratch) {
  const uint row = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint first = lid * RN_VW, step = wgs * RN_VW;
  const ulong base = (ulong)row * D;
  rv_t s2 = 0.0f;
  for (uint d = first; d < D; d += step) {
    const rv_t v = RLOAD(x, xoff + base + d);
    s2 += v * v;
  }
  const float r = 1.0f / sqrt(rms_group_sum(scratch, RSUM(s2)) / (float)D + eps);
  for (uint d = first; d < D; d += step) RSTORE(y, yoff + base + d, (RLOAD(x, xoff + base + d) * r) * FLOAD(w, woff + d));
  if (lid == 0) rstd[roff + row] = r;
}

// dx = rstd * (g - xhat * mean(g * xhat)) with g = w * dy and xhat = x * rstd.
__kernel void rmsnorm_backward_input(__global const act_t *x, const ulong xoff, __global const float *w,
                                     const ulong woff, __global const float *rstd, const ulong roff,
                                     __global const act_t *dy, const ulong dyoff, __global act_t *dx,
                                     const ulong dxoff, const uint D, __local float *scratch) {
  const uint row = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint first = lid * RN_VW, step = wgs * RN_VW;
  const ulong base = (ulong)row * D;
  const float r = rstd[roff + row];
  rv_t s = 0.0f;
  for (uint d = first; d < D; d += step)
    s += FLOAD(w, woff + d) * RLOAD(dy, dyoff + base + d) * RLOAD(x, xoff + base + d) * r;
  const float mean_gx = rms_group_sum(scratch, RSUM(s)) / (float)D;
  for (uint d = first; d < D; d += step) {
    const rv_t g = FLOAD(w, woff + d) * RLOAD(dy, dyoff + base + d);
    const rv_t xhat = RLOAD(x, xoff + base + d) * r;
    RSTORE(dx, dxoff + base + d, r * (g - xhat * mean_gx));
  }
}

// dw[d] += sum over rows of dy * xhat, each column summed over the rows in
// order by one work-item, RN_VW neighbouring columns an item (over exactly
// D / RN_VW items).
__kernel void rmsnorm_backward_weight(__global const act_t *x, const ulong xoff, __global const float *rstd,
                                      const ulong roff, __global const act_t *dy, const ulong dyoff,
                                      __global float *dw, const ulong dwoff, const uint M, const uint D) {
  const uint d = get_global_id(0) * RN_VW;
  rv_t sw = 0.0f;
  for (uint m = 0; m < M; m++) {
    const ulong i = (ulong)m * D + d;
    sw += RLOAD(dy, dyoff + i) * (RLOAD(x, xoff + i) * rstd[roff + m]);
  }
#if RN_VW == 8
  vstore8(vload8(0, dw + dwoff + d) + sw, 0, dw + dwoff + d);
#else
  dw[dwoff + d] += sw;
#endif
}
