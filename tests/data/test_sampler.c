/*
 * test_sampler.c: the sampler (permutations, shares, slices, the last
 * partial batch, positions), the largest-remainder shares, and the prefetch
 * thread (its batches equal direct reads across epochs, seeks and share
 * changes; errors reach the caller; shutdown at any point neither hangs nor
 * leaks). The pinned-memory path runs on the first OpenCL device when there
 * is one; everything else needs none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain/opencl.h>

#include "datautil.h"

/* ---- permutations ----------------------------------------------------------- */

/* Every index of the epoch, in order, by walking all steps and replicas. */
static int64_t epoch_order(clt_sampler *s, int64_t epoch, int64_t *out) {
  int64_t n = 0, k;
  for (int64_t step = 0; step < clt_sampler_steps_per_epoch(s); step++)
    for (int r = 0; r < clt_sampler_replicas(s); r++) {
      du_ok(clt_sampler_slice(s, epoch, step, r, out + n, &k));
      n += k;
    }
  return n;
}

START_TEST(permutation) {
  enum { N = 1000 };
  clt_sampler *a = NULL, *b = NULL, *c = NULL;
  du_ok(clt_sampler_create(N, 64, 12345, 0, &a));
  du_ok(clt_sampler_create(N, 64, 12345, 0, &b));
  du_ok(clt_sampler_create(N, 64, 12346, 0, &c));
  ck_assert_int_eq(clt_sampler_steps_per_epoch(a), 16); /* 15 full + 1 of 40 */
  ck_assert_int_eq(clt_sampler_batch_size(a, 14), 64);
  ck_assert_int_eq(clt_sampler_batch_size(a, 15), 40);
  ck_assert_int_eq(clt_sampler_batch_size(a, 16), 0);
  static int64_t pa[N], pb[N], pa1[N], pc[N];
  ck_assert_int_eq(epoch_order(a, 3, pa), N);
  /* a permutation: every index once */
  static char seen[N];
  memset(seen, 0, sizeof seen);
  for (int i = 0; i < N; i++) {
    ck_assert(pa[i] >= 0 && pa[i] < N);
    ck_assert_int_eq(seen[pa[i]]++, 0);
  }
  /* the documented algorithm (doc/data.md), computed independently in Python */
  static const int64_t golden[8] = {44, 166, 720, 872, 460, 924, 984, 145};
  for (int i = 0; i < 8; i++) ck_assert_int_eq(pa[i], golden[i]);
  /* same seed, same order; another epoch or seed, another order */
  ck_assert_int_eq(epoch_order(b, 3, pb), N);
  ck_assert_mem_eq(pa, pb, sizeof pa);
  ck_assert_int_eq(epoch_order(a, 4, pa1), N);
  ck_assert(memcmp(pa, pa1, sizeof pa) != 0);
  ck_assert_int_eq(epoch_order(c, 3, pc), N);
  ck_assert(memcmp(pa, pc, sizeof pa) != 0);
  /* asking out of order gives the same answer */
  ck_assert_int_eq(epoch_order(a, 3, pa1), N);
  ck_assert_mem_eq(pa, pa1, sizeof pa);
  clt_sampler_destroy(a);
  clt_sampler_destroy(b);
  clt_sampler_destroy(c);
}
END_TEST

START_TEST(golden_small) {
  /* [5 3 1 0 7 4 6 8 2 9] etc.: the same Python reference as above */
  static const int64_t want[3][10] = {{5, 3, 1, 0, 7, 4, 6, 8, 2, 9},
                                      {4, 2, 3, 6, 5, 0, 7, 1, 9, 8},
                                      {5, 4, 1, 0, 6, 9, 3, 7, 8, 2}};
  const uint64_t seeds[3] = {42, 42, 7};
  const int64_t epochs[3] = {0, 1, 0};
  for (int t = 0; t < 3; t++) {
    clt_sampler *s = NULL;
    int64_t got[10], n;
    du_ok(clt_sampler_create(10, 10, seeds[t], 0, &s));
    du_ok(clt_sampler_slice(s, epochs[t], 0, 0, got, &n));
    ck_assert_int_eq(n, 10);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(got[i], want[t][i]);
    clt_sampler_destroy(s);
  }
}
END_TEST

