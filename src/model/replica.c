/*
 * replica.c: a model replica on one device: arenas, activation layout, and
 * the forward, loss and backward passes over the layers, each layer a call
 * through its kind in the layer table (model/layer.h).
 *
 * Memory: every layer's output for max_batch samples lives in one
 * activation arena (flatten and evaluation-mode dropout reuse their input),
 * with what each layer keeps for its backward (attention's qkv), because
 * backward needs them; gradients of activations ping-pong between two
 * buffers the size of the largest layer input or output, and a residual's
 * skip-branch gradient waits in a slot of its own until the backward
 * reaches the layer the branch started at. All of these hold f32, or f16
 * under mixed precision (computed in f32 all the same; cl/prelude.cl);
 * token ids, parameters, their gradients and optimizer state are f32.
 * One layout function (lay_out) places all of it; clt__replica_memory and
 * the public clt_model_replica_memory report from it what
 * clt__replica_create allocates, so a model that cannot fit is refused
 * (clt_replica_memory_check) before anything is allocated.
 */
#include "model/replica.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/layer.h"
#include "model/model.h"
#include "nn/nn.h"

static int64_t numel(const clt_shape *s) { return clt__shape_numel(s); }
static void select_set(clt__replica *r, int k);

static int has(const clt_layer_spec *l, unsigned flag) { return (l->kind->flags & flag) != 0; }
static int is_tokens(const clt_model_spec *s) { return s->layers[0].out_shape.vocab > 0; }
static int is_regression(const clt_model_spec *s) { return s->loss != CLT_LOSS_CROSSENTROPY; }

/* Views at an offset in elements of their dtype. */
static int make_view(cl_mem buf, int64_t off, clt_dtype dt, int64_t n, const clt_shape *s, clt_tensor *t) {
  int64_t shape[4] = {n, 0, 0, 0};
  for (int i = 0; i < s->ndim; i++) shape[i + 1] = s->dims[i];
  return clt_tensor_view(buf, (size_t)off * clt_dtype_size(dt), dt, s->ndim + 1, shape, t);
}

static int make_flat(cl_mem buf, int64_t off, clt_dtype dt, int64_t count, clt_tensor *t) {
  return clt_tensor_view(buf, (size_t)off * clt_dtype_size(dt), dt, 1, &count, t);
}

/* Where a replica's buffers go, for max_batch samples: the one layout that
 * clt__replica_create allocates and clt__replica_memory reports. Offsets
 * into slots (NULL: sizes only); sizes in elements of the activation dtype
 * (act, largest, gscratch, skip), f32 (aux) or bytes (workspace, scratch). */
typedef struct replica_layout {
  int64_t act;       /* the activation arena: every layer's output and what its backward keeps */
  int64_t aux;       /* f32 / i32 values kept for the backward */
  int64_t largest;   /* each of the two activation-gradient buffers */
  int64_t gscratch;  /* backward scratch of the layer that needs most */
  int64_t skip;      /* each skip-branch gradient slot */
  int64_t workspace; /* conv2d's im2col */
  size_t scratch;    /* the context's scratch */
  int first_trainable;
} replica_layout;

static void lay_out(const clt_model_spec *spec, int64_t max_batch, clt_dtype act_dtype, clt__layer_slot *slots,
                    replica_layout *lo) {
  clt__layer_slot dummy, prev = {0, 0, 0};
  memset(lo, 0, sizeof *lo);
  lo->first_trainable = spec->nlayers;
  for (int i = 0; i < spec->nlayers; i++) {
    const clt_layer_spec *l = &spec->layers[i];
    clt__layer_slot *sl = slots ? &slots[i] : &dummy;
    int64_t out_n = numel(&l->out_shape) * max_batch, in_n = numel(&l->in_shape) * max_batch;
    if (i == 0 && is_tokens(spec)) { /* token ids stay f32, in input32 */
      sl->act_offset = 0;
    } else if (i > 0 && has(l, CLT_KIND_VIEW)) {
      sl->act_offset = prev.act_offset;
    } else {
      sl->act_offset = lo->act;
      lo->act += out_n;
    }
    sl->saved_offset = lo->act;
    lo->act += l->saved_act * max_batch;
    if (out_n > lo->largest) lo->largest = out_n;
    if (i > 0 && in_n > lo->largest) lo->largest = in_n;
    sl->aux_offset = lo->aux;
    lo->aux += l->saved_f32 * max_batch;
    if (l->grad_scratch * max_batch > lo->gscratch) lo->gscratch = l->grad_scratch * max_batch;
    if (l->skip >= 0 && out_n > lo->skip) lo->skip = out_n;
    if (l->nparams && i < lo->first_trainable) lo->first_trainable = i;
    if (l->kind->workspace_bytes) {
      size_t b = l->kind->workspace_bytes(l, max_batch);
      if ((int64_t)b > lo->workspace) lo->workspace = (int64_t)b;
    }
    if (l->kind->scratch_bytes) {
      size_t b = l->kind->scratch_bytes(l, max_batch, act_dtype);
      if (b > lo->scratch) lo->scratch = b;
    }
    prev = *sl;
  }
}

void clt__replica_memory(const clt_model_spec *spec, int64_t max_batch, int state_per_param, clt_dtype act_dtype,
                         int wire, clt_replica_memory *m) {
  clt__replica_memory_sharded(spec, max_batch, state_per_param, spec->param_count, spec->param_count, act_dtype, wire,
                              m);
}

void clt__replica_memory_sharded(const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                                 int64_t state_params, int64_t grad_floats, clt_dtype act_dtype, int wire,
                                 clt_replica_memory *m) {
  replica_layout lo;
  lay_out(spec, max_batch, act_dtype, NULL, &lo);
  uint64_t P = (uint64_t)spec->param_count, e = clt_dtype_size(act_dtype);
  uint64_t in_n = (uint64_t)(numel(&spec->layers[0].out_shape) * max_batch);
  uint64_t labels_n = (uint64_t)(max_batch * spec->labels_per_sample);
  memset(m, 0, sizeof *m);
  m->batch = max_batch;
  m->parameters = P * 4;
  m->gradients = (uint64_t)grad_floats * (wire ? 6 : 4); /* f32, and the f16 copy on the wire */
  m->optimizer_state = (uint64_t)state_params * 4 * (uint64_t)state_per_param;
  m->activations = (uint64_t)(lo.act ? lo.act : 1) * e + (uint64_t)(lo.aux ? lo.aux : 1) * 4 +
                   (act_dtype != CLT_F32 || is_tokens(spec) ? in_n * 4 : 0) + 2 * labels_n * 4 + 8;
  m->activation_grads = 2 * (uint64_t)lo.largest * e + (uint64_t)lo.gscratch * e +
                        (uint64_t)spec->skip_slots * (uint64_t)lo.skip * e;
  m->workspace = (uint64_t)lo.workspace + lo.scratch;
  m->total = m->parameters + m->gradients + m->optimizer_state + m->activations + m->activation_grads + m->workspace;
  /* The largest single buffer: each arena is one. */
  struct { uint64_t bytes; const char *what; } one[] = {
      {P * 4, "the parameters"},
      {m->optimizer_state, "the optimizer state"},
      {(uint64_t)lo.act * e, "the activations"},
      {(uint64_t)lo.aux * 4, "the values layers keep for the backward"},
      {(uint64_t)lo.largest * e, "the largest layer's activation gradient"},
      {(uint64_t)lo.gscratch * e, "a layer's backward scratch"},
      {(uint64_t)lo.workspace, "conv2d's im2col workspace"},
      {(uint64_t)lo.scratch, "a layer's scratch space"}};
  for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
    if (one[i].bytes > m->largest) m->largest = one[i].bytes, m->largest_what = one[i].what;
}

