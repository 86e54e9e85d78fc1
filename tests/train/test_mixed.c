/*
 * test_mixed.c: mixed-precision training (--precision fp16) end to end on a
 * slice of Fashion-MNIST, through the public API:
 *   - an MLP and a CNN learn in fp16 on every device, about as well as in
 *     fp32 on the same steps, and the dynamic loss scale behaves: it starts
 *     at 2^16 and each skipped step halves it;
 *   - two replicas in one process sum their gradients as f16 (the wire
 *     format) and stay bitwise identical every step;
 *   - a sample that overflows f16 in the forward pass on ONE replica makes
 *     every replica skip that step (and only that step);
 *   - data that overflow f16 on every step stop training after max_skips
 *     skips in a row with a message that says so, parameters untouched;
 *   - an fp16 checkpoint carries the loss scale and its counters: a resumed
 *     run ends bitwise where the uninterrupted one does.
 * Skips when the dataset is not installed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "fashion.h"

#define NTRAIN 1024
#define NTEST 512

static char train_path[64], test_path[64], huge_path[64], outlier_path[64];

/* Normalised as cltrain does for Fashion-MNIST, times `times`, and sample
 * `outlier` (if >= 0) set to 1e6 throughout. */
typedef struct edit {
  float times;
  int64_t outlier;
} edit;

static void apply_edit(float *x, int64_t n, void *user) {
  const edit *e = user;
  for (int64_t i = 0; i < n * 784; i++) x[i] = (x[i] - 0.286f) / 0.353f * e->times;
  if (e->outlier >= 0)
    for (int64_t i = 0; i < 784; i++) x[e->outlier * 784 + i] = 1e6f;
}

static int slice_to_raw(const char *split, int64_t n, float times, int64_t outlier, const char *path) {
  static const int64_t dims[2] = {28, 28};
  edit e = {times, outlier};
  return tu_fashion_raw(split, n, 2, dims, apply_edit, &e, path);
}

/* Step events as they come: the loss scale before and the skip count. */
typedef struct trace {
  int n;
  double scale[256];
  int64_t skipped[256];
  double first_loss, last_loss;
} trace;

static void on_event(const clt_train_event *ev, void *user) {
  trace *tr = user;
  if (ev->kind != CLT_EVENT_STEP || tr->n >= 256) return;
  if (tr->n == 0) tr->first_loss = ev->loss;
  if (isfinite(ev->loss)) tr->last_loss = ev->loss;
  tr->scale[tr->n] = ev->loss_scale;
  tr->skipped[tr->n] = ev->skipped;
  tr->n++;
}

static const char *MLP = "input 784\nlinear 128\nrelu\nlinear 10\n";
static const char *CNN = "input 1 28 28\nconv2d 8 kernel=3 pad=1\nrelu\nmaxpool 2\nconv2d 16 kernel=3 pad=1 stride=2\n"
                         "relu\nflatten\ndropout 0.1\nlinear 10\n";

typedef struct run {
  const char *model, *devices, *data;
  clt_dtype precision;
  int epochs, check_every;
  float lr, loss_scale; /* 0: the default */
} run;

