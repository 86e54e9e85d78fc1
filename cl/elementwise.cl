// elementwise.cl: float32 elementwise kernels over flat buffers.
// Offsets are in elements; every kernel checks its bound because the launch
// rounds the global size up to a whole work-group.

__kernel void fill_f32(__global float *x, const ulong off, const ulong n, const float value) {
  size_t i = get_global_id(0);
  if (i < n) x[off + i] = value;
}

// x = alpha * x
__kernel void scale_f32(__global float *x, const ulong off, const ulong n, const float alpha) {
  size_t i = get_global_id(0);
  if (i < n) x[off + i] *= alpha;
}

// y = y + alpha * x
__kernel void axpy_f32(const float alpha, __global const float *x, const ulong xoff,
                       __global float *y, const ulong yoff, const ulong n) {
  size_t i = get_global_id(0);
  if (i < n) y[yoff + i] = mad(alpha, x[xoff + i], y[yoff + i]);
}

// out = a + b
__kernel void add_f32(__global const float *a, const ulong aoff, __global const float *b, const ulong boff,
                      __global float *out, const ulong ooff, const ulong n) {
  size_t i = get_global_id(0);
  if (i < n) out[ooff + i] = a[aoff + i] + b[boff + i];
}

// out = a * b
__kernel void mul_f32(__global const float *a, const ulong aoff, __global const float *b, const ulong boff,
                      __global float *out, const ulong ooff, const ulong n) {
  size_t i = get_global_id(0);
  if (i < n) out[ooff + i] = a[aoff + i] * b[boff + i];
}

// dst = src, float to the stored type act_t and back (with -DCLT_HALF:
// float <-> half, rounded to nearest even; see prelude.cl).
__kernel void to_act(__global const float *src, const ulong soff, __global act_t *dst, const ulong doff,
                     const ulong n) {
  size_t i = get_global_id(0);
  if (i < n) ASTORE(dst, doff + i, src[soff + i]);
}

__kernel void from_act(__global const act_t *src, const ulong soff, __global float *dst, const ulong doff,
                       const ulong n) {
  size_t i = get_global_id(0);
  if (i < n) dst[doff + i] = ALOAD(src, soff + i);
}
