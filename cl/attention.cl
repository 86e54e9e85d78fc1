// attention.cl: the causal softmax of multi-head self-attention, between
// the GEMMs of src/nn/attention.c. Everything here is float: under mixed
// precision the host widens qkv, y and dy into f32 scratch first.
//
// The scores of one chunk of samples are rows of T floats, row r = ((b *
// heads + h) * T + i) for query i of head h of sample b; one work-group
// (a power of two) per row, reducing in local memory in a fixed tree
// order, so the same scores give the same bits every run. Query i sees
// keys j <= i; the others get probability exactly 0 (never -inf - -inf).

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

// The maximum of v over the work-group.
float group_max(__local float *scratch, float v) {
  const uint lid = get_local_id(0), wgs = get_local_size(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = wgs / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] = fmax(scratch[lid], scratch[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

// Scores s (already scaled by 1/sqrt(D)) become probabilities in place:
// lse = m + log(sum_{j <= i} exp(s_j - m)) with m the row's maximum over
// j <= i (so every exp is in (0, 1]), p_j = exp(s_j - lse) for j <= i and 0
// beyond. The backward recomputes p from the same s and lse with the same
// expression, so it sees the forward's probabilities bit for bit.
__kernel void attention_softmax(__global float *s, const ulong soff, __global float *lse, const ulong lseoff,
                                const uint T, __local float *scratch) {
  const uint row = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint i = row % T;
  const ulong base = soff + (ulong)row * T;
  float m = -INFINITY;
  for (uint j = lid; j <= i; j += wgs) m = fmax(m, s[base + j]);
  m = group_max(scratch, m);
  float sum = 0.0f;
  for (uint j = lid; j <= i; j += wgs) sum += exp(s[base + j] - m);
  const float l = m + log(group_sum(scratch, sum));
  for (uint j = lid; j < T; j += wgs) s[base + j] = j <= i ? exp(s[base + j] - l) : 0.0f;
  if (lid == 0) lse[lseoff + row] = l;
}

// The backward's softmax step, for query i of head h of sample b (row r):
// p_j = exp(s_j - lse) overwrites the recomputed scores s (for dV = P^T
// dY), and dP = dY V^T becomes dS = P * (dP - rowsum(dY * Y)) in place,
// the rowsum over the head's D columns of y and dy (which equals sum_j p_j
// dp_j). Masked entries of both are 0. y and dy are (nb, T, C) with the
// head at columns [h*D, (h+1)*D).
__kernel void attention_softmax_backward(__global float *s, const ulong soff, __global float *d, const ulong doff,
                                         __global const float *lse, const ulong lseoff, __global const float *y,
                                         const ulong yoff, __global const float *dy, const ulong dyoff, const uint T,
                                         const uint H, const uint C, const uint D, __local float *scratch) {
  const uint row = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint i = row % T, bh = row / T, h = bh % H, b = bh / H;
  const ulong yrow = ((ulong)b * T + i) * C + (ulong)h * D;
  float dot = 0.0f;
  for (uint k = lid; k < D; k += wgs) dot += dy[dyoff + yrow + k] * y[yoff + yrow + k];
  const float rs = group_sum(scratch, dot);
  const float l = lse[lseoff + row];
  const ulong base = (ulong)row * T;
  for (uint j = lid; j < T; j += wgs) {
    const float p = j <= i ? exp(s[soff + base + j] - l) : 0.0f;
    s[soff + base + j] = p;
    d[doff + base + j] = j <= i ? p * (d[doff + base + j] - rs) : 0.0f;
  }
}
