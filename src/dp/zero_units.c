/*
 * zero_units.c: ZeRO stage 3's gathered units: a replica keeps no P-float
 * parameter arena, only its rank's shard (packed like the optimizer state,
 * zero.c) and a small ring of unit buffers; a layer's parameters are put
 * into a slot of the ring just before its forward, again before its
 * backward (unless the slot still holds them), and the slot is reused
 * once the queue is past them.
 *
 * Unit. A layer with parameters is a unit: the runner's hooks come per
 * layer (forward_begin, backward_begin), a layer is the smallest piece
 * whose kernels read its parameters together, and what is in flight is
 * then two neighbouring layers, not two blocks (an attention and an MLP,
 * 7 M floats each in GPT-2 small; with the embedding and the tied head
 * layers of their own either way, blocks would only put more in flight).
 * A tied parameter (the head's weight, the embedding's) is copied into the
 * unit of every layer that reads it, so each unit is whole on its own.
 *
 * Where the parameters come from. After each optimizer step every rank's
 * shard is allgathered on the host (zero_gather.c, once per step: Psi
 * floats over the communicator, as stages 1 and 2 move) into the whole
 * parameters in arena order (dp->z3_full); the units are written from
 * there to the device. So the device holds 16 Psi / N (the shard's
 * parameters, gradient and Adam's two moments) plus the ring, and the
 * host the whole model once.
 *
 * Ring. One buffer, the units written at its two ends by turns: the
 * layers with parameters in the order they run, the first at the low end,
 * the second at the high end, the third at the low end again. A unit's
 * neighbours (the layers with parameters before and after it) are then at
 * the other end, and the buffer is as long as the two largest neighbours
 * together (GPT-2: the token embedding and the position table, 39.4 M
 * floats; two slots as long as the largest would take 77 M). The layer
 * running holds one end; the next layer in the run's order (the forward
 * up, the backward down) is written at the other as soon as the current
 * layer's kernels are enqueued: the prefetch. The backward's first unit
 * is the forward's last, still there, and its next is often there too.
 * The writes go on the compute queue, which is in order, so a place is
 * written again only after every kernel that read its last unit: no event
 * is needed, and the host, enqueueing ahead of the device, has each unit's
 * write queued before the kernels of the layer before it finish. A run
 * starts with an empty ring: the parameters may have changed since the
 * last one.
 */
#include "dp/dp_internal.h"

#include <stdlib.h>
#include <string.h>

/* Each tied copy starts on a multiple of this many floats in its unit. */
#define CLT__UNIT_ALIGN 16

struct clt__dp_ring {
  const clt__unit_layout *u;
  const clt_model_spec *spec;
  const float *host;        /* the whole parameters, arena order */
  clt_context *ctx;
  cl_mem buf;               /* u->capacity floats */
  int holder[2];            /* the layer whose unit each end holds (0 low, 1 high), or -1 */
  int cur;                  /* the layer whose forward or backward is being enqueued, or -1 */
  int64_t writes;           /* units written since the ring was made */
};

/* A parameter not in its layer's own range of the arena: written into
 * its unit apart, after the layer's own. */
static int aside(const clt_param_spec *p) { return p->tied || p->stage_copy; }

static int64_t round_up(int64_t n) { return (n + CLT__UNIT_ALIGN - 1) / CLT__UNIT_ALIGN * CLT__UNIT_ALIGN; }

/* ---- the layout ---- */

void clt__unit_layout_free(clt__unit_layout *u) {
  free(u->floats), free(u->at), free(u->end);
  memset(u, 0, sizeof *u);
}

