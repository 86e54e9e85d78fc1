// reduce.cl: sum and sum-of-squares in two passes with a fixed order.
//
// Pass 1: G work-groups of W items; item t of group g strides over the input
// in blocks of 8 from block g*W+t in steps of G*W blocks (the last n % 8
// elements one by one), then the group tree-reduces in local memory and
// writes partial[g]. Pass 2: one group reduces the G partials the same way.
// G and W are fixed for a device, so the same input gives the same bits on
// every run. W must be a power of two (the host guarantees it).

#ifndef SQUARE
#define SQUARE 0
#endif

__kernel void reduce_sum_f32(__global const float *x, const ulong off, const ulong n,
                             __global float *partial, const ulong poff, __local float *scratch) {
  const size_t lid = get_local_id(0);
  const size_t wgs = get_local_size(0);
  const size_t stride = get_global_size(0);
  // Eight neighbouring elements a step, in eight independent sums: a CPU
  // device runs a work-item's loop as scalar code, where one running sum
  // waits for every add before it (PoCL took 0.3 ms over the MLP's 235k
  // gradients, as long as its GEMMs).
  const ulong nv = n / 8;
  float8 acc8 = (float8)(0.0f);
  for (size_t i = get_global_id(0); i < nv; i += stride) {
    float8 v = vload8(0, x + off + 8 * i);
#if SQUARE
    acc8 = mad(v, v, acc8);
#else
    acc8 += v;
#endif
  }
  float acc = ((acc8.s0 + acc8.s1) + (acc8.s2 + acc8.s3)) + ((acc8.s4 + acc8.s5) + (acc8.s6 + acc8.s7));
  for (size_t i = 8 * nv + get_global_id(0); i < n; i += stride) {
    float v = x[off + i];
#if SQUARE
    acc = mad(v, v, acc);
#else
    acc += v;
#endif
  }
  scratch[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (size_t s = wgs / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) partial[poff + get_group_id(0)] = scratch[0];
}
