/*
 * cltrain/opencl.h: OpenCL interop (opt-in; includes CL/cl.h).
 *
 * The OpenCL handles behind cltrain's objects, device buffers and tensor
 * views, pinned host staging, the elementwise and reduction kernels, and GEMM.
 * Everything here is enqueued on the context's in-order queue and returns
 * without waiting, except where a result comes back to the host (clt_sum,
 * downloads), which waits.
 */
#ifndef CLTRAIN_OPENCL_H
#define CLTRAIN_OPENCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#  define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <cltrain.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- handles --------------------------------------------------------------- */

CLT_API cl_platform_id clt_devices_cl_platform(const clt_devices *devs, int i);
CLT_API cl_device_id clt_devices_cl_device(const clt_devices *devs, int i);
CLT_API cl_context clt_context_cl(const clt_context *ctx);
CLT_API cl_command_queue clt_context_queue(const clt_context *ctx);
/* A second in-order queue on the same device, for copies that should not
 * wait behind the compute queue (synchronise the two with events). */
CLT_API cl_command_queue clt_context_transfer_queue(const clt_context *ctx);
CLT_API cl_device_id clt_context_cl_device(const clt_context *ctx);

/* ---- programs and kernels ------------------------------------------------ */

/* A kernel from one of the library's embedded sources (cl/NAME.cl), built with
 * the given options ("-DWGS=64"; NULL for none). Programs are cached per
 * (context, source, options) and kernels per program; the kernel belongs to
 * the context, do not release it. With CLT_KERNEL_DIR set, sources are read
 * from that directory instead of the embedded copies. */
CLT_API int clt_context_kernel(clt_context *ctx, const char *source_name,
                               const char *kernel_name, const char *options,
                               cl_kernel *out);
/* Build a program from the caller's own source text, cached like the
 * embedded ones under the given name. A build failure is CLT_EBUILD and
 * clt_last_error() carries the compiler's log. */
CLT_API int clt_context_build(clt_context *ctx, const char *name, const char *source,
                              const char *options, cl_program *out);
/* Names of the embedded kernel sources, NULL-terminated. */
CLT_API const char *const *clt_kernel_sources(void);

/* Launch a 1-D kernel over n work-items with work-group size at most wgs
 * (0: the kernel's preferred size), clamped to what the kernel and device
 * allow; the global size is rounded up, so kernels check their bound. */
CLT_API int clt_launch_1d(clt_context *ctx, cl_kernel k, size_t n, size_t wgs);

/* ---- buffers --------------------------------------------------------------- */

/* A device buffer of `bytes`. Running out is CLT_EDEVMEM with what was asked
 * and what the device has. On a device whose memory is the host's and that
 * has fine-grained buffer SVM (PoCL), its bytes are fine-grained SVM
 * (CL_MEM_USE_HOST_PTR over clSVMAlloc's memory; CL_MEM_HOST_PTR gives
 * them): the host may read and write them in place between commands, and
 * the collectives below reduce it in place. CLT_SHARED_BUFFERS=0 in the
 * environment makes ordinary buffers there too (a value other than 0 or 1
 * is CLT_EINVAL when a context is made). */
CLT_API int clt_buffer_create(clt_context *ctx, size_t bytes, cl_mem *out);
CLT_API void clt_buffer_release(cl_mem buf);
CLT_API size_t clt_buffer_size(cl_mem buf);

/* Pinned (page-locked where the driver can) host memory for staging copies. */
typedef struct clt_pinned clt_pinned;
CLT_API int clt_pinned_create(clt_context *ctx, size_t bytes, clt_pinned **out);
CLT_API void clt_pinned_destroy(clt_pinned *p);
CLT_API void *clt_pinned_ptr(const clt_pinned *p);
CLT_API size_t clt_pinned_size(const clt_pinned *p);

/* ---- tensor views -------------------------------------------------------- */

#define CLT_MAX_DIMS 6

/* A view of a flat buffer: (cl_mem, byte offset, shape, dtype), row-major and
 * contiguous. Views do not own their buffer. */
typedef struct clt_tensor {
  cl_mem buf;
  size_t offset;            /* bytes from the start of buf */
  clt_dtype dtype;
  int ndim;
  int64_t shape[CLT_MAX_DIMS];
} clt_tensor;

/* Make a view; the shape must be positive and fit inside buf from offset,
 * and offset must be a multiple of the element size (else CLT_ESHAPE). */
CLT_API int clt_tensor_view(cl_mem buf, size_t offset, clt_dtype dtype, int ndim,
                            const int64_t *shape, clt_tensor *out);
CLT_API int64_t clt_tensor_numel(const clt_tensor *t);
CLT_API size_t clt_tensor_bytes(const clt_tensor *t);
/* "(64, 784) f32" into buf. */
CLT_API const char *clt_tensor_shape_str(const clt_tensor *t, char *buf, size_t len);

