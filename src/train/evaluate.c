/*
 * evaluate.c: clt_trainer_evaluate, the mean loss and accuracy over a
 * dataset on every device of the job at once.
 *
 * Ranks take contiguous parts of the set in proportion to their replicas'
 * shares of the batch (the balancer's split: a rank whose replicas sit at
 * 0 takes none). Within a rank the part is cut into runs of one
 * micro-batch, and the replicas with a share take the next run as soon as
 * each is done with its last, all running at once: a fast device takes
 * most of the runs, a slow one few, whatever the split was. Once each has
 * timed a run, a replica takes no more when the others would finish every
 * run left before it finished one (it would only make the end wait), nor
 * at all when it runs at under 1/SLOWEST of the fastest's pace (devices
 * sharing the same cores: it slows the others more than it adds). So
 * `cltrain eval` on PoCL and rusticl together takes about as long as on
 * PoCL alone. The sums add the runs in their order, whoever computed them.
 */
#include "train/trainer.h"
#include "pp/pp.h"

#include <cltrain/opencl.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The set's checks, on every rank at once (they sum their results). */
static int check_set(clt_trainer *t, const clt_dataset *ds) {
  int rc = CLT_OK;
  int64_t in = clt_model_input_size(t->model), lps = clt_model_labels_per_sample(t->model);
  if (clt_dataset_sample_size(ds) != in)
    rc = clt__error(CLT_ESHAPE, "%s has samples of %lld values but the model's input takes %lld",
                    clt_dataset_path(ds), (long long)clt_dataset_sample_size(ds), (long long)in);
  else if (clt_dataset_labels_per_sample(ds) != lps)
    rc = clt__error(CLT_ESHAPE, "%s has %lld labels per sample but the model takes %lld (%s)", clt_dataset_path(ds),
                    (long long)clt_dataset_labels_per_sample(ds), (long long)lps,
                    lps == 1 ? "a classifier, and this is a token dataset" : "one per position");
  /* As fit checks: a label past the model's scores would read past them. */
  else if (clt_dataset_num_classes(ds) > clt_model_num_classes(t->model))
    rc = clt__error(CLT_ESHAPE, "%s has %d classes but the model's last layer gives %d scores",
                    clt_dataset_path(ds), clt_dataset_num_classes(ds), clt_model_num_classes(t->model));
  return clt__trainer_all_ok(t, rc, "checking the evaluation set");
}

/* This rank's part [*lo, *hi) of count samples: in proportion to the sum
 * of its replicas' shares (the same split on every rank). */
static int rank_part(clt_trainer *t, int64_t count, int64_t *lo, int64_t *hi) {
  const int64_t *shares = clt__dp_shares(t->dp);
  double *w = clt__calloc(t->nranks, sizeof *w);
  int64_t *part = clt__calloc(t->nranks, sizeof *part);
  int rc = w && part ? CLT_OK : CLT_ENOMEM;
  /* which rank holds global replica g: ranks are numbered in order */
  int *owner = rc == CLT_OK ? clt__calloc(t->nreplicas, sizeof *owner) : NULL;
  if (rc == CLT_OK && !owner) rc = CLT_ENOMEM;
  if (rc == CLT_OK && t->nranks > 1) {
    int32_t mine = t->nlocal, *counts = clt__calloc(t->nranks, sizeof *counts);
    rc = counts ? clt_allgather(t->comm, &mine, sizeof mine, counts) : CLT_ENOMEM;
    for (int r = 0, g = 0; rc == CLT_OK && r < t->nranks; r++)
      for (int i = 0; i < counts[r] && g < t->nreplicas; i++) owner[g++] = r;
    free(counts);
  }
  for (int g = 0; rc == CLT_OK && g < t->nreplicas; g++) w[owner[g]] += (double)shares[g];
  if (rc == CLT_OK) rc = clt_shares_from_weights(t->nranks, w, count, 0, part);
  *lo = *hi = 0;
  for (int r = 0; rc == CLT_OK && r <= t->rank; r++) *lo = *hi, *hi += part[r];
  free(w), free(part), free(owner);
  return rc;
}

#define SLOWEST 10

/* Whether free replica i should take one of `left` runs, from the seconds
 * per run each has shown (0: none timed yet): 1 yes, 0 not now, -1 never
 * (too slow). The fastest always does, so the runs always go on. */
