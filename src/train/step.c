/*
 * step.c: one training step, llm.c's order in named calls (CONVENTIONS
 * 14), each phase a span of the timeline (timeline.c) when one is
 * recorded:
 *
 *   zero_grads                         every replica (the strategy's)
 *   for each micro-batch:
 *     next                             the source's slices for the replicas
 *     forward_backward                 forward, loss (summed), backward, the
 *                                      gradients accumulating; enqueued
 *     exchange (the last one)          gradients summed over every replica
 *                                      of every rank, bucket by bucket as
 *                                      the backward completes them
 *     losses                           wait; the loss sums
 *   update                             divide by the global labels, unscale
 *                                      (f16), clip, the optimizer step on
 *                                      every replica, identically
 *   after_update                       replica checks, rebalancing when due
 *
 * Which replicas run what, and how their gradients and parameters meet,
 * is the strategy's (strategy/strategy.h); the step is the same for every
 * strategy.
 *
 * The micro-batches come from a source: fit.c's prefetchers, or here the
 * caller's own batch (clt_trainer_step with labels, clt_trainer_step_targets
 * with a regression model's float targets, both through step_on; DDP-style:
 * each rank passes its own samples, the update is the mean over all of
 * them).
 */
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Run `call` as a span of category `cat` on the timeline's host lane (the
 * span's name printf-style after it); failures go to fail. */
#define PHASE(t, cat, call, ...)                                                                          \
  do {                                                                                                    \
    int64_t phase_t0_ = clt__trace_ns();                                                                  \
    rc = (call);                                                                                          \
    clt__trace_span((t)->timeline.trace, (t)->timeline.host, cat, phase_t0_, clt__trace_ns(), __VA_ARGS__); \
    if (rc < 0) goto fail;                                                                                \
  } while (0)

/* The optimizer step on every replica once the gradients of `labels`
 * labels are summed: scale, clip, update. st->grad_norm gets the norm of
 * the mean gradient; st->skipped is 1 when fp16 loss scaling skipped the
 * step instead (the gradient was not finite). sums (this rank's loss sum
 * and correct count) come back summed over the ranks: they travel with
 * the norm's parts, one exchange of the ranks a step instead of two. */
static int update(clt_trainer *t, double *sums, clt__step_stats *st) {
  int rc = CLT_OK;
  const clt__strategy *s = &t->s;
  int64_t labels = st->labels;
  float scale = 1.0f / (float)labels;
  st->grad_norm = NAN;
  st->skipped = 0;

  /* Every replica of every rank now holds the same summed gradient (or
   * its shard of it), so every rank learns alike whether it is finite
   * (and stops before the update spoils the parameters), and clipping
   * can use its norm: the same bits on every rank, summed in rank order. */
  double v[3] = {0, sums[0], sums[1]};
  CLT_TRY(s->i->grad_sumsq(s->self, &v[0]));
  CLT_TRY(clt__trainer_sum(t, v, 3));
  float ss = (float)v[0];
  sums[0] = v[1], sums[1] = v[2];
  if (!isfinite(ss)) {
    rc = clt__scaler_nonfinite(t, &st->skipped);
    if (st->skipped) return rc; /* fp16: the step skipped (or, after too many, given up) */
    goto fail;
  }
  clt__scaler_unscale(t, &scale, &ss, labels);
  /* Clipping: the norm of the summed gradient / labels. */
  st->grad_norm = sqrt((double)ss) / (double)labels;
  if (t->opts.clip > 0 && st->grad_norm > t->opts.clip)
    scale = (float)(scale * (t->opts.clip / (st->grad_norm + 1e-6)));
  clt__update u = {.step = t->steps_done + 1 - t->scaler.skipped, /* the optimizer's own count (Adam's bias correction) */
                   .steps_done = t->steps_done, .lr = clt_schedule_lr(&t->opts.schedule, t->steps_done),
                   .scale = scale};
  CLT_TRY(s->i->update(s->self, &u));
  t->steps_done++;
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "optimizer step %lld", (long long)t->steps_done + 1);
}

/* In f16 a step whose forward overflowed is skipped like any other
 * non-finite step (update): it leaves the sums alone. Then what is due
 * after an update: the strategy's checks and rebalancing. */
static int after_update(clt_trainer *t, const double *sums, clt__step_stats *st) {
  st->loss_sum = sums[0], st->correct = sums[1];
  st->counted = isfinite(st->loss_sum) || !st->skipped;
  if (st->counted && !isfinite(st->loss_sum))
    return clt__error(CLT_ENONFINITE, "the loss is not finite at step %lld: lower the learning rate (%g) or clip "
                      "gradients (--clip)", (long long)t->steps_done,
                      clt_schedule_lr(&t->opts.schedule, t->steps_done - 1));
  st->shares_changed = 0;
  if (!t->s.i->after_update) return CLT_OK;
  return t->s.i->after_update(t->s.self, t->steps_done, &st->shares_changed);
}

