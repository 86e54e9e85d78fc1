/*
 * balance.c: how a global batch is split over the job's replicas, and the
 * one place that decides it. Shares start equal or from given weights;
 * with --balance auto they follow a model of each replica's time for its
 * part of a micro-batch (the forward, loss and backward of n samples):
 *
 *   time_r(n) = fixed_r + per_sample_r * n     (n > 0; a replica given 0 samples costs nothing)
 *
 * fitted by least squares to the (share, seconds) of the replica's recent
 * recorded runs (clt__cost_fit). The shares are those that minimise the
 * slowest replica's predicted time (clt__shares_minmax), so a device whose
 * fixed cost alone exceeds what the others need for the whole batch gets 0
 * samples: it then contributes a zero gradient to the sum and still takes
 * the update, so the step stays the exact global-batch step and its
 * parameters and optimizer state stay those of every other replica.
 *
 * Every rank fits its own replicas, the fits are allgathered, and every
 * rank computes the same shares from them: the rule works on integers
 * (picoseconds) once the fits are gathered, so no rounding of one machine
 * can tell ranks apart.
 *
 * A model of each replica alone cannot see replicas slowing each other
 * (two devices on the same cores), so the measured wall time of the steps,
 * per set of replicas taking part, has the last word (measured_override):
 * a set measured WALL_MARGIN slower than another is not used while the
 * measurement is fresh, and a replica with a small share is tried without
 * once, for one re-split.
 *
 * New shares cost a step of their own: kernels are built for the new batch
 * sizes (src/core/blas_cpu.c compiles the last rows' and columns' tile sizes
 * into its GEMMs, and PoCL builds a work-group function for every local
 * size it has not seen: 0.2-0.5 s a re-split on the CNN with PoCL's kernel
 * cache warm, 5 s cold), and the prefetchers refill. That
 * cost is measured (the first step after a re-split, against the window's
 * other steps, every rank's most) and a re-split whose predicted gain would
 * not pay it back within PAYBACK_STEPS steps is not made: two PoCL ranks,
 * one slowed (bench/hetero.sh rig a), lost 0.9 s of every 3 s to re-splits
 * by a sample or two that the fits' noise asked for.
 *
 * A replica at 0 samples cannot be measured, so it is probed: every so
 * often (probe_gap steps, doubling while it stays at 0, up to
 * PROBE_GAP_MAX rebalances) it gets one sample for one step, and a probe
 * whose time the model did not predict (a device that became faster, a fit
 * that was wrong) restarts its fit from that run. A probe costs at most one
 * step at the probed device's pace per gap.
 */
#include "dp/dp_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  PROBE_GAP_FIRST = 4, /* rebalances between going to 0 samples and the first probe */
  PROBE_GAP_MAX = 64   /* the longest gap between probes, in rebalances */
};

/* A probe within this fraction of the prediction confirms the model. */
#define PROBE_TOLERANCE 0.25

/* Keep the current shares while their predicted time is within 1/KEEP_SLACK
 * of the best (re-splitting drains the prefetchers: not for noise). */
#define KEEP_SLACK 32

/* ... or while the gain would take longer than this many steps to pay for
 * what the last re-split cost. */
#define PAYBACK_STEPS 100

/* Measured steps: a set of replicas is held slower than another when its
 * steps took WALL_MARGIN longer; a measurement is trusted for SET_MEMORY
 * re-splits, then the set may be tried again (one re-split interval, at
 * most once per SET_MEMORY). A replica with at most 1/EXPLORE_SHARE of the
 * batch is tried without, once, when that was not measured. */
#define WALL_MARGIN 1.03
#define SET_MEMORY 32
#define EXPLORE_SHARE 8

/* ---- the cost model (pure) ----------------------------------------------- */

#define SPREAD 0.25