int clt_model_replica_memory(const clt_model *m, const clt_train_options *o, clt_replica_memory *out) {
  clt_train_options d;
  if (!m || !out) return clt__error(CLT_EINVAL, "clt_model_replica_memory: a model and a result are needed");
  if (!o) clt_train_options_defaults(&d), o = &d;
  if (o->batch < 1 || o->accumulate < 1 || o->batch % o->accumulate)
    return clt__error(CLT_EINVAL, "clt_model_replica_memory: batch %lld and accumulate %d: the batch must be at "
                      "least 1 and divide by accumulate", (long long)o->batch, o->accumulate);
  if (o->precision != CLT_F32 && o->precision != CLT_F16)
    return clt__error(CLT_EINVAL, "clt_model_replica_memory: the precision must be fp32 or fp16, not %s",
                      clt_dtype_name(o->precision));
  clt__replica_memory(m->spec, o->batch / o->accumulate, clt_optimizer_state_per_param(&o->optimizer), o->precision,
                      o->precision == CLT_F16, out);
  return CLT_OK;
}

int clt__replica_memory_fits(const clt_replica_memory *need, const clt_device_info *d, uint64_t cap) {
  if (!cap || !d || (d->global_mem_bytes && d->global_mem_bytes <= cap)) return clt_replica_memory_check(need, d);
  clt_device_info capped = *d;
  capped.global_mem_bytes = cap;
  if (!capped.max_alloc_bytes || capped.max_alloc_bytes > cap) capped.max_alloc_bytes = cap;
  int rc = clt_replica_memory_check(need, &capped);
  char c[32];
  return rc < 0 ? clt__error_prefix(rc, "--max-device-memory %s", clt__fmt_bytes(cap, c, sizeof c)) : rc;
}

int clt_replica_memory_check(const clt_replica_memory *need, const clt_device_info *d) {
  char a[32], b[32], c[32], e[32], f[32], g[32], t[32], l[32], hg[32], ha[32];
  if (!need || !d) return clt__error(CLT_EINVAL, "clt_replica_memory_check: a need and a device are needed");
  int too_large = d->max_alloc_bytes && need->largest > d->max_alloc_bytes;
  int too_much = d->global_mem_bytes && need->total > d->global_mem_bytes;
  if (!too_large && !too_much) return CLT_OK;
  /* The part of the total to shrink first: the largest. */
  const struct { uint64_t bytes; const char *what; } part[] = {
      {need->parameters, "the parameters"},   {need->gradients, "the gradients"},
      {need->optimizer_state, "the optimizer state"}, {need->activations, "the activations"},
      {need->activation_grads, "their gradients"},    {need->workspace, "the workspace"}};
  size_t big = 0;
  for (size_t i = 1; i < sizeof part / sizeof part[0]; i++)
    if (part[i].bytes > part[big].bytes) big = i;
  char pb[32], why[160];
  if (too_much)
    snprintf(why, sizeof why, "%s; the largest part of it is %s (%s)",
             too_large ? "neither the total nor the largest buffer fits" : "the total does not fit", part[big].what,
             clt__fmt_bytes(part[big].bytes, pb, sizeof pb));
  else
    snprintf(why, sizeof why, "the largest buffer does not fit");
  return clt__error(CLT_EDEVMEM, "a replica for batches of %lld needs %s (parameters %s, gradients %s, optimizer state "
                    "%s, activations %s, their gradients %s, workspace %s), %s in its largest buffer (%s); device %d "
                    "(%s) has %s (CL_DEVICE_GLOBAL_MEM_SIZE) and allows %s in one buffer "
                    "(CL_DEVICE_MAX_MEM_ALLOC_SIZE): %s; use a smaller batch (or --accumulate) or model",
                    (long long)need->batch, clt__fmt_bytes(need->total, t, sizeof t),
                    clt__fmt_bytes(need->parameters, a, sizeof a), clt__fmt_bytes(need->gradients, b, sizeof b),
                    clt__fmt_bytes(need->optimizer_state, c, sizeof c), clt__fmt_bytes(need->activations, e, sizeof e),
                    clt__fmt_bytes(need->activation_grads, f, sizeof f), clt__fmt_bytes(need->workspace, g, sizeof g),
                    clt__fmt_bytes(need->largest, l, sizeof l), need->largest_what, d->index, d->name,
                    clt__fmt_bytes(d->global_mem_bytes, hg, sizeof hg), clt__fmt_bytes(d->max_alloc_bytes, ha, sizeof ha),
                    why);
}

int clt__replica_create(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                        clt_dtype act_dtype, const float *params, clt__replica **out) {
  return clt__replica_create_sharded(ctx, spec, max_batch, state_per_param, spec->param_count, act_dtype, params, NULL,
                                     out);
}

static int create(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                  int64_t state_params, clt_dtype act_dtype, const float *params, int grad_arena, void *grads_at,
                  clt__replica **out);

int clt__replica_create_sharded(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                                int64_t state_params, clt_dtype act_dtype, const float *params, void *grads_at,
                                clt__replica **out) {
  return create(ctx, spec, max_batch, state_per_param, state_params, act_dtype, params, 1, grads_at, out);
}

int clt__replica_create_pooled(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                               int64_t state_params, clt_dtype act_dtype, const float *params, clt__replica **out) {
  return create(ctx, spec, max_batch, state_per_param, state_params, act_dtype, params, 0, NULL, out);
}