/* Train; returns the status, and the held-out accuracy and trace. */
static int train(const run *r, double *acc, trace *tr, float *params, int64_t *nparams) {
  clt_model *m;
  clt_devices *devs;
  clt_dataset *train, *test;
  clt_trainer *t;
  ck_assert_msg(clt_model_parse(r->model, "test.model", &m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_devices_select(tu_devices, r->devices, &devs), 0);
  ck_assert_msg(clt_dataset_open_raw(r->data, &train) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_dataset_open_raw(test_path, &test) == 0, "%s", clt_last_error());
  clt_train_options o;
  clt_train_options_defaults(&o);
  clt_optimizer_defaults(CLT_OPT_SGD, &o.optimizer);
  o.schedule.lr = r->lr;
  o.epochs = r->epochs;
  o.batch = 64;
  o.log_every = 1;
  o.check_every = r->check_every;
  o.precision = r->precision;
  if (r->loss_scale > 0) o.loss_scale = r->loss_scale;
  o.callback = on_event;
  memset(tr, 0, sizeof *tr);
  o.callback_user = tr;
  ck_assert_msg(clt_trainer_create(m, devs, NULL, &o, &t) == 0, "%s", clt_last_error());
  *nparams = clt_model_param_count(m);
  int rc = clt_trainer_fit(t, train, NULL);
  char err[2048];
  snprintf(err, sizeof err, "%s", clt_last_error());
  double loss;
  if (rc == 0) ck_assert_msg(clt_trainer_evaluate(t, test, &loss, acc) == 0, "%s", clt_last_error());
  if (params) ck_assert_int_eq(clt_trainer_params(t, params, *nparams), 0);
  clt_trainer_destroy(t);
  clt_dataset_destroy(train);
  clt_dataset_destroy(test);
  clt_devices_destroy(devs);
  clt_model_destroy(m);
  if (rc < 0) fprintf(stderr, "(expected?) %s\n", err);
  return rc;
}

static void learns(const char *model, float lr) {
  for (int d = 0; d < tu_ndev; d++) {
    char dev[16];
    snprintf(dev, sizeof dev, "%d", d);
    run r = {model, dev, train_path, CLT_F16, 2, 0, lr, 0};
    trace tr16, tr32;
    double acc16, acc32;
    int64_t P;
    ck_assert_msg(train(&r, &acc16, &tr16, NULL, &P) == 0, "fp16 on %s: %s", tu_name(tu_ctx[d]), clt_last_error());
    r.precision = CLT_F32;
    ck_assert_int_eq(train(&r, &acc32, &tr32, NULL, &P), 0);
    fprintf(stderr, "%s: fp16 accuracy %.3f (loss %.3f -> %.3f, %lld skipped, scale %g), fp32 %.3f\n",
            tu_name(tu_ctx[d]), acc16, tr16.first_loss, tr16.last_loss, (long long)tr16.skipped[tr16.n - 1],
            tr16.scale[tr16.n - 1], acc32);
    /* The scale starts at 2^16 and each skip halves it (2000 clean steps
     * to double it again are not reached here); the summed loss's
     * gradients, 64 samples' worth, overflow half at that scale now and
     * then, but a few halvings settle it. */
    int64_t s = tr16.skipped[tr16.n - 1];
    ck_assert_msg(tr16.scale[0] == ldexp(65536, -(int)tr16.skipped[0]), "step 1: %lld skipped, scale %g",
                  (long long)tr16.skipped[0], tr16.scale[0]);
    ck_assert_msg(s <= 8 && tr16.scale[tr16.n - 1] == ldexp(65536, -(int)s), "%lld skips, scale %g", (long long)s,
                  tr16.scale[tr16.n - 1]);
    ck_assert_msg(acc16 > 0.6 && acc16 > acc32 - 0.05, "fp16 accuracy %.3f, fp32 %.3f", acc16, acc32);
  }
}

START_TEST(mlp_learns_in_fp16) { learns(MLP, 0.05f); }
END_TEST

START_TEST(cnn_learns_in_fp16) { learns(CNN, 0.05f); }
END_TEST

/* Two replicas in one process: the gradients go through the f16 wire and
 * the host's f32 sum; check_every = 1 compares the replicas' CRCs every
 * step. One training sample of 1e6 everywhere overflows f16 in the forward
 * pass of whichever replica draws it; every replica must skip that step. */
START_TEST(two_replicas_skip_together) {
  if (tu_ndev < 2) return;
  /* A scale of 256 does not overflow these gradients: the outlier's step
   * is the only skip of the epoch, and halves the scale once. */
  run r = {MLP, "0,1", outlier_path, CLT_F16, 1, 1, 0.05f, 256};
  trace tr;
  double acc;
  int64_t P;
  ck_assert_msg(train(&r, &acc, &tr, NULL, &P) == 0, "%s", clt_last_error());
  fprintf(stderr, "two replicas: %lld skipped, scale %g, accuracy %.3f\n", (long long)tr.skipped[tr.n - 1],
          tr.scale[tr.n - 1], acc);
  ck_assert_int_eq(tr.n, NTRAIN / 64);
  ck_assert_msg(tr.skipped[tr.n - 1] == 1 && tr.scale[tr.n - 1] == 128, "%lld skipped, scale %g",
                (long long)tr.skipped[tr.n - 1], tr.scale[tr.n - 1]);
  ck_assert(acc > 0.6);
}
END_TEST

/* Every sample overflows f16: max_skips (20) skips in a row, then a clear
 * error; the parameters are still the initial ones. */
START_TEST(overflowing_data_stop_after_twenty_skips) {
  run r = {MLP, "0", huge_path, CLT_F16, 8, 0, 0.05f, 0}; /* 4 steps an epoch */
  trace tr;
  double acc;
  int64_t P = 101770; /* the MLP's */
  float *after = malloc((size_t)P * sizeof *after), *before = malloc((size_t)P * sizeof *before);
  ck_assert_int_eq(train(&r, &acc, &tr, after, &P), CLT_ENONFINITE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "20 steps in a row"));
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "--precision fp32"));
  ck_assert_int_eq(tr.n, 19); /* the 20th skip ends fit() before its event */
  /* A fresh trainer holds the initial parameters: nothing was applied. */
  clt_model *m;
  clt_devices *one;
  clt_trainer *t;
  clt_train_options o;
  clt_train_options_defaults(&o);
  ck_assert_int_eq(clt_model_parse(MLP, "test.model", &m), 0);
  ck_assert_int_eq(clt_devices_select(tu_devices, "0", &one), 0);
  ck_assert_int_eq(clt_trainer_create(m, one, NULL, &o, &t), 0);
  ck_assert_int_eq(clt_trainer_params(t, before, P), 0);
  ck_assert_msg(memcmp(before, after, (size_t)P * sizeof *before) == 0, "a skipped step changed the parameters");
  clt_trainer_destroy(t);
  clt_devices_destroy(one);
  clt_model_destroy(m);
  free(after), free(before);
}
END_TEST