START_TEST(no_shuffle) {
  clt_sampler *s = NULL;
  int64_t order[23];
  du_ok(clt_sampler_create(23, 5, 99, CLT_SAMPLER_NO_SHUFFLE, &s));
  du_ok(clt_sampler_set_shares(s, 2, NULL)); /* 3 + 2 */
  ck_assert_int_eq(clt_sampler_share(s, 0), 3);
  ck_assert_int_eq(clt_sampler_share(s, 1), 2);
  ck_assert_int_eq(epoch_order(s, 7, order), 23);
  for (int i = 0; i < 23; i++) ck_assert_int_eq(order[i], i);
  clt_sampler_destroy(s);
}
END_TEST

/* ---- shares and slices --------------------------------------------------------- */

START_TEST(slices_tile) {
  /* For every step, the replicas' slices laid end to end are the one-replica
   * global batch: same samples, same order. */
  enum { N = 100, B = 16 };
  clt_sampler *one = NULL, *three = NULL;
  du_ok(clt_sampler_create(N, B, 5, 0, &one));
  du_ok(clt_sampler_create(N, B, 5, 0, &three));
  const int64_t shares[3] = {5, 7, 4};
  du_ok(clt_sampler_set_shares(three, 3, shares));
  ck_assert_int_eq(clt_sampler_steps_per_epoch(three), 7);
  for (int64_t epoch = 0; epoch < 3; epoch++)
    for (int64_t step = 0; step < 7; step++) {
      int64_t global[B], parts[B], n, total = 0;
      du_ok(clt_sampler_slice(one, epoch, step, 0, global, &n));
      ck_assert_int_eq(n, clt_sampler_batch_size(one, step));
      for (int r = 0; r < 3; r++) {
        int64_t k;
        du_ok(clt_sampler_slice(three, epoch, step, r, parts + total, &k));
        if (step < 6) ck_assert_int_eq(k, shares[r]);
        ck_assert_int_le(k, shares[r]);
        total += k;
      }
      ck_assert_int_eq(total, n);
      ck_assert_mem_eq(global, parts, (size_t)n * sizeof *global);
    }
  /* the last batch has 100 - 6*16 = 4 samples: quotas 1.25 1.75 1.00 -> 1 2 1 */
  int64_t idx[B], k;
  const int64_t want_last[3] = {1, 2, 1};
  for (int r = 0; r < 3; r++) {
    du_ok(clt_sampler_slice(three, 0, 6, r, idx, &k));
    ck_assert_int_eq(k, want_last[r]);
  }
  clt_sampler_destroy(one);
  clt_sampler_destroy(three);
}
END_TEST

START_TEST(partial_batch_empty_share) {
  /* 13 samples, batch 10 split 1+1+8: the last 3 go 0+0+3 (quotas .3 .3 2.4). */
  clt_sampler *s = NULL;
  int64_t idx[10], k;
  du_ok(clt_sampler_create(13, 10, 1, 0, &s));
  const int64_t shares[3] = {1, 1, 8};
  du_ok(clt_sampler_set_shares(s, 3, shares));
  ck_assert_int_eq(clt_sampler_steps_per_epoch(s), 2);
  du_ok(clt_sampler_slice(s, 0, 1, 0, idx, &k));
  ck_assert_int_eq(k, 0);
  du_ok(clt_sampler_slice(s, 0, 1, 1, idx, &k));
  ck_assert_int_eq(k, 0);
  du_ok(clt_sampler_slice(s, 0, 1, 2, idx, &k));
  ck_assert_int_eq(k, 3);
  clt_sampler_destroy(s);
}
END_TEST

/* A share of 0 (the balancer's for a replica that would only slow the
 * step): that replica takes nothing of any batch, the others all of it. */
