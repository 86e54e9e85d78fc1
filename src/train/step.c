/*
 * step.c: one training step, as named calls in order (CONVENTIONS 14):
 *
 *   zero_grads                          every local replica
 *   for each micro-batch:
 *     forward_backward                  forward, loss (summed), backward into the
 *                                       gradient arena (accumulating); enqueued only
 *     clt__dp_exchange (last one)       gradients summed over every replica of every
 *                                       rank, bucket by bucket as backward completes them
 *     read_losses                       the loss sums; the balancer's timings
 *   update                              divide by the global labels, unscale (f16), clip,
 *                                       optimizer step on every replica, identically
 *   after_update                        replica CRC checks and rebalancing when due
 *
 * A replica may have 0 samples of a micro-batch (the balancer gave it none,
 * or a partial batch left it none): it runs nothing, records the markers
 * the exchange waits on (its gradient stays 0), and takes the update with
 * the others, so its parameters and optimizer state stay theirs bit for bit.
 *
 * The micro-batches come from a source: fit.c's prefetchers, or here the
 * caller's own batch (clt_trainer_step with labels, clt_trainer_step_targets
 * with a regression model's float targets, both through step_on; DDP-style:
 * each rank passes its own samples, the update is the mean over all of
 * them).
 */
#include "train/trainer.h"
#include "pp/pp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The gradient is not finite: name the layer where that starts. Backward
 * runs from the last layer to the first and carries an inf or NaN on to
 * every layer before, so the culprit is the last layer with one. */
static int nonfinite_layer(clt_trainer *t) {
  const clt_model_spec *s = t->local->spec;
  int lead = clt__trainer_lead(t);
  if (t->sitting || clt__dp_zero_pooled(t->dp)) goto any; /* the sum is on the host, or sharded */
  clt_tensor grads = clt__replica_grads(t->rep[lead]);
  for (int i = s->nlayers - 1; i >= 1; i--) {
    clt__param_range r[8];
    int nr = clt__model_grad_ranges(t->local, i, r, 8), bad = 0;
    for (int k = 0; k < nr && k < 8 && !bad; k++) {
      int64_t n = r[k].hi - r[k].lo;
      clt_tensor g;
      float ss = 0;
      bad = n > 0 && clt_tensor_view(grads.buf, grads.offset + (size_t)r[k].lo * 4, CLT_F32, 1, &n, &g) == CLT_OK &&
            clt_sumsq(t->ctx[lead], &g, &ss) == CLT_OK && !isfinite(ss);
    }
    if (!bad) continue;
    const clt_layer_spec *l = &s->layers[i];
    return clt__error(CLT_ENONFINITE, "the gradient of %s:%d (%s) is not finite (inf or NaN); lower the learning "
                      "rate (%g) or clip gradients (--clip)", s->name, l->line, clt__layer_kind_name(l),
                      clt_schedule_lr(&t->opts.schedule, t->steps_done));
  }
any:
  return clt__error(CLT_ENONFINITE, "the gradient is not finite (inf or NaN); lower the learning rate or clip "
                    "gradients (--clip)");
}

/* f16: the summed gradient is not finite. Every rank holds the same sum
 * (an inf or NaN on any rank reaches it), so every rank decides alike:
 * leave the parameters, halve the scale, and give up after max_skips in a
 * row. */
static int skip_step(clt_trainer *t, int *skipped) {
  *skipped = 1;
  t->skipped++;
  t->skips_in_row++;
  t->scale_clean_steps = 0;
  double was = t->loss_scale;
  if (t->loss_scale > 1) t->loss_scale /= 2;
  clt__log(CLT_LOG_INFO, "step %lld: the f16 gradient is not finite at loss scale %g: step skipped, scale now %g",
           (long long)t->steps_done + 1, was, t->loss_scale);
  if (t->skips_in_row >= t->opts.max_skips)
    return clt__error(CLT_ENONFINITE, "step %lld: the f16 gradient was not finite %lld steps in a row, down to loss "
                      "scale %g: the values overflow f16 itself; train with --precision fp32, or lower the learning "
                      "rate (%g)", (long long)t->steps_done + 1, (long long)t->skips_in_row, was,
                      clt_schedule_lr(&t->opts.schedule, t->steps_done));
  t->steps_done++;
  return CLT_OK;
}

/* This rank's part of the sum of squares of the summed gradient. On one
 * rank, all of it: the lead replica's arena. On several, its parts of the
 * buckets, at every stage, which update() adds over the ranks (in rank
 * order, the same on every rank; an inf or NaN anywhere reaches all): so
 * the clipping scale of --zero 0 and of ZeRO are the same bits
 * (src/dp/zero.c). */
