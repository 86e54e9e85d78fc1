/*
 * test_cut.c: the pipeline's cut by measured cost (src/pp/cut.c,
 * --stages auto) against every cut there is, on made-up costs: P stages
 * over n pieces, stage s paying cost[s][q] for piece q (its device's
 * time), each stage holding a piece with parameters. The programme must
 * find the least slowest stage, and among those the least total, and say
 * so when no cut exists; a fast stage must take more pieces than a slow
 * one.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pp/pp_internal.h"

/* Every cut of n pieces into P non-empty runs (bounds b[0] = 0 < b[1] <
 * ... < b[P] = n): the least (slowest stage, total); found 0 when none
 * gives every stage a piece with parameters. */
static void brute(int P, int n, const int64_t *cost, const int *has, int64_t *slow, int64_t *total, int *found) {
  int b[8];
  *found = 0;
  b[0] = 0, b[P] = n;
  /* the inner bounds as a P - 1 digit counter */
  for (int i = 1; i < P; i++) b[i] = i;
  for (;;) {
    int ok = 1;
    for (int i = 0; i < P && ok; i++) ok = b[i] < b[i + 1];
    int64_t s = 0, t = 0;
    for (int i = 0; i < P && ok; i++) {
      int64_t c = 0;
      int p = 0;
      for (int q = b[i]; q < b[i + 1]; q++) c += cost[i * n + q], p |= has[q];
      ok = p;
      if (c > s) s = c;
      t += c;
    }
    if (ok && (!*found || s < *slow || (s == *slow && t < *total))) *slow = s, *total = t, *found = 1;
    int i = P - 1;
    while (i >= 1 && b[i] == n - (P - i)) i--;
    if (i < 1) break;
    b[i]++;
    for (int j = i + 1; j < P; j++) b[j] = b[j - 1] + 1;
  }
}

START_TEST(least_slowest_stage_as_brute_force) {
  unsigned seed = 12345;
  int cases = 0, none = 0;
  for (int trial = 0; trial < 3000; trial++) {
    seed = seed * 1103515245u + 12345u;
    int P = 1 + (int)(seed >> 16) % 4, n = P + (int)(seed >> 8) % 7;
    int64_t cost[4 * 12];
    int has[12], bound[5];
    for (int q = 0; q < n; q++) {
      seed = seed * 1103515245u + 12345u;
      has[q] = (seed >> 20) % 4 != 0;
    }
    for (int s = 0; s < P; s++)
      for (int q = 0; q < n; q++) {
        seed = seed * 1103515245u + 12345u;
        cost[s * n + q] = (int64_t)((seed >> 12) % 50) * (1 + s); /* stages of unequal speed, ties likely */
      }
    int64_t slow = 0, total = 0, worst = -7;
    int found;
    brute(P, n, cost, has, &slow, &total, &found);
    int rc = clt__pp_cut_by_cost(P, n, cost, has, bound, &worst);
    if (!found) {
      ck_assert_msg(rc == CLT_EINVAL, "trial %d: P=%d n=%d: no cut exists, but the programme returned %d", trial, P,
                    n, rc);
      none++;
      continue;
    }
    ck_assert_msg(rc == CLT_OK, "trial %d: P=%d n=%d: a cut exists, the programme returned %d", trial, P, n, rc);
    ck_assert_int_eq(bound[0], 0);
    ck_assert_int_eq(bound[P], n);
    int64_t s = 0, t = 0;
    for (int i = 0; i < P; i++) {
      ck_assert_msg(bound[i] < bound[i + 1], "trial %d: stage %d is empty", trial, i);
      int64_t c = 0;
      int p = 0;
      for (int q = bound[i]; q < bound[i + 1]; q++) c += cost[i * n + q], p |= has[q];
      ck_assert_msg(p, "trial %d: stage %d holds no parameters", trial, i);
      if (c > s) s = c;
      t += c;
    }
    ck_assert_msg(s == slow && t == total && worst == slow,
                  "trial %d: P=%d n=%d: the programme's cut costs (%lld, %lld), reported %lld; the best is (%lld, %lld)",
                  trial, P, n, (long long)s, (long long)t, (long long)worst, (long long)slow, (long long)total);
    cases++;
  }
  ck_assert_int_gt(cases, 2000);
  ck_assert_int_gt(none, 10);
}
END_TEST

/* Two stages, 8 equal pieces: a stage 3 times slower per piece gets 2 of
 * them, the faster 6 (6 x 1 = 2 x 3). */
START_TEST(a_fast_stage_takes_more) {
  int64_t cost[2 * 8];
  int has[8], bound[3];
  for (int q = 0; q < 8; q++) cost[q] = 3, cost[8 + q] = 1, has[q] = 1;
  int64_t worst;
  ck_assert_int_eq(clt__pp_cut_by_cost(2, 8, cost, has, bound, &worst), CLT_OK);
  ck_assert_int_eq(bound[1], 2);
  ck_assert_int_eq(worst, 6);
  for (int q = 0; q < 8; q++) cost[q] = 1, cost[8 + q] = 3; /* the other way round */
  ck_assert_int_eq(clt__pp_cut_by_cost(2, 8, cost, has, bound, &worst), CLT_OK);
  ck_assert_int_eq(bound[1], 6);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pp_cut");
  TCase *tc = tcase_create("pp_cut");
  tcase_add_test(tc, least_slowest_stage_as_brute_force);
  tcase_add_test(tc, a_fast_stage_takes_more);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
