/*
 * fit.c: the training loop: epochs, evaluation, events and checkpoints
 * around clt__trainer_train_step (step.c), whose micro-batches come from
 * here: every local replica takes its slice of each of `accumulate`
 * micro-batches from its prefetcher (fit_next). Events go to the callback
 * and as JSON Lines metrics and TensorBoard event files from rank 0
 * (metrics.c), after the run record (run_record.c); rank 0's timed
 * PROGRESS events to the callback alone.
 */
#include "core/outfile.h"
#include "io/tensorboard.h"
#include "train/trainer.h"

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

/* New shares reach the prefetchers from their next batch on (and fit's
 * own sampler, which says how a short batch was split). */
static int apply_shares(clt_trainer *t, clt_sampler *smp, clt_prefetcher **pf, int64_t *first) {
  int rc = CLT_OK;
  CLT_TRY(clt_sampler_set_shares(smp, clt__dp_replicas(t->s.dp), clt__dp_shares(t->s.dp)));
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
  double wait_s;           /* seconds this rank waited for the prefetchers since the last record */
} fit_source;

static int fit_next(void *self, clt_trainer *t, int k, clt__slice *s, int64_t *labels, int *last) {
  int rc = CLT_OK;
  fit_source *f = self;
  double w0 = now_s();
  for (int i = 0; i < t->nlocal; i++) CLT_TRY(clt_prefetcher_next(f->pf[i], &f->b[i]));
  f->wait_s += now_s() - w0;
  uint64_t key = (uint64_t)t->micro_steps++; /* every micro-batch draws its own dropout masks */
  for (int i = 0; i < t->nlocal; i++)
    s[i] = (clt__slice){f->b[i].x, f->b[i].y, f->b[i].n, f->first[i], key, f->b[i].targets};
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
  int64_t window_steps;    /* steps since then */
  int64_t first_step;      /* steps_done when fit started */
  double progress_t;       /* the last PROGRESS event (t0 before the first) */
  int64_t progress_samples; /* global samples since then */
} fit_clock;

/* A model of tokens: positions per sample (tokens/s); else 0. */
static int64_t tokens_per_sample(const clt_trainer *t) {
  return clt_model_vocab(t->model) > 0 ? clt_model_input_size(t->model) : 0;
}

/* What a STEP and a PROGRESS event share: where training stands, the
 * step's loss, the rate over `seconds` for `samples` and the time left. */
static void event_base(clt_trainer *t, const clt__step_stats *st, int64_t epoch, int64_t steps_total,
                       int64_t steps_per_epoch, const fit_clock *c, double tn, int64_t samples, double seconds,
                       clt_train_event *ev) {
  const clt_train_options *o = &t->opts;
  int64_t T = tokens_per_sample(t);
  memset(ev, 0, sizeof *ev);
  ev->epoch = epoch + 1, ev->epochs = o->epochs;
  ev->step = t->steps_done, ev->steps_total = steps_total;
  ev->step_in_epoch = t->progress.ep_steps, ev->steps_per_epoch = steps_per_epoch;
  ev->loss = st->loss_sum / (double)st->labels;
  ev->accuracy = clt__trainer_regression(t) ? sqrt(st->correct / (double)st->labels) /* the RMSE */
                                            : st->correct / (double)st->labels;
  ev->lr = clt_schedule_lr(&o->schedule, t->steps_done - 1);
  ev->samples_per_s = samples / (seconds > 1e-9 ? seconds : 1e-9);
  ev->tokens_per_s = T ? ev->samples_per_s * (double)T : NAN;
  ev->elapsed_s = tn - c->t0;
  /* to the run's end (max_steps or the last epoch), at this fit's pace so far */
  ev->eta_s = (tn - c->t0) / (double)(t->steps_done - c->first_step) * (double)(steps_total - t->steps_done);
  ev->test_loss = ev->test_accuracy = NAN;
  ev->grad_norm = NAN;
  ev->prefetch_wait_s = NAN;
  ev->flops_per_sample = t->flops_per_sample;
}

