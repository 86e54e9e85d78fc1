/*
 * test_buckets.c: the gradient bucket layout (src/dp/buckets.c) from the
 * ranges each layer's backward writes, without a device: sizes and cuts,
 * a layer's several ranges kept together, and a tied range (written by two
 * layers) completing at the lower one. Links the internal library.
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
  tcase_add_test(tc, no_parameters_no_buckets);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
