// groupnorm.cl: group normalization (torch.nn.GroupNorm(G, C)) of x (N, C,
// S) with S the spatial positions: each sample's G groups of C / G channels
// are rows of D = (C / G) * S values, contiguous, normalised as
// cl/layernorm.cl normalises a row (two passes for the variance), then
// scaled and shifted per channel: channel c = g * (C / G) + d / S. x, y, dy
// and dx are stored as act_t (cl/prelude.cl); w, b, their gradients and the
// saved mean and rstd are float. The forward and the input gradient one
// work-group per row, reducing in local memory in a fixed order; the
// weight and bias gradients one work-item per channel, summing the samples
// and positions in order (the same bits every run).

// The sum of v over the work-group, in a fixed tree order (power-of-two
// work-groups: the host's).
float gn_group_sum(__local float *scratch, float v) {
  const uint lid = get_local_id(0), wgs = get_local_size(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = wgs / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

// Row `row` (sample row / G, group row % G) of D = CG * S values.
__kernel void groupnorm_forward(__global const act_t *x, const ulong xoff, __global const float *w, const ulong woff,
                                __global const float *b, const ulong boff, __global act_t *y, const ulong yoff,
                                __global float *mean, const ulong moff, __global float *rstd, const ulong roff,
                                const uint G, const uint CG, const uint S, const float eps, __local float *scratch) {
  const uint row = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint D = CG * S, c0 = (row % G) * CG;
  const ulong base = (ulong)row * D;
  float s = 0.0f;
  for (uint d = lid; d < D; d += wgs) s += ALOAD(x, xoff + base + d);
  const float mu = gn_group_sum(scratch, s) / (float)D;
  float s2 = 0.0f;
  for (uint d = lid; d < D; d += wgs) {
    const float c = ALOAD(x, xoff + base + d) - mu;
    s2 += c * c;
  }
  const float r = 1.0f / sqrt(gn_group_sum(scratch, s2) / (float)D + eps);
  for (uint d = lid; d < D; d += wgs) {
    const uint c = c0 + d / S;
    ASTORE(y, yoff + base + d, (ALOAD(x, xoff + base + d) - mu) * r * w[woff + c] + b[boff + c]);
  }
  if (lid == 0) {
    mean[moff + row] = mu;
    rstd[roff + row] = r;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = w[c] * dy and
// xhat = (x - mean) * rstd, the means over the row.
__kernel void groupnorm_backward_input(__global const act_t *x, const ulong xoff, __global const float *w,
                                       const ulong woff, __global const float *mean, const ulong moff,
                                       __global const float *rstd, const ulong roff, __global const act_t *dy,
                                       const ulong dyoff, __global act_t *dx, const ulong dxoff, const uint G,
                                       const uint CG, const uint S, __local float *scratch) {
  const uint row = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint D = CG * S, c0 = (row % G) * CG;
  const ulong base = (ulong)row * D;
  const float mu = mean[moff + row], r = rstd[roff + row];
  float s1 = 0.0f, s2 = 0.0f;
  for (uint d = lid; d < D; d += wgs) {
    const float g = w[woff + c0 + d / S] * ALOAD(dy, dyoff + base + d);
    s1 += g;
    s2 += g * (ALOAD(x, xoff + base + d) - mu) * r;
  }
  const float mean_g = gn_group_sum(scratch, s1) / (float)D;
  const float mean_gx = gn_group_sum(scratch, s2) / (float)D;
  for (uint d = lid; d < D; d += wgs) {
    const float g = w[woff + c0 + d / S] * ALOAD(dy, dyoff + base + d);
    const float xhat = (ALOAD(x, xoff + base + d) - mu) * r;
    ASTORE(dx, dxoff + base + d, r * (g - mean_g - xhat * mean_gx));
  }
}

// dw[c] += sum over samples and positions of dy * xhat, db[c] += sum of dy:
// one work-item per channel (exactly C = G * CG items), in order.
__kernel void groupnorm_backward_params(__global const act_t *x, const ulong xoff, __global const float *mean,
                                        const ulong moff, __global const float *rstd, const ulong roff,
                                        __global const act_t *dy, const ulong dyoff, __global float *dw,
                                        const ulong dwoff, __global float *db, const ulong dboff, const uint N,
                                        const uint G, const uint CG, const uint S) {
  const uint c = get_global_id(0), C = G * CG;
  float sw = 0.0f, sb = 0.0f;
  for (uint n = 0; n < N; n++) {
    const uint row = n * G + c / CG;
    const float mu = mean[moff + row], r = rstd[roff + row];
    const ulong base = ((ulong)n * C + c) * S;
    for (uint s = 0; s < S; s++) {
      const float g = ALOAD(dy, dyoff + base + s);
      sw += g * (ALOAD(x, xoff + base + s) - mu) * r;
      sb += g;
    }
  }
  dw[dwoff + c] += sw;
  db[dboff + c] += sb;
}
