/*
 * test_forward.c: clt_trainer_forward, the model's output for given
 * inputs, on every device: a small MLP's logits against the same network
 * computed in plain C from the trainer's parameters, over more samples than
 * one batch (so in several runs); its summed loss against
 * clt_trainer_evaluate's mean and the accuracy of its argmax against
 * evaluate's; the same logits without labels; f16 activations close to
 * f32; bad arguments refused. (tests/io/hf_check.py checks a GPT's logits
 * against transformers.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

enum { IN = 6, HID = 5, OUT = 3, N = 37, BATCH = 8 };

/* init=he on the output layer: its default zeros would make every output 0. */
static const char *mlp = "input 6\nlinear 5\nrelu\nlinear 3 init=he\n";
static char data_path[64];
static float xs[N * IN];
static int32_t ys[N];

/* The MLP in plain C from the parameter arena: W1 (5, 6), b1, W2 (3, 5), b2. */
static void host_logits(const float *p, const float *x, float *out) {
  const float *w1 = p, *b1 = w1 + HID * IN, *w2 = b1 + HID, *b2 = w2 + OUT * HID;
  for (int s = 0; s < N; s++) {
    double h[HID];
    for (int j = 0; j < HID; j++) {
      double a = b1[j];
      for (int i = 0; i < IN; i++) a += (double)w1[j * IN + i] * x[s * IN + i];
      h[j] = a > 0 ? a : 0;
    }
    for (int k = 0; k < OUT; k++) {
      double a = b2[k];
      for (int j = 0; j < HID; j++) a += (double)w2[k * HID + j] * h[j];
      out[s * OUT + k] = (float)a;
    }
  }
}

static clt_trainer *make_trainer(int device, clt_dtype precision, clt_model **m, clt_devices **one) {
  char spec[16];
  clt_trainer *t;
  snprintf(spec, sizeof spec, "%d", device);
  ck_assert_msg(clt_model_parse(mlp, "mlp.model", m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_devices_select(tu_devices, spec, one), 0);
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.batch = BATCH;
  o.precision = precision;
  ck_assert_msg(clt_trainer_create(*m, *one, NULL, &o, &t) == 0, "%s", clt_last_error());
  return t;
}

START_TEST(logits_and_loss) {
  clt_dataset *ds;
  ck_assert_msg(clt_dataset_open_raw(data_path, &ds) == 0, "%s", clt_last_error());
  for (int d = 0; d < tu_ndev; d++) {
    clt_model *m;
    clt_devices *one;
    clt_trainer *t = make_trainer(d, CLT_F32, &m, &one);
    float p[HID * IN + HID + OUT * HID + OUT], out[N * OUT], out2[N * OUT], want[N * OUT];
    ck_assert_int_eq(clt_model_param_count(m), (int64_t)(sizeof p / sizeof p[0]));
    ck_assert_int_eq(clt_trainer_params(t, p, clt_model_param_count(m)), 0);
    host_logits(p, xs, want);
    double sum, mean, acc;
    ck_assert_msg(clt_trainer_forward(t, xs, ys, N, out, N * OUT, &sum) == 0, "%s", clt_last_error());
    /* float32 sums of 6 and 5 products of values ~1, against double */
    double worst = 0;
    for (int i = 0; i < N * OUT; i++) worst = fmax(worst, fabs(out[i] - want[i]));
    ck_assert_msg(worst < 1e-5, "%s: logits differ from plain C by %g", tu_name(tu_ctx[d]), worst);
    /* evaluate runs the same batches through the same kernels */
    ck_assert_msg(clt_trainer_evaluate(t, ds, &mean, &acc) == 0, "%s", clt_last_error());
    ck_assert_msg(fabs(sum / N - mean) <= 1e-6 * fabs(mean), "%s: forward's loss %.9g / %d, evaluate's %.9g",
                  tu_name(tu_ctx[d]), sum, N, mean);
    int correct = 0;
    for (int s = 0; s < N; s++) {
      int best = 0;
      for (int k = 1; k < OUT; k++)
        if (out[s * OUT + k] > out[s * OUT + best]) best = k;
      correct += best == ys[s];
    }
    ck_assert_msg(fabs(correct / (double)N - acc) < 1e-12, "%s: argmax accuracy %d/%d, evaluate's %g",
                  tu_name(tu_ctx[d]), correct, N, acc);
    /* without labels: the same logits, no loss */
    ck_assert_int_eq(clt_trainer_forward(t, xs, NULL, N, out2, N * OUT, &sum), 0);
    ck_assert(isnan(sum));
    ck_assert_int_eq(memcmp(out, out2, sizeof out), 0);
    /* mistakes */
    ck_assert_int_eq(clt_trainer_forward(t, xs, ys, N, out, N * OUT - 1, NULL), CLT_ESHAPE);
    ck_assert_ptr_nonnull(strstr(clt_last_error(), "holds 110 floats"));
    ck_assert_int_eq(clt_trainer_forward(t, xs, ys, 0, out, N * OUT, NULL), CLT_EINVAL);
    ck_assert_int_eq(clt_trainer_forward(t, NULL, ys, N, out, N * OUT, NULL), CLT_EINVAL);
    clt_trainer_destroy(t);

    /* f16 activations: the output read back through half; its rounding
     * (2^-11 relative) on values ~1 */
    clt_devices *one16;
    clt_model *m16;
    t = make_trainer(d, CLT_F16, &m16, &one16);
    ck_assert_msg(clt_trainer_forward(t, xs, ys, N, out2, N * OUT, &sum) == 0, "%s", clt_last_error());
    worst = 0;
    for (int i = 0; i < N * OUT; i++) worst = fmax(worst, fabs(out2[i] - want[i]));
    ck_assert_msg(worst < 1e-2, "%s: f16 logits differ from plain C by %g", tu_name(tu_ctx[d]), worst);
    clt_trainer_destroy(t);
    clt_devices_destroy(one16);
    clt_model_destroy(m16);
    clt_devices_destroy(one);
    clt_model_destroy(m);
  }
  clt_dataset_destroy(ds);
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  /* inputs ~1 and labels from a fixed sequence */
  unsigned s = 7;
  for (int i = 0; i < N * IN; i++) {
    s = s * 1664525u + 1013904223u;
    xs[i] = (float)((s >> 8) / 8388608.0 - 1.0);
  }
  for (int i = 0; i < N; i++) ys[i] = i % OUT;
  snprintf(data_path, sizeof data_path, "/tmp/clt-forward-%ld.raw", (long)getpid());
  const int64_t dims[1] = {IN};
  if (clt_dataset_write_raw(data_path, N, 1, dims, OUT, xs, ys) != 0) {
    fprintf(stderr, "writing %s: %s\n", data_path, clt_last_error());
    return 1;
  }
  Suite *su = suite_create("forward");
  TCase *tc = tcase_create("forward");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, logits_and_loss);
  suite_add_tcase(su, tc);
  rc = tu_run(su);
  unlink(data_path);
  tu_teardown();
  return rc;
}
