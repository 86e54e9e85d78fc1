/*
 * internal.h: what the library's sources share and users never see: error
 * recording, the check macros used at every boundary, and the layouts of the
 * opaque objects.
 */
#ifndef CLT_INTERNAL_H
#define CLT_INTERNAL_H

#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cltrain.h>
#include <cltrain/opencl.h>

#if defined(__GNUC__)
#  define CLT__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#  define CLT__PRINTF(a, b)
#endif

/* ---- errors --------------------------------------------------------------- */

/* Record this thread's last error (printf-style detail) and return status,
 * so callers write `return clt__error(CLT_EINVAL, "...", ...)`. */
int clt__error(int status, const char *fmt, ...) CLT__PRINTF(2, 3);
/* Put context in front of the current detail: "while X: <old detail>". */
int clt__error_prefix(int status, const char *fmt, ...) CLT__PRINTF(2, 3);
/* "CL_OUT_OF_RESOURCES" for an OpenCL error code. */
const char *clt__cl_error_name(cl_int err);
/* Map an OpenCL error to our status (allocation failures to CLT_EDEVMEM). */
int clt__cl_status(cl_int err);

/* Check an OpenCL call: record the expression, the decoded code and
 * file:line, set `rc` and jump to the function's single `fail` label. */
#define CLT_CL_TRY(expr)                                                        \
  do {                                                                          \
    cl_int clt__e = (expr);                                                     \
    if (clt__e != CL_SUCCESS) {                                                 \
      rc = clt__error(clt__cl_status(clt__e), "%s failed with %s (%d) at %s:%d", \
                      #expr, clt__cl_error_name(clt__e), (int)clt__e,           \
                      __FILE__, __LINE__);                                      \
      goto fail;                                                                \
    }                                                                           \
  } while (0)

/* The arguments of a public function (check them before anything else, an
 * out-parameter before it is written): a NULL pointer is CLT_EINVAL naming
 * the function and the argument as cltrain.h names it, "clt_trainer_params:
 * out is NULL"; a NULL object adds that it was never made (or its making
 * failed); a path, that it must name a file. */
int clt__null_arg(const char *fn, const char *arg, const char *what);
/* CLT_OK, or that error for a NULL or empty path (for checks that every
 * rank must agree on before returning). */
