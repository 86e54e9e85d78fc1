/*
 * run.c: the layer runner: a batch uploaded into an activation set, the
 * forward pass over the layers, the loss, and the backward pass from the
 * loss (or from a gradient given at the output) down to the first layer
 * with parameters (or on to the input), each layer a call through its kind
 * in the layer table. The hooks hung on the replica (model/replica.h) are
 * called around the run and around each layer; what they do is theirs.
 *
 * A whole run (clt__replica_run) is the pieces in order on the replica's
 * own activation set: begin, input, forward, loss, backward, end. A
 * pipeline stage calls the pieces itself on sets of its own (src/pp).
 *
 * --recompute blocks (activation checkpointing): the forward writes the
 * layers of each block pass, but its input and output, into the replica's
 * block buffers, which the next pass overwrites (model/replica.c says
 * which layers); the backward, reaching a pass's last layer, runs the
 * pass's forward again there from the input the set kept, then the pass's
 * backward. The same kernels on the same inputs in the same order: the
 * same bits as without (dropout's masks are keyed by the pass, not drawn).
 */
#include "model/replica.h"

#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"

static int64_t numel(const clt_shape *s) { return clt__shape_numel(s); }
static int has(const clt_layer_spec *l, unsigned flag) { return (l->kind->flags & flag) != 0; }
static int is_tokens(const clt_model_spec *s) { return s->layers[0].out_shape.vocab > 0; }
static int is_regression(const clt_model_spec *s) { return s->loss != CLT_LOSS_CROSSENTROPY; }

/* A hook if the replica has it, else nothing. */
#define HOOK(r, name, ...) ((r)->hooks && (r)->hooks->name ? (r)->hooks->name((r)->hooks_user, __VA_ARGS__) : CLT_OK)

/* Views at an offset in elements of their dtype. */
static int make_view(cl_mem buf, int64_t off, clt_dtype dt, int64_t n, const clt_shape *s, clt_tensor *t) {
  int64_t shape[4] = {n, 0, 0, 0};
  for (int i = 0; i < s->ndim; i++) shape[i + 1] = s->dims[i];
  return clt_tensor_view(buf, (size_t)off * clt_dtype_size(dt), dt, s->ndim + 1, shape, t);
}

static int make_flat(cl_mem buf, int64_t off, clt_dtype dt, int64_t count, clt_tensor *t) {
  return clt_tensor_view(buf, (size_t)off * clt_dtype_size(dt), dt, 1, &count, t);
}

/* Where layer i's output and saved values are: set s's arena, or the
 * block buffer (--recompute blocks). */
static cl_mem act_of(const clt__replica *r, const clt__act_set *s, int i) {
  return r->slots[i].transient ? r->block_act : s->act;
}

/* Layer i's places in the replica's buffers and set s for n samples. */
static void layer_io(const clt__replica *r, const clt__act_set *s, int i, int64_t n, const clt__pass *pass,
                     clt__layer_io *io) {
  memset(io, 0, sizeof *io);
  io->ctx = r->ctx;
  io->spec = r->spec;
  io->l = &r->spec->layers[i];
  io->index = i + r->spec->layer_base; /* the whole model's index, for dropout's masks */
  io->n = n;
  io->dt = r->cfg.act_dtype;
  io->params = r->params;
  io->grads = r->grads;
  if (r->hooks && r->hooks->grad_view) io->grad_view = r->hooks->grad_view, io->grad_user = r->hooks_user;
  if (r->hooks && r->hooks->param_view) io->param_view = r->hooks->param_view, io->grad_user = r->hooks_user;
  if (r->hooks && r->hooks->sum_stats) io->sum_stats = r->hooks->sum_stats, io->grad_user = r->hooks_user;
  io->saved = act_of(r, s, i);
  io->saved_off = r->slots[i].saved_offset;
  io->aux = r->slots[i].transient ? r->block_aux : s->aux;
  io->aux_off = r->slots[i].aux_offset;
  io->gscratch = r->gscratch;
  io->workspace = r->workspace;
  io->pass = pass;
}