static int gradient_sumsq(clt_trainer *t, double *ss) {
  int rc = CLT_OK, n;
  clt_tensor *r = NULL; /* the parts' views and sums, on several ranks */
  float *sums = NULL;
  const clt__shard_range *part = clt__dp_norm_parts(t->dp, &n);
  if (t->sitting) { /* the sum is on the host */
    double acc = 0;
    int64_t P = clt_model_param_count(t->local);
    for (int k = 0; part && k < n; k++)
      for (int64_t j = part[k].lo; j < part[k].lo + part[k].n; j++) acc += (double)t->sit_grads[j] * t->sit_grads[j];
    for (int64_t j = 0; !part && j < P; j++) acc += (double)t->sit_grads[j] * t->sit_grads[j];
    *ss = acc;
    return CLT_OK;
  }
  int lead = clt__trainer_lead(t), pooled = clt__dp_zero_pooled(t->dp);
  clt_tensor g = clt__replica_grads(t->rep[lead]); /* the arena, or stage 2's shard */
  if (t->pp) { /* each stage's part, once (from its first replica), added over the stages in rank order */
    float sum = 0;
    CLT_TRY(clt_sumsq(t->ctx[lead], &g, &sum));
    int64_t at[8], count[8];
    int ncopies = clt__pp_copies(t->pp, at, count, 8);
    for (int k = 0; k < ncopies && k < 8; k++) { /* a tied weight's copy: counted at its owner */
      clt_tensor c;
      float cs = 0;
      CLT_TRY(clt_tensor_view(g.buf, g.offset + (size_t)at[k] * 4, CLT_F32, 1, &count[k], &c));
      CLT_TRY(clt_sumsq(t->ctx[lead], &c, &cs));
      sum -= cs;
    }
    *ss = clt__pp_replica(t->pp) == 0 ? sum : 0.0;
    return CLT_OK;
  }
  if (!part) {
    float all = 0;
    CLT_TRY(clt_sumsq(t->ctx[lead], &g, &all));
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
    CLT_TRY(clt_tensor_view(g.buf, g.offset + (size_t)(pooled ? part[k].state_at : part[k].lo) * 4, CLT_F32, 1,
                            &part[k].n, &r[m++]));
  }
  CLT_TRY(clt__sumsq_many(t->ctx[lead], r, m, sums));
  for (int k = 0; k < m; k++) *ss += sums[k];
fail:
  free(r), free(sums);
  return rc;
}

/* The optimizer step of local replica i on its shard (every parameter
 * without ZeRO): the fused kernels range by range on the device, or the
 * host's arithmetic on the same ranges for a device that rounds loosely. */
static int step_replica(clt_trainer *t, int i, int64_t step, float lr, float scale) {
  int rc = CLT_OK, n;
  int64_t P = clt_model_param_count(t->local), params;
  const clt_optimizer_config *cfg = &t->opts.optimizer;
  const int per = clt_optimizer_state_per_param(cfg);
  const clt__shard_range *s = clt__dp_shard(t->dp, &n, &params);
  clt__replica *r = t->rep[i];
  clt_tensor p = clt__replica_params(r), g = clt__replica_grads(r), st = clt__replica_state(r);
  int pooled = clt__dp_zero_pooled(t->dp); /* stage 2: the gradient is the shard's, packed like the state */
  if (!t->host_params[i]) {
    for (int k = 0; k < n; k++) {
      clt_tensor pk, gk, sk, dk;
      int64_t sn = per * s[k].n;
      CLT_TRY(clt_tensor_view(p.buf, p.offset + (size_t)s[k].lo * 4, CLT_F32, 1, &s[k].n, &pk));
      CLT_TRY(clt_tensor_view(g.buf, g.offset + (size_t)(pooled ? s[k].state_at : s[k].lo) * 4, CLT_F32, 1, &s[k].n,
                              &gk));
      if (per) CLT_TRY(clt_tensor_view(st.buf, st.offset + (size_t)(s[k].state_at * per) * 4, CLT_F32, 1, &sn, &sk));
      if (t->decay_dev) CLT_TRY(clt_tensor_view(t->decay_dev[i], (size_t)s[k].lo, CLT_U8, 1, &s[k].n, &dk));
      CLT_TRY(clt_optimizer_step_masked(t->ctx[i], cfg, step, lr, scale, &pk, &gk, per ? &sk : &st,
                                        t->decay_dev ? &dk : NULL));
    }
    return CLT_OK;
  }
  CLT_TRY(clt_tensor_download(t->ctx[i], &g, t->host_grads, (size_t)(pooled ? params : P) * sizeof(float)));
  for (int k = 0; k < n; k++) {
    size_t lo = (size_t)s[k].lo;
    clt_optimizer_step_host_masked(cfg, step, lr, scale, t->host_params[i] + lo,
                                   t->host_grads + (pooled ? (size_t)s[k].state_at : lo),
                                   t->host_state[i] + (size_t)(s[k].state_at * per), (size_t)s[k].n,
                                   t->decay_host ? t->decay_host + lo : NULL);
    /* Only the shard: the rest of the host copy is stale under ZeRO (the
     * allgather brings it to the device). */
    clt_tensor pk;
    CLT_TRY(clt_tensor_view(p.buf, p.offset + lo * 4, CLT_F32, 1, &s[k].n, &pk));
    CLT_TRY(clt_tensor_upload(t->ctx[i], &pk, t->host_params[i] + lo, (size_t)s[k].n * sizeof(float)));
  }
fail:
  return rc;
}