static int create(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                  int64_t state_params, clt_dtype act_dtype, const float *params, int grad_arena, void *grads_at,
                  clt__replica **out) {
  int rc = CLT_OK;
  clt__replica *r = clt__calloc(1, sizeof *r);
  *out = NULL;
  if (!r) return CLT_ENOMEM;
  r->ctx = ctx;
  r->spec = spec;
  r->max_batch = max_batch;
  r->state_per_param = state_per_param;
  r->state_params = state_params;
  r->act_dtype = act_dtype;
  r->timeout_s = 300;
  if (!(r->slots = clt__calloc(spec->nlayers, sizeof *r->slots))) { rc = CLT_ENOMEM; goto fail; }
  const char *prof = getenv("CLT_PROFILE");
  if (prof && *prof && strcmp(prof, "0") != 0) {
    r->prof_fwd = clt__calloc(spec->nlayers, sizeof *r->prof_fwd);
    r->prof_bwd = clt__calloc(spec->nlayers, sizeof *r->prof_bwd);
    if (!r->prof_fwd || !r->prof_bwd) { rc = CLT_ENOMEM; goto fail; }
  }

  /* Lay out activations, what layers keep for their backward, and scratch. */
  replica_layout lo;
  lay_out(spec, max_batch, act_dtype, r->slots, &lo);
  r->first_trainable = lo.first_trainable;
  int64_t act = lo.act, aux = lo.aux, largest = lo.largest, gscratch = lo.gscratch, skip = lo.skip, ws = lo.workspace;
  size_t scratch = lo.scratch;

  size_t pbytes = (size_t)spec->param_count * 4, esize = clt_dtype_size(act_dtype);
  int64_t in_n = numel(&spec->layers[0].out_shape) * max_batch, labels_n = max_batch * spec->labels_per_sample;
  /* (a piece without parameters still gets its buffers: --stages auto times
   * one, src/pp/cut.c) */
  CLT_TRY(clt_buffer_create(ctx, pbytes ? pbytes : 4, &r->params));
  if (grad_arena && grads_at) { /* the caller's host bytes (src/comm/shm_arena.c), zeroed as a new buffer's */
    memset(grads_at, 0, pbytes ? pbytes : 4);
    CLT_TRY(clt__shared_buffer_wrap(ctx, grads_at, pbytes ? pbytes : 4, &r->grads));
  } else if (grad_arena) {
    CLT_TRY(clt_buffer_create(ctx, pbytes ? pbytes : 4, &r->grads));
  }
  if (state_per_param && state_params > 0)
    CLT_TRY(clt_buffer_create(ctx, (size_t)state_params * 4 * state_per_param, &r->state));
  CLT_TRY(clt_buffer_create(ctx, (size_t)(act ? act : 1) * esize, &r->act));
  CLT_TRY(clt_buffer_create(ctx, (size_t)largest * esize, &r->dbuf[0]));
  CLT_TRY(clt_buffer_create(ctx, (size_t)largest * esize, &r->dbuf[1]));
  if (gscratch) CLT_TRY(clt_buffer_create(ctx, (size_t)gscratch * esize, &r->gscratch));
  if (spec->skip_slots && !(r->skip = clt__calloc(spec->skip_slots, sizeof *r->skip))) { rc = CLT_ENOMEM; goto fail; }
  for (int k = 0; k < spec->skip_slots; k++) CLT_TRY(clt_buffer_create(ctx, (size_t)skip * esize, &r->skip[k]));
  /* The input batch arrives as f32 and is rounded on the device, unless it is token ids. */
  if (act_dtype != CLT_F32 || is_tokens(spec)) CLT_TRY(clt_buffer_create(ctx, (size_t)in_n * 4, &r->input32));
  if (scratch) {
    cl_mem s;
    CLT_TRY(clt__context_scratch(ctx, scratch, &s));
  }
  CLT_TRY(clt_buffer_create(ctx, (size_t)(aux ? aux : 1) * 4, &r->aux));
  if (ws) CLT_TRY(clt_buffer_create(ctx, (size_t)ws, &r->workspace));
  CLT_TRY(clt_buffer_create(ctx, (size_t)labels_n * 4, &r->labels));
  /* regression: each value's loss, then its squared error */
  CLT_TRY(clt_buffer_create(ctx, (size_t)labels_n * 4 * (is_regression(spec) ? 2 : 1), &r->losses));
  CLT_TRY(clt_buffer_create(ctx, 8, &r->scalars));

  clt_tensor p = clt__replica_params(r);
  if (pbytes) CLT_TRY(clt_tensor_upload(ctx, &p, params, pbytes));
  char ab[32], pb[32];
  clt__log(CLT_LOG_INFO, "replica on %s: %s of parameters, %s of activations and their gradients (%s)", ctx->info.name,
           clt__fmt_bytes(pbytes, pb, sizeof pb), clt__fmt_bytes((uint64_t)(act + 2 * largest + gscratch + spec->skip_slots * skip) * esize, ab, sizeof ab),
           clt_dtype_name(act_dtype));
  *out = r;
  return CLT_OK;
fail:
  clt__error_prefix(rc, "making a %lld-parameter replica for batches of %lld on %s", (long long)spec->param_count,
                    (long long)max_batch, ctx->info.name);
  clt__replica_destroy(r);
  return rc;
}

static void release_events(clt__replica *r) {
  for (int b = 0; b < r->nbuckets; b++) {
    if (r->bucket_ev[b]) clReleaseEvent(r->bucket_ev[b]), r->bucket_ev[b] = NULL;
    if (r->bucket_copied[b]) clReleaseEvent(r->bucket_copied[b]), r->bucket_copied[b] = NULL;
  }
  if (r->start_ev) clReleaseEvent(r->start_ev), r->start_ev = NULL;
  if (r->end_ev) clReleaseEvent(r->end_ev), r->end_ev = NULL;
}

int clt__replica_set_buckets(clt__replica *r, int nbuckets, const int *closed_at, const int64_t *lo,
                             const int64_t *hi, int wire) {
  release_events(r);
  clt__replica_trace(r, 0);
  free(r->bucket_ev), free(r->bucket_copied), free(r->copy_to);
  free(r->bucket_closed_at);
  free(r->bucket_lo);
  r->nbuckets = 0;
  r->bucket_ev = clt__calloc(nbuckets ? nbuckets : 1, sizeof *r->bucket_ev);
  r->bucket_copied = clt__calloc(nbuckets ? nbuckets : 1, sizeof *r->bucket_copied);
  r->copy_to = clt__calloc(nbuckets ? nbuckets : 1, sizeof *r->copy_to);
  r->bucket_closed_at = clt__calloc(nbuckets ? nbuckets : 1, sizeof *r->bucket_closed_at);
  r->bucket_lo = clt__calloc(2 * (size_t)(nbuckets ? nbuckets : 1), sizeof *r->bucket_lo);
  if (!r->bucket_ev || !r->bucket_copied || !r->copy_to || !r->bucket_closed_at || !r->bucket_lo) return CLT_ENOMEM;
  r->bucket_hi = r->bucket_lo + nbuckets;
  memcpy(r->bucket_closed_at, closed_at, (size_t)nbuckets * sizeof *closed_at);
  memcpy(r->bucket_lo, lo, (size_t)nbuckets * sizeof *lo);
  memcpy(r->bucket_hi, hi, (size_t)nbuckets * sizeof *hi);
  r->nbuckets = nbuckets;
  if (wire && !r->wire && r->grads) return clt_buffer_create(r->ctx, (size_t)r->spec->param_count * 2, &r->wire);
  return CLT_OK;
}

clt_tensor clt__replica_wire(const clt__replica *r) {
  clt_tensor t;
  memset(&t, 0, sizeof t);
  if (r->wire) make_flat(r->wire, 0, CLT_F16, r->spec->param_count, &t);
  return t;
}

clt_tensor clt__replica_exchange_view(const clt__replica *r) {
  return r->wire ? clt__replica_wire(r) : clt__replica_grads(r);
}

int clt__replica_wire_to_grads(clt__replica *r) {
  if (r->gshard16) { /* the pool's shard */
    clt_tensor w = clt__replica_shard_exchange_view(r), g = clt__replica_grads(r);
    return clt_convert(r->ctx, &w, &g);
  }
  if (!r->wire) return CLT_OK;
  clt_tensor w = clt__replica_wire(r), g = clt__replica_grads(r);
  return clt_convert(r->ctx, &w, &g);
}

int clt__replica_wait_bucket(clt__replica *r, int b, double timeout_s) {
  if (b < 0 || b >= r->nbuckets || !r->bucket_ev[b])
    return clt__error(CLT_EINTERNAL, "bucket %d of %d on %s has no recorded run to wait for", b, r->nbuckets,
                      r->ctx->info.name);
  return clt__wait_event(r->ctx, r->bucket_ev[b], timeout_s, "the backward pass");
}

