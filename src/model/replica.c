/*
 * replica.c: a model replica's buffers on one device, their layout, what
 * they take (counted before anything is allocated, and measured after),
 * and activation sets.
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
 * Under ZeRO stage 3 the parameter buffer holds a rank's shard only
 * (cfg->param_floats) and the run's hooks say where each layer's
 * parameters are (param_view). One layout function (lay_out) places all of it; clt__replica_memory
 * reports from it what clt__replica_create_with allocates, so a model that
 * cannot fit is refused (clt_replica_memory_check) before anything is
 * allocated.
 */
#include "model/replica.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t numel(const clt_shape *s) { return clt__shape_numel(s); }
static int has(const clt_layer_spec *l, unsigned flag) { return (l->kind->flags & flag) != 0; }
static int is_tokens(const clt_model_spec *s) { return s->layers[0].out_shape.vocab > 0; }
static int is_regression(const clt_model_spec *s) { return s->loss != CLT_LOSS_CROSSENTROPY; }

static int make_flat(cl_mem buf, int64_t off, clt_dtype dt, int64_t count, clt_tensor *t) {
  return clt_tensor_view(buf, (size_t)off * clt_dtype_size(dt), dt, 1, &count, t);
}

/* --recompute blocks: whether layer i's output (with what it keeps for
 * its backward) is not kept in the activation set but in the replica's
 * block buffers, which hold one block pass at a time and are filled again
 * in the backward (run.c). A layer of a block pass is, unless something
 * outside the pass reads it: the pass's last layer (its output is the next
 * layer's input: the next pass's block input), a layer whose output a
 * residual outside the pass adds, and a layer that a kept view or identity
 * dropout after it shows (their output is its storage). The input and the
 * layers outside blocks are always kept. */
static int transient(const clt_model_spec *spec, int recompute, int i) {
  const clt_layer_spec *l = &spec->layers[i];
  int L = spec->nlayers;
  if (!recompute || i == 0 || l->block < 0) return 0;
  for (int k = i;; k++) { /* k: i, then each view of it that follows */
    if (k + 1 == L || spec->layers[k + 1].block != l->block || spec->layers[k].skip_outside) return 0;
    if (!has(&spec->layers[k + 1], CLT_KIND_VIEW) && !has(&spec->layers[k + 1], CLT_KIND_TRAIN_ONLY)) return 1;
  }
}

/* Where a replica's buffers go, for max_batch samples: the one layout that
 * clt__replica_create_with allocates and clt__replica_memory reports.
 * Offsets into slots (NULL: sizes only); sizes in elements of the
 * activation dtype (act, block_act, largest, gscratch, skip), f32 (aux,
 * block_aux) or bytes (workspace, scratch). */
typedef struct replica_layout {
  int64_t act;       /* an activation set's arena: every kept layer's output and what its backward keeps */
  int64_t aux;       /* f32 / i32 values kept for the backward */
  int64_t block_act; /* --recompute blocks: the largest block pass's other layers, outputs and kept values */
  int64_t block_aux; /*   and their f32 / i32 values */
  int64_t largest;   /* each of the two activation-gradient buffers */
  int64_t gscratch;  /* backward scratch of the layer that needs most */
  int64_t skip;      /* each skip-branch gradient slot */
  int64_t workspace; /* conv2d's im2col */
  size_t scratch;    /* the context's scratch */
  int first_trainable;
} replica_layout;

