/*
 * replica.h: one copy of a model on one device: the parameter, gradient and
 * optimizer-state arenas (one flat buffer each, so a bucket of gradients is
 * a contiguous range), the activations of a batch of up to max_batch
 * samples, and the forward and backward passes over the layer list.
 */
#ifndef CLT_MODEL_REPLICA_H
#define CLT_MODEL_REPLICA_H

#include "core/internal.h"

#include <stdatomic.h>
#include "model/spec.h"

typedef struct clt__replica clt__replica;

/* Per-layer places in the replica's buffers (in elements). */
typedef struct clt__layer_slot {
  int64_t act_offset;   /* this layer's output in the activation arena */
  int64_t saved_offset; /* what it keeps for its backward, in the activation arena too */
  int64_t aux_offset;   /* f32 / i32 data kept for backward (argmax, mean/rstd, log-sum-exp) */
} clt__layer_slot;

struct clt__replica {
  clt_context *ctx;
  const clt_model_spec *spec;
  int64_t max_batch;
  int state_per_param;
  int64_t state_params;        /* the parameters the state covers: P, or a ZeRO shard's (src/dp/zero.c) */
  cl_mem params, grads, state; /* (P), (P), (k*state_params) floats; state NULL when k = 0 */
  clt_dtype act_dtype;         /* how act and dbuf store values: f32, or f16 (mixed precision) */
  cl_mem act;                  /* every layer's output for max_batch samples */
  cl_mem dbuf[2];              /* gradient ping-pong, the largest layer output */
  cl_mem input32;              /* f16 only: the f32 input batch before rounding */
  cl_mem wire;                 /* f16 gradient copy for the all-reduce, or NULL */
  cl_mem aux;                  /* argmax indices, layernorm statistics, attention's log-sum-exp */
  cl_mem gscratch;             /* backward scratch of the layer that needs most (attention) */
  cl_mem *skip;                /* spec->skip_slots: residuals' skip-branch gradients */
  cl_mem workspace;            /* conv2d im2col; NULL without conv layers */
  cl_mem labels;               /* (max_batch * labels_per_sample) i32 */
  cl_mem losses;               /* the same count of per-label losses */
  cl_mem scalars;              /* [0] loss sum (f32), [1] correct count (i32) */
  clt__layer_slot *slots;      /* one per layer */
  int first_trainable;         /* backward stops at this layer */
  /* Gradient buckets: runs with pass->record put a marker on the queue when
   * the backward of each bucket's lowest layer is done, so its all-reduce
   * can start while the backward of earlier layers goes on. */
  int nbuckets;
  int *bucket_closed_at;       /* per bucket: the layer whose backward completes it */
  int64_t *bucket_lo, *bucket_hi; /* per bucket: its gradient range [lo, hi) */
  cl_event *bucket_ev;         /* per bucket, from the last recorded run */
  /* clt__replica_copy_out: bucket b is copied to copy_to[b] (NULL: not)
   * as it closes, by bucket_copied[b] in the last recorded run. */
  void **copy_to;
  cl_event *bucket_copied;
  cl_event start_ev, end_ev;   /* around the last recorded run */
  cl_event loss_ev;            /* clt__replica_poll_loss's read in flight, or NULL */
  /* Wall time of the last recorded run, from its enqueueing to the end
   * marker's completion callback (profiling clocks are not reliable on
   * every driver). Nanoseconds; the callback runs on a driver thread. */
  int64_t run_start_ns;
  _Atomic int64_t run_end_ns;
  _Atomic int callbacks_pending; /* registered and not yet run: r must outlive them */
  /* How long a wait for the device may take before it is an error
   * (CLT_TIMEOUT; the trainer sets its communicator's), and where the
   * loss is read to: the replica's own memory, since after a timeout the
   * device may still write it. */
  double timeout_s;
  unsigned char loss_host[8];
  /* With a trace (clt__replica_trace): markers of the last run after its
   * upload (0), each layer i's forward (i), the loss (L) and each layer's
   * backward (L + i); NULL where it did not run. */
  cl_event *trace_ev;
  /* CLT_PROFILE=1: wait after every layer and add up seconds per layer
   * (forward, backward), reported when the replica is destroyed. */
  double *prof_fwd, *prof_bwd, prof_loss;
  int64_t prof_runs;
  /* A pipeline stage's activation sets (clt__replica_set_activation_sets):
   * act, aux and input32 of each micro-batch in flight, set 0 the ones
   * above; and each set's layer output views from its forward, which its
   * backward reads. nsets 0: none made (a plain replica). */
  int nsets;
  cl_mem *set_act, *set_aux, *set_in32;
  clt_tensor *set_outs; /* nsets x nlayers */
  /* ZeRO stage 2 (model/replica_pool.c): no gradient arena (grads NULL).
   * The backward writes bucket b into slot bucket_slot[b] of a pool of
   * buffers (pool; pool16 its f16 copies under the f16 wire), zeroed when
   * the bucket opens: after the host has read
   * bucket bucket_after[b], the slot's previous user (bucket_read[], user
   * events the exchange sets). The reduced shard of the gradient is gshard
   * (shard_floats f32; gshard16 what the f16 wire brings). */
  cl_mem pool, pool16, gshard, gshard16;
  int64_t shard_floats;
  int *bucket_slot, *bucket_after, *bucket_opened_at;
  int64_t *slot_at;            /* per bucket: its slot's first float in pool */
  cl_event *bucket_read;       /* per bucket, for the last recorded run */
  unsigned char *bucket_open;  /* per bucket: opened in the run being enqueued */
};

