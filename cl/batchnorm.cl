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

// Element j of channel c's N*S values.
#define BN_AT(base, c, j) ((base) + ((ulong)((j) / S) * C + (c)) * S + (j) % S)

// part[2c] = the mean of channel c's N*S values, part[2c + 1] = the sum of
// their squared deviations from it (two passes: accurate when |mean| >> std).
__kernel void batchnorm_stats(__global const act_t *x, const ulong xoff, const uint N, const uint C, const uint S,
                              __global float *part, const ulong poff, __local float *scratch) {
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
