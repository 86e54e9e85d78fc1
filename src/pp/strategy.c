/*
 * strategy.c: the pipeline as a strategy (strategy/strategy.h). The plan
 * makes the grid and this rank's stage (pp.c), then data parallelism
 * (src/dp) over the stage's D replicas, one on this rank, with room for
 * its share of a micro-batch and the activation sets its schedule holds
 * at once. A step's micro-batches are copied out of the trainer's source
 * as they come (its buffers are reused) and streamed through the stages
 * when the last arrives (schedule.c); the exchange is the stage's
 * data-parallel one, then the gradients of weights tied across stages are
 * summed; the update, the checks and the state in and out are the stage's
 * data parallelism's, gathered to and scattered from the whole model.
 */
#include "pp/pp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void destroy(void *self) {
  clt__pp *pp = self;
  if (!pp) return;
  for (int k = 1; pp->set && k < pp->nsets; k++) {
    clt__act_set_destroy(pp->set[k]);
    free(pp->set[k]);
  }
  free(pp->set), free(pp->mb), free(pp->x), free(pp->y), free(pp->targets);
  clt__dp_destroy(pp->dp);
  clt__pp_destroy(pp); /* after dp: its plans are on the stage's communicator */
}

static void take(void *user, float *params) {
  clt__pp *pp = user;
  clt__pp_take(pp, pp->whole->spec, params, NULL, 0, params, NULL); /* in place: the stage's part first */
}

/* Host buffers for a step's micro-batches: the inputs on the first stage,
 * the labels or targets on the last. */
static int step_buffers(clt__pp *pp) {
  int64_t in = clt_model_input_size(pp->whole), lps = clt_model_labels_per_sample(pp->whole);
  int regression = clt_model_loss(pp->whole) != CLT_LOSS_CROSSENTROPY;
  size_t room = (size_t)(pp->M * pp->room);
  if (!(pp->mb = clt__calloc((size_t)pp->M, sizeof *pp->mb))) return CLT_ENOMEM;
  if ((pp->stage == 0 && !(pp->x = clt__calloc(room * (size_t)in + 1, sizeof *pp->x))) ||
      (pp->stage == pp->P - 1 && regression && !(pp->targets = clt__calloc(room * (size_t)lps + 1, sizeof(float)))) ||
      (pp->stage == pp->P - 1 && !regression && !(pp->y = clt__calloc(room * (size_t)lps + 1, sizeof(int32_t)))))
    return CLT_ENOMEM;
  return CLT_OK;
}

static int plan(const clt__job *job, clt__strategy *s) {
  int rc = CLT_OK;
  const clt_train_options *o = job->opts;
  clt__pp *pp = NULL;
  if (job->nlocal != 1)
    rc = clt__error(CLT_EINVAL, "--pipeline %d runs one device per rank, but rank %d was given %d; select "
                    "one (--devices, CLT_DEVICES)", o->pipeline, clt_comm_rank(job->comm), job->nlocal);
  else
    rc = clt__pp_create(job->comm, job->model, o, job->devs, &pp);
  if (rc < 0) { /* every rank fails alike, each with its own message */
    char own[1024];
    clt__strlcpy(own, clt_last_error(), sizeof own);
    clt__all_ok(job->comm, rc, "setting up the pipeline");
    rc = clt__error(rc, "%s", own);
    goto fail;
  }
  CLT_TRY(clt__all_ok(job->comm, rc, "setting up the pipeline"));
  CLT_TRY(clt__pp_split(pp));
  pp->whole = job->model, pp->o = o;
  /* A stage's replica holds its equal share of a micro-batch, and an
   * activation set per micro-batch it holds at once. */
  int64_t micro_batch = o->batch / pp->M;
  pp->room = (micro_batch + pp->D - 1) / pp->D;
  pp->nsets = clt__pp_activation_sets(pp);
  uint64_t set_bytes = clt__act_set_bytes(pp->stage_model.spec, pp->room, o->precision, o->recompute);
  clt__dp_how how = {.local = &pp->stage_model, .comm = pp->stage_comm, .accumulate = pp->M, .room = pp->room,
                     .extra_activations = (uint64_t)(pp->nsets - 1) * set_bytes, .stage = pp->stage,
                     .take = take, .take_user = pp};
  CLT_TRY(clt__dp_plan(job, &how, &pp->dp));
  pp->r = clt__dp_local_replicas(pp->dp)[0];
  char a[32];
  clt__log(CLT_LOG_INFO, "pipeline stage %d of %d (rank %d): %d activation set%s of %lld samples (%s each)", pp->stage,
           pp->P, clt_comm_rank(job->comm), pp->nsets, pp->nsets == 1 ? "" : "s", (long long)pp->room,
           clt__fmt_bytes(set_bytes, a, sizeof a));
  if (!(pp->set = clt__calloc((size_t)pp->nsets, sizeof *pp->set))) { rc = CLT_ENOMEM; goto fail; }
  pp->set[0] = &pp->r->own;
  for (int k = 1; k < pp->nsets; k++) {
    if (!(pp->set[k] = clt__calloc(1, sizeof *pp->set[k]))) { rc = CLT_ENOMEM; goto fail; }
    CLT_TRY(clt__act_set_create(pp->r, pp->set[k]));
  }
  CLT_TRY(step_buffers(pp));
  s->self = pp, s->dp = pp->dp, s->local = &pp->stage_model, s->rep = clt__dp_local_replicas(pp->dp);
  s->accumulate = pp->M, s->micro_batch = micro_batch, s->room = pp->room;
  s->split = pp->M, s->group = pp->P, s->one_run = 0;
  return CLT_OK;
fail:
  if (pp) destroy(pp);
  return rc;
}