/* An fp16 run saved at step 6 and resumed ends where the uninterrupted one
 * does, bit for bit, loss scale and skip count included: the checkpoint
 * holds the scale and its counters. The scale of 2^30 overflows at first,
 * so skips happen before the save. */
static void fp16_segment(int64_t steps, const char *load, const char *save, float *params, trace *tr) {
  clt_model *m;
  clt_devices *one;
  clt_dataset *train;
  clt_trainer *t;
  ck_assert_int_eq(clt_model_parse(MLP, "test.model", &m), 0);
  ck_assert_int_eq(clt_devices_select(tu_devices, "0", &one), 0);
  ck_assert_int_eq(clt_dataset_open_raw(train_path, &train), 0);
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.max_steps = steps;
  o.log_every = 1;
  o.precision = CLT_F16;
  o.loss_scale = 0x1p30f;
  o.callback = on_event;
  memset(tr, 0, sizeof *tr);
  o.callback_user = tr;
  ck_assert_int_eq(clt_trainer_create(m, one, NULL, &o, &t), 0);
  if (load) ck_assert_msg(clt_trainer_load_checkpoint(t, load) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, train, NULL) == 0, "%s", clt_last_error());
  if (save) ck_assert_msg(clt_trainer_save_checkpoint(t, save) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_params(t, params, clt_model_param_count(m)), 0);
  clt_trainer_destroy(t);
  clt_dataset_destroy(train);
  clt_devices_destroy(one);
  clt_model_destroy(m);
}