START_TEST(a_share_of_zero) {
  clt_sampler *s = NULL;
  int64_t idx[10], k, seen = 0;
  du_ok(clt_sampler_create(25, 10, 3, 0, &s));
  du_ok(clt_sampler_set_shares(s, 3, (const int64_t[]){6, 0, 4}));
  ck_assert_int_eq(clt_sampler_share(s, 1), 0);
  for (int64_t step = 0; step < clt_sampler_steps_per_epoch(s); step++) {
    du_ok(clt_sampler_slice(s, 0, step, 1, idx, &k));
    ck_assert_int_eq(k, 0);
    for (int r = 0; r < 3; r += 2) {
      du_ok(clt_sampler_slice(s, 0, step, r, idx, &k));
      seen += k;
    }
  }
  ck_assert_int_eq(seen, 25); /* the last, partial batch of 5 too: 3 + 0 + 2 */
  /* more replicas than samples, when shares say who takes them */
  du_ok(clt_sampler_set_shares(s, 12, (const int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}));
  clt_sampler_destroy(s);
}
END_TEST

START_TEST(drop_last) {
  clt_sampler *s = NULL;
  du_ok(clt_sampler_create(100, 16, 5, CLT_SAMPLER_DROP_LAST, &s));
  du_ok(clt_sampler_set_shares(s, 3, (const int64_t[]){5, 7, 4}));
  ck_assert_int_eq(clt_sampler_steps_per_epoch(s), 6);
  ck_assert_int_eq(clt_sampler_batch_size(s, 5), 16);
  static int64_t order[100];
  ck_assert_int_eq(epoch_order(s, 0, order), 96);
  static char seen[100];
  for (int i = 0; i < 96; i++) ck_assert_int_eq(seen[order[i]]++, 0);
  /* the 4 left out differ between epochs */
  static int64_t order1[100];
  ck_assert_int_eq(epoch_order(s, 1, order1), 96);
  ck_assert(memcmp(order, order1, sizeof order) != 0);
  clt_sampler_destroy(s);
}
END_TEST

START_TEST(sampler_errors) {
  clt_sampler *s = NULL;
  du_expect_error(clt_sampler_create(10, 11, 0, 0, &s), CLT_EINVAL, "global batch (11) is larger than the dataset (10");
  du_expect_error(clt_sampler_create(10, 0, 0, 0, &s), CLT_EINVAL, "global batch size 0");
  du_expect_error(clt_sampler_create(0, 1, 0, 0, &s), CLT_EINVAL, "0 samples");
  du_expect_error(clt_sampler_create(10, 2, 0, 64, &s), CLT_EINVAL, "unknown flags 0x40");
  ck_assert_ptr_null(s);
  du_ok(clt_sampler_create(100, 16, 0, 0, &s));
  du_expect_error(clt_sampler_set_shares(s, 3, (const int64_t[]){5, 7, 5}), CLT_EINVAL, "sum to 17",
                  "global batch is 16");
  du_expect_error(clt_sampler_set_shares(s, 3, (const int64_t[]){-1, 13, 4}), CLT_EINVAL, "replica 0's share is -1",
                  "[0, 16]");
  du_expect_error(clt_sampler_set_shares(s, 17, NULL), CLT_EINVAL, "17 replicas cannot share a global batch of 16");
  ck_assert_int_eq(clt_sampler_replicas(s), 1); /* unchanged */
  int64_t idx[16], n;
  du_expect_error(clt_sampler_slice(s, 0, 7, 0, idx, &n), CLT_EINVAL, "step 7", "7 steps");
  du_expect_error(clt_sampler_slice(s, 0, 0, 1, idx, &n), CLT_EINVAL, "replica 1 does not exist");
  du_expect_error(clt_sampler_set_position(s, (clt_sampler_pos){2, 7}), CLT_EINVAL, "epoch 2 step 7",
                  "another dataset or batch size");
  clt_sampler_destroy(s);
  clt_sampler_destroy(NULL);
}
END_TEST

/* ---- largest remainder ------------------------------------------------------------ */

static void expect_shares(int n, const double *w, int64_t total, int64_t min_each, const int64_t *want) {
  int64_t got[16];
  du_ok(clt_shares_from_weights(n, w, total, min_each, got));
  for (int i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i], "share %d: got %lld, want %lld", i, (long long)got[i], (long long)want[i]);
}

