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
