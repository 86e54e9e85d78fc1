// layernorm.cl: layer normalization over the last dimension D of M rows,
// computed in float. x, y, dy and dx are stored as act_t (cl/prelude.cl);
// gamma, beta, their gradients and the saved mean and rstd are float.
// Forward and the input gradient use one work-group per row, reducing in
// local memory in a fixed order (the same bits every run); the gamma/beta
// gradients use one work-item per column, summing the rows in order.
// Work-group sizes are powers of two (the host guarantees it).
//
// LN_VW (-D, 8 when it divides D, else 1): each item takes its row's
// elements LN_VW at a time, as one vector (on PoCL one item walks the whole
// row, and a scalar walk's sums are a chain of dependent adds).
#ifndef LN_VW
#define LN_VW 1
#endif
#if LN_VW == 8
typedef float8 lv_t;
#define LLOAD(p, i) aload8(p, i)
#define LSTORE(p, i, v) astore8(p, i, v)
#define FLOAD(p, i) vload8(0, (p) + (i))
#define LSUM(v) hsum8(v)
#else
typedef float lv_t;
#define LLOAD(p, i) ALOAD(p, i)
#define LSTORE(p, i, v) ASTORE(p, i, v)
#define FLOAD(p, i) ((p)[i])
#define LSUM(v) (v)
#endif

// The sum of v over the work-group, in a fixed tree order.
float group_sum(__local float *scratch, float v) {
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

// y = (x - mean) * rstd * gamma + beta; mean and rstd = 1/sqrt(var + eps)
// saved. The variance is the mean of squared deviations (two passes, which
// keeps it accurate when |mean| >> std).
__kernel void layernorm_forward(__global const act_t *x, const ulong xoff, __global const float *gamma,
                                const ulong goff, __global const float *beta, const ulong boff, __global act_t *y,
                                const ulong yoff, __global float *mean, const ulong moff, __global float *rstd,
                                const ulong roff, const uint D, const float eps, __local float *scratch) {
  const uint row = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint first = lid * LN_VW, step = wgs * LN_VW;
  const ulong base = (ulong)row * D;
  lv_t s = 0.0f;
  for (uint d = first; d < D; d += step) s += LLOAD(x, xoff + base + d);
  const float mu = group_sum(scratch, LSUM(s)) / (float)D;
  lv_t s2 = 0.0f;
  for (uint d = first; d < D; d += step) {
    lv_t c = LLOAD(x, xoff + base + d) - mu;
    s2 += c * c;
  }
  const float r = 1.0f / sqrt(group_sum(scratch, LSUM(s2)) / (float)D + eps);
  for (uint d = first; d < D; d += step)
    LSTORE(y, yoff + base + d, (LLOAD(x, xoff + base + d) - mu) * r * FLOAD(gamma, goff + d) + FLOAD(beta, boff + d));
  if (lid == 0) {
    mean[moff + row] = mu;
    rstd[roff + row] = r;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gamma * dy and
// xhat = (x - mean) * rstd, the means over the row.
__kernel void layernorm_backward_input(__global const act_t *x, const ulong xoff, __global const float *gamma,
                                       const ulong goff, __global const float *mean, const ulong moff,
                                       __global const float *rstd, const ulong roff, __global const act_t *dy,
                                       const ulong dyoff, __global act_t *dx, const ulong dxoff, const uint D,
                                       __local float *scratch) {
  const uint row = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint first = lid * LN_VW, step = wgs * LN_VW;
  const ulong base = (ulong)row * D;
  const float mu = mean[moff + row], r = rstd[roff + row];
  lv_t s1 = 0.0f, s2 = 0.0f;
  for (uint d = first; d < D; d += step) {
    lv_t g = FLOAD(gamma, goff + d) * LLOAD(dy, dyoff + base + d);
    s1 += g;
    s2 += g * (LLOAD(x, xoff + base + d) - mu) * r;
  }
  const float mean_g = group_sum(scratch, LSUM(s1)) / (float)D;
  const float mean_gx = group_sum(scratch, LSUM(s2)) / (float)D;
  for (uint d = first; d < D; d += step) {
    lv_t g = FLOAD(gamma, goff + d) * LLOAD(dy, dyoff + base + d);
    lv_t xhat = (LLOAD(x, xoff + base + d) - mu) * r;
    LSTORE(dx, dxoff + base + d, r * (g - mean_g - xhat * mean_gx));
  }
}

// dgamma[d] += sum over rows of dy * xhat; dbeta[d] += sum over rows of dy,
// each column summed over the rows in order by one work-item, LN_VW
// neighbouring columns an item (over exactly D / LN_VW items), so that each
// row's read is one piece of LN_VW floats rather than one float per item.
__kernel void layernorm_backward_params(__global const act_t *x, const ulong xoff, __global const float *mean,
                                        const ulong moff, __global const float *rstd, const ulong roff,
                                        __global const act_t *dy, const ulong dyoff, __global float *dgamma,
                                        const ulong dgoff, __global float *dbeta, const ulong dboff, const uint M,
                                        const uint D) {
  const uint d = get_global_id(0) * LN_VW;
  lv_t sg = 0.0f, sb = 0.0f;
  for (uint m = 0; m < M; m++) {
    ulong i = (ulong)m * D + d;
    lv_t g = LLOAD(dy, dyoff + i);
    sg += g * (LLOAD(x, xoff + i) - mean[moff + m]) * rstd[roff + m];
    sb += g;
  }
#if LN_VW == 8
  vstore8(vload8(0, dgamma + dgoff + d) + sg, 0, dgamma + dgoff + d);
  vstore8(vload8(0, dbeta + dboff + d) + sb, 0, dbeta + dboff + d);
#else
  dgamma[dgoff + d] += sg;
  dbeta[dboff + d] += sb;
#endif
}
