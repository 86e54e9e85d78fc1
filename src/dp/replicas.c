/*
 * replicas.c: this rank's replicas as data parallelism keeps them: made
 * with the sizes the plan chose (optimizer state for the ZeRO shard only,
 * a gradient arena or stage 2's pool, the arena in the node's shared
 * memory where every rank can sum it in place), with host copies of the
 * parameters and state of a replica whose device rounds divide and sqrt
 * loosely (its optimizer step runs on the host, so every replica holds
 * the same bits), and the decay mask of decoupled weight decay.
 *
 * A replica at 0 samples sits steps out (balance.c): it is marked stale and
 * brought up to date, bit for bit from one that is not, before it takes
 * part again or anything reads it. When every replica of this rank is at
 * 0, the rank sits out: its model lives on the host, updated there from
 * the host exchange's sum with the same bits as the devices' step.
 *
 * Also here: the model's state in and out of the replicas (checkpoints,
 * weights, clt_trainer_params).
 */
#include "dp/dp_internal.h"

#include <stdlib.h>
#include <string.h>

static int state_per_param(const clt__dp *dp) { return clt_optimizer_state_per_param(&dp->o->optimizer); }

/* The gradient arena in the node's shared memory (comm/shm_arena.c):
 * where every rank holds one replica on a device whose buffers may be
 * host memory in place (PoCL), all ranks on one node, and the gradients
 * are summed as they are (f32, no ZeRO, not a pipeline's stage), the
 * backward writes them where every peer reads them, and the exchange sums
 * them there (buckets.c): no copy into a window. Making it is collective,
 * so the ranks agree first; *at stays NULL otherwise (CLT_IN_PLACE=0 too). */
static int take_arena(clt__dp *dp, int64_t P, unsigned char **at) {
  const clt_train_options *o = dp->o;
  *at = NULL;
  if (dp->nranks < 2) return CLT_OK;
  int mine = dp->nlocal == 1 && dp->nreplicas == dp->nranks && dp->stage < 0 && o->zero == 0 &&
             o->precision == CLT_F32 && P > 0 && dp->ctx[0]->shared_buffers &&
             clt__comm_arena_available(dp->comm, (size_t)P * sizeof(float)) && clt__env_switch("CLT_IN_PLACE") != 0;
  double refusals = !mine;
  int rc = clt__sum_ranks(dp->job_comm, &refusals, 1);
  if (rc < 0 || refusals > 0) return rc;
  rc = clt__comm_arena_acquire(dp->comm, (size_t)P * sizeof(float), at);
  if (rc == CLT_OK) dp->arena_comm = dp->comm;
  CLT_TRY(clt__all_ok(dp->job_comm, rc, "making the gradients' arena in the node's shared memory"));
  clt__log(CLT_LOG_INFO, "rank %d: the gradients lie in the node's shared memory, summed in place", dp->rank);
fail:
  return rc;
}

