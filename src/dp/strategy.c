/*
 * strategy.c: data parallelism as a strategy (strategy/strategy.h): the
 * plan that sizes and makes this rank's replicas, and the step's named
 * points. Every replica of every rank holds the whole model (ZeRO: the
 * optimizer state, and at stage 2 the gradient, of its rank's shard only),
 * runs its share of each micro-batch, and the exchange sums the gradients
 * bucket by bucket while the backward goes on (buckets.c).
 *
 * A replica may have 0 samples of a micro-batch (the balancer gave it none,
 * or a partial batch left it none): it runs nothing, records the markers
 * the exchange waits on (its gradient stays 0), and takes the update with
 * the others, so its parameters and optimizer state stay theirs bit for
 * bit. One that has no share at all sits steps out (replicas.c).
 */
#include "dp/dp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A replica that does not fit d under o: which higher ZeRO stage on these
 * ranks would (a note for the refusal), or "". The device's whole memory
 * and one buffer, capped by o->max_device_memory, as the check takes them. */
static const char *higher_stage_fits(const clt__dp *dp, const clt_device_info *d) {
  static _Thread_local char note[160];
  const clt_train_options *o = dp->o;
  uint64_t cap = d->global_mem_bytes, one = d->max_alloc_bytes;
  if (o->max_device_memory && (!cap || o->max_device_memory < cap)) cap = o->max_device_memory;
  if (o->max_device_memory && (!one || o->max_device_memory < one)) one = o->max_device_memory;
  note[0] = 0;
  for (int z = o->zero + 1; dp->nranks > 1 && z <= 3; z++) {
    clt_train_options oz = *o;
    clt_replica_memory need;
    oz.zero = z;
    if (clt__dp_need(dp->local, &oz, dp->nranks, -1, o->batch / o->accumulate, o->precision == CLT_F16, &need,
                     NULL, dp->shard_w) < 0)
      break;
    if ((!cap || need.total <= cap) && (!one || need.largest <= one)) {
      char b[32];
      snprintf(note, sizeof note, "; --zero %d on these %d ranks would fit (a replica then needs %s)", z, dp->nranks,
               clt__fmt_bytes(need.total, b, sizeof b));
      break;
    }
  }
  return note;
}

/* What cannot fit is refused before anything is allocated, on every rank
 * at once: each replica is made for its room (the whole micro-batch, or a
 * pipeline stage's share of it, with the activation sets it holds). */
static int check_memory(clt__dp *dp, const clt__job *job, const clt__dp_how *how, int64_t *state_params) {
  int rc = CLT_OK, bad = -1;
  const clt_train_options *o = dp->o;
  clt_replica_memory *need = &dp->need;
  clt_train_options kept = *o; /* a pipeline stage's replicas keep their whole local gradient (zero.c) */
  if (how->stage >= 0 && kept.accumulate < 2) kept.accumulate = 2;
  o = &kept;
  CLT_TRY(clt__dp_need(dp->local, o, dp->nranks, dp->rank, dp->room, dp->nreplicas > 1 && o->precision == CLT_F16,
                       need, state_params, dp->shard_w)); /* this rank's own shard */
  need->activations += how->extra_activations, need->total += how->extra_activations;
  for (int i = 0; rc == CLT_OK && i < dp->nlocal; i++)
    if ((rc = clt__replica_memory_fits(need, clt_devices_info(job->devs, i), o->max_device_memory)) < 0) bad = i;
  if (rc < 0) { /* the model, why, and the stage that would fit */
    char why[2048];
    clt__strlcpy(why, clt_last_error(), sizeof why);
    clt__error(rc, "%s: %s%s", job->model->spec->name, why, higher_stage_fits(dp, clt_devices_info(job->devs, bad)));
  }
fail:
  return clt__all_ok(job->comm, rc, "checking that the replicas fit their devices");
}