START_TEST(shares_weights) {
  expect_shares(3, (const double[]){1, 1, 98}, 100, 1, (const int64_t[]){1, 1, 98});
  expect_shares(3, (const double[]){1, 2, 3}, 6, 1, (const int64_t[]){1, 2, 3});
  expect_shares(3, (const double[]){1, 1, 1}, 10, 0, (const int64_t[]){4, 3, 3}); /* ties: lower index */
  expect_shares(2, (const double[]){0, 1}, 10, 1, (const int64_t[]){1, 9});       /* at least 1 */
  expect_shares(2, (const double[]){0.001, 1000}, 5, 1, (const int64_t[]){1, 4});
  expect_shares(4, (const double[]){0, 0, 0, 1}, 4, 1, (const int64_t[]){1, 1, 1, 1});
  /* quotas 2.9 2.9 0.2 with min 1: floors 2 2 1 = 5, one short -> lower index of the ties */
  expect_shares(3, (const double[]){14.5, 14.5, 1}, 6, 1, (const int64_t[]){3, 2, 1});
  /* a fast and a slow device: 3:1 of 256 */
  expect_shares(2, (const double[]){3000.0, 1000.0}, 256, 1, (const int64_t[]){192, 64});
  /* min 2 with quotas 0.5 0.5 9: 2 2 9 = 13 is 3 over; only the last may give */
  expect_shares(3, (const double[]){1, 1, 18}, 10, 2, (const int64_t[]){2, 2, 6});

  int64_t s[4];
  du_expect_error(clt_shares_from_weights(4, (const double[]){1, 1, 1, 1}, 3, 1, s), CLT_EINVAL,
                  "cannot give 4 replicas at least 1 sample each out of 3");
  du_expect_error(clt_shares_from_weights(2, (const double[]){1, -1}, 3, 0, s), CLT_EINVAL, "weight 1 is -1");
  du_expect_error(clt_shares_from_weights(2, (const double[]){1, NAN}, 3, 0, s), CLT_EINVAL, "weight 1 is nan");
  du_expect_error(clt_shares_from_weights(2, (const double[]){0, 0}, 3, 0, s), CLT_EINVAL, "sum to 0");

  /* Random weights: the sum is exact, each share is at least min, and with
   * min 0 every share is within 1 of its quota (the largest-remainder bound). */
  uint64_t x = 88172645463325252ull;
  for (int t = 0; t < 2000; t++) {
    int n = 1 + (int)(t % 13);
    double w[16], sum = 0;
    int64_t got[16], total = 13 + t % 1000, min_each = t % 3 == 0 ? 0 : 1, acc = 0;
    for (int i = 0; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      w[i] = (double)(x % 100000) / 1000.0 + (i == 0);
      sum += w[i];
    }
    du_ok(clt_shares_from_weights(n, w, total, min_each, got));
    for (int i = 0; i < n; i++) {
      ck_assert_int_ge(got[i], min_each);
      if (min_each == 0) ck_assert_msg(fabs((double)got[i] - total * w[i] / sum) < 1.0 + 1e-6, "t %d i %d", t, i);
      acc += got[i];
    }
    ck_assert_int_eq(acc, total);
  }
}
END_TEST

/* ---- positions ------------------------------------------------------------------------- */

