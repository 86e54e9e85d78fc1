// batchnorm.cl: batch normalisation over the channels of x seen as (N, C, S)
// (S: the spatial positions of a sample, 1 for flat features), computed in
// float. x, y, dy and dx are stored as act_t (cl/prelude.cl); the weights,
// their gradients, the statistics and the partial sums are float.
//
// The statistics of a channel are the GLOBAL batch's (every replica's
// samples): each replica's kernels give per-channel partial sums that the
// host adds over replicas and ranks (src/model/kinds_batchnorm.c), and the
// normalisation and the input gradient read the sums' results back. The
// partial-sum kernels run one work-group per channel and reduce in local
// memory in a fixed order (the same bits every run).

// The sum of v over the work-group, in a fixed tree order.
float bn_group_sum(__local float *scratch, float v) {
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

// A channel's values are N rows of S contiguous ones (row n at (n C + c) S).
// On a CPU device (src/nn/batchnorm.c chooses) a work-group per channel whose
// items take rows lid, lid + wgs, ... and walk each row 8 wide (aload8):
// PoCL runs the group as a loop over its items (one item on a CPU,
// clt__nn_row_wgs), and an item that stepped
// through the channel one value at a time, with a division and a modulo
// per value to find it, took 4 ms over (8, 16, 64x64) where PyTorch's
// whole forward takes 1.

// The sum of row's S values from base.
float bn_row_sum(__global const act_t *x, const ulong base, const uint S) {
  float8 acc = (float8)(0.0f);
  uint j = 0;
  for (; j + 8 <= S; j += 8) acc += aload8(x, base + j);
  float s = hsum8(acc);
  for (; j < S; j++) s += ALOAD(x, base + j);
  return s;
}

// The sum of the squared deviations from m of the row's S values.
float bn_row_m2(__global const act_t *x, const ulong base, const uint S, const float m) {
  float8 acc = (float8)(0.0f);
  uint j = 0;
  for (; j + 8 <= S; j += 8) {
    const float8 d = aload8(x, base + j) - m;
    acc += d * d;
  }
  float s = hsum8(acc);
  for (; j < S; j++) {
    const float d = ALOAD(x, base + j) - m;
    s += d * d;
  }
  return s;
}

// part[2c] = the mean of channel c's N*S values, part[2c + 1] = the sum of
// their squared deviations from it. Each row's mean and deviations are
// its own (two passes over a row in cache: accurate when |mean| >> std),
// merged row after row and then item after item by Chan's pairwise rule
// (k and k' rows of S values: mean += d k' / (k + k'), m2 += m2' + d^2 S
// k k' / (k + k'), d the means' difference), in a fixed order.
__kernel void batchnorm_stats(__global const act_t *x, const ulong xoff, const uint N, const uint C, const uint S,
                              __global float *part, const ulong poff, __local float *scratch) {
  const uint c = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  float k = 0.0f, mean = 0.0f, m2 = 0.0f;
  for (uint n = lid; n < N; n += wgs) {
    const ulong base = xoff + ((ulong)n * C + c) * S;
    const float rm = bn_row_sum(x, base, S) / (float)S, rm2 = bn_row_m2(x, base, S, rm);
    const float d = rm - mean;
    mean += d / (k + 1.0f);
    m2 += rm2 + d * d * (float)S * k / (k + 1.0f);
    k += 1.0f;
  }
  scratch[3 * lid] = k, scratch[3 * lid + 1] = mean, scratch[3 * lid + 2] = m2;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    for (uint i = 1; i < wgs; i++) {
      const float k2 = scratch[3 * i];
      if (k2 == 0.0f) continue;
      const float d = scratch[3 * i + 1] - mean;
      mean += d * k2 / (k + k2);
      m2 += scratch[3 * i + 2] + d * d * (float)S * k * k2 / (k + k2);
      k += k2;
    }
    part[poff + 2 * c] = mean;
    part[poff + 2 * c + 1] = m2;
  }
}

// The same where a work-group's items run side by side (GPUs): the group's
// items stride through the channel's values together, neighbours reading
// neighbours, and the group adds them up.
#define BN_AT(base, c, j) ((base) + ((ulong)((j) / S) * C + (c)) * S + (j) % S)

__kernel void batchnorm_stats_strided(__global const act_t *x, const ulong xoff, const uint N, const uint C,
                                      const uint S, __global float *part, const ulong poff,
                                      __local float *scratch) {
  const uint c = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0), count = N * S;
  float s = 0.0f;
  for (uint j = lid; j < count; j += wgs) s += ALOAD(x, BN_AT(xoff, c, j));
  const float mu = bn_group_sum(scratch, s) / (float)count;
  float s2 = 0.0f;
  for (uint j = lid; j < count; j += wgs) {
    const float d = ALOAD(x, BN_AT(xoff, c, j)) - mu;
    s2 += d * d;
  }
  const float m2 = bn_group_sum(scratch, s2);
  if (lid == 0) {
    part[poff + 2 * c] = mu;
    part[poff + 2 * c + 1] = m2;
  }
}