/* Make a replica of spec on ctx for batches of up to max_batch samples,
 * activations stored as act_dtype (CLT_F32 or CLT_F16). Parameters are uploaded from params (spec->param_count floats); gradients
 * and optimizer state start at zero. */
int clt__replica_create(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                        clt_dtype act_dtype, const float *params, clt__replica **out);
/* The same with optimizer state for state_params parameters only (a ZeRO
 * shard, laid out as src/dp/zero.c says) instead of all of them; with
 * grads_at, the gradient arena is a buffer over those host bytes
 * (param_count floats, page-aligned, on a context with shared_buffers:
 * the trainer's arena in node-shared memory), else a buffer of its own. */
int clt__replica_create_sharded(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                                int64_t state_params, clt_dtype act_dtype, const float *params, void *grads_at,
                                clt__replica **out);
/* The same without a gradient arena: clt__replica_set_pool gives it the
 * buckets' pool and the shard's gradient before it runs (ZeRO stage 2). */
int clt__replica_create_pooled(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                               int64_t state_params, clt_dtype act_dtype, const float *params, clt__replica **out);
void clt__replica_destroy(clt__replica *r);
/* What clt__replica_create(ctx, spec, max_batch, state_per_param,
 * act_dtype) allocates, from the same layout; wire: with the f16 copy of
 * the gradients that clt__replica_set_buckets may add. */
void clt__replica_memory(const clt_model_spec *spec, int64_t max_batch, int state_per_param, clt_dtype act_dtype,
                         int wire, clt_replica_memory *out);
/* The same with optimizer state for state_params parameters (a ZeRO
 * shard) and grad_floats floats of gradients (P; under ZeRO stage 2 the
 * shard's and the bucket pool's). */
void clt__replica_memory_sharded(const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                                 int64_t state_params, int64_t grad_floats, clt_dtype act_dtype, int wire,
                                 clt_replica_memory *out);
/* clt_replica_memory_check against d with at most cap bytes of it (0: all
 * of it; cap also bounds one buffer): --max-device-memory. */
int clt__replica_memory_fits(const clt_replica_memory *need, const clt_device_info *d, uint64_t cap);


/* Upload n samples (n, input size) and their labels (or a regression
 * model's targets, pass->targets), run the forward pass
 * and the loss; with `train`, dropout is active (keyed by seed, step and the
 * first sample's global index) and the backward pass accumulates the
 * gradient of the summed loss into the gradient arena. Only enqueues work:
 * clt__replica_read_loss waits for it. x and y must stay valid until then. */