int clt__cost_fit(int n, const int64_t *shares, const double *seconds, clt__cost *out) {
  memset(out, 0, sizeof *out);
  if (n < 0 || (n > 0 && (!shares || !seconds))) return clt__error(CLT_EINVAL, "clt__cost_fit: bad arguments");
  /* The distinct shares seen, each with the median of its times: a run
   * slowed by a compile or a neighbour's burst does not move the fit. */
  int64_t *xs = clt__calloc(n ? (size_t)n : 1, sizeof *xs);
  double *ys = clt__calloc(n ? (size_t)n : 1, sizeof *ys), *buf = clt__calloc(n ? (size_t)n : 1, sizeof *buf);
  int *ws = clt__calloc(n ? (size_t)n : 1, sizeof *ws);
  if (!xs || !ys || !buf || !ws) {
    free(xs), free(ys), free(buf), free(ws);
    return CLT_ENOMEM;
  }
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (shares[i] <= 0 || !(seconds[i] > 0) || !isfinite(seconds[i])) continue;
    int seen = 0;
    for (int j = 0; j < m; j++) seen |= xs[j] == shares[i];
    if (seen) continue;
    int k = 0;
    for (int j = i; j < n; j++)
      if (shares[j] == shares[i] && seconds[j] > 0 && isfinite(seconds[j])) {
        /* insertion sort: the windows are small */
        int at = k++;
        while (at > 0 && buf[at - 1] > seconds[j]) buf[at] = buf[at - 1], at--;
        buf[at] = seconds[j];
      }
    xs[m] = shares[i];
    ys[m] = k % 2 ? buf[k / 2] : 0.5 * (buf[k / 2 - 1] + buf[k / 2]);
    ws[m] = k;
    m++;
  }
  double sw = 0, sx = 0, sy = 0;
  for (int j = 0; j < m; j++) sw += ws[j], sx += ws[j] * (double)xs[j], sy += ws[j] * ys[j];
  if (m > 0) {
    double mx = sx / sw, my = sy / sw, sxx = 0, sxy = 0;
    for (int j = 0; j < m; j++) {
      sxx += ws[j] * ((double)xs[j] - mx) * ((double)xs[j] - mx);
      sxy += ws[j] * ((double)xs[j] - mx) * (ys[j] - my);
    }
    /* One share seen: time in proportion to samples, as a throughput.
     * Shares close together (a device near its best share) make the slope
     * noise: it leans towards the proportional one until the shares seen
     * span SPREAD of the largest. A slope the noise made (nearly) flat or
     * negative would promise samples for free: at least 1% of the
     * proportional one. */
    double prop = my / mx, b = m > 1 ? sxy / sxx : prop, floor_b = 0.01 * prop;
    int64_t lo_n = xs[0], hi_n = xs[0];
    for (int j = 1; j < m; j++) lo_n = xs[j] < lo_n ? xs[j] : lo_n, hi_n = xs[j] > hi_n ? xs[j] : hi_n;
    double spread = (double)(hi_n - lo_n) / (double)hi_n;
    if (spread < SPREAD) b = (spread / SPREAD) * b + (1 - spread / SPREAD) * prop;
    if (!(b >= floor_b)) b = floor_b;
    double a = my - b * mx;
    if (a < 0) { /* through the origin */
      double snn = 0, snt = 0;
      for (int j = 0; j < m; j++) snn += ws[j] * (double)xs[j] * xs[j], snt += ws[j] * (double)xs[j] * ys[j];
      a = 0, b = snt / snn;
    }
    out->fixed_s = a;
    out->per_sample_s = b;
    out->shares_seen = m;
  }
  free(xs), free(ys), free(buf), free(ws);
  return CLT_OK;
}

/* The fits in integer picoseconds: fixed F and per sample S, S >= 1, with
 * F + S * total below 2^62. */
typedef struct cost_ps {
  int64_t F, S;
} cost_ps;

static cost_ps to_ps(const clt__cost *c, int64_t total) {
  const double lim = 4.6e18; /* 2^62 */
  double F = c->fixed_s * 1e12, S = c->per_sample_s * 1e12;
  if (!(F >= 0)) F = 0;
  if (F > lim / 2) F = lim / 2;
  double Smax = (lim / 2) / (double)(total > 0 ? total : 1);
  if (!(S >= 1)) S = 1;
  if (S > Smax) S = Smax;
  return (cost_ps){(int64_t)F, (int64_t)S};
}

static int64_t time_ps(cost_ps c, int64_t n) { return n > 0 ? c.F + c.S * n : 0; }

/* The most samples a replica runs within T (at least floor, at most total). */
static int64_t cap_at(cost_ps c, int64_t T, int64_t floor, int64_t total) {
  int64_t n = T >= c.F + c.S ? (T - c.F) / c.S : 0;
  if (n > total) n = total;
  return n > floor ? n : floor;
}