/* The optimizer step on every local replica once the gradients of `labels`
 * labels are summed: scale, clip, update. *grad_norm gets the norm of the
 * mean gradient; *skipped is 1 when fp16 loss scaling skipped the step
 * instead (the gradient was not finite). sums (this rank's loss sum and
 * correct count) come back summed over the ranks: they travel with the
 * norm's parts, one exchange of the ranks a step instead of two. */
static int update(clt_trainer *t, int64_t labels, double *sums, double *grad_norm, int *skipped) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(t->local);
  const clt_optimizer_config *cfg = &t->opts.optimizer;
  float scale = 1.0f / (float)labels;
  *grad_norm = NAN;
  *skipped = 0;

  /* Every replica of every rank now holds the same summed gradient (or
   * its shard of it), so every rank learns alike whether it is finite
   * (and stops before the update spoils the parameters), and clipping
   * can use its norm: the same bits on every rank, summed in rank order. */
  double v[3] = {0, sums[0], sums[1]};
  CLT_TRY(gradient_sumsq(t, &v[0]));
  CLT_TRY(clt__trainer_sum(t, v, 3));
  float ss = (float)v[0];
  sums[0] = v[1], sums[1] = v[2];
  if (t->opts.precision == CLT_F16) {
    /* The gradient was scaled by the loss scale; in f16 an inf or NaN
     * means the scale is too large (or the data overflow f16 outright). */
    if (!isfinite(ss)) return skip_step(t, skipped);
    t->skips_in_row = 0;
    scale = (float)(1.0 / ((double)labels * t->loss_scale));
    ss = (float)((double)ss / (t->loss_scale * t->loss_scale));
    if (++t->scale_clean_steps >= t->opts.loss_scale_window && t->loss_scale * 2 <= 1e30) {
      t->loss_scale *= 2;
      t->scale_clean_steps = 0;
    }
  } else if (!isfinite(ss)) {
    rc = nonfinite_layer(t);
    goto fail;
  }
  /* Clipping: the norm of the summed gradient / labels. */
  *grad_norm = sqrt((double)ss) / (double)labels;
  if (t->opts.clip > 0 && *grad_norm > t->opts.clip) scale = (float)(scale * (t->opts.clip / (*grad_norm + 1e-6)));

  float lr = clt_schedule_lr(&t->opts.schedule, t->steps_done);
  int64_t step = t->steps_done + 1 - t->skipped; /* the optimizer's own count (Adam's bias correction) */
  if (t->sitting) { /* the host's model: the same bits as the devices' step (clt_optimizer_step_host_masked) */
    clt_optimizer_step_host_masked(cfg, step, lr, scale, t->sit_params, t->sit_grads, t->sit_state, (size_t)P,
                                   t->decay_host);
    for (int i = 0; i < t->nlocal; i++) t->stale[i] = 1;
  }
  for (int i = 0; !t->sitting && i < t->nlocal; i++) {
    if (!clt__dp_active(t->dp, i)) { /* it sat the step out: up to date before it is read */
      t->stale[i] = 1;
      continue;
    }
    CLT_TRY(step_replica(t, i, step, lr, scale)); /* this rank's shard */
  }
  CLT_TRY(clt__dp_allgather_params(t->dp, t->rep, t->steps_done + 1)); /* ZeRO: everyone's */
  t->steps_done++;
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "optimizer step %lld", (long long)t->steps_done + 1);
}

/* A replica at 0 samples sits the step out (clt__dp_active): it would
 * only add a zero gradient and repeat the others' update, and a device's
 * fixed cost per command would make even that the slowest part of the
 * step. It is brought up to date when it takes part again, or is read. */
static int zero_grads(clt_trainer *t) {
  int rc = CLT_OK;
  CLT_TRY(clt__trainer_sync_replicas(t, 1));
  for (int i = 0; i < t->nlocal; i++)
    if (clt__dp_active(t->dp, i)) CLT_TRY(clt__replica_zero_grads(t->rep[i]));
fail:
  return rc;
}

/* Enqueue forward, loss and backward of every replica's slice. A recorded
 * run (the step's last micro-batch) marks its buckets for the exchange; a
 * replica with nothing in it (a partial batch, a rank with few samples)
 * records the markers alone. */
