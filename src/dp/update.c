/*
 * update.c: the optimizer step of data parallelism: the summed gradient's
 * norm (this rank's part of it), and the step on each replica's shard
 * (every parameter without ZeRO), on the device or with the host's
 * arithmetic for a device that rounds loosely, then the parameters
 * gathered from the ranks that own them (ZeRO).
 */
#include "dp/dp_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* This rank's part of the sum of squares of the summed gradient. On one
 * rank, all of it: the lead replica's arena. On several, its parts of the
 * buckets, at every stage, which the trainer adds over the ranks (in rank
 * order, the same on every rank; an inf or NaN anywhere reaches all): so
 * the clipping scale of --zero 0 and of ZeRO are the same bits (zero.c). */
int clt__dp_grad_sumsq(void *self, double *ss) {
  clt__dp *dp = self;
  int rc = CLT_OK, n = dp->part ? dp->buckets.n : 0;
  clt_tensor *r = NULL; /* the parts' views and sums, on several ranks */
  float *sums = NULL;
  const clt__shard_range *part = dp->part;
  if (dp->sitting) { /* the sum is on the host */
    double acc = 0;
    int64_t P = clt_model_param_count(dp->local);
    for (int k = 0; part && k < n; k++)
      for (int64_t j = part[k].lo; j < part[k].lo + part[k].n; j++) acc += (double)dp->sit_grads[j] * dp->sit_grads[j];
    for (int64_t j = 0; !part && j < P; j++) acc += (double)dp->sit_grads[j] * dp->sit_grads[j];
    *ss = acc;
    return CLT_OK;
  }
  int lead = clt__dp_lead(dp);
  clt_tensor g = clt__dp_rep_grads(dp->drep[lead]); /* the arena, or stage 2's shard */
  if (!part) {
    float all = 0;
    CLT_TRY(clt_sumsq(dp->ctx[lead], &g, &all));
    *ss = all;
    return CLT_OK;
  }
  /* Every part's sum queued, one wait for all of them (not a wait a
   * bucket: 6 a step for bench/zero.sh's deep MLP, each a wake-up of the
   * host, which a core shared with other work pays dearly), then added in
   * part order: the same bits as a sum at a time. */
  int m = 0;
  *ss = 0;
  r = clt__calloc(n ? (size_t)n : 1, sizeof *r);
  sums = clt__calloc(n ? (size_t)n : 1, sizeof *sums);
  if (!r || !sums) { rc = CLT_ENOMEM; goto fail; }
  for (int k = 0; k < n; k++) {
    if (part[k].n == 0) continue;
    CLT_TRY(clt_tensor_view(g.buf, g.offset + (size_t)(dp->pooled ? part[k].state_at : part[k].lo) * 4, CLT_F32, 1,
                            &part[k].n, &r[m++]));
  }
  CLT_TRY(clt__sumsq_many(dp->ctx[lead], r, m, sums));
  for (int k = 0; k < m; k++) *ss += sums[k];
fail:
  free(r), free(sums);
  return rc;
}

/* Where a gradient that is not finite starts: backward runs from the last
 * layer to the first and carries an inf or NaN on to every layer before,
 * so the culprit is the last layer with one (the lead replica's arena;
 * nothing to say where the sum is on the host or sharded). */
int clt__dp_nonfinite_layer(void *self) {
  clt__dp *dp = self;
  const clt_model_spec *s = dp->local->spec;
  int lead = clt__dp_lead(dp);
  if (dp->sitting || dp->pooled) return -1;
  clt_tensor grads = clt__replica_grads(dp->rep[lead]);
  for (int i = s->nlayers - 1; i >= 1; i--) {
    clt__param_range r[8];
    int nr = clt__model_grad_ranges(dp->local, i, r, 8), bad = 0;
    for (int k = 0; k < nr && k < 8 && !bad; k++) {
      int64_t n = r[k].hi - r[k].lo;
      clt_tensor g;
      float ss = 0;
      bad = n > 0 && clt_tensor_view(grads.buf, grads.offset + (size_t)r[k].lo * 4, CLT_F32, 1, &n, &g) == CLT_OK &&
            clt_sumsq(dp->ctx[lead], &g, &ss) == CLT_OK && !isfinite(ss);
    }
    if (bad) return i;
  }
  return -1;
}

/* The optimizer step of local replica i on its shard (every parameter
 * without ZeRO): the fused kernels range by range on the device, or the
 * host's arithmetic on the same ranges where the state is on the host
 * (--offload optimizer, or a device that rounds loosely: offload.c). */
static int step_replica(clt__dp *dp, int i, const clt__update *u) {
  int rc = CLT_OK;
  const clt_optimizer_config *cfg = &dp->o->optimizer;
  const int per = clt_optimizer_state_per_param(cfg);
  const clt__shard_range *s = dp->shard;
  clt__replica *r = dp->rep[i];
  clt_tensor p = clt__replica_params(r), g = clt__dp_rep_grads(dp->drep[i]), st = clt__replica_state(r);
  int pooled = dp->pooled; /* stage 2: the gradient is the shard's, packed like the state */
  int packed = dp->zero == 3; /* stage 3: the parameters and the decay mask too */
  if (dp->host_params[i]) return clt__dp_step_on_host(dp, i, u); /* offload.c */
  {
    for (int k = 0; k < dp->nshard; k++) {
      clt_tensor pk, gk, sk, dk;
      int64_t sn = per * s[k].n;
      CLT_TRY(clt_tensor_view(p.buf, p.offset + (size_t)(packed ? s[k].state_at : s[k].lo) * 4, CLT_F32, 1, &s[k].n,
                              &pk));
      CLT_TRY(clt_tensor_view(g.buf, g.offset + (size_t)(pooled ? s[k].state_at : s[k].lo) * 4, CLT_F32, 1, &s[k].n,
                              &gk));
      if (per) CLT_TRY(clt_tensor_view(st.buf, st.offset + (size_t)(s[k].state_at * per) * 4, CLT_F32, 1, &sn, &sk));
      if (dp->decay_dev)
        CLT_TRY(clt_tensor_view(dp->decay_dev[i], (size_t)(packed ? s[k].state_at : s[k].lo), CLT_U8, 1, &s[k].n, &dk));
      CLT_TRY(clt_optimizer_step_masked(dp->ctx[i], cfg, u->step, u->lr, u->scale, &pk, &gk, per ? &sk : &st,
                                        dp->decay_dev ? &dk : NULL));
    }
  }
fail:
  return rc;
}

int clt__dp_update(void *self, const clt__update *u) {
  clt__dp *dp = self;
  int rc = CLT_OK;
  if (dp->sitting) { /* the host's model: the same bits as the devices' step (clt_optimizer_step_host_masked) */
    clt_optimizer_step_host_masked(&dp->o->optimizer, u->step, u->lr, u->scale, dp->sit_params, dp->sit_grads,
                                   dp->sit_state, (size_t)clt_model_param_count(dp->local), dp->decay_host);
    for (int i = 0; i < dp->nlocal; i++) dp->stale[i] = 1;
  }
  for (int i = 0; !dp->sitting && i < dp->nlocal; i++) {
    if (!clt__dp_active(dp, i)) { /* it sat the step out: up to date before it is read */
      dp->stale[i] = 1;
      continue;
    }
    CLT_TRY(step_replica(dp, i, u)); /* this rank's shard */
  }
  CLT_TRY(clt__dp_allgather_params(dp, u->steps_done + 1)); /* ZeRO: everyone's */
fail:
  return rc;
}