int clt__unit_layout_make(const clt_model_spec *spec, clt__unit_layout *u) {
  memset(u, 0, sizeof *u);
  u->nlayers = spec->nlayers;
  u->floats = clt__calloc((size_t)spec->nlayers, sizeof *u->floats);
  u->at = clt__calloc((size_t)spec->nlayers * CLT_MAX_LAYER_PARAMS, sizeof *u->at);
  u->end = clt__calloc((size_t)spec->nlayers, sizeof *u->end);
  if (!u->floats || !u->at || !u->end) {
    clt__unit_layout_free(u);
    return CLT_ENOMEM;
  }
  int64_t last = 0;
  int turn = 0;
  for (int i = 0; i < spec->nlayers; i++) {
    const clt_layer_spec *l = &spec->layers[i];
    int64_t *at = u->at + (size_t)i * CLT_MAX_LAYER_PARAMS, end = l->param_count;
    /* its own parameters where the arena has them, relative to its first;
     * tied ones (and a pipeline stage's copies of weights tied across
     * stages, at the stage arena's end) after them */
    for (int k = 0; k < l->nparams; k++)
      if (!aside(&l->param[k])) at[k] = l->param[k].offset - l->param_offset;
    for (int k = 0; k < l->nparams; k++)
      if (aside(&l->param[k])) {
        end = round_up(end);
        at[k] = end;
        end += l->param[k].count;
      }
    u->floats[i] = l->nparams ? end : 0;
    if (!u->floats[i]) continue;
    u->end[i] = turn, turn = 1 - turn;
    if (u->floats[i] > u->largest) u->largest = u->floats[i];
    /* this unit and the one before it, side by side */
    if (round_up(u->floats[i]) + last > u->capacity) u->capacity = round_up(u->floats[i]) + last;
    last = round_up(u->floats[i]);
  }
  return CLT_OK;
}

uint64_t clt__unit_ring_bytes(const clt__unit_layout *u) { return (uint64_t)u->capacity * 4; }

/* Where layer i's unit starts in the ring: at the low end, or ending at
 * the high one. */
static int64_t unit_at(const clt__unit_layout *u, int i) { return u->end[i] ? u->capacity - round_up(u->floats[i]) : 0; }

/* ---- a replica's ring ---- */

int clt__dp_ring_create(clt_context *ctx, const clt_model_spec *spec, const clt__unit_layout *u, const float *host,
                        clt__dp_ring **out) {
  int rc = CLT_OK;
  clt__dp_ring *g = clt__calloc(1, sizeof *g);
  *out = NULL;
  if (!g) return CLT_ENOMEM;
  g->u = u, g->spec = spec, g->host = host, g->ctx = ctx;
  CLT_TRY(clt_buffer_create(ctx, (size_t)(u->capacity > 0 ? u->capacity : 1) * 4, &g->buf));
  clt__dp_ring_reset(g);
  *out = g;
  return CLT_OK;
fail:
  clt__dp_ring_destroy(g);
  return clt__error_prefix(rc, "making ZeRO stage 3's ring of %lld floats for the layers' parameters on %s",
                           (long long)u->capacity, ctx->info.name);
}

void clt__dp_ring_destroy(clt__dp_ring *g) {
  if (!g) return;
  clt_buffer_release(g->buf);
  free(g);
}

void clt__dp_ring_reset(clt__dp_ring *g) {
  g->holder[0] = g->holder[1] = -1;
  g->cur = -1;
}

uint64_t clt__dp_ring_bytes(const clt__dp_ring *g) { return g ? clt_buffer_size(g->buf) : 0; }
int64_t clt__dp_ring_writes(const clt__dp_ring *g) { return g ? g->writes : 0; }

/* Layer i's unit at its end of the ring, from the host's whole
 * parameters, on the compute queue (behind every kernel enqueued so far,
 * those that read what was there among them). */
