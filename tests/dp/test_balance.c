/*
 * test_balance.c: the balancer's cost model and share rule (src/dp/balance.c)
 * without a device: the least-squares fit recovers a known fixed and
 * per-sample cost from synthetic timings (noise and an outlier included);
 * the min-max shares are the optimum (against brute force), give 0 to a
 * replica whose fixed cost alone is longer than the step without it, and
 * keep a --balance-min-share floor; and the whole loop (runs noted, fits,
 * re-splits, probes) on a one-rank job of two simulated replicas settles,
 * probes a replica at 0 at a bounded rate, gives it work back once it
 * becomes fast, and does not re-split for gains that would not pay for
 * what new shares cost; a replica it leaves at 0 says why once at the
 * default log level. Links the internal library.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/dp.h"

/* A deterministic +-1% wobble, so no run of the test differs. */
static double wobble(int k) { return 1.0 + 0.01 * sin(1.7 * k + 0.3); }

START_TEST(the_fit_recovers_fixed_and_per_sample_costs) {
  const double a = 0.030, b = 0.0005; /* 30 ms fixed, 0.5 ms a sample */
  int64_t n[40];
  double t[40];
  const int64_t seen[4] = {1, 8, 32, 63};
  for (int k = 0; k < 40; k++) {
    n[k] = seen[k % 4];
    t[k] = (a + b * (double)n[k]) * wobble(k);
  }
  clt__cost c;
  ck_assert_int_eq(clt__cost_fit(40, n, t, &c), 0);
  ck_assert_int_eq(c.shares_seen, 4);
  ck_assert_msg(fabs(c.fixed_s - a) < 0.02 * a && fabs(c.per_sample_s - b) < 0.05 * b,
                "fit %g s + %g s/sample, want %g + %g", c.fixed_s, c.per_sample_s, a, b);

  /* A run ten times as long (a compile, a neighbour) among five at its
   * share: the median ignores it. */
  t[0] *= 10;
  ck_assert_int_eq(clt__cost_fit(40, n, t, &c), 0);
  ck_assert_msg(fabs(c.fixed_s - a) < 0.02 * a && fabs(c.per_sample_s - b) < 0.05 * b,
                "with an outlier: %g + %g", c.fixed_s, c.per_sample_s);
}
END_TEST

