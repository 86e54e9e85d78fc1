/*
 * cltrain.h: the core public API of libcltrain, a portable multi-vendor GPU
 * training runtime. This header includes neither CL/cl.h nor mpi.h; OpenCL and
 * MPI interop live in cltrain/opencl.h and cltrain/mpi.h.
 *
 * Conventions
 *   - Every function that can fail returns 0 (CLT_OK) or a negative CLT_E* code
 *     and hands results back through out-parameters. Nothing in the library
 *     exits, aborts or calls MPI_Abort: the caller decides how to die.
 *   - After a failure, clt_last_error() gives a sentence saying what failed,
 *     where and, when we know, what to do about it.
 *   - Objects are opaque, made by *_create / *_discover and released by
 *     *_destroy; destroy(NULL) is a no-op.
 *
 * Thread safety
 *   - clt_last_error() is per thread: each thread sees the detail of its own
 *     last failure.
 *   - clt_log_set() and clt_log_set_level() may be called at any time; the
 *     callback may be called from any thread that uses the library.
 *   - A clt_devices list is immutable once made and may be shared freely.
 *   - A clt_context (one device's context, queue and program cache) must be
 *     used by one thread at a time. Different contexts may be used from
 *     different threads concurrently.
 *   - A clt_comm and the plans made on it must be used by one thread at a
 *     time, and every MPI call the library makes is made from that thread, so
 *     MPI_THREAD_FUNNELED is enough as long as that thread is the one that
 *     initialised MPI.
 */
#ifndef CLTRAIN_H
#define CLTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include <cltrain/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#  define CLT_API __declspec(dllexport)
#elif defined(__GNUC__)
#  define CLT_API __attribute__((visibility("default")))
#else
#  define CLT_API
#endif

/* ---- status codes ------------------------------------------------------- */

/* X(name, value, message): the one list that makes the enum, clt_strerror()
 * and clt_status_name(). Values never change once released. */
#define CLT_STATUS_MAP(X)                                                     \
  X(OK,          0,  "success")                                               \
  X(EINVAL,     -1,  "invalid argument")                                      \
  X(ENOMEM,     -2,  "out of host memory")                                    \
  X(ENOICD,     -3,  "no OpenCL platform (is an ICD installed?)")            \
  X(ENODEV,     -4,  "no OpenCL device")                                      \
  X(ENOMATCH,   -5,  "device spec matches no device")                         \
  X(ECL,        -6,  "OpenCL call failed")                                    \
  X(EBUILD,     -7,  "OpenCL program failed to build")                        \
  X(EDEVMEM,    -8,  "out of device memory")                                  \
  X(EUNSUPPORTED, -9, "device lacks a needed feature")                        \
  X(ESHAPE,    -10,  "shapes do not fit")                                     \
  X(EBLAS,     -11,  "CLBlast call failed")                                   \
  X(EMPI,      -12,  "MPI call failed")                                       \
  X(ETIMEDOUT, -13,  "timed out waiting for a peer")                          \
  X(EMISMATCH, -14,  "ranks disagree")                                        \
  X(EIO,       -15,  "input/output error")                                    \
  X(EFORMAT,   -16,  "malformed file or text")                                \
  X(ENOTFOUND, -17,  "not found")                                             \
  X(ENONFINITE, -18, "non-finite value")                                      \
  X(EINTERNAL, -19,  "internal error (a bug in cltrain)")

typedef enum clt_status {
#define CLT__STATUS_ENUM(name, value, msg) CLT_##name = value,
  CLT_STATUS_MAP(CLT__STATUS_ENUM)
#undef CLT__STATUS_ENUM
} clt_status;

/* A short sentence for a status code ("out of device memory"). */
CLT_API const char *clt_strerror(int status);
/* The code's name ("CLT_EDEVMEM"); "CLT_UNKNOWN" for codes not in the list. */
CLT_API const char *clt_status_name(int status);
/* The detail of this thread's last failure: what failed, where, what to do.
 * Empty when nothing has failed. Valid until this thread's next call. */
CLT_API const char *clt_last_error(void);
/* Forget this thread's last error. */
CLT_API void clt_clear_error(void);

/* ---- version ------------------------------------------------------------- */

/* The library's version, which may differ from the headers' (CLT_VERSION_*). */
CLT_API const char *clt_version(void);
CLT_API int clt_version_hex(void);

/* ---- logging ------------------------------------------------------------- */

typedef enum clt_log_level {
  CLT_LOG_NONE = 0,
  CLT_LOG_ERROR = 1,
  CLT_LOG_WARN = 2,
  CLT_LOG_INFO = 3,
  CLT_LOG_DEBUG = 4,
  CLT_LOG_TRACE = 5
} clt_log_level;

typedef void (*clt_log_fn)(clt_log_level level, const char *msg, void *user);

