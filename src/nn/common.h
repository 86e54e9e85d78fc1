/*
 * common.h: what the src/nn/ sources share: shape checks whose messages
 * name the op and every tensor involved, kernel argument and launch helpers.
 */
#ifndef CLT_NN_COMMON_H
#define CLT_NN_COMMON_H

#include "nn/nn.h"

/* One kernel argument: `size` bytes at `value`, or __local memory of `size`
 * bytes when value is NULL. */
typedef struct clt__nn_arg {
  size_t size;
  const void *value;
} clt__nn_arg;
#define NN_VAL(v)                                                                                                      \
  { sizeof(v), &(v) } /* the value of lvalue v */
#define NN_LOCAL(bytes)                                                                                                \
  { (bytes), NULL }

/* Set arguments first, first+1, ... of k from args[0..n). */
int clt__nn_args(cl_kernel k, int first, const clt__nn_arg *args, int n);
/* Set arguments first .. first+n-1 of k from n values of `size` bytes each,
 * consecutive at `values` (an array of cl_uint, say). */
int clt__nn_args_array(cl_kernel k, int first, const void *values, size_t size, int n);
/* NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_LOCAL(bytes)) sets
 * arguments 0, 1, 2, ... in order. */
#define NN_SET_ARGS(k, ...)                                                                                            \
  clt__nn_args((k), 0, (const clt__nn_arg[]){__VA_ARGS__},                                                             \
               (int)(sizeof((const clt__nn_arg[]){__VA_ARGS__}) / sizeof(clt__nn_arg)))

/* The largest element count the nn kernels index with 32-bit integers. */
#define NN_MAX_ELEMS ((int64_t)0x7fffffff)

/* Set kernel argument i to the value of v (inside a function with `rc` and
 * a `fail` label). */
#define NN_ARG(k, i, v) CLT_CL_TRY(clSetKernelArg((k), (cl_uint)(i), sizeof(v), &(v)))

/* A tensor and the name an error message calls it by. */
typedef struct clt__nn_named {
  const char *name;
  const clt_tensor *t;
} clt__nn_named;

/* The view's offset in elements of its dtype. */
cl_ulong clt__nn_off(const clt_tensor *t);

/* The tensor as a GEMM operand with leading dimension ld (in floats). */
clt_matrix clt__nn_mat(const clt_tensor *t, int64_t ld);

/* t must exist (else CLT_EINVAL), be of dtype and have ndim dimensions
 * (ndim 0: any), and hold at most NN_MAX_ELEMS elements (else CLT_ESHAPE).
 * `layout` describes the expected shape in the message, e.g. "(N, C, H, W)". */
int clt__nn_check(const char *op, const char *name, const clt_tensor *t, clt_dtype dtype, int ndim, const char *layout);

/* As clt__nn_check, for an activation or activation gradient: f32, or f16
 * under mixed precision (stored half, computed float; cl/prelude.cl). */
int clt__nn_check_act(const char *op, const char *name, const clt_tensor *t, int ndim, const char *layout);

/* The build option that selects a kernel source's variant for activations
 * stored as t's dtype: "-DCLT_HALF" for f16, "" for f32. */
const char *clt__nn_act_opt(const clt_tensor *t);

/* t must exist and have the dtype and shape of like (else CLT_EINVAL or
 * CLT_ESHAPE naming both). */
int clt__nn_check_like(const char *op, const char *name, const clt_tensor *t, const char *like_name,
                       const clt_tensor *like);

/* The activations of one call share one dtype (one program variant serves
 * them all): b must be stored as a is, else CLT_ESHAPE naming both. Both
 * already checked (clt__nn_check_act). */
int clt__nn_check_same_act(const char *op, const char *a_name, const clt_tensor *a, const char *b_name,
                           const clt_tensor *b);

/* CLT_ESHAPE with "OP: name1 (shape), name2 (shape): <fmt ...>"; NULL
 * tensors in ts are left out. */
int clt__nn_shape_error(const char *op, const clt__nn_named *ts, int n, const char *fmt, ...) CLT__PRINTF(4, 5);

/* Do a and b have the same shape? */
int clt__nn_same_shape(const clt_tensor *a, const clt_tensor *b);

/* Launch `groups` work-groups of wgs items each (wgs already clamped). */
int clt__nn_launch_groups(clt_context *ctx, cl_kernel k, size_t groups, size_t wgs);

/* Launch k over exactly gx x gy x gz work-items, x fastest. Kernels
 * launched so index their data by the three ids instead of dividing one
 * flat id: on CPU implementations (PoCL) integer division per item costs
 * more than the memory traffic and stops the work-item loop from being
 * vectorized, while per-row quantities derived from ids 1 and 2 are
 * hoisted out of it. The range is never rounded up, so kernels need no
 * bounds test (an early return cost PoCL 7x on a small convolution):
 * work-groups are (lx, ly, 1), at most NN_GROUP_ITEMS items, lx the largest
 * divisor of gx that fits (a whole row when it does) and ly the largest
 * divisor of gy that fits beside it. */
int clt__nn_launch_3d(clt_context *ctx, cl_kernel k, size_t gx, size_t gy, size_t gz);
#define NN_GROUP_ITEMS 256

/* A power-of-two work-group size for a kernel that reduces rows of `len`
 * elements: no wider than the row (rounded up), at most `most`, clamped;
 * 1 on PoCL's CPU devices, where one item walking the row is fastest. The
 * kernels' fixed reduction order is then the row's order. */
size_t clt__nn_row_wgs(clt_context *ctx, cl_kernel k, int64_t len, size_t most);

/* y[n, c, p] += b[c], y seen as (N, C, P) (src/nn/bias.c). */
int clt__nn_bias_add(clt_context *ctx, const clt_tensor *y, const clt_tensor *b, int64_t C, int64_t P);
/* db[c] += the sum over n, p of dy[n, c, p], dy seen as (N, C, P), in a
 * fixed order. */
int clt__nn_bias_grad(clt_context *ctx, const clt_tensor *dy, const clt_tensor *db, int64_t N, int64_t C, int64_t P);

/* A convolution's geometry seen as 3-D (leading axes of 1 below 3-D): x
 * (N, Cin, in...), w (Cout, Cin, k...), y (N, Cout, out...), stride s,
 * padding p, dilation d; activations stored as f16 when half. */
typedef struct clt__conv3 {
  int64_t N, Cin, Cout;
  int64_t in[3], k[3], out[3];
  int s[3], p[3], d[3];
  int half;
} clt__conv3;

/* src/nn/conv_cpu.c, the implicit-GEMM convolutions of CPU devices:
 * _takes says whether it runs this geometry on ctx; _forward and _backward
 * (tensors already checked, as conv.c and conv_nd.c do) return 1 when they
 * ran the call, 0 when the workspace is too small for them (nothing done),
 * or a negative CLT_E* code. */
int clt__conv_cpu_takes(clt_context *ctx, const clt__conv3 *g);
int clt__conv_cpu_forward(clt_context *ctx, const clt__conv3 *g, const clt_tensor *x, const clt_tensor *w,
                          const clt_tensor *b, const clt_tensor *y, const clt_tensor *ws);
int clt__conv_cpu_backward(clt_context *ctx, const clt__conv3 *g, const clt_tensor *x, const clt_tensor *w,
                           const clt_tensor *dy, const clt_tensor *dx, const clt_tensor *dw, const clt_tensor *db,
                           const clt_tensor *ws);

#endif