static int worth_it(const double *secs, const uint8_t *use, int n, int i, int64_t left) {
  if (secs[i] <= 0) return 1;
  double others = 0, fastest = secs[i];
  for (int j = 0; j < n; j++) {
    if (j == i || !use[j]) continue;
    if (secs[j] <= 0) return 1; /* not all timed yet */
    others += 1 / secs[j];
    if (secs[j] < fastest) fastest = secs[j];
  }
  if (secs[i] <= fastest) return 1;
  if (secs[i] > SLOWEST * fastest) return -1;
  return secs[i] <= (double)left / others;
}

static void nap(void) {
  struct timespec ts = {0, 100000}; /* 0.1 ms: the CPU devices need the cores a spin would take */
  nanosleep(&ts, NULL);
}

/* Under --pipeline: pipeline d of D takes the d-th D-th of the set, in
 * rounds of M micro-batches streamed through its stages (forwards only);
 * the last stages' sums are added over the ranks. */
static int pipeline_evaluate(clt_trainer *t, const clt_dataset *ds, double *loss, double *accuracy) {
  int rc = CLT_OK, M = clt__pp_micro_batches(t->pp), D = clt__pp_replicas(t->pp), d = clt__pp_replica(t->pp);
  int64_t count = clt_dataset_count(ds), R = t->pp_room, in = clt_model_input_size(t->model);
  int64_t lps = clt_model_labels_per_sample(t->model);
  int64_t lo = count * d / D, hi = count * (d + 1) / D;
  float *x = clt__calloc((size_t)(M * R * in), sizeof *x);
  int32_t *y = clt__calloc((size_t)(M * R * lps), sizeof *y);
  int64_t *idx = clt__calloc((size_t)R, sizeof *idx);
  clt__pp_micro *mb = clt__calloc((size_t)M, sizeof *mb);
  double total[2] = {0, 0};
  if (!x || !y || !idx || !mb) rc = CLT_ENOMEM;
  CLT_TRY(clt__trainer_all_ok(t, rc, "allocating for the evaluation"));
  for (int64_t at = lo; at < hi;) {
    int m = 0;
    for (; m < M && at < hi; m++) {
      int64_t n = hi - at < R ? hi - at : R;
      for (int64_t k = 0; k < n; k++) idx[k] = at + k;
      CLT_TRY(clt_dataset_get_batch(ds, idx, n, x + m * R * in, y + m * R * lps));
      mb[m] = (clt__pp_micro){x + m * R * in, y + m * R * lps, NULL, n, at, 0};
      at += n;
    }
    clt__pass pass = {.train = 0};
    double l = 0, c = 0;
    CLT_TRY(clt__pp_run(t->pp, t->rep[0], m, mb, &pass, t->steps_done, &l, &c));
    total[0] += l, total[1] += c;
  }
  CLT_TRY(clt__trainer_sum(t, total, 2));
  *loss = total[0] / (double)(count * lps);
  *accuracy = total[1] / (double)(count * lps);
fail:
  free(x), free(y), free(idx), free(mb);
  return rc < 0 ? clt__error_prefix(rc, "evaluating on %s", clt_dataset_path(ds)) : CLT_OK;
}

