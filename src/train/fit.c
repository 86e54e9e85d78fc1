/*
 * fit.c: the training loop: epochs, evaluation, events and checkpoints
 * around clt__trainer_train_step (step.c), whose micro-batches come from
 * here: every local replica takes its slice of each of `accumulate`
 * micro-batches from its prefetcher (fit_next). Events go to the callback
 * and as JSON Lines metrics and TensorBoard event files from rank 0.
 */
#include "core/outfile.h"
#include "io/tensorboard.h"
#include "train/trainer.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* NaN becomes JSON null. */
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* New shares reach the prefetchers from their next batch on. */
static int apply_shares(clt_trainer *t, clt_prefetcher **pf, int64_t *first) {
  int rc = CLT_OK;
  for (int i = 0; i < t->nlocal; i++) CLT_TRY(clt_prefetcher_set_shares(pf[i], clt__dp_replicas(t->s.dp), clt__dp_shares(t->s.dp)));
  for (int i = 0; i < t->nlocal; i++) first[i] = clt__dp_slice_start(t->s.dp, i);
fail:
  return rc;
}

/* fit's micro-batches: each replica's next slice from its prefetcher.
 * Accumulation ends a step after `accumulate` micro-batches, or early at
 * an epoch's end, which is known only once the batch is in hand. */
typedef struct fit_source {
  clt_prefetcher **pf;
  clt_batch *b;            /* per local replica: its current slice */
  int64_t *first;          /* per local replica: where its slice starts in a global batch */
  int last_in_epoch;       /* the last micro-batch was the epoch's last */
  int64_t samples;         /* global samples taken since the caller zeroed it */
} fit_source;

static int fit_next(void *self, clt_trainer *t, int k, clt__slice *s, int64_t *labels, int *last) {
  int rc = CLT_OK;
  fit_source *f = self;
  for (int i = 0; i < t->nlocal; i++) CLT_TRY(clt_prefetcher_next(f->pf[i], &f->b[i]));
  uint64_t key = (uint64_t)t->micro_steps++; /* every micro-batch draws its own dropout masks */
  for (int i = 0; i < t->nlocal; i++)
    s[i] = (clt__slice){f->b[i].x, f->b[i].y, f->b[i].n, f->first[i], key, NULL};
  f->last_in_epoch = f->b[0].last_in_epoch;
  f->samples += f->b[0].global_n;
  *labels = f->b[0].global_labels; /* less masked targets */
  *last = k == t->opts.accumulate - 1 || f->last_in_epoch;
fail:
  return rc;
}

/* Time and samples for the step events' rates. */
typedef struct fit_clock {
  double t0, window_t;     /* fit's start; the last step event */
  int64_t window_samples;  /* global samples since then */
  int64_t first_step;      /* steps_done when fit started */
} fit_clock;

/* The event of the step just done (st), which starts a new window. */
static void step_event(clt_trainer *t, const clt__step_stats *st, int64_t epoch, int64_t steps_total,
                       int64_t steps_per_epoch, fit_clock *c, clt_train_event *ev) {
  const clt_train_options *o = &t->opts;
  double tn = now_s(), comm_s, hidden_s;
  clt__dp_comm_time(t->s.dp, &comm_s, &hidden_s, 1);
  memset(ev, 0, sizeof *ev);
  ev->kind = CLT_EVENT_STEP;
  ev->epoch = epoch + 1, ev->epochs = o->epochs;
  ev->step = t->steps_done, ev->steps_total = steps_total;
  ev->step_in_epoch = t->progress.ep_steps, ev->steps_per_epoch = steps_per_epoch;
  ev->loss = st->loss_sum / (double)st->labels;
  ev->accuracy = st->correct / (double)st->labels;
  ev->lr = clt_schedule_lr(&o->schedule, t->steps_done - 1);
  ev->samples_per_s = c->window_samples / (tn - c->window_t > 1e-9 ? tn - c->window_t : 1e-9);
  ev->elapsed_s = tn - c->t0;
  ev->eta_s = (tn - c->t0) / (double)(t->steps_done - c->first_step) * (double)(steps_total - t->steps_done);
  ev->test_loss = ev->test_accuracy = NAN;
  ev->grad_norm = st->grad_norm;
  ev->comm_s = comm_s;
  ev->comm_hidden = comm_s > 0 ? hidden_s / comm_s : NAN;
  ev->comm_bytes = clt__dp_comm_bytes(t->s.dp);
  ev->nreplicas = clt__dp_replicas(t->s.dp);
  ev->shares = clt__dp_shares(t->s.dp);
  ev->throughput = clt__dp_throughput(t->s.dp);
  if (o->balance == CLT_BALANCE_AUTO) clt__dp_cost_arrays(t->s.dp, &ev->fixed_s, &ev->per_sample_s);
  ev->loss_scale = t->scaler.scale;
  ev->skipped = t->scaler.skipped;
  c->window_t = tn;
  c->window_samples = 0;
}

