/*
 * replica.h: one copy of a model on one device: its buffers (the parameter,
 * gradient and optimizer-state arenas, one flat buffer each; activations
 * for a batch of up to max_batch samples) and a layer runner that takes a
 * batch forward, through the loss and backward, each layer a call through
 * its kind in the layer table (model/layer.h).
 *
 * The runner knows nothing of how replicas are joined. What a parallel
 * strategy does during a run it hangs on the run through a hook table
 * (clt__run_hooks, the shape of ggml's backend interface): data parallelism
 * marks gradients complete as the backward passes their layers (src/dp),
 * ZeRO stage 2 says where a gradient is written, a pipeline stage runs the
 * forward and backward in pieces on activation sets it owns (src/pp).
 *
 *   replica.c   the buffers, their layout and what they take (counted
 *               before allocating, and measured), activation sets;
 *   run.c       the layer runner: upload, forward, loss, backward, read;
 *   run_time.c  a run's markers: its device time, the trace's layer spans,
 *               the profile, waits with a timeout.
 */
#ifndef CLT_MODEL_REPLICA_H
#define CLT_MODEL_REPLICA_H

#include "core/internal.h"

#include <stdatomic.h>
#include "model/layer.h"
#include "model/spec.h"

typedef struct clt__replica clt__replica;

/* ---- what runs hang on a replica (optional members may be NULL) ---- */

typedef struct clt__run_hooks {
  /* (optional) A run starts: before its first layer (and, in a piecewise
   * run, at clt__replica_begin). */
  int (*run_begin)(void *user, const clt__pass *pass);
  /* (optional) Before layer i's forward: where ZeRO stage 3 places the
   * layer's gathered parameters (src/dp/zero_units.c). Under --recompute
   * blocks also in the backward, for each layer of a block pass run again
   * (before the backward_begin of the pass's last layer, and in the same
   * order as in the forward). */
  int (*forward_begin)(void *user, int layer, const clt__pass *pass);
  /* (optional) Before and after layer i's backward is enqueued. */
  int (*backward_begin)(void *user, int layer, const clt__pass *pass);
  int (*backward_end)(void *user, int layer, const clt__pass *pass);
  /* (optional) The run's work is all enqueued (a run of no samples: at
   * once), before its end marker. */
  int (*run_end)(void *user, const clt__pass *pass);
  /* (optional) Where the gradient of parameter p is written: a view of p's
   * shape. Without it, p's range of the gradient arena. */
  int (*grad_view)(void *user, const clt_param_spec *p, clt_tensor *out);
  /* (optional) Where parameter p is read, in a run of the layer whose
   * forward_begin or backward_begin came last: a view of p's shape.
   * Without it, p's range of the parameter arena. */
  int (*param_view)(void *user, const clt_param_spec *p, clt_tensor *out);
  /* (optional) Sum count doubles over every replica of every rank, in
   * place: a layer's statistics over the global batch (batchnorm in
   * training, in its forward and its backward). Every replica calls it
   * for the same layers in the same order, one of no samples with zeros
   * (clt__replica_run_empty). Without it the replica's own sums are the
   * batch's (one device). Called with sums NULL it sums nothing and says
   * whether it would: 1 when it adds other replicas' or ranks' sums, 0 when
   * the replica's own are the batch's (which then stay on the device). */
  int (*sum_stats)(void *user, int layer, double *sums, int count);
} clt__run_hooks;

/* ---- the buffers ---- */

/* How a replica is made. */
typedef struct clt__replica_config {
  int64_t max_batch;       /* samples a run takes at most */
  clt_dtype act_dtype;     /* activations and their gradients stored as f32, or f16 (mixed precision) */
  int state_per_param;     /* optimizer state floats per parameter */
  int64_t state_params;    /* the parameters the state covers (fewer than P when it is split over ranks) */
  int no_grad_arena;       /* no P-float gradient arena: the hooks' grad_view places every gradient */
  void *grads_at;          /* the arena over these host bytes (P floats, page-aligned, kept by the caller; a
                              context with shared_buffers), else a buffer of its own */
  int recompute;           /* --recompute blocks (clt_recompute): an activation set keeps only what the
                              backward cannot make again, each block pass's input (and output); the
                              pass's other layers live in the replica's block buffers, one pass at a time,
                              and the backward runs the pass's forward again there before its layers */
  int64_t param_floats;    /* floats of the parameter buffer: 0, the P-float arena; else a part of the
                              parameters laid out by the caller, and the hooks' param_view places every
                              parameter a run reads */
} clt__replica_config;

/* A batch's activations: every layer's output and what its backward
 * keeps (act), the f32 / i32 values kept (aux), the input as f32 before
 * rounding or as token ids (input32, NULL when not needed), and the views
 * of each layer's output from the last forward in this set (outs[0]: the
 * input). A replica has one of its own; a pipeline stage makes more, one
 * per micro-batch it holds between its forward and backward. */
typedef struct clt__act_set {
  cl_mem act, aux, input32;
  clt_tensor *outs;
} clt__act_set;