int clt_trainer_evaluate(clt_trainer *t, const clt_dataset *ds, double *loss, double *accuracy) {
  if (clt_model_loss(t->model) != CLT_LOSS_CROSSENTROPY) /* the same on every rank */
    return clt__error(CLT_EINVAL, "clt_trainer_evaluate: the model is a regression model (loss %s) and datasets hold "
                      "int32 class labels; evaluate it with clt_trainer_forward_targets",
                      clt_loss_name(clt_model_loss(t->model)));
  int rc = check_set(t, ds);
  if (rc < 0) return rc;
  if (t->pp) return pipeline_evaluate(t, ds, loss, accuracy);
  int64_t count = clt_dataset_count(ds), B = t->micro_batch, in = clt_model_input_size(t->model);
  int64_t lps = clt_model_labels_per_sample(t->model), lo, hi;
  int n = t->nlocal;
  int64_t *idx = clt__calloc((size_t)B, sizeof *idx), *run_of = clt__calloc(n, sizeof *run_of);
  float **x = clt__calloc(n, sizeof *x);
  int32_t **y = clt__calloc(n, sizeof *y);
  double *sums = NULL, *run_start = clt__calloc(n, sizeof *run_start), *secs = clt__calloc(n, sizeof *secs);
  uint8_t *use = clt__calloc(n, sizeof *use);
  double total[2] = {0, 0}; /* loss, correct */
  if (!idx || !run_of || !x || !y || !run_start || !secs || !use) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(clt__trainer_sync_replicas(t, 1)); /* one that just got a share back */
  CLT_TRY(rank_part(t, count, &lo, &hi));
  int64_t nruns = (hi - lo + B - 1) / B;
  if (!(sums = clt__calloc(nruns ? (size_t)nruns * 2 : 1, sizeof *sums))) { rc = CLT_ENOMEM; goto fail; }
  /* The replicas with a share (a rank that sits out has none, and an
   * empty part). */
  int busy = 0;
  int64_t next = 0;
  for (int i = 0; i < n; i++) {
    run_of[i] = -1;
    if (!clt__dp_active(t->dp, i)) continue;
    use[i] = 1;
    x[i] = clt__calloc((size_t)(B * in), sizeof **x);
    y[i] = clt__calloc((size_t)(B * lps), sizeof **y);
    if (!x[i] || !y[i]) { rc = CLT_ENOMEM; goto fail; }
  }
  double timeout = clt_comm_timeout(t->comm);
  while (next < nruns || busy) {
    int progressed = 0;
    for (int i = 0; i < n; i++) {
      if (!x[i]) continue;
      int take = run_of[i] < 0 && next < nruns && use[i] ? worth_it(secs, use, n, i, nruns - next) : 0;
      if (take < 0) use[i] = 0; /* it slows the others more than it adds */
      if (take > 0) { /* a free replica takes the next run */
        int64_t at = lo + next * B, m = hi - at < B ? hi - at : B;
        for (int64_t k = 0; k < m; k++) idx[k] = at + k;
        CLT_TRY(clt_dataset_get_batch(ds, idx, m, x[i], y[i]));
        clt__pass pass = {.train = 0, .global_first = at};
        CLT_TRY(clt__replica_run(t->rep[i], x[i], y[i], m, &pass));
        run_of[i] = next++;
        run_start[i] = clt__now();
        busy++;
        progressed = 1;
      }
      if (run_of[i] >= 0) {
        int ready;
        float l;
        double c;
        CLT_TRY(clt__replica_poll_loss(t->rep[i], &ready, &l, &c));
        if (ready) {
          double took = clt__now() - run_start[i];
          secs[i] = secs[i] > 0 ? 0.5 * (secs[i] + took) : took;
          sums[2 * run_of[i]] = l, sums[2 * run_of[i] + 1] = c;
          run_of[i] = -1;
          busy--;
          progressed = 1;
        } else if (timeout > 0 && clt__now() - run_start[i] > timeout) {
          rc = clt__error(CLT_ETIMEDOUT, "an evaluation run on %s has not finished after %.0f s (CLT_TIMEOUT): the "
                          "device or its driver hangs", clt_context_device(t->ctx[i])->name, timeout);
          goto fail;
        }
      }
    }
    if (!progressed) nap();
  }
  for (int64_t k = 0; k < nruns; k++) total[0] += sums[2 * k], total[1] += sums[2 * k + 1];
  CLT_TRY(clt__trainer_sum(t, total, 2));
  *loss = total[0] / (double)(count * lps); /* the mean over labels, as training reports it */
  *accuracy = total[1] / (double)(count * lps);
fail:
  for (int i = 0; rc < 0 && run_of && i < n; i++)
    if (run_of[i] >= 0) { /* its upload may still read x[i] */
      clt__replica_poll_cancel(t->rep[i]);
      clFinish(clt_context_queue(t->ctx[i]));
    }
  for (int i = 0; x && i < n; i++) free(x[i]);
  for (int i = 0; y && i < n; i++) free(y[i]);
  free(idx), free(run_of), free(x), free(y), free(sums), free(run_start), free(secs), free(use);
  return rc < 0 ? clt__error_prefix(rc, "evaluating on %s", clt_dataset_path(ds)) : CLT_OK;
}