/* Rank 0's outputs of events: JSON Lines and TensorBoard (each may be NULL). */
typedef struct sinks {
  FILE *metrics;
  clt__tb *tb;
} sinks;

/* The event's scalars for TensorBoard, named as in the JSON Lines (an
 * epoch's under epoch/). */
static int emit_tb(clt__tb *tb, const clt_train_event *ev) {
  enum { FIXED = 12, MAX_TAGS = FIXED + 4 * 64 };
  const char *tags[MAX_TAGS];
  double v[MAX_TAGS];
  char names[4 * 64][32];
  int n = 0, step = ev->kind == CLT_EVENT_STEP;
#define TB(tag, x) (tags[n] = (tag), v[n++] = (x))
  TB(step ? "loss" : "epoch/loss", ev->loss);
  TB(step ? "accuracy" : "epoch/accuracy", ev->accuracy);
  TB(step ? "test_loss" : "epoch/test_loss", ev->test_loss);
  TB(step ? "test_accuracy" : "epoch/test_accuracy", ev->test_accuracy);
  if (step) {
    TB("lr", ev->lr);
    TB("samples_per_s", ev->samples_per_s);
    TB("grad_norm", ev->grad_norm);
    TB("comm_s", ev->comm_s);
    TB("comm_hidden", ev->comm_hidden);
    TB("loss_scale", ev->loss_scale);
    TB("skipped", (double)ev->skipped);
    for (int r = 0; r < ev->nreplicas && r < 64; r++) {
      snprintf(names[2 * r], sizeof names[0], "replica%d/share", r);
      snprintf(names[2 * r + 1], sizeof names[0], "replica%d/samples_per_s", r);
      TB(names[2 * r], (double)ev->shares[r]);
      TB(names[2 * r + 1], ev->throughput[r]);
    }
    for (int r = 0; ev->fixed_s && ev->per_sample_s && r < ev->nreplicas && r < 64; r++) {
      snprintf(names[128 + 2 * r], sizeof names[0], "replica%d/fixed_s", r);
      snprintf(names[128 + 2 * r + 1], sizeof names[0], "replica%d/per_sample_s", r);
      TB(names[128 + 2 * r], ev->fixed_s[r]);
      TB(names[128 + 2 * r + 1], ev->per_sample_s[r]);
    }
  }
#undef TB
  return clt__tb_scalars(tb, ev->step, n, tags, v);
}

