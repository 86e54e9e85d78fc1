/*
 * fit.c: the training loop. Each optimizer step: every local replica takes
 * its slice of each of `accumulate` micro-batches from its prefetcher and
 * runs forward, loss and backward (gradients accumulate in its arena); then
 * the gradients are summed over all replicas and the update is applied
 * (trainer.c). Evaluation after each epoch, events to the callback and JSON
 * Lines metrics from rank 0.
 */
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

/* Every rank must train on the same data: compare the sample count and
 * shape across ranks before the first step. */
static int check_same_data(clt_trainer *t, const clt_dataset *ds) {
  if (t->nranks == 1) return CLT_OK;
  int64_t mine[2] = {clt_dataset_count(ds), clt_dataset_sample_size(ds)};
  int64_t *all = clt__calloc((size_t)t->nranks * 2, sizeof *all);
  if (!all) return CLT_ENOMEM;
  int rc = clt_allgather(t->comm, mine, sizeof mine, all);
  for (int r = 1; rc == CLT_OK && r < t->nranks; r++)
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
      rc = clt__error(CLT_EMISMATCH, "rank %d trains on %lld samples of %lld values but rank 0 on %lld of %lld; "
                      "every rank must read the same dataset", r, (long long)all[2 * r], (long long)all[2 * r + 1],
                      (long long)all[0], (long long)all[1]);
  free(all);
  return rc;
}

/* Where each local replica's slice starts in a full global batch (the
 * sum of the shares before it): the global index that keys dropout masks. */
static void slice_starts(const clt_trainer *t, int64_t *first) {
  for (int i = 0; i < t->nlocal; i++) {
    first[i] = 0;
    for (int g = 0; g < t->first_replica + i; g++) first[i] += t->shares[g];
  }
}

/* New shares reach the prefetchers from their next batch on. */
static int apply_shares(clt_trainer *t, clt_prefetcher **pf, int64_t *first) {
  int rc = CLT_OK;
  for (int i = 0; i < t->nlocal; i++) CLT_TRY(clt_prefetcher_set_shares(pf[i], t->nreplicas, t->shares));
  slice_starts(t, first);
fail:
  return rc;
}

static int emit(clt_trainer *t, FILE *metrics, const clt_train_event *ev) {
  if (t->rank != 0) return CLT_OK;
  if (t->opts.callback) t->opts.callback(ev, t->opts.callback_user);
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
    json_object_set_new(o, "grad_norm", num(ev->grad_norm));
    json_object_set_new(o, "comm_s", num(ev->comm_s));
    json_object_set_new(o, "comm_hidden", num(ev->comm_hidden));
    json_t *sh = json_array(), *tp = json_array();
    for (int r = 0; r < ev->nreplicas; r++) {
      json_array_append_new(sh, json_integer(ev->shares[r]));
      json_array_append_new(tp, num(ev->throughput[r]));
    }
    json_object_set_new(o, "shares", sh);
    json_object_set_new(o, "throughput", tp);
    json_object_set_new(o, "loss_scale", num(ev->loss_scale));
    json_object_set_new(o, "skipped", json_integer(ev->skipped));
  } else {
    json_object_set_new(o, "test_loss", num(ev->test_loss));
    json_object_set_new(o, "test_accuracy", num(ev->test_accuracy));
  }
  int bad = json_dumpf(o, metrics, JSON_COMPACT) < 0 || fputc('\n', metrics) == EOF || fflush(metrics) == EOF;
  json_decref(o);
  return bad ? clt__error(CLT_EIO, "writing metrics to %s failed", t->opts.metrics_path) : CLT_OK;
}