START_TEST(fp16_resume_is_bitwise_the_uninterrupted_run) {
  int64_t P = 101770;
  float *whole = malloc((size_t)P * 4), *half = malloc((size_t)P * 4), *resumed = malloc((size_t)P * 4);
  char path[64];
  snprintf(path, sizeof path, "/tmp/clt-mp-ckpt-%ld.safetensors", (long)getpid());
  trace a, b, c;
  fp16_segment(12, NULL, NULL, whole, &a);
  fp16_segment(6, NULL, path, half, &b);
  fp16_segment(12, path, NULL, resumed, &c);
  unlink(path);
  ck_assert_msg(b.skipped[b.n - 1] >= 1, "no skip before the save (scale %g)", b.scale[b.n - 1]);
  ck_assert_int_eq(c.n, 6);
  ck_assert(c.scale[c.n - 1] == a.scale[a.n - 1] && c.skipped[c.n - 1] == a.skipped[a.n - 1]);
  ck_assert_msg(memcmp(whole, resumed, (size_t)P * 4) == 0, "the resumed run's parameters differ");
  free(whole), free(half), free(resumed);
}
END_TEST

/* Options out of range are refused when the trainer is made, naming them. */
START_TEST(bad_mixed_precision_options_are_named) {
  clt_model *m;
  clt_devices *one;
  clt_trainer *t = NULL;
  ck_assert_int_eq(clt_model_parse(MLP, "test.model", &m), 0);
  ck_assert_int_eq(clt_devices_select(tu_devices, "0", &one), 0);
  static const struct {
    clt_dtype precision;
    float scale;
    int64_t window;
    int skips;
    const char *named;
  } bad[] = {{CLT_I32, 65536, 2000, 20, "precision must be fp32 or fp16, not i32"},
             {CLT_F16, 0.5f, 2000, 20, "loss scale must be a finite number of at least 1, not 0.5"},
             {CLT_F16, INFINITY, 2000, 20, "loss scale must be a finite number"},
             {CLT_F16, 65536, 0, 20, "loss scale window must be at least 1 step, not 0"},
             {CLT_F16, 65536, 2000, 0, "skipped steps in a row must be at least 1, not 0"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    clt_train_options o;
    clt_train_options_defaults(&o);
    o.precision = bad[i].precision;
    o.loss_scale = bad[i].scale;
    o.loss_scale_window = bad[i].window;
    o.max_skips = bad[i].skips;
    ck_assert_int_eq(clt_trainer_create(m, one, NULL, &o, &t), CLT_EINVAL);
    ck_assert_msg(strstr(clt_last_error(), bad[i].named), "case %zu: %s", i, clt_last_error());
  }
  clt_devices_destroy(one);
  clt_model_destroy(m);
}
END_TEST

int main(void) {
  if (!fashion_dir()) {
    fprintf(stderr, "SKIP: Fashion-MNIST is not installed (dataset-fashion-mnist)\n");
    return TU_SKIP;
  }
  int rc = tu_setup();
  if (rc) return rc;
  long pid = (long)getpid();
  snprintf(train_path, sizeof train_path, "/tmp/clt-mp-train-%ld.raw", pid);
  snprintf(test_path, sizeof test_path, "/tmp/clt-mp-test-%ld.raw", pid);
  snprintf(huge_path, sizeof huge_path, "/tmp/clt-mp-huge-%ld.raw", pid);
  snprintf(outlier_path, sizeof outlier_path, "/tmp/clt-mp-outlier-%ld.raw", pid);
  if (slice_to_raw("train", NTRAIN, 1, -1, train_path) < 0 || slice_to_raw("test", NTEST, 1, -1, test_path) < 0 ||
      slice_to_raw("train", 256, 1e5f, -1, huge_path) < 0 || slice_to_raw("train", NTRAIN, 1, 700, outlier_path) < 0)
    return 1;
  Suite *s = suite_create("mixed");
  TCase *tc = tcase_create("fp16");
  tcase_set_timeout(tc, 900);
  tcase_add_test(tc, mlp_learns_in_fp16);
  tcase_add_test(tc, cnn_learns_in_fp16);
  tcase_add_test(tc, two_replicas_skip_together);
  tcase_add_test(tc, overflowing_data_stop_after_twenty_skips);
  tcase_add_test(tc, fp16_resume_is_bitwise_the_uninterrupted_run);
  tcase_add_test(tc, bad_mixed_precision_options_are_named);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  unlink(train_path), unlink(test_path), unlink(huge_path), unlink(outlier_path);
  tu_teardown();
  return rc;
}