static int zero_grads(void *self) {
  clt__pp *pp = self;
  pp->m = 0;
  pp->loss = pp->metric = 0;
  return clt__dp_strategy.zero_grads(pp->dp);
}

/* Micro-batch k copied into the step's buffers; the last one runs the
 * schedule over all of them. */
static int forward_backward(void *self, int64_t step, int k, const clt__slice *slices, const clt__pass *base,
                            int last) {
  clt__pp *pp = self;
  const clt__slice *s = &slices[0];
  int64_t in = clt_model_input_size(pp->whole), lps = clt_model_labels_per_sample(pp->whole);
  if (k >= pp->M)
    return clt__error(CLT_EINTERNAL, "a pipeline step's source gave more than its %d micro-batches", pp->M);
  if (s->n > pp->room)
    return clt__error(CLT_EINVAL, "a micro-batch of %lld samples on a pipeline stage made for %lld", (long long)s->n,
                      (long long)pp->room);
  size_t at = (size_t)(k * pp->room);
  pp->mb[k] = (clt__pp_micro){NULL, NULL, NULL, s->n, s->global_first, s->dropout_step};
  if (pp->x && s->n) memcpy(pp->x + at * in, s->x, (size_t)(s->n * in) * sizeof *pp->x), pp->mb[k].x = pp->x + at * in;
  if (pp->y && s->n) memcpy(pp->y + at * lps, s->y, (size_t)(s->n * lps) * sizeof *pp->y), pp->mb[k].y = pp->y + at * lps;
  if (pp->targets && s->n)
    memcpy(pp->targets + at * lps, s->targets, (size_t)(s->n * lps) * sizeof *pp->targets),
        pp->mb[k].targets = pp->targets + at * lps;
  pp->m = k + 1;
  pp->step = step;
  if (!last) return CLT_OK;
  double t0 = clt__now();
  int rc = clt__pp_run(pp, pp->m, pp->mb, base, pp->step, &pp->loss, &pp->metric);
  pp->run_s = clt__now() - t0;
  pp->run_n = 0;
  for (int i = 0; i < pp->m; i++) pp->run_n += pp->mb[i].n;
  return rc;
}

static int exchange(void *self, int64_t step) {
  clt__pp *pp = self;
  int rc = CLT_OK;
  CLT_TRY(clt__dp_strategy.exchange(pp->dp, step)); /* the stage's replicas */
  CLT_TRY(clt__pp_sum_tied(pp, pp->r, step));      /* a weight tied across stages */
fail:
  return rc;
}

/* The schedule waited for everything: the last stage's sums; and the
 * step's rate for the stage's replica (the throughput of its step records:
 * a stage's replica runs its whole schedule, waits included, in step with
 * the others, so the schedule's wall time is its time). */