/* Per-layer places in the activation buffers (in elements). */
typedef struct clt__layer_slot {
  int64_t act_offset;   /* this layer's output in act */
  int64_t saved_offset; /* what it keeps for its backward, in act too */
  int64_t aux_offset;   /* f32 / i32 data kept for backward (argmax, mean/rstd, log-sum-exp) */
  int transient;        /* --recompute blocks: the three are in the replica's block_act and block_aux, not the set's */
  int recompute_from;   /* the last layer of a block pass with transient layers: the pass's first layer, whose
                           transient layers the backward runs again before this one's; else -1 */
} clt__layer_slot;

struct clt__replica {
  clt_context *ctx;
  const clt_model_spec *spec;
  clt__replica_config cfg;
  cl_mem params, grads, state; /* (P, or cfg.param_floats), (P) or none, (state_per_param * state_params) floats or none */
  clt__act_set own;            /* the replica's own activation set */
  cl_mem dbuf[2];              /* activation-gradient ping-pong, the largest layer output */
  cl_mem gscratch;             /* backward scratch of the layer that needs most (attention) */
  cl_mem *skip;                /* spec->skip_slots: residuals' skip-branch gradients */
  cl_mem workspace;            /* conv2d im2col; NULL without conv layers */
  cl_mem block_act, block_aux; /* --recompute blocks: one block pass's transient layers (every set's), or NULL */
  cl_mem labels;               /* (max_batch * labels_per_sample) i32, or a regression model's f32 targets */
  cl_mem losses;               /* the same count of per-label losses (regression: then the squared errors) */
  cl_mem scalars;              /* [0] loss sum (f32), [1] correct count (i32) or squared error (f32) */
  clt__layer_slot *slots;      /* one per layer */
  int first_trainable;         /* a backward that needs no input gradient stops at this layer */
  const clt__run_hooks *hooks; /* what the run calls (clt__replica_set_hooks), or NULL */
  void *hooks_user;
  /* run_time.c: markers around the last recorded run (start_ev, end_ev)
   * and its wall time from its enqueueing to the end marker's completion
   * callback, which runs on a driver thread (nanoseconds); the loss read
   * in flight; how long a wait may take (CLT_TIMEOUT; 300 until set), and
   * where the loss is read to (the replica's own memory: after a timeout
   * the device may still write it). */
  cl_event start_ev, end_ev, loss_ev;
  int64_t run_start_ns;
  _Atomic int64_t run_end_ns;
  _Atomic int callbacks_pending; /* registered and not yet run: r must outlive them */
  double timeout_s;
  unsigned char loss_host[8];
  /* With a trace (clt__replica_trace): markers of the last run after its
   * upload (0), each layer i's forward (i), the loss (L) and each layer's
   * backward (L + i); NULL where it did not run. */
  cl_event *trace_ev;
  /* CLT_PROFILE=1: wait after every layer and add up seconds per layer
   * (forward, backward), reported when the replica is destroyed. */
  double *prof_fwd, *prof_bwd, prof_loss, prof_t0;
  int64_t prof_runs;
  int prof_warm; /* the first training run (kernel builds) left out of the profile */
};

/* Make a replica of spec on ctx as cfg says, its parameters uploaded from
 * params (spec->param_count floats, or cfg->param_floats); gradients and optimizer state start
 * at zero. */
int clt__replica_create_with(clt_context *ctx, const clt_model_spec *spec, const clt__replica_config *cfg,
                             const float *params, clt__replica **out);
/* The plain one: state for every parameter, its own gradient arena. */
int clt__replica_create(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                        clt_dtype act_dtype, const float *params, clt__replica **out);
void clt__replica_destroy(clt__replica *r);
/* Hang hooks on every later run (NULL: none). hooks must outlive them. */
void clt__replica_set_hooks(clt__replica *r, const clt__run_hooks *hooks, void *user);

/* What clt__replica_create_with(…, cfg, …) allocates, from the same
 * layout (gradients: the arena only). */
void clt__replica_memory(const clt_model_spec *spec, const clt__replica_config *cfg, clt_replica_memory *out);
/* clt_replica_memory_check against d with at most cap bytes of it (0: all
 * of it; cap also bounds one buffer): --max-device-memory. */
int clt__replica_memory_fits(const clt_replica_memory *need, const clt_device_info *d, uint64_t cap);
/* What the replica holds on its device, from the sizes of its buffers (the
 * measured counterpart of clt__replica_memory, part by part), bytes. */
typedef struct clt__replica_bytes {
  uint64_t parameters, gradients, optimizer_state, activations, activation_grads, workspace, total;
} clt__replica_bytes;
void clt__replica_device_bytes(const clt__replica *r, clt__replica_bytes *out);

/* Another activation set for r's batches (clt__act_set_destroy frees it),
 * and the device bytes one takes. */
int clt__act_set_create(const clt__replica *r, clt__act_set *set);
void clt__act_set_destroy(clt__act_set *set);
uint64_t clt__act_set_bytes(const clt_model_spec *spec, int64_t max_batch, clt_dtype act_dtype, int recompute);