/* The smallest T at which the replicas can take total samples is found by
 * bisection; below it each replica takes what fits in T - 1 ps, and the
 * rest go one each, in replica order, to those that reach T with one more.
 * That is the min-max optimum (the k-th smallest of all the replicas'
 * times for their 1st, 2nd, ... sample), and integer arithmetic alone. */
int clt__shares_minmax(int R, const clt__cost *costs, int64_t total, int64_t min_share, int64_t *shares) {
  if (R < 1 || !costs || !shares || total < 0 || total > INT32_MAX || min_share < 0)
    return clt__error(CLT_EINVAL, "clt__shares_minmax: bad arguments");
  if (min_share > total / R)
    return clt__error(CLT_EINVAL, "cannot give %d replicas at least %lld sample%s each out of %lld", R,
                      (long long)min_share, min_share == 1 ? "" : "s", (long long)total);
  cost_ps *c = clt__calloc((size_t)R, sizeof *c);
  if (!c) return CLT_ENOMEM;
  int64_t lo = 0, hi = 0;
  for (int r = 0; r < R; r++) {
    c[r] = to_ps(&costs[r], total);
    int64_t at_floor = time_ps(c[r], min_share), at_all = time_ps(c[r], total);
    if (at_floor > lo) lo = at_floor;
    if (at_all > hi) hi = at_all;
  }
  if (hi < lo) hi = lo;
  /* smallest T in [lo, hi] with sum(cap(T)) >= total; hi always qualifies */
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2, sum = 0;
    for (int r = 0; r < R; r++) sum += cap_at(c[r], mid, min_share, total);
    if (sum >= total) hi = mid;
    else lo = mid + 1;
  }
  int64_t T = lo, sum = 0;
  for (int r = 0; r < R; r++) {
    shares[r] = T > 0 ? cap_at(c[r], T - 1, min_share, total) : min_share;
    sum += shares[r];
  }
  /* Below T the sum is short (or T is where the floors alone put it). */
  for (int r = 0; r < R && sum < total; r++)
    if (cap_at(c[r], T, min_share, total) > shares[r]) shares[r]++, sum++;
  for (int r = 0; r < R && sum > total; r++) /* only when the floors' own T fits more */
    while (shares[r] > min_share && sum > total) shares[r]--, sum--;
  free(c);
  return CLT_OK;
}

int64_t clt__shares_predict_ps(int R, const clt__cost *costs, const int64_t *shares, int64_t total) {
  int64_t worst = 0;
  for (int r = 0; r < R; r++) {
    int64_t t = time_ps(to_ps(&costs[r], total), shares[r]);
    if (t > worst) worst = t;
  }
  return worst;
}

/* ---- the job's shares ------------------------------------------------------ */

static int adopt_shares(clt__dp *dp, const int64_t *next);

