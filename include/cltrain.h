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
 *   - Every pointer and object argument is checked before anything else: a
 *     NULL one (an object never made, a Fortran handle never made) is
 *     CLT_EINVAL naming the function and the argument as declared here
 *     ("clt_trainer_params: out is NULL"), and so is an empty string where
 *     a path is needed. A function that returns a value rather than a
 *     status gives, for a NULL object, 0 (counts, sizes), NULL (pointers),
 *     "" or "?" (strings) or NaN, unless it says otherwise; a void one does
 *     nothing. An argument that may be NULL says so. tests/api/test_args
 *     calls every function declared with CLT_API so.
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
 *   - A clt_dataset may be read (counts, shape, clt_dataset_get_batch,
 *     clt_dataset_stats) from any number of threads at once, and by any number
 *     of prefetchers. Changing its normalisation (clt_dataset_normalize*)
 *     must not overlap any other use of it, prefetchers included.
 *   - A clt_sampler keeps a cache of the current epoch's permutation, so even
 *     its queries modify it: use one from one thread at a time (clone it,
 *     cheaply, for another thread). clt_shares_from_weights is pure.
 *   - A clt_prefetcher is driven by one consumer thread (create, next, seek,
 *     set_shares, destroy); its own background thread only decodes into
 *     memory that is already allocated and mapped, and calls no OpenCL or MPI
 *     function. Creating and destroying one with a clt_context uses that
 *     context, so the rule for contexts applies to those two calls.
 *   - A clt_tokenizer keeps a cache of the words it has encoded and scratch
 *     buffers, so encode and decode modify it: use one from one thread at a
 *     time (load another for another thread).
 *   - clt_hf_import, clt_hf_export and their GPT-2 forms share nothing: any
 *     thread may call them, at once, on different files.
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
  int fp32_exact_div_sqrt;    /* float divide and sqrt correctly rounded on request */
  int unified_memory;         /* host and device share memory */
  char pci_bus_id[32];        /* "0000:3b:00.0" where the vendor exposes it, else "" */
} clt_device_info;

typedef struct clt_devices clt_devices;

/* Every device of every OpenCL platform, in platform order. No ICD at all is
 * CLT_ENOICD, naming where the ICD loader looked (OCL_ICD_VENDORS when it
 * is set, else /etc/OpenCL/vendors); platforms without devices give an
 * empty list and CLT_OK. */
CLT_API int clt_devices_discover(clt_devices **out);
CLT_API void clt_devices_destroy(clt_devices *devs);
CLT_API int clt_devices_count(const clt_devices *devs);
/* NULL when i is out of range. */
CLT_API const clt_device_info *clt_devices_info(const clt_devices *devs, int i);

/* A device's peak float32 FLOP/s, the divisor of MFU: the GEMM rate
 * `cltrain bench gemm` measured on it and cached (*source "measured"), else
 * an estimate from its properties: compute units x clock x 2 (a fused
 * multiply-add) x the lanes of a unit, 8 on a CPU and 64 on a GPU
 * (*source "properties"), or 0 when the device gives no clock. The cache is
 * one line a device, "PEAK_FLOPS<TAB>KEY" (KEY: name, platform, driver and
 * PCI bus id, '|'-separated), in $CLT_PEAK_CACHE, else
 * $XDG_CACHE_HOME/cltrain/peak-flops, else ~/.cache/cltrain/peak-flops;
 * a missing cache is no error. source may be NULL. */
CLT_API int clt_device_peak_flops(const clt_device_info *info, double *flops, const char **source);
/* Record a measured peak (> 0) for the device in that cache, replacing its
 * line (the directory made if missing; the file written whole through a
 * temporary file). */