static int emit(clt_trainer *t, const sinks *out, const clt_train_event *ev) {
  if (t->rank != 0) return CLT_OK;
  if (t->opts.callback) t->opts.callback(ev, t->opts.callback_user);
  if (out->tb) {
    int rc = emit_tb(out->tb, ev);
    if (rc < 0) return rc;
  }
  FILE *metrics = out->metrics;
  if (!metrics) return CLT_OK;
  json_t *o = json_object();
  json_object_set_new(o, "event", json_string(ev->kind == CLT_EVENT_STEP ? "step" : "epoch"));
  json_object_set_new(o, "epoch", json_integer(ev->epoch));
  json_object_set_new(o, "step", json_integer(ev->step));
  json_object_set_new(o, "loss", num(ev->loss));
  json_object_set_new(o, "accuracy", num(ev->accuracy));
  json_object_set_new(o, "lr", num(ev->lr));
  json_object_set_new(o, "samples_per_s", num(ev->samples_per_s));
  json_object_set_new(o, "elapsed_s", num(ev->elapsed_s));
  if (ev->kind == CLT_EVENT_STEP) {
    if (isfinite(ev->test_loss)) { /* an evaluation of eval_every */
      json_object_set_new(o, "test_loss", num(ev->test_loss));
      json_object_set_new(o, "test_accuracy", num(ev->test_accuracy));
    }
    json_object_set_new(o, "grad_norm", num(ev->grad_norm));
    json_object_set_new(o, "comm_s", num(ev->comm_s));
    json_object_set_new(o, "comm_hidden", num(ev->comm_hidden));
    json_object_set_new(o, "comm_bytes", num(ev->comm_bytes));
    json_t *sh = json_array(), *tp = json_array();
    for (int r = 0; r < ev->nreplicas; r++) {
      json_array_append_new(sh, json_integer(ev->shares[r]));
      json_array_append_new(tp, num(ev->throughput[r]));
    }
    json_object_set_new(o, "shares", sh);
    json_object_set_new(o, "throughput", tp);
    /* the replicas at 0 samples, said outright; and auto's cost models */
    json_t *idle = json_array();
    for (int r = 0; r < ev->nreplicas; r++)
      if (ev->shares[r] == 0) json_array_append_new(idle, json_integer(r));
    json_object_set_new(o, "idle_replicas", idle);
    if (ev->fixed_s && ev->per_sample_s) {
      json_t *fx = json_array(), *ps = json_array();
      for (int r = 0; r < ev->nreplicas; r++) {
        json_array_append_new(fx, num(ev->fixed_s[r]));
        json_array_append_new(ps, num(ev->per_sample_s[r]));
      }
      json_object_set_new(o, "fixed_s", fx);
      json_object_set_new(o, "per_sample_s", ps);
    }
    json_object_set_new(o, "loss_scale", num(ev->loss_scale));
    json_object_set_new(o, "skipped", json_integer(ev->skipped));
  } else {
    json_object_set_new(o, "test_loss", num(ev->test_loss));
    json_object_set_new(o, "test_accuracy", num(ev->test_accuracy));
  }
  return clt__trainer_metrics_write(t, metrics, o);
}

int clt__trainer_metrics_write(clt_trainer *t, FILE *metrics, json_t *o) {
  errno = 0;
  int bad = json_dumpf(o, metrics, JSON_COMPACT) < 0 || fputc('\n', metrics) == EOF || fflush(metrics) == EOF;
  int err = errno;
  json_decref(o);
  if (!bad) return CLT_OK;
  return clt__error(CLT_EIO, "writing metrics to %s failed: %s", t->opts.metrics_path,
                    err ? strerror(err) : "the write came short");
}

/* A periodic checkpoint, on the timeline when one is recorded. */
static int checkpoint(clt_trainer *t) {
  int64_t c0 = clt__trace_ns();
  int rc = clt__trainer_checkpoint_to_dir(t);
  clt__trace_span(t->timeline.trace, t->timeline.host, "checkpoint", c0, clt__trace_ns(), "checkpoint at step %lld",
                  (long long)t->steps_done);
  return rc;
}

/* What a fit holds while it runs. */
typedef struct fit_state {
  clt_sampler *smp;
  clt_prefetcher **pf;
  clt_batch *b;
  int64_t *first;                          /* per local replica: where its slice starts in a global batch */
  sinks out;
  fit_source src;
  fit_clock clock;
  int64_t steps_per_epoch, steps_total;
} fit_state;

/* Each rank checks its own data, and all learn of any failure: a rank
 * that returned alone would leave the others waiting in a collective.
 * Then the ranks compare their training and test sets (same_data.c), so
 * other data on one rank stops the run before its first step, not at its
 * first evaluation. */