/* Copy the whole view from or to host memory; `bytes` must equal the view's
 * size. Both return when the host memory may be reused. */
CLT_API int clt_tensor_upload(clt_context *ctx, const clt_tensor *t, const void *host, size_t bytes);
/* The same without waiting: the host memory (best a clt_pinned buffer) must
 * stay untouched until the queue has passed the copy (clt_context_finish, or
 * a later blocking call on the same context). */
CLT_API int clt_tensor_upload_async(clt_context *ctx, const clt_tensor *t, const void *host, size_t bytes);
CLT_API int clt_tensor_download(clt_context *ctx, const clt_tensor *t, void *host, size_t bytes);

/* ---- elementwise kernels and reductions (float32) ------------------------ */

CLT_API int clt_fill(clt_context *ctx, const clt_tensor *x, float value);          /* x = value */
CLT_API int clt_scale(clt_context *ctx, const clt_tensor *x, float alpha);         /* x *= alpha */
CLT_API int clt_axpy(clt_context *ctx, float alpha, const clt_tensor *x,
                     const clt_tensor *y);                                         /* y += alpha x */
CLT_API int clt_add(clt_context *ctx, const clt_tensor *a, const clt_tensor *b,
                    const clt_tensor *out);                                        /* out = a + b */
CLT_API int clt_mul(clt_context *ctx, const clt_tensor *a, const clt_tensor *b,
                    const clt_tensor *out);                                        /* out = a * b */
/* Sum and sum of squares, in a fixed order (the same bits every run on a
 * device), returned to the host. */
CLT_API int clt_sum(clt_context *ctx, const clt_tensor *x, float *out);
CLT_API int clt_sumsq(clt_context *ctx, const clt_tensor *x, float *out);
/* dst = src converted from f32 to f16 (rounded to nearest even; beyond
 * 65504 becomes inf) or from f16 to f32; the same element count. */
CLT_API int clt_convert(clt_context *ctx, const clt_tensor *src, const clt_tensor *dst);

/* ---- GEMM (CLBlast) ------------------------------------------------------- */

typedef enum clt_transpose { CLT_NO_TRANS = 0, CLT_TRANS = 1 } clt_transpose;

/* A row-major matrix operand: element (i, j) is at buf[offset + i*ld + j],
 * offset and ld counted in floats. */
typedef struct clt_matrix {
  cl_mem buf;
  size_t offset;
  size_t ld;
} clt_matrix;

/* C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C. Shapes, leading
 * dimensions and buffer bounds are checked first (CLT_ESHAPE); a CLBlast
 * failure is CLT_EBLAS naming the routine and the shapes. */
CLT_API int clt_sgemm(clt_context *ctx, clt_transpose ta, clt_transpose tb,
                      size_t m, size_t n, size_t k, float alpha,
                      clt_matrix a, clt_matrix b, float beta, clt_matrix c);
/* `batch` GEMMs of one shape whose operands sit a fixed stride apart (in
 * floats) in the same buffers: C_i = alpha op(A_i) op(B_i) + beta C_i. */
CLT_API int clt_sgemm_batched(clt_context *ctx, clt_transpose ta, clt_transpose tb,
                              size_t m, size_t n, size_t k, float alpha,
                              clt_matrix a, size_t a_stride, clt_matrix b, size_t b_stride,
                              float beta, clt_matrix c, size_t c_stride, size_t batch);


/* ---- optimizer step -------------------------------------------------------- */

/* One fused optimizer step over n parameters: grads are first multiplied by
 * grad_scale (1/global batch times the clipping factor), then weight decay
 * and the update are applied. `state` holds clt_optimizer_state_per_param(cfg)
 * x n floats (zero at the start of training), slot after slot in the order
 * libcltrain(3) names them (Adam: m in the first n floats, v in the next
 * n); `t` is the 1-based step number (Adam's bias correction). All three
 * tensors are f32 views of n (or k*n) elements; state may be NULL for an
 * optimizer that keeps none (SGD without momentum). */
CLT_API int clt_optimizer_step(clt_context *ctx, const clt_optimizer_config *cfg, int64_t t, float lr,
                               float grad_scale, const clt_tensor *params, const clt_tensor *grads,
                               const clt_tensor *state);
/* The same with a decay mask: n u8 values from the tensor's offset,
 * 0 where weight decay does not apply (biases, norms and embeddings in
 * GPT-2's AdamW), or NULL for every parameter. */
CLT_API int clt_optimizer_step_masked(clt_context *ctx, const clt_optimizer_config *cfg, int64_t t, float lr,
                                      float grad_scale, const clt_tensor *params, const clt_tensor *grads,
                                      const clt_tensor *state, const clt_tensor *decay);
