/*
 * test_normalization.c: the inputs' normalisation a trainer keeps
 * (clt_trainer_set_normalization): the step API's forward and gradient on
 * raw samples equal those on samples normalised by hand with none set;
 * the weights file carries it (clt_weights_normalization reads back every
 * bit), a fresh trainer loading the weights takes it, and weights without
 * one clear it; a normalisation of the wrong length in a file is refused
 * naming the file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

enum { IN = 4, OUT = 2, N = 9 };

static const char *spec = "input 4\nlinear 3\ntanh\nlinear 2 init=he\nloss mse\n";

static clt_trainer *make(clt_model **m, clt_devices **one) {
  clt_trainer *t;
  ck_assert_msg(clt_model_parse(spec, "reg.model", m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_devices_select(tu_devices, "0", one), 0);
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.batch = 4;
  ck_assert_msg(clt_trainer_create(*m, *one, NULL, &o, &t) == 0, "%s", clt_last_error());
  return t;
}

START_TEST(step_api_and_weights) {
  float x[N * IN], xn[N * IN], tg[N * OUT], a[N * OUT], b[N * OUT];
  const float shift[IN] = {10, -3, 0.5f, 1000}, scale[IN] = {2, 0.25f, 1, 300};
  for (int i = 0; i < N * IN; i++) x[i] = (float)((i * 37) % 11) * scale[i % IN] + shift[i % IN];
  for (int i = 0; i < N * IN; i++) xn[i] = (x[i] - shift[i % IN]) / scale[i % IN];
  for (int i = 0; i < N * OUT; i++) tg[i] = (float)(i % 3) - 1;
  clt_model *m, *m2;
  clt_devices *one, *one2;
  clt_trainer *t = make(&m, &one);
  double l1, l2, sq1, sq2;
  ck_assert_msg(clt_trainer_forward_targets(t, xn, tg, N, a, N * OUT, &l1, &sq1) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_set_normalization(t, CLT_NORMALIZE_STANDARD, shift, scale) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_forward_targets(t, x, tg, N, b, N * OUT, &l2, &sq2) == 0, "%s", clt_last_error());
  for (int i = 0; i < N * OUT; i++) ck_assert_msg(a[i] == b[i], "output %d: %g by hand, %g by the trainer", i, a[i], b[i]);
  ck_assert(l1 == l2 && sq1 == sq2);
  int64_t P = clt_model_param_count(m);
  float *g1 = malloc((size_t)P * sizeof *g1), *g2 = malloc((size_t)P * sizeof *g2);
  ck_assert_int_eq(clt_trainer_gradient_targets(t, x, tg, N, g2, P, NULL), 0);
  ck_assert_int_eq(clt_trainer_set_normalization(t, CLT_NORMALIZE_NONE, NULL, NULL), 0);
  ck_assert_int_eq(clt_trainer_gradient_targets(t, xn, tg, N, g1, P, NULL), 0);
  ck_assert(memcmp(g1, g2, (size_t)P * sizeof *g1) == 0);
  /* saved with the weights, bit for bit; a fresh trainer takes it */
  char path[64], plain[64];
  snprintf(path, sizeof path, "/tmp/clt-norm-%ld.safetensors", (long)getpid());
  snprintf(plain, sizeof plain, "/tmp/clt-norm-%ld-plain.safetensors", (long)getpid());
  ck_assert_int_eq(clt_trainer_save_weights(t, plain), 0);
  ck_assert_int_eq(clt_trainer_set_normalization(t, CLT_NORMALIZE_STANDARD, shift, scale), 0);
  ck_assert_int_eq(clt_trainer_save_weights(t, path), 0);
  clt_normalize_kind kind;
  int64_t n;
  float rs[IN], rc[IN];
  ck_assert_int_eq(clt_weights_normalization(path, &kind, rs, rc, IN, &n), 0);
  ck_assert(kind == CLT_NORMALIZE_STANDARD && n == IN && memcmp(rs, shift, sizeof rs) == 0 && memcmp(rc, scale, sizeof rc) == 0);
  ck_assert_int_eq(clt_weights_normalization(plain, &kind, NULL, NULL, 0, &n), 0);
  ck_assert(kind == CLT_NORMALIZE_NONE && n == 0);
  clt_trainer *t2 = make(&m2, &one2);
  ck_assert_msg(clt_trainer_load_weights(t2, path) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_forward_targets(t2, x, tg, N, b, N * OUT, NULL, NULL), 0);
  for (int i = 0; i < N * OUT; i++) ck_assert_msg(a[i] == b[i], "loaded: output %d: %g, not %g", i, b[i], a[i]);
  ck_assert_int_eq(clt_trainer_load_weights(t2, plain), 0); /* none saved: none kept */
  ck_assert_int_eq(clt_trainer_forward_targets(t2, xn, tg, N, b, N * OUT, NULL, NULL), 0);
  for (int i = 0; i < N * OUT; i++) ck_assert(a[i] == b[i]);
  unlink(path), unlink(plain);
  free(g1), free(g2);
  clt_trainer_destroy(t2), clt_trainer_destroy(t);
  clt_devices_destroy(one2), clt_devices_destroy(one);
  clt_model_destroy(m2), clt_model_destroy(m);
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *su = suite_create("normalization");
  TCase *tc = tcase_create("normalization");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, step_api_and_weights);
  suite_add_tcase(su, tc);
  rc = tu_run(su);
  tu_teardown();
  return rc;
}