static int losses(void *self, const clt__slice *slices, int last, double *sums) {
  clt__pp *pp = self;
  (void)slices;
  if (last) {
    sums[0] += pp->loss, sums[1] += pp->metric;
    clt__dp_note_run(pp->dp, 0, pp->run_n, pp->run_s);
  }
  return CLT_OK;
}

/* Each stage's part (with D > 1 replicas each one's parts of the buckets,
 * as data parallelism sums them: the same bits at every ZeRO stage; with
 * one, the whole arena), added over the ranks in rank order by the
 * trainer; a tied weight's copy is counted at its owner. */
static int grad_sumsq(void *self, double *ss) {
  clt__pp *pp = self;
  int rc = CLT_OK, parts = clt__dp_summed_part(pp->dp, -1, NULL, NULL);
  clt_context *ctx = clt__replica_context(pp->r);
  clt_tensor g = clt__replica_grads(pp->r);
  float sum = 0;
  double zsum = 0;
  if (parts) CLT_TRY(clt__dp_strategy.grad_sumsq(pp->dp, &zsum));
  else CLT_TRY(clt_sumsq(ctx, &g, &sum));
  int64_t at[8], count[8];
  int ncopies = clt__pp_copies(pp, at, count, 8);
  for (int k = 0; k < ncopies && k < 8; k++) {
    for (int j = 0; j < (parts ? parts : 1); j++) { /* the copy, or its pieces in this rank's parts */
      int64_t lo = at[k], n = count[k];
      if (parts) {
        int64_t plo, pn;
        clt__dp_summed_part(pp->dp, j, &plo, &pn);
        lo = plo > at[k] ? plo : at[k];
        n = (plo + pn < at[k] + count[k] ? plo + pn : at[k] + count[k]) - lo;
        if (n <= 0) continue;
      }
      clt_tensor c;
      float cs = 0;
      CLT_TRY(clt_tensor_view(g.buf, g.offset + (size_t)lo * 4, CLT_F32, 1, &n, &c));
      CLT_TRY(clt_sumsq(ctx, &c, &cs));
      if (parts) zsum -= cs;
      else sum -= cs;
    }
  }
  *ss = parts ? zsum : pp->d == 0 ? sum : 0.0;
fail:
  return rc;
}

static int nonfinite_layer(void *self) { return clt__dp_strategy.nonfinite_layer(((clt__pp *)self)->dp); }

static int update(void *self, const clt__update *u) { return clt__dp_strategy.update(((clt__pp *)self)->dp, u); }

static int after_update(void *self, int64_t steps_done, int *changed) {
  return clt__dp_strategy.after_update(((clt__pp *)self)->dp, steps_done, changed);
}

/* A stage's replicas are bitwise the same (under ZeRO each gathers the
 * stage's state from their shards: collective over the stage); each
 * stage's first sends. */
static int get_state(void *self, float *params, float *state, int everywhere) {
  clt__pp *pp = self;
  int rc = CLT_OK, per = state ? clt_optimizer_state_per_param(&pp->o->optimizer) : 0;
  int64_t P = clt_model_param_count(pp->whole), Ps = clt_model_param_count(&pp->stage_model);
  float *buf = clt__calloc((size_t)(Ps * (1 + per)) + 1, sizeof *buf);
  if (!buf) return CLT_ENOMEM;
  rc = clt__dp_strategy.get_state(pp->dp, buf, per ? buf + Ps : NULL, 1); /* ZeRO: gathered over the stage */
  CLT_TRY(clt__all_ok(pp->comm, rc, "reading a pipeline stage's parameters"));
  CLT_TRY(clt__pp_gather(pp, pp->whole->spec, buf, buf + Ps, per, params, state));
  if (everywhere && clt_comm_size(pp->comm) > 1) CLT_TRY(clt_bcast(pp->comm, params, (size_t)P * sizeof *params, 0));
fail:
  free(buf);
  return rc;
}

/* This stage's part of the whole model (and its copies of weights tied to
 * other stages), taken by the stage's replica. */
static int set_state(void *self, const float *params, const float *state) {
  clt__pp *pp = self;
  int rc, per = state ? clt_optimizer_state_per_param(&pp->o->optimizer) : 0;
  int64_t Ps = clt_model_param_count(&pp->stage_model);
  float *mine = clt__calloc((size_t)(Ps * (1 + per)) + 1, sizeof *mine);
  if (!mine) return CLT_ENOMEM;
  clt__pp_take(pp, pp->whole->spec, params, state, per, mine, mine + Ps);
  rc = clt__dp_strategy.set_state(pp->dp, mine, state ? mine + Ps : NULL);
  free(mine);
  return rc;
}