static int layer_failed(const clt__replica *r, int i, const char *what, int rc) {
  const clt_layer_spec *l = &r->spec->layers[i];
  return clt__error_prefix(rc, "%s:%d: %s %s", r->spec->name, l->line, clt__layer_kind_name(l), what);
}

/* The skip slot of layer l (a residual or concat) seen like the output of
 * the layer it reads, whose gradient it adds to. */
static int skip_view(const clt__replica *r, const clt_layer_spec *l, int64_t n, clt_tensor *t) {
  return make_view(r->skip[l->skip_slot], 0, r->cfg.act_dtype, n, &l->skip_shape, t);
}

/* Forward through layer i: outs[i - 1] is its input, outs[i] gets its output view. */
static int layer_forward(clt__replica *r, clt__act_set *s, int i, int64_t n, const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_layer_spec *l = &r->spec->layers[i];
  clt_tensor *outs = s->outs;
  clt_dtype dt = r->cfg.act_dtype;
  clt__layer_io io;
  if (has(l, CLT_KIND_TRAIN_ONLY) && !pass->train) { /* the identity: reuse the input */
    outs[i] = outs[i - 1];
    return CLT_OK;
  }
  if (has(l, CLT_KIND_VIEW)) /* the same storage seen in the output's shape */
    return make_view(outs[i - 1].buf, (int64_t)(outs[i - 1].offset / clt_dtype_size(dt)), dt, n, &l->out_shape,
                     &outs[i]);
  CLT_TRY(HOOK(r, forward_begin, i, pass));
  layer_io(r, s, i, n, pass, &io);
  io.x = outs[i - 1];
  CLT_TRY(make_view(act_of(r, s, i), r->slots[i].act_offset, dt, n, &l->out_shape, &io.y));
  if (l->skip >= 0) io.skip = outs[l->skip];
  CLT_TRY(l->kind->forward(&io));
  outs[i] = io.y;
  return CLT_OK;
fail:
  return layer_failed(r, i, "forward", rc);
}

/* Backward through layer i: dy is the gradient at its output; *dx gets the
 * gradient at its input (in the free ping-pong buffer, or dy itself for
 * views and pass-through kinds); need_dx is 0 for the first trainable
 * layer. */
static int layer_backward(clt__replica *r, const clt__act_set *s, int i, int64_t n, const clt_tensor *dy,
                          clt_tensor *dx, cl_mem free_buf, int need_dx, const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_layer_spec *l = &r->spec->layers[i];
  clt__layer_io io;
  int through = has(l, CLT_KIND_VIEW) || has(l, CLT_KIND_PASS_GRAD);
  if (through)
    CLT_TRY(make_view(dy->buf, (int64_t)(dy->offset / clt_dtype_size(dy->dtype)), dy->dtype, n, &l->in_shape, dx));
  else if (need_dx)
    CLT_TRY(make_view(free_buf, 0, r->cfg.act_dtype, n, &l->in_shape, dx));
  else
    memset(dx, 0, sizeof *dx);
  if (has(l, CLT_KIND_VIEW)) return CLT_OK;
  layer_io(r, s, i, n, pass, &io);
  io.x = s->outs[i - 1];
  io.y = s->outs[i];
  io.dy = *dy;
  io.dx = *dx;
  if (l->skip >= 0) CLT_TRY(skip_view(r, l, n, &io.skip));
  CLT_TRY(l->kind->backward(&io));
  return CLT_OK;
fail:
  return layer_failed(r, i, "backward", rc);
}

/* After the backward of layer i: add the skip-branch gradients of the
 * residuals and concats whose branch starts at layer i - 1 (dy is the gradient at its
 * output). */
