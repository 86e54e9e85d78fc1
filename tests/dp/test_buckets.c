/*
 * test_buckets.c: the gradient bucket layout (src/dp/buckets.c) from the
 * ranges each layer's backward writes, without a device: sizes and cuts,
 * a layer's several ranges kept together, and a tied range (written by two
 * layers) completing at the lower one; ZeRO stage 2's pool of bucket
 * buffers for those layouts. Links the internal library.
 */
#include <check.h>
#include <stdlib.h>

#include "dp/dp.h"

/* Layer i writes ranges r[first[i] .. first[i+1]). */
static clt__bucket_layout layout(int nlayers, const int *first, const clt__param_range *r, int64_t limit) {
  clt__bucket_layout b;
  ck_assert_int_eq(clt__bucket_layout_make(nlayers, first, r, limit, &b), 0);
  return b;
}

static void bucket_is(const clt__bucket_layout *b, int k, int64_t lo, int64_t hi, int closed_at) {
  ck_assert_msg(k < b->n, "bucket %d of %d", k, b->n);
  ck_assert_msg(b->lo[k] == lo && b->hi[k] == hi && b->closed_at[k] == closed_at,
                "bucket %d is [%lld, %lld) closed at layer %d, not [%lld, %lld) at %d", k, (long long)b->lo[k],
                (long long)b->hi[k], b->closed_at[k], (long long)lo, (long long)hi, closed_at);
}

/* An MLP's layout: input, linear, relu, linear, relu, linear. */
static const int mlp_first[] = {0, 0, 1, 1, 2, 2, 3};
static const clt__param_range mlp[] = {{0, 10}, {10, 30}, {30, 35}};

START_TEST(one_bucket_without_a_limit) {
  clt__bucket_layout b = layout(6, mlp_first, mlp, 0);
  ck_assert_int_eq(b.n, 1);
  bucket_is(&b, 0, 0, 35, 1);
  clt__bucket_layout_free(&b);
}
END_TEST

START_TEST(buckets_fill_to_the_limit_from_the_top) {
  clt__bucket_layout b = layout(6, mlp_first, mlp, 20);
  ck_assert_int_eq(b.n, 2);
  bucket_is(&b, 0, 10, 35, 3); /* 5 floats are too few: layer 3's join them */
  bucket_is(&b, 1, 0, 10, 1);  /* the last may be smaller */
  clt__bucket_layout_free(&b);
  b = layout(6, mlp_first, mlp, 1);
  ck_assert_int_eq(b.n, 3);
  bucket_is(&b, 0, 30, 35, 5);
  bucket_is(&b, 1, 10, 30, 3);
  bucket_is(&b, 2, 0, 10, 1);
  clt__bucket_layout_free(&b);
}
END_TEST

START_TEST(a_layers_ranges_stay_together) {
  /* layer 2: weights [0, 8) and bias [8, 10); layer 4: [10, 20) */
  static const int first[] = {0, 0, 0, 2, 2, 3};
  static const clt__param_range r[] = {{0, 8}, {8, 10}, {10, 20}};
  clt__bucket_layout b = layout(5, first, r, 1);
  ck_assert_int_eq(b.n, 2);
  bucket_is(&b, 0, 10, 20, 4);
  bucket_is(&b, 1, 0, 10, 2);
  clt__bucket_layout_free(&b);
}
END_TEST

START_TEST(a_tied_range_completes_at_the_lowest_layer_writing_it) {
  /* embedding (layer 1) owns [0, 10); layer 3 [10, 30); the output layer 5
   * writes the embedding's [0, 10) again (tied) and its own bias [30, 35). */
  static const int first[] = {0, 0, 1, 1, 2, 2, 4};
  static const clt__param_range r[] = {{0, 10}, {10, 30}, {0, 10}, {30, 35}};
  clt__bucket_layout b = layout(6, first, r, 1);
  ck_assert_int_eq(b.n, 3);
  bucket_is(&b, 0, 30, 35, 5);
  bucket_is(&b, 1, 10, 30, 3);
  bucket_is(&b, 2, 0, 10, 1); /* not 5: layer 1's backward still adds to it */
  clt__bucket_layout_free(&b);
  /* In one bucket with layer 5's bias, the bucket waits for layer 1. */
  static const int first2[] = {0, 0, 1, 3};
  static const clt__param_range r2[] = {{0, 10}, {0, 10}, {10, 12}};
  b = layout(3, first2, r2, 0);
  ck_assert_int_eq(b.n, 1);
  bucket_is(&b, 0, 0, 12, 1);
  clt__bucket_layout_free(&b);
}
END_TEST

/* Every bucket fits its slot, slots do not overlap, and each is as long as
 * the longest bucket it holds. */