int clt__dp_shares_init(clt__dp *dp, const clt_train_options *o, int64_t micro_batch) {
  int rc = CLT_OK;
  dp->micro_batch = micro_batch;
  dp->runs_per_step = o->accumulate > 1 ? o->accumulate : 1;
  dp->auto_balance = o->balance == CLT_BALANCE_AUTO;
  dp->every = o->balance_every > 0 ? o->balance_every : 1;
  dp->min_share = o->balance == CLT_BALANCE_AUTO ? o->balance_min_share : 0;
  /* Under ZeRO every rank steps its own shard, so no replica sits a step
   * out: auto's floor is at least 1 and weights of 0 are refused. */
  int sharded = o->zero > 0 && dp->nranks > 1;
  if (sharded && dp->min_share < 1) dp->min_share = 1;
  dp->shares = clt__calloc(dp->nreplicas, sizeof *dp->shares);
  dp->throughput = clt__calloc(dp->nreplicas, sizeof *dp->throughput);
  dp->cost = clt__calloc(dp->nreplicas, sizeof *dp->cost);
  dp->fixed_s = clt__calloc(dp->nreplicas, sizeof *dp->fixed_s);
  dp->per_sample_s = clt__calloc(dp->nreplicas, sizeof *dp->per_sample_s);
  dp->probe_gap = clt__calloc(dp->nreplicas, sizeof *dp->probe_gap);
  dp->probe_at = clt__calloc(dp->nreplicas, sizeof *dp->probe_at);
  dp->idle_said = clt__calloc(dp->nreplicas, sizeof *dp->idle_said);
  dp->local_rate = clt__calloc(dp->nlocal, sizeof *dp->local_rate);
  dp->obs = clt__calloc(dp->nlocal, sizeof *dp->obs);
  double *w = clt__calloc(dp->nreplicas, sizeof *w);
  if (!dp->shares || !dp->throughput || !dp->cost || !dp->fixed_s || !dp->per_sample_s || !dp->probe_gap || !dp->probe_at || !dp->idle_said || !dp->local_rate || !dp->obs ||
      !w) {
    free(w);
    return CLT_ENOMEM;
  }
  if (sharded && micro_batch < dp->nreplicas)
    rc = clt__error(CLT_EINVAL, "--zero %d: the micro-batch of %lld has fewer samples than the job's %d replicas, "
                    "and under ZeRO every replica takes samples; raise the batch", o->zero, (long long)micro_batch,
                    dp->nreplicas);
  else if (o->balance == CLT_BALANCE_AUTO && dp->min_share > micro_batch / dp->nreplicas)
    rc = clt__error(CLT_EINVAL, "--balance-min-share %lld: %d replicas cannot each have %lld samples of a "
                    "micro-batch of %lld (at most %lld each); lower it or raise the batch", (long long)dp->min_share,
                    dp->nreplicas, (long long)dp->min_share, (long long)micro_batch,
                    (long long)(micro_batch / dp->nreplicas));
  if (rc == CLT_OK && o->balance == CLT_BALANCE_WEIGHTS) {
    if (!o->balance_weights || o->balance_nweights != dp->nreplicas)
      rc = clt__error(CLT_EINVAL, "--balance gives %d weights but the job has %d replicas (one weight per replica, "
                      "rank by rank)", o->balance_nweights, dp->nreplicas);
    double sum = 0;
    for (int r = 0; rc == CLT_OK && r < dp->nreplicas; r++) {
      sum += w[r] = o->balance_weights[r];
      if (!(w[r] >= 0) || !isfinite(w[r]))
        rc = clt__error(CLT_EINVAL, "--balance weight %d is %g; weights must be numbers of 0 or more", r + 1, w[r]);
      else if (sharded && w[r] == 0)
        rc = clt__error(CLT_EINVAL, "--balance weight %d is 0, but under --zero %d every replica steps its rank's "
                        "shard and takes samples; give it a weight above 0", r + 1, o->zero);
    }
    if (rc == CLT_OK && !(sum > 0))
      rc = clt__error(CLT_EINVAL, "--balance gives every replica a weight of 0; at least one must take samples");
  } else {
    for (int r = 0; r < dp->nreplicas; r++) w[r] = 1.0;
  }
  /* Weights of 0 give replicas of 0 samples; equal and auto start with at least 1 each. */
  if (rc == CLT_OK)
    rc = clt_shares_from_weights(dp->nreplicas, w, micro_batch, o->balance == CLT_BALANCE_WEIGHTS ? 0 : 1, dp->shares);
  free(w);
  return rc;
}

const int64_t *clt__dp_shares(const clt__dp *dp) { return dp->shares; }

int clt__dp_set_shares(clt__dp *dp, const int64_t *shares) {
  int64_t sum = 0;
  for (int r = 0; r < dp->nreplicas; r++) {
    if (shares[r] < dp->min_share) return CLT_EINVAL;
    sum += shares[r];
  }
  if (sum != dp->micro_batch) return CLT_EINVAL;
  /* a replica at 0 without a model is probed at the next rebalance */
  for (int r = 0; r < dp->nreplicas; r++) dp->probe_at[r] = 0, dp->probe_gap[r] = PROBE_GAP_FIRST;
  return adopt_shares(dp, shares);
}

int clt__dp_active(const clt__dp *dp, int i) { return dp->shares[dp->first_replica + i] > 0; }

int clt__dp_sits_out(const clt__dp *dp) {
  for (int i = 0; i < dp->nlocal; i++)
    if (clt__dp_active(dp, i)) return 0;
  return 1;
}

/* New shares; the plans follow when who takes part changed on any rank
 * (the same decision on every rank: collective). */
