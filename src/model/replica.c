/*
 * replica.c: a model replica on one device: arenas, activation layout, and
 * the forward, loss and backward passes over the layer list, each layer a
 * call into src/nn.
 *
 * Memory: every layer's output for max_batch samples lives in one
 * activation arena (flatten and evaluation-mode dropout reuse their input),
 * because backward needs them; gradients of activations ping-pong between
 * two buffers the size of the largest layer output. Both hold f32, or f16
 * under mixed precision (computed in f32 all the same; cl/prelude.cl);
 * parameters, their gradients and optimizer state are always f32.
 */
#include "model/replica.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/nn.h"

/* The im2col workspace is capped; conv2d then runs in chunks of samples. */
#define MAX_WORKSPACE_BYTES (256u << 20)

static int64_t numel(const clt_shape *s) { return clt__shape_numel(s); }

/* Does this layer's output share its input's storage? */
static int is_view(const clt_layer_spec *l) { return l->kind == CLT_LAYER_FLATTEN; }

/* Views at an offset in elements of their dtype. */
static int make_view(cl_mem buf, int64_t off, clt_dtype dt, int64_t n, const clt_shape *s, clt_tensor *t) {
  int64_t shape[4] = {n, 0, 0, 0};
  for (int i = 0; i < s->ndim; i++) shape[i + 1] = s->dims[i];
  return clt_tensor_view(buf, (size_t)off * clt_dtype_size(dt), dt, s->ndim + 1, shape, t);
}

static int make_flat(cl_mem buf, int64_t off, clt_dtype dt, int64_t count, clt_tensor *t) {
  return clt_tensor_view(buf, (size_t)off * clt_dtype_size(dt), dt, 1, &count, t);
}