static void slots_fit(const clt__bucket_layout *b, const clt__grad_pool *p) {
  ck_assert_int_eq(p->slot_at[0], 0);
  for (int s = 0; s < p->nslots; s++) {
    int64_t longest = 0;
    for (int k = 0; k < b->n; k++)
      if (p->slot[k] == s && b->hi[k] - b->lo[k] > longest) longest = b->hi[k] - b->lo[k];
    ck_assert_msg(p->slot_at[s + 1] - p->slot_at[s] == longest, "slot %d: %lld floats, its longest bucket %lld", s,
                  (long long)(p->slot_at[s + 1] - p->slot_at[s]), (long long)longest);
    ck_assert(longest <= p->largest);
  }
  ck_assert_int_eq(p->floats, p->slot_at[p->nslots]);
}

/* ZeRO stage 2's pool (src/dp/zero.c): two slots for a chain of buckets
 * (the one being written and the one being reduced), a slot reused only
 * after an earlier bucket, and with a tied range, whose bucket is open from
 * the output layer to the embedding, one more. Each slot is as long as its
 * own buckets need. */
START_TEST(the_pool_double_buffers_and_holds_a_tied_bucket) {
  clt__grad_pool p;
  clt__bucket_layout b = layout(6, mlp_first, mlp, 1); /* 3 buckets: layers 5, 3, 1 */
  ck_assert_int_eq(b.opened_at[0], 5);
  ck_assert_int_eq(b.opened_at[2], 1);
  ck_assert_int_eq(clt__grad_pool_make(&b, &p), 0);
  ck_assert_int_eq(p.nslots, 2);
  ck_assert(p.slot[0] == 0 && p.slot[1] == 1 && p.slot[2] == 0);
  ck_assert(p.after[0] == -1 && p.after[1] == -1 && p.after[2] == 0); /* after the host read bucket 0 */
  /* Slot 0 holds [30, 35) then [0, 10), slot 1 [10, 30): 10 + 20 floats,
   * where two slots of the longest bucket would be 40. */
  ck_assert(p.slot_at[1] == 10 && p.floats == 30 && p.largest == 20);
  slots_fit(&b, &p);
  clt__grad_pool_free(&p);
  clt__bucket_layout_free(&b);
  b = layout(6, mlp_first, mlp, 0); /* one bucket: one slot */
  ck_assert_int_eq(clt__grad_pool_make(&b, &p), 0);
  ck_assert(p.nslots == 1 && p.floats == 35 && p.largest == 35 && p.after[0] == -1);
  clt__grad_pool_free(&p);
  clt__bucket_layout_free(&b);
  /* Tied: layers 7 (bias [40, 45) and the tied [0, 10)), 5 [25, 40), 3
   * [10, 25), 1 [0, 10). Bucket 3 (the tied one) opens at layer 7. */
  static const int first[] = {0, 0, 1, 1, 2, 2, 3, 3, 5};
  static const clt__param_range r[] = {{0, 10}, {10, 25}, {25, 40}, {0, 10}, {40, 45}};
  b = layout(8, first, r, 1);
  ck_assert_int_eq(b.n, 4);
  ck_assert(b.opened_at[3] == 7 && b.closed_at[3] == 1);
  ck_assert_int_eq(clt__grad_pool_make(&b, &p), 0);
  ck_assert_int_eq(p.nslots, 3);
  for (int k = 0; k < b.n; k++) { /* every reuse follows an earlier bucket, never the open tied one */
    ck_assert(p.after[k] < k);
    ck_assert(p.after[k] != 3);
  }
  ck_assert_int_eq(p.after[3], -1);
  slots_fit(&b, &p);
  clt__grad_pool_free(&p);
  clt__bucket_layout_free(&b);
  /* GPT-like: a tied embedding [0, 100) far longer than the rest, written
   * by the output layer 9 and the embedding 1; layers 7, 5, 3 of 6 floats
   * each. The embedding's slot is its own; the others take turns in two
   * slots of 6: 112 floats, not 3 x 100. */
  static const int gfirst[] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5};
  static const clt__param_range g[] = {{0, 100}, {100, 106}, {106, 112}, {112, 118}, {0, 100}};
  b = layout(10, gfirst, g, 1);
  ck_assert_int_eq(b.n, 4);
  ck_assert_int_eq(clt__grad_pool_make(&b, &p), 0);
  ck_assert_int_eq(p.nslots, 3);
  ck_assert(p.floats == 112 && p.largest == 100);
  slots_fit(&b, &p);
  clt__grad_pool_free(&p);
  clt__bucket_layout_free(&b);
}
END_TEST

START_TEST(no_parameters_no_buckets) {
  static const int first[] = {0, 0, 0};
  clt__bucket_layout b = layout(2, first, NULL, 1);
  ck_assert_int_eq(b.n, 0);
  clt__bucket_layout_free(&b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("buckets");
  TCase *tc = tcase_create("layout");
  tcase_add_test(tc, one_bucket_without_a_limit);
  tcase_add_test(tc, buckets_fill_to_the_limit_from_the_top);
  tcase_add_test(tc, a_layers_ranges_stay_together);
  tcase_add_test(tc, a_tied_range_completes_at_the_lowest_layer_writing_it);
  tcase_add_test(tc, the_pool_double_buffers_and_holds_a_tied_bucket);
  tcase_add_test(tc, no_parameters_no_buckets);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
