/*
 * balance.c: how a global batch is split over the job's replicas. Each
 * replica's share of a global micro-batch starts equal or from given
 * weights; with --balance auto it follows each replica's measured
 * throughput (samples per second of device time, smoothed), re-split every
 * balance_every steps. Every rank gathers the same rates and computes the
 * same integer shares (clt_shares_from_weights: largest remainder, at
 * least one sample each), and because the loss is summed and divided by
 * the global batch, any split gives the same update.
 */
#include "dp/dp_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int clt__dp_shares_init(clt__dp *dp, const clt_train_options *o, int64_t micro_batch) {
  int rc = CLT_OK;
  dp->micro_batch = micro_batch;
  dp->shares = clt__calloc(dp->nreplicas, sizeof *dp->shares);
  dp->throughput = clt__calloc(dp->nreplicas, sizeof *dp->throughput);
  dp->local_rate = clt__calloc(dp->nlocal, sizeof *dp->local_rate);
  double *w = clt__calloc(dp->nreplicas, sizeof *w);
  if (!dp->shares || !dp->throughput || !dp->local_rate || !w) {
    free(w);
    return CLT_ENOMEM;
  }
  if (o->balance == CLT_BALANCE_WEIGHTS) {
    if (!o->balance_weights || o->balance_nweights != dp->nreplicas)
      rc = clt__error(CLT_EINVAL, "--balance gives %d weights but the job has %d replicas (one weight per replica, "
                      "rank by rank)", o->balance_nweights, dp->nreplicas);
    for (int r = 0; rc == CLT_OK && r < dp->nreplicas; r++) {
      w[r] = o->balance_weights[r];
      if (!(w[r] > 0) || !isfinite(w[r]))
        rc = clt__error(CLT_EINVAL, "--balance weight %d is %g; weights must be positive numbers", r + 1, w[r]);
    }
  } else {
    for (int r = 0; r < dp->nreplicas; r++) w[r] = 1.0;
  }
  if (rc == CLT_OK) rc = clt_shares_from_weights(dp->nreplicas, w, micro_batch, 1, dp->shares);
  free(w);
  return rc;
}

const int64_t *clt__dp_shares(const clt__dp *dp) { return dp->shares; }

void clt__dp_set_shares(clt__dp *dp, const int64_t *shares) {
  memcpy(dp->shares, shares, (size_t)dp->nreplicas * sizeof *shares);
}

int64_t clt__dp_slice_start(const clt__dp *dp, int i) {
  int64_t first = 0;
  for (int g = 0; g < dp->first_replica + i; g++) first += dp->shares[g];
  return first;
}

int clt__dp_split_local(const clt__dp *dp, int64_t n, int64_t *counts) {
  if (dp->nlocal == 1 || n == 0) {
    for (int i = 0; i < dp->nlocal; i++) counts[i] = i == 0 ? n : 0;
    return CLT_OK;
  }
  double *w = clt__calloc(dp->nlocal, sizeof *w);
  if (!w) return CLT_ENOMEM;
  for (int i = 0; i < dp->nlocal; i++) w[i] = (double)dp->shares[dp->first_replica + i];
  int rc = clt_shares_from_weights(dp->nlocal, w, n, 0, counts);
  free(w);
  return rc;
}

void clt__dp_note_run(clt__dp *dp, int i, int64_t n, double seconds) {
  if (!(seconds > 0) || n <= 0) return;
  double rate = (double)n / seconds;
  dp->local_rate[i] = dp->local_rate[i] > 0 ? 0.7 * dp->local_rate[i] + 0.3 * rate : rate;
}

int clt__dp_gather_rates(clt__dp *dp) {
  int rc = CLT_OK;
  double *mine = clt__calloc(dp->max_local, sizeof *mine);
  double *all = clt__calloc((size_t)dp->nranks * dp->max_local, sizeof *all);
  if (!mine || !all) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < dp->nlocal; i++) mine[i] = dp->local_rate[i];
  if (dp->nranks > 1)
    CLT_TRY(clt_allgather(dp->comm, mine, (size_t)dp->max_local * sizeof *mine, all));
  else
    memcpy(all, mine, (size_t)dp->max_local * sizeof *mine);
  for (int r = 0; r < dp->nranks; r++)
    for (int i = 0; i < dp->rank_count[r]; i++)
      dp->throughput[dp->rank_first[r] + i] = all[(size_t)r * dp->max_local + i];
fail:
  free(mine), free(all);
  return rc;
}

const double *clt__dp_throughput(const clt__dp *dp) { return dp->throughput; }

int clt__dp_rebalance(clt__dp *dp, int *changed) {
  *changed = 0;
  int rc = clt__dp_gather_rates(dp);
  if (rc < 0) return rc;
  for (int r = 0; r < dp->nreplicas; r++)
    if (!(dp->throughput[r] > 0) || !isfinite(dp->throughput[r])) return CLT_OK; /* not measured yet */
  int64_t *next = clt__calloc(dp->nreplicas, sizeof *next);
  if (!next) return CLT_ENOMEM;
  /* Every rank has the same rates, so every rank computes the same shares. */
  rc = clt_shares_from_weights(dp->nreplicas, dp->throughput, dp->micro_batch, 1, next);
  if (rc == CLT_OK) {
    *changed = memcmp(next, dp->shares, (size_t)dp->nreplicas * sizeof *next) != 0;
    clt__dp_set_shares(dp, next);
  }
  free(next);
  return rc;
}