START_TEST(the_fit_of_few_or_odd_runs) {
  clt__cost c;
  ck_assert_int_eq(clt__cost_fit(0, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.shares_seen, 0);
  /* one share seen: proportional (a throughput) */
  int64_t n1[3] = {32, 32, 32};
  double t1[3] = {0.064, 0.064, 0.064};
  ck_assert_int_eq(clt__cost_fit(3, n1, t1, &c), 0);
  ck_assert_int_eq(c.shares_seen, 1);
  ck_assert(c.fixed_s == 0 && fabs(c.per_sample_s - 0.002) < 1e-12);
  /* times that fall with the share (noise): no negative or free cost */
  int64_t n2[2] = {10, 20};
  double t2[2] = {0.020, 0.010};
  ck_assert_int_eq(clt__cost_fit(2, n2, t2, &c), 0);
  ck_assert(c.per_sample_s > 0 && c.fixed_s >= 0);
  /* a negative intercept: through the origin */
  int64_t n3[2] = {10, 20};
  double t3[2] = {0.005, 0.020};
  ck_assert_int_eq(clt__cost_fit(2, n3, t3, &c), 0);
  ck_assert(c.fixed_s == 0 && c.per_sample_s > 0);
  /* shares close together: the slope of their noise is not trusted (here
   * 39 and 41 samples, whose times would say 35 ms fixed and next to
   * nothing per sample), it stays near the proportional one */
  int64_t n5[2] = {39, 41};
  double t5[2] = {0.0354, 0.0356};
  ck_assert_int_eq(clt__cost_fit(2, n5, t5, &c), 0);
  ck_assert_msg(c.per_sample_s > 0.5 * 0.0355 / 40 && c.fixed_s < 0.5 * 0.0355, "close shares: %g + %g", c.fixed_s,
                c.per_sample_s);
  /* zero shares and unknown times are skipped */
  int64_t n4[3] = {0, 16, 16};
  double t4[3] = {1.0, 0, 0.016};
  ck_assert_int_eq(clt__cost_fit(3, n4, t4, &c), 0);
  ck_assert_int_eq(c.shares_seen, 1);
  ck_assert(fabs(c.per_sample_s - 0.001) < 1e-12);
}
END_TEST

static void shares_are(int R, const clt__cost *c, int64_t total, int64_t floor, const int64_t *want) {
  int64_t got[8];
  ck_assert_int_eq(clt__shares_minmax(R, c, total, floor, got), 0);
  for (int r = 0; r < R; r++)
    ck_assert_msg(got[r] == want[r], "replica %d: %lld samples, want %lld", r, (long long)got[r], (long long)want[r]);
}

START_TEST(a_replica_that_only_slows_the_step_gets_none) {
  /* fast: 1 ms + 0.1 ms a sample (7.4 ms for 64); slow: 30 ms fixed */
  clt__cost c[2] = {{0.001, 0.0001, 2}, {0.030, 0.0005, 2}};
  shares_are(2, c, 64, 0, (const int64_t[]){64, 0});
  shares_are(2, c, 64, 3, (const int64_t[]){61, 3}); /* the floor */
  shares_are(2, c, 64, 32, (const int64_t[]){32, 32});
  /* equal devices: equal shares, the odd sample to the lower index */
  clt__cost e[3] = {{0.002, 0.001, 2}, {0.002, 0.001, 2}, {0.002, 0.001, 2}};
  shares_are(3, e, 64, 0, (const int64_t[]){22, 21, 21});
  /* no fixed cost: in proportion to speed (3:1) */
  clt__cost p[2] = {{0, 0.001, 2}, {0, 0.003, 2}};
  shares_are(2, p, 64, 0, (const int64_t[]){48, 16});
  int64_t s[2];
  ck_assert_int_eq(clt__shares_minmax(2, c, 64, 33, s), CLT_EINVAL);
  ck_assert_int_eq(clt__shares_minmax(2, c, 0, 0, s), 0);
  ck_assert(s[0] == 0 && s[1] == 0);
}
END_TEST

/* The min-max optimum by brute force over every split of total into three. */
static int64_t brute_best(const clt__cost *c, int64_t total, int64_t floor) {
  int64_t best = INT64_MAX, s[3];
  for (s[0] = floor; s[0] <= total; s[0]++)
    for (s[1] = floor; s[0] + s[1] <= total; s[1]++) {
      s[2] = total - s[0] - s[1];
      if (s[2] < floor) continue;
      int64_t t = clt__shares_predict_ps(3, c, s, total);
      if (t < best) best = t;
    }
  return best;
}

START_TEST(the_shares_are_the_min_max_optimum) {
  srand(7);
  for (int trial = 0; trial < 300; trial++) {
    clt__cost c[3];
    for (int r = 0; r < 3; r++)
      c[r] = (clt__cost){(rand() % 4 ? 1 : 0) * (rand() % 40000) * 1e-6, (1 + rand() % 3000) * 1e-6, 2};
    int64_t total = 1 + rand() % 70, floor = rand() % 3 ? 0 : rand() % (total / 3 + 1), s[3];
    ck_assert_int_eq(clt__shares_minmax(3, c, total, floor, s), 0);
    ck_assert_int_eq(s[0] + s[1] + s[2], total);
    for (int r = 0; r < 3; r++) ck_assert_int_ge(s[r], floor);
    ck_assert_msg(clt__shares_predict_ps(3, c, s, total) == brute_best(c, total, floor),
                  "trial %d: %lld:%lld:%lld predicts %lld ps, the best is %lld", trial, (long long)s[0],
                  (long long)s[1], (long long)s[2], (long long)clt__shares_predict_ps(3, c, s, total),
                  (long long)brute_best(c, total, floor));
  }
}
END_TEST

/* ---- the whole loop on simulated replicas ----------------------------------- */

typedef struct sim {
  clt_comm *comm;
  clt__dp *dp;
  double fixed[2], per[2]; /* the simulated devices */
  double contention;       /* seconds a step loses when both run (they share cores) */
  double resplit;          /* seconds the first step after new shares loses (kernels built for them) */
  double drift;            /* replica 1's slow swing, a fraction of its per-sample cost */
  int64_t step, probes;    /* steps done; steps that gave a probe's one sample */
  int64_t resplits;        /* steps whose shares differ from the step before's */
  int64_t last[2];
} sim;

static void sim_start(sim *s, int64_t batch, int64_t min_share) {
  memset(s, 0, sizeof *s);
  ck_assert_int_eq(clt_comm_create_local(&s->comm), 0);
  ck_assert_int_eq(clt__dp_create(s->comm, 2, &s->dp), 0);
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.batch = batch;
  o.balance = CLT_BALANCE_AUTO;
  o.balance_min_share = min_share;
  ck_assert_int_eq(clt__dp_shares_init(s->dp, &o, batch), 0);
}

static void sim_stop(sim *s) {
  clt__dp_destroy(s->dp);
  clt_comm_destroy(s->comm);
}

/* n steps: each replica "runs" its share in its model's time (+-1%), and
 * the balancer re-splits when due, as the trainer's step does. */
static void sim_run(sim *s, int n) {
  for (int k = 0; k < n; k++) {
    const int64_t *sh = clt__dp_shares(s->dp);
    s->probes += sh[1] == 1;
    int fresh = s->step > 0 && (sh[0] != s->last[0] || sh[1] != s->last[1]);
    s->resplits += fresh;
    s->last[0] = sh[0], s->last[1] = sh[1];
    double wall = 0;
    for (int i = 0; i < 2; i++)
      if (sh[i] > 0) {
        double per = s->per[i] * (i == 1 ? 1 + s->drift * sin((double)s->step / 40.0) : 1);
        double took = (s->fixed[i] + per * sh[i]) * wobble((int)s->step + 5 * i);
        clt__dp_note_run(s->dp, i, sh[i], took);
        wall = took > wall ? took : wall;
      }
    clt__dp_note_step(s->dp, wall + s->contention * (sh[0] > 0 && sh[1] > 0) + s->resplit * fresh);
    s->step++;
    int changed;
    if (clt__dp_rebalance_due(s->dp, s->step)) ck_assert_int_eq(clt__dp_rebalance(s->dp, s->step, &changed), 0);
  }
}

START_TEST(the_loop_settles_probes_and_gives_work_back) {
  sim s;
  sim_start(&s, 64, 0);
  /* PoCL-like: 1 ms + 1.2 ms a sample (78 ms for 64); rusticl-like: 90 ms
   * fixed + 20 ms a sample, so one sample takes it 110 ms. */
  s.fixed[0] = 0.001, s.per[0] = 0.0012;
  s.fixed[1] = 0.090, s.per[1] = 0.020;
  sim_run(&s, 30); /* equal, then in proportion, then the fitted model */
  const int64_t *sh = clt__dp_shares(s.dp);
  ck_assert_msg(sh[0] == 64 && sh[1] == 0, "after 30 steps: %lld:%lld", (long long)sh[0], (long long)sh[1]);
  const clt__cost *c = clt__dp_costs(s.dp);
  ck_assert_msg(fabs(c[1].fixed_s - 0.090) < 0.009 && fabs(c[1].per_sample_s - 0.020) < 0.002,
                "rusticl's fit %g + %g", c[1].fixed_s, c[1].per_sample_s);
  ck_assert_msg(fabs(c[0].per_sample_s - 0.0012) < 0.0002, "PoCL's per sample %g", c[0].per_sample_s);

  /* At 0 it is probed with one sample, less often the longer it stays. */
  int64_t before = s.probes;
  sim_run(&s, 1000);
  int64_t probes = s.probes - before;
  ck_assert_msg(probes >= 2 && probes <= 8, "%lld probes in 1000 steps", (long long)probes);
  ck_assert_int_eq(clt__dp_shares(s.dp)[1], 0);

  /* It becomes as fast as the other: the next probe finds out, and it gets
   * about half the batch back. */
  s.fixed[1] = 0.001, s.per[1] = 0.0012;
  sim_run(&s, 700);
  sh = clt__dp_shares(s.dp);
  ck_assert_msg(sh[1] >= 28 && sh[1] <= 36, "after it sped up: %lld:%lld", (long long)sh[0], (long long)sh[1]);
  sim_stop(&s);
}
END_TEST

/* The log lines that reach the default level (warn) and name a replica
 * going to 0 samples; the last one. */
typedef struct idle_log {
  int said;
  char last[512];
} idle_log;

static void count_idle(clt_log_level level, const char *msg, void *user) {
  idle_log *l = user;
  if (level <= CLT_LOG_WARN && strstr(msg, "gets 0 samples")) {
    l->said++;
    snprintf(l->last, sizeof l->last, "%s", msg);
  }
}

/* A replica the balancer leaves out says why at the default level, once:
 * not only at CLT_LOG_LEVEL=info (issue 39), and not again after each
 * probe that leaves it at 0 (the probes run below: 1000 steps). */
START_TEST(a_replica_left_at_0_says_why_once_by_default) {
  idle_log l = {0, ""};
  clt_log_set_level(CLT_LOG_WARN);
  clt_log_set(count_idle, &l);
  sim s;
  sim_start(&s, 64, 0);
  s.fixed[0] = 0.001, s.per[0] = 0.0012; /* as above: PoCL-like and rusticl-like */
  s.fixed[1] = 0.090, s.per[1] = 0.020;
  sim_run(&s, 1030);
  clt_log_set(NULL, NULL);
  ck_assert_int_eq(clt__dp_shares(s.dp)[1], 0);
  ck_assert_msg(s.probes >= 2, "%lld probes", (long long)s.probes);
  ck_assert_msg(l.said == 1, "said %d times at the warn level (last: %s)", l.said, l.last);
  ck_assert_msg(strstr(l.last, "replica 1 gets 0 samples") && strstr(l.last, "one sample would take it"), "%s", l.last);
  sim_stop(&s);
}
END_TEST

/* Devices that slow each other (on the same cores) cost more together than
 * either model says: the measured steps decide. A replica with a small
 * share is tried without for one re-split; with contention the job stays
 * without it, and without contention it gets its share back. */
START_TEST(measured_steps_overrule_the_model) {
  for (int contended = 0; contended < 2; contended++) {
    sim s;
    sim_start(&s, 64, 0);
    s.fixed[0] = 0.001, s.per[0] = 0.0012; /* 78 ms for 64 alone */
    s.fixed[1] = 0.001, s.per[1] = 0.010;  /* the model gives it ~7 samples: a 70 ms step */
    s.contention = contended ? 0.030 : 0;
    sim_run(&s, 100);
    const int64_t *sh = clt__dp_shares(s.dp);
    if (contended)
      ck_assert_msg(sh[1] == 0, "with contention: %lld:%lld", (long long)sh[0], (long long)sh[1]);
    else
      ck_assert_msg(sh[1] >= 5 && sh[1] <= 8, "without contention: %lld:%lld", (long long)sh[0], (long long)sh[1]);
    sim_stop(&s);
  }
}
END_TEST

/* Two PoCL ranks, one slowed to about half speed (bench/hetero.sh rig a),
 * where new shares cost 0.45 s (kernels built for the new batch sizes) and
 * the slow one's speed swings by 15%: the split settles and stays, rather
 * than follow the swing a sample at a time and pay 0.45 s for each move;
 * a real change (it becomes 3x slower) still moves it. */
START_TEST(a_resplit_must_pay_for_itself) {
  for (int costly = 0; costly < 2; costly++) {
    sim s;
    sim_start(&s, 64, 0);
    s.fixed[0] = 0.0005, s.per[0] = 0.00064;
    s.fixed[1] = 0.0005, s.per[1] = 0.00118;
    s.drift = 0.15;
    s.resplit = costly ? 0.45 : 0;
    sim_run(&s, 40);
    int64_t before = s.resplits;
    sim_run(&s, 600);
    int64_t moves = s.resplits - before;
    const int64_t *sh = clt__dp_shares(s.dp);
    if (costly)
      ck_assert_msg(moves == 0, "%lld re-splits in 600 steps at 0.45 s each (now %lld:%lld)", (long long)moves,
                    (long long)sh[0], (long long)sh[1]);
    else /* free re-splits: it follows the swing (what makes this test see the rule) */
      ck_assert_msg(moves >= 2, "%lld re-splits in 600 steps", (long long)moves);
    ck_assert_msg(sh[1] >= 19 && sh[1] <= 25, "shares %lld:%lld", (long long)sh[0], (long long)sh[1]);
    s.per[1] *= 3;
    sim_run(&s, 100);
    sh = clt__dp_shares(s.dp);
    ck_assert_msg(sh[1] >= 6 && sh[1] <= 10, "3x slower: shares %lld:%lld", (long long)sh[0], (long long)sh[1]);
    sim_stop(&s);
  }
}
END_TEST

START_TEST(the_floor_holds_and_bad_floors_are_refused) {
  sim s;
  sim_start(&s, 64, 4);
  s.fixed[0] = 0.001, s.per[0] = 0.0012;
  s.fixed[1] = 0.090, s.per[1] = 0.020;
  sim_run(&s, 200);
  ck_assert_int_eq(clt__dp_shares(s.dp)[1], 4);
  ck_assert_int_eq(s.probes, 0);
  sim_stop(&s);

  clt_comm *comm;
  clt__dp *dp;
  ck_assert_int_eq(clt_comm_create_local(&comm), 0);
  ck_assert_int_eq(clt__dp_create(comm, 2, &dp), 0);
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.balance = CLT_BALANCE_AUTO;
  o.balance_min_share = 33;
  ck_assert_int_eq(clt__dp_shares_init(dp, &o, 64), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "--balance-min-share 33") && strstr(clt_last_error(), "at most 32"), "%s",
                clt_last_error());
  clt__dp_destroy(dp);
  clt_comm_destroy(comm);
}
END_TEST

int main(void) {
  Suite *s = suite_create("balance");
  TCase *tc = tcase_create("balance");
  tcase_add_test(tc, the_fit_recovers_fixed_and_per_sample_costs);
  tcase_add_test(tc, the_fit_of_few_or_odd_runs);
  tcase_add_test(tc, a_replica_that_only_slows_the_step_gets_none);
  tcase_add_test(tc, the_shares_are_the_min_max_optimum);
  tcase_add_test(tc, the_loop_settles_probes_and_gives_work_back);
  tcase_add_test(tc, measured_steps_overrule_the_model);
  tcase_add_test(tc, a_resplit_must_pay_for_itself);
  tcase_add_test(tc, the_floor_holds_and_bad_floors_are_refused);
  tcase_add_test(tc, a_replica_left_at_0_says_why_once_by_default);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