/* Pipeline d of D takes the d-th D-th of the set, in rounds of M
 * micro-batches streamed through its stages (forwards only); the last
 * stages' sums are this rank's (0 elsewhere). */
static int evaluate(void *self, const clt_dataset *ds, double *total) {
  clt__pp *pp = self;
  int rc = CLT_OK, M = pp->M, D = pp->D, d = pp->d;
  int64_t count = clt_dataset_count(ds), R = pp->room, in = clt_model_input_size(pp->whole);
  int64_t lps = clt_model_labels_per_sample(pp->whole);
  int64_t lo = count * d / D, hi = count * (d + 1) / D;
  const int regression = clt_dataset_targets_per_sample(ds) > 0;
  float *x = clt__calloc((size_t)(M * R * in), sizeof *x);
  int32_t *y = clt__calloc((size_t)(M * R * lps), sizeof *y);
  int64_t *idx = clt__calloc((size_t)R, sizeof *idx);
  clt__pp_micro *mb = clt__calloc((size_t)M, sizeof *mb);
  if (!x || !y || !idx || !mb) rc = CLT_ENOMEM;
  CLT_TRY(clt__all_ok(pp->comm, rc, "allocating for the evaluation"));
  for (int64_t at = lo; at < hi;) {
    int m = 0;
    for (; m < M && at < hi; m++) {
      int64_t n = hi - at < R ? hi - at : R;
      for (int64_t k = 0; k < n; k++) idx[k] = at + k;
      if (regression) { /* float targets in the labels' room, 4 bytes each */
        float *t = (float *)(void *)(y + m * R * lps);
        CLT_TRY(clt_dataset_get_batch_targets(ds, idx, n, x + m * R * in, t));
        mb[m] = (clt__pp_micro){x + m * R * in, NULL, t, n, at, 0};
      } else {
        CLT_TRY(clt_dataset_get_batch(ds, idx, n, x + m * R * in, y + m * R * lps));
        mb[m] = (clt__pp_micro){x + m * R * in, y + m * R * lps, NULL, n, at, 0};
      }
      at += n;
    }
    clt__pass pass = {.train = 0};
    double l = 0, c = 0;
    CLT_TRY(clt__pp_run(pp, m, mb, &pass, pp->step, &l, &c));
    total[0] += l, total[1] += c;
  }
fail:
  free(x), free(y), free(idx), free(mb);
  return rc;
}

static int whole_replica(void *self, int grads, clt__replica **r) {
  (void)self;
  *r = NULL;
  return clt__error(CLT_EUNSUPPORTED, "on a pipeline (--pipeline): not supported; a rank holds one stage's %s. Use "
                    "%sa trainer without a pipeline", grads ? "gradient" : "parameters",
                    grads ? "" : "clt_trainer_evaluate, or load the weights into ");
}

static int stages(void *self, int *cut, int cap) {
  clt__pp *pp = self;
  for (int i = 0; cut && i <= pp->P && i <= cap; i++) cut[i] = pp->cut[i];
  return pp->P;
}

static void set_trace(void *self, clt__trace *tr, int host_lane, const int *lanes) {
  clt__pp *pp = self;
  clt__dp_strategy.set_trace(pp->dp, tr, host_lane, lanes);
  clt__pp_set_trace(pp, tr, host_lane);
}

static void report(void *self, int i, clt__replica_report *out) {
  clt__dp_strategy.report(((clt__pp *)self)->dp, i, out);
}

const clt__strategy_i clt__pp_strategy = {
    .name = "pipeline",
    .plan = plan,
    .destroy = destroy,
    .zero_grads = zero_grads,
    .forward_backward = forward_backward,
    .exchange = exchange,
    .losses = losses,
    .grad_sumsq = grad_sumsq,
    .nonfinite_layer = nonfinite_layer,
    .update = update,
    .after_update = after_update,
    .get_state = get_state,
    .set_state = set_state,
    .evaluate = evaluate,
    .whole_replica = whole_replica,
    .stages = stages,
    .set_trace = set_trace,
    .report = report,
};