static int check_data(clt_trainer *t, const clt_dataset *train, const clt_dataset *test) {
  int rc = CLT_OK;
  int64_t in = clt_model_input_size(t->model);
  if (!train)
    rc = clt__null_arg("clt_trainer_fit", "train", "training set");
  else if (clt_dataset_sample_size(train) != in)
    rc = clt__error(CLT_ESHAPE, "%s has samples of %lld values but the model's input takes %lld",
                    clt_dataset_path(train), (long long)clt_dataset_sample_size(train), (long long)in);
  else if (clt_dataset_labels_per_sample(train) != clt_model_labels_per_sample(t->model))
    rc = clt__error(CLT_ESHAPE, "%s has %lld labels per sample but the model takes %d (%s)", clt_dataset_path(train),
                    (long long)clt_dataset_labels_per_sample(train), clt_model_labels_per_sample(t->model),
                    clt_model_labels_per_sample(t->model) == 1 ? "a classifier, and this is a token dataset"
                                                               : "one per position");
  else if (clt_dataset_num_classes(train) > clt_model_num_classes(t->model))
    rc = clt__error(CLT_ESHAPE, "%s has %d classes but the model's last layer gives %d scores",
                    clt_dataset_path(train), clt_dataset_num_classes(train), clt_model_num_classes(t->model));
  CLT_TRY(clt__trainer_all_ok(t, rc, "checking the training set"));
  CLT_TRY(clt__trainer_same_data(t, train, "trains on"));
  CLT_TRY(clt__trainer_same_data(t, test, "evaluates on")); /* a test set on some ranks only too */
fail:
  return rc;
}

/* Every output before the first step, and every rank learns rank 0's
 * answer; the metrics begin with what every replica holds (memory.c). */
static int open_outputs(clt_trainer *t, sinks *out) {
  int rc = CLT_OK;
  const clt_train_options *o = &t->opts;
  if (t->rank == 0 && o->metrics_path) rc = clt__output_open_append("the metrics file", o->metrics_path, &out->metrics);
  if (rc == CLT_OK && t->rank == 0 && o->tensorboard_dir) rc = clt__tb_open(o->tensorboard_dir, &out->tb);
  if (rc == CLT_OK && t->rank == 0) rc = clt__checkpoint_dir_check(t);
  CLT_TRY(clt__trainer_share_status(t, rc));
  rc = clt__trainer_memory_records(t, out->metrics);
  CLT_TRY(clt__trainer_share_status(t, rc));
fail:
  return rc;
}

/* The sampler from where the trainer stands (a loaded checkpoint, or an
 * earlier fit: the position means something only on the same data), and
 * each local replica's prefetcher. */