static int adopt_shares(clt__dp *dp, const int64_t *next) {
  int moved = 0;
  for (int g = 0; g < dp->nreplicas; g++) moved |= (dp->shares[g] > 0) != (next[g] > 0);
  memcpy(dp->shares, next, (size_t)dp->nreplicas * sizeof *next);
  return moved && dp->plans ? clt__dp_replan(dp) : CLT_OK;
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
  double *w = clt__calloc(dp->nlocal, sizeof *w), sum = 0;
  if (!w) return CLT_ENOMEM;
  for (int i = 0; i < dp->nlocal; i++) sum += w[i] = (double)dp->shares[dp->first_replica + i];
  /* Every replica of this rank at 0 of the global split (it sits out):
   * this rank's own samples still need one, the first. */
  if (!(sum > 0)) w[0] = 1;
  int rc = clt_shares_from_weights(dp->nlocal, w, n, 0, counts);
  free(w);
  return rc;
}

void clt__dp_note_run(clt__dp *dp, int i, int64_t n, double seconds) {
  if (!(seconds > 0) || !isfinite(seconds) || n <= 0) return;
  double rate = (double)n / seconds;
  dp->local_rate[i] = dp->local_rate[i] > 0 ? 0.7 * dp->local_rate[i] + 0.3 * rate : rate;
  clt__cost_obs *o = &dp->obs[i];
  if (!o->warm) { /* the first run compiles, allocates, faults pages in: not what the next ones cost */
    o->warm = 1;
    return;
  }
  if (o->probe_pending) {
    /* A probe the model did not predict: it starts the fit afresh. */
    o->probe_pending = 0;
    clt__cost c;
    if (clt__cost_fit(o->count, o->n, o->t, &c) == CLT_OK && c.shares_seen > 0) {
      double want = c.fixed_s + c.per_sample_s * (double)n;
      if (fabs(seconds - want) > PROBE_TOLERANCE * want) {
        clt__log(CLT_LOG_INFO, "replica %d: a probe of %lld sample%s took %.2f ms where its model said %.2f ms; "
                 "its model starts again from this run", dp->first_replica + i, (long long)n, n == 1 ? "" : "s",
                 seconds * 1e3, want * 1e3);
        o->count = o->next = 0;
      }
    }
  }
  o->n[o->next] = n;
  o->t[o->next] = seconds;
  o->next = (o->next + 1) % CLT__COST_WINDOW;
  if (o->count < CLT__COST_WINDOW) o->count++;
}

/* Every replica's fit and smoothed rate, from every rank. */
int clt__dp_gather_rates(clt__dp *dp) {
  int rc = CLT_OK;
  enum { PER = 4 }; /* rate, fixed, per sample, shares seen */
  double *mine = clt__calloc((size_t)dp->max_local * PER, sizeof *mine);
  double *all = clt__calloc((size_t)dp->nranks * dp->max_local * PER, sizeof *all);
  if (!mine || !all) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < dp->nlocal; i++) {
    clt__cost c;
    CLT_TRY(clt__cost_fit(dp->obs[i].count, dp->obs[i].n, dp->obs[i].t, &c));
    mine[PER * i] = dp->local_rate[i];
    mine[PER * i + 1] = c.fixed_s;
    mine[PER * i + 2] = c.per_sample_s;
    mine[PER * i + 3] = c.shares_seen;
  }
  size_t bytes = (size_t)dp->max_local * PER * sizeof *mine;
  if (dp->nranks > 1)
    CLT_TRY(clt_allgather(dp->comm, mine, bytes, all));
  else
    memcpy(all, mine, bytes);
  for (int r = 0; r < dp->nranks; r++)
    for (int i = 0; i < dp->rank_count[r]; i++) {
      const double *v = all + ((size_t)r * dp->max_local + i) * PER;
      int g = dp->rank_first[r] + i;
      dp->throughput[g] = v[0];
      dp->cost[g] = (clt__cost){v[1], v[2], (int)v[3]};
      dp->fixed_s[g] = v[1], dp->per_sample_s[g] = v[2];
    }
fail:
  free(mine), free(all);
  return rc;
}

const double *clt__dp_throughput(const clt__dp *dp) { return dp->throughput; }

void clt__dp_note_step(clt__dp *dp, double seconds) {
  if (dp->skip_wall) {
    if (dp->measure_resplit && seconds > 0 && isfinite(seconds)) dp->resplit_wall = seconds;
    dp->skip_wall = dp->measure_resplit = 0;
    return;
  }
  if (seconds > 0 && isfinite(seconds)) dp->wall_sum += seconds, dp->wall_steps++;
}

static uint64_t set_of(const clt__dp *dp, const int64_t *shares) {
  uint64_t m = 0;
  for (int r = 0; r < dp->nreplicas && r < 64; r++)
    if (shares[r] > 0) m |= UINT64_C(1) << r;
  return m;
}