int clt__dp_plan(const clt__job *job, const clt__dp_how *how, clt__dp **out) {
  int rc = CLT_OK;
  const clt_train_options *o = job->opts;
  float *params = NULL;
  clt__dp *dp = NULL;
  int64_t state_params;
  *out = NULL;
  CLT_TRY(clt__dp_create(how->comm, job->nlocal, &dp));
  dp->job_comm = job->comm, dp->o = o, dp->local = how->local, dp->stage = how->stage, dp->ctx = job->ctx;
  CLT_TRY(clt__dp_agree_options(dp, how->local, o));
  dp->micro_batch = o->batch / how->accumulate;
  if (dp->micro_batch < dp->nreplicas) {
    rc = clt__error(CLT_EINVAL, "the batch of %lld (per micro-batch %lld) is smaller than the %d replicas: every "
                    "replica needs at least one sample", (long long)o->batch, (long long)dp->micro_batch,
                    dp->nreplicas);
    goto fail;
  }
  CLT_TRY(clt__dp_shares_init(dp, o, dp->micro_batch));
  dp->room = how->room ? how->room : dp->micro_batch;
  dp->offload = o->offload == CLT_OFFLOAD_OPTIMIZER;
  if (o->zero > 0) CLT_TRY(clt__dp_shard_weights(dp, job)); /* uneven shards: sized before the check */
  CLT_TRY(check_memory(dp, job, how, &state_params));

  /* Parameters: initialised from the seed on rank 0, broadcast to all (a
   * pipeline stage keeps its part). */
  CLT_TRY(clt__strategy_initial_params(job->comm, job->model, o->seed, &params));
  if (how->take) how->take(how->take_user, params);

  /* Buckets and their plans first: under ZeRO they say which shard of the
   * optimizer state this rank's replicas keep. */
  clt__dp_zero_set(dp, o->zero, how->accumulate > 1 || how->stage >= 0); /* a stage's micro-batches accumulate */
  CLT_TRY(clt__dp_buckets_create(dp, how->local, o->bucket_mb, o->precision));
  if (dp->shard_params != state_params) {
    rc = clt__error(CLT_EINTERNAL, "rank %d: the ZeRO shard holds %lld parameters, the memory check counted %lld",
                    dp->rank, (long long)dp->shard_params, (long long)state_params);
    goto fail;
  }
  CLT_TRY(clt__dp_make_replicas(dp, params));
  CLT_TRY(clt__dp_buckets_attach(dp));
  CLT_TRY(clt__dp_check_batch_stats(dp, job, how));
  free(params);
  *out = dp;
  return CLT_OK;
fail:
  free(params);
  clt__dp_destroy(dp);
  return rc;
}

clt__replica *const *clt__dp_local_replicas(const clt__dp *dp) { return dp->rep; }

int clt__dp_summed_part(const clt__dp *dp, int k, int64_t *lo, int64_t *n) {
  int parts = dp->part ? dp->buckets.n : 0;
  if (k >= 0 && k < parts) {
    if (lo) *lo = dp->part[k].lo;
    if (n) *n = dp->part[k].n;
  }
  return parts;
}

/* ---- the strategy's functions ---- */

static int plan(const clt__job *job, clt__strategy *s) {
  clt__dp *dp;
  clt__dp_how how = {.local = job->model, .comm = job->comm, .accumulate = job->opts->accumulate, .stage = -1};
  int rc = clt__dp_plan(job, &how, &dp);
  if (rc < 0) return rc;
  s->self = dp, s->dp = dp, s->local = job->model, s->rep = dp->rep;
  s->accumulate = job->opts->accumulate, s->micro_batch = dp->micro_batch, s->room = dp->room;
  s->split = 0, s->group = 1, s->one_run = dp->pooled;
  return CLT_OK;
}

static void destroy(void *self) { clt__dp_destroy(self); }

/* A replica at 0 samples sits the step out (clt__dp_active): it would
 * only add a zero gradient and repeat the others' update, and a device's
 * fixed cost per command would make even that the slowest part of the
 * step. It is brought up to date when it takes part again, or is read. */