int clt__trainer_train_step(clt_trainer *t, const clt__micro_source *src, clt__step_stats *st) {
  int rc = CLT_OK, last = 0;
  const clt__strategy *s = &t->s;
  double sums[2] = {0, 0}; /* loss, correct: this rank's, then (update) every rank's */
  int64_t step = t->steps_done + 1, t0 = clt__trace_ns();
  clt__slice *slices = clt__calloc(t->nlocal, sizeof *slices);
  if (!slices) return CLT_ENOMEM;
  memset(st, 0, sizeof *st);
  const clt__pass base = {.train = 1, .seed = t->opts.seed, .loss_scale = (float)t->scaler.scale};

  /* ---- the step ---- */
  PHASE(t, "enqueue", s->i->zero_grads(s->self), "zero the gradients");
  for (int k = 0; !last; k++) { /* micro-batches; gradients accumulate */
    int64_t labels;
    PHASE(t, "data", src->next(src->self, t, k, slices, &labels, &last), "micro-batch %d: data", k);
    PHASE(t, "enqueue", s->i->forward_backward(s->self, step, k, slices, &base, last), "micro-batch %d: enqueue", k);
    if (last) PHASE(t, "comm", s->i->exchange(s->self, step), "gradient exchange"); /* while the backward runs */
    PHASE(t, "wait", s->i->losses(s->self, slices, last, sums), "micro-batch %d: wait for the devices", k);
    st->labels += labels;
  }
  if (st->labels == 0) { /* the same on every rank: the global batch's count */
    rc = clt__error(CLT_EINVAL, "step %lld: every target of its batch is masked (-1 in the targets shards); a step "
                    "needs at least one that counts: use a larger batch, or mask less", (long long)step);
    goto fail;
  }
  PHASE(t, "optimizer", update(t, sums, st), "update"); /* the mean over the global labels */
  PHASE(t, "checks", after_update(t, sums, st), "sums, checks");
  /* ---- */
  clt__trace_span(t->timeline.trace, t->timeline.host, "step", t0, clt__trace_ns(), "step %lld",
                  (long long)t->steps_done);
fail:
  free(slices);
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

/* This rank's input: CLT_OK or an error naming what is wrong. A NaN or
 * Inf among the samples would make the loss NaN, which would then be
 * blamed on the learning rate: it is named here, once a step, at the cost
 * of one read of x (the forward reads it many times over). */
static int check_input(const clt_trainer *t, const float *x, const step_targets *tg, int64_t n) {
  if (n < 0) return clt__error(CLT_EINVAL, "%s: n is %lld; give 0 or more samples", tg->fn, (long long)n);
  if (n > 0 && !x) return clt__error(CLT_EINVAL, "%s: x is NULL with n = %lld samples", tg->fn, (long long)n);
  const int64_t in = clt_model_input_size(t->model);
  for (int64_t k = 0; k < n * in; k++)
    if (!isfinite(x[k]))
      return clt__error(CLT_ENONFINITE, "%s: x holds %s at value %lld of sample %lld (of this rank's %lld); the "
                        "input must be finite", tg->fn, isnan(x[k]) ? "NaN" : x[k] > 0 ? "+Inf" : "-Inf",
                        (long long)(k % in), (long long)(k / in), (long long)n);
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
  int P = t->s.group;
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

static int step_raw(clt_trainer *t, const float *x, const step_targets *tg, int64_t n, clt_step_result *out);

/* The one step behind clt_trainer_step and clt_trainer_step_targets: the
 * caller's x normalised first when the trainer has a normalisation
 * (clt_trainer_set_normalization, or weights that carry one). */
static int step_on(clt_trainer *t, const float *x, const step_targets *tg, int64_t n, clt_step_result *out) {
  const float *use = x;
  float *copy = NULL;
  int rc = t ? clt__trainer_norm_input(t, x, n, &use, &copy) : CLT_OK;
  if (rc < 0) return rc;
  rc = step_raw(t, t ? use : x, tg, n, out);
  if (t) free(copy);
  return rc;
}

static int step_raw(clt_trainer *t, const float *x, const step_targets *tg, int64_t n, clt_step_result *out) {
  int rc = CLT_OK;
  caller_batch c;
  memset(&c, 0, sizeof c);
  if (!t) return clt__null_arg(tg->fn, "t", "trainer");
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
  c.chunk = t->s.room; /* what each replica has room for */
  if (t->s.split) { /* a pipeline's samples in its micro-batches */
    int M = t->s.split;
    c.chunk = n > 0 ? (n + M - 1) / M : 1;
    if (c.chunk > t->s.room)
      rc = clt__error(CLT_EINVAL, "%s: %lld samples on a pipeline of %d micro-batches of at most %lld (the batch "
                      "size / micro-batches / replicas of a stage, as the trainer was made); pass fewer or make it "
                      "with a larger batch", tg->fn, (long long)n, M, (long long)t->s.room);
    CLT_TRY(clt__trainer_all_ok(t, rc, tg->fn));
  }
  c.key = (uint64_t)t->micro_steps;
  c.count = clt__calloc(t->nlocal, sizeof *c.count);
  c.start = clt__calloc(t->nlocal, sizeof *c.start);
  if (!c.count || !c.start) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(clt__dp_split_local(t->s.dp, n, c.count));
  c.nmicro = 1;
  for (int i = 0; i < t->nlocal; i++) {
    c.start[i] = i ? c.start[i - 1] + c.count[i - 1] : 0;
    int runs = (int)((c.count[i] + c.chunk - 1) / c.chunk);
    if (runs > c.nmicro) c.nmicro = runs;
  }

  if (c.nmicro > 1 && t->s.one_run) {
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
 * is too small or unreadable, or that the queue has not come to the read
 * within CLT_TIMEOUT (a queue held by an event that never completes, a
 * device that hangs): CLT_ETIMEDOUT naming the device. *pending is 1 when
 * the read may still write into host later (host must then outlive it). */
static int read_buffer(clt_trainer *t, cl_command_queue q, cl_mem buf, const char *name, size_t bytes, void *host,
                       int64_t n, int *pending) {
  size_t have = 0;
  cl_event ev = NULL;
  if (!buf) return clt__error(CLT_EINVAL, "clt_trainer_step_buffers: %s is NULL with n = %lld samples", name, (long long)n);
  cl_int e = clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof have, &have, NULL);
  if (e != CL_SUCCESS)
    return clt__error(CLT_EINVAL, "clt_trainer_step_buffers: %s is not a buffer (OpenCL error %d)", name, (int)e);
  if (have < bytes)
    return clt__error(CLT_EINVAL, "clt_trainer_step_buffers: %s holds %zu bytes, but %lld samples need %zu", name, have,
                      (long long)n, bytes);
  e = clEnqueueReadBuffer(q, buf, CL_FALSE, 0, bytes, host, 0, NULL, &ev);
  if (e == CL_SUCCESS) *pending = 1, e = clFlush(q);
  if (e != CL_SUCCESS && ev) clReleaseEvent(ev);
  if (e != CL_SUCCESS)
    return clt__error(CLT_EINVAL, "clt_trainer_step_buffers: reading %s on the given queue fails (OpenCL error %d)", name,
                      (int)e);
  char what[96];
  snprintf(what, sizeof what, "clt_trainer_step_buffers: reading %s on the caller's queue", name);
  int rc = clt__wait_queue(q, &ev, 1, clt_comm_timeout(t->comm), what);
  clReleaseEvent(ev);
  *pending = rc == CLT_ETIMEDOUT;
  return rc;
}

int clt_trainer_step_buffers(clt_trainer *t, cl_command_queue queue, cl_mem x, cl_mem y, int64_t n,
                             clt_step_result *out) {
  CLT_HANDLE(t, "trainer");
  int regression = clt_model_loss(t->model) != CLT_LOSS_CROSSENTROPY;
  int64_t in = clt_model_input_size(t->model), lps = clt_model_labels_per_sample(t->model);
  step_targets tg = {.fn = "clt_trainer_step_buffers", .regression = regression, .count = n * lps};
  float *hx = NULL;
  void *hy = NULL;
  int rc = CLT_OK, pending = 0;
  if (n < 0)
    rc = clt__error(CLT_EINVAL, "clt_trainer_step_buffers: n is %lld; it must be 0 or more", (long long)n);
  else if (n > 0 && (!queue || !x || !y))
    rc = clt__error(CLT_EINVAL, "clt_trainer_step_buffers: %s is NULL with n = %lld samples",
                    !queue ? "queue" : !x ? "x" : "y", (long long)n);
  else if (n > 0 && (!(hx = malloc((size_t)(n * in) * sizeof *hx)) || !(hy = malloc((size_t)(n * lps) * 4))))
    rc = clt__error(CLT_ENOMEM, "clt_trainer_step_buffers: no host memory to stage %lld samples", (long long)n);
  if (rc == CLT_OK && n > 0) rc = read_buffer(t, queue, x, "x", (size_t)(n * in) * sizeof *hx, hx, n, &pending);
  if (rc == CLT_OK && n > 0) rc = read_buffer(t, queue, y, "y", (size_t)(n * lps) * 4, hy, n, &pending);
  tg.failed = rc;
  if (regression) tg.values = hy;
  else tg.labels = hy;
  rc = step_on(t, hx, &tg, rc < 0 ? 0 : n, out);
  if (pending) /* a read still queued writes there whenever the queue gets to it */
    clt__log(CLT_LOG_DEBUG, "clt_trainer_step_buffers: the host copies of x and y are left to the reads still queued");
  else
    free(hx), free(hy);
  return rc;
}