/* The measured wall time of a set, or 0 when none is trusted. */
static double measured(const clt__dp *dp, uint64_t mask) {
  for (int k = 0; k < dp->nsets; k++)
    if (dp->sets[k].mask == mask && dp->rebalances - dp->sets[k].stamp <= SET_MEMORY) return dp->sets[k].wall;
  return 0;
}

static void remember(clt__dp *dp, uint64_t mask, double wall) {
  int k = 0, oldest = 0;
  while (k < dp->nsets && dp->sets[k].mask != mask) k++;
  if (k == dp->nsets && dp->nsets == CLT__SETS) { /* the stalest goes */
    for (int j = 1; j < dp->nsets; j++)
      if (dp->sets[j].stamp < dp->sets[oldest].stamp) oldest = j;
    k = oldest;
  } else if (k == dp->nsets) {
    dp->nsets++;
  }
  dp->sets[k].mask = mask, dp->sets[k].wall = wall, dp->sets[k].stamp = dp->rebalances;
}

/* The min-max shares among the replicas of set `mask` alone (the others 0). */
static int minmax_within(const clt__dp *dp, const clt__cost *model, uint64_t mask, int64_t *out) {
  clt__cost *c = clt__calloc(dp->nreplicas, sizeof *c);
  if (!c) return CLT_ENOMEM;
  for (int r = 0; r < dp->nreplicas; r++) c[r] = mask >> r & 1 ? model[r] : (clt__cost){1e6, 1e6, 0};
  int rc = clt__shares_minmax(dp->nreplicas, c, dp->micro_batch, 0, out);
  free(c);
  return rc;
}

static void set_text(const clt__dp *dp, uint64_t mask, char *out, size_t size) {
  size_t at = 0;
  out[0] = 0;
  for (int r = 0; r < dp->nreplicas && r < 64 && at + 8 < size; r++)
    if (mask >> r & 1) at += (size_t)snprintf(out + at, size - at, "%s%d", at ? "," : "", r);
}

/* What the measured steps say against the model's choice `next` (the
 * model cannot see replicas slowing each other): keep a set measured
 * faster, or try one the model did not choose and was not measured.
 * `wall` is the window's measured step time of the current set. */
static int measured_override(clt__dp *dp, const clt__cost *model, double wall, int probed, int64_t steps_done,
                             int64_t *next) {
  int rc = CLT_OK;
  if (dp->nreplicas > 64 || dp->min_share > 0) return CLT_OK;
  uint64_t cur = set_of(dp, dp->shares), nxt = set_of(dp, next);
  if (wall > 0 && probed < 0) remember(dp, cur, wall);
  dp->exploring = 0;
  double w_nxt = measured(dp, nxt);
  uint64_t best = 0;
  double w_best = 0;
  for (int k = 0; k < dp->nsets; k++) {
    double w = measured(dp, dp->sets[k].mask);
    if (w > 0 && (w_best == 0 || w < w_best)) w_best = w, best = dp->sets[k].mask;
  }
  char a[200], b[200];
  if (best && best != nxt && w_nxt > 0 && w_best * WALL_MARGIN < w_nxt) {
    CLT_TRY(minmax_within(dp, model, best, next));
    set_text(dp, best, a, sizeof a), set_text(dp, nxt, b, sizeof b);
    if (best != cur)
      clt__log(CLT_LOG_INFO, "step %lld: steps with replicas %s took %.2f ms, with %s %.2f ms: %s it is, whatever the "
             "model predicts", (long long)steps_done, a, w_best * 1e3, b, w_nxt * 1e3, a);
    return CLT_OK;
  }
  /* A replica that adds little, tried without once its absence was not measured. */
  for (int r = 0; probed < 0 && r < dp->nreplicas; r++) {
    uint64_t without = nxt & ~(UINT64_C(1) << r);
    if (next[r] <= 0 || next[r] * EXPLORE_SHARE > dp->micro_batch || !without || measured(dp, without) > 0 ||
        dp->cost[r].shares_seen < 2) /* the model first (two shares seen) */
      continue;
    int64_t had = next[r];
    CLT_TRY(minmax_within(dp, model, without, next));
    dp->exploring = 1;
    clt__log(CLT_LOG_INFO, "step %lld: trying the steps without replica %d (the model gives it %lld samples) for one "
             "re-split, to measure what it adds", (long long)steps_done, r, (long long)had);
    break;
  }
fail:
  return rc;
}
const clt__cost *clt__dp_costs(const clt__dp *dp) { return dp->cost; }
void clt__dp_cost_arrays(const clt__dp *dp, const double **fixed_s, const double **per_sample_s) {
  *fixed_s = dp->fixed_s, *per_sample_s = dp->per_sample_s;
}