/* Route library messages to fn (NULL restores the default: stderr). */
CLT_API void clt_log_set(clt_log_fn fn, void *user);
/* Messages above this level are dropped. The default comes from the
 * environment variable CLT_LOG_LEVEL (none|error|warn|info|debug|trace or
 * 0..5) and is warn when that is unset. */
CLT_API void clt_log_set_level(clt_log_level level);
CLT_API clt_log_level clt_log_get_level(void);
/* Parse "warn", "3", ... into a level; -1 when the text is no level. */
CLT_API int clt_log_level_parse(const char *text);
CLT_API const char *clt_log_level_name(clt_log_level level);

/* ---- data types ---------------------------------------------------------- */

typedef enum clt_dtype { CLT_F32 = 0, CLT_F16 = 1, CLT_I32 = 2, CLT_U8 = 3 } clt_dtype;

CLT_API size_t clt_dtype_size(clt_dtype dtype);
CLT_API const char *clt_dtype_name(clt_dtype dtype);

/* ---- devices ------------------------------------------------------------- */

typedef enum clt_device_type {
  CLT_DEVICE_CPU = 1,
  CLT_DEVICE_GPU = 2,
  CLT_DEVICE_ACCELERATOR = 4,
  CLT_DEVICE_OTHER = 8
} clt_device_type;

/* What we know of one device. Strings are NUL-terminated and may be cut. */
typedef struct clt_device_info {
  int index;                  /* position in the discovered list (cltrain devices) */
  int platform_index;         /* P in "P:D" */
  int device_index;           /* D in "P:D": position within its platform */
  clt_device_type type;
  char name[128];
  char vendor[128];
  char platform_name[128];
  char platform_vendor[128];
  char driver_version[64];
  char device_version[64];    /* "OpenCL 3.0 PoCL ..." */
  char opencl_c_version[64];  /* "OpenCL C 1.2 ..." */
  int opencl_c_major, opencl_c_minor;
  unsigned compute_units;
  unsigned clock_mhz;
  uint64_t global_mem_bytes;
  uint64_t max_alloc_bytes;
  uint64_t local_mem_bytes;
  size_t max_work_group_size;
  int fp16;                   /* cl_khr_fp16 */
  int fp64;                   /* cl_khr_fp64 or a double fp config */
  int unified_memory;         /* host and device share memory */
  char pci_bus_id[32];        /* "0000:3b:00.0" where the vendor exposes it, else "" */
} clt_device_info;

typedef struct clt_devices clt_devices;

/* Every device of every OpenCL platform, in platform order. No ICD at all is
 * CLT_ENOICD; platforms without devices give an empty list and CLT_OK. */
CLT_API int clt_devices_discover(clt_devices **out);
CLT_API void clt_devices_destroy(clt_devices *devs);
CLT_API int clt_devices_count(const clt_devices *devs);
/* NULL when i is out of range. */
CLT_API const clt_device_info *clt_devices_info(const clt_devices *devs, int i);
CLT_API const char *clt_device_type_name(clt_device_type type);

/* Choose devices by a spec: a comma-separated list of terms, each one of
 *   all | gpu | cpu | accelerator     every device (of that type)
 *   P:D                               device D of platform P
 *   N                                 the N-th device of the list
 *   TEXT                              devices whose platform, vendor or name
 *                                     contains TEXT (case-insensitive):
 *                                     pocl, rusticl, nvidia, amd, intel, ...
 *   TERM:N                            the N-th device that TERM chooses
 * The result keeps the order of the terms, without repeats. NULL or "" means
 * the environment variable CLT_DEVICES, and "all" when that is unset.
 * A term that matches nothing is CLT_ENOMATCH; the error lists what exists. */
CLT_API int clt_devices_select(const clt_devices *all, const char *spec, clt_devices **out);

/* ---- runtime: one device's context, queue and programs ------------------ */

typedef struct clt_context clt_context;

/* Make a context and an in-order queue on device i of devs. */
CLT_API int clt_context_create(const clt_devices *devs, int i, clt_context **out);
CLT_API void clt_context_destroy(clt_context *ctx);
CLT_API const clt_device_info *clt_context_device(const clt_context *ctx);
/* Wait for everything queued on the context's queue. */
CLT_API int clt_context_finish(clt_context *ctx);

