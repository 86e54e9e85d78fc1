// reduce.cl: sum and sum-of-squares in two passes with a fixed order.
//
// Pass 1: G work-groups of W items; item t of group g strides over the input
// from g*W+t in steps of G*W, then the group tree-reduces in local memory and
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
  float acc = 0.0f;
  for (size_t i = get_global_id(0); i < n; i += stride) {
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