int clt__dp_make_replicas(clt__dp *dp, const float *params) {
  int rc = CLT_OK, sync_rc = CLT_OK, per = state_per_param(dp);
  const clt_train_options *o = dp->o;
  int64_t P = clt_model_param_count(dp->local);
  unsigned char *grads_at = NULL;
  dp->stale = clt__calloc(dp->nlocal, sizeof *dp->stale);
  dp->ran = clt__calloc(dp->nlocal, sizeof *dp->ran);
  dp->rep = clt__calloc(dp->nlocal, sizeof *dp->rep);
  dp->drep = clt__calloc(dp->nlocal, sizeof *dp->drep);
  dp->host_params = clt__calloc(dp->nlocal, sizeof *dp->host_params);
  dp->host_state = clt__calloc(dp->nlocal, sizeof *dp->host_state);
  if (!dp->stale || !dp->ran || !dp->rep || !dp->drep || !dp->host_params || !dp->host_state) return CLT_ENOMEM;
  CLT_TRY(take_arena(dp, P, &grads_at));
  /* Under --offload optimizer the devices hold no optimizer state: it is
   * the host copies' alone (offload.c). */
  clt__replica_config cfg = {.max_batch = dp->room, .act_dtype = o->precision,
                             .state_per_param = dp->offload ? 0 : per, .state_params = dp->shard_params,
                             .no_grad_arena = dp->pooled, .grads_at = grads_at,
                             .recompute = o->recompute};
  const float *upload = params;
  if (dp->zero == 3) { /* the shard's parameters only, packed like the state; the whole model on the host */
    cfg.param_floats = dp->shard_params > 0 ? dp->shard_params : 1;
    if (!(dp->z3_full = clt__calloc((size_t)(P ? P : 1), sizeof(float))) ||
        !(dp->z3_mine = clt__calloc((size_t)cfg.param_floats, sizeof(float)))) {
      rc = CLT_ENOMEM;
      goto fail;
    }
    memcpy(dp->z3_full, params, (size_t)P * sizeof(float));
    clt__dp_pack_shard(dp, params, dp->z3_mine);
    upload = dp->z3_mine;
    CLT_TRY(clt__unit_layout_make(dp->local->spec, &dp->units));
  }
  for (int i = 0; i < dp->nlocal; i++) {
    CLT_TRY(clt__replica_create_with(dp->ctx[i], dp->local->spec, &cfg, upload, &dp->rep[i]));
    clt__replica_set_timeout(dp->rep[i], clt_comm_timeout(dp->job_comm));
    if (dp->pooled && !clt__context_enqueues_ahead(dp->ctx[i]) && sync_rc == CLT_OK) {
      /* Its buckets cannot share buffers (replica_buckets.c): whole
       * gradients beside the shard's, checked against the cap too. */
      clt_replica_memory more;
      clt__replica_config whole = cfg;
      whole.no_grad_arena = 0;
      clt__replica_memory(dp->local->spec, &whole, &more);
      more.gradients += (uint64_t)dp->shard_params * (dp->wire ? 6 : 4) + (uint64_t)P * (dp->wire ? 2 : 0);
      more.total += (uint64_t)dp->shard_params * (dp->wire ? 6 : 4) + (uint64_t)P * (dp->wire ? 2 : 0);
      if ((sync_rc = clt__replica_memory_fits(&more, &dp->ctx[i]->info, o->max_device_memory)) < 0)
        clt__error_prefix(sync_rc, "%s: under --zero %d on a device whose GEMMs the calling thread runs",
                          dp->local->spec->name, dp->zero);
    }
    if (dp->offload && dp->ctx[i]->info.unified_memory) {
      clt__log(CLT_LOG_WARN, "--offload optimizer on %s, whose memory is the host's: accepted, and it saves "
               "nothing (the optimizer state was in host memory already); its step runs on the host's thread",
               dp->ctx[i]->info.name);
    } else if (dp->offload) {
      char b[32];
      clt__log(CLT_LOG_INFO, "rank %d: --offload optimizer: the %s state of %lld parameters (%s) in host memory, "
               "its step on the host", dp->rank, clt_optimizer_name(o->optimizer.kind), (long long)dp->shard_params,
               clt__fmt_bytes((uint64_t)dp->shard_params * (uint64_t)per * 4, b, sizeof b));
    }
    if (dp->offload || clt_optimizer_needs_host(&o->optimizer, &dp->ctx[i]->info)) {
      if (!dp->offload)
        clt__log(CLT_LOG_INFO, "%s rounds float divide and sqrt loosely: its %s step runs on the host so that every "
                 "replica holds the same bits", dp->ctx[i]->info.name, clt_optimizer_name(o->optimizer.kind));
      dp->host_params[i] = clt__calloc((size_t)P, sizeof(float));
      dp->host_state[i] = clt__calloc((size_t)(dp->shard_params ? dp->shard_params : 1) * (per ? per : 1),
                                      sizeof(float));
      if (!dp->host_params[i] || !dp->host_state[i]) { rc = CLT_ENOMEM; goto fail; }
      memcpy(dp->host_params[i], params, (size_t)P * sizeof(float));
      if (!dp->host_grads && !(dp->host_grads = clt__calloc((size_t)P, sizeof(float)))) { rc = CLT_ENOMEM; goto fail; }
    }
  }
  if (clt_optimizer_decoupled_decay(o->optimizer.kind) && !o->decay_all) {
    if (!(dp->decay_host = clt__calloc((size_t)P, 1)) || !(dp->decay_dev = clt__calloc(dp->nlocal, sizeof *dp->decay_dev))) {
      rc = CLT_ENOMEM;
      goto fail;
    }
    clt__model_decay_mask(dp->local->spec, dp->decay_host);
    /* stage 3: the device's mask is the shard's, packed like its parameters */
    int64_t n = dp->zero == 3 ? (dp->shard_params > 0 ? dp->shard_params : 1) : P;
    uint8_t *mask = dp->decay_host;
    if (dp->zero == 3) {
      if (!(mask = clt__calloc((size_t)n, 1))) { rc = CLT_ENOMEM; goto fail; }
      for (int k = 0; k < dp->nshard; k++)
        memcpy(mask + dp->shard[k].state_at, dp->decay_host + dp->shard[k].lo, (size_t)dp->shard[k].n);
    }
    for (int i = 0; i < dp->nlocal && rc == CLT_OK; i++) {
      clt_tensor d;
      if ((rc = clt_buffer_create(dp->ctx[i], (size_t)n, &dp->decay_dev[i])) == CLT_OK &&
          (rc = clt_tensor_view(dp->decay_dev[i], 0, CLT_U8, 1, &n, &d)) == CLT_OK)
        rc = clt_tensor_upload(dp->ctx[i], &d, mask, (size_t)n);
    }
    if (mask != dp->decay_host) free(mask);
    if (rc < 0) goto fail;
  }
  CLT_TRY(clt__all_ok(dp->job_comm, sync_rc, "checking that the replicas fit their devices"));
fail:
  return rc;
}