static int forward_backward(clt_trainer *t, const clt__slice *s, int record, uint8_t *ran) {
  int rc = CLT_OK;
  for (int i = 0; i < t->nlocal; i++) {
    if (!clt__dp_active(t->dp, i) && !(t->sitting && s[i].n > 0)) continue; /* its slices are empty */
    if (t->sitting && !ran[i]) { /* a rank that sits out runs its own samples of clt_trainer_step */
      CLT_TRY(clt__trainer_sync_replicas(t, 0));
      CLT_TRY(clt__replica_zero_grads(t->rep[i]));
      ran[i] = 1;
    }
    clt__pass pass = {.train = 1, .record = record && !t->sitting, .seed = t->opts.seed, .step = s[i].dropout_step,
                      .global_first = s[i].global_first, .loss_scale = (float)t->loss_scale,
                      .targets = s[i].targets};
    if (s[i].n > 0)
      CLT_TRY(clt__replica_run(t->rep[i], s[i].x, s[i].y, s[i].n, &pass));
    else if (pass.record)
      CLT_TRY(clt__replica_record_empty(t->rep[i]));
  }
fail:
  return rc;
}

/* Wait for every replica's run, add its loss sum and correct count (or
 * squared error) to sums, and give the balancer the recorded run's time. */
static int read_losses(clt_trainer *t, const clt__slice *s, int recorded, double *sums) {
  int rc = CLT_OK;
  for (int i = 0; i < t->nlocal; i++) {
    if (s[i].n == 0) continue;
    float l;
    double c;
    CLT_TRY(clt__replica_read_loss(t->rep[i], &l, &c));
    if (t->trace) clt__replica_trace_spans(t->rep[i], t->trace, t->trace_lanes[i], clt__trace_ns());
    sums[0] += l;
    sums[1] += c;
    if (recorded && !t->sitting) clt__dp_note_run(t->dp, i, s[i].n, clt__replica_run_time(t->rep[i]));
  }
fail:
  return rc;
}

/* A rank that sits out: its part of the sum (zeros, or the gradient its
 * first replica ran of its own samples) through the host exchange. */
static int exchange_sitting(clt_trainer *t, const uint8_t *ran) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(t->local);
  memset(t->sit_grads, 0, (size_t)P * sizeof *t->sit_grads);
  for (int i = 0; i < t->nlocal; i++)
    if (ran[i]) {
      clt_tensor g = clt__replica_grads(t->rep[i]);
      CLT_TRY(clt_tensor_download(t->ctx[i], &g, t->sit_grads, (size_t)P * sizeof *t->sit_grads));
    }
  CLT_TRY(clt__dp_exchange_host(t->dp, t->sit_grads, t->steps_done + 1));
fail:
  return rc;
}

/* What is due after an update: the replica agreement check and, with
 * --balance auto, a new split of the batch. */
static int after_update(clt_trainer *t, int *shares_changed) {
  int rc = CLT_OK;
  const clt_train_options *o = &t->opts;
  *shares_changed = 0;
  if (o->check_every > 0 && t->steps_done % o->check_every == 0) {
    CLT_TRY(clt__dp_check_replicas(t->dp, t->rep, t->stale, t->sitting ? t->sit_params : NULL, t->steps_done));
  }
  if (clt__dp_rebalance_due(t->dp, t->steps_done)) CLT_TRY(clt__dp_rebalance(t->dp, t->steps_done, shares_changed));
fail:
  return rc;
}

/* Under --pipeline: the step's micro-batches (up to M, as the source
 * gives them) copied out of the source (its buffers are reused), streamed
 * through the stages (src/pp), and the stage's gradients summed over its
 * replicas (src/dp, on the stage's communicator). This rank's loss sums
 * (the last stage's) into sums. */