START_TEST(position_resume) {
  /* Run 37 steps, save; an uninterrupted run and one resumed from the saved
   * position in a fresh sampler then agree for 50 steps (across epochs). */
  enum { N = 103, B = 10, R = 3 };
  const int64_t shares[R] = {3, 5, 2};
  clt_sampler *a = NULL, *b = NULL;
  clt_sampler_pos pos, pa, pb, saved;
  du_ok(clt_sampler_create(N, B, 2024, 0, &a));
  du_ok(clt_sampler_set_shares(a, R, shares));
  for (int i = 0; i < 37; i++) clt_sampler_next(a, &pos);
  ck_assert_int_eq(pos.epoch, 3); /* 11 steps an epoch: step 36 is epoch 3 step 3 */
  ck_assert_int_eq(pos.step, 3);
  clt_sampler_get_position(a, &saved);
  ck_assert_int_eq(saved.epoch, 3);
  ck_assert_int_eq(saved.step, 4);
  du_ok(clt_sampler_create(N, B, 2024, 0, &b));
  du_ok(clt_sampler_set_shares(b, R, shares));
  du_ok(clt_sampler_set_position(b, saved));
  for (int i = 0; i < 50; i++) {
    clt_sampler_next(a, &pa);
    clt_sampler_next(b, &pb);
    ck_assert_int_eq(pa.epoch, pb.epoch);
    ck_assert_int_eq(pa.step, pb.step);
    for (int r = 0; r < R; r++) {
      int64_t ia[B], ib[B], na, nb;
      du_ok(clt_sampler_slice(a, pa.epoch, pa.step, r, ia, &na));
      du_ok(clt_sampler_slice(b, pb.epoch, pb.step, r, ib, &nb));
      ck_assert_int_eq(na, nb);
      ck_assert_mem_eq(ia, ib, (size_t)na * sizeof *ia);
    }
  }
  /* a clone continues identically too */
  clt_sampler *c = NULL;
  du_ok(clt_sampler_clone(a, &c));
  clt_sampler_next(a, &pa);
  clt_sampler_next(c, &pb);
  ck_assert_int_eq(pa.epoch, pb.epoch);
  ck_assert_int_eq(pa.step, pb.step);
  ck_assert_int_eq(clt_sampler_share(c, 1), 5);
  clt_sampler_destroy(a);
  clt_sampler_destroy(b);
  clt_sampler_destroy(c);
}
END_TEST

/* ---- prefetcher -------------------------------------------------------------------------- */

static char *tmp;
static char path[4096];
static clt_dataset *ds; /* 103 samples of (3, 5) floats */
enum { PF_N = 103, PF_F = 15 };

static void pf_setup(void) {
  tmp = du_mkdtemp();
  static float x[PF_N * PF_F];
  static int32_t y[PF_N];
  for (int i = 0; i < PF_N * PF_F; i++) x[i] = sinf((float)i) * 3.0f;
  for (int i = 0; i < PF_N; i++) y[i] = i % 7;
  du_join(path, sizeof path, tmp, "pf.raw.gz");
  du_ok(clt_dataset_write_raw(path, PF_N, 2, (const int64_t[]){3, 5}, 7, x, y));
  du_ok(clt_dataset_open_raw(path, &ds));
  du_ok(clt_dataset_normalize(ds, 0.1f, 2.0f));
}

static void pf_teardown(void) {
  clt_dataset_destroy(ds);
  ds = NULL;
  du_rmdir(tmp);
}

/* The batch equals a direct read of the sampler's slice, bit for bit. */
static void check_batch(clt_sampler *ref, int replica, const clt_batch *b) {
  int64_t idx[64], n;
  static float x[64 * PF_F];
  int32_t y[64];
  du_ok(clt_sampler_slice(ref, b->epoch, b->step, replica, idx, &n));
  ck_assert_int_eq(b->n, n);
  ck_assert_int_eq(b->sample_size, PF_F);
  ck_assert_int_eq(b->global_n, clt_sampler_batch_size(ref, b->step));
  ck_assert_int_eq(b->last_in_epoch, b->step == clt_sampler_steps_per_epoch(ref) - 1);
  du_ok(clt_dataset_get_batch(ds, idx, n, x, y));
  ck_assert_mem_eq(b->x, x, (size_t)n * PF_F * sizeof *x);
  ck_assert_mem_eq(b->y, y, (size_t)n * sizeof *y);
}