void clt__dp_free_replicas(clt__dp *dp) {
  for (int i = 0; i < dp->nlocal; i++) {
    if (dp->drep) clt__dp_rep_destroy(dp->drep[i]);
    if (dp->rep) clt__replica_destroy(dp->rep[i]);
    if (dp->decay_dev) clt_buffer_release(dp->decay_dev[i]);
    if (dp->host_params) free(dp->host_params[i]);
    if (dp->host_state) free(dp->host_state[i]);
  }
  free(dp->drep), free(dp->rep), free(dp->decay_dev), free(dp->decay_host);
  free(dp->host_params), free(dp->host_state), free(dp->host_grads);
  free(dp->stale), free(dp->ran);
  free(dp->sit_params), free(dp->sit_state), free(dp->sit_grads);
  dp->drep = NULL, dp->rep = NULL;
  clt__dp_units_free(dp); /* after the replicas: their last writes from the host's parameters are done */
  clt__comm_arena_release(dp->arena_comm); /* its buffers went with the replicas */
  dp->arena_comm = NULL;
}

int clt__dp_lead(const clt__dp *dp) {
  for (int i = 0; i < dp->nlocal; i++)
    if (clt__dp_active(dp, i)) return i;
  return 0;
}

int clt__dp_get_replica(clt__dp *dp, int src, float *params, float *state) {
  int rc = CLT_OK, per = state_per_param(dp);
  int64_t P = clt_model_param_count(dp->local);
  size_t pb = (size_t)P * sizeof(float), sb = (size_t)P * (size_t)per * sizeof(float);
  clt_tensor p = clt__replica_params(dp->rep[src]), s = clt__replica_state(dp->rep[src]);
  if (dp->host_params[src]) memcpy(params, dp->host_params[src], pb);
  else CLT_TRY(clt_tensor_download(dp->ctx[src], &p, params, pb));
  if (per && dp->host_params[src]) memcpy(state, dp->host_state[src], sb);
  else if (per) CLT_TRY(clt_tensor_download(dp->ctx[src], &s, state, sb));
fail:
  return rc;
}