typedef struct clt__pass {
  int train;
  int record;           /* mark bucket completions and the run's device time */
  uint64_t seed, step;
  int64_t global_first; /* global index of sample 0 of this slice, for dropout masks */
  float loss_scale;     /* the backward starts from loss_scale * dloss (0 means 1) */
  float *logits;        /* not NULL: the last layer's output, (n, its shape) as f32, is read back into it
                           (the run then waits for the forward) */
  const float *targets; /* a regression model's float targets (n * labels_per_sample), which it takes in
                           place of the labels y (NULL then); must stay valid as y */
} clt__pass;
int clt__replica_run(clt__replica *r, const float *x, const int32_t *y, int64_t n, const clt__pass *pass);
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
 * starts a new read). A failed run is its error. Another replica's work
 * can go on meanwhile (evaluation on all of a process's devices at once). */
int clt__replica_poll_loss(clt__replica *r, int *ready, float *loss, double *metric);
/* Drop a poll's read in flight (after a failure elsewhere): waits for it. */
void clt__replica_poll_cancel(clt__replica *r);

/* Buckets (src/dp/buckets.c lays them out): bucket b is the gradient range
 * [lo[b], hi[b]), complete once the backward of layer closed_at[b] is done
 * (a bucket whose layer the backward never reaches closes when it ends).
 * Recorded runs put a marker on the queue there; with `wire`, each bucket
 * is also rounded to an f16 copy (for an f16 all-reduce) before its marker.
 * All arrays are copied. */
int clt__replica_set_buckets(clt__replica *r, int nbuckets, const int *closed_at, const int64_t *lo,
                             const int64_t *hi, int wire);
/* On a device whose buffers are host memory (CL_DEVICE_HOST_UNIFIED_MEMORY:
 * PoCL, llvmpipe), recorded runs copy each bucket b (what the exchange
 * sums: its range of the exchange view, or its slot of the pool) to host
 * memory at to[b] (nbuckets; NULL, or to NULL: not) on the compute queue
 * as it closes, before its marker. The exchange then starts
 * from the copy, and a pool's slot is free for its next bucket in the
 * queue's order. On a CPU device of one thread, a read on another queue
 * took turns with the backward's kernels queued ahead of it, so the
 * exchange waited for them, and under ZeRO stage 2 they for the exchange.
 * Elsewhere (a GPU's copy engine overlaps its kernels), or with
 * CLT_COPY_OUT=0, nothing is copied. to[b] must stay valid until the
 * next call. */
void clt__replica_copy_out(clt__replica *r, void *const *to);
/* Bucket b's copy in the last recorded run, or NULL. */
cl_event clt__replica_bucket_copied(const clt__replica *r, int b);
/* The f16 copy of the gradient arena (empty view without one). */
clt_tensor clt__replica_wire(const clt__replica *r);
/* What the gradient all-reduce sums in place: the f16 wire copy when there
 * is one, else the f32 gradient arena. */
clt_tensor clt__replica_exchange_view(const clt__replica *r);
/* After the all-reduce: the summed f16 wire copy back into the f32 arena
 * (nothing without a wire copy). Enqueued on the compute queue. */
int clt__replica_wire_to_grads(clt__replica *r);
/* Wait (host side, up to timeout_s) until bucket b of the last recorded
 * run is complete. */
int clt__replica_wait_bucket(clt__replica *r, int b, double timeout_s);
/* 1 while the last recorded run is still executing on the device. */
int clt__replica_busy(const clt__replica *r);
/* The context the replica lives on. */
clt_context *clt__replica_context(const clt__replica *r);
/* A recorded run of no samples: just the markers (a replica can get none of
 * a partial last batch, and the all-reduce still waits on its events). */
int clt__replica_record_empty(clt__replica *r);
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
/* ---- pipeline stages (src/pp): the replica of a stage's spec
 * (clt__spec_stage), with a micro-batch's activations kept from its
 * forward to its backward in one of nsets activation sets. ---- */

/* Make nsets activation sets (set 0 is the replica's own). Once. */
int clt__replica_set_activation_sets(clt__replica *r, int nsets);
/* Device bytes of one activation set (what each set beyond the first adds). */
uint64_t clt__replica_set_bytes(const clt_model_spec *spec, int64_t max_batch, clt_dtype act_dtype);
/* The forward of n samples x (host, (n, input shape) f32) into set `set`.
 * Not the last stage: the output is read into out (host, (n, output
 * shape) f32; waits). The last stage (`last`): labels y or pass->targets,
 * the loss (clt__replica_read_loss reads it) and, in training, the
 * backward right away into the gradient arena, on to the input gradient
 * read into dx unless dx is NULL (the first stage). Waits for the device
 * either way: x may be reused on return. */
int clt__replica_stage_forward(clt__replica *r, int set, const float *x, const int32_t *y, int64_t n,
                               const clt__pass *pass, int last, float *out, float *dx);
/* The backward of set `set` from dy (host, (n, output shape) f32, the
 * next stage's input gradient) into the gradient arena (accumulated), and
 * the input gradient into dx (host; waits) unless dx is NULL. */
int clt__replica_stage_backward(clt__replica *r, int set, const float *dy, int64_t n, const clt__pass *pass,
                                float *dx);

/* What the replica holds on its device, from the sizes of its buffers (the
 * measured counterpart of clt__replica_memory, part by part): parameters,
 * gradients (arena or shard and pool, with their f16 copies), optimizer
 * state, activations (with the input, labels and losses), their gradients
 * (the two buffers, backward scratch, skip slots) and workspaces (im2col,
 * and the context's scratch as large as it is now). Bytes. */
typedef struct clt__replica_bytes {
  uint64_t parameters, gradients, optimizer_state, activations, activation_grads, workspace, total;
} clt__replica_bytes;
void clt__replica_device_bytes(const clt__replica *r, clt__replica_bytes *out);

/* Zero the gradient arena (under a pool: the shard's gradient). */
int clt__replica_zero_grads(clt__replica *r);

/* ---- ZeRO stage 2's bucket pool (model/replica_pool.c) ---- */

/* After clt__replica_set_buckets: nslots buffers, slot s from float
 * slot_at[s] of the pool to slot_at[s + 1], bucket b written into slot[b]
 * once the host has read bucket after[b] (-1: none), opened by the
 * backward of layer opened_at[b]; and the shard's gradient of
 * shard_floats; with wire, f16 copies of both (the f16 wire). Arrays
 * copied. */
int clt__replica_set_pool(clt__replica *r, int nslots, const int64_t *slot_at, const int *slot, const int *after,
                          const int *opened_at, int64_t shard_floats, int wire);
int clt__replica_pooled(const clt__replica *r);
/* Whether a run is enqueued without the calling thread waiting for the
 * device (not so with host GEMMs run by the calling thread): only then may
 * a bucket wait for the exchange to free its slot. */
int clt__replica_enqueues_ahead(const clt__replica *r);
/* What the exchange reads of bucket b (its slot; f16 under the wire) and
 * where the reduced shard goes (gshard16 under the wire, else gshard). */
clt_tensor clt__replica_pool_view(const clt__replica *r, int b);
clt_tensor clt__replica_shard_exchange_view(const clt__replica *r);
/* The host has read bucket b of the last recorded run: its slot may be
 * written again. */
int clt__replica_bucket_read(clt__replica *r, int b);
/* Inside a recorded run (replica.c): open the buckets that layer i's
 * backward starts (i < 0: every one not opened yet), close one (before its
 * marker: its f16 copy), and the run's start and end. */
int clt__replica_pool_begin_run(clt__replica *r);
int clt__replica_pool_open_at(clt__replica *r, int i);
int clt__replica_pool_close(clt__replica *r, int b);
void clt__replica_pool_free(clt__replica *r);
/* The layer views' map into the pool (layer.h's gnb...). */
struct clt__layer_io;
void clt__replica_pool_io(const clt__replica *r, struct clt__layer_io *io);

/* Tensor views of the whole arenas. */
clt_tensor clt__replica_params(const clt__replica *r);
clt_tensor clt__replica_grads(const clt__replica *r);
clt_tensor clt__replica_state(const clt__replica *r);

#endif