// y = (x - mean) / sqrt(var + eps) * w + b, one item per element: ids (s, c, n).
__kernel void batchnorm_forward(__global const act_t *x, const ulong xoff, __global const float *mean,
                                const ulong moff, __global const float *var, const ulong voff,
                                __global const float *w, const ulong woff, __global const float *b, const ulong boff,
                                __global act_t *y, const ulong yoff, const float eps) {
  const uint s = get_global_id(0), c = get_global_id(1), n = get_global_id(2);
  const uint S = get_global_size(0), C = get_global_size(1);
  const ulong i = ((ulong)n * C + c) * S + s;
  const float r = 1.0f / sqrt(var[voff + c] + eps);
  ASTORE(y, yoff + i, (ALOAD(x, xoff + i) - mean[moff + c]) * r * w[woff + c] + b[boff + c]);
}

// The same a row (n, c) of S values an item, 8 wide, on CPU devices (the
// host chooses, as for the partial sums): the channel's factors once a
// row, and no item per value. Id n C + c, a work-group each (PoCL's
// threads share the rows); the same arithmetic per value.
__kernel void batchnorm_forward_rows(__global const act_t *x, const ulong xoff, __global const float *mean,
                                     const ulong moff, __global const float *var, const ulong voff,
                                     __global const float *w, const ulong woff, __global const float *b,
                                     const ulong boff, __global act_t *y, const ulong yoff, const float eps,
                                     const uint C, const uint S) {
  const uint nc = get_global_id(0), c = nc % C;
  const ulong row = (ulong)nc * S;
  const float r = 1.0f / sqrt(var[voff + c] + eps), m = mean[moff + c], wc = w[woff + c], bc = b[boff + c];
  uint j = 0;
  for (; j + 8 <= S; j += 8) astore8(y, yoff + row + j, (aload8(x, xoff + row + j) - m) * r * wc + bc);
  for (; j < S; j++) ASTORE(y, yoff + row + j, (ALOAD(x, xoff + row + j) - m) * r * wc + bc);
}

// Channel c's sums of dy and of dy * xhat (xhat = (x - mean) / sqrt(var +
// eps)) over this replica's N*S values: added to db[c] and dw[c] (the
// parameter gradients are the replica's own, summed by the exchange), and
// written to part[2c], part[2c + 1] for the host's global sums.
__kernel void batchnorm_backward_sums(__global const act_t *x, const ulong xoff, __global const act_t *dy,
                                      const ulong dyoff, __global const float *mean, const ulong moff,
                                      __global const float *var, const ulong voff, __global float *dw,
                                      const ulong dwoff, __global float *db, const ulong dboff, const uint N,
                                      const uint C, const uint S, const float eps, __global float *part,
                                      const ulong poff, __local float *scratch) {
  const uint c = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const float mu = mean[moff + c], r = 1.0f / sqrt(var[voff + c] + eps);
  float sd = 0.0f, sdx = 0.0f;
  for (uint n = lid; n < N; n += wgs) { // rows walked 8 wide, as batchnorm_stats's
    const ulong xb = xoff + ((ulong)n * C + c) * S, gb = dyoff + ((ulong)n * C + c) * S;
    float8 a8 = (float8)(0.0f), b8 = (float8)(0.0f);
    uint j = 0;
    for (; j + 8 <= S; j += 8) {
      const float8 g = aload8(dy, gb + j);
      a8 += g;
      b8 += g * (aload8(x, xb + j) - mu);
    }
    float a1 = hsum8(a8), b1 = hsum8(b8);
    for (; j < S; j++) {
      const float g = ALOAD(dy, gb + j);
      a1 += g;
      b1 += g * (ALOAD(x, xb + j) - mu);
    }
    sd += a1, sdx += b1 * r;
  }
  const float a = bn_group_sum(scratch, sd), bsum = bn_group_sum(scratch, sdx);
  if (lid == 0) {
    db[dboff + c] += a;
    dw[dwoff + c] += bsum;
    part[poff + 2 * c] = a;
    part[poff + 2 * c + 1] = bsum;
  }
}

// batchnorm_backward_sums where items run side by side (as
// batchnorm_stats_strided).
__kernel void batchnorm_backward_sums_strided(__global const act_t *x, const ulong xoff, __global const act_t *dy,
                                              const ulong dyoff, __global const float *mean, const ulong moff,
                                              __global const float *var, const ulong voff, __global float *dw,
                                              const ulong dwoff, __global float *db, const ulong dboff,
                                              const uint N, const uint C, const uint S, const float eps,
                                              __global float *part, const ulong poff, __local float *scratch) {
  const uint c = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0), count = N * S;
  const float mu = mean[moff + c], r = 1.0f / sqrt(var[voff + c] + eps);
  float sd = 0.0f, sdx = 0.0f;
  for (uint j = lid; j < count; j += wgs) {
    const float g = ALOAD(dy, BN_AT(dyoff, c, j));
    sd += g;
    sdx += g * ((ALOAD(x, BN_AT(xoff, c, j)) - mu) * r);
  }
  const float a = bn_group_sum(scratch, sd), bsum = bn_group_sum(scratch, sdx);
  if (lid == 0) {
    db[dboff + c] += a;
    dw[dwoff + c] += bsum;
    part[poff + 2 * c] = a;
    part[poff + 2 * c + 1] = bsum;
  }
}