/* Replica dst takes params and state (its host copies too). */
static int put_replica(clt__dp *dp, int dst, const float *params, const float *state) {
  int rc = CLT_OK, per = state_per_param(dp);
  int64_t P = clt_model_param_count(dp->local);
  size_t pb = (size_t)P * sizeof(float), sb = (size_t)P * (size_t)per * sizeof(float);
  clt_tensor p = clt__replica_params(dp->rep[dst]), s = clt__replica_state(dp->rep[dst]);
  CLT_TRY(clt_tensor_upload(dp->ctx[dst], &p, params, pb));
  if (per && clt__dp_device_state(dp)) CLT_TRY(clt_tensor_upload(dp->ctx[dst], &s, state, sb));
  if (dp->host_params[dst]) {
    memcpy(dp->host_params[dst], params, pb);
    if (per) memcpy(dp->host_state[dst], state, sb);
  }
fail:
  return rc;
}

/* The model a rank keeps on the host while it sits out, from a replica
 * that is up to date; every replica is stale from now on. */
static int start_sitting(clt__dp *dp) {
  int rc = CLT_OK, per = state_per_param(dp), src = -1;
  int64_t P = clt_model_param_count(dp->local);
  if (!dp->sit_params && (!(dp->sit_params = clt__calloc((size_t)P, sizeof(float))) ||
                          !(dp->sit_state = clt__calloc((size_t)P * (per ? per : 1), sizeof(float))) ||
                          !(dp->sit_grads = clt__calloc((size_t)P, sizeof(float)))))
    return CLT_ENOMEM;
  for (int i = 0; i < dp->nlocal && src < 0; i++)
    if (!dp->stale[i]) src = i;
  if (src < 0) return clt__error(CLT_EINVAL, "internal: no replica of this rank is up to date");
  CLT_TRY(clt__dp_get_replica(dp, src, dp->sit_params, dp->sit_state));
  for (int i = 0; i < dp->nlocal; i++) dp->stale[i] = 1;
  dp->sitting = 1;
fail:
  return rc;
}

int clt__dp_sync_replicas(clt__dp *dp, int only_active) {
  int rc = CLT_OK, src = -1, per = state_per_param(dp);
  int64_t P = clt_model_param_count(dp->local);
  float *buf = NULL;
  if (dp->sitting != clt__dp_sits_out(dp) && only_active && !dp->sitting) CLT_TRY(start_sitting(dp));
  int due = 0; /* replicas to bring up to date: none on almost every step, so nothing is copied */
  for (int i = 0; i < dp->nlocal; i++) due += dp->stale[i] && !(only_active && !clt__dp_active(dp, i));
  if (!due) return CLT_OK;
  for (int i = 0; i < dp->nlocal && src < 0; i++)
    if (!dp->stale[i]) src = i;
  const float *params = dp->sit_params, *state = dp->sit_state; /* while sitting out: the host's model */
  if (!dp->sitting && src >= 0) {
    if (!(buf = clt__calloc((size_t)P * (size_t)(1 + per), sizeof *buf))) { rc = CLT_ENOMEM; goto fail; }
    CLT_TRY(clt__dp_get_replica(dp, src, buf, buf + P));
    params = buf, state = buf + P;
  }
  for (int i = 0; (dp->sitting || src >= 0) && i < dp->nlocal; i++) {
    if (!dp->stale[i] || (only_active && !clt__dp_active(dp, i))) continue;
    CLT_TRY(put_replica(dp, i, params, state));
    dp->stale[i] = 0;
  }
  /* Back from sitting out: the replicas with work are up to date now. */
  if (dp->sitting && only_active && !clt__dp_sits_out(dp)) dp->sitting = 0;
fail:
  free(buf);
  return rc < 0 ? clt__error_prefix(rc, "bringing a replica that sat out steps up to date") : rc;
}

int clt__dp_exchange_sitting(clt__dp *dp, int64_t step) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(dp->local);
  memset(dp->sit_grads, 0, (size_t)P * sizeof *dp->sit_grads);
  for (int i = 0; i < dp->nlocal; i++)
    if (dp->ran[i]) {
      clt_tensor g = clt__replica_grads(dp->rep[i]);
      CLT_TRY(clt_tensor_download(dp->ctx[i], &g, dp->sit_grads, (size_t)P * sizeof *dp->sit_grads));
    }
  CLT_TRY(clt__dp_exchange_host(dp, dp->sit_grads, step));
fail:
  return rc;
}

/* ---- the model's state in and out ---- */