int clt__replica_busy(const clt__replica *r) {
  cl_int st = CL_COMPLETE;
  if (!r->end_ev) return 0;
  clGetEventInfo(r->end_ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
  return st != CL_COMPLETE;
}

clt_context *clt__replica_context(const clt__replica *r) { return r->ctx; }

static int marker(clt__replica *r, cl_event *ev) {
  int rc = CLT_OK;
  if (*ev) clReleaseEvent(*ev), *ev = NULL;
  CLT_CL_TRY(clEnqueueMarkerWithWaitList(r->ctx->queue, 0, NULL, ev));
fail:
  return rc;
}

void clt__replica_copy_out(clt__replica *r, void *const *to) {
  const char *env = getenv("CLT_COPY_OUT");
  int on = to && r->ctx->info.unified_memory && !(env && strcmp(env, "0") == 0);
  for (int b = 0; b < r->nbuckets; b++) r->copy_to[b] = on ? to[b] : NULL;
}

cl_event clt__replica_bucket_copied(const clt__replica *r, int b) {
  return b >= 0 && b < r->nbuckets && r->copy_to[b] ? r->bucket_copied[b] : NULL;
}

/* Recorded runs: bucket b out to the host in the queue's order (what the
 * exchange sums: the f16 wire copy, or f32). */
static int copy_out(clt__replica *r, int b) {
  int rc = CLT_OK;
  clt_tensor x = r->pool ? clt__replica_pool_view(r, b) : clt__replica_exchange_view(r);
  size_t es = clt_dtype_size(x.dtype), at = x.offset + (r->pool ? 0 : (size_t)r->bucket_lo[b] * es);
  size_t bytes = (size_t)(r->bucket_hi[b] - r->bucket_lo[b]) * es;
  if (r->bucket_copied[b]) clReleaseEvent(r->bucket_copied[b]), r->bucket_copied[b] = NULL;
  CLT_CL_TRY(clEnqueueReadBuffer(r->ctx->queue, x.buf, CL_FALSE, at, bytes, r->copy_to[b], 0, NULL,
                                 &r->bucket_copied[b]));
fail:
  return rc;
}

/* Bucket b's gradients are all written: round them to the f16 wire
 * buffer if there is one, copy it out (clt__replica_copy_out), and mark
 * the place on the queue. */
static int close_bucket(clt__replica *r, int b) {
  int rc = CLT_OK;
  if (r->pool) CLT_TRY(clt__replica_pool_close(r, b));
  if (r->wire && r->bucket_hi[b] > r->bucket_lo[b]) {
    clt_tensor g, w;
    int64_t n = r->bucket_hi[b] - r->bucket_lo[b];
    CLT_TRY(make_flat(r->grads, r->bucket_lo[b], CLT_F32, n, &g));
    CLT_TRY(make_flat(r->wire, r->bucket_lo[b], CLT_F16, n, &w));
    CLT_TRY(clt_convert(r->ctx, &g, &w));
  }
  if (r->copy_to[b] && r->bucket_hi[b] > r->bucket_lo[b]) CLT_TRY(copy_out(r, b));
  CLT_TRY(marker(r, &r->bucket_ev[b]));
fail:
  return rc;
}

/* The buckets that layer i's backward completes. */
static int close_buckets_at(clt__replica *r, int i) {
  int rc = CLT_OK;
  for (int b = 0; b < r->nbuckets; b++)
    if (r->bucket_closed_at[b] == i) CLT_TRY(close_bucket(r, b));
fail:
  return rc;
}

static int close_buckets_below(clt__replica *r, int lowest) {
  int rc = CLT_OK;
  for (int b = 0; b < r->nbuckets; b++)
    if (r->bucket_closed_at[b] < lowest) CLT_TRY(close_bucket(r, b));
fail:
  return rc;
}

int clt__replica_record_empty(clt__replica *r) {
  int rc = CLT_OK;
  r->run_start_ns = 0;
  atomic_store(&r->run_end_ns, 0);
  CLT_TRY(marker(r, &r->start_ev));
  CLT_TRY(clt__replica_pool_begin_run(r));
  for (int b = 0; b < r->nbuckets; b++) CLT_TRY(close_bucket(r, b));
  CLT_TRY(marker(r, &r->end_ev));
fail:
  return rc;
}

static int64_t now_ns(void) { return (int64_t)(clt__now() * 1e9); }

static void CL_CALLBACK run_done(cl_event ev, cl_int status, void *user) {
  clt__replica *r = user;
  (void)ev;
  atomic_store(&r->run_end_ns, status == CL_COMPLETE ? now_ns() : -1);
  atomic_fetch_sub(&r->callbacks_pending, 1); /* the last touch of r: it may be freed from here on */
}

/* Mark the start of a recorded run and arrange to learn when it ends. */
static int time_run_end(clt__replica *r) {
  int rc = CLT_OK;
  atomic_fetch_add(&r->callbacks_pending, 1);
  cl_int err = clSetEventCallback(r->end_ev, CL_COMPLETE, run_done, r);
  if (err != CL_SUCCESS) atomic_fetch_sub(&r->callbacks_pending, 1);
  CLT_CL_TRY(err);
fail:
  return rc;
}

double clt__replica_run_time(clt__replica *r) {
  if (!r->end_ev || clt__wait_event(r->ctx, r->end_ev, r->timeout_s, "the training step") < 0) return 0;
  /* The device's own clock between the run's two markers, when it has one
   * that is plausible (within the host's view of the run): the host's
   * view can include a wait for other ranks (below). */
  int64_t now = now_ns();
  cl_ulong s = 0, e = 0;
  if (r->start_ev && clGetEventProfilingInfo(r->start_ev, CL_PROFILING_COMMAND_END, sizeof s, &s, NULL) == CL_SUCCESS &&
      clGetEventProfilingInfo(r->end_ev, CL_PROFILING_COMMAND_END, sizeof e, &e, NULL) == CL_SUCCESS && e > s &&
      (double)(e - s) <= (double)(now - r->run_start_ns))
    return (double)(e - s) * 1e-9;
  /* The callback runs on a driver thread, when the driver gets to it:
   * NVIDIA's was seen 20 ms late, and waiting for it cut a training step's
   * speed by 10. Without it yet, the run ended before now (which, read
   * after the gradient exchange, includes waiting for the other ranks). */
  int64_t end = atomic_load(&r->run_end_ns);
  if (end == 0) end = now;
  return end > r->run_start_ns ? (double)(end - r->run_start_ns) * 1e-9 : 0;
}

/* ---- the trace's markers ---------------------------------------------------- */

static void trace_clear(clt__replica *r) {
  for (int k = 0; r->trace_ev && k <= 2 * r->spec->nlayers; k++)
    if (r->trace_ev[k]) clReleaseEvent(r->trace_ev[k]), r->trace_ev[k] = NULL;
}

int clt__replica_trace(clt__replica *r, int on) {
  trace_clear(r);
  free(r->trace_ev);
  r->trace_ev = NULL;
  if (on && !(r->trace_ev = clt__calloc((size_t)(2 * r->spec->nlayers + 1), sizeof *r->trace_ev))) return CLT_ENOMEM;
  return CLT_OK;
}

static int trace_mark(clt__replica *r, int slot) { return r->trace_ev ? marker(r, &r->trace_ev[slot]) : CLT_OK; }

void clt__replica_trace_spans(clt__replica *r, clt__trace *tr, int lane, int64_t end_ns) {
  const clt_model_spec *s = r->spec;
  int L = s->nlayers;
  if (!tr || !r->trace_ev || !r->trace_ev[0]) return;
  cl_ulong *at = clt__calloc((size_t)(2 * L + 1), sizeof *at), last = 0;
  if (!at) return;
  for (int k = 0; k <= 2 * L; k++)
    if (r->trace_ev[k] && clGetEventProfilingInfo(r->trace_ev[k], CL_PROFILING_COMMAND_END, sizeof at[k], &at[k],
                                                  NULL) == CL_SUCCESS && at[k] > last)
      last = at[k];
  /* The device's clock, shifted so that its last marker is end_ns. Each
   * span runs from the marker before it, in the run's order: the forward
   * of layers 1 to L-1, the loss, the backward from L-1 down. */
  int64_t shift = end_ns - (int64_t)last;
  cl_ulong prev = at[0];
  for (int k = 1; prev && k < 2 * L; k++) {
    int slot = k <= L ? k : 3 * L - k, i = slot < L ? slot : slot - L; /* k = L + 1 is layer L - 1's backward */
    if (!r->trace_ev[slot] || at[slot] < prev) continue;
    int64_t t0 = (int64_t)prev + shift, t1 = (int64_t)at[slot] + shift;
    if (slot == L) clt__trace_span(tr, lane, "forward", t0, t1, "loss");
    else
      clt__trace_span(tr, lane, slot < L ? "forward" : "backward", t0, t1, "%s %s (line %d)",
                      clt__layer_kind_name(&s->layers[i]), slot < L ? "forward" : "backward", s->layers[i].line);
    prev = at[slot];
  }
  free(at);
  trace_clear(r);
}

/* The profile: where a step's time goes, layer by layer. */
static void report_profile(const clt__replica *r) {
  const clt_model_spec *s = r->spec;
  double total = r->prof_loss;
  for (int i = 0; i < s->nlayers; i++) total += r->prof_fwd[i] + r->prof_bwd[i];
  if (r->prof_runs == 0 || total <= 0) return;
  clt__log(CLT_LOG_WARN, "profile of %lld runs on %s (ms per run; forward, backward, share of the total):",
           (long long)r->prof_runs, r->ctx->info.name);
  for (int i = 1; i < s->nlayers; i++) {
    const clt_layer_spec *l = &s->layers[i];
    double f = r->prof_fwd[i] / r->prof_runs * 1e3, b = r->prof_bwd[i] / r->prof_runs * 1e3;
    clt__log(CLT_LOG_WARN, "  %s:%d %-14s %8.3f %8.3f  %5.1f%%", s->name, l->line, clt__layer_kind_name(l), f,
             b, 100 * (r->prof_fwd[i] + r->prof_bwd[i]) / total);
  }
  clt__log(CLT_LOG_WARN, "  upload + loss      %8.3f           %5.1f%%", r->prof_loss / r->prof_runs * 1e3,
           100 * r->prof_loss / total);
}

/* With profiling on, wait for the queue and charge the time since *t0. */
static void charge(clt__replica *r, double *slot, double *t0) {
  if (!r->prof_fwd) return;
  clFinish(r->ctx->queue);
  double t = clt__now();
  *slot += t - *t0;
  *t0 = t;
}

/* The context's too: a host GEMM (src/core/blas_host.c) inside the replica's
 * run waits for the queue as long as the replica's own waits do. */
void clt__replica_set_timeout(clt__replica *r, double timeout_s) {
  r->timeout_s = timeout_s;
  r->ctx->wait_timeout_s = timeout_s;
}

/* Wait, within the timeout, for everything queued so far. */
static int queue_done(clt__replica *r, const char *what) {
  int rc = CLT_OK;
  cl_event ev = NULL;
  CLT_CL_TRY(clEnqueueMarkerWithWaitList(r->ctx->queue, 0, NULL, &ev));
  CLT_CL_TRY(clFlush(r->ctx->queue));
  rc = clt__wait_event(r->ctx, ev, r->timeout_s, what);
fail:
  if (ev) clReleaseEvent(ev);
  return rc;
}

/* Wait until the device is done with the replica (within the timeout) and
 * then (up to 10 s) until no completion callback can still come: the
 * driver calls them on its own thread, NVIDIA's tens of ms late, and one
 * landing after free(r) corrupted the heap (a crash in clReleaseContext). */
static int callbacks_done(clt__replica *r) {
  if (r->ctx && r->ctx->queue && queue_done(r, "the replica's last work") < 0) return 0;
  for (int i = 0; i < 10000 && atomic_load(&r->callbacks_pending) > 0; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return atomic_load(&r->callbacks_pending) == 0;
}

void clt__replica_destroy(clt__replica *r) {
  if (!r) return;
  if (!callbacks_done(r)) {
    clt__log(CLT_LOG_WARN, "%s did not finish the replica's work, or a completion callback never came: its "
             "replica's memory is left allocated", r->ctx->info.name);
    return;
  }
  clt__replica_poll_cancel(r);
  if (r->prof_fwd) report_profile(r);
  if (r->nsets) select_set(r, 0);
  for (int k = 1; k < r->nsets; k++) {
    clt_buffer_release(r->set_act[k]);
    clt_buffer_release(r->set_aux[k]);
    clt_buffer_release(r->set_in32[k]);
  }
  free(r->set_act), free(r->set_aux), free(r->set_in32), free(r->set_outs);
  free(r->prof_fwd);
  free(r->prof_bwd);
  release_events(r);
  clt__replica_pool_free(r);
  free(r->bucket_ev), free(r->bucket_copied), free(r->copy_to);
  free(r->bucket_closed_at);
  free(r->bucket_lo);
  cl_mem bufs[] = {r->params,    r->grads,  r->state,  r->act,     r->dbuf[0], r->dbuf[1], r->aux,
                   r->workspace, r->labels, r->losses, r->scalars, r->input32, r->wire,    r->gscratch};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) clt_buffer_release(bufs[i]);
  for (int k = 0; r->skip && k < r->spec->skip_slots; k++) clt_buffer_release(r->skip[k]);
  free(r->skip);
  free(r->slots);
  free(r);
}

clt_tensor clt__replica_params(const clt__replica *r) {
  clt_tensor t;
  make_flat(r->params, 0, CLT_F32, r->spec->param_count, &t);
  return t;
}

clt_tensor clt__replica_grads(const clt__replica *r) {
  clt_tensor t;
  if (r->gshard) make_flat(r->gshard, 0, CLT_F32, r->shard_floats, &t); /* under a pool: the shard's */
  else make_flat(r->grads, 0, CLT_F32, r->spec->param_count, &t);
  return t;
}

clt_tensor clt__replica_state(const clt__replica *r) {
  clt_tensor t;
  memset(&t, 0, sizeof t);
  if (r->state) make_flat(r->state, 0, CLT_F32, r->state_params * r->state_per_param, &t);
  return t;
}

int clt__replica_zero_grads(clt__replica *r) {
  clt_tensor g = clt__replica_grads(r);
  return clt_fill(r->ctx, &g, 0.0f);
}

/* Layer i's places in the replica's buffers for n samples. */
static void layer_io(const clt__replica *r, int i, int64_t n, const clt__pass *pass, clt__layer_io *io) {
  memset(io, 0, sizeof *io);
  io->ctx = r->ctx;
  io->spec = r->spec;
  io->l = &r->spec->layers[i];
  io->index = i + r->spec->layer_base; /* the whole model's index, for dropout's masks */
  io->n = n;
  io->dt = r->act_dtype;
  io->params = r->params;
  io->grads = r->grads;
  clt__replica_pool_io(r, io);
  io->saved = r->act;
  io->saved_off = r->slots[i].saved_offset;
  io->aux = r->aux;
  io->aux_off = r->slots[i].aux_offset;
  io->gscratch = r->gscratch;
  io->workspace = r->workspace;
  io->pass = pass;
}

static int layer_failed(const clt__replica *r, int i, const char *what, int rc) {
  const clt_layer_spec *l = &r->spec->layers[i];
  return clt__error_prefix(rc, "%s:%d: %s %s", r->spec->name, l->line, clt__layer_kind_name(l), what);
}

/* Skip slot k seen like the output of layer i (its residual's shape). */
static int skip_view(const clt__replica *r, int k, int64_t n, const clt_shape *s, clt_tensor *t) {
  return make_view(r->skip[k], 0, r->act_dtype, n, s, t);
}

/* Forward through layer i: x is its input view, *y receives its output view. */
static int layer_forward(clt__replica *r, int i, int64_t n, const clt_tensor *outs, clt_tensor *y,
                         const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_layer_spec *l = &r->spec->layers[i];
  clt__layer_io io;
  if (has(l, CLT_KIND_TRAIN_ONLY) && !pass->train) { /* the identity: reuse the input */
    *y = outs[i - 1];
    return CLT_OK;
  }
  if (has(l, CLT_KIND_VIEW)) /* the same storage seen in the output's shape */
    return make_view(outs[i - 1].buf, (int64_t)(outs[i - 1].offset / clt_dtype_size(r->act_dtype)), r->act_dtype, n,
                     &l->out_shape, y);
  layer_io(r, i, n, pass, &io);
  io.x = outs[i - 1];
  CLT_TRY(make_view(r->act, r->slots[i].act_offset, r->act_dtype, n, &l->out_shape, &io.y));
  if (l->skip >= 0) io.skip = outs[l->skip];
  CLT_TRY(l->kind->forward(&io));
  *y = io.y;
  return CLT_OK;
fail:
  return layer_failed(r, i, "forward", rc);
}

/* Backward through layer i: dy is the gradient at its output; *dx gets the
 * gradient at its input (in the free ping-pong buffer, or dy itself for
 * views and pass-through kinds); need_dx is 0 for the first trainable
 * layer. */
static int layer_backward(clt__replica *r, int i, int64_t n, const clt_tensor *outs, const clt_tensor *dy,
                          clt_tensor *dx, cl_mem free_buf, int need_dx, const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_layer_spec *l = &r->spec->layers[i];
  clt__layer_io io;
  int through = has(l, CLT_KIND_VIEW) || has(l, CLT_KIND_PASS_GRAD);
  if (through)
    CLT_TRY(make_view(dy->buf, (int64_t)(dy->offset / clt_dtype_size(dy->dtype)), dy->dtype, n, &l->in_shape, dx));
  else if (need_dx)
    CLT_TRY(make_view(free_buf, 0, r->act_dtype, n, &l->in_shape, dx));
  else
    memset(dx, 0, sizeof *dx);
  if (has(l, CLT_KIND_VIEW)) return CLT_OK;
  layer_io(r, i, n, pass, &io);
  io.x = outs[i - 1];
  io.y = outs[i];
  io.dy = *dy;
  io.dx = *dx;
  if (l->skip >= 0) CLT_TRY(skip_view(r, l->skip_slot, n, &l->out_shape, &io.skip));
  CLT_TRY(l->kind->backward(&io));
  return CLT_OK;
fail:
  return layer_failed(r, i, "backward", rc);
}

/* After the backward of layer i: add the skip-branch gradients of the
 * residuals whose branch starts at layer i - 1 (dy is the gradient at its
 * output). */
static int add_skip_gradients(clt__replica *r, int i, int64_t n, const clt_tensor *dy) {
  int rc = CLT_OK;
  const clt_model_spec *s = r->spec;
  for (int j = i; j < s->nlayers; j++) {
    const clt_layer_spec *l = &s->layers[j];
    if (l->skip != i - 1) continue;
    clt_tensor g, d;
    CLT_TRY(skip_view(r, l->skip_slot, n, &l->out_shape, &g));
    CLT_TRY(clt__reshape(dy, g.ndim, g.shape, &d));
    CLT_TRY(clt_nn_accumulate(r->ctx, &g, &d));
  }
fail:
  return rc;
}

/* Upload the batch: images (rounded to f16 on the device under mixed
 * precision) or token ids (always f32), and the labels (i32) or the
 * regression targets (f32), 4 bytes each either way. */
static int upload(clt__replica *r, const float *x, const void *y, int64_t n, clt_tensor *in) {
  int rc = CLT_OK;
  const clt_model_spec *s = r->spec;
  size_t in_bytes = (size_t)(n * numel(&s->layers[0].out_shape)) * 4;
  clt_tensor labels;
  if (r->input32) {
    clt_tensor in32;
    CLT_TRY(make_view(r->input32, 0, CLT_F32, n, &s->layers[0].out_shape, &in32));
    CLT_TRY(clt_tensor_upload_async(r->ctx, &in32, x, in_bytes));
    if (is_tokens(s)) *in = in32;
    else {
      CLT_TRY(make_view(r->act, r->slots[0].act_offset, r->act_dtype, n, &s->layers[0].out_shape, in));
      CLT_TRY(clt_convert(r->ctx, &in32, in));
    }
  } else {
    CLT_TRY(make_view(r->act, r->slots[0].act_offset, r->act_dtype, n, &s->layers[0].out_shape, in));
    CLT_TRY(clt_tensor_upload_async(r->ctx, in, x, in_bytes));
  }
  CLT_TRY(make_flat(r->labels, 0, is_regression(s) ? CLT_F32 : CLT_I32, n * s->labels_per_sample, &labels));
  CLT_TRY(clt_tensor_upload_async(r->ctx, &labels, y, (size_t)(n * s->labels_per_sample) * 4));
fail:
  return rc;
}

/* The loss of the last layer's output out: the SUM over the slice's labels
 * (one per sample, or one per position of a sequence) or target values,
 * into scalars[0], with the number correct (i32) or the summed squared
 * error (f32) in scalars[1]; in training its gradient (dlogits = softmax -
 * onehot, or the regression loss's), not divided, into dbuf[0]. */
static int run_loss(clt__replica *r, int64_t n, const clt_tensor *out, const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_model_spec *s = r->spec;
  int64_t C = s->num_classes, M = n * s->labels_per_sample;
  float grad_scale = pass->loss_scale > 0 ? pass->loss_scale : 1.0f;
  clt_tensor labels, losses, loss, second, grad, y;
  CLT_TRY(make_flat(r->losses, 0, CLT_F32, M, &losses));
  CLT_TRY(make_flat(r->scalars, 0, CLT_F32, 1, &loss));
  if (is_regression(s)) {
    clt_tensor sq;
    CLT_TRY(make_flat(r->labels, 0, CLT_F32, M, &labels));
    CLT_TRY(make_flat(r->losses, M, CLT_F32, M, &sq));
    CLT_TRY(make_flat(r->scalars, 1, CLT_F32, 1, &second));
    CLT_TRY(make_flat(r->dbuf[0], 0, r->act_dtype, M, &grad));
    CLT_TRY(clt__reshape(out, 1, &M, &y));
    return clt_nn_regression_loss(r->ctx, (clt_loss_kind)s->loss, s->huber_delta, &y, &labels, grad_scale,
                                  pass->train ? &grad : NULL, &losses, &sq, &loss, &second);
  }
  int64_t lshape[2] = {M, C};
  CLT_TRY(make_flat(r->labels, 0, CLT_I32, M, &labels));
  CLT_TRY(make_flat(r->scalars, 1, CLT_I32, 1, &second));
  CLT_TRY(clt_tensor_view(r->dbuf[0], 0, r->act_dtype, 2, lshape, &grad));
  CLT_TRY(clt__reshape(out, 2, lshape, &y));
  CLT_TRY(clt_nn_softmax_xent(r->ctx, &y, &labels, CLT_IGNORE_LABEL, grad_scale, pass->train ? &grad : NULL, &losses,
                              &loss, &second));
fail:
  return rc;
}

/* The last layer's output y into out as f32 (waits for it). */
static int read_output(clt__replica *r, const clt_tensor *y, float *out) {
  int rc = CLT_OK;
  int64_t count = clt_tensor_numel(y);
  size_t esize = y->dtype == CLT_F32 ? 4 : 2;
  uint16_t *h = y->dtype == CLT_F32 ? NULL : clt__calloc((size_t)count, sizeof *h);
  cl_event ev = NULL;
  if (y->dtype != CLT_F32 && !h) return CLT_ENOMEM;
  /* read without blocking, then a wait that polls: a pipeline's messages
   * move on meanwhile (the context's progress hook, clt__wait_event) */
  CLT_CL_TRY(clEnqueueReadBuffer(r->ctx->queue, y->buf, CL_FALSE, y->offset, (size_t)count * esize,
                                 h ? (void *)h : (void *)out, 0, NULL, &ev));
  CLT_CL_TRY(clFlush(r->ctx->queue));
  CLT_TRY(clt__wait_event(r->ctx, ev, r->timeout_s, "reading an output"));
  for (int64_t i = 0; h && i < count; i++) out[i] = clt__float_from_half(h[i]);
fail:
  if (ev) clReleaseEvent(ev);
  free(h);
  return rc;
}

/* Forward through layers 1..L-1 of n samples whose input is outs[0]. */
static int forward_layers(clt__replica *r, int64_t n, clt_tensor *outs, const clt__pass *pass, double *t0) {
  int rc = CLT_OK;
  for (int i = 1; i < r->spec->nlayers; i++) {
    CLT_TRY(layer_forward(r, i, n, outs, &outs[i], pass));
    CLT_TRY(trace_mark(r, i));
    if (pass->train) charge(r, &r->prof_fwd[i], t0);
  }
fail:
  return rc;
}

/* Backward from dy (the gradient at the last layer's output, in dbuf[0])
 * into the gradient arena (accumulated); with to_input, on to the gradient
 * at the input (a pipeline stage after the first), left in *dx_out. */
static int backward_layers(clt__replica *r, int64_t n, const clt_tensor *outs, clt_tensor dy, int to_input,
                           const clt__pass *pass, double *t0, clt_tensor *dx_out) {
  int rc = CLT_OK, cur = 0;
  const clt_model_spec *s = r->spec;
  int L = s->nlayers, lowest = to_input ? 1 : r->first_trainable;
  clt_tensor dx;
  for (int i = L - 1; i >= lowest && i >= 1; i--) {
    const clt_layer_spec *l = &s->layers[i];
    int need_dx = i > lowest || to_input, through = has(l, CLT_KIND_VIEW) || has(l, CLT_KIND_PASS_GRAD);
    if (pass->record) CLT_TRY(clt__replica_pool_open_at(r, i)); /* ZeRO stage 2: its buckets' slots */
    CLT_TRY(layer_backward(r, i, n, outs, &dy, &dx, r->dbuf[1 - cur], need_dx, pass));
    CLT_TRY(trace_mark(r, s->nlayers + i));
    charge(r, &r->prof_bwd[i], t0);
    if (pass->record) CLT_TRY(close_buckets_at(r, i));
    if (!need_dx) break;
    if (!through) cur = 1 - cur;
    dy = dx;
    CLT_TRY(add_skip_gradients(r, i, n, &dy));
  }
  /* Buckets of layers the backward never reached (none, as the model
   * lays them out) close at its end. */
  if (pass->record) CLT_TRY(close_buckets_below(r, r->first_trainable > 1 ? r->first_trainable : 1));
  if (dx_out) *dx_out = dy;
fail:
  return rc;
}

static int check_batch(const clt__replica *r, int64_t n) {
  if (n < 1 || n > r->max_batch)
    return clt__error(CLT_EINVAL, "a batch of %lld samples on a replica made for 1 to %lld", (long long)n,
                      (long long)r->max_batch);
  return CLT_OK;
}

static int start_record(clt__replica *r, const clt__pass *pass) {
  int rc = CLT_OK;
  if (!pass->record) return CLT_OK;
  r->run_start_ns = now_ns();
  atomic_store(&r->run_end_ns, 0);
  CLT_TRY(marker(r, &r->start_ev));
  if (pass->train) CLT_TRY(clt__replica_pool_begin_run(r)); /* ZeRO stage 2 */
fail:
  return rc;
}

static int end_record(clt__replica *r, const clt__pass *pass) {
  int rc = CLT_OK;
  if (!pass->record) return CLT_OK;
  CLT_TRY(marker(r, &r->end_ev));
  CLT_TRY(time_run_end(r));
fail:
  return rc;
}

int clt__replica_run(clt__replica *r, const float *x, const int32_t *y, int64_t n, const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_model_spec *s = r->spec;
  int L = s->nlayers;
  clt_tensor *outs = NULL;
  const void *targets = is_regression(s) ? (const void *)pass->targets : (const void *)y;

  CLT_TRY(check_batch(r, n));
  if (!targets || (is_regression(s) && y))
    return clt__error(CLT_EINVAL, "a run of a %s model takes %s", is_regression(s) ? "regression" : "classification",
                      is_regression(s) ? "float targets (pass->targets), not labels" : "int32 labels");
  if (r->pool && pass->train && !pass->record)
    return clt__error(CLT_EINTERNAL, "a training run on %s keeps no gradient outside a recorded run (ZeRO stage 2)",
                      r->ctx->info.name);
  if (!(outs = clt__calloc(L, sizeof *outs))) return CLT_ENOMEM;

  /* Forward. outs[i] is layer i's output; outs[0] the input batch. */
  CLT_TRY(upload(r, x, targets, n, &outs[0]));
  trace_clear(r);
  CLT_TRY(trace_mark(r, 0));
  double t0 = clt__now();
  if (r->prof_fwd) r->prof_runs += pass->train;
  CLT_TRY(start_record(r, pass));
  charge(r, &r->prof_loss, &t0);
  CLT_TRY(forward_layers(r, n, outs, pass, &t0));

  CLT_TRY(run_loss(r, n, &outs[L - 1], pass));
  CLT_TRY(trace_mark(r, L));
  if (pass->train) charge(r, &r->prof_loss, &t0);
  if (pass->logits) CLT_TRY(read_output(r, &outs[L - 1], pass->logits));

  /* Backward, into the gradient arena (accumulated). */
  if (pass->train) {
    clt_tensor dy;
    CLT_TRY(make_view(r->dbuf[0], 0, r->act_dtype, n, &s->layers[L - 1].out_shape, &dy));
    CLT_TRY(backward_layers(r, n, outs, dy, 0, pass, &t0, NULL));
  }
  CLT_TRY(end_record(r, pass));
  free(outs);
  return CLT_OK;
fail:
  free(outs);
  return rc;
}

/* ---- pipeline stages (src/pp) ---- */

static void select_set(clt__replica *r, int k) {
  r->act = r->set_act[k];
  r->aux = r->set_aux[k];
  r->input32 = r->set_in32[k];
}

int clt__replica_set_activation_sets(clt__replica *r, int nsets) {
  int rc = CLT_OK;
  if (r->nsets) return clt__error(CLT_EINTERNAL, "the replica's activation sets are set already");
  if (nsets < 1) nsets = 1;
  replica_layout lo;
  lay_out(r->spec, r->max_batch, r->act_dtype, NULL, &lo);
  size_t esize = clt_dtype_size(r->act_dtype);
  int64_t in_n = numel(&r->spec->layers[0].out_shape) * r->max_batch;
  r->set_act = clt__calloc((size_t)nsets, sizeof *r->set_act);
  r->set_aux = clt__calloc((size_t)nsets, sizeof *r->set_aux);
  r->set_in32 = clt__calloc((size_t)nsets, sizeof *r->set_in32);
  r->set_outs = clt__calloc((size_t)nsets * (size_t)r->spec->nlayers, sizeof *r->set_outs);
  if (!r->set_act || !r->set_aux || !r->set_in32 || !r->set_outs) return CLT_ENOMEM;
  r->nsets = 1;
  r->set_act[0] = r->act, r->set_aux[0] = r->aux, r->set_in32[0] = r->input32;
  for (int k = 1; k < nsets; k++, r->nsets++) {
    CLT_TRY(clt_buffer_create(r->ctx, (size_t)(lo.act ? lo.act : 1) * esize, &r->set_act[k]));
    CLT_TRY(clt_buffer_create(r->ctx, (size_t)(lo.aux ? lo.aux : 1) * 4, &r->set_aux[k]));
    if (r->input32) CLT_TRY(clt_buffer_create(r->ctx, (size_t)in_n * 4, &r->set_in32[k]));
  }
fail:
  return rc;
}

uint64_t clt__replica_set_bytes(const clt_model_spec *spec, int64_t max_batch, clt_dtype act_dtype) {
  replica_layout lo;
  lay_out(spec, max_batch, act_dtype, NULL, &lo);
  uint64_t in_n = (uint64_t)(numel(&spec->layers[0].out_shape) * max_batch);
  return (uint64_t)(lo.act ? lo.act : 1) * clt_dtype_size(act_dtype) + (uint64_t)(lo.aux ? lo.aux : 1) * 4 +
         (act_dtype != CLT_F32 || is_tokens(spec) ? in_n * 4 : 0);
}

static int check_set(const clt__replica *r, int set) {
  if (set < 0 || set >= (r->nsets ? r->nsets : 1))
    return clt__error(CLT_EINTERNAL, "activation set %d of a replica with %d", set, r->nsets);
  return CLT_OK;
}

int clt__replica_stage_forward(clt__replica *r, int set, const float *x, const int32_t *y, int64_t n,
                               const clt__pass *pass, int last, float *out, float *dx) {
  int rc = CLT_OK;
  const clt_model_spec *s = r->spec;
  int L = s->nlayers;
  const void *targets = is_regression(s) ? (const void *)pass->targets : (const void *)y;
  CLT_TRY(check_batch(r, n));
  CLT_TRY(check_set(r, set));
  if (r->nsets) select_set(r, set);
  clt_tensor *outs = r->set_outs + (size_t)set * L;
  if (last && !targets)
    return clt__error(CLT_EINVAL, "the last pipeline stage of a %s model takes %s", is_regression(s) ? "regression" : "classification",
                      is_regression(s) ? "float targets" : "int32 labels");
  double t0 = clt__now();
  if (r->prof_fwd) r->prof_runs += pass->train && last;
  if (last) CLT_TRY(start_record(r, pass));
  if (last) {
    CLT_TRY(upload(r, x, targets, n, &outs[0]));
  } else {
    size_t in_bytes = (size_t)(n * numel(&s->layers[0].out_shape)) * 4;
    if (r->input32) {
      clt_tensor in32;
      CLT_TRY(make_view(r->input32, 0, CLT_F32, n, &s->layers[0].out_shape, &in32));
      CLT_TRY(clt_tensor_upload_async(r->ctx, &in32, x, in_bytes));
      if (is_tokens(s)) outs[0] = in32;
      else {
        CLT_TRY(make_view(r->act, r->slots[0].act_offset, r->act_dtype, n, &s->layers[0].out_shape, &outs[0]));
        CLT_TRY(clt_convert(r->ctx, &in32, &outs[0]));
      }
    } else {
      CLT_TRY(make_view(r->act, r->slots[0].act_offset, r->act_dtype, n, &s->layers[0].out_shape, &outs[0]));
      CLT_TRY(clt_tensor_upload_async(r->ctx, &outs[0], x, in_bytes));
    }
  }
  CLT_TRY(forward_layers(r, n, outs, pass, &t0));
  if (!last) {
    CLT_TRY(read_output(r, &outs[L - 1], out)); /* waits: the input's host memory is free again */
    return CLT_OK;
  }
  CLT_TRY(run_loss(r, n, &outs[L - 1], pass));
  if (pass->train) {
    clt_tensor dy, g;
    CLT_TRY(make_view(r->dbuf[0], 0, r->act_dtype, n, &s->layers[L - 1].out_shape, &dy));
    CLT_TRY(backward_layers(r, n, outs, dy, dx != NULL, pass, &t0, &g));
    if (dx) CLT_TRY(read_output(r, &g, dx));
  }
  CLT_TRY(end_record(r, pass));
  if (!dx) CLT_TRY(queue_done(r, "a pipeline stage's forward and backward")); /* x's host memory is free again */
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "a pipeline stage's forward of %lld samples on %s", (long long)n, r->ctx->info.name);
}