/* ---- communicators and collectives ---------------------------------------
 *
 * A clt_comm is a group of ranks that run collectives together: one rank of
 * an MPI job each (clt_comm_create in cltrain/mpi.h, made from the caller's
 * MPI_Comm) or a single rank (clt_comm_create_local, which works in builds
 * without MPI too, for one process driving several devices).
 *
 * Every collective is numbered (its operation number) and the number travels
 * in the tag of each message. Every wait polls with a deadline: CLT_TIMEOUT
 * seconds (default 300) without progress is CLT_ETIMEDOUT, naming the rank
 * that waits, the peer it waits for, the operation and the step, and the
 * ranks that did not answer. After CLT_ETIMEDOUT or CLT_EMPI messages may
 * still be in flight, so the communicator refuses further collectives (the
 * same error again); the caller should end the job (the cltrain tool calls
 * MPI_Abort). A mismatch found when a plan is made (CLT_EMISMATCH) leaves
 * nothing in flight and the communicator stays usable.
 *
 * Environment, read when a communicator is made:
 *   CLT_TIMEOUT          seconds without progress before a wait fails (300)
 *   CLT_ALLREDUCE_CHUNK  bytes per pipelined message, e.g. 262144 or 1M
 *                        (256K; 1M with 2 ranks)
 *   CLT_ALLREDUCE_SMALL  all-reduces up to this many bytes use recursive
 *                        doubling instead of the ring, up to 4 times as many
 *                        the gather (32K; 0: always the ring)
 * All ranks must see the same values (plans check that they do).
 */

typedef struct clt_comm clt_comm;

/* A one-rank communicator (no MPI involved). */
CLT_API int clt_comm_create_local(clt_comm **out);
/* Release the communicator (and its duplicate of the MPI communicator).
 * Plans made on it must be destroyed first. */
CLT_API void clt_comm_destroy(clt_comm *comm);
CLT_API int clt_comm_rank(const clt_comm *comm);
CLT_API int clt_comm_size(const clt_comm *comm);
/* The rank among the ranks that share this node's memory, and their count. */
CLT_API int clt_comm_local_rank(const clt_comm *comm);
CLT_API int clt_comm_local_size(const clt_comm *comm);
/* The device this rank uses by default: its local rank modulo the number of
 * devices in devs (CLT_ENODEV when devs is empty). */
CLT_API int clt_comm_default_device(const clt_comm *comm, const clt_devices *devs);
/* Seconds without progress before a wait fails (CLT_TIMEOUT by default). */
CLT_API int clt_comm_set_timeout(clt_comm *comm, double seconds);
CLT_API double clt_comm_timeout(const clt_comm *comm);
/* Bytes per pipelined all-reduce message of plans that do not choose. */
CLT_API size_t clt_comm_chunk_bytes(const clt_comm *comm);

typedef enum clt_reduce_op {
  CLT_SUM = 0,
  CLT_AVG = 1 /* the sum divided by the number of buffers in the job */
} clt_reduce_op;

CLT_API const char *clt_reduce_op_name(clt_reduce_op op);

/* Options of an all-reduce plan; zero-initialise, then set what you need. */
typedef struct clt_allreduce_opts {
  size_t chunk_bytes; /* bytes per pipelined message; 0: the communicator's (CLT_ALLREDUCE_CHUNK) */
  int replicas;       /* buffers this rank gives each run (devices in this process); 0 means 1 */
} clt_allreduce_opts;

typedef struct clt_allreduce_plan clt_allreduce_plan;

/* Plan an all-reduce of `count` elements. Collective: every rank of comm
 * calls it, and (count, dtype, op, chunk size) must agree across ranks, or
 * every rank gets CLT_EMISMATCH naming the ranks and values that differ.
 * count may be 0 or smaller than the number of ranks. float32 only for now
 * (CLT_EUNSUPPORTED for the others). opts may be NULL. Host memory for the
 * schedule is allocated here; pinned staging for device runs on first use. */
CLT_API int clt_allreduce_plan_create(clt_comm *comm, size_t count, clt_dtype dtype, clt_reduce_op op,
                                      const clt_allreduce_opts *opts, clt_allreduce_plan **out);
CLT_API void clt_allreduce_plan_destroy(clt_allreduce_plan *plan);
CLT_API size_t clt_allreduce_plan_count(const clt_allreduce_plan *plan);
/* "ring"; for small messages, where the number of steps matters more than
 * bandwidth, "recursive-doubling" or "gather" (to rank 0 and back, for 3
 * to 8 ranks that are not a power of two); "local" on one rank. */
CLT_API const char *clt_allreduce_plan_algorithm(const clt_allreduce_plan *plan);

/* All-reduce a host buffer of the plan's count elements in place. Every rank
 * ends with bitwise-identical results. The plan must have replicas == 1.
 * Device buffers: clt_allreduce_run_device in cltrain/opencl.h. */
CLT_API int clt_allreduce_run(clt_allreduce_plan *plan, void *buf);

/* Broadcast `bytes` bytes from root's buf to every rank's buf. Collective;
 * (bytes, root) must agree across ranks (else CLT_EMISMATCH on every rank). */
CLT_API int clt_bcast(clt_comm *comm, void *buf, size_t bytes, int root);
/* Gather `bytes` bytes from every rank: recv receives size x bytes, rank r's
 * block at r x bytes. Collective; bytes must agree across ranks. */
CLT_API int clt_allgather(clt_comm *comm, const void *send, size_t bytes, void *recv);

#ifdef __cplusplus
}
#endif
#endif /* CLTRAIN_H */
