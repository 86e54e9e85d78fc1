// prelude.cl: put in front of every kernel source by the runtime.
//
// act_t is the type that activations and their gradients are STORED in:
// float, or half when the host builds a program with -DCLT_HALF (mixed
// precision, src/nn/common.c picks the variant from the tensors' dtype).
// Kernels always compute in float: ALOAD widens a stored value, ASTORE
// rounds a float to the stored type, to nearest even (overflow gives +-inf,
// which the trainer's loss scaling detects). vload_half and vstore_half are
// core OpenCL 1.0, so every device stores half; half arithmetic
// (cl_khr_fp16) is never needed. Parameters, their gradients and optimizer
// state stay float. Index act_t buffers as ALOAD(p, base + i), never by
// pointer arithmetic: arithmetic on half pointers needs cl_khr_fp16.
#ifdef CLT_HALF
#define act_t half
#define ALOAD(p, i) vload_half((i), (p))
#define ASTORE(p, i, v) vstore_half_rte((v), (i), (p))
#else
#define act_t float
#define ALOAD(p, i) ((p)[(i)])
#define ASTORE(p, i, v) ((p)[(i)] = (v))
#endif

// Eight neighbouring stored values from element i as a float8, and back
// (rounded to nearest even), for kernels that walk rows 8 wide; half is
// read one value at a time, as vload_half8 would need an index that is a
// multiple of 8. hsum8 adds a float8's lanes in a fixed tree (l + 4, then
// l + 2, then l + 1).
#ifdef CLT_HALF
float8 aload8(__global const half *p, const ulong i) {
  return (float8)(vload_half(i, p), vload_half(i + 1, p), vload_half(i + 2, p), vload_half(i + 3, p),
                  vload_half(i + 4, p), vload_half(i + 5, p), vload_half(i + 6, p), vload_half(i + 7, p));
}
void astore8(__global half *p, const ulong i, const float8 v) {
  vstore_half_rte(v.s0, i, p), vstore_half_rte(v.s1, i + 1, p), vstore_half_rte(v.s2, i + 2, p);
  vstore_half_rte(v.s3, i + 3, p), vstore_half_rte(v.s4, i + 4, p), vstore_half_rte(v.s5, i + 5, p);
  vstore_half_rte(v.s6, i + 6, p), vstore_half_rte(v.s7, i + 7, p);
}
#else
#define aload8(p, i) vload8(0, (p) + (i))
#define astore8(p, i, v) vstore8((v), 0, (p) + (i))
#endif
float hsum8(const float8 v) {
  const float4 a = v.lo + v.hi;
  const float2 b = a.lo + a.hi;
  return b.x + b.y;
}
