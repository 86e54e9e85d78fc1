// bias.cl: per-channel bias for tensors seen as (N, C, P): linear layers
// (P = 1) and convolutions (P = OH*OW). y and dy are stored as act_t
// (cl/prelude.cl); the bias and its gradient are float.

// y[n, c, p] += b[c]
__kernel void bias_add(__global act_t *y, const ulong yoff, __global const float *b, const ulong boff,
                       const uint C, const uint P, const uint total) {
  uint i = get_global_id(0);
  if (i < total) ASTORE(y, yoff + i, ALOAD(y, yoff + i) + b[boff + (i / P) % C]);
}

// db[c] += sum over n, p of dy[n, c, p]. One work-group per channel; item t
// sums elements t, t + W, ... of each of the channel's N rows of P (of its
// N*P elements in a row when P < W, as a linear layer's P = 1), then a tree
// in local memory: a fixed order, so the same bits every run. W is a power
// of two. (Walking the rows saves a division per element, which cost PoCL
// more than the sum.)
__kernel void bias_grad(__global const act_t *dy, const ulong dyoff, __global float *db, const ulong dboff,
                        const uint N, const uint C, const uint P, __local float *scratch) {
  const uint c = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint count = N * P;
  float acc = 0.0f;
  if (P >= wgs) {
    for (uint n = 0; n < N; n++)
      for (uint p = lid; p < P; p += wgs) acc += ALOAD(dy, dyoff + ((ulong)n * C + c) * P + p);
  } else {
    for (uint j = lid; j < count; j += wgs) {
      uint n = j / P, p = j - n * P;
      acc += ALOAD(dy, dyoff + ((ulong)n * C + c) * P + p);
    }
  }
  scratch[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = wgs / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) db[dboff + c] += scratch[0];
}