int clt__dp_rebalance_due(const clt__dp *dp, int64_t steps_done) {
  return dp->auto_balance && (steps_done % dp->every == 0 || dp->probed >= 0);
}

/* Why a replica is at 0: the cost model gives it none; the steps measured
 * without it were faster, though the model gives it samples; or it sits
 * out one re-split to measure the steps without it. */
typedef enum idle_reason { IDLE_MODEL, IDLE_MEASURED, IDLE_TRIAL } idle_reason;

/* Say why a replica gets 0 samples from now on: the first time at the
 * default level (warn), on rank 0 (every rank decides alike), since a
 * device doing nothing is what a user asks about; after that, after each
 * probe that leaves it there, and for a trial, at info. `chosen` is what
 * the model gives it; best_ps the model's step time of its choice. */
static void log_idle(clt__dp *dp, int g, int64_t step, idle_reason why, int64_t chosen, int64_t best_ps) {
  const clt__cost *c = &dp->cost[g];
  clt_log_level level = CLT_LOG_INFO;
  if (why != IDLE_TRIAL && !dp->idle_said[g] && dp->rank == 0) level = CLT_LOG_WARN, dp->idle_said[g] = 1;
  if (why == IDLE_TRIAL)
    clt__log(level, "step %lld: replica %d gets 0 samples for one re-split, to measure the steps without it",
             (long long)step, g);
  else if (why == IDLE_MEASURED)
    clt__log(level, "step %lld: replica %d gets 0 samples: the steps measured without it were faster than with it "
             "(the cost model, which cannot see devices slowing each other, would give it %lld); it stays in step "
             "with the others' updates and is probed with one sample at step %lld", (long long)step, g,
             (long long)chosen, (long long)dp->probe_at[g]);
  else
    clt__log(level, "step %lld: replica %d gets 0 samples: one sample would take it %.2f ms (%.2f ms fixed + "
             "%.3f ms per sample), longer than the step's predicted %.2f ms without it; it stays in step with the "
             "others' updates and is probed with one sample at step %lld", (long long)step, g,
             (c->fixed_s + c->per_sample_s) * 1e3, c->fixed_s * 1e3, c->per_sample_s * 1e3, (double)best_ps * 1e-9,
             (long long)dp->probe_at[g]);
}

