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


/* ---- models ---------------------------------------------------------------- */

/* A model as its spec file describes it: layers, shapes, parameter layout.
 * Host only; training makes the device replicas. Immutable once made, so it
 * may be shared between threads. */
typedef struct clt_model clt_model;

/* Read a model spec file (one layer per line, '#' comments; see README).
 * Mistakes are CLT_EFORMAT with "file:line:col: what" and the offending text. */
CLT_API int clt_model_load(const char *path, clt_model **out);
/* The same from text; name is used in messages. */
CLT_API int clt_model_parse(const char *text, const char *name, clt_model **out);
CLT_API void clt_model_destroy(clt_model *m);
CLT_API int clt_model_layer_count(const clt_model *m);   /* the input line included */
CLT_API int64_t clt_model_param_count(const clt_model *m);
CLT_API int64_t clt_model_input_size(const clt_model *m); /* floats per sample */
CLT_API int clt_model_num_classes(const clt_model *m);
CLT_API const char *clt_model_text(const clt_model *m);   /* the spec as written */
/* A table of layers, output shapes and parameter counts (malloc'd; free it). */
CLT_API int clt_model_summary(const clt_model *m, char **out);

/* ---- optimizers and learning-rate schedules ------------------------------- */

typedef enum clt_optimizer_kind { CLT_OPT_SGD = 0, CLT_OPT_ADAM = 1, CLT_OPT_ADAMW = 2 } clt_optimizer_kind;

typedef struct clt_optimizer_config {
  clt_optimizer_kind kind;
  float momentum;      /* SGD; 0 for none */
  int nesterov;        /* SGD with momentum */
  float weight_decay;  /* SGD and Adam: L2 added to the gradient; AdamW: decoupled */
  float beta1, beta2;  /* Adam/AdamW (0.9, 0.999) */
  float eps;           /* Adam/AdamW (1e-8) */
} clt_optimizer_config;

/* Defaults for a kind: SGD momentum 0.9, Adam betas (0.9, 0.999), eps 1e-8,
 * weight decay 0 (AdamW 0.01). */
CLT_API void clt_optimizer_defaults(clt_optimizer_kind kind, clt_optimizer_config *cfg);
/* "sgd", "adam", "adamw" -> kind; CLT_EINVAL naming the text otherwise. */
CLT_API int clt_optimizer_parse(const char *text, clt_optimizer_kind *out);
CLT_API const char *clt_optimizer_name(clt_optimizer_kind kind);
/* Floats of optimizer state per parameter: SGD 1 (0 without momentum), Adam 2. */
CLT_API int clt_optimizer_state_per_param(const clt_optimizer_config *cfg);

/* The optimizer step in plain C on host memory (p, grad: n floats; state:
 * clt_optimizer_state_per_param x n), operation for operation the device
 * kernels' float arithmetic: bit for bit what a device computes that rounds
 * divide and sqrt correctly. Replicas on devices that cannot (see
 * clt_device_info.fp32_exact_div_sqrt and clt_optimizer_needs_host) take
 * their step from here, so every replica holds the same bits. */
CLT_API void clt_optimizer_step_host(const clt_optimizer_config *cfg, int64_t t, float lr, float grad_scale,
                                     float *p, const float *grad, float *state, size_t n);
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
 */

typedef enum clt_train_event_kind { CLT_EVENT_STEP = 0, CLT_EVENT_EPOCH = 1 } clt_train_event_kind;

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
  double test_loss, test_accuracy;  /* EPOCH with a test set */
  double grad_norm;                 /* STEP: global gradient norm (when clipping; else NaN) */
} clt_train_event;

typedef void (*clt_train_callback)(const clt_train_event *ev, void *user);

typedef struct clt_train_options {
  int64_t batch;                  /* global batch per optimizer step (64) */
  int epochs;                     /* passes over the training set (10) */
  int64_t max_steps;              /* stop after this many optimizer steps; 0: no limit */
  int accumulate;                 /* micro-batches per optimizer step (1); batch must divide by it */
  clt_optimizer_config optimizer; /* SGD momentum 0.9 */
  clt_schedule schedule;          /* learning rate 0.01, constant */
  float clip;                     /* global-norm gradient clipping; 0: off */
  uint64_t seed;                  /* initialisation, shuffling, dropout (42) */
  int64_t eval_every;             /* also evaluate every N steps; 0: after each epoch only */
  int64_t log_every;              /* a step event every N steps (50) */
  const char *metrics_path;       /* JSON Lines written by rank 0; NULL: none */
  int drop_last;                  /* leave out each epoch's last partial batch */
  clt_train_callback callback;    /* called on rank 0 for every event; NULL: none */
  void *callback_user;
} clt_train_options;

CLT_API void clt_train_options_defaults(clt_train_options *o);

typedef struct clt_comm clt_comm;
typedef struct clt_dataset clt_dataset;
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
 * `test` (may be NULL) after each epoch. Collective. */
CLT_API int clt_trainer_fit(clt_trainer *t, const clt_dataset *train, const clt_dataset *test);
/* Mean loss and accuracy over the whole of ds, split across all replicas of
 * all ranks. Collective. */
CLT_API int clt_trainer_evaluate(clt_trainer *t, const clt_dataset *ds, double *loss, double *accuracy);
/* A copy of the parameters (count floats = clt_model_param_count). */
CLT_API int clt_trainer_params(clt_trainer *t, float *out, int64_t count);
CLT_API int64_t clt_trainer_steps_done(const clt_trainer *t);
/* Save the parameters as a .safetensors file PyTorch loads: tensors named as
 * nn.Sequential names the same layer list without its input line
 * ("0.weight", "0.bias", "3.weight", ...), and metadata holding the model
 * spec. Rank 0 writes, atomically; collective. */
CLT_API int clt_trainer_save_weights(clt_trainer *t, const char *path);
/* Load parameters saved by clt_trainer_save_weights (or PyTorch with the
 * same names and shapes) into every replica; rank 0 reads and broadcasts.
 * A missing tensor or a shape that does not fit is CLT_ESHAPE naming it. */
CLT_API int clt_trainer_load_weights(clt_trainer *t, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* CLTRAIN_H */