int clt__replica_stage_backward(clt__replica *r, int set, const float *dy_host, int64_t n, const clt__pass *pass,
                                float *dx) {
  int rc = CLT_OK;
  const clt_model_spec *s = r->spec;
  int L = s->nlayers;
  CLT_TRY(check_batch(r, n));
  CLT_TRY(check_set(r, set));
  if (r->nsets) select_set(r, set);
  clt_tensor *outs = r->set_outs + (size_t)set * L, dy, g;
  double t0 = clt__now();
  if (r->prof_fwd) r->prof_runs++;
  CLT_TRY(start_record(r, pass));
  CLT_TRY(make_view(r->dbuf[0], 0, r->act_dtype, n, &s->layers[L - 1].out_shape, &dy));
  CLT_TRY(clt_tensor_upload(r->ctx, &dy, dy_host, (size_t)clt_tensor_numel(&dy) * 4));
  CLT_TRY(backward_layers(r, n, outs, dy, dx != NULL, pass, &t0, &g));
  if (dx) CLT_TRY(read_output(r, &g, dx));
  CLT_TRY(end_record(r, pass));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "a pipeline stage's backward of %lld samples on %s", (long long)n, r->ctx->info.name);
}

/* The loss and metric from loss_host. */
static void unpack_loss(const clt__replica *r, float *loss, double *metric) {
  memcpy(loss, r->loss_host, 4);
  if (is_regression(r->spec)) {
    float sq;
    memcpy(&sq, r->loss_host + 4, 4);
    *metric = sq;
  } else {
    int32_t correct;
    memcpy(&correct, r->loss_host + 4, 4);
    *metric = correct;
  }
}

