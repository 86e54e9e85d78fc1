/*
 * evaluate.c: evaluation under data parallelism: the loss and metric sums
 * over a dataset on every device of the job at once.
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
#include "dp/dp_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* This rank's part [*lo, *hi) of count samples: in proportion to the sum
 * of its replicas' shares (the same split on every rank). */
static int rank_part(const clt__dp *dp, int64_t count, int64_t *lo, int64_t *hi) {
  double *w = clt__calloc(dp->nranks, sizeof *w);
  int64_t *part = clt__calloc(dp->nranks, sizeof *part);
  int rc = w && part ? CLT_OK : CLT_ENOMEM;
  for (int r = 0; rc == CLT_OK && r < dp->nranks; r++)
    for (int g = dp->rank_first[r]; g < dp->rank_first[r] + dp->rank_count[r]; g++) w[r] += (double)dp->shares[g];
  if (rc == CLT_OK) rc = clt_shares_from_weights(dp->nranks, w, count, 0, part);
  *lo = *hi = 0;
  for (int r = 0; rc == CLT_OK && r <= dp->rank; r++) *lo = *hi, *hi += part[r];
  free(w), free(part);
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

int clt__dp_evaluate(void *self, const clt_dataset *ds, double *total) {
  clt__dp *dp = self;
  int rc = CLT_OK;
  int64_t count = clt_dataset_count(ds), B = dp->micro_batch, in = clt_model_input_size(dp->local);
  int64_t lps = clt_model_labels_per_sample(dp->local), lo, hi;
  const int regression = clt_dataset_targets_per_sample(ds) > 0;
  int n = dp->nlocal;
  int64_t *idx = clt__calloc((size_t)B, sizeof *idx), *run_of = clt__calloc(n, sizeof *run_of);
  float **x = clt__calloc(n, sizeof *x);
  int32_t **y = clt__calloc(n, sizeof *y);
  double *sums = NULL, *run_start = clt__calloc(n, sizeof *run_start), *secs = clt__calloc(n, sizeof *secs);
  uint8_t *use = clt__calloc(n, sizeof *use);
  if (!idx || !run_of || !x || !y || !run_start || !secs || !use) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(clt__dp_sync_replicas(dp, 1)); /* one that just got a share back */
  CLT_TRY(rank_part(dp, count, &lo, &hi));
  int64_t nruns = (hi - lo + B - 1) / B;
  if (!(sums = clt__calloc(nruns ? (size_t)nruns * 2 : 1, sizeof *sums))) { rc = CLT_ENOMEM; goto fail; }
  /* The replicas with a share (a rank that sits out has none, and an
   * empty part). */
  int busy = 0;
  int64_t next = 0;
  for (int i = 0; i < n; i++) {
    run_of[i] = -1;
    if (!clt__dp_active(dp, i)) continue;
    use[i] = 1;
    x[i] = clt__calloc((size_t)(B * in), sizeof **x);
    y[i] = clt__calloc((size_t)(B * lps), sizeof **y);
    if (!x[i] || !y[i]) { rc = CLT_ENOMEM; goto fail; }
  }
  double timeout = clt_comm_timeout(dp->job_comm);
  while (next < nruns || busy) {
    int progressed = 0;
    for (int i = 0; i < n; i++) {
      if (!x[i]) continue;
      int take = run_of[i] < 0 && next < nruns && use[i] ? worth_it(secs, use, n, i, nruns - next) : 0;
      if (take < 0) use[i] = 0; /* it slows the others more than it adds */
      if (take > 0) { /* a free replica takes the next run */
        int64_t at = lo + next * B, m = hi - at < B ? hi - at : B;
        for (int64_t k = 0; k < m; k++) idx[k] = at + k;
        clt__pass pass = {.train = 0, .global_first = at};
        if (regression) { /* float targets in the labels' room, 4 bytes each */
          pass.targets = (const float *)(const void *)y[i];
          CLT_TRY(clt_dataset_get_batch_targets(ds, idx, m, x[i], (float *)(void *)y[i]));
        } else {
          CLT_TRY(clt_dataset_get_batch(ds, idx, m, x[i], y[i]));
        }
        CLT_TRY(clt__replica_run(dp->rep[i], x[i], regression ? NULL : y[i], m, &pass));
        run_of[i] = next++;
        run_start[i] = clt__now();
        busy++;
        progressed = 1;
      }
      if (run_of[i] >= 0) {
        int ready;
        float l;
        double c;
        CLT_TRY(clt__replica_poll_loss(dp->rep[i], &ready, &l, &c));
        if (ready) {
          double took = clt__now() - run_start[i];
          secs[i] = secs[i] > 0 ? 0.5 * (secs[i] + took) : took;
          sums[2 * run_of[i]] = l, sums[2 * run_of[i] + 1] = c;
          run_of[i] = -1;
          busy--;
          progressed = 1;
        } else if (timeout > 0 && clt__now() - run_start[i] > timeout) {
          rc = clt__error(CLT_ETIMEDOUT, "an evaluation run on %s has not finished after %.0f s (CLT_TIMEOUT): the "
                          "device or its driver hangs", dp->ctx[i]->info.name, timeout);
          goto fail;
        }
      }
    }
    if (!progressed) nap();
  }
  for (int64_t k = 0; k < nruns; k++) total[0] += sums[2 * k], total[1] += sums[2 * k + 1];
fail:
  for (int i = 0; rc < 0 && run_of && i < n; i++)
    if (run_of[i] >= 0) { /* its upload may still read x[i] */
      clt__replica_poll_cancel(dp->rep[i]);
      clFinish(clt_context_queue(dp->ctx[i]));
    }
  for (int i = 0; x && i < n; i++) free(x[i]);
  for (int i = 0; y && i < n; i++) free(y[i]);
  free(idx), free(run_of), free(x), free(y), free(sums), free(run_start), free(secs), free(use);
  return rc;
}