/* ---- collectives on device buffers --------------------------------------
 *
 * Host-staged: chunks are read into pinned host memory with non-blocking
 * reads, the ring runs on them while later chunks are still being read, and
 * finished chunks are written back while the ring goes on. The queue must be
 * in-order (or everything that produces buf must be finished), and the call
 * returns when buf holds the result. The first run on a set of queues
 * allocates count x element size of pinned memory per queue; later runs on
 * the same queues reuse it. For an all-reduce or allgather of a single
 * buffer of a device whose memory is the host's
 * (CL_DEVICE_HOST_UNIFIED_MEMORY: PoCL, rusticl) the ring runs in place,
 * with no copies or staging: on a buffer from clt_buffer_create that is
 * host-shared (PoCL) once clFinish(queue) returns, with no other command
 * (that wait has no CLT_TIMEOUT deadline: a queue that never finishes holds
 * the call, and the other ranks' deadlines name this rank); on any other
 * buffer between a map and an unmap, each waited for under CLT_TIMEOUT.
 * Use clt_context_queue() for a clt_context. */

/* All-reduce count elements of buf from byte offset `offset`, in place. */
CLT_API int clt_allreduce_run_device(clt_allreduce_plan *plan, cl_command_queue queue, cl_mem buf,
                                     size_t offset);
/* Several devices in one process (the plan's `replicas` of them): the
 * replicas are summed first (in the order given, the same on every run),
 * then the ring runs across ranks, then every replica gets the result.
 * offsets may be NULL (every buffer from byte 0), here and below. */
CLT_API int clt_allreduce_run_devices(clt_allreduce_plan *plan, int n, const cl_command_queue *queues,
                                      const cl_mem *bufs, const size_t *offsets);
/* Reduce-scatter count elements of buf from byte offset `offset`: this
 * rank's part of buf receives the result, the rest of buf is not written. */
CLT_API int clt_reduce_scatter_run_device(clt_reduce_scatter_plan *plan, cl_command_queue queue, cl_mem buf,
                                          size_t offset);
/* The plan's `replicas` buffers of this process are summed first (as in
 * clt_allreduce_run_devices); every one gets this rank's part. */
CLT_API int clt_reduce_scatter_run_devices(clt_reduce_scatter_plan *plan, int n, const cl_command_queue *queues,
                                           const cl_mem *bufs, const size_t *offsets);
/* Allgather count elements of buf from byte offset `offset`: this rank's
 * part is read, every other part is written. */
CLT_API int clt_allgather_run_device(clt_allgather_plan *plan, cl_command_queue queue, cl_mem buf, size_t offset);
/* The plan's `replicas` buffers: this rank's part is read from the first
 * (they hold the same), and every buffer gets the whole result. */
CLT_API int clt_allgather_run_devices(clt_allgather_plan *plan, int n, const cl_command_queue *queues,
                                      const cl_mem *bufs, const size_t *offsets);
/* Broadcast `bytes` bytes from the root rank's first buffer to every buffer
 * of every rank (n buffers on this rank, at byte offsets). */
CLT_API int clt_bcast_devices(clt_comm *comm, int root, size_t bytes, int n, const cl_command_queue *queues,
                              const cl_mem *bufs, const size_t *offsets);

/* ---- training on a batch in device buffers -------------------------------
 *
 * clt_trainer_step, or clt_trainer_step_targets for a regression model, on
 * n samples that an application keeps in OpenCL buffers of its own (a
 * simulation on a GPU): x holds n * clt_model_input_size float32 and y n *
 * clt_model_labels_per_sample values, each from byte 0: int32 labels for a
 * classifier, float32 targets for a regression model (the model's loss says
 * which). They are read on the caller's `queue`, so after everything queued
 * on it before (the step that wrote them), into host memory, and the step
 * then runs exactly as on host memory: the buffers may be on any device
 * and context, the labels or targets are checked, and every guarantee of
 * clt_trainer_step holds. A buffer smaller than n samples need, no queue
 * with n > 0, or a read that fails is CLT_EINVAL naming it, on every rank
 * (nothing changes). A queue that does not come to the reads within
 * CLT_TIMEOUT (the trainer's communicator's: held by an event that never
 * completes, or a device that hangs) is CLT_ETIMEDOUT naming its device;
 * the reads stay queued and write into host memory of the library's, which
 * is left to them. n may be 0 on some ranks (x, y and queue then unused).
 * Collective. */
CLT_API int clt_trainer_step_buffers(clt_trainer *t, cl_command_queue queue, cl_mem x, cl_mem y, int64_t n,
                                     clt_step_result *out);

#ifdef __cplusplus
}
#endif
#endif /* CLTRAIN_OPENCL_H */