static void lay_out(const clt_model_spec *spec, int64_t max_batch, clt_dtype act_dtype, int recompute,
                    clt__layer_slot *slots, replica_layout *lo) {
  clt__layer_slot dummy, prev = {0, 0, 0, 0, -1};
  int64_t pass_act = 0, pass_aux = 0; /* the current block pass's, in the block buffers */
  int last_t = -1;                    /* the last transient layer so far */
  memset(lo, 0, sizeof *lo);
  lo->first_trainable = spec->nlayers;
  for (int i = 0; i < spec->nlayers; i++) {
    const clt_layer_spec *l = &spec->layers[i];
    clt__layer_slot *sl = slots ? &slots[i] : &dummy;
    int64_t out_n = numel(&l->out_shape) * max_batch, in_n = numel(&l->in_shape) * max_batch;
    int t = transient(spec, recompute, i);
    if (t && (last_t < 0 || spec->layers[last_t].block != l->block)) pass_act = pass_aux = 0; /* a new pass */
    if (t) last_t = i;
    int64_t *act = t ? &pass_act : &lo->act, *aux = t ? &pass_aux : &lo->aux;
    sl->transient = t;
    sl->recompute_from = -1;
    if (i == 0 && is_tokens(spec)) { /* token ids stay f32, in input32 */
      sl->act_offset = 0;
    } else if (i > 0 && has(l, CLT_KIND_VIEW)) {
      sl->act_offset = prev.act_offset;
    } else {
      sl->act_offset = *act;
      *act += out_n;
    }
    sl->saved_offset = *act;
    *act += l->saved_act * max_batch;
    sl->aux_offset = *aux;
    *aux += l->saved_f32 * max_batch;
    if (pass_act > lo->block_act) lo->block_act = pass_act;
    if (pass_aux > lo->block_aux) lo->block_aux = pass_aux;
    if (out_n > lo->largest) lo->largest = out_n;
    if (i > 0 && in_n > lo->largest) lo->largest = in_n;
    if (l->grad_scratch * max_batch > lo->gscratch) lo->gscratch = l->grad_scratch * max_batch;
    if (l->skip >= 0 && numel(&l->skip_shape) * max_batch > lo->skip) lo->skip = numel(&l->skip_shape) * max_batch;
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
  /* Where the backward runs a pass again: at its last layer, from its
   * first (a pass with a layer in the block buffers). */
  for (int i = 1; slots && i < spec->nlayers; i++) {
    const clt_layer_spec *l = &spec->layers[i];
    if (!slots[i].transient) continue;
    int first = i, last = i;
    while (first > 1 && spec->layers[first - 1].block == l->block) first--;
    while (last + 1 < spec->nlayers && spec->layers[last + 1].block == l->block) last++;
    slots[last].recompute_from = first;
    i = last;
  }
}

/* Bytes of an activation set's three buffers. */
static void set_sizes(const clt_model_spec *spec, int64_t max_batch, clt_dtype act_dtype, int recompute, size_t *act,
                      size_t *aux, size_t *input32) {
  replica_layout lo;
  lay_out(spec, max_batch, act_dtype, recompute, NULL, &lo);
  *act = (size_t)(lo.act ? lo.act : 1) * clt_dtype_size(act_dtype);
  *aux = (size_t)(lo.aux ? lo.aux : 1) * 4;
  /* The input batch arrives as f32 and is rounded on the device, unless it is token ids. */
  *input32 = act_dtype != CLT_F32 || is_tokens(spec) ? (size_t)(numel(&spec->layers[0].out_shape) * max_batch) * 4 : 0;
}

uint64_t clt__act_set_bytes(const clt_model_spec *spec, int64_t max_batch, clt_dtype act_dtype, int recompute) {
  size_t act, aux, in32;
  set_sizes(spec, max_batch, act_dtype, recompute, &act, &aux, &in32);
  return (uint64_t)act + aux + in32;
}

/* The block buffers' bytes (--recompute blocks; none without it). */
static uint64_t block_bytes(const replica_layout *lo, clt_dtype act_dtype) {
  return (uint64_t)lo->block_act * clt_dtype_size(act_dtype) + (uint64_t)lo->block_aux * 4;
}

void clt__replica_memory(const clt_model_spec *spec, const clt__replica_config *cfg, clt_replica_memory *m) {
  replica_layout lo;
  int64_t max_batch = cfg->max_batch;
  lay_out(spec, max_batch, cfg->act_dtype, cfg->recompute, NULL, &lo);
  uint64_t P = (uint64_t)spec->param_count, e = clt_dtype_size(cfg->act_dtype);
  uint64_t labels_n = (uint64_t)(max_batch * spec->labels_per_sample);
  uint64_t held = cfg->param_floats > 0 ? (uint64_t)cfg->param_floats : P; /* the parameter buffer's floats */
  memset(m, 0, sizeof *m);
  m->batch = max_batch;
  m->parameters = held * 4;
  m->gradients = cfg->no_grad_arena ? 0 : P * 4;
  m->optimizer_state = (uint64_t)cfg->state_params * 4 * (uint64_t)cfg->state_per_param;
  m->activations = clt__act_set_bytes(spec, max_batch, cfg->act_dtype, cfg->recompute) + block_bytes(&lo, cfg->act_dtype) +
                   2 * labels_n * 4 + 8;
  m->activation_grads = 2 * (uint64_t)lo.largest * e + (uint64_t)lo.gscratch * e +
                        (uint64_t)spec->skip_slots * (uint64_t)lo.skip * e;
  m->workspace = (uint64_t)lo.workspace + lo.scratch;
  m->total = m->parameters + m->gradients + m->optimizer_state + m->activations + m->activation_grads + m->workspace;
  /* The largest single buffer: each arena is one. */
  struct { uint64_t bytes; const char *what; } one[] = {
      {held * 4, "the parameters"},
      {m->optimizer_state, "the optimizer state"},
      {(uint64_t)lo.act * e, "the activations"},
      {(uint64_t)lo.aux * 4, "the values layers keep for the backward"},
      {(uint64_t)lo.block_act * e, "the activations of the block run again (--recompute blocks)"},
      {(uint64_t)lo.largest * e, "the largest layer's activation gradient"},
      {(uint64_t)lo.gscratch * e, "a layer's backward scratch"},
      {(uint64_t)lo.workspace, "conv2d's im2col workspace"},
      {(uint64_t)lo.scratch, "a layer's scratch space"}};
  for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
    if (one[i].bytes > m->largest) m->largest = one[i].bytes, m->largest_what = one[i].what;
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
  CLT_ARG(need);
  CLT_ARG(d);
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

/* The three buffers of an activation set on ctx, and its output views. */
static int set_create(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, clt_dtype act_dtype,
                      int recompute, clt__act_set *set) {
  int rc = CLT_OK;
  size_t act, aux, in32;
  memset(set, 0, sizeof *set);
  set_sizes(spec, max_batch, act_dtype, recompute, &act, &aux, &in32);
  if (!(set->outs = clt__calloc((size_t)spec->nlayers, sizeof *set->outs))) return CLT_ENOMEM;
  CLT_TRY(clt_buffer_create(ctx, act, &set->act));
  if (in32) CLT_TRY(clt_buffer_create(ctx, in32, &set->input32));
  CLT_TRY(clt_buffer_create(ctx, aux, &set->aux));
fail:
  return rc;
}

int clt__act_set_create(const clt__replica *r, clt__act_set *set) {
  int rc = set_create(r->ctx, r->spec, r->cfg.max_batch, r->cfg.act_dtype, r->cfg.recompute, set);
  if (rc < 0) clt__act_set_destroy(set);
  return rc;
}

void clt__act_set_destroy(clt__act_set *set) {
  if (!set) return;
  clt_buffer_release(set->act), clt_buffer_release(set->aux), clt_buffer_release(set->input32);
  free(set->outs);
  memset(set, 0, sizeof *set);
}

int clt__replica_create(clt_context *ctx, const clt_model_spec *spec, int64_t max_batch, int state_per_param,
                        clt_dtype act_dtype, const float *params, clt__replica **out) {
  clt__replica_config cfg = {.max_batch = max_batch, .act_dtype = act_dtype, .state_per_param = state_per_param,
                             .state_params = spec->param_count};
  return clt__replica_create_with(ctx, spec, &cfg, params, out);
}

int clt__replica_create_with(clt_context *ctx, const clt_model_spec *spec, const clt__replica_config *cfg,
                             const float *params, clt__replica **out) {
  int rc = CLT_OK;
  clt__replica *r = clt__calloc(1, sizeof *r);
  *out = NULL;
  if (!r) return CLT_ENOMEM;
  r->ctx = ctx;
  r->spec = spec;
  r->cfg = *cfg;
  r->timeout_s = 300;
  int64_t max_batch = cfg->max_batch;
  clt_dtype act_dtype = cfg->act_dtype;
  if (!(r->slots = clt__calloc(spec->nlayers, sizeof *r->slots))) { rc = CLT_ENOMEM; goto fail; }
  const char *prof = getenv("CLT_PROFILE");
  if (prof && *prof && strcmp(prof, "0") != 0) {
    r->prof_fwd = clt__calloc(spec->nlayers, sizeof *r->prof_fwd);
    r->prof_bwd = clt__calloc(spec->nlayers, sizeof *r->prof_bwd);
    if (!r->prof_fwd || !r->prof_bwd) { rc = CLT_ENOMEM; goto fail; }
  }

  /* Lay out activations, what layers keep for their backward, and scratch. */
  replica_layout lo;
  lay_out(spec, max_batch, act_dtype, cfg->recompute, r->slots, &lo);
  r->first_trainable = lo.first_trainable;
  size_t pbytes = (size_t)(cfg->param_floats > 0 ? cfg->param_floats : spec->param_count) * 4,
         gbytes = (size_t)spec->param_count * 4, esize = clt_dtype_size(act_dtype);
  int64_t labels_n = max_batch * spec->labels_per_sample;
  /* (a piece without parameters still gets its buffers: --stages auto times
   * one, src/pp/cut.c) */
  CLT_TRY(clt_buffer_create(ctx, pbytes ? pbytes : 4, &r->params));
  if (cfg->grads_at && !cfg->no_grad_arena) { /* the caller's host bytes, zeroed as a new buffer's */
    memset(cfg->grads_at, 0, gbytes ? gbytes : 4);
    CLT_TRY(clt__shared_buffer_wrap(ctx, cfg->grads_at, gbytes ? gbytes : 4, &r->grads));
  } else if (!cfg->no_grad_arena) {
    CLT_TRY(clt_buffer_create(ctx, gbytes ? gbytes : 4, &r->grads));
  }
  if (cfg->state_per_param && cfg->state_params > 0)
    CLT_TRY(clt_buffer_create(ctx, (size_t)cfg->state_params * 4 * cfg->state_per_param, &r->state));
  CLT_TRY(set_create(ctx, spec, max_batch, act_dtype, cfg->recompute, &r->own));
  if (lo.block_act) CLT_TRY(clt_buffer_create(ctx, (size_t)lo.block_act * esize, &r->block_act));
  if (lo.block_aux) CLT_TRY(clt_buffer_create(ctx, (size_t)lo.block_aux * 4, &r->block_aux));
  CLT_TRY(clt_buffer_create(ctx, (size_t)lo.largest * esize, &r->dbuf[0]));
  CLT_TRY(clt_buffer_create(ctx, (size_t)lo.largest * esize, &r->dbuf[1]));
  if (lo.gscratch) CLT_TRY(clt_buffer_create(ctx, (size_t)lo.gscratch * esize, &r->gscratch));
  if (spec->skip_slots && !(r->skip = clt__calloc(spec->skip_slots, sizeof *r->skip))) { rc = CLT_ENOMEM; goto fail; }
  for (int k = 0; k < spec->skip_slots; k++) CLT_TRY(clt_buffer_create(ctx, (size_t)lo.skip * esize, &r->skip[k]));
  if (lo.scratch) {
    cl_mem s;
    CLT_TRY(clt__context_scratch(ctx, lo.scratch, &s));
  }
  if (lo.workspace) CLT_TRY(clt_buffer_create(ctx, (size_t)lo.workspace, &r->workspace));
  CLT_TRY(clt_buffer_create(ctx, (size_t)labels_n * 4, &r->labels));
  /* regression: each value's loss, then its squared error */
  CLT_TRY(clt_buffer_create(ctx, (size_t)labels_n * 4 * (is_regression(spec) ? 2 : 1), &r->losses));
  CLT_TRY(clt_buffer_create(ctx, 8, &r->scalars));

  clt_tensor p = clt__replica_params(r);
  if (pbytes && params) CLT_TRY(clt_tensor_upload(ctx, &p, params, pbytes));
  char ab[32], pb[32];
  clt__log(CLT_LOG_INFO, "replica on %s: %s of parameters, %s of activations and their gradients (%s)", ctx->info.name,
           clt__fmt_bytes(pbytes, pb, sizeof pb),
           clt__fmt_bytes((uint64_t)(lo.act + lo.block_act + 2 * lo.largest + lo.gscratch + spec->skip_slots * lo.skip) *
                              esize, ab, sizeof ab),
           clt_dtype_name(act_dtype));
  *out = r;
  return CLT_OK;
fail:
  clt__error_prefix(rc, "making a %lld-parameter replica for batches of %lld on %s", (long long)spec->param_count,
                    (long long)max_batch, ctx->info.name);
  clt__replica_destroy(r);
  return rc;
}

void clt__replica_set_hooks(clt__replica *r, const clt__run_hooks *hooks, void *user) {
  r->hooks = hooks;
  r->hooks_user = user;
}

void clt__replica_destroy(clt__replica *r) {
  if (!r) return;
  if (!clt__replica_wait_done(r)) {
    clt__log(CLT_LOG_WARN, "%s did not finish the replica's work, or a completion callback never came: its "
             "replica's memory is left allocated", r->ctx->info.name);
    return;
  }
  clt__replica_poll_cancel(r);
  if (r->prof_fwd) clt__replica_report_profile(r);
  free(r->prof_fwd);
  free(r->prof_bwd);
  clt__replica_trace(r, 0);
  if (r->start_ev) clReleaseEvent(r->start_ev);
  if (r->end_ev) clReleaseEvent(r->end_ev);
  clt__act_set_destroy(&r->own);
  cl_mem bufs[] = {r->params, r->grads,  r->state,   r->dbuf[0],   r->dbuf[1],  r->workspace,
                   r->labels, r->losses, r->scalars, r->gscratch, r->block_act, r->block_aux};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) clt_buffer_release(bufs[i]);
  for (int k = 0; r->skip && k < r->spec->skip_slots; k++) clt_buffer_release(r->skip[k]);
  free(r->skip);
  free(r->slots);
  free(r);
}

static uint64_t sizes(const cl_mem *bufs, size_t n) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) bytes += clt_buffer_size(bufs[i]);
  return bytes;
}