static int zero_grads(void *self) {
  clt__dp *dp = self;
  int rc = CLT_OK;
  dp->step_t0 = clt__now();
  memset(dp->ran, 0, (size_t)dp->nlocal);
  CLT_TRY(clt__dp_sync_replicas(dp, 1));
  for (int i = 0; i < dp->nlocal; i++)
    if (clt__dp_active(dp, i)) CLT_TRY(clt__dp_rep_zero_grads(dp->drep[i]));
fail:
  return rc;
}

/* Replica i's run of its slice of a micro-batch (forward_backward). A
 * replica that sits the step out runs nothing, but with batchnorm in
 * training (sync) adds its zeros to the statistics' sums as one of no
 * samples does (its parameters are brought up to date before it runs). */
static int run_replica(clt__dp *dp, int i, const clt__slice *s, const clt__pass *base, int last, int sync) {
  int rc = CLT_OK, runs = clt__dp_active(dp, i) || (dp->sitting && s[i].n > 0);
  if (!runs && !sync) return CLT_OK; /* its slices are empty */
  if (runs && dp->sitting && !dp->ran[i]) {
    CLT_TRY(clt__dp_sync_replicas(dp, 0));
    CLT_TRY(clt__replica_zero_grads(dp->rep[i]));
    dp->ran[i] = 1;
  }
  clt__pass pass = *base;
  pass.record = last && !dp->sitting && runs;
  pass.step = s[i].dropout_step, pass.global_first = s[i].global_first, pass.targets = s[i].targets;
  if (runs && s[i].n > 0)
    CLT_TRY(clt__replica_run(dp->rep[i], s[i].x, s[i].y, s[i].n, &pass));
  else if (pass.record || sync) /* with batchnorm its zeros go into the statistics' sums */
    CLT_TRY(clt__replica_run_empty(dp->rep[i], &pass));
fail:
  return rc;
}

typedef struct fb_args {
  const clt__slice *s;
  const clt__pass *base;
  int last, sync;
} fb_args;

static int run_replica_of(clt__dp *dp, int i, void *arg) {
  const fb_args *a = arg;
  return run_replica(dp, i, a->s, a->base, a->last, a->sync);
}

/* Enqueue forward, loss and backward of every replica's slice. A recorded
 * run (the step's last micro-batch) marks its buckets for the exchange; a
 * replica with nothing in it (a partial batch, a rank with few samples)
 * records the markers alone. A rank that sits out runs its own samples of
 * clt_trainer_step unrecorded (its sum goes through the host). With
 * batchnorm in training the replicas of this rank run side by side, one
 * thread each, meeting at each of its sums (batch_stats.c). */
static int forward_backward(void *self, int64_t step, int k, const clt__slice *s, const clt__pass *base,
                            int last) {
  clt__dp *dp = self;
  int rc = CLT_OK, sync = base->train && clt__spec_has_sync_stats(dp->local->spec);
  fb_args a = {s, base, last, sync};
  (void)step, (void)k;
  if (sync) CLT_TRY(clt__dp_check_step_batch(dp));
  clt__dp_stats_on(dp, 1); /* batchnorm: statistics over every rank's samples */
  if (sync && dp->nlocal > 1) CLT_TRY(clt__dp_run_together(dp, run_replica_of, &a));
  else
    for (int i = 0; i < dp->nlocal; i++) CLT_TRY(run_replica_of(dp, i, &a));
fail:
  clt__dp_stats_on(dp, 0);
  return rc;
}

static int exchange(void *self, int64_t step) {
  clt__dp *dp = self;
  return dp->sitting ? clt__dp_exchange_sitting(dp, step) : clt__dp_exchange(dp, step);
}

/* Wait for every replica's run, add its loss sum and correct count (or
 * squared error) to sums, and give the balancer the recorded run's time. */