int clt__dp_rebalance(clt__dp *dp, int64_t steps_done, int *changed) {
  int rc = CLT_OK, R = dp->nreplicas;
  int64_t *next = NULL, *chosen = NULL;
  *changed = 0;
  int probed = dp->probed; /* the replica probed in the step just done, or -1 */
  dp->probed = -1;
  /* The window's measured step time, and its first step's after new
   * shares: the slowest rank's, the same everywhere. */
  double wall = dp->wall_steps ? dp->wall_sum / (double)dp->wall_steps : 0, first = dp->resplit_wall;
  dp->wall_sum = 0, dp->wall_steps = 0, dp->resplit_wall = 0;
  dp->rebalances++;
  if (dp->nranks > 1) {
    double mine[2] = {wall, first}, *walls = clt__calloc(2 * (size_t)dp->nranks, sizeof *walls);
    if (!walls) return CLT_ENOMEM;
    rc = clt_allgather(dp->comm, mine, sizeof mine, walls);
    for (int r = 0; rc == CLT_OK && r < dp->nranks; r++) {
      wall = walls[2 * r] > wall ? walls[2 * r] : wall;
      first = walls[2 * r + 1] > first ? walls[2 * r + 1] : first;
    }
    free(walls);
    if (rc < 0) return rc;
  }
  if (first > 0 && wall > 0) dp->resplit_ps = first > wall ? (int64_t)llround((first - wall) * 1e12) : 0;
  CLT_TRY(clt__dp_gather_rates(dp));
  /* Not measured yet: a replica with samples and no fit (its first, warm-up
   * run is not counted). One at 0 without a fit is probed below. */
  for (int r = 0; r < R; r++)
    if (dp->shares[r] > 0 && !dp->cost[r].shares_seen) goto fail;
  next = clt__calloc(R, sizeof *next), chosen = clt__calloc(R, sizeof *chosen);
  if (!next || !chosen) { rc = CLT_ENOMEM; goto fail; }
  /* The best split by the models of the replicas that have one; one
   * without a model cannot be predicted and gets nothing until probed. */
  clt__cost *model = clt__calloc(R, sizeof *model);
  if (!model) { rc = CLT_ENOMEM; goto fail; }
  for (int r = 0; r < R; r++)
    model[r] = dp->cost[r].shares_seen ? dp->cost[r] : (clt__cost){1e3, 1e3, 0}; /* "very slow" */
  rc = clt__shares_minmax(R, model, dp->micro_batch, dp->min_share, next);
  int64_t best = rc == CLT_OK ? clt__shares_predict_ps(R, model, next, dp->micro_batch) : 0;
  int64_t now = rc == CLT_OK ? clt__shares_predict_ps(R, model, dp->shares, dp->micro_batch) : 0;
  int keep = rc == CLT_OK && probed < 0 && !dp->exploring &&
             (now - best <= best / KEEP_SLACK || (now - best) * dp->runs_per_step * PAYBACK_STEPS <= dp->resplit_ps);
  for (int r = 0; keep && r < R; r++) keep = dp->cost[r].shares_seen || dp->shares[r] == 0;
  if (keep) memcpy(next, dp->shares, (size_t)R * sizeof *next);
  memcpy(chosen, next, (size_t)R * sizeof *next); /* the model's, before the measurements have their say */
  if (rc == CLT_OK) rc = measured_override(dp, model, wall, probed, steps_done, next);
  free(model);
  if (rc < 0) goto fail;

  /* Replicas at 0: when each is probed next, and at most one probe a step. */
  int probe = -1;
  for (int r = 0; r < R; r++) {
    if (next[r] > 0) {
      dp->probe_gap[r] = PROBE_GAP_FIRST;
    } else if (r == probed || dp->shares[r] > 0) { /* its probe left it at 0, or it just went there */
      dp->probe_gap[r] = r == probed && dp->probe_gap[r] < PROBE_GAP_MAX ? 2 * dp->probe_gap[r] : PROBE_GAP_FIRST;
      dp->probe_at[r] = (steps_done / dp->every + dp->probe_gap[r]) * dp->every; /* a re-split step */
      log_idle(dp, r, steps_done, chosen[r] == 0 ? IDLE_MODEL : dp->exploring ? IDLE_TRIAL : IDLE_MEASURED, chosen[r],
               best);
    } else {
      /* Out for a trial, and kept out since by what it measured. */
      if (!dp->idle_said[r] && chosen[r] > 0 && !dp->exploring)
        log_idle(dp, r, steps_done, IDLE_MEASURED, chosen[r], best);
      if (probe < 0 && steps_done >= dp->probe_at[r]) probe = r;
    }
  }
  if (probe >= 0) { /* one sample, from the replica with the most */
    int big = 0;
    for (int r = 1; r < R; r++)
      if (next[r] > next[big]) big = r;
    if (next[big] > 1) {
      next[big]--, next[probe]++;
      dp->probed = probe;
      if (probe >= dp->first_replica && probe < dp->first_replica + dp->nlocal)
        dp->obs[probe - dp->first_replica].probe_pending = 1;
    }
  }
  *changed = memcmp(next, dp->shares, (size_t)R * sizeof *next) != 0;
  if (*changed) {
    dp->skip_wall = 1;
    dp->measure_resplit = probed < 0 && dp->probed < 0; /* neither into nor out of a probe */
    CLT_TRY(adopt_shares(dp, next));
    char line[512];
    int at = 0;
    for (int r = 0; r < R && at < (int)sizeof line - 24; r++)
      at += snprintf(line + at, sizeof line - at, "%s%lld", r ? ":" : "", (long long)next[r]);
    clt__log(CLT_LOG_INFO, "step %lld: shares %s%s (predicted %.2f ms a micro-batch)", (long long)steps_done, line,
             dp->probed >= 0 ? ", probing a replica at 0 for one step" : "",
             (double)clt__shares_predict_ps(R, dp->cost, next, dp->micro_batch) * 1e-9);
  }
fail:
  free(next);
  free(chosen);
  return rc;
}