int clt__replica_create(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                        clt_dtype act_dtype, const float *params, clt__replica **out) {
  int rc = CLT_OK;
  clt__replica *r = clt__calloc(1, sizeof *r);
  *out = NULL;
  if (!r) return CLT_ENOMEM;
  r->ctx = ctx;
  r->spec = spec;
  r->max_batch = max_batch;
  r->state_per_param = state_per_param;
  r->act_dtype = act_dtype;
  if (!(r->slots = clt__calloc(spec->nlayers, sizeof *r->slots))) { rc = CLT_ENOMEM; goto fail; }
  const char *prof = getenv("CLT_PROFILE");
  if (prof && *prof && strcmp(prof, "0") != 0) {
    r->prof_fwd = clt__calloc(spec->nlayers, sizeof *r->prof_fwd);
    r->prof_bwd = clt__calloc(spec->nlayers, sizeof *r->prof_bwd);
    if (!r->prof_fwd || !r->prof_bwd) { rc = CLT_ENOMEM; goto fail; }
  }

  /* Lay out activations and saved data. */
  int64_t act = 0, aux = 0, largest = 0, ws = 0;
  size_t scratch = 0;
  r->first_trainable = spec->nlayers;
  for (int i = 0; i < spec->nlayers; i++) {
    const clt_layer_spec *l = &spec->layers[i];
    int64_t out_n = numel(&l->out_shape) * max_batch;
    if (i > 0 && is_view(l)) {
      r->slots[i].act_offset = r->slots[i - 1].act_offset;
    } else {
      r->slots[i].act_offset = act;
      act += out_n;
    }
    if (out_n > largest) largest = out_n;
    r->slots[i].aux_offset = aux;
    if (l->kind == CLT_LAYER_MAXPOOL) aux += out_n;
    if (l->kind == CLT_LAYER_LAYERNORM) aux += 2 * max_batch;
    if (l->weight_count && i < r->first_trainable) r->first_trainable = i;
    if (l->kind == CLT_LAYER_CONV2D) {
      int64_t samples = max_batch;
      size_t bytes;
      while ((bytes = clt_nn_conv2d_workspace_bytes(samples, l->in_shape.dims[0], l->out, l->kernel, l->kernel,
                                                    l->out_shape.dims[1], l->out_shape.dims[2])) > MAX_WORKSPACE_BYTES &&
             samples > 1)
        samples = (samples + 1) / 2;
      if ((int64_t)bytes > ws) ws = (int64_t)bytes;
    }
    if (l->kind == CLT_LAYER_LINEAR) {
      size_t b = clt_nn_linear_scratch_bytes(max_batch, l->in_shape.dims[0], l->out, act_dtype);
      if (b > scratch) scratch = b;
    }
  }

  size_t pbytes = (size_t)spec->param_count * 4;
  CLT_TRY(clt_buffer_create(ctx, pbytes, &r->params));
  CLT_TRY(clt_buffer_create(ctx, pbytes, &r->grads));
  if (state_per_param) CLT_TRY(clt_buffer_create(ctx, pbytes * state_per_param, &r->state));
  size_t esize = clt_dtype_size(act_dtype);
  CLT_TRY(clt_buffer_create(ctx, (size_t)act * esize, &r->act));
  CLT_TRY(clt_buffer_create(ctx, (size_t)largest * esize, &r->dbuf[0]));
  CLT_TRY(clt_buffer_create(ctx, (size_t)largest * esize, &r->dbuf[1]));
  if (act_dtype != CLT_F32) /* the input batch arrives as f32 and is rounded on the device */
    CLT_TRY(clt_buffer_create(ctx, (size_t)(numel(&spec->layers[0].out_shape) * max_batch) * 4, &r->input32));
  if (scratch) {
    cl_mem s;
    CLT_TRY(clt__context_scratch(ctx, scratch, &s));
  }
  CLT_TRY(clt_buffer_create(ctx, (size_t)(aux ? aux : 1) * 4, &r->aux));
  if (ws) CLT_TRY(clt_buffer_create(ctx, (size_t)ws, &r->workspace));
  CLT_TRY(clt_buffer_create(ctx, (size_t)max_batch * 4, &r->labels));
  CLT_TRY(clt_buffer_create(ctx, (size_t)max_batch * 4, &r->losses));
  CLT_TRY(clt_buffer_create(ctx, 8, &r->scalars));

  clt_tensor p = clt__replica_params(r);
  CLT_TRY(clt_tensor_upload(ctx, &p, params, pbytes));
  char ab[32], pb[32];
  clt__log(CLT_LOG_INFO, "replica on %s: %s of parameters, %s of activations and their gradients (%s)", ctx->info.name,
           clt__fmt_bytes(pbytes, pb, sizeof pb), clt__fmt_bytes((uint64_t)(act + 2 * largest) * esize, ab, sizeof ab),
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
  for (int b = 0; b < r->nbuckets; b++)
    if (r->bucket_ev[b]) clReleaseEvent(r->bucket_ev[b]), r->bucket_ev[b] = NULL;
  if (r->start_ev) clReleaseEvent(r->start_ev), r->start_ev = NULL;
  if (r->end_ev) clReleaseEvent(r->end_ev), r->end_ev = NULL;
}

int clt__replica_set_buckets(clt__replica *r, int nbuckets, const int *closed_at, const int64_t *lo,
                             const int64_t *hi, int wire) {
  release_events(r);
  free(r->bucket_ev);
  free(r->bucket_closed_at);
  free(r->bucket_lo);
  r->nbuckets = 0;
  r->bucket_ev = clt__calloc(nbuckets ? nbuckets : 1, sizeof *r->bucket_ev);
  r->bucket_closed_at = clt__calloc(nbuckets ? nbuckets : 1, sizeof *r->bucket_closed_at);
  r->bucket_lo = clt__calloc(2 * (size_t)(nbuckets ? nbuckets : 1), sizeof *r->bucket_lo);
  if (!r->bucket_ev || !r->bucket_closed_at || !r->bucket_lo) return CLT_ENOMEM;
  r->bucket_hi = r->bucket_lo + nbuckets;
  memcpy(r->bucket_closed_at, closed_at, (size_t)nbuckets * sizeof *closed_at);
  memcpy(r->bucket_lo, lo, (size_t)nbuckets * sizeof *lo);
  memcpy(r->bucket_hi, hi, (size_t)nbuckets * sizeof *hi);
  r->nbuckets = nbuckets;
  if (wire && !r->wire) return clt_buffer_create(r->ctx, (size_t)r->spec->param_count * 2, &r->wire);
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

/* Bucket b's gradients are all written: round them to the f16 wire
 * buffer if there is one, and mark the place on the queue. */
static int close_bucket(clt__replica *r, int b) {
  int rc = CLT_OK;
  if (r->wire && r->bucket_hi[b] > r->bucket_lo[b]) {
    clt_tensor g, w;
    int64_t n = r->bucket_hi[b] - r->bucket_lo[b];
    CLT_TRY(make_flat(r->grads, r->bucket_lo[b], CLT_F32, n, &g));
    CLT_TRY(make_flat(r->wire, r->bucket_lo[b], CLT_F16, n, &w));
    CLT_TRY(clt_convert(r->ctx, &g, &w));
  }
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
  if (!r->end_ev) return 0;
  clWaitForEvents(1, &r->end_ev);
  /* The callback runs on a driver thread, when the driver gets to it:
   * NVIDIA's was seen 20 ms late, and waiting for it cut a training step's
   * speed by 10. Without it yet, the run ended before now. */
  int64_t end = atomic_load(&r->run_end_ns);
  if (end == 0) end = now_ns();
  return end > r->run_start_ns ? (double)(end - r->run_start_ns) * 1e-9 : 0;
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
    clt__log(CLT_LOG_WARN, "  %s:%d %-14s %8.3f %8.3f  %5.1f%%", s->name, l->line, clt__layer_kind_name(l->kind), f,
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

/* Wait (up to 10 s) until no completion callback can still come: the
 * driver calls them on its own thread, NVIDIA's tens of ms late, and one
 * landing after free(r) corrupted the heap (a crash in clReleaseContext). */
static int callbacks_done(clt__replica *r) {
  if (r->ctx && r->ctx->queue) clFinish(r->ctx->queue);
  for (int i = 0; i < 10000 && atomic_load(&r->callbacks_pending) > 0; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return atomic_load(&r->callbacks_pending) == 0;
}

void clt__replica_destroy(clt__replica *r) {
  if (!r) return;
  if (!callbacks_done(r)) {
    clt__log(CLT_LOG_WARN, "a completion callback on %s never came: its replica's memory is left allocated",
             r->ctx->info.name);
    return;
  }
  if (r->prof_fwd) report_profile(r);
  free(r->prof_fwd);
  free(r->prof_bwd);
  release_events(r);
  free(r->bucket_ev);
  free(r->bucket_closed_at);
  free(r->bucket_lo);
  cl_mem bufs[] = {r->params, r->grads,     r->state,  r->act,    r->dbuf[0], r->dbuf[1], r->aux,
                   r->workspace, r->labels, r->losses, r->scalars, r->input32, r->wire};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) clt_buffer_release(bufs[i]);
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
  make_flat(r->grads, 0, CLT_F32, r->spec->param_count, &t);
  return t;
}

clt_tensor clt__replica_state(const clt__replica *r) {
  clt_tensor t;
  memset(&t, 0, sizeof t);
  if (r->state) make_flat(r->state, 0, CLT_F32, r->spec->param_count * r->state_per_param, &t);
  return t;
}

int clt__replica_zero_grads(clt__replica *r) {
  clt_tensor g = clt__replica_grads(r);
  return clt_fill(r->ctx, &g, 0.0f);
}

/* The weight and bias views of a parametric layer in an arena. */
static int param_views(cl_mem arena, const clt_layer_spec *l, clt_tensor *w, clt_tensor *b, int *has_b) {
  int rc = CLT_OK;
  int64_t wshape[4];
  int wnd;
  switch (l->kind) {
  case CLT_LAYER_LINEAR:
    wnd = 2, wshape[0] = l->out, wshape[1] = l->in_shape.dims[0];
    break;
  case CLT_LAYER_CONV2D:
    wnd = 4, wshape[0] = l->out, wshape[1] = l->in_shape.dims[0], wshape[2] = l->kernel, wshape[3] = l->kernel;
    break;
  default: /* layernorm: gamma, beta */
    wnd = 1, wshape[0] = l->weight_count;
    break;
  }
  CLT_TRY(clt_tensor_view(arena, (size_t)l->param_offset * 4, CLT_F32, wnd, wshape, w));
  *has_b = l->bias_count > 0;
  if (*has_b) CLT_TRY(make_flat(arena, l->param_offset + l->weight_count, CLT_F32, l->bias_count, b));
fail:
  return rc;
}

static clt_nn_act act_of(clt_layer_kind k) {
  switch (k) {
  case CLT_LAYER_LEAKYRELU: return CLT_NN_LEAKY_RELU;
  case CLT_LAYER_GELU: return CLT_NN_GELU;
  case CLT_LAYER_TANH: return CLT_NN_TANH;
  case CLT_LAYER_SIGMOID: return CLT_NN_SIGMOID;
  default: return CLT_NN_RELU;
  }
}

static clt_nn_pool2d_cfg pool_cfg(const clt_layer_spec *l) {
  clt_nn_pool2d_cfg c = {l->kernel, l->kernel, l->stride, l->stride, 0, 0};
  return c;
}

static clt_nn_conv2d_cfg conv_cfg(const clt_layer_spec *l) {
  clt_nn_conv2d_cfg c = {.stride_h = l->stride, .stride_w = l->stride, .pad_h = l->pad, .pad_w = l->pad};
  return c;
}

static int workspace_view(const clt__replica *r, clt_tensor *t) {
  return make_flat(r->workspace, 0, CLT_F32, (int64_t)(clt_buffer_size(r->workspace) / 4), t);
}

/* Forward through layer i: x is its input view, *y receives its output view. */
static int layer_forward(clt__replica *r, int i, int64_t n, const clt_tensor *x, clt_tensor *y,
                         const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_layer_spec *l = &r->spec->layers[i];
  clt_tensor w, b, aux, aux2, ws;
  int has_b;
  if (l->kind == CLT_LAYER_DROPOUT && !pass->train) { /* the identity: reuse the input */
    *y = *x;
    return CLT_OK;
  }
  CLT_TRY(make_view(r->act, r->slots[i].act_offset, r->act_dtype, n, &l->out_shape, y));
  switch (l->kind) {
  case CLT_LAYER_LINEAR:
    CLT_TRY(param_views(r->params, l, &w, &b, &has_b));
    CLT_TRY(clt_nn_linear_forward(r->ctx, x, &w, has_b ? &b : NULL, y));
    break;
  case CLT_LAYER_CONV2D: {
    clt_nn_conv2d_cfg c = conv_cfg(l);
    CLT_TRY(param_views(r->params, l, &w, &b, &has_b));
    CLT_TRY(workspace_view(r, &ws));
    CLT_TRY(clt_nn_conv2d_forward(r->ctx, &c, x, &w, has_b ? &b : NULL, y, &ws));
    break;
  }
  case CLT_LAYER_MAXPOOL: {
    clt_nn_pool2d_cfg c = pool_cfg(l);
    CLT_TRY(make_view(r->aux, r->slots[i].aux_offset, CLT_I32, n, &l->out_shape, &aux));
    CLT_TRY(clt_nn_maxpool2d_forward(r->ctx, &c, x, y, &aux));
    break;
  }
  case CLT_LAYER_AVGPOOL: {
    clt_nn_pool2d_cfg c = pool_cfg(l);
    CLT_TRY(clt_nn_avgpool2d_forward(r->ctx, &c, x, y));
    break;
  }
  case CLT_LAYER_GLOBALAVGPOOL:
    CLT_TRY(clt_nn_global_avgpool_forward(r->ctx, x, y));
    break;
  case CLT_LAYER_RELU:
  case CLT_LAYER_LEAKYRELU:
  case CLT_LAYER_GELU:
  case CLT_LAYER_TANH:
  case CLT_LAYER_SIGMOID:
    CLT_TRY(clt_nn_act_forward(r->ctx, act_of(l->kind), l->slope, x, y));
    break;
  case CLT_LAYER_DROPOUT: {
    uint64_t base = (uint64_t)pass->global_first * (uint64_t)numel(&l->in_shape);
    /* Each dropout layer draws its own mask: the layer index keys the seed. */
    CLT_TRY(clt_nn_dropout_forward(r->ctx, l->p, pass->seed + 0x9e3779b97f4a7c15ull * (uint64_t)i, pass->step, base,
                                   x, y));
    break;
  }
  case CLT_LAYER_FLATTEN:
    break; /* y is already the same storage seen flat */
  case CLT_LAYER_LAYERNORM:
    CLT_TRY(param_views(r->params, l, &w, &b, &has_b));
    CLT_TRY(make_flat(r->aux, r->slots[i].aux_offset, CLT_F32, n, &aux));
    CLT_TRY(make_flat(r->aux, r->slots[i].aux_offset + r->max_batch, CLT_F32, n, &aux2));
    CLT_TRY(clt_nn_layernorm_forward(r->ctx, l->eps, x, &w, &b, y, &aux, &aux2));
    break;
  default:
    return clt__error(CLT_EINTERNAL, "layer %d (%s) has no forward pass", i, clt__layer_kind_name(l->kind));
  }
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s:%d: %s forward", r->spec->name, l->line, clt__layer_kind_name(l->kind));
}

/* Backward through layer i: x, y are its forward input and output, dy the
 * gradient at its output; dx (shaped like x) receives the input gradient,
 * or is NULL for the first trainable layer. */
static int layer_backward(clt__replica *r, int i, int64_t n, const clt_tensor *x, const clt_tensor *y,
                          const clt_tensor *dy, const clt_tensor *dx, const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_layer_spec *l = &r->spec->layers[i];
  clt_tensor w, b, dw, db, aux, aux2, ws;
  int has_b;
  switch (l->kind) {
  case CLT_LAYER_LINEAR:
    CLT_TRY(param_views(r->params, l, &w, &b, &has_b));
    CLT_TRY(param_views(r->grads, l, &dw, &db, &has_b));
    CLT_TRY(clt_nn_linear_backward(r->ctx, x, &w, dy, dx, &dw, has_b ? &db : NULL));
    break;
  case CLT_LAYER_CONV2D: {
    clt_nn_conv2d_cfg c = conv_cfg(l);
    CLT_TRY(param_views(r->params, l, &w, &b, &has_b));
    CLT_TRY(param_views(r->grads, l, &dw, &db, &has_b));
    CLT_TRY(workspace_view(r, &ws));
    CLT_TRY(clt_nn_conv2d_backward(r->ctx, &c, x, &w, dy, dx, &dw, has_b ? &db : NULL, &ws));
    break;
  }
  case CLT_LAYER_MAXPOOL: {
    clt_nn_pool2d_cfg c = pool_cfg(l);
    CLT_TRY(make_view(r->aux, r->slots[i].aux_offset, CLT_I32, n, &l->out_shape, &aux));
    CLT_TRY(clt_nn_maxpool2d_backward(r->ctx, &c, &aux, dy, dx));
    break;
  }
  case CLT_LAYER_AVGPOOL: {
    clt_nn_pool2d_cfg c = pool_cfg(l);
    CLT_TRY(clt_nn_avgpool2d_backward(r->ctx, &c, dy, dx));
    break;
  }
  case CLT_LAYER_GLOBALAVGPOOL:
    CLT_TRY(clt_nn_global_avgpool_backward(r->ctx, dy, dx));
    break;
  case CLT_LAYER_RELU:
  case CLT_LAYER_LEAKYRELU:
  case CLT_LAYER_GELU:
  case CLT_LAYER_TANH:
  case CLT_LAYER_SIGMOID:
    CLT_TRY(clt_nn_act_backward(r->ctx, act_of(l->kind), l->slope, x, y, dy, dx));
    break;
  case CLT_LAYER_DROPOUT: {
    uint64_t base = (uint64_t)pass->global_first * (uint64_t)numel(&l->in_shape);
    CLT_TRY(clt_nn_dropout_backward(r->ctx, l->p, pass->seed + 0x9e3779b97f4a7c15ull * (uint64_t)i, pass->step,
                                    base, dy, dx));
    break;
  }
  case CLT_LAYER_LAYERNORM:
    CLT_TRY(param_views(r->params, l, &w, &b, &has_b));
    CLT_TRY(param_views(r->grads, l, &dw, &db, &has_b));
    CLT_TRY(make_flat(r->aux, r->slots[i].aux_offset, CLT_F32, n, &aux));
    CLT_TRY(make_flat(r->aux, r->slots[i].aux_offset + r->max_batch, CLT_F32, n, &aux2));
    CLT_TRY(clt_nn_layernorm_backward(r->ctx, x, &w, &aux, &aux2, dy, dx, &dw, &db));
    break;
  default:
    return clt__error(CLT_EINTERNAL, "layer %d (%s) has no backward pass", i, clt__layer_kind_name(l->kind));
  }
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s:%d: %s backward", r->spec->name, l->line, clt__layer_kind_name(l->kind));
}

int clt__replica_run(clt__replica *r, const float *x, const int32_t *y, int64_t n, const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_model_spec *s = r->spec;
  int L = s->nlayers;
  clt_tensor *outs = NULL, in, labels, losses, loss, correct, dlogits;

  if (n < 1 || n > r->max_batch)
    return clt__error(CLT_EINVAL, "a batch of %lld samples on a replica made for 1 to %lld", (long long)n,
                      (long long)r->max_batch);
  if (!(outs = clt__calloc(L, sizeof *outs))) return CLT_ENOMEM;

  /* Forward. outs[i] is layer i's output; outs[0] the input batch. */
  CLT_TRY(make_view(r->act, r->slots[0].act_offset, r->act_dtype, n, &s->layers[0].out_shape, &in));
  size_t in_bytes = (size_t)(n * numel(&s->layers[0].out_shape)) * 4;
  if (r->input32) {
    clt_tensor in32;
    CLT_TRY(make_view(r->input32, 0, CLT_F32, n, &s->layers[0].out_shape, &in32));
    CLT_TRY(clt_tensor_upload_async(r->ctx, &in32, x, in_bytes));
    CLT_TRY(clt_convert(r->ctx, &in32, &in));
  } else {
    CLT_TRY(clt_tensor_upload_async(r->ctx, &in, x, in_bytes));
  }
  CLT_TRY(make_flat(r->labels, 0, CLT_I32, n, &labels));
  CLT_TRY(clt_tensor_upload_async(r->ctx, &labels, y, (size_t)n * 4));
  double t0 = clt__now();
  if (r->prof_fwd) r->prof_runs += pass->train;
  outs[0] = in;
  if (pass->record) {
    r->run_start_ns = now_ns();
    atomic_store(&r->run_end_ns, 0);
    CLT_TRY(marker(r, &r->start_ev));
  }
  charge(r, &r->prof_loss, &t0);
  for (int i = 1; i < L; i++) {
    CLT_TRY(layer_forward(r, i, n, &outs[i - 1], &outs[i], pass));
    if (pass->train) charge(r, &r->prof_fwd[i], &t0);
  }

  /* Loss: the SUM over the slice; dlogits = softmax - onehot, not divided. */
  int64_t C = s->num_classes;
  int64_t lshape[2] = {n, C};
  CLT_TRY(make_flat(r->losses, 0, CLT_F32, n, &losses));
  CLT_TRY(make_flat(r->scalars, 0, CLT_F32, 1, &loss));
  CLT_TRY(make_flat(r->scalars, 1, CLT_I32, 1, &correct));
  CLT_TRY(clt_tensor_view(r->dbuf[0], 0, r->act_dtype, 2, lshape, &dlogits));
  float grad_scale = pass->loss_scale > 0 ? pass->loss_scale : 1.0f;
  CLT_TRY(clt_nn_softmax_xent(r->ctx, &outs[L - 1], &labels, grad_scale, pass->train ? &dlogits : NULL, &losses,
                              &loss, &correct));
  if (pass->train) charge(r, &r->prof_loss, &t0);

  /* Backward, into the gradient arena (accumulated). */
  if (pass->train) {
    int cur = 0;
    clt_tensor dy = dlogits, dx;
    for (int i = L - 1; i >= r->first_trainable && i >= 1; i--) {
      const clt_layer_spec *l = &s->layers[i];
      if (is_view(l)) { /* flatten: the same gradient seen in the input's shape */
        CLT_TRY(make_view(dy.buf, (int64_t)(dy.offset / clt_dtype_size(dy.dtype)), dy.dtype, n, &l->in_shape, &dy));
        continue;
      }
      int need_dx = i > r->first_trainable;
      if (need_dx) CLT_TRY(make_view(r->dbuf[1 - cur], 0, r->act_dtype, n, &l->in_shape, &dx));
      CLT_TRY(layer_backward(r, i, n, &outs[i - 1], &outs[i], &dy, need_dx ? &dx : NULL, pass));
      charge(r, &r->prof_bwd[i], &t0);
      if (pass->record) CLT_TRY(close_buckets_at(r, i));
      if (need_dx) {
        dy = dx;
        cur = 1 - cur;
      }
    }
    /* Buckets of layers the backward never reached (none, as the model
     * lays them out) close at its end. */
    if (pass->record) CLT_TRY(close_buckets_below(r, r->first_trainable > 1 ? r->first_trainable : 1));
  }
  if (pass->record) {
    CLT_TRY(marker(r, &r->end_ev));
    CLT_TRY(time_run_end(r));
  }
  free(outs);
  return CLT_OK;
fail:
  free(outs);
  return rc;
}

int clt__replica_read_loss(clt__replica *r, float *loss, int32_t *correct) {
  int rc = CLT_OK;
  unsigned char both[8];
  CLT_CL_TRY(clEnqueueReadBuffer(r->ctx->queue, r->scalars, CL_TRUE, 0, 8, both, 0, NULL, NULL));
  memcpy(loss, both, 4);
  memcpy(correct, both + 4, 4);
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "reading the loss from %s", r->ctx->info.name);
}