static int losses(void *self, const clt__slice *s, int last, double *sums) {
  clt__dp *dp = self;
  int rc = CLT_OK;
  for (int i = 0; i < dp->nlocal; i++) {
    if (s[i].n == 0) continue;
    float l;
    double c;
    CLT_TRY(clt__replica_read_loss(dp->rep[i], &l, &c));
    if (dp->trace) clt__replica_trace_spans(dp->rep[i], dp->trace, dp->lanes[i], clt__trace_ns());
    sums[0] += l;
    sums[1] += c;
    if (last && !dp->sitting) clt__dp_note_run(dp, i, s[i].n, clt__replica_run_time(dp->rep[i]));
  }
fail:
  return rc;
}

/* What is due after an update: the replica agreement check and, with
 * --balance auto, a new split of the batch. */
static int after_update(void *self, int64_t steps_done, int *changed) {
  clt__dp *dp = self;
  int rc = CLT_OK;
  *changed = 0;
  clt__dp_note_step(dp, clt__now() - dp->step_t0); /* the balancer compares measured steps too */
  if (dp->o->check_every > 0 && steps_done % dp->o->check_every == 0)
    CLT_TRY(clt__dp_check_replicas(dp, dp->rep, dp->stale, dp->sitting ? dp->sit_params : NULL, steps_done));
  if (clt__dp_rebalance_due(dp, steps_done)) CLT_TRY(clt__dp_rebalance(dp, steps_done, changed));
fail:
  return rc;
}

static int whole_replica(void *self, int grads, clt__replica **r) {
  clt__dp *dp = self;
  *r = NULL;
  if (grads && (dp->pooled || dp->zero == 3))
    return clt__error(CLT_EUNSUPPORTED, "under --zero %d no replica keeps a whole gradient to give; use --zero 1 "
                      "(or 0)", dp->zero);
  int rc = clt__dp_sync_replicas(dp, 0); /* replica 0 may have sat out steps */
  if (rc == CLT_OK) *r = dp->rep[0];
  return rc;
}

static void set_trace(void *self, clt__trace *tr, int host_lane, const int *lanes) {
  clt__dp *dp = self;
  free(dp->lanes);
  dp->lanes = NULL, dp->trace = NULL;
  for (int i = 0; i < dp->nlocal; i++) clt__replica_trace(dp->rep[i], tr != NULL);
  if (!tr || !(dp->lanes = clt__calloc(dp->nlocal, sizeof *dp->lanes))) return;
  memcpy(dp->lanes, lanes, (size_t)dp->nlocal * sizeof *lanes);
  dp->trace = tr, dp->trace_lane = host_lane;
}

static void report(void *self, int i, clt__replica_report *out) {
  clt__dp *dp = self;
  memset(out, 0, sizeof *out);
  out->replica = dp->first_replica + i;
  out->stage = dp->stage;
  out->zero = dp->zero;
  out->shard_params = dp->shard_params;
  out->params = clt_model_param_count(dp->local);
  out->counted = dp->need;
  clt__replica_device_bytes(dp->rep[i], &out->measured);
  uint64_t more = clt__dp_rep_bytes(dp->drep[i]), ring = clt__dp_ring_bytes(dp->drep[i]->ring);
  out->measured.gradients += more, out->measured.total += more;
  out->measured.parameters += ring, out->measured.total += ring; /* stage 3's gathered units */
  clt__dp_staging_bytes(dp, i, &out->staging_counted, &out->staging_measured);
}

const clt__strategy_i clt__dp_strategy = {
    .name = "data parallel",
    .plan = plan,
    .destroy = destroy,
    .zero_grads = zero_grads,
    .forward_backward = forward_backward,
    .exchange = exchange,
    .losses = losses,
    .grad_sumsq = clt__dp_grad_sumsq,
    .nonfinite_layer = clt__dp_nonfinite_layer,
    .update = clt__dp_update,
    .after_update = after_update,
    .get_state = clt__dp_get_state,
    .set_state = clt__dp_set_state,
    .get_shard = clt__dp_get_shard,
    .evaluate = clt__dp_evaluate,
    .whole_replica = whole_replica,
    .set_trace = set_trace,
    .report = report,
};