static int add_skip_gradients(clt__replica *r, int i, int64_t n, const clt_tensor *dy) {
  int rc = CLT_OK;
  const clt_model_spec *s = r->spec;
  for (int j = i; j < s->nlayers; j++) {
    const clt_layer_spec *l = &s->layers[j];
    if (l->skip != i - 1) continue;
    clt_tensor g, d;
    CLT_TRY(skip_view(r, l, n, &g));
    CLT_TRY(clt__reshape(dy, g.ndim, g.shape, &d));
    CLT_TRY(clt_nn_accumulate(r->ctx, &g, &d));
  }
fail:
  return rc;
}

/* Upload the batch: images (rounded to f16 on the device under mixed
 * precision) or token ids (always f32), and the labels (i32) or the
 * regression targets (f32), 4 bytes each either way. */
int clt__replica_input(clt__replica *r, clt__act_set *s, const float *x, const void *targets, int64_t n) {
  int rc = CLT_OK;
  const clt_model_spec *spec = r->spec;
  const clt_shape *shape = &spec->layers[0].out_shape;
  size_t in_bytes = (size_t)(n * numel(shape)) * 4;
  clt_dtype dt = r->cfg.act_dtype;
  if (s->input32) {
    clt_tensor in32;
    CLT_TRY(make_view(s->input32, 0, CLT_F32, n, shape, &in32));
    CLT_TRY(clt_tensor_upload_async(r->ctx, &in32, x, in_bytes));
    if (is_tokens(spec)) s->outs[0] = in32;
    else {
      CLT_TRY(make_view(s->act, r->slots[0].act_offset, dt, n, shape, &s->outs[0]));
      CLT_TRY(clt_convert(r->ctx, &in32, &s->outs[0]));
    }
  } else {
    CLT_TRY(make_view(s->act, r->slots[0].act_offset, dt, n, shape, &s->outs[0]));
    CLT_TRY(clt_tensor_upload_async(r->ctx, &s->outs[0], x, in_bytes));
  }
  if (targets) {
    clt_tensor labels;
    CLT_TRY(make_flat(r->labels, 0, is_regression(spec) ? CLT_F32 : CLT_I32, n * spec->labels_per_sample, &labels));
    CLT_TRY(clt_tensor_upload_async(r->ctx, &labels, targets, (size_t)(n * spec->labels_per_sample) * 4));
  }
fail:
  return rc;
}

/* The loss of the last layer's output: the SUM over the slice's labels
 * (one per sample, or one per position of a sequence) or target values,
 * into scalars[0], with the number correct (i32) or the summed squared
 * error (f32) in scalars[1]; in training its gradient (dlogits = softmax -
 * onehot, or the regression loss's), not divided, into dbuf[0]. */
int clt__replica_loss(clt__replica *r, clt__act_set *set, int64_t n, const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_model_spec *s = r->spec;
  const clt_tensor *out = &set->outs[s->nlayers - 1];
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
    CLT_TRY(make_flat(r->dbuf[0], 0, r->cfg.act_dtype, M, &grad));
    CLT_TRY(clt__reshape(out, 1, &M, &y));
    return clt_nn_regression_loss(r->ctx, (clt_loss_kind)s->loss, s->huber_delta, &y, &labels, grad_scale,
                                  pass->train ? &grad : NULL, &losses, &sq, &loss, &second);
  }
  int64_t lshape[2] = {M, C};
  CLT_TRY(make_flat(r->labels, 0, CLT_I32, M, &labels));
  CLT_TRY(make_flat(r->scalars, 1, CLT_I32, 1, &second));
  CLT_TRY(clt_tensor_view(r->dbuf[0], 0, r->cfg.act_dtype, 2, lshape, &grad));
  CLT_TRY(clt__reshape(out, 2, lshape, &y));
  CLT_TRY(clt_nn_softmax_xent(r->ctx, &y, &labels, CLT_IGNORE_LABEL, grad_scale, pass->train ? &grad : NULL, &losses,
                              &loss, &second));
fail:
  return rc;
}