static int open_data(clt_trainer *t, const clt_dataset *train, fit_state *f) {
  int rc = CLT_OK;
  const clt_train_options *o = &t->opts;
  clt__dp *dp = clt__trainer_dp(t);
  int64_t count = clt_dataset_count(train);
  if (t->progress.count && t->progress.count != count)
    return clt__error(CLT_EMISMATCH, "the checkpoint was taken %lld samples into epoch %lld of a training set of %lld "
                      "samples, and %s has %lld: resume on the same training set",
                      (long long)(t->progress.pos.step * t->s.micro_batch), (long long)t->progress.pos.epoch + 1,
                      (long long)t->progress.count, clt_dataset_path(train), (long long)count);
  CLT_TRY(clt_sampler_create(count, t->s.micro_batch, o->seed, o->drop_last ? CLT_SAMPLER_DROP_LAST : 0, &f->smp));
  CLT_TRY(clt_sampler_set_shares(f->smp, clt__dp_replicas(dp), clt__dp_shares(dp)));
  if (clt_sampler_set_position(f->smp, t->progress.pos) < 0)
    return clt__error(CLT_EMISMATCH, "the checkpoint's position, batch %lld of epoch %lld, is past the %lld batches of "
                      "an epoch of %s here (was --drop-last or the batch size different?)",
                      (long long)t->progress.pos.step + 1, (long long)t->progress.pos.epoch + 1,
                      (long long)clt_sampler_steps_per_epoch(f->smp), clt_dataset_path(train));
  t->progress.count = count;
  f->pf = clt__calloc(t->nlocal, sizeof *f->pf);
  f->b = clt__calloc(t->nlocal, sizeof *f->b);
  f->first = clt__calloc(t->nlocal, sizeof *f->first);
  if (!f->pf || !f->b || !f->first) return CLT_ENOMEM;
  for (int i = 0; i < t->nlocal; i++)
    CLT_TRY(clt_prefetcher_create(train, f->smp, clt__dp_first_replica(dp) + i, t->ctx[i], &f->pf[i]));
  /* Replica i's slice starts at the sum of the shares before it. */
  for (int i = 0; i < t->nlocal; i++)
    for (int g = 0; g < clt__dp_first_replica(dp) + i; g++) f->first[i] += clt_sampler_share(f->smp, g);
  int64_t micro_per_epoch = clt_sampler_steps_per_epoch(f->smp);
  f->steps_per_epoch = (micro_per_epoch + o->accumulate - 1) / o->accumulate;
  f->steps_total = f->steps_per_epoch * o->epochs;
  if (o->max_steps > 0 && o->max_steps < f->steps_total) f->steps_total = o->max_steps;
  f->clock = (fit_clock){now_s(), 0, 0, t->steps_done};
  f->clock.window_t = f->clock.t0;
  f->src = (fit_source){f->pf, f->b, f->first, 0, 0};
fail:
  return rc;
}

/* After a step: its sums into the epoch's, its event when a record or an
 * evaluation is due (the epoch's own comes with its summary), and a
 * periodic checkpoint (one due at an epoch's last step waits for the
 * epoch's summary). */
static int after_step(clt_trainer *t, fit_state *f, const clt__step_stats *st, int64_t epoch, const clt_dataset *test) {
  int rc = CLT_OK;
  const clt_train_options *o = &t->opts;
  clt_train_event ev;
  if (st->shares_changed) CLT_TRY(apply_shares(t, f->pf, f->first));
  if (st->counted) { /* a skipped overflow leaves the epoch's means alone */
    t->progress.ep_sums[0] += st->loss_sum;
    t->progress.ep_sums[1] += st->correct;
    t->progress.ep_sums[2] += (double)st->labels;
  }
  t->progress.ep_steps++;
  f->clock.window_samples += f->src.samples;
  clt_prefetcher_position(f->pf[0], &t->progress.pos);
  int last = f->src.last_in_epoch;
  int eval = o->eval_every > 0 && test && t->steps_done % o->eval_every == 0 && !last;
  int log = eval || (o->log_every > 0 && (t->steps_done % o->log_every == 0 || last || t->steps_done == f->steps_total));
  if (log) {
    if (o->balance != CLT_BALANCE_AUTO) CLT_TRY(clt__dp_gather_rates(clt__trainer_dp(t))); /* auto has them fresh */
    step_event(t, st, epoch, f->steps_total, f->steps_per_epoch, &f->clock, &ev);
    if (eval) {
      int64_t e0 = clt__trace_ns();
      CLT_TRY(clt_trainer_evaluate(t, test, &ev.test_loss, &ev.test_accuracy));
      clt__trace_span(t->timeline.trace, t->timeline.host, "eval", e0, clt__trace_ns(), "evaluation");
      clt__log(CLT_LOG_INFO, "step %lld: test loss %.4f, accuracy %.4f", (long long)t->steps_done, ev.test_loss,
               ev.test_accuracy);
    }
    CLT_TRY(emit(t, &f->out, &ev));
  }
  if (o->checkpoint_dir && o->checkpoint_every > 0 && t->steps_done % o->checkpoint_every == 0 && !last)
    CLT_TRY(checkpoint(t));
fail:
  return rc;
}