void clt__replica_device_bytes(const clt__replica *r, clt__replica_bytes *out) {
  memset(out, 0, sizeof *out);
  out->parameters = clt_buffer_size(r->params);
  out->gradients = clt_buffer_size(r->grads);
  out->optimizer_state = clt_buffer_size(r->state);
  const cl_mem act[] = {r->own.act, r->own.input32, r->own.aux, r->block_act, r->block_aux, r->labels, r->losses,
                        r->scalars};
  out->activations = sizes(act, sizeof act / sizeof act[0]);
  const cl_mem dact[] = {r->dbuf[0], r->dbuf[1], r->gscratch};
  out->activation_grads = sizes(dact, sizeof dact / sizeof dact[0]);
  if (r->skip) out->activation_grads += sizes(r->skip, (size_t)r->spec->skip_slots);
  const cl_mem ws[] = {r->workspace, r->ctx->scratch};
  out->workspace = sizes(ws, sizeof ws / sizeof ws[0]);
  out->total = out->parameters + out->gradients + out->optimizer_state + out->activations + out->activation_grads +
               out->workspace;
}

clt_context *clt__replica_context(const clt__replica *r) { return r->ctx; }

clt_tensor clt__replica_params(const clt__replica *r) {
  clt_tensor t;
  make_flat(r->params, 0, CLT_F32, r->cfg.param_floats > 0 ? r->cfg.param_floats : r->spec->param_count, &t);
  return t;
}

clt_tensor clt__replica_grads(const clt__replica *r) {
  clt_tensor t;
  memset(&t, 0, sizeof t);
  if (r->grads) make_flat(r->grads, 0, CLT_F32, r->spec->param_count, &t);
  return t;
}

clt_tensor clt__replica_state(const clt__replica *r) {
  clt_tensor t;
  memset(&t, 0, sizeof t);
  if (r->state) make_flat(r->state, 0, CLT_F32, r->cfg.state_params * r->cfg.state_per_param, &t);
  return t;
}

int clt__replica_zero_grads(clt__replica *r) {
  if (!r->grads) return CLT_OK;
  clt_tensor g = clt__replica_grads(r);
  return clt_fill(r->ctx, &g, 0.0f);
}