/* Per replica of rank 0's group: the FLOP/s its throughput gives, and its
 * share of its device's peak. */
static void flops_of(const clt_trainer *t, const double *throughput, double *flops, double *mfu) {
  for (int r = 0; r < clt__dp_replicas(t->s.dp); r++) {
    flops[r] = throughput[r] * t->flops_per_sample;
    double peak = t->peak_flops ? t->peak_flops[r] : 0;
    mfu[r] = peak > 0 && throughput[r] > 0 ? flops[r] / peak : NAN;
  }
}

/* The event of the step just done (st), which starts a new window. */
static void step_event(clt_trainer *t, const clt__step_stats *st, int64_t epoch, int64_t steps_total,
                       int64_t steps_per_epoch, fit_clock *c, clt_train_event *ev) {
  const clt_train_options *o = &t->opts;
  double tn = now_s(), comm_s, hidden_s;
  clt__dp_comm_time(t->s.dp, &comm_s, &hidden_s, 1);
  event_base(t, st, epoch, steps_total, steps_per_epoch, c, tn, c->window_samples, tn - c->window_t, ev);
  ev->kind = CLT_EVENT_STEP;
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
  c->window_steps = 0;
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
  clt__sinks out;
  fit_source src;
  fit_clock clock;
  int64_t steps_per_epoch, steps_total;
  int64_t *ran, *idx;                      /* rank 0: per replica, its share of a short batch; the sampler's
                                              indices of one replica's slice */
  double *waits;                           /* per rank: its prefetch wait per step */
  double *flops, *mfu;                     /* rank 0, per replica: the last step record's */
  int have_flops;
  int64_t eval_step;                       /* the step eval_every last evaluated after (0: none) */
  double eval_loss, eval_accuracy;         /* and what it found */
} fit_state;

/* Rank 0: the shares of the step's last micro-batch: the replicas' shares,
 * or for an epoch's short last batch how the sampler split it. */
static const int64_t *step_shares(clt_trainer *t, fit_state *f) {
  const int64_t *shares = clt__dp_shares(t->s.dp);
  if (t->rank != 0 || f->b[0].global_n >= t->s.micro_batch) return shares;
  for (int r = 0; r < clt__dp_replicas(t->s.dp); r++)
    if (clt_sampler_slice(f->smp, f->b[0].epoch, f->b[0].step, r, f->idx, &f->ran[r]) < 0) return shares;
  return f->ran;
}

/* Collective: the mean wait for the prefetchers per step since the last
 * record, the most of any rank. */
static int prefetch_wait(clt_trainer *t, fit_state *f, double *out) {
  int rc = CLT_OK;
  double mine = f->clock.window_steps ? f->src.wait_s / (double)f->clock.window_steps : 0;
  f->src.wait_s = 0;
  *out = mine;
  if (t->nranks > 1) CLT_TRY(clt_allgather(t->comm, &mine, sizeof mine, f->waits));
  for (int r = 0; t->nranks > 1 && r < t->nranks; r++)
    if (f->waits[r] > *out) *out = f->waits[r];
fail:
  return rc;
}

/* Rank 0, every progress_s seconds: the PROGRESS event, to the callback. */
static void progress_event(clt_trainer *t, fit_state *f, const clt__step_stats *st, int64_t epoch) {
  fit_clock *c = &f->clock;
  double tn = now_s();
  if (t->rank != 0 || !(t->opts.progress_s > 0) || !t->opts.callback) return;
  double since = c->progress_t > 0 ? c->progress_t : c->t0;
  if (tn - since < t->opts.progress_s) return;
  clt_train_event ev;
  event_base(t, st, epoch, f->steps_total, f->steps_per_epoch, c, tn, c->progress_samples, tn - since, &ev);
  ev.kind = CLT_EVENT_PROGRESS;
  t->opts.callback(&ev, t->opts.callback_user);
  c->progress_t = tn;
  c->progress_samples = 0;
}

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
  else if (clt__trainer_regression(t) != (clt_dataset_targets_per_sample(train) > 0))
    rc = clt__trainer_targets_mismatch(t, train);
  else if (clt_dataset_targets_per_sample(train) > 0 && clt_dataset_targets_per_sample(train) != clt_model_labels_per_sample(t->model))
    rc = clt__error(CLT_ESHAPE, "%s has %lld targets per sample but the model gives %d outputs (a target column for each: "
                    "--target COLS)", clt_dataset_path(train), (long long)clt_dataset_targets_per_sample(train),
                    clt_model_labels_per_sample(t->model));
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