/* Tensor views of the arenas (an empty view where there is none). */
clt_tensor clt__replica_params(const clt__replica *r);
clt_tensor clt__replica_grads(const clt__replica *r);
clt_tensor clt__replica_state(const clt__replica *r);
/* Zero the gradient arena (nothing without one). */
int clt__replica_zero_grads(clt__replica *r);
clt_context *clt__replica_context(const clt__replica *r);

/* ---- runs (run.c) ---- */

/* Upload n samples x (n, input size) and their labels y (or a regression
 * model's targets, pass->targets), run the forward pass and the loss;
 * with pass->train the backward accumulates the gradient of the summed
 * loss. Only enqueues work: clt__replica_read_loss waits for it. x and y
 * must stay valid until then. */
int clt__replica_run(clt__replica *r, const float *x, const int32_t *y, int64_t n, const clt__pass *pass);
/* A run of no samples (a replica can get none of a partial last batch):
 * the hooks' run_begin and run_end, the run's markers when recorded, and
 * in training the global-batch sums of the layers that make them
 * (CLT_KIND_SYNC_STATS), with zeros. */
int clt__replica_run_empty(clt__replica *r, const clt__pass *pass);

/* A run in pieces, on an activation set of the caller's (a pipeline
 * stage's runner, src/pp): begin and end bracket it (a recorded run's
 * markers, the hooks' run_begin and run_end). */
int clt__replica_begin(clt__replica *r, const clt__pass *pass);
int clt__replica_end(clt__replica *r, const clt__pass *pass);
/* The input x of n samples into set s (outs[0]), and with targets (int32
 * labels, or a regression model's f32 targets) those too. */
int clt__replica_input(clt__replica *r, clt__act_set *s, const float *x, const void *targets, int64_t n);
/* Layers 1 .. L-1 of n samples whose input is in s. */
int clt__replica_forward(clt__replica *r, clt__act_set *s, int64_t n, const clt__pass *pass);
/* The loss of s's last output (its sum into the scalars that
 * clt__replica_read_loss reads) and, in training, its gradient: the dy of
 * a backward from the loss. */
int clt__replica_loss(clt__replica *r, clt__act_set *s, int64_t n, const clt__pass *pass);
/* The backward of s's batch from dy_host (n x the output shape, f32; NULL:
 * from the loss's gradient) into the gradients (accumulated); with
 * to_input on to the gradient at the input, left in *dx (a view valid
 * until the next backward). */
int clt__replica_backward(clt__replica *r, clt__act_set *s, int64_t n, const float *dy_host, int to_input,
                          const clt__pass *pass, clt_tensor *dx);
/* s's last layer's output (n samples). */
clt_tensor clt__act_set_output(const clt__replica *r, const clt__act_set *s);
/* A tensor of r's into host as f32 (waits for it, moving the context's
 * progress hook meanwhile). */
int clt__replica_read(clt__replica *r, const clt_tensor *t, float *host);

/* ---- a run's time and markers (run_time.c) ---- */

/* Waits for the device give up after timeout_s seconds (CLT_ETIMEDOUT
 * naming the device); 300 until set. */
void clt__replica_set_timeout(clt__replica *r, double timeout_s);
/* Wait for the last run and read its summed loss and *metric: the number
 * correct, or for a regression model the summed squared error (a device
 * that does not finish within the timeout: CLT_ETIMEDOUT, and the replica
 * can then only be destroyed). */
int clt__replica_read_loss(clt__replica *r, float *loss, double *metric);
/* The same without waiting: the first call enqueues the read; *ready is
 * 0 until it is done, then 1 with loss and *metric set (the next call
 * starts a new read). A failed run is its error. */
int clt__replica_poll_loss(clt__replica *r, int *ready, float *loss, double *metric);
/* Drop a poll's read in flight (after a failure elsewhere): waits for it. */
void clt__replica_poll_cancel(clt__replica *r);
/* Wait, within the timeout, for everything queued so far. */
int clt__replica_finish(clt__replica *r, const char *what);
/* 1 while the last recorded run is still executing on the device. */
int clt__replica_busy(const clt__replica *r);
/* Seconds the last recorded run took, enqueue to completion (0 if
 * unknown); waits briefly for the completion callback. */
double clt__replica_run_time(clt__replica *r);
/* Mark every layer's end in later runs (on), or stop (off). */
int clt__replica_trace(clt__replica *r, int on);
/* The last run's layers as spans on `lane` of tr, from the device's clock
 * at the markers, placed so that the run ends at end_ns (when the host saw
 * it done); the run must be complete (its loss read). Nothing without
 * markers or a device clock. */
void clt__replica_trace_spans(clt__replica *r, clt__trace *tr, int lane, int64_t end_ns);

/* Internal to src/model (run.c, run_time.c, replica.c). */
int clt__replica_marker(clt__replica *r, cl_event *ev);
int clt__replica_trace_mark(clt__replica *r, int slot);
void clt__replica_trace_clear(clt__replica *r);
void clt__replica_charge(clt__replica *r, double *slot);
int clt__replica_time_run_end(clt__replica *r);
int clt__replica_wait_done(clt__replica *r);
void clt__replica_report_profile(const clt__replica *r);

#endif