static int write_unit(clt__dp_ring *g, int i) {
  int rc = CLT_OK;
  const clt_layer_spec *l = &g->spec->layers[i];
  const int64_t *at = g->u->at + (size_t)i * CLT_MAX_LAYER_PARAMS;
  size_t base = (size_t)unit_at(g->u, i) * 4;
  g->holder[g->u->end[i]] = -1; /* until written */
  if (l->param_count > 0)
    CLT_CL_TRY(clEnqueueWriteBuffer(g->ctx->queue, g->buf, CL_FALSE, base, (size_t)l->param_count * 4,
                                    g->host + l->param_offset, 0, NULL, NULL));
  for (int k = 0; k < l->nparams; k++)
    if (aside(&l->param[k]))
      CLT_CL_TRY(clEnqueueWriteBuffer(g->ctx->queue, g->buf, CL_FALSE, base + (size_t)at[k] * 4,
                                      (size_t)l->param[k].count * 4, g->host + l->param[k].offset, 0, NULL, NULL));
  g->holder[g->u->end[i]] = i;
  g->writes++;
fail:
  return rc;
}

int clt__dp_ring_enter(clt__dp_ring *g, int layer, int dir) {
  int rc = CLT_OK, next = layer + dir;
  const clt__unit_layout *u = g->u;
  if (layer < 0 || layer >= u->nlayers || u->floats[layer] == 0) return CLT_OK;
  while (next >= 1 && next < u->nlayers && u->floats[next] == 0) next += dir;
  if (g->holder[u->end[layer]] != layer) CLT_TRY(write_unit(g, layer));
  g->cur = layer;
  /* the prefetch: the next unit at the other end, queued behind this
   * layer's kernels' predecessors (the caller enqueues them next; the
   * other end's last unit is the layer before this one, whose kernels are
   * enqueued, and this one's place does not overlap the next one's) */
  if (next >= 1 && next < u->nlayers && u->floats[next] > 0 && g->holder[u->end[next]] != next)
    CLT_TRY(write_unit(g, next));
fail:
  return rc;
}

int clt__dp_ring_view(const clt__dp_ring *g, const clt_param_spec *p, clt_tensor *t) {
  int i = g->cur;
  if (i >= 0 && g->holder[g->u->end[i]] == i) {
    const clt_layer_spec *l = &g->spec->layers[i];
    for (int k = 0; k < l->nparams; k++)
      if (&l->param[k] == p)
        return clt_tensor_view(g->buf, (size_t)(unit_at(g->u, i) + g->u->at[(size_t)i * CLT_MAX_LAYER_PARAMS + k]) * 4,
                               CLT_F32, p->ndim, p->shape, t);
  }
  return clt__error(CLT_EINTERNAL, "ZeRO stage 3: a parameter (elements %lld to %lld) read outside its layer's "
                    "gathered unit", (long long)p->offset, (long long)(p->offset + p->count));
}

/* ---- data parallelism's side ---- */

int clt__dp_units_attach(clt__dp *dp) {
  int rc = CLT_OK;
  if (dp->zero != 3) return CLT_OK;
  for (int i = 0; i < dp->nlocal; i++) {
    clt__dp_ring *g;
    CLT_TRY(clt__dp_ring_create(dp->ctx[i], dp->local->spec, &dp->units, dp->z3_full, &g));
    clt__dp_rep_set_ring(dp->drep[i], g);
  }
  clt__log(CLT_LOG_INFO, "rank %d: --zero 3: parameters, gradients and optimizer state for %lld of %lld parameters "
           "on each device, and a ring of %lld floats for the layers' parameters (the largest layer %lld)", dp->rank,
           (long long)dp->shard_params, (long long)clt_model_param_count(dp->local), (long long)dp->units.capacity,
           (long long)dp->units.largest);
fail:
  return rc;
}

void clt__dp_units_free(clt__dp *dp) {
  free(dp->z3_full), free(dp->z3_mine);
  dp->z3_full = dp->z3_mine = NULL;
  clt__unit_layout_free(&dp->units);
}

void clt__dp_pack_shard(const clt__dp *dp, const float *params, float *shard) {
  for (int k = 0; k < dp->nshard; k++)
    memcpy(shard + dp->shard[k].state_at, params + dp->shard[k].lo, (size_t)dp->shard[k].n * sizeof *shard);
}