/* The strategy's get_state: the parameters from the first replica (every
 * replica holds the same bits once brought up to date), and the state
 * from its host copy or device, or under ZeRO every rank's shard gathered
 * (collective: every rank then holds it all). */
int clt__dp_get_state(void *self, float *params, float *state, int everywhere) {
  clt__dp *dp = self;
  int rc = CLT_OK, per = state_per_param(dp);
  int64_t P = clt_model_param_count(dp->local);
  float *shard = NULL;
  if (dp->zero == 3 && (dp->rank == 0 || everywhere)) { /* every rank holds them gathered on the host */
    memcpy(params, dp->z3_full, (size_t)P * sizeof(float));
  } else if (dp->rank == 0 || everywhere) {
    clt_tensor p = clt__replica_params(dp->rep[0]);
    CLT_TRY(clt__dp_sync_replicas(dp, 0));
    CLT_TRY(clt_tensor_download(dp->ctx[0], &p, params, (size_t)P * sizeof(float)));
  }
  if (!state || !per) return CLT_OK;
  if (!dp->zero) {
    if (dp->rank == 0 || everywhere) {
      if (dp->host_state[0]) {
        memcpy(state, dp->host_state[0], (size_t)(per * P) * sizeof *state);
      } else {
        clt_tensor s = clt__replica_state(dp->rep[0]);
        CLT_TRY(clt_tensor_download(dp->ctx[0], &s, state, (size_t)(per * P) * sizeof *state));
      }
    }
    return CLT_OK;
  }
  if (dp->host_state[0]) {
    shard = dp->host_state[0];
  } else {
    clt_tensor s = clt__replica_state(dp->rep[0]);
    if (!(shard = clt__calloc((size_t)(per * dp->shard_params) + 1, sizeof *shard))) return CLT_ENOMEM;
    CLT_TRY(clt_tensor_download(dp->ctx[0], &s, shard, (size_t)(per * dp->shard_params) * sizeof *shard));
  }
  rc = clt__dp_gather_state(dp, shard, per, P, state);
fail:
  if (shard != dp->host_state[0]) free(shard);
  return rc;
}

/* The strategy's set_state: every replica takes the parameters and, when
 * given, the state (under ZeRO its shard of it); without state every
 * replica is brought up to date first, so that only the parameters change. */
int clt__dp_set_state(void *self, const float *params, const float *state) {
  clt__dp *dp = self;
  int rc = CLT_OK, per = state ? state_per_param(dp) : 0;
  int64_t P = clt_model_param_count(dp->local), params_n = dp->shard_params;
  float *shard_state = NULL;
  const float *mine = state;
  if (!state) CLT_TRY(clt__dp_sync_replicas(dp, 0));
  if (per && dp->zero) {
    if (!(shard_state = clt__calloc((size_t)(per * params_n) + 1, sizeof *shard_state))) return CLT_ENOMEM;
    clt__dp_scatter_state(dp, state, per, P, shard_state);
    mine = shard_state;
  }
  dp->sitting = 0; /* every replica takes it all: none is stale */
  const float *up = params;
  int64_t up_n = P;
  if (dp->zero == 3) { /* the host's whole copy (no unit write may still read it) and the shard's part */
    for (int i = 0; i < dp->nlocal; i++) CLT_TRY(clt__replica_finish(dp->rep[i], "setting the parameters"));
    memcpy(dp->z3_full, params, (size_t)P * sizeof *params);
    clt__dp_pack_shard(dp, params, dp->z3_mine);
    up = dp->z3_mine, up_n = dp->shard_params;
  }
  for (int i = 0; i < dp->nlocal; i++) {
    dp->stale[i] = 0;
    clt_tensor p = clt__replica_params(dp->rep[i]), s = clt__replica_state(dp->rep[i]);
    if (up_n > 0) CLT_TRY(clt_tensor_upload(dp->ctx[i], &p, up, (size_t)up_n * sizeof *params));
    if (per && clt__dp_device_state(dp))
      CLT_TRY(clt_tensor_upload(dp->ctx[i], &s, mine, (size_t)(per * params_n) * sizeof *mine));
    if (dp->host_params[i]) {
      memcpy(dp->host_params[i], params, (size_t)P * sizeof *params);
      if (per) memcpy(dp->host_state[i], mine, (size_t)(per * params_n) * sizeof *mine);
    }
  }
fail:
  free(shard_state);
  return rc;
}