int clt_trainer_fit(clt_trainer *t, const clt_dataset *train, const clt_dataset *test) {
  int rc = CLT_OK;
  const clt_train_options *o = &t->opts;
  clt_sampler *smp = NULL;
  clt_prefetcher **pf = NULL;
  clt_batch *b = NULL;
  FILE *metrics = NULL;
  int64_t *first = NULL; /* per local replica: where its slice starts in a global batch */
  int64_t in = clt_model_input_size(t->model);

  if (clt_dataset_sample_size(train) != in)
    return clt__error(CLT_ESHAPE, "%s has samples of %lld values but the model's input takes %lld",
                      clt_dataset_path(train), (long long)clt_dataset_sample_size(train), (long long)in);
  if (clt_dataset_num_classes(train) > clt_model_num_classes(t->model))
    return clt__error(CLT_ESHAPE, "%s has %d classes but the model's last layer gives %d scores",
                      clt_dataset_path(train), clt_dataset_num_classes(train), clt_model_num_classes(t->model));
  CLT_TRY(check_same_data(t, train));
  /* Every output before the first step, and every rank learns rank 0's answer. */
  if (t->rank == 0 && o->metrics_path && !(metrics = fopen(o->metrics_path, "a")))
    rc = clt__error(CLT_EIO, "cannot open the metrics file %s for appending: %s", o->metrics_path, strerror(errno));
  if (rc == CLT_OK && t->rank == 0) rc = clt__checkpoint_dir_check(t);
  CLT_TRY(clt__trainer_share_status(t, rc));

  /* Go on from where the trainer stands (a loaded checkpoint, or an
   * earlier fit): the position means something only on the same data. */
  int64_t count = clt_dataset_count(train);
  if (t->pos_count && t->pos_count != count) {
    rc = clt__error(CLT_EMISMATCH, "the checkpoint was taken %lld samples into epoch %lld of a training set of %lld "
                    "samples, and %s has %lld: resume on the same training set", (long long)(t->pos.step * t->micro_batch),
                    (long long)t->pos.epoch + 1, (long long)t->pos_count, clt_dataset_path(train), (long long)count);
    goto fail;
  }
  CLT_TRY(clt_sampler_create(count, t->micro_batch, o->seed, o->drop_last ? CLT_SAMPLER_DROP_LAST : 0, &smp));
  CLT_TRY(clt_sampler_set_shares(smp, t->nreplicas, t->shares));
  if ((rc = clt_sampler_set_position(smp, t->pos)) < 0) {
    rc = clt__error(CLT_EMISMATCH, "the checkpoint's position, batch %lld of epoch %lld, is past the %lld batches of "
                    "an epoch of %s here (was --drop-last or the batch size different?)", (long long)t->pos.step + 1,
                    (long long)t->pos.epoch + 1, (long long)clt_sampler_steps_per_epoch(smp), clt_dataset_path(train));
    goto fail;
  }
  t->pos_count = count;
  pf = clt__calloc(t->nlocal, sizeof *pf);
  b = clt__calloc(t->nlocal, sizeof *b);
  if (!pf || !b) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < t->nlocal; i++)
    CLT_TRY(clt_prefetcher_create(train, smp, t->first_replica + i, t->ctx[i], &pf[i]));

  /* Replica i's slice starts at the sum of the shares before it. */
  if (!(first = clt__calloc(t->nlocal, sizeof *first))) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < t->nlocal; i++)
    for (int g = 0; g < t->first_replica + i; g++) first[i] += clt_sampler_share(smp, g);

  int64_t micro_per_epoch = clt_sampler_steps_per_epoch(smp);
  int64_t steps_per_epoch = (micro_per_epoch + o->accumulate - 1) / o->accumulate;
  int64_t steps_total = steps_per_epoch * o->epochs;
  if (o->max_steps > 0 && o->max_steps < steps_total) steps_total = o->max_steps;
  double t0 = now_s(), window_t = t0;
  int64_t window_samples = 0, first_step = t->steps_done;
  clt_train_event ev;

  for (int64_t epoch = t->pos.epoch; epoch < o->epochs && t->steps_done < steps_total; epoch++) {
    /* The epoch's sums so far (all ranks'): zero unless resumed half-way. */
    double *ep_sums = t->ep_sums; /* loss, correct, samples */
    int last = 0;
    while (!last && t->steps_done < steps_total) {
      double sums[2] = {0, 0}; /* loss, correct: this rank, then all */
      int64_t total_n = 0;
      for (int i = 0; i < t->nlocal; i++) CLT_TRY(clt__replica_zero_grads(t->rep[i]));
      for (int k = 0; k < o->accumulate && !last; k++) {
        /* The last micro-batch of a step records bucket markers: its
         * backward overlaps the all-reduce. Micro-batches end early at an
         * epoch's end, so "last" is known only once the batch is in hand. */
        for (int i = 0; i < t->nlocal; i++) CLT_TRY(clt_prefetcher_next(pf[i], &b[i]));
        last = b[0].last_in_epoch;
        int record = k == o->accumulate - 1 || last;
        for (int i = 0; i < t->nlocal; i++) {
          clt__pass pass = {.train = 1, .record = record, .seed = o->seed, .step = (uint64_t)t->micro_steps,
                            .global_first = first[i], .loss_scale = (float)t->loss_scale};
          if (b[i].n > 0)
            CLT_TRY(clt__replica_run(t->rep[i], b[i].x, b[i].y, b[i].n, &pass));
          else if (record) /* a partial last batch can leave a replica nothing */
            CLT_TRY(clt__replica_record_empty(t->rep[i]));
        }
        if (record) CLT_TRY(clt__trainer_allreduce(t));
        for (int i = 0; i < t->nlocal; i++) {
          if (b[i].n == 0) continue;
          float l;
          int32_t c;
          CLT_TRY(clt__replica_read_loss(t->rep[i], &l, &c));
          sums[0] += l;
          sums[1] += c;
          /* Samples per second of this replica's run, smoothed, for the balancer. */
          double dev = clt__replica_run_time(t->rep[i]);
          if (record && dev > 0) {
            double rate = (double)b[i].n / dev;
            t->local_rate[i] = t->local_rate[i] > 0 ? 0.7 * t->local_rate[i] + 0.3 * rate : rate;
          }
        }
        total_n += b[0].global_n;
        t->micro_steps++;
      }
      double grad_norm;
      int skipped;
      CLT_TRY(clt__trainer_apply(t, total_n, &grad_norm, &skipped));
      CLT_TRY(clt__trainer_sum(t, sums, 2));
      /* In f16 a step whose forward overflowed is skipped like any other
       * non-finite step (clt__trainer_apply): it leaves the sums alone. */
      int counted = isfinite(sums[0]) || !skipped;
      if (!counted) {
        /* skipped: its samples leave the epoch's means alone */
      } else if (!isfinite(sums[0])) {
        rc = clt__error(CLT_ENONFINITE, "the loss is not finite at step %lld (epoch %lld): lower the learning rate "
                        "(%g) or clip gradients (--clip)", (long long)t->steps_done, (long long)epoch + 1,
                        clt_schedule_lr(&o->schedule, t->steps_done - 1));
        goto fail;
      }
      if (o->check_every > 0 && t->steps_done % o->check_every == 0) CLT_TRY(clt__trainer_check_replicas(t));
      if (o->balance == CLT_BALANCE_AUTO && t->steps_done % o->balance_every == 0) {
        CLT_TRY(clt__trainer_rebalance(t));
        CLT_TRY(apply_shares(t, pf, first));
      }
      if (counted) {
        ep_sums[0] += sums[0];
        ep_sums[1] += sums[1];
        ep_sums[2] += (double)total_n;
      }
      t->ep_steps++;
      window_samples += total_n;
      clt_prefetcher_position(pf[0], &t->pos);

      int log = o->log_every > 0 && (t->steps_done % o->log_every == 0 || last || t->steps_done == steps_total);
      if (log) {
        if (o->balance != CLT_BALANCE_AUTO) CLT_TRY(clt__trainer_gather_rates(t)); /* auto has them fresh */
        double tn = now_s();
        memset(&ev, 0, sizeof ev);
        ev.kind = CLT_EVENT_STEP;
        ev.epoch = epoch + 1, ev.epochs = o->epochs;
        ev.step = t->steps_done, ev.steps_total = steps_total;
        ev.step_in_epoch = t->ep_steps, ev.steps_per_epoch = steps_per_epoch;
        ev.loss = sums[0] / (double)total_n;
        ev.accuracy = sums[1] / (double)total_n;
        ev.lr = clt_schedule_lr(&o->schedule, t->steps_done - 1);
        ev.samples_per_s = window_samples / (tn - window_t > 1e-9 ? tn - window_t : 1e-9);
        ev.elapsed_s = tn - t0;
        ev.eta_s = (tn - t0) / (double)(t->steps_done - first_step) * (double)(steps_total - t->steps_done);
        ev.test_loss = ev.test_accuracy = NAN;
        ev.grad_norm = grad_norm;
        ev.comm_s = t->comm_s;
        ev.comm_hidden = t->comm_s > 0 ? t->comm_hidden_s / t->comm_s : NAN;
        ev.nreplicas = t->nreplicas;
        ev.shares = t->shares;
        ev.throughput = t->throughput;
        ev.loss_scale = t->loss_scale;
        ev.skipped = t->skipped;
        CLT_TRY(emit(t, metrics, &ev));
        t->comm_s = t->comm_hidden_s = 0;
        window_t = tn;
        window_samples = 0;
      }
      if (o->eval_every > 0 && test && t->steps_done % o->eval_every == 0 && !last) {
        double tl, ta;
        CLT_TRY(clt_trainer_evaluate(t, test, &tl, &ta));
        clt__log(CLT_LOG_INFO, "step %lld: test loss %.4f, accuracy %.4f", (long long)t->steps_done, tl, ta);
      }
      /* Periodic checkpoints; one due at an epoch's last step waits for the
       * epoch's summary below. */
      if (o->checkpoint_dir && o->checkpoint_every > 0 && t->steps_done % o->checkpoint_every == 0 && !last)
        CLT_TRY(clt__trainer_checkpoint_to_dir(t));
    }
    /* The epoch's summary; ep_sums already hold all ranks' sums. */
    memset(&ev, 0, sizeof ev);
    ev.kind = CLT_EVENT_EPOCH;
    ev.epoch = epoch + 1, ev.epochs = o->epochs;
    ev.step = t->steps_done, ev.steps_total = steps_total;
    ev.step_in_epoch = t->ep_steps, ev.steps_per_epoch = steps_per_epoch;
    ev.loss = ep_sums[0] / ep_sums[2];
    ev.accuracy = ep_sums[1] / ep_sums[2];
    ev.lr = clt_schedule_lr(&o->schedule, t->steps_done - 1);
    ev.elapsed_s = now_s() - t0;
    ev.samples_per_s = NAN;
    ev.grad_norm = NAN;
    ev.test_loss = ev.test_accuracy = NAN;
    if (test) CLT_TRY(clt_trainer_evaluate(t, test, &ev.test_loss, &ev.test_accuracy));
    CLT_TRY(emit(t, metrics, &ev));
    if (last) { /* the epoch is whole: the next one starts from zero */
      memset(t->ep_sums, 0, sizeof t->ep_sums);
      t->ep_steps = 0;
      if (o->checkpoint_dir && (o->checkpoint_every == 0 || t->steps_done % o->checkpoint_every == 0))
        CLT_TRY(clt__trainer_checkpoint_to_dir(t));
    }
  }
  /* The state fit() ends with, unless that is saved already. */
  if (o->checkpoint_dir && t->saved_step != t->steps_done) CLT_TRY(clt__trainer_checkpoint_to_dir(t));
fail:
  if (pf)
    for (int i = 0; i < t->nlocal; i++) clt_prefetcher_destroy(pf[i]);
  free(pf);
  free(b);
  free(first);
  clt_sampler_destroy(smp);
  if (metrics) fclose(metrics);
  return rc;
}