int clt__path_arg(const char *fn, const char *arg, const char *path);
#define CLT_ARG(p)                                                              \
  do {                                                                          \
    if (!(p)) return clt__null_arg(__func__, #p, NULL);                         \
  } while (0)
#define CLT_HANDLE(p, what)                                                     \
  do {                                                                          \
    if (!(p)) return clt__null_arg(__func__, #p, what);                         \
  } while (0)
#define CLT_PATH_ARG(p)                                                         \
  do {                                                                          \
    if (!(p) || !*(p)) return clt__path_arg(__func__, #p, (p));                 \
  } while (0)

/* The library's on/off environment switches (env.c): 1 or 0 as the
 * variable says, -1 when it is unset or empty (the caller's default; a
 * value that is neither 0 nor 1 is refused by clt__env_check when a
 * context or communicator is made, so it never reaches here). */
int clt__env_switch(const char *name);
/* CLT_EINVAL naming the first switch that holds anything but 0 or 1. */
int clt__env_check(void);

/* Check one of our own calls: keep its detail, set rc, jump to fail. */
#define CLT_TRY(expr)                                                           \
  do {                                                                          \
    rc = (expr);                                                                \
    if (rc < 0) goto fail;                                                      \
  } while (0)

/* ---- logging -------------------------------------------------------------- */

void clt__log(clt_log_level level, const char *fmt, ...) CLT__PRINTF(2, 3);

/* Whether the device runs a work-group's items as a loop, one after the
 * other (PoCL's CPU devices; rusticl's llvmpipe runs them in SIMD lanes):
 * then a work-item's vectors are the CPU's SIMD registers, and kernels
 * that tile in registers can take large tiles. */
int clt__items_run_as_loops(const clt_context *ctx);
/* Clamp a wanted work-group size to a power of two the kernel and device allow. */
size_t clt__clamp_wgs(clt_context *ctx, cl_kernel k, size_t want);
/* Launch k over exactly n items, [0, n): the whole groups of 256 (clamped)
 * first, then one group of the rest through a global offset, so that the
 * kernel needs no bound test. PoCL vectorizes a work-group's loop over its
 * items, which an `if (i < n)` around the body can stop: without it, GELU
 * over 2048 x 512 ran in 1.35 ms instead of 2.4. */
int clt__launch_exact_1d(clt_context *ctx, cl_kernel k, size_t n);

/* Pinned host memory for a raw OpenCL context and queue (clt_pinned_create
 * is this for a clt_context); the queue must outlive it. */
int clt__pinned_create_cl(cl_context context, cl_command_queue queue, size_t bytes, clt_pinned **out);

/* ---- timelines (trace.c) ---------------------------------------------------
 * A rank's spans of work on named lanes, written as a Chrome / Perfetto
 * trace by clt_trainer_trace_save. Every function takes a NULL trace and
 * does nothing, so callers trace unconditionally. */

typedef struct clt__trace clt__trace;
#define CLT__TRACE_LANES 32           /* lanes per rank: the host thread, the replicas' devices */
#define CLT__TRACE_MAX_SPANS (1 << 22) /* spans per rank kept (about 300 MB); later ones are dropped */
int64_t clt__trace_ns(void); /* nanoseconds, monotonic, the clock of every span */
int clt__trace_create(clt__trace **out);
void clt__trace_destroy(clt__trace *tr);
/* The lane named `name` (made on first use). */
int clt__trace_lane(clt__trace *tr, const char *name);
/* Work `name` (printf-style) of category `cat` (a string constant) on
 * `lane` from t0 to t1 (clt__trace_ns times). */
void clt__trace_span(clt__trace *tr, int lane, const char *cat, int64_t t0, int64_t t1, const char *fmt, ...)
    CLT__PRINTF(6, 7);
/* 1 when spans were dropped at CLT__TRACE_MAX_SPANS. */
int clt__trace_dropped(const clt__trace *tr);
/* The trace's events as Trace Event Format objects, comma-separated (the
 * process's name and lanes first), for process `pid` named `process`:
 * a malloc'd string of *len bytes. */
int clt__trace_events(const clt__trace *tr, int pid, const char *process, char **out, size_t *len);

/* ---- small helpers -------------------------------------------------------- */

double clt__now(void);                     /* seconds, monotonic */

void *clt__calloc(size_t n, size_t size);  /* records CLT_ENOMEM on failure */
char *clt__strdup(const char *s);          /* likewise */
/* mkdir -p dir; failures name it as `what` ("the checkpoint directory"). */
int clt__make_dirs(const char *dir, const char *what);
/* Copy with truncation, always NUL-terminated. */
void clt__strlcpy(char *dst, const char *src, size_t size);
/* Case-insensitive substring test. */
int clt__contains_nocase(const char *haystack, const char *needle);
/* "1.5 GiB" into buf. */
const char *clt__fmt_bytes(uint64_t bytes, char *buf, size_t len);

/* ---- binary16 (half.c) ------------------------------------------------------ */

/* IEEE 754 binary16 held in a uint16_t, converted with integer arithmetic
 * only (no _Float16, any rounding mode; the reductions' F16C loop on x86
 * gives the same bits). To half: round to nearest,
 * ties to even; from 65520 up +-inf; every NaN becomes the quiet NaN 0x7e00,
 * because which NaN an addition returns (sign, payload) depends on the CPU
 * and the order of the operands, and the ranks' bits must agree. To float:
 * exact (NaN payloads kept). */
uint16_t clt__half_from_float(float f);
float clt__float_from_half(uint16_t h);
/* The reductions of the fp16 all-reduce, with the bits of the scalar
 * functions: dst[i] = half(dst[i] + src[0][i] + ... + src[nsrc-1][i]),
 * added in that order in float and rounded once; x[i] = half(x[i] / by). */
void clt__halves_sum(uint16_t *dst, const uint16_t *const *src, int nsrc, size_t n);
void clt__halves_divide(uint16_t *x, size_t n, float by);
/* The same with a chosen loop, for tests: CLT_EUNSUPPORTED where this
 * build or CPU lacks it. */
enum {
  CLT__HALF_IMPL_SCALAR = 0,
  CLT__HALF_IMPL_V16 = 1,
  CLT__HALF_IMPL_AVX2 = 2,
  CLT__HALF_IMPL_F16C = 3, /* x86's conversion instructions */
  CLT__HALF_NIMPL = 4
};
int clt__halves_sum_impl(int impl, uint16_t *dst, const uint16_t *const *src, int nsrc, size_t n);
int clt__halves_divide_impl(int impl, uint16_t *x, size_t n, float by);

/* ---- object layouts ------------------------------------------------------- */

struct clt_device_entry {
  clt_device_info info;
  cl_platform_id platform;
  cl_device_id device;
};

struct clt_devices {
  int count;
  struct clt_device_entry *entries;
};

/* One cached program: (source name, options) -> program, with its kernels. */
struct clt_program_entry {
  char *source_name;
  char *options;
  cl_program program;
  struct clt_kernel_entry *kernels;
  struct clt_program_entry *next;
};

struct clt_kernel_entry {
  char *name;
  cl_kernel kernel;
  struct clt_kernel_entry *next;
};

struct clt_context {
  clt_device_info info;
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;
  cl_command_queue queue;      /* in-order, profiling on: all compute */
  cl_command_queue xfer_queue; /* in-order: copies that overtake queued compute */
  struct clt_program_entry *programs;
  cl_mem reduce_scratch; /* partial sums of clt_sum/clt_sumsq, then their results: clt__context_buffer's */
  cl_mem scratch;        /* clt__context_scratch's */
  cl_mem gemm_scratch;   /* src/core/blas_cpu.c's transposed operands, beside any op's scratch */
  int counted;           /* made whole: counted among the live contexts */
  int blas_said;         /* its GEMM backend logged (src/core/blas.c) */
  double wait_timeout_s; /* the longest wait for the device (0: CLT_TIMEOUT, else 300 s): clt__context_timeout */
  int native_gemm;       /* host GEMMs as native kernels on the queue: 0 not asked yet, 1 yes, -1 no */
  int shared_buffers;    /* clt_buffer_create's buffers are host-shared (src/core/shared_buffers.c) */
  /* Called between polls while clt__wait_event waits (NULL: it sleeps on
   * the event instead): a pipeline stage moves its messages on while its
   * device computes, as MPI progresses only inside MPI calls. */
  void (*progress)(void *user);
  void *progress_user;
};

/* src/core/shared_buffers.c: buffers whose bytes the host reads and writes in
 * place between commands. _on: whether a device takes them (unified
 * memory, fine-grained buffer SVM, CLT_SHARED_BUFFERS not 0); _create: one
 * of `bytes` (NULL with *err set on failure); _host: the host address of a
 * buffer made so, or of a sub-buffer of one, else NULL. */
int clt__shared_buffers_on(cl_device_id device, const clt_device_info *info);
cl_mem clt__shared_buffer_create(cl_context context, size_t bytes, cl_int *err);
void *clt__shared_buffer_host(cl_mem buf);
/* A buffer of the context over `bytes` of host memory at host (page-
 * aligned, kept alive by the caller until the buffer is released) that
 * the device reads and writes in place, registered as host-shared: on a
 * context with shared_buffers only. */
int clt__shared_buffer_wrap(clt_context *ctx, void *host, size_t bytes, cl_mem *out);

/* Call fn whenever the last context of the process is destroyed (each
 * function once, however often it is registered; a few at most): a cache
 * of OpenCL objects kept beyond the contexts is emptied there, while the
 * driver is still loaded (src/core/blas.c: CLBlast's). */
void clt__on_last_context(void (*fn)(void));

/* src/core/blas_cpu.c: CPU devices' GEMMs on our own kernels (cl/gemm_cpu.cl).
 * _on: whether ctx's device takes them (PoCL's CPU devices unless
 * CLT_CPU_GEMM=0; any CPU device with CLT_CPU_GEMM=1); _use: whether this
 * one goes there (m >= 16 when B is transposed, every
 * dimension below 2^32); _sgemm: as clt__host_sgemm below. */
int clt__cpu_gemm_on(const clt_context *ctx);
int clt__cpu_gemm_use(const clt_context *ctx, clt_transpose tb, size_t m, size_t n, size_t k, clt_matrix a,
                      clt_matrix b, clt_matrix c);
int clt__cpu_sgemm(clt_context *ctx, clt_transpose ta, clt_transpose tb, size_t m, size_t n, size_t k, float alpha,
                   clt_matrix a, size_t as, clt_matrix b, size_t bs, float beta, clt_matrix c, size_t cs,
                   size_t batch);

/* GEMMs on the host's CBLAS for CPU devices with unified memory
 * (src/core/blas_host.c). _use: whether ctx's GEMMs go there (built with a host
 * BLAS, a CPU device, unified memory, CLT_HOST_BLAS not 0); _threads: the
 * threads it gives them (the device's compute units, at most the cores);
 * _name: the library configure found ("none" without). _sgemm: row-major
 * C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch on mapped buffers,
 * ordered with ctx's queue; shapes already checked, m, n, k > 0. */
int clt__host_blas_available(void);
int clt__host_blas_use(const clt_context *ctx);
int clt__host_blas_threads(const clt_context *ctx);
/* Whether ctx's host GEMMs are native kernels on its queue (the device runs
 * them, CLT_HOST_BLAS_NATIVE is not 0), so the calling thread never waits
 * for the queue; else the calling thread waits and runs them. */
int clt__host_blas_native(clt_context *ctx);
const char *clt__host_blas_name(void);
/* Whether work is enqueued on ctx without the calling thread waiting for
 * the device (not so with host GEMMs the calling thread runs): only then
 * may enqueued work wait on something the caller does later. */
int clt__context_enqueues_ahead(clt_context *ctx);
/* The kernels OpenBLAS runs (its core name: "Haswell", "SkylakeX"; the
 * environment's OPENBLAS_CORETYPE chooses); NULL for another CBLAS. */
const char *clt__host_blas_core(void);
int clt__host_sgemm(clt_context *ctx, clt_transpose ta, clt_transpose tb, size_t m, size_t n, size_t k, float alpha,
                    clt_matrix a, size_t as, clt_matrix b, size_t bs, float beta, clt_matrix c, size_t cs,
                    size_t batch);

/* Wait until ev completes, for at most timeout_s seconds (<= 0: forever):
 * CLT_ETIMEDOUT naming `what` and the device when it does not, the
 * command's error when it failed. Polls, sleeping once the wait is longer
 * than a moment, so a device that hangs cannot hang its caller. */
int clt__wait_event(clt_context *ctx, cl_event ev, double timeout_s, const char *what);
/* The same for events of a queue that is not a context's (the caller's),
 * n of them, at most timeout_s in all; the device is named from the
 * queue. */
int clt__wait_queue(cl_command_queue queue, const cl_event *evs, size_t n, double timeout_s, const char *what);
/* clFinish with that deadline: a marker on queue, flushed and waited for. */
int clt__finish_queue(cl_command_queue queue, double timeout_s, const char *what);
/* The longest a wait on ctx's device may take: the owner's
 * (wait_timeout_s, the job's CLT_TIMEOUT for a trainer's replicas), else
 * CLT_TIMEOUT, else 300 s. */
double clt__context_timeout(const clt_context *ctx);

/* A device buffer of at least `bytes` for an op's temporaries, owned by the
 * context and grown on demand. Ops on the in-order compute queue may use it
 * one after the other: each has finished with it before the next runs (a
 * buffer replaced while queued kernels still use it is freed only after
 * them). Reserve the most an owner will need up front to fail early. */
int clt__context_scratch(clt_context *ctx, size_t bytes, cl_mem *out);
/* out[k] = clt_sumsq of x[k], k < n: every reduction queued, then one read
 * of all n (the same kernels, so the same bits, as n calls of clt_sumsq,
 * which would each wait for the device). */
int clt__sumsq_many(clt_context *ctx, const clt_tensor *x, int n, float *out);
/* The same for the buffer in *slot (one of ctx's), `what` naming it in
 * the error when it cannot grow. */
int clt__context_buffer(clt_context *ctx, cl_mem *slot, size_t bytes, const char *what, cl_mem *out);

/* The embedded kernel sources (generated from cl/ at build time). */
struct clt_kernel_source {
  const char *name;
  const char *text;
};
extern const struct clt_kernel_source clt__kernel_sources[];
extern const char *const clt__kernel_source_names[];

#endif /* CLT_INTERNAL_H */