// dx = w * r * (dy - gdy - xhat * gdyx), gdy and gdyx the global batch's
// means of dy and dy * xhat per channel: ids (s, c, n).
__kernel void batchnorm_backward_input(__global const act_t *x, const ulong xoff, __global const act_t *dy,
                                       const ulong dyoff, __global const float *mean, const ulong moff,
                                       __global const float *var, const ulong voff, __global const float *w,
                                       const ulong woff, __global const float *gdy, const ulong goff,
                                       __global const float *gdyx, const ulong gxoff, __global act_t *dx,
                                       const ulong dxoff, const float eps) {
  const uint s = get_global_id(0), c = get_global_id(1), n = get_global_id(2);
  const uint S = get_global_size(0), C = get_global_size(1);
  const ulong i = ((ulong)n * C + c) * S + s;
  const float r = 1.0f / sqrt(var[voff + c] + eps);
  const float xhat = (ALOAD(x, xoff + i) - mean[moff + c]) * r;
  ASTORE(dx, dxoff + i, w[woff + c] * r * (ALOAD(dy, dyoff + i) - gdy[goff + c] - xhat * gdyx[gxoff + c]));
}

// One device's batch, without a trip to the host (src/model/kinds_batchnorm.c
// when no other replica's sums are added): from part (C, 2) over M values
// a channel, stats = (mean (C), biased variance (C), unbiased (C)).
__kernel void batchnorm_finish_stats(__global const float *part, const ulong poff, const uint C, const float M,
                                     __global float *stats, const ulong soff) {
  const uint c = get_global_id(0);
  const float m2 = part[poff + 2 * c + 1];
  stats[soff + c] = part[poff + 2 * c];
  stats[soff + C + c] = m2 / M;
  stats[soff + 2 * C + c] = m2 / (M - 1.0f);
}

// g = the means of dy and dy * xhat from the backward's sums part (C, 2)
// over M values a channel: g[c], g[C + c].
__kernel void batchnorm_means(__global const float *part, const ulong poff, const uint C, const float M,
                              __global float *g, const ulong goff) {
  const uint c = get_global_id(0);
  g[goff + c] = part[poff + 2 * c] / M;
  g[goff + C + c] = part[poff + 2 * c + 1] / M;
}

// The running statistics moved towards the batch's. Unfused multiplies and
// adds (each correctly rounded on every device): the same bits as the
// host's float arithmetic, on every replica alike.
#pragma OPENCL FP_CONTRACT OFF
__kernel void batchnorm_running(__global const float *mean, const ulong moff, __global const float *uvar,
                                const ulong uoff, const float m, __global float *rmean, const ulong rmoff,
                                __global float *rvar, const ulong rvoff) {
  const uint c = get_global_id(0);
  const float keep = 1.0f - m;
  const float a = keep * rmean[rmoff + c], b = m * mean[moff + c];
  rmean[rmoff + c] = a + b;
  const float u = keep * rvar[rvoff + c], v = m * uvar[uoff + c];
  rvar[rvoff + c] = u + v;
}

// batchnorm_backward_input a row (n, c) an item, 8 wide, on CPU devices.
__kernel void batchnorm_backward_input_rows(__global const act_t *x, const ulong xoff, __global const act_t *dy,
                                            const ulong dyoff, __global const float *mean, const ulong moff,
                                            __global const float *var, const ulong voff, __global const float *w,
                                            const ulong woff, __global const float *gdy, const ulong goff,
                                            __global const float *gdyx, const ulong gxoff, __global act_t *dx,
                                            const ulong dxoff, const float eps, const uint C, const uint S) {
  const uint nc = get_global_id(0), c = nc % C;
  const ulong row = (ulong)nc * S;
  const float r = 1.0f / sqrt(var[voff + c] + eps), m = mean[moff + c], k = w[woff + c] * r;
  const float g = gdy[goff + c], gx = gdyx[gxoff + c];
  uint j = 0;
  for (; j + 8 <= S; j += 8) {
    const float8 xhat = (aload8(x, xoff + row + j) - m) * r;
    astore8(dx, dxoff + row + j, k * (aload8(dy, dyoff + row + j) - g - xhat * gx));
  }
  for (; j < S; j++) {
    const float xhat = (ALOAD(x, xoff + row + j) - m) * r;
    ASTORE(dx, dxoff + row + j, k * (ALOAD(dy, dyoff + row + j) - g - xhat * gx));
  }
}