static void run_prefetch(clt_context *ctx) {
  const int64_t shares[3] = {3, 5, 2};
  clt_sampler *s = NULL;
  du_ok(clt_sampler_create(PF_N, 10, 77, 0, &s)); /* 11 steps: 10 full, 1 of 3 */
  du_ok(clt_sampler_set_shares(s, 3, shares));
  for (int r = 0; r < 3; r++) {
    clt_prefetcher *pf = NULL;
    du_ok(clt_prefetcher_create(ds, s, r, ctx, &pf));
    clt_sampler_pos expect = {0, 0}, at;
    for (int i = 0; i < 30; i++) { /* 2.7 epochs */
      clt_batch b;
      clt_prefetcher_position(pf, &at);
      ck_assert_int_eq(at.epoch, expect.epoch);
      ck_assert_int_eq(at.step, expect.step);
      du_ok(clt_prefetcher_next(pf, &b));
      ck_assert_int_eq(b.epoch, expect.epoch);
      ck_assert_int_eq(b.step, expect.step);
      check_batch(s, r, &b);
      if (++expect.step == 11) expect.step = 0, expect.epoch++;
    }
    /* resume elsewhere */
    du_ok(clt_prefetcher_seek(pf, (clt_sampler_pos){5, 9}));
    for (int i = 0; i < 4; i++) {
      clt_batch b;
      du_ok(clt_prefetcher_next(pf, &b));
      ck_assert_int_eq(b.epoch, i < 2 ? 5 : 6);
      ck_assert_int_eq(b.step, (9 + i) % 11);
      check_batch(s, r, &b);
    }
    du_expect_error(clt_prefetcher_seek(pf, (clt_sampler_pos){0, 11}), CLT_EINVAL, "step 11");
    /* the load balancer moves samples: replica 2 grows from 2 to 6 */
    const int64_t more[3] = {2, 2, 6};
    du_ok(clt_prefetcher_set_shares(pf, 3, more));
    clt_sampler *s2 = NULL;
    du_ok(clt_sampler_clone(s, &s2));
    du_ok(clt_sampler_set_shares(s2, 3, more));
    for (int i = 0; i < 12; i++) {
      clt_batch b;
      du_ok(clt_prefetcher_next(pf, &b));
      if (i == 0) ck_assert_int_eq(b.step, 2); /* continues where it was: epoch 6 step 2 */
      check_batch(s2, r, &b);
    }
    du_expect_error(clt_prefetcher_set_shares(pf, 3, (const int64_t[]){2, 2, 2}), CLT_EINVAL, "sum to 6");
    clt_batch b;
    du_ok(clt_prefetcher_next(pf, &b)); /* a refused change keeps the old shares */
    check_batch(s2, r, &b);
    clt_sampler_destroy(s2);
    clt_prefetcher_destroy(pf);
  }
  clt_sampler_destroy(s);
}

START_TEST(prefetch_matches_direct) { run_prefetch(NULL); }
END_TEST

START_TEST(prefetch_pinned) {
  clt_devices *devs = NULL;
  clt_context *ctx = NULL;
  if (clt_devices_discover(&devs) < 0 || clt_devices_count(devs) == 0) {
    fprintf(stderr, "SKIP (part): no OpenCL device for pinned prefetch buffers\n");
    clt_devices_destroy(devs);
    return;
  }
  du_ok(clt_context_create(devs, 0, &ctx));
  fprintf(stderr, "pinned prefetch buffers on %s\n", clt_context_device(ctx)->name);
  run_prefetch(ctx);
  clt_context_destroy(ctx);
  clt_devices_destroy(devs);
}
END_TEST

START_TEST(prefetch_resume_from_sampler) {
  /* A prefetcher starts at its sampler's position (a resumed run). */
  clt_sampler *s = NULL;
  clt_prefetcher *pf = NULL;
  clt_batch b;
  du_ok(clt_sampler_create(PF_N, 8, 3, CLT_SAMPLER_DROP_LAST, &s));
  du_ok(clt_sampler_set_position(s, (clt_sampler_pos){4, 10}));
  du_ok(clt_prefetcher_create(ds, s, 0, NULL, &pf));
  du_ok(clt_prefetcher_next(pf, &b));
  ck_assert_int_eq(b.epoch, 4);
  ck_assert_int_eq(b.step, 10);
  ck_assert_int_eq(b.last_in_epoch, 0);
  check_batch(s, 0, &b);
  du_ok(clt_prefetcher_next(pf, &b));
  ck_assert_int_eq(b.step, 11); /* 103 / 8: 12 full steps (0..11), the other 7 dropped */
  ck_assert_int_eq(b.last_in_epoch, 1);
  ck_assert_int_eq(b.global_n, 8);
  du_ok(clt_prefetcher_next(pf, &b));
  ck_assert_int_eq(b.epoch, 5);
  ck_assert_int_eq(b.step, 0);
  check_batch(s, 0, &b);
  clt_prefetcher_destroy(pf);
  du_expect_error(clt_prefetcher_create(ds, s, 1, NULL, &pf), CLT_EINVAL, "replica 1 does not exist");
  clt_sampler_destroy(s);
  du_ok(clt_sampler_create(50, 8, 3, 0, &s));
  du_expect_error(clt_prefetcher_create(ds, s, 0, NULL, &pf), CLT_EINVAL, "covers 50 samples", path);
  clt_sampler_destroy(s);
  clt_prefetcher_destroy(NULL);
}
END_TEST