int clt__trainer_targets_mismatch(const clt_trainer *t, const clt_dataset *ds) {
  if (clt__trainer_regression(t))
    return clt__error(CLT_EINVAL, "%s holds class labels, but the model is a regression model (loss %s) and learns "
                      "float targets: open the data as regression (clt_data_options.regression)", clt_dataset_path(ds),
                      clt_loss_name(clt_model_loss(t->model)));
  return clt__error(CLT_EINVAL, "%s holds float targets, but the model is a classifier (loss crossentropy) and learns "
                    "class labels (for regression the spec ends in 'loss mse')", clt_dataset_path(ds));
}

/* Every output before the first step, and every rank learns rank 0's
 * answer; the metrics begin with what every replica holds (memory.c). */
static int open_outputs(clt_trainer *t, clt__sinks *out) {
  int rc = CLT_OK;
  const clt_train_options *o = &t->opts;
  if (t->rank == 0 && o->metrics_path) rc = clt__output_open_append("the metrics file", o->metrics_path, &out->metrics);
  if (rc == CLT_OK && t->rank == 0 && o->tensorboard_dir) rc = clt__tb_open(o->tensorboard_dir, &out->tb);
  if (rc == CLT_OK && t->rank == 0) rc = clt__checkpoint_dir_check(t);
  CLT_TRY(clt__trainer_share_status(t, rc));
  rc = clt__trainer_run_record(t, out->metrics); /* the first record: what the run is */
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
  int R = clt__dp_replicas(dp);
  f->ran = clt__calloc(R, sizeof *f->ran);
  f->idx = clt__calloc((size_t)t->s.micro_batch, sizeof *f->idx);
  f->waits = clt__calloc(t->nranks, sizeof *f->waits);
  f->flops = clt__calloc(R, sizeof *f->flops);
  f->mfu = clt__calloc(R, sizeof *f->mfu);
  if (!f->pf || !f->b || !f->first || !f->ran || !f->idx || !f->waits || !f->flops || !f->mfu) return CLT_ENOMEM;
  for (int i = 0; i < t->nlocal; i++)
    CLT_TRY(clt_prefetcher_create(train, f->smp, clt__dp_first_replica(dp) + i, t->ctx[i], &f->pf[i]));
  /* Replica i's slice starts at the sum of the shares before it. */
  for (int i = 0; i < t->nlocal; i++)
    for (int g = 0; g < clt__dp_first_replica(dp) + i; g++) f->first[i] += clt_sampler_share(f->smp, g);
  int64_t micro_per_epoch = clt_sampler_steps_per_epoch(f->smp);
  f->steps_per_epoch = (micro_per_epoch + o->accumulate - 1) / o->accumulate;
  f->steps_total = f->steps_per_epoch * o->epochs;
  if (o->max_steps > 0 && o->max_steps < f->steps_total) f->steps_total = o->max_steps;
  f->clock = (fit_clock){.t0 = now_s(), .first_step = t->steps_done};
  f->clock.window_t = f->clock.t0;
  f->src = (fit_source){f->pf, f->b, f->first, 0, 0, 0};
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
  /* An epoch's last step is evaluated by end_epoch, which follows it; the
   * run's last in mid-epoch (max_steps) here, and end_epoch reuses it. */
  int last = f->src.last_in_epoch;
  int eval = o->eval_every > 0 && test && t->steps_done % o->eval_every == 0 && !last;
  int log = eval || (o->log_every > 0 && (t->steps_done % o->log_every == 0 || last || t->steps_done == f->steps_total));
  /* the split this step ran with, before a new one takes effect */
  const int64_t *shares = log ? step_shares(t, f) : NULL;
  if (st->shares_changed) CLT_TRY(apply_shares(t, f->smp, f->pf, f->first));
  if (st->counted) { /* a skipped overflow leaves the epoch's means alone */
    t->progress.ep_sums[0] += st->loss_sum;
    t->progress.ep_sums[1] += st->correct;
    t->progress.ep_sums[2] += (double)st->labels;
  }
  t->progress.ep_steps++;
  f->clock.window_samples += f->src.samples;
  f->clock.window_steps++;
  f->clock.progress_samples += f->src.samples;
  clt_prefetcher_position(f->pf[0], &t->progress.pos);
  if (log) {
    double wait;
    if (o->balance != CLT_BALANCE_AUTO) CLT_TRY(clt__dp_gather_rates(clt__trainer_dp(t))); /* auto has them fresh */
    CLT_TRY(prefetch_wait(t, f, &wait));
    step_event(t, st, epoch, f->steps_total, f->steps_per_epoch, &f->clock, &ev);
    ev.prefetch_wait_s = wait;
    if (shares != clt__dp_shares(t->s.dp) && t->rank == 0) ev.shares = shares;
    if (t->rank == 0) {
      flops_of(t, ev.throughput, f->flops, f->mfu);
      f->have_flops = 1;
      ev.flops = f->flops, ev.peak_flops = t->peak_flops, ev.mfu = f->mfu;
    }
    if (eval) {
      int64_t e0 = clt__trace_ns();
      CLT_TRY(clt_trainer_evaluate(t, test, &ev.test_loss, &ev.test_accuracy));
      clt__trace_span(t->timeline.trace, t->timeline.host, "eval", e0, clt__trace_ns(), "evaluation");
      f->eval_step = t->steps_done, f->eval_loss = ev.test_loss, f->eval_accuracy = ev.test_accuracy;
      clt__log(CLT_LOG_INFO, "step %lld: test loss %.4f, accuracy %.4f", (long long)t->steps_done, ev.test_loss,
               ev.test_accuracy);
    }
    CLT_TRY(clt__trainer_emit(t, &f->out, &ev));
  }
  progress_event(t, f, st, epoch);
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
  ev.accuracy = clt__trainer_regression(t) ? sqrt(ep_sums[1] / ep_sums[2]) : ep_sums[1] / ep_sums[2];
  ev.lr = clt_schedule_lr(&o->schedule, t->steps_done - 1);
  ev.elapsed_s = now_s() - f->clock.t0;
  ev.samples_per_s = NAN;
  ev.tokens_per_s = NAN;
  ev.grad_norm = NAN;
  ev.prefetch_wait_s = NAN;
  ev.test_loss = ev.test_accuracy = NAN;
  ev.flops_per_sample = t->flops_per_sample;
  if (f->have_flops) { /* the last step record's rates */
    ev.nreplicas = clt__dp_replicas(t->s.dp);
    ev.flops = f->flops, ev.peak_flops = t->peak_flops, ev.mfu = f->mfu;
  }
  if (test && f->eval_step == t->steps_done) { /* the step just evaluated: the same weights, the same result */
    ev.test_loss = f->eval_loss, ev.test_accuracy = f->eval_accuracy;
  } else if (test) {
    int64_t e0 = clt__trace_ns();
    CLT_TRY(clt_trainer_evaluate(t, test, &ev.test_loss, &ev.test_accuracy));
    clt__trace_span(t->timeline.trace, t->timeline.host, "eval", e0, clt__trace_ns(), "evaluation, epoch %lld",
                    (long long)epoch + 1);
  }
  CLT_TRY(clt__trainer_emit(t, &f->out, &ev));
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
  free(f.ran), free(f.idx), free(f.waits), free(f.flops), free(f.mfu);
  clt_sampler_destroy(f.smp);
  if (f.out.metrics) fclose(f.out.metrics);
  clt__tb_close(f.out.tb);
  return rc;
}