clt_tensor clt__act_set_output(const clt__replica *r, const clt__act_set *s) { return s->outs[r->spec->nlayers - 1]; }

int clt__replica_read(clt__replica *r, const clt_tensor *y, float *out) {
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

int clt__replica_forward(clt__replica *r, clt__act_set *s, int64_t n, const clt__pass *pass) {
  int rc = CLT_OK;
  for (int i = 1; i < r->spec->nlayers; i++) {
    CLT_TRY(layer_forward(r, s, i, n, pass));
    CLT_TRY(clt__replica_trace_mark(r, i));
    if (pass->train) clt__replica_charge(r, &r->prof_fwd[i]);
  }
fail:
  return rc;
}

/* --recompute blocks, before the backward of a block pass's last layer i:
 * the pass's transient layers run forward again into the block buffers
 * (the pass's input and every layer it adds outside the pass were kept).
 * Its time is the profile's share of layer i's backward. */
static int recompute_pass(clt__replica *r, clt__act_set *s, int i, int64_t n, const clt__pass *pass) {
  int rc = CLT_OK;
  for (int j = r->slots[i].recompute_from; j < i; j++)
    if (r->slots[j].transient) CLT_TRY(layer_forward(r, s, j, n, pass));
fail:
  return rc < 0 ? clt__error_prefix(rc, "running block pass %d again (--recompute blocks)", r->spec->layers[i].block)
                : rc;
}

int clt__replica_backward(clt__replica *r, clt__act_set *s, int64_t n, const float *dy_host, int to_input,
                          const clt__pass *pass, clt_tensor *dx_out) {
  int rc = CLT_OK, cur = 0;
  const clt_model_spec *spec = r->spec;
  int L = spec->nlayers, lowest = to_input ? 1 : r->first_trainable;
  clt_tensor dy, dx;
  if (r->prof_fwd) r->prof_runs++; /* a run with a backward, for the profile's means */
  CLT_TRY(make_view(r->dbuf[0], 0, r->cfg.act_dtype, n, &spec->layers[L - 1].out_shape, &dy));
  if (dy_host) CLT_TRY(clt_tensor_upload(r->ctx, &dy, dy_host, (size_t)clt_tensor_numel(&dy) * 4));
  for (int i = L - 1; i >= lowest && i >= 1; i--) {
    const clt_layer_spec *l = &spec->layers[i];
    int need_dx = i > lowest || to_input, through = has(l, CLT_KIND_VIEW) || has(l, CLT_KIND_PASS_GRAD);
    if (r->slots[i].recompute_from >= 0) CLT_TRY(recompute_pass(r, s, i, n, pass));
    CLT_TRY(HOOK(r, backward_begin, i, pass));
    CLT_TRY(layer_backward(r, s, i, n, &dy, &dx, r->dbuf[1 - cur], need_dx, pass));
    CLT_TRY(clt__replica_trace_mark(r, spec->nlayers + i));
    clt__replica_charge(r, &r->prof_bwd[i]);
    CLT_TRY(HOOK(r, backward_end, i, pass));
    if (!need_dx) break;
    if (!through) cur = 1 - cur;
    dy = dx;
    CLT_TRY(add_skip_gradients(r, i, n, &dy));
  }
  if (dx_out) *dx_out = dy;
fail:
  return rc;
}

static int check_batch(const clt__replica *r, int64_t n) {
  if (n < 1 || n > r->cfg.max_batch)
    return clt__error(CLT_EINVAL, "a batch of %lld samples on a replica made for 1 to %lld", (long long)n,
                      (long long)r->cfg.max_batch);
  return CLT_OK;
}

int clt__replica_begin(clt__replica *r, const clt__pass *pass) {
  int rc = CLT_OK;
  r->prof_t0 = clt__now();
  if (pass->record) {
    r->run_start_ns = (int64_t)(clt__now() * 1e9);
    atomic_store(&r->run_end_ns, 0);
    CLT_TRY(clt__replica_marker(r, &r->start_ev));
  }
  CLT_TRY(HOOK(r, run_begin, pass));
fail:
  return rc;
}

int clt__replica_end(clt__replica *r, const clt__pass *pass) {
  int rc = CLT_OK;
  CLT_TRY(HOOK(r, run_end, pass));
  if (!pass->record) return CLT_OK;
  CLT_TRY(clt__replica_marker(r, &r->end_ev));
  CLT_TRY(clt__replica_time_run_end(r));
fail:
  return rc;
}

int clt__replica_run(clt__replica *r, const float *x, const int32_t *y, int64_t n, const clt__pass *pass) {
  int rc = CLT_OK;
  const clt_model_spec *s = r->spec;
  const void *targets = is_regression(s) ? (const void *)pass->targets : (const void *)y;

  CLT_TRY(check_batch(r, n));
  if (!targets || (is_regression(s) && y))
    return clt__error(CLT_EINVAL, "a run of a %s model takes %s", is_regression(s) ? "regression" : "classification",
                      is_regression(s) ? "float targets (pass->targets), not labels" : "int32 labels");
  CLT_TRY(clt__replica_input(r, &r->own, x, targets, n));
  clt__replica_trace_clear(r);
  CLT_TRY(clt__replica_trace_mark(r, 0));
  CLT_TRY(clt__replica_begin(r, pass));
  clt__replica_charge(r, &r->prof_loss);
  CLT_TRY(clt__replica_forward(r, &r->own, n, pass));
  CLT_TRY(clt__replica_loss(r, &r->own, n, pass));
  CLT_TRY(clt__replica_trace_mark(r, s->nlayers));
  if (pass->train) clt__replica_charge(r, &r->prof_loss);
  if (pass->logits) {
    clt_tensor out = clt__act_set_output(r, &r->own);
    CLT_TRY(clt__replica_read(r, &out, pass->logits));
  }
  if (pass->train) CLT_TRY(clt__replica_backward(r, &r->own, n, NULL, 0, pass, NULL));
  CLT_TRY(clt__replica_end(r, pass));
fail:
  return rc;
}

/* A run of no samples in training still takes part in the sums over the
 * global batch of the layers that make them (batchnorm): each one's
 * forward, then each one's backward in reverse, with n = 0 (the kind adds
 * zeros and keeps its running statistics in step with the others'). */
static int empty_sync_layers(clt__replica *r, const clt__pass *pass) {
  int rc = CLT_OK, L = r->spec->nlayers;
  clt__layer_io io;
  if (!pass->train) return CLT_OK;
  for (int i = 1; i < L; i++) {
    if (!has(&r->spec->layers[i], CLT_KIND_SYNC_STATS)) continue;
    layer_io(r, &r->own, i, 0, pass, &io);
    if ((rc = r->spec->layers[i].kind->forward(&io)) < 0) return layer_failed(r, i, "forward (of no samples)", rc);
  }
  for (int i = L - 1; i >= 1; i--) {
    if (!has(&r->spec->layers[i], CLT_KIND_SYNC_STATS)) continue;
    layer_io(r, &r->own, i, 0, pass, &io);
    if ((rc = r->spec->layers[i].kind->backward(&io)) < 0) return layer_failed(r, i, "backward (of no samples)", rc);
  }
  return CLT_OK;
}

int clt__replica_run_empty(clt__replica *r, const clt__pass *pass) {
  int rc = CLT_OK;
  if (pass->record) {
    r->run_start_ns = 0;
    atomic_store(&r->run_end_ns, 0);
    CLT_TRY(clt__replica_marker(r, &r->start_ev));
  }
  CLT_TRY(HOOK(r, run_begin, pass));
  CLT_TRY(empty_sync_layers(r, pass));
  CLT_TRY(HOOK(r, run_end, pass));
  if (pass->record) CLT_TRY(clt__replica_marker(r, &r->end_ev));
fail:
  return rc;
}