CLT_API int clt_device_peak_flops_save(const clt_device_info *info, double flops);
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
 * MPI_Abort) or tear down: clt_comm_destroy and clt_trainer_destroy wait
 * for no other rank, whatever failed, so every rank can destroy its
 * objects and call MPI_Finalize. An abandoned receive may still be matched
 * until MPI_Finalize and write into its buffer: a plan destroyed after
 * such a failure keeps its staging buffers allocated, and a caller that
 * goes on (to report, to save elsewhere) must keep the buffers it gave the
 * failed call allocated too. A mismatch found when a plan is made (CLT_EMISMATCH) leaves
 * nothing in flight and the communicator stays usable.
 *
 * Environment, read when a communicator is made:
 *   CLT_TIMEOUT          seconds without progress before a wait fails (300)
 *   CLT_ALLREDUCE_CHUNK  bytes per pipelined message, e.g. 262144 or 1M
 *                        (256K; 1M with 2 ranks)
 *   CLT_ALLREDUCE_SMALL  all-reduces up to this many bytes use recursive
 *                        doubling instead of the ring, up to 4 times as many
 *                        the gather (32K; 0: always the ring)
 *   CLT_ALLREDUCE        the algorithm of every all-reduce plan, one of
 *                        clt_allreduce_algorithms(): auto (the cost
 *                        model's choice), ring, recursive-doubling,
 *                        gather, twolevel, shm, rabenseifner or
 *                        twolevel-rabenseifner
 *   CLT_NODE_SIZE        pretend nodes: k (consecutive groups of k ranks) or
 *                        the node sizes in rank order (3,2); by default the
 *                        ranks that share memory (MPI_COMM_TYPE_SHARED)
 *   CLT_COMM_MODEL       a JSON file of the α-β-γ cost model (written by
 *                        `cltrain bench allreduce --fit FILE`)
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
/* The rank among the ranks that share this node's memory, and their count
 * (among CLT_NODE_SIZE's pretend node when that is set). */
CLT_API int clt_comm_local_rank(const clt_comm *comm);
CLT_API int clt_comm_local_size(const clt_comm *comm);
/* This rank's node (0 .. clt_comm_node_count - 1, in order of each node's
 * lowest rank): MPI_COMM_TYPE_SHARED, or CLT_NODE_SIZE's pretend nodes. */
CLT_API int clt_comm_node(const clt_comm *comm);
CLT_API int clt_comm_node_count(const clt_comm *comm);
/* The all-reduce algorithms by name, "auto" first: "auto, ring,
 * recursive-doubling, gather, twolevel, shm, rabenseifner,
 * twolevel-rabenseifner" (doc/scaling.md describes each). */
CLT_API const char *clt_allreduce_algorithms(void);
/* The algorithm of all-reduce plans made from now on, as CLT_ALLREDUCE:
 * one of clt_allreduce_algorithms() (CLT_EINVAL otherwise). Every rank
 * must set the same (plans check). */
CLT_API int clt_comm_set_allreduce(clt_comm *comm, const char *algorithm);
/* For benchmarks and tests (libcltrain(3)): bytes this rank has sent to
 * ranks on its own node and on other nodes, over the communicator's life
 * (every collective, checks included). */
CLT_API void clt_comm_bytes_sent(const clt_comm *comm, uint64_t *intra, uint64_t *inter);
/* For benchmarks and tests: the cost model's time for an all-reduce of
 * `bytes` with `algorithm` (one of clt_allreduce_algorithms() but "auto")
 * on this communicator's ranks and nodes. */
CLT_API int clt_comm_model_predict(const clt_comm *comm, const char *algorithm, size_t bytes, double *seconds);
/* The device this rank uses by default: its local rank modulo the number of
 * devices in devs (CLT_ENODEV when devs is empty). */
CLT_API int clt_comm_default_device(const clt_comm *comm, const clt_devices *devs);
/* Seconds without progress before a wait fails (CLT_TIMEOUT by default). */
CLT_API int clt_comm_set_timeout(clt_comm *comm, double seconds);
CLT_API double clt_comm_timeout(const clt_comm *comm);
/* For benchmarks and tests: bytes per pipelined all-reduce message of
 * plans that do not choose. */
CLT_API size_t clt_comm_chunk_bytes(const clt_comm *comm);
/* For benchmarks and tests: bytes per rank of each round of the
 * shared-memory all-reduce (shm) for plans that do not choose:
 * CLT_ALLREDUCE_CHUNK when set, else 256 KiB
 * when every rank has a core of its own (its node's ranks' CPU affinities
 * cover as many cores as there are ranks, on every node), else 1 MiB. */
CLT_API size_t clt_comm_shm_piece_bytes(const clt_comm *comm);

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
 * count may be 0 or smaller than the number of ranks. dtype CLT_F32, or
 * CLT_F16 (IEEE binary16 in uint16_t; half the bytes on the wire): every
 * reduction step converts to float, adds in float and rounds to half, to
 * nearest even; an average divides the rounded sum in float and rounds
 * again; the replicas of one process are added in float and rounded once.
 * Sums beyond 65504 become +-inf, and an inf or NaN on any rank makes the
 * result non-finite on every rank (NaN comes out as 0x7e00). Other types
 * are CLT_EUNSUPPORTED. opts may be NULL. Host memory for the schedule is
 * allocated here; pinned staging for device runs on first use. */
CLT_API int clt_allreduce_plan_create(clt_comm *comm, size_t count, clt_dtype dtype, clt_reduce_op op,
                                      const clt_allreduce_opts *opts, clt_allreduce_plan **out);
CLT_API void clt_allreduce_plan_destroy(clt_allreduce_plan *plan);
CLT_API size_t clt_allreduce_plan_count(const clt_allreduce_plan *plan);
/* "ring"; for small messages, where the number of steps matters more than
 * bandwidth, "recursive-doubling" or "gather" (to rank 0 and back, for 3
 * to 8 ranks that are not a power of two); "rabenseifner" (recursive
 * halving, then doubling: 2 log2 N steps to the ring's 2 (N - 1));
 * "twolevel" (reduce-scatter in each node, all-reduce of each part across
 * nodes, allgather in each node) or "twolevel-rabenseifner" (the same with
 * Rabenseifner's between nodes) when ranks are on several nodes and the
 * cost model says it is faster; "shm" through a node's shared memory;
 * "local" on one rank. */
CLT_API const char *clt_allreduce_plan_algorithm(const clt_allreduce_plan *plan);

/* All-reduce a host buffer of the plan's count elements in place. Every rank
 * ends with bitwise-identical results. The plan must have replicas == 1.
 * Device buffers: clt_allreduce_run_device in cltrain/opencl.h. */
CLT_API int clt_allreduce_run(clt_allreduce_plan *plan, void *buf);

/* ---- reduce-scatter and allgather: the all-reduce's two halves ----------
 *
 * The ring all-reduce is a reduce-scatter (after N - 1 steps each rank
 * holds the finished sum of one part of the buffer) followed by an
 * allgather (N - 1 more steps hand every part to every rank). Each half is
 * planned and run on its own here, on the same ring and code, with the
 * all-reduce's checks: (count, per-rank counts, dtype, op, chunk size)
 * compared across ranks when the plan is made (CLT_EMISMATCH on every rank,
 * naming the ranks and values), numbered messages, CLT_TIMEOUT deadlines.
 * This is what ZeRO-style sharding needs: reduce-scatter the gradients,
 * update your part, allgather the parameters.
 *
 * Parts. With counts NULL, the parts are the all-reduce's own segments
 * (count split into N, the first count % N one element longer), and rank
 * r's part is the segment the ring finishes there, segment (r + 1) mod N:
 * a reduce-scatter part is then bit for bit that segment of
 * clt_allreduce_run's result on the same data, for every count (small
 * counts too: the reduce-scatter then runs the all-reduce's small-message
 * algorithm whole), so a reduce-scatter followed by an allgather gives
 * exactly the all-reduce's bits. Ask a plan where a rank's part is with
 * clt_reduce_scatter_plan_part. With counts given (N entries summing to
 * count, any of them 0), rank r's part is counts[r] elements from
 * counts[0] + ... + counts[r - 1], in rank order as MPI_Reduce_scatter
 * lays them out. Counts smaller than N and 0 work.
 *
 * Runs are in place on a buffer of the plan's whole count: a
 * reduce-scatter reads all of it and leaves the result in this rank's part
 * (the rest of a host buffer is overwritten with partial sums; a device
 * buffer is written in the part only); an allgather reads this rank's part
 * and fills every other part. Averages (CLT_AVG) divide by the number of
 * buffers in the job, as the all-reduce does. An allgather has no op.
 * Device buffers: clt_reduce_scatter_run_device and clt_allgather_run_device
 * in cltrain/opencl.h. */
typedef struct clt_reduce_scatter_plan clt_reduce_scatter_plan;
typedef struct clt_allgather_plan clt_allgather_plan;

/* Collective. counts: NULL (the all-reduce's segments) or one per rank;
 * opts as for an all-reduce plan (NULL for the defaults). */
CLT_API int clt_reduce_scatter_plan_create(clt_comm *comm, size_t count, const size_t *counts, clt_dtype dtype,
                                           clt_reduce_op op, const clt_allreduce_opts *opts,
                                           clt_reduce_scatter_plan **out);
CLT_API void clt_reduce_scatter_plan_destroy(clt_reduce_scatter_plan *plan);
CLT_API size_t clt_reduce_scatter_plan_count(const clt_reduce_scatter_plan *plan);
/* Rank `rank`'s part: elements [*offset, *offset + *n) of the buffer. */
CLT_API int clt_reduce_scatter_plan_part(const clt_reduce_scatter_plan *plan, int rank, size_t *offset, size_t *n);
/* As clt_allreduce_plan_algorithm: the small-message algorithms run whole. */
CLT_API const char *clt_reduce_scatter_plan_algorithm(const clt_reduce_scatter_plan *plan);
/* Reduce a host buffer of count elements; this rank's part holds the result. */
CLT_API int clt_reduce_scatter_run(clt_reduce_scatter_plan *plan, void *buf);

/* Collective. counts: NULL (the parts of a reduce-scatter plan made with
 * NULL, so the two chain) or one per rank. */
CLT_API int clt_allgather_plan_create(clt_comm *comm, size_t count, const size_t *counts, clt_dtype dtype,
                                      const clt_allreduce_opts *opts, clt_allgather_plan **out);
CLT_API void clt_allgather_plan_destroy(clt_allgather_plan *plan);
CLT_API size_t clt_allgather_plan_count(const clt_allgather_plan *plan);
CLT_API int clt_allgather_plan_part(const clt_allgather_plan *plan, int rank, size_t *offset, size_t *n);
/* Fill every part of a host buffer of count elements from the rank that
 * holds it (this rank's part is its input). Every rank ends with the same
 * bits. */
CLT_API int clt_allgather_run(clt_allgather_plan *plan, void *buf);

/* Broadcast `bytes` bytes from root's buf to every rank's buf. Collective;
 * (bytes, root) must agree across ranks (else CLT_EMISMATCH on every rank). */
CLT_API int clt_bcast(clt_comm *comm, void *buf, size_t bytes, int root);
/* Gather `bytes` bytes from every rank: recv receives size x bytes, rank r's
 * block at r x bytes. Collective; bytes must agree across ranks. */
CLT_API int clt_allgather(clt_comm *comm, const void *send, size_t bytes, void *recv);
/* ---- data: datasets, sampler, prefetch ----------------------------------- */
/*
 * A training loop on one replica reads like this (error checks left out):
 *
 *   clt_dataset *train;
 *   clt_dataset_open_idx("/usr/share/datasets/fashion-mnist", "train", &train);
 *   float mean, std;
 *   clt_dataset_stats(train, &mean, &std);        // of the [0,1]-scaled pixels
 *   clt_dataset_normalize(train, mean, std);      // and the same for the test set
 *
 *   clt_sampler *smp;                             // same seed on every rank
 *   clt_sampler_create(clt_dataset_count(train), 256, seed, 0, &smp);
 *   int64_t shares[2] = {160, 96};                // or clt_shares_from_weights
 *   clt_sampler_set_shares(smp, 2, shares);       // replica r of R takes b_r
 *
 *   clt_prefetcher *pf;                           // one per local replica
 *   clt_prefetcher_create(train, smp, r, ctx, &pf);
 *   for (;;) {
 *     clt_batch b;
 *     clt_prefetcher_next(pf, &b);                // b.x (b.n, sample_size) f32,
 *                                                 // b.y (b.n, labels_per_sample) i32
 *     ... upload b.x, b.y; forward; backward; divide by b.global_labels ...
 *     if (b.last_in_epoch) ... evaluate; stop after the last epoch ...
 *   }
 *   clt_prefetcher_destroy(pf); clt_sampler_destroy(smp); clt_dataset_destroy(train);
 *
 * doc/data.md describes the file formats, the permutation algorithm (so that
 * other programs can reproduce it) and the share rules in more detail.
 */

#define CLT_DATASET_MAX_DIMS 8

/* A labelled dataset held in host memory: samples of a fixed shape (uint8 as
 * read from IDX files, or float32 from raw files) and int32 class labels in
 * [0, num_classes), one per sample, or windows of a token stream with one
 * label per position (clt_dataset_open_tokens). Samples are converted to
 * normalised float32 only when a batch is taken, so a dataset costs its
 * file's size in memory. */
typedef struct clt_dataset clt_dataset;

/* The MNIST/Fashion-MNIST files of a split in dir: split "train" reads
 * train-images-idx3-ubyte and train-labels-idx1-ubyte, "test" (or "t10k")
 * reads t10k-*; each name is tried as is, then with ".gz". 10 classes.
 * A missing file is CLT_ENOTFOUND naming the names tried; anything wrong
 * inside a file is CLT_EFORMAT naming the file and the fault. */
CLT_API int clt_dataset_open_idx(const char *dir, const char *split, clt_dataset **out);
/* Explicit IDX image and label files (plain or gzip). Images must be unsigned
 * bytes (IDX type 0x08) with at least 2 dimensions (count, ...), labels
 * unsigned bytes with exactly 1. Every label must be below num_classes; 0
 * means "the largest label + 1". The counts must agree. */
CLT_API int clt_dataset_open_idx_files(const char *images, const char *labels, int num_classes,
                                       clt_dataset **out);

/* The raw format, for users' own float data (all integers little-endian,
 * no padding, the file may be gzip-compressed):
 *
 *   offset        size        field
 *   0             8           magic "CLTRAW1\0"
 *   8             4           u32 version, 1
 *   12            8           u64 count: the number of samples (> 0)
 *   20            4           u32 ndims: dimensions of one sample (1..8)
 *   24            8 * ndims   u64 dims[ndims], each > 0
 *   24 + 8*ndims  4           u32 num_classes (> 0)
 *   28 + 8*ndims  4*count*F   float32 samples, row-major, F = prod(dims)
 *   ...           4*count     int32 labels, each in [0, num_classes)
 *
 * and nothing after. Non-finite sample values are refused (CLT_ENONFINITE). */
CLT_API int clt_dataset_open_raw(const char *path, clt_dataset **out);
/* Write count samples x (count, prod(dims)) and labels y (count) in the raw
 * format (gzip-compressed when path ends in ".gz"). Checks what the reader
 * checks, so a file it writes always reads back. */
CLT_API int clt_dataset_write_raw(const char *path, int64_t count, int ndims, const int64_t *dims,
                                  int num_classes, const float *x, const int32_t *y);

/* Token datasets, for language models: llm.c's .bin shards
 * (dev/data/data_common.py). A shard is a header of 256 little-endian int32,
 * [0] magic, [1] version, [2] the number of tokens N (> 0), the rest unused
 * (0), then the N tokens, little-endian, and nothing after:
 *
 *   magic 20240520, version 1: uint16 tokens (GPT-2's vocabulary)
 *   magic 20240801, version 7: uint32 tokens (LLaMA-3's)
 *
 * The npaths shards are read in order into one stream of tokens (kept in
 * memory as stored, 2 or 4 bytes each) cut into non-overlapping windows of
 * T+1 tokens at stride T, T being the model's context: sample i has
 *
 *   x = tokens[i*T, i*T + T)  as float32 (token ids, exact below 2^24)
 *   y = tokens[i*T + 1, i*T + T + 1)  as int32 (each position's next token)
 *
 * so count = (ntokens - 1) / T, clt_dataset_sample_size = T and
 * clt_dataset_labels_per_sample = T. A window may span two shards. With
 * vocab > 0 every token must be below it and num_classes is vocab; with
 * vocab 0 num_classes is the largest token + 1. No normalisation applies:
 * clt_dataset_stats gives 0 and 1, clt_dataset_normalize refuses anything
 * but (0, 1). Anything wrong in a shard (magic, version, a count the file
 * does not hold, trailing bytes, no tokens, a token >= vocab, naming its
 * index) is CLT_EFORMAT naming the file; fewer than T+1 tokens in all is
 * CLT_EFORMAT too. T outside [1, 2^24), npaths < 1 or vocab outside
 * [0, 2^24] is CLT_EINVAL. Shards may be gzip-compressed. */
CLT_API int clt_dataset_open_tokens(const char *const *paths, int npaths, int64_t T, int vocab,
                                    clt_dataset **out);
/* Write tokens[0..n) as an llm.c shard: uint16 (magic 20240520) unless wide
 * or a token is above 65535, then uint32 (magic 20240801); gzip-compressed
 * when path ends in ".gz". n must be 1 .. 2^31 - 1 and every token below
 * 2^24, so what it writes always reads back. */
CLT_API int clt_tokens_write(const char *path, const uint32_t *tokens, int64_t n, int wide);

/* Targets for fine-tuning (PyTorch's ignore_index): a targets shard beside
 * each token shard of ds (in the same order, with as many values as its
 * token shard has tokens) says which tokens count as targets. Its format is
 * a token shard's header of 256 little-endian int32, [0] magic 20250301,
 * [1] version 1, [2] the number of targets N (> 0), the rest 0, then N
 * little-endian int32, and nothing after: value i is token i of the shard
 * (it counts) or -1 (it is masked) — Hugging Face's `labels`, aligned with
 * the input ids and not shifted, with -1 for -100. A masked token is
 * nobody's target: the window position before it (y = CLT_IGNORE_LABEL in
 * clt_dataset_get_batch) contributes no loss and no gradient, and means
 * divide by the labels that count (clt_batch.global_labels,
 * clt_dataset_label_count). Any other value, a count that does not match
 * the tokens, or a shard of another kind is CLT_EFORMAT naming the file and
 * the index. Shards may be gzip-compressed. */
CLT_API int clt_dataset_tokens_targets(clt_dataset *ds, const char *const *paths, int npaths);
/* Write targets[0..n) (token ids, or -1 for masked) as a targets shard
 * (gzip-compressed when path ends in ".gz"). */
CLT_API int clt_tokens_write_targets(const char *path, const int32_t *targets, int64_t n);

/* ---- users' own data: CSV, NumPy, HDF5, raw (doc/data.md) ----
 *
 * A table of samples with class labels or, for a regression model (a spec
 * with `loss mse`, `l1` or `huber`), float targets. */
typedef struct clt_data_options {
  const char *labels;    /* a separate file of the labels or targets, one row a sample: .npy, an .npz
                            ("file.npz:member"), an HDF5 dataset ("file.h5:/group/ds"); NULL: they are
                            in the data file (CSV's target column, .npz member "y", or the last column
                            of a 2-D array) */
  const char *target;    /* the target column(s), by the CSV header's name or 0-based index, comma-
                            separated (default: the last column); for .npz the labels' member ("y") */
  const char *features;  /* CSV: the feature columns, as target (default: every other column); .npz: the
                            samples' member ("x") */
  int regression;        /* 1: float targets (regression), 0: int32 class labels */
  int num_classes;       /* classification: 0 means the largest label + 1 */
} clt_data_options;

/* Open a users' dataset by what path holds: a CSV file (.csv, .tsv, .txt:
 * numbers separated by commas, tabs or spaces; a first line with a word
 * that is no number is the header), a NumPy .npy (memory-mapped, any
 * float or integer type, C order) or .npz (its stored members mapped,
 * deflated ones inflated), an HDF5 dataset "file.h5:/group/dataset" (when
 * built with HDF5), or a cltrain raw file (classification). The samples
 * are the rows (first dimension); the rest of the shape is a sample's.
 * Every fault is CLT_EFORMAT naming the file and the row and column, or
 * the member or dataset, and what is wrong. o may be NULL (classification,
 * targets in the file). */
CLT_API int clt_dataset_open(const char *path, const clt_data_options *o, clt_dataset **out);
/* The last `fraction` (0 < fraction < 1) of ds's samples moved into a new
 * dataset *val (a validation split; ds keeps the first ones, and both at
 * least one sample). Sources opened by clt_dataset_open only. */
CLT_API int clt_dataset_split(clt_dataset *ds, double fraction, clt_dataset **val);
/* Regression datasets: float targets per sample (0 for class labels). */
CLT_API int64_t clt_dataset_targets_per_sample(const clt_dataset *ds);
/* clt_dataset_get_batch for a regression dataset: targets (n,
 * targets_per_sample) float32 (may be NULL). */
CLT_API int clt_dataset_get_batch_targets(const clt_dataset *ds, const int64_t *indices, int64_t n, float *x,
                                          float *targets);

/* Per-feature normalisation: x_out[j] = (x[j] - shift[j]) / scale[j] for
 * every value j of a sample, after the dataset's own scaling. */
typedef enum clt_normalize_kind {
  CLT_NORMALIZE_NONE = 0,     /* as stored */
  CLT_NORMALIZE_STANDARD = 1, /* shift the training split's mean, scale its (population) std */
  CLT_NORMALIZE_MINMAX = 2    /* shift its minimum, scale max - min: values in [0, 1] */
} clt_normalize_kind;
/* "none", "standard", "minmax" (NULL for other values); and back. */
CLT_API const char *clt_normalize_name(clt_normalize_kind kind);
CLT_API int clt_normalize_parse(const char *name, clt_normalize_kind *kind);
/* Statistics of samples [lo, hi) of ds, per feature, for several ranks to
 * combine: out (4 x sample_size doubles) gets each feature's mean, its sum
 * of squared deviations from that mean, its minimum and its maximum. */
CLT_API int clt_dataset_feature_stats(const clt_dataset *ds, int64_t lo, int64_t hi, double *out);
/* Apply shift and scale (sample_size each; every scale finite and > 0)
 * from now on; kind CLT_NORMALIZE_NONE (shift, scale NULL) removes it. */
CLT_API int clt_dataset_normalize_features(clt_dataset *ds, clt_normalize_kind kind, const float *shift,
                                           const float *scale);
/* The per-feature normalisation in use: its kind (NONE: none), and when
 * shift and scale are not NULL, sample_size floats into each. */
CLT_API clt_normalize_kind clt_dataset_feature_normalization(const clt_dataset *ds, float *shift, float *scale);

CLT_API void clt_dataset_destroy(clt_dataset *ds);

CLT_API int64_t clt_dataset_count(const clt_dataset *ds);
CLT_API int clt_dataset_num_classes(const clt_dataset *ds);
/* Dimensions of one sample: (28, 28) for MNIST. Writes up to
 * CLT_DATASET_MAX_DIMS entries into dims (may be NULL) and returns ndims. */
CLT_API int clt_dataset_sample_shape(const clt_dataset *ds, int64_t *dims);
/* Values per sample, the product of the dimensions (784 for MNIST). */
CLT_API int64_t clt_dataset_sample_size(const clt_dataset *ds);
/* Labels per sample: 1 for image and raw datasets, T for token datasets
 * (one next token per position). */
CLT_API int64_t clt_dataset_labels_per_sample(const clt_dataset *ds);
/* The labels that count over the whole dataset: count x labels per sample,
 * less the masked targets of a token dataset with targets shards
 * (clt_dataset_tokens_targets). What a mean loss over it divides by. */
CLT_API int64_t clt_dataset_label_count(const clt_dataset *ds);
/* The sample file's path, for messages. */
CLT_API const char *clt_dataset_path(const clt_dataset *ds);

/* Normalisation, applied as a batch is taken: x_out = (x / range - mean) / std
 * in float32, where range is 255 for uint8 data and 1 for float data. A
 * dataset starts with mean 0, std 1: pixels in [0, 1], raw floats as stored. */
/* Use mean and std (std > 0, both finite); clt_dataset_normalize(ds, 0, 1)
 * restores the default. */
CLT_API int clt_dataset_normalize(clt_dataset *ds, float mean, float std);
/* The current mean and std. */
CLT_API void clt_dataset_get_normalization(const clt_dataset *ds, float *mean, float *std);
/* Mean and (population) standard deviation of x / range over every value of
 * every sample, summed in double: the statistics to give the training and
 * test sets alike. 0.2860 and 0.3530 for Fashion-MNIST's training set. */
CLT_API int clt_dataset_stats(const clt_dataset *ds, float *mean, float *std);

/* Normalised samples indices[0..n) into x (n, sample_size) float32 and their
 * labels into y (n, labels_per_sample) int32; either output may be NULL. An
 * index outside [0, count) is CLT_EINVAL naming it. A non-finite result of
 * normalising float data is CLT_ENONFINITE naming the sample. */
CLT_API int clt_dataset_get_batch(const clt_dataset *ds, const int64_t *indices, int64_t n, float *x,
                                  int32_t *y);

/* ---- text: tokenizers ----------------------------------------------------- */

/* A Hugging Face tokenizer read from its tokenizer.json, encoding text to
 * token ids and decoding ids to text exactly as the `tokenizers` library
 * does: byte-level BPE (GPT-2, Llama 3) and
 * SentencePiece-style BPE with byte fallback (Llama 2, Mistral).
 *
 *   clt_tokenizer *tok;
 *   clt_tokenizer_load("llama-dir", &tok);        // DIR/tokenizer.json
 *   uint32_t *ids; int64_t n;
 *   clt_tokenizer_encode(tok, text, strlen(text), CLT_ENCODE_SPECIAL, &ids, &n);
 *   char *back; size_t len;
 *   clt_tokenizer_decode(tok, ids, n, CLT_DECODE_SKIP_SPECIAL, &back, &len);
 *   free(ids); free(back); clt_tokenizer_destroy(tok);
 *
 * What is read: the model BPE (vocab, merges as "a b" strings or [a, b]
 * pairs, unk_token, fuse_unk, byte_fallback, ignore_merges,
 * continuing_subword_prefix, end_of_word_suffix); added_tokens with their
 * special, normalized, lstrip, rstrip and single_word flags; the
 * normalizers Sequence, Prepend, Replace; the pre-tokenizers Sequence,
 * Split (its pattern run by PCRE2), ByteLevel, Digits, Metaspace; the post-processors
 * Sequence, TemplateProcessing, RobertaProcessing, BertProcessing,
 * ByteLevel; the decoders Sequence, ByteLevel, Replace, ByteFallback, Fuse,
 * Strip, Metaspace. Any other component, a set "truncation" or "padding", or BPE
 * dropout is CLT_EFORMAT naming the file and the component ("tokenizer.json:
 * pre_tokenizer type \"Whitespace\" is not supported; ..."), as is anything
 * malformed. The normalizers NFC, NFD, NFKC and NFKD (Unicode's
 * normalization forms; Qwen2's tokenizer.json has NFC) are refused so too,
 * saying why: cltrain has no Unicode normalization (its build stack has no
 * library for it). Text that is not UTF-8 is encoded as Python's
 * bytes.decode(errors="replace") reads it (each ill-formed part one U+FFFD). */
typedef struct clt_tokenizer clt_tokenizer;

enum {
  CLT_ENCODE_SPECIAL = 1,     /* encode: add the post-processor's special tokens (add_special_tokens) */
  CLT_DECODE_SKIP_SPECIAL = 1 /* decode: leave out the special tokens (skip_special_tokens) */
};

/* path: a tokenizer.json, or a directory holding one. A tokenizer_config.json
 * beside it gives bos_token, eos_token, add_bos_token and add_eos_token. A
 * missing file is CLT_ENOTFOUND naming it. */
CLT_API int clt_tokenizer_load(const char *path, clt_tokenizer **out);
/* The same from tokenizer.json's text in memory; name is used in messages. */
CLT_API int clt_tokenizer_load_json(const char *json, size_t len, const char *name, clt_tokenizer **out);
CLT_API void clt_tokenizer_destroy(clt_tokenizer *tok);
/* The largest token id + 1 (a model's vocabulary must be at least this). */
CLT_API int64_t clt_tokenizer_vocab_size(const clt_tokenizer *tok);
/* The tokenizer.json read. */
CLT_API const char *clt_tokenizer_path(const clt_tokenizer *tok);
/* text[0..len) to token ids: *ids is malloc'd (free it), *n of them. flags:
 * 0 or CLT_ENCODE_SPECIAL. */
CLT_API int clt_tokenizer_encode(clt_tokenizer *tok, const char *text, size_t len, int flags, uint32_t **ids,
                                 int64_t *n);
/* ids[0..n) to text: *text is malloc'd and NUL-ended (free it), *len bytes
 * (len may be NULL). flags: 0 or CLT_DECODE_SKIP_SPECIAL. An id of no token
 * is CLT_EINVAL naming it and its index. */
CLT_API int clt_tokenizer_decode(clt_tokenizer *tok, const uint32_t *ids, int64_t n, int flags, char **text,
                                 size_t *len);
/* A token's id (added tokens first, then the model's), or CLT_ENOTFOUND. */
CLT_API int clt_tokenizer_token_to_id(const clt_tokenizer *tok, const char *token, size_t len, uint32_t *id);
/* An id's token (not NUL-safe: see *len), or NULL when the id has none. */
CLT_API const char *clt_tokenizer_id_to_token(const clt_tokenizer *tok, uint32_t id, size_t *len);
/* 1 when the id is a special added token. */
CLT_API int clt_tokenizer_is_special(const clt_tokenizer *tok, uint32_t id);
/* The BOS / EOS token: tokenizer_config.json's bos_token / eos_token, else
 * the one special token the post-processor puts before / after the text;
 * *add (may be NULL) says whether the tokenizer adds it (add_bos_token /
 * add_eos_token, else whether the post-processor does). CLT_ENOTFOUND when
 * neither names one. */
CLT_API int clt_tokenizer_bos(const clt_tokenizer *tok, uint32_t *id, int *add);
CLT_API int clt_tokenizer_eos(const clt_tokenizer *tok, uint32_t *id, int *add);

/* ---- sampler: which samples each replica takes at each step ---- */

/* Every epoch is one permutation of [0, count) drawn from (seed, epoch) alone,
 * so every rank computes the same one without talking. Global batch `step`
 * of an epoch is permutation[step*B, step*B + B); replica r takes the
 * contiguous slice of it at offset b_0 + ... + b_(r-1) of length b_r.
 *
 * The last batch of an epoch is partial when B does not divide count. By
 * default it is kept: its n' < B samples are split over the replicas in
 * proportion to the shares by the largest-remainder rule (the same rule as
 * clt_shares_from_weights with min_each 0), so a replica may get 0 samples
 * there and must cope with an empty slice. With CLT_SAMPLER_DROP_LAST it is
 * left out and every step has exactly B samples. */
typedef struct clt_sampler clt_sampler;

enum {
  CLT_SAMPLER_DROP_LAST = 1,  /* leave out the last partial batch of each epoch */
  CLT_SAMPLER_NO_SHUFFLE = 2  /* identity order every epoch (evaluation) */
};

/* Where a sampler is: the next global batch it will give. This pair is all a
 * checkpoint needs to resume the sample order: the global batches depend only
 * on (count, global batch, seed, flags, epoch, step), not on the shares. */
typedef struct clt_sampler_pos {
  int64_t epoch;
  int64_t step;  /* within the epoch, 0 .. steps_per_epoch - 1 */
} clt_sampler_pos;

/* A sampler over count samples with global batch size global_batch
 * (1 .. min(count, 2^31 - 1)) and one replica taking all of it. flags is a
 * sum of CLT_SAMPLER_* values. */
CLT_API int clt_sampler_create(int64_t count, int64_t global_batch, uint64_t seed, unsigned flags,
                               clt_sampler **out);
/* An independent copy (configuration, shares, position). */
CLT_API int clt_sampler_clone(const clt_sampler *s, clt_sampler **out);
CLT_API void clt_sampler_destroy(clt_sampler *s);

/* Split the global batch over nreplicas replicas: shares[r] >= 0, summing to
 * the global batch (a replica with 0 takes no samples). shares NULL splits
 * it evenly (the first B % R replicas get one more). Takes effect for every later query; the order of samples
 * in each global batch is unchanged. */
CLT_API int clt_sampler_set_shares(clt_sampler *s, int nreplicas, const int64_t *shares);
CLT_API int clt_sampler_replicas(const clt_sampler *s);
/* Replica r's share of a full batch, b_r (0 when r is out of range). */
CLT_API int64_t clt_sampler_share(const clt_sampler *s, int replica);
CLT_API int64_t clt_sampler_count(const clt_sampler *s);
CLT_API int64_t clt_sampler_global_batch(const clt_sampler *s);
CLT_API int64_t clt_sampler_steps_per_epoch(const clt_sampler *s);
/* Samples in global batch `step` of any epoch: B, or fewer for the last
 * partial one (0 when step is out of range). The loss is divided by this. */
CLT_API int64_t clt_sampler_batch_size(const clt_sampler *s, int64_t step);

/* Replica r's indices in global batch (epoch, step): writes its n samples
 * into indices (room for clt_sampler_share(s, replica) entries always
 * suffices) and n into *n. Any position may be asked for, in any order;
 * asking within one epoch reuses its permutation. */
CLT_API int clt_sampler_slice(clt_sampler *s, int64_t epoch, int64_t step, int replica,
                              int64_t *indices, int64_t *n);

/* Iterate: the position to process now, and advance past it (the step after
 * the last of an epoch is step 0 of the next). */
CLT_API void clt_sampler_next(clt_sampler *s, clt_sampler_pos *pos);
/* Save and restore the position (for checkpoints). A position whose step is
 * not below steps_per_epoch, or with negative parts, is CLT_EINVAL. */
CLT_API void clt_sampler_get_position(const clt_sampler *s, clt_sampler_pos *pos);
CLT_API int clt_sampler_set_position(clt_sampler *s, clt_sampler_pos pos);

/* Integer shares of total in proportion to weights (finite, >= 0, not all 0),
 * each at least min_each, summing to total, by the largest-remainder rule:
 * every replica first gets max(min_each, floor(quota)); then while the sum
 * is short the one with the largest quota - share gains one, and while it is
 * over the one above min_each with the smallest quota - share loses one
 * (ties go to the lower index). The weights are scaled once to integers and
 * the rest is integer arithmetic, so every rank gets the same shares from
 * the same weights. n * min_each > total is CLT_EINVAL. */
CLT_API int clt_shares_from_weights(int n, const double *weights, int64_t total, int64_t min_each,
                                    int64_t *shares);

/* ---- prefetcher: the next slice decoded in the background ---- */

/* One replica's slice of one global batch, decoded and normalised. The
 * memory belongs to the prefetcher and stays valid until the next call of
 * clt_prefetcher_next, _seek, _set_shares or _destroy on it: an upload
 * from it that does not wait must be complete before then (in a training
 * step it is, once the step's results have been read back). */
/* A label that counts for nothing (PyTorch's ignore_index): no loss, no
 * gradient, not in the accuracy, not in the divisor of the mean. Padding
 * of a sequence model's targets, for example. Other labels outside [0,
 * classes) make the loss NaN, which training reports. */
#define CLT_IGNORE_LABEL (-100)

typedef struct clt_batch {
  const float *x;         /* (n, sample_size) float32, normalised */
  const int32_t *y;       /* (n, labels_per_sample) int32 labels */
  int64_t n;              /* this replica's samples; may be 0 in a partial batch */
  int64_t sample_size;    /* values per sample */
  int64_t global_n;       /* samples in the whole global batch: divide the summed loss by this */
  int64_t epoch, step;    /* the position of this global batch */
  int last_in_epoch;      /* 1 for the last step of the epoch */
  int64_t labels_per_sample; /* 1, or T for a token dataset */
  int64_t global_labels;  /* the labels that count in the whole global batch: global_n * labels_per_sample,
                             less a token dataset's masked targets (clt_dataset_tokens_targets); divide the
                             summed loss by this */
  const float *targets;   /* a regression dataset's (n, labels_per_sample) float targets, y then NULL */
} clt_batch;

typedef struct clt_prefetcher clt_prefetcher;

/* A prefetcher of replica `replica`'s slices of ds, in the order of a copy of
 * sampler s taken now (its shares and position; later changes to s do not
 * reach it). With ctx, the two batch buffers are pinned host memory of that
 * context (fast uploads to its device); with ctx NULL, plain aligned host
 * memory. A background thread decodes the next slice while the caller works
 * on the current one (double buffering). */
CLT_API int clt_prefetcher_create(const clt_dataset *ds, const clt_sampler *s, int replica,
                                  clt_context *ctx, clt_prefetcher **out);
/* Wait for the next slice and hand it out; it runs on across epochs. An error
 * of the background thread comes back here, naming the batch it was
 * decoding, and every later call returns it too until a seek or new shares. */
CLT_API int clt_prefetcher_next(clt_prefetcher *pf, clt_batch *batch);
/* The position of the batch the next call of clt_prefetcher_next returns. */
CLT_API void clt_prefetcher_position(const clt_prefetcher *pf, clt_sampler_pos *pos);
/* Continue from pos (resume from a checkpoint); what was decoded ahead is
 * thrown away. */
CLT_API int clt_prefetcher_seek(clt_prefetcher *pf, clt_sampler_pos pos);
/* New shares (as clt_sampler_set_shares) from the next batch on, e.g. from
 * the load balancer; replica must remain in range. Buffers grow if needed. */
CLT_API int clt_prefetcher_set_shares(clt_prefetcher *pf, int nreplicas, const int64_t *shares);
/* Stop the thread (it finishes the slice it is decoding, a few ms at most)
 * and free everything. */
CLT_API void clt_prefetcher_destroy(clt_prefetcher *pf);

/* ---- models ---------------------------------------------------------------- */

/* A model as its spec file describes it: layers, shapes, parameter layout.
 * Host only; training makes the device replicas. Immutable once made, so it
 * may be shared between threads. */
typedef struct clt_model clt_model;

/* Read a model spec file (one layer per line, '#' comments; see README).
 * Mistakes are CLT_EFORMAT with "file:line:col: what" and the offending text. */
CLT_API int clt_model_load(const char *path, clt_model **out);
/* The same from text; name is used in messages (NULL: "<model>"). */
CLT_API int clt_model_parse(const char *text, const char *name, clt_model **out);
CLT_API void clt_model_destroy(clt_model *m);
CLT_API int clt_model_layer_count(const clt_model *m);   /* the input line included */
CLT_API int64_t clt_model_param_count(const clt_model *m);
CLT_API int64_t clt_model_input_size(const clt_model *m); /* floats per sample */
/* Scores per label of a classifier or language model; 0 for a regression
 * model. */
CLT_API int clt_model_num_classes(const clt_model *m);
/* A language model's vocabulary: the model takes token ids below it
 * (`input tokens T vocab=V`, samples of T ids carried as exact floats) and
 * gives V scores per position. 0 for a model of features or images. */
CLT_API int clt_model_vocab(const clt_model *m);
/* Labels per sample: the int32 labels a training step takes for each sample
 * (1 for classifiers; a sequence model labels every position), or for a
 * regression model the float32 targets: one per value of the output,
 * whatever its shape. Losses and the update are means over labels (over
 * target values). */
CLT_API int clt_model_labels_per_sample(const clt_model *m);
/* What a model is trained to minimise: the spec's `loss` line, after the
 * last layer. Cross-entropy (the default) takes int32 class labels; the
 * regression losses take float32 targets of the output's shape and are
 * PyTorch's MSELoss, L1Loss and HuberLoss(delta) with the mean reduction
 * over every target value of the global batch. */
typedef enum clt_loss_kind {
  CLT_LOSS_CROSSENTROPY = 0, /* softmax cross-entropy on class labels */
  CLT_LOSS_MSE = 1,          /* (y - t)^2 */
  CLT_LOSS_L1 = 2,           /* |y - t| */
  CLT_LOSS_HUBER = 3         /* 0.5 (y - t)^2 within delta of the target, else delta (|y - t| - delta / 2) */
} clt_loss_kind;
CLT_API clt_loss_kind clt_model_loss(const clt_model *m); /* (clt_loss_kind)-1 for a NULL model */
/* Huber's delta (1 unless the spec says; NaN for the other losses). */
CLT_API double clt_model_huber_delta(const clt_model *m);
/* "crossentropy", "mse", "l1", "huber" (NULL for anything else): the
 * spec's words. */
CLT_API const char *clt_loss_name(clt_loss_kind k);
CLT_API const char *clt_model_text(const clt_model *m);   /* the spec as written */
/* A table of layers, output shapes and parameter counts (malloc'd; free it). */
CLT_API int clt_model_summary(const clt_model *m, char **out);

/* ---- Hugging Face checkpoints --------------------------------------------
 *
 * The directory transformers' save_pretrained writes (config.json and
 * model.safetensors, or its shards and model.safetensors.index.json;
 * float32, float16 or bfloat16 tensors, read as float32) for the classes
 * GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM and
 * MistralForCausalLM. Both directions need no device. The correspondence
 * of layers and tensors is in src/io/hf_gpt2.c and src/io/hf_llama.c.
 */

/* Read dir/config.json and the tensors and write a model spec to
 * model_path and its float32 weights to weights_path (what
 * clt_trainer_load_weights reads). The class is config.json's "model_type"
 * (else its "architectures"). context is the model's T, 1 .. n_positions
 * (GPT-2) or max_position_embeddings; 0 means all of it. A config key that
 * asks for what cltrain computes differently (another activation, a
 * sliding window shorter than the context, rope_scaling other than llama3,
 * head_dim other than hidden / heads, attention dropout, ...), a missing
 * or malformed key is CLT_EFORMAT naming config.json and the key; a
 * missing tensor or one of the wrong shape, CLT_ESHAPE naming the file and
 * the tensor; a shard the index names that is not there, CLT_ENOTFOUND
 * naming it. Unknown keys are ignored, as are buffers of older files
 * (GPT-2's attention masks, Llama's rotary inv_freq); other tensors
 * (another model's heads) are left out with a warning. The spec's opening
 * comment records the class and dir (its hf- lines, for clt_hf_export).
 * Nothing is written unless all of it reads. */
CLT_API int clt_hf_import(const char *dir, int context, const char *model_path, const char *weights_path);

/* How hf export stores the tensors. */
typedef enum clt_hf_dtype {
  CLT_HF_F32 = 0,  /* float32, as cltrain trains them */
  CLT_HF_BF16 = 1, /* bfloat16, rounded to nearest, ties to even */
  CLT_HF_F16 = 2   /* float16, the same; a value beyond 65504 is refused (CLT_ENONFINITE) */
} clt_hf_dtype;

typedef struct clt_hf_export_options {
  const char *hf_class;  /* "LlamaForCausalLM", ... (or the model_type, "llama"); NULL: the class the
                            spec's hf-class line records (clt_hf_import writes it), else the one its
                            structure gives: GPT2LMHeadModel for GPT-2's, Qwen2ForCausalLM for Llama's
                            with q, k and v biases, LlamaForCausalLM for Llama's otherwise (NULL) */
  clt_hf_dtype dtype;    /* (CLT_HF_F32) */
  const char *tokenizer; /* a directory whose tokenizer files (tokenizer.json, tokenizer_config.json,
                            special_tokens_map.json, tokenizer.model, ...) are copied into the export,
                            or a tokenizer.json; NULL: those of the directory the spec's hf-source
                            line records, if any (a warning when it has none) (NULL) */
  int no_tokenizer;      /* copy no tokenizer files (0) */
  /* (out) what clt_hf_export wrote: */
  char written_class[64];      /* config.json's class, "LlamaForCausalLM" */
  char tokenizer_from[4096];   /* where the tokenizer's files came from ("" when none were copied) */
  int tokenizer_files;         /* how many were copied */
} clt_hf_export_options;
CLT_API void clt_hf_export_options_defaults(clt_hf_export_options *o);

/* The reverse: a spec and its weights (or a checkpoint) into dir (made if
 * missing): config.json, model.safetensors and the tokenizer's files, which
 * from_pretrained(dir) loads. o NULL: the defaults; else its (out) fields
 * say what was written. A spec without the
 * class's structure is CLT_EFORMAT naming its first layer that does not
 * fit; a class name not in the table, or an output that is an input,
 * CLT_EINVAL; a tokenizer directory without tokenizer files,
 * CLT_ENOTFOUND. Nothing is written unless all of it reads. */
CLT_API int clt_hf_export(const char *model_path, const char *weights_path, const char *dir,
                          clt_hf_export_options *o);

/* clt_hf_import restricted to GPT-2 (another model_type is CLT_EFORMAT),
 * and clt_hf_export as GPT2LMHeadModel in float32 without tokenizer
 * files: the functions of cltrain 0.1. */
CLT_API int clt_hf_gpt2_import(const char *dir, int context, const char *model_path, const char *weights_path);
CLT_API int clt_hf_gpt2_export(const char *model_path, const char *weights_path, const char *dir);

/* ---- optimizers and learning-rate schedules ------------------------------- */

/* The optimizers. Each is one row of the library's table
 * (src/core/optim.c): its name, state, defaults, settings' check, host
 * step and kernel. */
typedef enum clt_optimizer_kind {
  CLT_OPT_SGD = 0,   /* "sgd": momentum 0.9 (0: none), Nesterov on request, L2 weight decay 0 */
  CLT_OPT_ADAM = 1,  /* "adam": betas (0.9, 0.999), eps 1e-8, L2 weight decay 0 */
  CLT_OPT_ADAMW = 2, /* "adamw": betas (0.9, 0.999), eps 1e-8, decoupled weight decay 0.01 */
  CLT_OPT_LION = 3,  /* "lion" (Chen et al. 2023): betas (0.9, 0.99), decoupled weight decay 0 */
  CLT_OPT_COUNT      /* how many kinds there are; not a kind */
} clt_optimizer_kind;

typedef struct clt_optimizer_config {
  clt_optimizer_kind kind;
  float momentum;      /* SGD; 0 for none */
  int nesterov;        /* SGD with momentum */
  float weight_decay;  /* L2 added to the gradient, or decoupled (clt_optimizer_decoupled_decay) */
  float beta1, beta2;  /* the optimizer's betas, where it has them */
  float eps;           /* Adam/AdamW (1e-8) */
} clt_optimizer_config;

/* Defaults for a kind (see each kind above); the settings it does not read
 * stay momentum 0, betas (0.9, 0.999) and eps 1e-8. */
CLT_API void clt_optimizer_defaults(clt_optimizer_kind kind, clt_optimizer_config *cfg);
/* An optimizer's name ("sgd", "adamw", ...) -> kind; CLT_EINVAL naming the
 * text and listing the names otherwise. */
CLT_API int clt_optimizer_parse(const char *text, clt_optimizer_kind *out);
/* The kind's name; "?" for a value that is no kind. */
CLT_API const char *clt_optimizer_name(clt_optimizer_kind kind);
/* Floats of optimizer state per parameter: one per state slot of the kind
 * (libcltrain(3) names them), none for SGD without momentum. */
CLT_API int clt_optimizer_state_per_param(const clt_optimizer_config *cfg);
/* 1 when the kind's weight decay is decoupled from the gradient (p shrinks
 * by lr * weight_decay before the update), which the trainer, as GPT-2,
 * applies to the matrices of linear, conv and attention layers only unless
 * clt_train_options.decay_all; 0 when it is L2, added to the gradient of
 * every parameter (see each kind above). */
CLT_API int clt_optimizer_decoupled_decay(clt_optimizer_kind kind);
/* 1 when the kind's update reads the clt_optimizer_config setting named
 * ("momentum", "nesterov", "beta1", "beta2", "eps", "weight_decay"), 0 when
 * it ignores it (Adam's momentum, Lion's eps); CLT_EINVAL for a value that
 * is no kind or a name that is no setting. */
CLT_API int clt_optimizer_reads(clt_optimizer_kind kind, const char *setting);

/* The optimizer step in plain C on host memory (p, grad: n floats; state:
 * clt_optimizer_state_per_param x n), operation for operation the device
 * kernels' float arithmetic: bit for bit what a device computes that rounds
 * divide and sqrt correctly. Replicas on devices that cannot (see
 * clt_device_info.fp32_exact_div_sqrt and clt_optimizer_needs_host) take
 * their step from here, so every replica holds the same bits. */
CLT_API void clt_optimizer_step_host(const clt_optimizer_config *cfg, int64_t t, float lr, float grad_scale,
                                     float *p, const float *grad, float *state, size_t n);
/* For benchmarks and tests: with a decay mask (n values, 0 where weight
 * decay does not apply; NULL: every parameter), as clt_optimizer_step_masked. */
CLT_API void clt_optimizer_step_host_masked(const clt_optimizer_config *cfg, int64_t t, float lr, float grad_scale,
                                            float *p, const float *grad, float *state, size_t n,
                                            const uint8_t *decay);
/* 1 when the device kernel cannot give those bits for this optimizer. */
CLT_API int clt_optimizer_needs_host(const clt_optimizer_config *cfg, const clt_device_info *dev);

typedef enum clt_schedule_kind {
  CLT_SCHED_CONSTANT = 0,
  CLT_SCHED_STEP = 1,    /* lr * gamma^(floor(step / step_size)) */
  CLT_SCHED_COSINE = 2   /* from lr down to min_lr over total_steps */
} clt_schedule_kind;

typedef struct clt_schedule {
  clt_schedule_kind kind;
  float lr;              /* base learning rate */
  int64_t warmup_steps;  /* linear warm-up from lr/warmup to lr, then the schedule */
  int64_t total_steps;   /* cosine: length of the whole run, warm-up included */
  int64_t step_size;     /* step: steps between decays */
  float gamma;           /* step: decay factor */
  float min_lr;          /* cosine: final learning rate */
} clt_schedule;

CLT_API int clt_schedule_parse(const char *text, clt_schedule_kind *out);
CLT_API const char *clt_schedule_name(clt_schedule_kind kind);
/* The learning rate for 0-based optimizer step `step`. */
CLT_API float clt_schedule_lr(const clt_schedule *s, int64_t step);

/* ---- training ---------------------------------------------------------------
 *
 * A trainer holds one replica of a model per device given to it, on every
 * rank of a communicator, and trains them data-parallel: each replica takes
 * its share of every global batch, gradients are summed over all replicas,
 * divided by the global batch size and applied on every replica, so all
 * replicas hold the same parameters bit for bit, and the update is the
 * single-device update on the global batch.
 *
 * Two ways to drive it: clt_trainer_fit (a dataset, the seeded sampler,
 * epochs, evaluation, events, checkpoints), or clt_trainer_step in the
 * application's own loop, each rank passing its own samples. Both run the
 * same step: forward, loss, backward, the gradient exchange overlapped with
 * the backward, the update.
 */

/* STEP: a step record (every log_every steps); EPOCH: an epoch's summary;
 * PROGRESS: rank 0's timed progress (clt_train_options.progress_s), to the
 * callback only, never to the metrics. */
typedef enum clt_train_event_kind {
  CLT_EVENT_STEP = 0,
  CLT_EVENT_EPOCH = 1,
  CLT_EVENT_PROGRESS = 2
} clt_train_event_kind;

/* What a trainer reports as it goes (to the callback, and as JSON Lines to
 * the metrics file). NaN marks what an event does not carry. */
typedef struct clt_train_event {
  clt_train_event_kind kind;
  int64_t epoch, epochs;            /* 1-based epoch, and how many */
  int64_t step, steps_total;        /* optimizer steps done, and planned */
  int64_t step_in_epoch, steps_per_epoch;
  double loss;                      /* STEP: this step's mean loss; EPOCH: the epoch's mean */
  double accuracy;                  /* training accuracy (of the step or epoch) */
  double lr;
  double samples_per_s;             /* global samples per second (recent) */
  double elapsed_s, eta_s;
  double test_loss, test_accuracy;  /* EPOCH with a test set; STEP when eval_every evaluated then */
  double grad_norm;                 /* STEP: norm of the mean gradient (the same on every rank; NaN when skipped) */
  double comm_s;                    /* STEP: seconds in gradient all-reduce since the last event */
  double comm_hidden;               /* STEP: the fraction of it that ran while backward still computed */
  int nreplicas;                    /* STEP: replicas of all ranks, and for each: */
  const int64_t *shares;            /*   its share of the global batch */
  const double *throughput;         /*   its measured samples per second of device time (0: unknown) */
  double loss_scale;                /* STEP: the dynamic loss scale now (1 in f32) */
  int64_t skipped;                  /* STEP: steps skipped for a non-finite f16 gradient, in all */
  const double *fixed_s;            /* STEP, --balance auto: per replica, its fitted fixed cost per
                                       micro-batch, seconds (0: no model yet); NULL otherwise */
  const double *per_sample_s;       /*   and its fitted cost per sample */
  /* appended (the fields above keep their places) */
  double tokens_per_s;              /* STEP, PROGRESS: samples_per_s times the positions of a sample, for a
                                       model of tokens; NaN otherwise */
  double prefetch_wait_s;           /* STEP: seconds a step waited for its batch from the prefetch thread,
                                       the mean of the steps since the last record, the most of any rank */
  double flops_per_sample;          /* the model's (a pipeline stage's) FLOPs per sample of a training
                                       step: forward and backward, 3 x the layer table's forward count */
  const double *flops;              /* STEP, EPOCH: per replica, the FLOP/s it achieved (its throughput x
                                       flops_per_sample; 0: not measured yet); NULL: unknown */
  const double *peak_flops;         /*   its device's peak FLOP/s (clt_device_peak_flops; 0: unknown) */
  const double *mfu;                /*   flops / peak_flops, model FLOPs utilisation (NaN: unknown) */
  double comm_bytes;                /* STEP: bytes this rank sent through the data-parallel communicator since
                                       the last event (clt_comm_bytes_sent: gradients, ZeRO's allgathers) */
} clt_train_event;

typedef void (*clt_train_callback)(const clt_train_event *ev, void *user);

typedef enum clt_balance_mode {
  CLT_BALANCE_EQUAL = 0,   /* the same share for every replica (the first B % R get one more) */
  CLT_BALANCE_WEIGHTS = 1, /* shares in proportion to given weights (0: none) */
  CLT_BALANCE_AUTO = 2     /* shares that minimise the slowest replica's time, by a fixed + per-sample
                            * cost model of each fitted to its measured runs (0 allowed) */
} clt_balance_mode;

/* The order of a pipeline stage's forward and backward passes over a
 * step's micro-batches (clt_train_options.pipeline_schedule). */
typedef enum clt_pipeline_schedule {
  CLT_PIPELINE_1F1B = 0,  /* one forward, one backward in the steady state: at most as many
                           * micro-batches' activations held per stage as there are stages */
  CLT_PIPELINE_GPIPE = 1  /* every forward, then every backward: all micro-batches' activations held */
} clt_pipeline_schedule;

/* Where the optimizer's state lives (clt_train_options.offload). */
typedef enum clt_offload {
  CLT_OFFLOAD_NONE = 0,      /* on each replica's device */
  CLT_OFFLOAD_OPTIMIZER = 1  /* in host memory: the moments of the replica's shard, stepped on the
                              * host's threads with the device kernel's arithmetic (same bits) */
} clt_offload;

/* How the ZeRO shards are sized across ranks (clt_train_options.shard_by). */
typedef enum clt_shard_by {
  CLT_SHARD_EQUAL = 0,   /* the all-reduce's own segments: 1/N of every bucket each */
  CLT_SHARD_MEMORY = 1,  /* in proportion to the device memory each rank's replicas have free for
                          * their shard (under max_device_memory), smallest device of a rank */
  CLT_SHARD_WEIGHTS = 2  /* in proportion to shard_weights, one per rank */
} clt_shard_by;

/* What a replica keeps of the forward for the backward
 * (clt_train_options.recompute). */
typedef enum clt_recompute {
  CLT_RECOMPUTE_NONE = 0,  /* every layer's output and what its backward needs, from the forward */
  CLT_RECOMPUTE_BLOCKS = 1 /* activation checkpointing: of each pass of a `block` of the spec only its input
                            * (and output); the backward runs the pass's forward again before the pass's
                            * backward, into buffers one pass long. The same gradients, bit for bit, for
                            * about one more forward's time; a spec without a block is refused */
} clt_recompute;

typedef struct clt_train_options {
  int64_t batch;                  /* global batch per optimizer step (64) */
  int epochs;                     /* passes over the training set (10) */
  int64_t max_steps;              /* stop after this many optimizer steps; 0: no limit */
  int accumulate;                 /* micro-batches per optimizer step (1); batch must divide by it */
  clt_optimizer_config optimizer; /* SGD momentum 0.9 */
  clt_schedule schedule;          /* learning rate 0.01, constant */
  float clip;                     /* global-norm gradient clipping; 0: off */
  int decay_all;                  /* decoupled weight decay (AdamW's, clt_optimizer_decoupled_decay):
                                   * decay every parameter; 0 (default): as GPT-2, only the matrices
                                   * of linear, conv and attention layers, not biases, norms or
                                   * embeddings. L2 (SGD's, Adam's) always decays everything. */
  uint64_t seed;                  /* initialisation, shuffling, dropout (42) */
  int64_t eval_every;             /* also evaluate every N steps (into that step's event, which is then
                                     emitted whatever log_every says); 0: after each epoch only. Each
                                     step is evaluated once: an epoch's last into its EPOCH event; the
                                     run's last in mid-epoch (max_steps) into its STEP event and the
                                     EPOCH event that follows gives the same result */
  int64_t log_every;              /* a step event every N steps (50) */
  const char *metrics_path;       /* JSON Lines appended by rank 0 (a regular file, or a symbolic link
                                     to one; made if missing); NULL: none */
  const char *tensorboard_dir;    /* TensorFlow event files for TensorBoard, written by rank 0 into
                                     this directory (made if missing): every event's scalars; NULL: none */
  int drop_last;                  /* leave out each epoch's last partial batch */
  clt_train_callback callback;    /* called on rank 0 for every event; NULL: none */
  void *callback_user;
  /* data parallelism */
  double bucket_mb;               /* gradient bucket size, MiB (1): each bucket is all-reduced as
                                     soon as its layers' backward is done; 0: one bucket at the end */
  clt_balance_mode balance;       /* how the global batch is split over replicas (equal) */
  const double *balance_weights;  /* CLT_BALANCE_WEIGHTS: one weight per replica of all ranks (>= 0,
                                     not all 0; a replica of weight 0 takes no samples) */
  int balance_nweights;
  int64_t balance_every;          /* CLT_BALANCE_AUTO: re-split every N steps (10) */
  int64_t balance_min_share;      /* CLT_BALANCE_AUTO: at least N samples of each micro-batch per
                                     replica (0: a replica that would only slow the step gets none,
                                     and is probed with one sample now and then) */
  int64_t check_every;            /* compare parameter checksums of all replicas every N steps
                                     (100); 0: never */
  /* checkpoints (see clt_trainer_save_checkpoint and doc/checkpoint.md) */
  const char *checkpoint_dir;     /* fit() writes DIR/ckpt-<step>.safetensors here; NULL: none.
                                     Rank 0 makes it and locks it (flock on DIR/.cltrain-lock) from
                                     the first fit() to clt_trainer_destroy: a directory another run
                                     or trainer holds is CLT_EIO naming its PID and host */
  int64_t checkpoint_every;       /* every N optimizer steps; 0: at the end of each epoch. Either
                                     way also when fit() ends */
  int checkpoint_keep;            /* keep the newest K in checkpoint_dir, delete older ones (3);
                                     0: keep all */
  /* mixed precision */
  clt_dtype precision;            /* how activations and their gradients are stored: CLT_F32, or
                                     CLT_F16 (computed in f32 all the same; f32 master weights and
                                     optimizer state; gradients all-reduced as f16, summed in f32) */
  float loss_scale;               /* CLT_F16: the first dynamic loss scale (65536). A step whose
                                     gradient is not finite on any rank is skipped on every rank
                                     and the scale halved */
  int64_t loss_scale_window;      /* CLT_F16: double the scale after N clean steps in a row (2000) */
  int max_skips;                  /* CLT_F16: stop (CLT_ENONFINITE) after N skipped steps in a row (20) */
  /* sharding (ZeRO) */
  uint64_t max_device_memory;     /* bytes of each device a replica may use (also per buffer); 0 (default):
                                     all of it. A replica that needs more is refused (CLT_EDEVMEM) */
  int zero;                       /* 0 (default): every replica keeps all optimizer state; 1: each rank
                                     keeps it only for its shard of the parameters (the all-reduce's
                                     own segment of every gradient bucket), the gradients are
                                     reduce-scattered, each rank steps its shard and the parameters
                                     are allgathered: bitwise the parameters of zero 0 (the gradient
                                     norm, at every stage on several ranks, is the ranks' shard norms
                                     added in rank order). 2: the reduced gradients too: the backward
                                     writes into a few reused bucket buffers, each reduce-scattered
                                     into the rank's shard as it completes (with accumulate > 1 the
                                     whole local gradient is kept; clt_trainer_gradient is refused).
                                     3: the parameters too: a device keeps its shard's parameters and
                                     a ring for two neighbouring layers' parameters, each layer written
                                     into it before its forward and its backward from the whole
                                     parameters allgathered once a step into host memory.
                                     The same on every rank; on one rank a no-op */
  /* pipeline parallelism (appended: the fields above keep their places) */
  int pipeline;                   /* stages P (0 or 1: none): the model's layers cut into P contiguous
                                     stages, rank r running stage r % P of pipeline r / P, so the
                                     ranks are P stages x D = ranks / P data-parallel replicas of each;
                                     one device per rank; fp32; not with zero, balance weights/auto or
                                     accumulate (micro_batches replaces it) */
  int micro_batches;              /* M: micro-batches per step streamed through the stages (P > 1;
                                     batch must divide by it; 0 means P) */
  clt_pipeline_schedule pipeline_schedule; /* CLT_PIPELINE_1F1B (default) or CLT_PIPELINE_GPIPE */
  const char *stages;             /* how to cut: NULL or "" even by layer count; "4,4,4": layers per
                                     stage (blocks expanded, the input line not counted), never inside
                                     a residual's branch; "auto": by each piece's forward and backward
                                     time on each stage's device, the slowest stage least */
  /* sharded checkpoints (appended) */
  int checkpoint_one_file;        /* 0 (default): under zero 1 or 2 on several ranks each rank writes
                                     its shard of the state beside the checkpoint, and the checkpoint
                                     file is their index (doc/checkpoint.md); 1: rank 0 gathers the
                                     whole state and writes one file, as at zero 0 */
  /* watching a run (appended) */
  double progress_s;              /* rank 0 calls the callback with a CLT_EVENT_PROGRESS event after a
                                     step when at least this many seconds passed since the last one (or
                                     since fit began); 0 (default): never */
  const char *run_json;           /* a JSON object whose members the metrics' first record, the run
                                     record, takes too (the CLI's: its command line and its own
                                     options); NULL: none; anything but an object is CLT_EINVAL */
  /* optimizer offload and uneven shards (appended) */
  int offload;                    /* clt_offload: CLT_OFFLOAD_OPTIMIZER keeps the optimizer state in host
                                     memory and steps it there (8 bytes a parameter of the shard less on
                                     the device with Adam/AdamW); not with pipeline, nor an optimizer
                                     without state. CLT_OFFLOAD_NONE (default) */
  int shard_by;                   /* clt_shard_by: how ZeRO's shards are sized (zero 1 or 2 on several
                                     ranks). CLT_SHARD_EQUAL (default) */
  const double *shard_weights;    /* CLT_SHARD_WEIGHTS: one per rank (>= 0, not all 0) */
  int shard_nweights;
  clt_recompute recompute;        /* CLT_RECOMPUTE_NONE (default) or CLT_RECOMPUTE_BLOCKS (appended) */
} clt_train_options;

/* The defaults, as each field says. clt_trainer_create checks every field
 * before it makes anything: a count below its least (the batch, epochs and
 * accumulate 1, any other 0, so max_steps = -3 is not taken for no limit), a kind
 * outside its enum (balance, schedule.kind, pipeline_schedule,
 * optimizer.kind) or a flag other than 0 or 1 (decay_all, drop_last,
 * optimizer.nesterov) is CLT_EINVAL naming the field and its value. */
CLT_API void clt_train_options_defaults(clt_train_options *o);

/* What one replica of a model takes on its device for a micro-batch, in
 * bytes, as clt_trainer_create would allocate it (the one layout both use);
 * CLBlast's temporary copies of GEMM operands come on top. */
typedef struct clt_replica_memory {
  int64_t batch;             /* samples per run: the batch / accumulate of the options */
  uint64_t parameters;       /* float32 */
  uint64_t gradients;        /* float32, and their float16 copy when fp16 gradients are all-reduced */
  uint64_t optimizer_state;  /* the optimizer's state slots: momentum, Adam's two moments, ... */
  uint64_t activations;      /* every layer's output and what its backward keeps, the input and labels */
  uint64_t activation_grads; /* the two gradient buffers, backward scratch, residuals' skip gradients */
  uint64_t workspace;        /* conv2d's im2col and the kernels' scratch space */
  uint64_t total;
  uint64_t largest;          /* the largest single buffer, which must fit CL_DEVICE_MAX_MEM_ALLOC_SIZE */
  const char *largest_what;  /* what it holds ("the activations") */
} clt_replica_memory;

/* The memory a replica of m needs with the options o (NULL: the defaults):
 * their batch / accumulate samples per run, optimizer and precision. The
 * gradients' float16 copy is counted under fp16 (it exists with two
 * replicas or more). */
CLT_API int clt_model_replica_memory(const clt_model *m, const clt_train_options *o, clt_replica_memory *out);
/* The same for one replica of a job of nranks ranks (one replica each):
 * under o->zero 1, optimizer state for the largest rank's shard of the
 * parameters (the all-reduce's segments of o->bucket_mb buckets), which is
 * what clt_trainer_create allocates there; under o->zero 2 (accumulate 1)
 * gradients for that shard plus the bucket buffers the backward writes
 * into (two, three with tied weights, each as long as the longest bucket
 * it holds); under o->zero 3 parameters for that shard too plus the
 * ring that holds the two largest neighbouring layers' parameters; with
 * o->zero 0 or one rank, as
 * clt_model_replica_memory. *shard_params, when not NULL, receives the
 * parameters that state covers. */
CLT_API int clt_model_replica_memory_ranks(const clt_model *m, const clt_train_options *o, int nranks,
                                           clt_replica_memory *out, int64_t *shard_params);
/* CLT_OK when need fits device d (its total within the global memory, its
 * largest buffer within one allocation), else CLT_EDEVMEM with a message
 * that says what is needed, broken down, and what d has, naming d. */
CLT_API int clt_replica_memory_check(const clt_replica_memory *need, const clt_device_info *d);

typedef struct clt_trainer clt_trainer;

/* Replicas of m on every device of devs (a context each), on this rank of
 * comm (NULL: this process alone). Collective over comm: every rank calls it
 * with its own devices, and the model, options and parameter count must
 * agree across ranks (CLT_EMISMATCH naming the rank and the field).
 * Parameters are initialised from the seed on rank 0 and broadcast. */
CLT_API int clt_trainer_create(const clt_model *m, const clt_devices *devs, clt_comm *comm,
                               const clt_train_options *o, clt_trainer **out);
CLT_API void clt_trainer_destroy(clt_trainer *t);
/* Train on `train` for the configured epochs (or max_steps), evaluating on
 * `test` (may be NULL) after each epoch: epochs, evaluation, events and
 * checkpoints around the same step as clt_trainer_step, fed by a sampler
 * and one prefetcher per replica. A regression model (loss mse, l1,
 * huber) trains on a dataset of float targets (clt_dataset_open with
 * regression set), a classifier on class labels; the other way round is
 * CLT_EINVAL naming the file. A regression model's events carry the RMSE
 * where a classifier's carry the accuracy (in the metrics: "rmse",
 * "test_rmse"). Collective. */
CLT_API int clt_trainer_fit(clt_trainer *t, const clt_dataset *train, const clt_dataset *test);

/* What one clt_trainer_step did; the same on every rank. */
typedef struct clt_step_result {
  double loss;      /* mean over the global batch (per label, or per target value) */
  double accuracy;  /* fraction of the global batch's labels predicted right; NaN for regression */
  double grad_norm; /* norm of the mean gradient (the same on every rank; NaN when skipped) */
  int skipped;      /* 1: fp16 loss scaling skipped the update (the gradient overflowed) */
  int64_t global_n; /* samples in the global batch: the sum of every rank's n */
  double rmse;      /* regression: the root of the mean squared error over the global batch's target
                       values (whatever the loss); NaN for a classifier */
} clt_step_result;

/* One optimizer step on the caller's own samples, for applications with
 * their own data loop (a running simulation, a custom sampler), with the
 * semantics of PyTorch DDP: every rank passes ITS OWN n samples, x (n,
 * clt_model_input_size) float32 (for a language model, token ids as exact
 * floats) and y (n * clt_model_labels_per_sample) int32 labels in [0,
 * clt_model_num_classes), or CLT_IGNORE_LABEL for a label that counts for
 * nothing (the mean is over the others); n may differ between ranks
 * and be 0 on some (x and y may then be NULL), not on all. The trainer
 * splits a rank's samples over its replicas by their shares, runs forward
 * and backward in runs of at most batch / accumulate samples per replica
 * (accumulating), sums the gradients over all replicas of all ranks,
 * divides by the global number of labels that count and updates every replica: the
 * update is the single-device update on the concatenation of all ranks'
 * samples, and all replicas hold the same bits after it. The learning-rate
 * schedule, loss scaling, clipping, balance_every and check_every count
 * these steps as fit does; epochs, max_steps and the sampler position are
 * fit's and are left alone. Bad input on any rank (n < 0, NULL x or y with
 * n > 0, a label out of range) is CLT_EINVAL on every rank, and a NaN or
 * Inf in x CLT_ENONFINITE, naming it (sample and value) on the rank that
 * gave it and the rank elsewhere; nothing is changed. out
 * may be NULL. A regression model takes float targets through
 * clt_trainer_step_targets instead (labels to it are CLT_EINVAL).
 * Collective: every rank calls it the same number of times. */
CLT_API int clt_trainer_step(clt_trainer *t, const float *x, const int32_t *y, int64_t n, clt_step_result *out);
/* The same step for a regression model (a spec with `loss mse`, `l1` or
 * `huber`): targets (n, clt_model_labels_per_sample) float32, one per
 * value of the model's output, whatever its shape; count is the number of
 * floats in targets, n * clt_model_labels_per_sample (so a buffer of the
 * wrong shape is caught). The loss is the mean over every target value of
 * the global batch (PyTorch's reduction='mean' on the concatenation of all
 * ranks' samples) and the update divides by that count; everything else
 * (splitting, accumulation, the exchange, bitwise-identical replicas, f16
 * loss scaling, clipping) is clt_trainer_step's, through the same internal
 * step. A separate function rather than a `const void *` y keeps the
 * element type checked by the compiler (and by Fortran's interfaces), and
 * the model's loss says which one it takes: labels to a regression model,
 * or targets to a classifier, are CLT_EINVAL naming the function to call.
 * Bad input on any rank (n < 0, NULL x or targets with n > 0, count that
 * is not n times the targets per sample, a target that is NaN or infinite,
 * naming its index and sample) is CLT_EINVAL on every rank, as for
 * clt_trainer_step; nothing is changed. out->rmse is the RMSE and
 * out->accuracy NaN. Collective. */
CLT_API int clt_trainer_step_targets(clt_trainer *t, const float *x, const float *targets, int64_t n, int64_t count,
                                     clt_step_result *out);
/* Mean loss and accuracy over the whole of ds, split across all replicas of
 * all ranks; for a regression model (ds of float targets) the mean loss
 * and the RMSE over every target value, in *accuracy. Collective. */
CLT_API int clt_trainer_evaluate(clt_trainer *t, const clt_dataset *ds, double *loss, double *accuracy);
/* The model's output for n samples x (n, clt_model_input_size floats; token
 * ids for a language model): the forward pass of this rank's first replica
 * in evaluation mode (dropout off, no gradient), the last layer's output
 * (the logits: n x outputs floats, outputs = num_classes for a classifier,
 * T x vocabulary for a language model, the targets per sample for a
 * regression model) into out, which holds count floats.
 * With labels y (n x labels per sample, may be NULL) *loss (may be NULL)
 * gets the SUMMED cross-entropy over them, as training computes it; NaN
 * without. Not collective: no other rank or replica takes part. */
CLT_API int clt_trainer_forward(clt_trainer *t, const float *x, const int32_t *y, int64_t n, float *out,
                                int64_t count, double *loss);
/* clt_trainer_forward for a regression model: the output (n x the targets
 * per sample floats) into out, and with targets (the same count as the
 * output, as clt_trainer_step_targets takes them; may be NULL) *loss gets
 * the SUMMED regression loss over every target value, as training computes
 * it (NaN without targets); *sq_error (may be NULL) the summed squared
 * error, so that sqrt(sq_error / (n x targets per sample)) is the RMSE.
 * Labels to a regression model (clt_trainer_forward with y) or targets to
 * a classifier are CLT_EINVAL. Not collective. */
CLT_API int clt_trainer_forward_targets(clt_trainer *t, const float *x, const float *targets, int64_t n, float *out,
                                        int64_t count, double *loss, double *sq_error);
/* The gradient of the MEAN loss over n samples (x and y as
 * clt_trainer_step takes them; labels CLT_IGNORE_LABEL count for nothing,
 * the mean is over the others), without an update: forward and backward of
 * this rank's first replica in runs of at most batch / accumulate samples,
 * accumulated, then divided by the labels that count (and by the loss scale
 * in f16). grad receives clt_model_param_count floats in the layout of
 * clt_trainer_params (a tied weight once, at its owner, with both
 * contributions); count is its room. *loss (may be NULL) gets the mean loss
 * of the same forward. Dropout is active, with the masks the next
 * clt_trainer_step would draw for the same samples on one replica. The
 * replica's gradient arena is zeroed before and after; parameters,
 * optimizer state and the step count are left alone. Bad input (n < 1,
 * NULL x, y or grad, a label out of range, no label that counts) is
 * CLT_EINVAL and count below the parameter count CLT_ESHAPE, with grad
 * untouched. Not collective: no other rank or replica takes part. */
CLT_API int clt_trainer_gradient(clt_trainer *t, const float *x, const int32_t *y, int64_t n, float *grad,
                                 int64_t count, double *loss);
/* clt_trainer_gradient for a regression model: targets (n x the targets
 * per sample floats, as clt_trainer_step_targets takes them, every one
 * finite), the gradient of the mean loss over every target value. Labels
 * to a regression model (clt_trainer_gradient) or targets to a classifier
 * are CLT_EINVAL. Not collective. */
CLT_API int clt_trainer_gradient_targets(clt_trainer *t, const float *x, const float *targets, int64_t n, float *grad,
                                         int64_t count, double *loss);
/* A copy of the parameters (count floats = clt_model_param_count). Under a
 * pipeline (clt_train_options.pipeline > 1) collective: the stages' parts
 * gathered, the whole model on every rank. */
CLT_API int clt_trainer_params(clt_trainer *t, float *out, int64_t count);
CLT_API int64_t clt_trainer_steps_done(const clt_trainer *t);
/* Replicas on all ranks together (under a pipeline: of this rank's stage). */
CLT_API int clt_trainer_replicas(const clt_trainer *t);
/* The pipeline's cut: returns its stages P (1 without a pipeline) and
 * fills the first cap + 1 entries of lines (may be NULL when cap is 0)
 * with the spec line where each stage starts, then the last line plus
 * one. Count-then-fill. */
CLT_API int clt_trainer_stages(const clt_trainer *t, int *lines, int cap);
/* Save the parameters as a .safetensors file PyTorch loads: tensors named as
 * nn.Sequential names the same layer list without its input line
 * ("0.weight", "0.bias", "3.weight", ...), and metadata holding the model
 * spec. Rank 0 writes, atomically; collective. */
CLT_API int clt_trainer_save_weights(clt_trainer *t, const char *path);
/* Load parameters saved by clt_trainer_save_weights (or PyTorch with the
 * same names and shapes, or the "params/" tensors of a checkpoint) into
 * every replica; rank 0 reads and broadcasts. A missing tensor or a shape
 * that does not fit is CLT_ESHAPE naming it; a file cltrain wrote is also
 * checked against its CRC32s. */
CLT_API int clt_trainer_load_weights(clt_trainer *t, const char *path);
/* The per-feature normalisation of the model's inputs (as
 * clt_dataset_normalize_features: clt_model_input_size floats of shift and
 * scale, every scale finite and > 0; kind CLT_NORMALIZE_NONE with NULLs
 * clears it). Kept by the trainer and written into the metadata of the
 * weights files and checkpoints it saves ("normalization": JSON of kind,
 * shift and scale), and carried by clt_checkpoint_export, so that whoever
 * uses the weights preprocesses as training did. clt_trainer_load_weights
 * takes the normalisation its file carries (none: none). With one set,
 * the step API normalises the caller's samples first: clt_trainer_step,
 * _step_targets, _step_buffers, _forward, _forward_targets, _gradient and
 * _gradient_targets take x as stored (raw features), while fit and
 * evaluate take datasets, which carry their own normalisation
 * (clt_dataset_normalize_features). Not collective. */
CLT_API int clt_trainer_set_normalization(clt_trainer *t, clt_normalize_kind kind, const float *shift,
                                          const float *scale);
/* The normalisation saved in a weights file or checkpoint: *kind
 * (CLT_NORMALIZE_NONE and *n 0 when it holds none), *n its features, and
 * the first cap of them into shift and scale (either may be NULL; cap 0
 * to ask for n first). A malformed value is CLT_EFORMAT naming the file. */
CLT_API int clt_weights_normalization(const char *path, clt_normalize_kind *kind, float *shift, float *scale,
                                      int64_t cap, int64_t *n);

/* ---- checkpoints --------------------------------------------------------------
 *
 * A checkpoint is one .safetensors file (the Python safetensors package and
 * PyTorch load it) holding everything a run needs to go on exactly where it
 * stopped. Tensors, float32, named after nn.Sequential's names of the layers
 * without the input line:
 *   params/<i>.weight, params/<i>.bias        the parameters
 *   optim/<slot>/<i>.weight, ...              the optimizer's state, a tensor per parameter and
 *                                             state slot, named as libcltrain(3) lists them:
 *                                             SGD's momentum, Adam's m and v, ...
 * Metadata (strings; JSON where it says so), doc/checkpoint.md has them all:
 *   format "cltrain-checkpoint", format_version "1", cltrain_version, model
 *   (the spec text), param_count, step (optimizer steps done: the learning
 *   rate schedule and Adam's bias correction go on from it), epoch (0-based,
 *   of the next batch), sampler_position (JSON: epoch, step, micro_batch,
 *   samples_in_epoch, train_samples), rng (JSON: generator, seed,
 *   dropout_step), loss_scale, optimizer (JSON: kind and settings),
 *   training (JSON: batch, accumulate, ranks, replicas, balance, shares),
 *   epoch_progress (JSON: the epoch's sums so far), data_bytes, data_crc32
 *   (zlib CRC32 of the data section) and header_crc32.
 *
 * Saving writes a temporary file next to the target, flushes it, renames it
 * over the target and flushes the directory: a crash leaves the previous
 * file whole. Loading checks the format, version, size, both CRC32s, every
 * tensor's name and shape against the model, the optimizer and the seed,
 * and changes nothing unless all of it passes; errors name the file and
 * what does not match (CLT_EFORMAT: damaged or not a checkpoint;
 * CLT_ESHAPE: another model; CLT_EMISMATCH: another optimizer or seed).
 * A checkpoint loads on any number of ranks and devices, of any vendor; at
 * the same number of replicas the resumed run is bit for bit the run that
 * was not interrupted (with --balance equal or weights; auto measures time).
 *
 * Under zero 1 or 2 on several ranks (unless checkpoint_one_file) the file
 * at path is an index (format_version "2", no tensors, metadata 'shards')
 * of one shard file per rank beside it, PATH-stem.<save>.shard-<r>-of-<N>
 * .safetensors, each holding that rank's ranges of the parameters and
 * state: no rank gathers the whole state. Each is written as above, the
 * index last; loading, latest, rotation and export read it as one file.
 */

/* Save the trainer's state to path. Collective: rank 0 writes (under ZeRO
 * every rank its shard, rank 0 the index), and every rank returns rank 0's
 * outcome (a full disk is CLT_EIO on every rank, and the file that was at
 * path is untouched). */
CLT_API int clt_trainer_save_checkpoint(clt_trainer *t, const char *path);
/* Load a checkpoint into every replica (rank 0 reads and checks it, then
 * broadcasts): parameters, optimizer state, step counts and the position
 * clt_trainer_fit goes on from. The training set given to fit must then
 * have as many samples as the one the checkpoint was taken on. A different
 * global batch is allowed when the position falls on a whole number of the
 * new micro-batches. Collective. */
CLT_API int clt_trainer_load_checkpoint(clt_trainer *t, const char *path);
/* Load the newest checkpoint of dir (by the step in its name) that is
 * whole, skipping, with a warning each, files that fail their checks;
 * temporary files of interrupted saves are never considered. The path
 * loaded goes to loaded (size bytes; may be NULL). No checkpoint in dir, or
 * no dir, is CLT_ENOTFOUND (a fresh start is the caller's choice); only
 * damaged ones, CLT_EFORMAT. A whole checkpoint that does not fit the
 * trainer stops the search with its error. Collective. */
CLT_API int clt_trainer_resume_latest(clt_trainer *t, const char *dir, char *loaded, size_t size);
/* A timeline of training for Chrome's trace viewer or Perfetto
 * (ui.perfetto.dev): clt_trainer_trace_start starts recording on every
 * rank (collective: the ranks start together after a barrier, so one time
 * axis holds them all); clt_trainer_trace_save writes what was recorded
 * since, every rank's, to path (Trace Event Format JSON; rank 0 writes,
 * every rank returns its outcome) and stops (collective). Each rank is a
 * process; its lanes are "host", the thread that drives the steps (each
 * step, its data waits, enqueueing, the gradient exchange bucket by
 * bucket, the waits for the devices, the update, evaluation, checkpoints),
 * and one per replica, its device's forward, loss and backward layer by
 * layer (read from markers after every layer, from the device's clock).
 * Recording costs a marker per layer and a few spans per step; at most
 * 4M spans per rank are kept. clt_trainer_destroy drops a trace not saved. */
CLT_API int clt_trainer_trace_start(clt_trainer *t);
CLT_API int clt_trainer_trace_save(clt_trainer *t, const char *path);
/* What an output path is for, to clt_check_output. */
typedef enum clt_output_kind {
  CLT_OUTPUT_FILE = 0,   /* a file written whole and renamed into place (weights, a checkpoint) */
  CLT_OUTPUT_APPEND = 1, /* a file appended to (metrics) */
  CLT_OUTPUT_DIR = 2     /* a directory files are written into, made if missing (checkpoints) */
} clt_output_kind;
/* Every file the library writes is written whole: a temporary file beside
 * it (path.tmp.PID), flushed, renamed over it, the directory flushed; only
 * nothing or a regular file is replaced. A symbolic link is followed: the
 * regular file it leads to is replaced and the link stays. A directory, a
 * device, a FIFO or a socket in an output's place, or a link to one or to
 * nothing, is CLT_EIO naming the path and what is there, and nothing is
 * written. Appending (metrics) likewise only to a regular file.
 *
 * Whether path can be written as kind says, checked by doing what the
 * writer will do (creating its temporary file in the directory, then
 * removing it): CLT_OK, or CLT_EIO naming the path and the reason: a
 * directory, device, FIFO or socket in a file's place, a missing or
 * read-only directory, no permission, a name or path too long, a directory
 * another run has locked (checkpoint_dir). Call it before long work whose
 * result goes there; fit() checks its metrics file and checkpoint
 * directory itself before the first step. */
CLT_API int clt_check_output(const char *path, clt_output_kind kind);
/* The file fit() writes at step `step` in dir: "dir/ckpt-0000000100.safetensors". */
CLT_API int clt_checkpoint_path(const char *dir, int64_t step, char *out, size_t size);
/* Write a checkpoint's parameters alone as a weights file (the names and
 * metadata of clt_trainer_save_weights) after checking the checkpoint.
 * Needs no device. */
CLT_API int clt_checkpoint_export(const char *checkpoint, const char *out);
/* The sampler position clt_trainer_fit goes on from. */
CLT_API void clt_trainer_position(const clt_trainer *t, clt_sampler_pos *pos);

#ifdef __cplusplus
}
#endif
#endif /* CLTRAIN_H */