static int pipeline_micro_batches(clt_trainer *t, const clt__micro_source *src, clt__step_stats *st, double *sums) {
  int rc = CLT_OK, last = 0, m = 0, M = clt__pp_micro_batches(t->pp);
  int first_stage = clt__pp_stage(t->pp) == 0, last_stage = clt__pp_stage(t->pp) == clt__pp_stages(t->pp) - 1;
  int64_t in = clt_model_input_size(t->model), lps = clt_model_labels_per_sample(t->model);
  int regression = clt_model_loss(t->model) != CLT_LOSS_CROSSENTROPY;
  clt__pp_micro *mb = clt__calloc((size_t)M, sizeof *mb);
  float *x = NULL, *targets = NULL;
  int32_t *y = NULL;
  if (!mb) return CLT_ENOMEM;
  if ((first_stage && !(x = clt__calloc((size_t)(M * t->pp_room * in) + 1, sizeof *x))) ||
      (last_stage && regression && !(targets = clt__calloc((size_t)(M * t->pp_room * lps) + 1, sizeof *targets))) ||
      (last_stage && !regression && !(y = clt__calloc((size_t)(M * t->pp_room * lps) + 1, sizeof *y)))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  for (int k = 0; !last; k++) {
    clt__slice s;
    int64_t labels;
    if (k >= M) {
      rc = clt__error(CLT_EINTERNAL, "a pipeline step's source gave more than its %d micro-batches", M);
      goto fail;
    }
    CLT_TRY(src->next(src->self, t, k, &s, &labels, &last));
    if (s.n > t->pp_room) {
      rc = clt__error(CLT_EINVAL, "a micro-batch of %lld samples on a pipeline stage made for %lld", (long long)s.n,
                      (long long)t->pp_room);
      goto fail;
    }
    size_t at = (size_t)(k * t->pp_room);
    mb[k] = (clt__pp_micro){NULL, NULL, NULL, s.n, s.global_first, s.dropout_step};
    if (x && s.n) memcpy(x + at * in, s.x, (size_t)(s.n * in) * sizeof *x), mb[k].x = x + at * in;
    if (y && s.n) memcpy(y + at * lps, s.y, (size_t)(s.n * lps) * sizeof *y), mb[k].y = y + at * lps;
    if (targets && s.n)
      memcpy(targets + at * lps, s.targets, (size_t)(s.n * lps) * sizeof *targets), mb[k].targets = targets + at * lps;
    st->labels += labels;
    m = k + 1;
  }
  clt__pass pass = {.train = 1, .seed = t->opts.seed, .loss_scale = 1.0f};
  double loss = 0, metric = 0;
  CLT_TRY(clt__pp_run(t->pp, t->rep[0], m, mb, &pass, t->steps_done + 1, &loss, &metric));
  CLT_TRY(clt__dp_exchange(t->dp, t->rep, t->steps_done + 1)); /* the stage's replicas */
  CLT_TRY(clt__pp_sum_tied(t->pp, t->rep[0], t->steps_done + 1)); /* a weight tied across stages */
  sums[0] += loss, sums[1] += metric;
fail:
  free(mb), free(x), free(y), free(targets);
  return rc;
}

int clt__trainer_train_step(clt_trainer *t, const clt__micro_source *src, clt__step_stats *st) {
  int rc = CLT_OK, last = 0;
  double sums[2] = {0, 0}; /* loss, correct: this rank's, then (update) every rank's */
  clt__slice *slices = clt__calloc(t->nlocal, sizeof *slices);
  uint8_t *ran = clt__calloc(t->nlocal, sizeof *ran); /* a rank that sits out: replicas that ran its samples */
  if (!slices || !ran) { free(slices), free(ran); return CLT_ENOMEM; }
  memset(st, 0, sizeof *st);
  double t0 = clt__now();
  /* The timeline's spans (timeline.c): tr is NULL unless one is recorded. */
  clt__trace *tr = t->trace;
  int lane = t->trace_host;
  int64_t s0 = clt__trace_ns(), a = s0, b;

  CLT_TRY(zero_grads(t));
  clt__trace_span(tr, lane, "enqueue", s0, a = clt__trace_ns(), "zero the gradients");
  if (t->pp) {
    CLT_TRY(pipeline_micro_batches(t, src, st, sums));
    clt__trace_span(tr, lane, "pipeline", a, b = clt__trace_ns(), "the pipeline's micro-batches");
    a = b;
    last = 1;
  }
  for (int k = 0; !last; k++) { /* micro-batches; gradients accumulate */
    int64_t labels;
    CLT_TRY(src->next(src->self, t, k, slices, &labels, &last)); /* every replica's slice */
    clt__trace_span(tr, lane, "data", a, b = clt__trace_ns(), "micro-batch %d: data", k);
    CLT_TRY(forward_backward(t, slices, last, ran));             /* forward, loss, backward: enqueued */
    clt__trace_span(tr, lane, "enqueue", b, a = clt__trace_ns(), "micro-batch %d: enqueue", k);
    if (last && !t->sitting) CLT_TRY(clt__dp_exchange(t->dp, t->rep, t->steps_done + 1)); /* while backward runs */
    if (last && !t->sitting) clt__trace_span(tr, lane, "comm", a, b = clt__trace_ns(), "gradient exchange");
    else b = a;
    CLT_TRY(read_losses(t, slices, last, sums));
    clt__trace_span(tr, lane, "wait", b, a = clt__trace_ns(), "micro-batch %d: wait for the devices", k);
    st->labels += labels;
  }
  if (t->sitting) CLT_TRY(exchange_sitting(t, ran));
  CLT_TRY(update(t, st->labels, sums, &st->grad_norm, &st->skipped)); /* mean over the global labels */
  clt__trace_span(tr, lane, "optimizer", a, b = clt__trace_ns(), "update");
  st->loss_sum = sums[0], st->correct = sums[1];
  /* In f16 a step whose forward overflowed is skipped like any other
   * non-finite step (update): it leaves the sums alone. */
  st->counted = isfinite(st->loss_sum) || !st->skipped;
  if (st->counted && !isfinite(st->loss_sum)) {
    rc = clt__error(CLT_ENONFINITE, "the loss is not finite at step %lld: lower the learning rate (%g) or clip "
                    "gradients (--clip)", (long long)t->steps_done, clt_schedule_lr(&t->opts.schedule, t->steps_done - 1));
    goto fail;
  }
  clt__dp_note_step(t->dp, clt__now() - t0); /* the balancer compares measured steps too */
  CLT_TRY(after_update(t, &st->shares_changed));
  a = clt__trace_ns();
  clt__trace_span(tr, lane, "checks", b, a, "sums, checks");
  clt__trace_span(tr, lane, "step", s0, a, "step %lld", (long long)t->steps_done);
fail:
  free(slices), free(ran);
  return rc;
}

/* ---- the public step: the caller's own samples ------------------------------ */

/* A step's targets, tagged by the entry point that took them: int32 labels
 * (clt_trainer_step) or float32 values (clt_trainer_step_targets). One
 * internal step serves both; which one the caller meant is checked against
 * the model's loss. */
typedef struct step_targets {
  const char *fn;        /* the public function, for messages */
  int regression;        /* 1: values (and count), 0: labels */
  const int32_t *labels;
  const float *values;
  int64_t count;         /* clt_trainer_step_targets: the floats in values */
  int failed;            /* <0: the caller's own input already failed (still joins the step's gather) */
} step_targets;

/* This rank's batch, cut for its replicas: replica i takes count[i]
 * samples from start[i], in runs of at most `chunk` (its activation
 * memory), one micro-batch per run. */
typedef struct caller_batch {
  const float *x;
  const int32_t *y;
  const float *targets;
  int64_t in, lps, chunk;
  int64_t *count, *start;
  int64_t rank_first;    /* global index of this rank's first sample */
  int64_t global_labels;
  int nmicro;
  uint64_t key;          /* one dropout key for the whole step */
} caller_batch;

static int caller_next(void *self, clt_trainer *t, int k, clt__slice *s, int64_t *labels, int *last) {
  caller_batch *c = self;
  for (int i = 0; i < t->nlocal; i++) {
    int64_t lo = (int64_t)k * c->chunk, n = c->count[i] - lo;
    n = n < 0 ? 0 : n > c->chunk ? c->chunk : n;
    int64_t at = c->start[i] + lo;
    s[i] = (clt__slice){n && c->x ? c->x + at * c->in : NULL, n && c->y ? c->y + at * c->lps : NULL, n,
                        c->rank_first + at, c->key, n && c->targets ? c->targets + at * c->lps : NULL};
  }
  *labels = k == 0 ? c->global_labels : 0;
  *last = k == c->nmicro - 1;
  return CLT_OK;
}

/* The targets fit the model: labels for a classifier, values for a
 * regression model, as many as n samples take, every one valid. */
static int check_targets(const clt_trainer *t, const step_targets *tg, int64_t n) {
  const char *fn = tg->fn;
  clt_loss_kind loss = clt_model_loss(t->model);
  int64_t lps = clt_model_labels_per_sample(t->model), C = clt_model_num_classes(t->model);
  if (tg->regression && loss == CLT_LOSS_CROSSENTROPY)
    return clt__error(CLT_EINVAL, "%s: targets are float values, but the model is a classifier (loss crossentropy) "
                      "and takes int32 labels: call clt_trainer_step", fn);
  if (!tg->regression && loss != CLT_LOSS_CROSSENTROPY)
    return clt__error(CLT_EINVAL, "%s: y is int32 labels, but the model is a regression model (loss %s) and takes "
                      "float targets: call clt_trainer_step_targets", fn, clt_loss_name(loss));
  if (tg->regression) {
    if (tg->count != n * lps)
      return clt__error(CLT_EINVAL, "%s: count is %lld, but %lld samples of %lld targets each are %lld", fn,
                        (long long)tg->count, (long long)n, (long long)lps, (long long)(n * lps));
    if (n > 0 && !tg->values)
      return clt__error(CLT_EINVAL, "%s: targets is NULL with n = %lld samples", fn, (long long)n);
    for (int64_t k = 0; k < n * lps; k++)
      if (!isfinite(tg->values[k]))
        return clt__error(CLT_EINVAL, "%s: target %lld (value %lld of sample %lld) is %g; targets must be finite", fn,
                          (long long)k, (long long)(k % lps), (long long)(k / lps), (double)tg->values[k]);
    return CLT_OK;
  }
  if (n > 0 && !tg->labels) return clt__error(CLT_EINVAL, "%s: y is NULL with n = %lld samples", fn, (long long)n);
  for (int64_t k = 0; k < n * lps; k++)
    if ((tg->labels[k] < 0 || tg->labels[k] >= C) && tg->labels[k] != CLT_IGNORE_LABEL)
      return clt__error(CLT_EINVAL, "%s: label %lld (of sample %lld) is %d, but the model has %lld classes (0 to "
                        "%lld, or CLT_IGNORE_LABEL)", fn, (long long)k, (long long)(k / lps), (int)tg->labels[k],
                        (long long)C, (long long)C - 1);
  return CLT_OK;
}

/* This rank's input: CLT_OK or an error naming what is wrong. */
static int check_input(const clt_trainer *t, const float *x, const step_targets *tg, int64_t n) {
  if (n < 0) return clt__error(CLT_EINVAL, "%s: n is %lld; give 0 or more samples", tg->fn, (long long)n);
  if (n > 0 && !x) return clt__error(CLT_EINVAL, "%s: x is NULL with n = %lld samples", tg->fn, (long long)n);
  return check_targets(t, tg, n);
}

/* What the mean divides by: the labels that count (not CLT_IGNORE_LABEL),
 * or every target value. */
static int64_t counted_labels(const clt_trainer *t, const step_targets *tg, int64_t n) {
  int64_t m = 0, all = n * clt_model_labels_per_sample(t->model);
  if (tg->regression) return all;
  for (int64_t k = 0; k < all; k++) m += tg->labels[k] != CLT_IGNORE_LABEL;
  return m;
}

/* Collective: every rank's n and input check. All ranks fail alike when
 * one's input is bad (naming it), so none is left waiting in the exchange. */
static int gather_counts(clt_trainer *t, const char *fn, int64_t n, int64_t labels, int rc, int64_t *global_n,
                         int64_t *global_labels, int64_t *before) {
  int64_t mine[3] = {rc, n, labels}, *all = NULL;
  *global_n = n, *global_labels = labels, *before = 0;
  if (t->nranks == 1) return rc;
  if (!(all = clt__calloc((size_t)t->nranks * 3, sizeof *all))) return CLT_ENOMEM;
  int grc = clt_allgather(t->comm, mine, sizeof mine, all);
  /* Under a pipeline, the ranks of pipeline d (ranks d P .. d P + P - 1)
   * all pass that pipeline's samples: counted once, at its first stage. */
  int P = t->pp ? clt__pp_stages(t->pp) : 1;
  *global_n = *global_labels = 0;
  for (int r = 0; grc == CLT_OK && r < t->nranks; r++) {
    if (all[3 * r] < 0) {
      grc = r == t->rank ? (int)all[3 * r]
                         : clt__error((int)all[3 * r], "%s: rank %d's input is bad (%s)", fn, r,
                                      clt_strerror((int)all[3 * r]));
      break;
    }
    if (r % P) {
      int head = r - r % P;
      if (all[3 * r + 1] != all[3 * head + 1])
        grc = clt__error(CLT_EINVAL, "%s: rank %d passes %lld samples but rank %d, the first stage of its pipeline, "
                         "%lld: every stage of a pipeline takes the same samples", fn, r, (long long)all[3 * r + 1],
                         head, (long long)all[3 * head + 1]);
      continue;
    }
    if (r < t->rank - t->rank % P) *before += all[3 * r + 1];
    *global_n += all[3 * r + 1];
    *global_labels += all[3 * r + 2];
  }
  free(all);
  return grc;
}

/* The one step behind clt_trainer_step and clt_trainer_step_targets. */
static int step_on(clt_trainer *t, const float *x, const step_targets *tg, int64_t n, clt_step_result *out) {
  int rc = CLT_OK;
  caller_batch c;
  memset(&c, 0, sizeof c);
  if (!t) return clt__error(CLT_EINVAL, "%s: no trainer", tg->fn);
  if (out) memset(out, 0, sizeof *out);
  int64_t global_n;
  int in_rc = tg->failed < 0 ? tg->failed : check_input(t, x, tg, n);
  CLT_TRY(gather_counts(t, tg->fn, n, in_rc < 0 ? 0 : counted_labels(t, tg, n), in_rc, &global_n, &c.global_labels,
                        &c.rank_first));
  if (global_n == 0) {
    rc = clt__error(CLT_EINVAL, "%s: no rank gave any samples; a step needs at least one", tg->fn);
    goto fail;
  }
  if (c.global_labels == 0) {
    rc = clt__error(CLT_EINVAL, "%s: every label of the step is CLT_IGNORE_LABEL; a step needs at least one that "
                    "counts", tg->fn);
    goto fail;
  }
  c.x = x, c.y = tg->labels, c.targets = tg->values;
  c.in = clt_model_input_size(t->model);
  c.lps = clt_model_labels_per_sample(t->model);
  c.chunk = t->micro_batch; /* what each replica has room for */
  if (t->pp) { /* the pipeline's samples in its micro-batches */
    int M = clt__pp_micro_batches(t->pp);
    c.chunk = n > 0 ? (n + M - 1) / M : 1;
    if (c.chunk > t->pp_room)
      rc = clt__error(CLT_EINVAL, "%s: %lld samples on a pipeline of %d micro-batches of at most %lld (the batch "
                      "size / micro-batches / replicas of a stage, as the trainer was made); pass fewer or make it "
                      "with a larger batch", tg->fn, (long long)n, M, (long long)t->pp_room);
    CLT_TRY(clt__trainer_all_ok(t, rc, tg->fn));
  }
  c.key = (uint64_t)t->micro_steps;
  c.count = clt__calloc(t->nlocal, sizeof *c.count);
  c.start = clt__calloc(t->nlocal, sizeof *c.start);
  if (!c.count || !c.start) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(clt__dp_split_local(t->dp, n, c.count));
  c.nmicro = 1;
  for (int i = 0; i < t->nlocal; i++) {
    c.start[i] = i ? c.start[i - 1] + c.count[i - 1] : 0;
    int runs = (int)((c.count[i] + c.chunk - 1) / c.chunk);
    if (runs > c.nmicro) c.nmicro = runs;
  }

  if (c.nmicro > 1 && clt__dp_zero_pooled(t->dp)) {
    /* Several runs would each need the whole local gradient kept. */
    rc = clt__error(CLT_EINVAL, "%s: rank %d's %lld samples take %d runs of its replicas (at most %lld samples each), "
                    "but under --zero 2 a replica keeps no gradient between runs; pass fewer samples, or train with "
                    "--accumulate (which keeps the whole local gradient)", tg->fn, t->rank, (long long)n, c.nmicro,
                    (long long)c.chunk);
    goto fail;
  }
  clt__step_stats st;
  clt__micro_source src = {caller_next, &c};
  CLT_TRY(clt__trainer_train_step(t, &src, &st));
  t->micro_steps++;
  if (out) {
    out->loss = st.loss_sum / (double)st.labels;
    out->accuracy = tg->regression ? NAN : st.correct / (double)st.labels;
    out->rmse = tg->regression ? sqrt(st.correct / (double)st.labels) : NAN;
    out->grad_norm = st.grad_norm;
    out->skipped = st.skipped;
    out->global_n = global_n;
  }
fail:
  free(c.count), free(c.start);
  return rc;
}

int clt_trainer_step(clt_trainer *t, const float *x, const int32_t *y, int64_t n, clt_step_result *out) {
  step_targets tg = {.fn = "clt_trainer_step", .labels = y};
  return step_on(t, x, &tg, n, out);
}

int clt_trainer_step_targets(clt_trainer *t, const float *x, const float *targets, int64_t n, int64_t count,
                             clt_step_result *out) {
  step_targets tg = {.fn = "clt_trainer_step_targets", .regression = 1, .values = targets, .count = count};
  return step_on(t, x, &tg, n, out);
}

/* Read `bytes` of buf on the caller's queue into host, or say which buffer
 * is too small or unreadable. */
static int read_buffer(cl_command_queue q, cl_mem buf, const char *name, size_t bytes, void *host, int64_t n) {
  size_t have = 0;
  cl_int e = buf ? clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof have, &have, NULL) : CL_INVALID_MEM_OBJECT;
  if (e != CL_SUCCESS)
    return clt__error(CLT_EINVAL, "clt_trainer_step_buffers: %s is not a buffer (OpenCL error %d)", name, (int)e);
  if (have < bytes)
    return clt__error(CLT_EINVAL, "clt_trainer_step_buffers: %s holds %zu bytes, but %lld samples need %zu", name, have,
                      (long long)n, bytes);
  e = clEnqueueReadBuffer(q, buf, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
  if (e != CL_SUCCESS)
    return clt__error(CLT_EINVAL, "clt_trainer_step_buffers: reading %s on the given queue fails (OpenCL error %d)", name,
                      (int)e);
  return CLT_OK;
}

int clt_trainer_step_buffers(clt_trainer *t, cl_command_queue queue, cl_mem x, cl_mem y, int64_t n,
                             clt_step_result *out) {
  if (!t) return clt__error(CLT_EINVAL, "clt_trainer_step_buffers: no trainer");
  int regression = clt_model_loss(t->model) != CLT_LOSS_CROSSENTROPY;
  int64_t in = clt_model_input_size(t->model), lps = clt_model_labels_per_sample(t->model);
  step_targets tg = {.fn = "clt_trainer_step_buffers", .regression = regression, .count = n * lps};
  float *hx = NULL;
  void *hy = NULL;
  int rc = CLT_OK;
  if (n < 0)
    rc = clt__error(CLT_EINVAL, "clt_trainer_step_buffers: n is %lld; it must be 0 or more", (long long)n);
  else if (n > 0 && !queue)
    rc = clt__error(CLT_EINVAL, "clt_trainer_step_buffers: queue is NULL with n = %lld samples", (long long)n);
  else if (n > 0 && (!(hx = malloc((size_t)(n * in) * sizeof *hx)) || !(hy = malloc((size_t)(n * lps) * 4))))
    rc = clt__error(CLT_ENOMEM, "clt_trainer_step_buffers: no host memory to stage %lld samples", (long long)n);
  if (rc == CLT_OK && n > 0) rc = read_buffer(queue, x, "x", (size_t)(n * in) * sizeof *hx, hx, n);
  if (rc == CLT_OK && n > 0) rc = read_buffer(queue, y, "y", (size_t)(n * lps) * 4, hy, n);
  tg.failed = rc;
  if (regression) tg.values = hy;
  else tg.labels = hy;
  rc = step_on(t, hx, &tg, rc < 0 ? 0 : n, out);
  free(hx), free(hy);
  return rc;
}