int clt__replica_poll_loss(clt__replica *r, int *ready, float *loss, double *metric) {
  int rc = CLT_OK;
  *ready = 0;
  if (!r->loss_ev) {
    CLT_CL_TRY(clEnqueueReadBuffer(r->ctx->queue, r->scalars, CL_FALSE, 0, 8, r->loss_host, 0, NULL, &r->loss_ev));
    CLT_CL_TRY(clFlush(r->ctx->queue));
  }
  cl_int st = CL_COMPLETE;
  CLT_CL_TRY(clGetEventInfo(r->loss_ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  if (st < 0) {
    rc = clt__error(clt__cl_status(st), "the forward pass on %s failed with %s", r->ctx->info.name,
                    clt__cl_error_name(st));
    goto fail;
  }
  if (st != CL_COMPLETE) return CLT_OK;
  clReleaseEvent(r->loss_ev), r->loss_ev = NULL;
  unpack_loss(r, loss, metric);
  *ready = 1;
  return CLT_OK;
fail:
  if (r->loss_ev) clReleaseEvent(r->loss_ev), r->loss_ev = NULL;
  return clt__error_prefix(rc, "reading the loss from %s", r->ctx->info.name);
}

void clt__replica_poll_cancel(clt__replica *r) {
  if (!r->loss_ev) return;
  clWaitForEvents(1, &r->loss_ev); /* it writes into r */
  clReleaseEvent(r->loss_ev), r->loss_ev = NULL;
}

int clt__replica_read_loss(clt__replica *r, float *loss, double *metric) {
  int rc = CLT_OK;
  cl_event ev = NULL;
  CLT_CL_TRY(clEnqueueReadBuffer(r->ctx->queue, r->scalars, CL_FALSE, 0, 8, r->loss_host, 0, NULL, &ev));
  CLT_CL_TRY(clFlush(r->ctx->queue));
  CLT_TRY(clt__wait_event(r->ctx, ev, r->timeout_s, "the forward and backward pass and its loss"));
  clReleaseEvent(ev);
  unpack_loss(r, loss, metric);
  return CLT_OK;
fail:
  if (ev) clReleaseEvent(ev);
  return clt__error_prefix(rc, "reading the loss from %s", r->ctx->info.name);
}