/* The strategy's get_shard: under ZeRO on several ranks each rank writes
 * its part of every bucket, rank 0 also what no bucket covers (which every
 * rank steps alike), so the ranges are disjoint and cover the arena. The
 * parameters come straight from the first replica's device range by range
 * and the state from its shard: nothing of another rank's is gathered. */
int clt__dp_get_shard(void *self, int want_state, int *sharded, clt__state_shard *out) {
  clt__dp *dp = self;
  int rc = CLT_OK, per = want_state ? state_per_param(dp) : 0;
  int *from = NULL; /* each range's place in dp->shard */
  memset(out, 0, sizeof *out);
  *sharded = dp->zero > 0 && dp->nranks > 1;
  if (!*sharded) return CLT_OK;
  CLT_TRY(clt__dp_sync_replicas(dp, 0));
  if (!(out->range = clt__calloc((size_t)dp->nshard + 1, sizeof *out->range))) { rc = CLT_ENOMEM; goto fail; }
  if (!(from = clt__calloc((size_t)dp->nshard + 1, sizeof *from))) { rc = CLT_ENOMEM; goto fail; }
  for (int j = 0; j < dp->nshard; j++) {
    int part = 0;
    for (int k = 0; k < dp->buckets.n && !part; k++) part = dp->part[k].n && dp->part[k].lo == dp->shard[j].lo;
    if (!part && dp->rank != 0) continue;
    if (dp->shard[j].n == 0) continue;
    out->range[out->n][0] = dp->shard[j].lo;
    out->range[out->n][1] = dp->shard[j].n;
    from[out->n++] = j;
    out->count += dp->shard[j].n;
  }
  out->params = clt__calloc((size_t)out->count + 1, sizeof *out->params);
  if (per) out->state = clt__calloc((size_t)(per * out->count) + 1, sizeof *out->state);
  if (!out->params || (per && !out->state)) { rc = CLT_ENOMEM; goto fail; }
  clt_tensor p = clt__replica_params(dp->rep[0]);
  int64_t at = 0;
  for (int k = 0; k < out->n; k++) {
    if (dp->zero == 3) { /* stage 3: the whole parameters are the host's (the device holds its shard packed) */
      memcpy(out->params + at, dp->z3_full + out->range[k][0], (size_t)out->range[k][1] * sizeof(float));
      at += out->range[k][1];
      continue;
    }
    clt_tensor v = p;
    v.dtype = CLT_F32, v.ndim = 1, v.shape[0] = out->range[k][1];
    v.offset = p.offset + (size_t)out->range[k][0] * sizeof(float);
    CLT_TRY(clt_tensor_download(dp->ctx[0], &v, out->params + at, (size_t)out->range[k][1] * sizeof(float)));
    at += out->range[k][1];
  }
  /* The state, range by range and component by component, straight into
   * place: from the host copy, or from the device (no shard-sized copy). */
  clt_tensor st = clt__replica_state(dp->rep[0]);
  at = 0;
  for (int k = 0; per && k < out->n; k++) {
    const clt__shard_range *s = &dp->shard[from[k]];
    for (int c = 0; c < per; c++) {
      size_t in_shard = (size_t)s->state_at * per + (size_t)c * s->n;
      float *to = out->state + (size_t)c * out->count + at;
      if (dp->host_state[0]) {
        memcpy(to, dp->host_state[0] + in_shard, (size_t)s->n * sizeof(float));
      } else {
        clt_tensor v = st;
        v.dtype = CLT_F32, v.ndim = 1, v.shape[0] = s->n;
        v.offset = st.offset + in_shard * sizeof(float);
        CLT_TRY(clt_tensor_download(dp->ctx[0], &v, to, (size_t)s->n * sizeof(float)));
      }
    }
    at += s->n;
  }
fail:
  free(from);
  if (rc < 0) clt__state_shard_free(out);
  return rc < 0 ? clt__error_prefix(rc, "rank %d: its shard of the model's state for a checkpoint", dp->rank) : rc;
}