/* The epoch's summary (ep_sums already hold all ranks' sums), its
 * evaluation, and when it is whole its checkpoint. */
static int end_epoch(clt_trainer *t, fit_state *f, int64_t epoch, const clt_dataset *test) {
  int rc = CLT_OK;
  const clt_train_options *o = &t->opts;
  const double *ep_sums = t->progress.ep_sums; /* loss, correct, labels */
  clt_train_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = CLT_EVENT_EPOCH;
  ev.epoch = epoch + 1, ev.epochs = o->epochs;
  ev.step = t->steps_done, ev.steps_total = f->steps_total;
  ev.step_in_epoch = t->progress.ep_steps, ev.steps_per_epoch = f->steps_per_epoch;
  ev.loss = ep_sums[0] / ep_sums[2];
  ev.accuracy = ep_sums[1] / ep_sums[2];
  ev.lr = clt_schedule_lr(&o->schedule, t->steps_done - 1);
  ev.elapsed_s = now_s() - f->clock.t0;
  ev.samples_per_s = NAN;
  ev.grad_norm = NAN;
  ev.test_loss = ev.test_accuracy = NAN;
  if (test) {
    int64_t e0 = clt__trace_ns();
    CLT_TRY(clt_trainer_evaluate(t, test, &ev.test_loss, &ev.test_accuracy));
    clt__trace_span(t->timeline.trace, t->timeline.host, "eval", e0, clt__trace_ns(), "evaluation, epoch %lld",
                    (long long)epoch + 1);
  }
  CLT_TRY(emit(t, &f->out, &ev));
  if (f->src.last_in_epoch) { /* the epoch is whole: the next one starts from zero */
    memset(t->progress.ep_sums, 0, sizeof t->progress.ep_sums);
    t->progress.ep_steps = 0;
    if (o->checkpoint_dir && (o->checkpoint_every == 0 || t->steps_done % o->checkpoint_every == 0))
      CLT_TRY(checkpoint(t));
  }
fail:
  return rc;
}

int clt_trainer_fit(clt_trainer *t, const clt_dataset *train, const clt_dataset *test) {
  int rc = CLT_OK;
  CLT_HANDLE(t, "trainer");
  const clt_train_options *o = &t->opts;
  fit_state f;
  memset(&f, 0, sizeof f);
  /* The model is the same on every rank, so every rank returns here alike. */
  if (clt_model_loss(t->model) != CLT_LOSS_CROSSENTROPY)
    return clt__error(CLT_EINVAL, "clt_trainer_fit: the model is a regression model (loss %s) and datasets hold "
                      "int32 class labels; train it on float targets with clt_trainer_step_targets",
                      clt_loss_name(clt_model_loss(t->model)));
  CLT_TRY(check_data(t, train, test));
  CLT_TRY(open_outputs(t, &f.out));
  CLT_TRY(open_data(t, train, &f));
  clt__micro_source step_src = {fit_next, &f.src};
  for (int64_t epoch = t->progress.pos.epoch; epoch < o->epochs && t->steps_done < f.steps_total; epoch++) {
    f.src.last_in_epoch = 0;
    while (!f.src.last_in_epoch && t->steps_done < f.steps_total) {
      clt__step_stats st;
      f.src.samples = 0;
      CLT_TRY(clt__trainer_train_step(t, &step_src, &st));
      CLT_TRY(after_step(t, &f, &st, epoch, test));
    }
    CLT_TRY(end_epoch(t, &f, epoch, test));
  }
  /* The state fit() ends with, unless that is saved already. */
  if (o->checkpoint_dir && t->run.saved_step != t->steps_done) CLT_TRY(checkpoint(t));
fail:
  for (int i = 0; f.pf && i < t->nlocal; i++) clt_prefetcher_destroy(f.pf[i]);
  free(f.pf);
  free(f.b);
  free(f.first);
  clt_sampler_destroy(f.smp);
  if (f.out.metrics) fclose(f.out.metrics);
  clt__tb_close(f.out.tb);
  return rc;
}