START_TEST(prefetch_shutdown) {
  /* Destroy right after create, after one batch, and mid-epoch while the
   * thread is decoding: none may hang (Check's timeout) or leak (valgrind). */
  clt_sampler *s = NULL;
  du_ok(clt_sampler_create(PF_N, 7, 1, 0, &s));
  for (int i = 0; i < 200; i++) {
    clt_prefetcher *pf = NULL;
    clt_batch b;
    du_ok(clt_prefetcher_create(ds, s, 0, NULL, &pf));
    for (int k = 0; k < i % 4; k++) du_ok(clt_prefetcher_next(pf, &b));
    if (i % 5 == 0) du_ok(clt_prefetcher_seek(pf, (clt_sampler_pos){i, 3}));
    clt_prefetcher_destroy(pf);
  }
  clt_sampler_destroy(s);
}
END_TEST

START_TEST(prefetch_error) {
  /* Sample 5 overflows when normalised: the thread's error comes back to the
   * caller at the batch that holds it, naming the batch and the sample, and
   * stays until a seek. */
  float x[PF_N * PF_F];
  int32_t y[PF_N] = {0};
  for (int i = 0; i < PF_N * PF_F; i++) x[i] = 1.0f;
  x[5 * PF_F + 2] = 3e38f;
  du_join(path, sizeof path, tmp, "overflow.raw");
  clt_dataset *bad = NULL;
  du_ok(clt_dataset_write_raw(path, PF_N, 1, (const int64_t[]){PF_F}, 1, x, y));
  du_ok(clt_dataset_open_raw(path, &bad));
  du_ok(clt_dataset_normalize(bad, -3e38f, 1.0f));
  clt_sampler *s = NULL;
  clt_prefetcher *pf = NULL;
  clt_batch b;
  du_ok(clt_sampler_create(PF_N, 4, 0, CLT_SAMPLER_NO_SHUFFLE, &s));
  du_ok(clt_prefetcher_create(bad, s, 0, NULL, &pf));
  du_ok(clt_prefetcher_next(pf, &b)); /* samples 0-3 */
  du_expect_error(clt_prefetcher_next(pf, &b), CLT_ENONFINITE, "prefetch thread, replica 0, epoch 0 step 1", path,
                  "sample 5 value 2");
  du_expect_error(clt_prefetcher_next(pf, &b), CLT_ENONFINITE, "epoch 0 step 1", "sample 5");
  du_ok(clt_prefetcher_seek(pf, (clt_sampler_pos){0, 2}));
  du_ok(clt_prefetcher_next(pf, &b));
  ck_assert_int_eq(b.step, 2);
  clt_prefetcher_destroy(pf);
  clt_sampler_destroy(s);
  clt_dataset_destroy(bad);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("sampler");
  TCase *tc = tcase_create("sampler");
  tcase_add_test(tc, permutation);
  tcase_add_test(tc, golden_small);
  tcase_add_test(tc, no_shuffle);
  tcase_add_test(tc, slices_tile);
  tcase_add_test(tc, partial_batch_empty_share);
  tcase_add_test(tc, a_share_of_zero);
  tcase_add_test(tc, drop_last);
  tcase_add_test(tc, sampler_errors);
  tcase_add_test(tc, shares_weights);
  tcase_add_test(tc, position_resume);
  suite_add_tcase(s, tc);
  tc = tcase_create("prefetch");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, pf_setup, pf_teardown);
  tcase_add_test(tc, prefetch_matches_direct);
  tcase_add_test(tc, prefetch_pinned);
  tcase_add_test(tc, prefetch_resume_from_sampler);
  tcase_add_test(tc, prefetch_shutdown);
  tcase_add_test(tc, prefetch_error);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
