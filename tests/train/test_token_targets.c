/*
 * test_token_targets.c: masked targets for fine-tuning (a targets shard
 * beside the token shard, clt_dataset_tokens_targets), on every device:
 *  - the windows' labels are CLT_IGNORE_LABEL exactly where the shard says
 *    -1, and clt_dataset_label_count counts the rest;
 *  - clt_trainer_fit's step on them equals a plain-C reference in double:
 *    its reported loss is the mean of -log softmax over the targets that
 *    count (as PyTorch's cross_entropy with ignore_index), and one SGD step
 *    at lr 1 moves every parameter by that mean's gradient (a masked
 *    position adds nothing); over one device and over two replicas of the
 *    batch (PoCL + rusticl), whose slices count their labels apart;
 *  - clt_trainer_evaluate's mean is over the targets that count;
 *  - bad targets shards (a value that is neither its token nor -1, too few
 *    or too many values, a token shard given as targets) and a step whose
 *    targets are all masked are refused, naming the file, index or step.
 * The model is an embedding and a linear head, small enough that the
 * reference's gradient is a few loops.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

enum { T = 8, V = 13, C = 6, WINDOWS = 6, NTOK = T * WINDOWS + 1 };
#define P (V * C + V * C + V) /* embedding, head weight, head bias */

static const char *spec = "input tokens 8 vocab=13\nembedding 6 std=0.5\nlinear 13 init=normal std=0.5\n";
static char dir[64], tok_path[96], tgt_path[96];
static uint32_t tokens[NTOK];
static int32_t targets[NTOK];

/* The targets: a third of the tokens masked, and window 2's all but one. */
static void make_data(void) {
  for (int i = 0; i < NTOK; i++) {
    tokens[i] = (uint32_t)((i * 7 + i / 5) % V);
    int masked = i % 3 == 1 || (i > 2 * T && i < 3 * T);
    targets[i] = masked ? -1 : (int32_t)tokens[i];
  }
}

static clt_dataset *open_masked(void) {
  const char *tp = tok_path, *gp = tgt_path;
  clt_dataset *ds;
  ck_assert_msg(clt_dataset_open_tokens(&tp, 1, T, V, &ds) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_dataset_tokens_targets(ds, &gp, 1) == 0, "%s", clt_last_error());
  return ds;
}

START_TEST(windows_mask_their_targets) {
  clt_dataset *ds = open_masked();
  int64_t idx[WINDOWS], counted = 0;
  float x[WINDOWS * T];
  int32_t y[WINDOWS * T];
  for (int w = 0; w < WINDOWS; w++) idx[w] = w;
  ck_assert_int_eq(clt_dataset_get_batch(ds, idx, WINDOWS, x, y), 0);
  for (int w = 0; w < WINDOWS; w++)
    for (int j = 0; j < T; j++) {
      int i = w * T + j;
      ck_assert_msg(x[i] == (float)tokens[i], "x[%d]", i);
      int32_t want = targets[i + 1] < 0 ? CLT_IGNORE_LABEL : (int32_t)tokens[i + 1];
      ck_assert_msg(y[i] == want, "window %d position %d: label %d, want %d", w, j, y[i], want);
      counted += want != CLT_IGNORE_LABEL;
    }
  ck_assert_int_eq(clt_dataset_label_count(ds), counted);
  ck_assert_int_lt(counted, WINDOWS * T);
  clt_dataset_destroy(ds);
}
END_TEST

/* ---- the plain-C reference: logits = E[x] W^T + b ---- */

/* The mean loss over the labels that count, and its gradient g (P). */
static double reference(const float *p, const float *x, const int32_t *y, int n, double *g) {
  const float *E = p, *W = p + V * C, *b = p + 2 * V * C;
  double sum = 0;
  int counted = 0;
  for (int i = 0; i < n; i++) counted += y[i] != CLT_IGNORE_LABEL;
  if (g) memset(g, 0, P * sizeof *g);
  for (int i = 0; i < n; i++) {
    if (y[i] == CLT_IGNORE_LABEL) continue;
    const float *h = E + (int)x[i] * C;
    double z[V], m = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) {
      z[v] = b[v];
      for (int c = 0; c < C; c++) z[v] += (double)h[c] * W[v * C + c];
      if (z[v] > m) m = z[v];
    }
    for (int v = 0; v < V; v++) s += exp(z[v] - m);
    sum += m + log(s) - z[y[i]];
    for (int v = 0; g && v < V; v++) {
      double d = (exp(z[v] - m) / s - (v == y[i])) / counted;
      g[2 * V * C + v] += d;
      for (int c = 0; c < C; c++) {
        g[V * C + v * C + c] += d * h[c];
        g[(int)x[i] * C + c] += d * W[v * C + c];
      }
    }
  }
  return sum / counted;
}

typedef struct seen {
  double loss;
  int steps;
} seen;

static void on_event(const clt_train_event *ev, void *user) {
  seen *s = user;
  if (ev->kind == CLT_EVENT_STEP) s->loss = ev->loss, s->steps++;
}

static clt_trainer *make_trainer(const char *devices, clt_model **m, seen *s) {
  clt_devices *devs;
  clt_trainer *t;
  clt_train_options o;
  clt_train_options_defaults(&o);
  clt_optimizer_defaults(CLT_OPT_SGD, &o.optimizer);
  o.optimizer.momentum = 0;
  o.schedule.lr = 1.0f;
  o.batch = WINDOWS;
  o.max_steps = 1;
  o.log_every = 1;
  o.callback = on_event;
  o.callback_user = s;
  ck_assert_msg(clt_model_parse(spec, "t.model", m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_model_param_count(*m), P);
  ck_assert_int_eq(clt_devices_select(tu_devices, devices, &devs), 0);
  ck_assert_msg(clt_trainer_create(*m, devs, NULL, &o, &t) == 0, "%s", clt_last_error());
  clt_devices_destroy(devs);
  return t;
}

/* A step's loss within 1e-5 of the reference's (float sums of a few dozen
 * terms); the parameters' moves within 1e-5 of the reference gradient
 * (p - lr g in float, |p| < 2). */
static void fit_case(const char *devices) {
  clt_dataset *ds = open_masked();
  clt_model *m;
  seen s = {NAN, 0};
  clt_trainer *t = make_trainer(devices, &m, &s);
  float p0[P], p1[P], x[WINDOWS * T];
  int32_t y[WINDOWS * T];
  int64_t idx[WINDOWS];
  double g[P];
  for (int w = 0; w < WINDOWS; w++) idx[w] = w;
  ck_assert_int_eq(clt_dataset_get_batch(ds, idx, WINDOWS, x, y), 0);
  ck_assert_int_eq(clt_trainer_params(t, p0, P), 0);
  double want = reference(p0, x, y, WINDOWS * T, g);
  ck_assert_msg(clt_trainer_fit(t, ds, NULL) == 0, "%s: %s", devices, clt_last_error());
  ck_assert_int_eq(s.steps, 1);
  ck_assert_msg(fabs(s.loss - want) <= 1e-5 * want, "devices %s: loss %.9g, reference %.9g", devices, s.loss, want);
  ck_assert_int_eq(clt_trainer_params(t, p1, P), 0);
  for (int i = 0; i < P; i++)
    ck_assert_msg(fabs((double)p0[i] - p1[i] - g[i]) <= 1e-5, "devices %s: parameter %d moved %.9g, gradient %.9g",
                  devices, i, (double)p0[i] - p1[i], g[i]);
  double loss, acc, after = reference(p1, x, y, WINDOWS * T, NULL);
  ck_assert_msg(clt_trainer_evaluate(t, ds, &loss, &acc) == 0, "%s", clt_last_error());
  ck_assert_msg(fabs(loss - after) <= 1e-5 * after, "devices %s: evaluate %.9g, reference %.9g", devices, loss, after);
  clt_trainer_destroy(t);
  clt_model_destroy(m);
  clt_dataset_destroy(ds);
}

START_TEST(fit_means_over_the_targets_that_count) {
  for (int d = 0; d < tu_ndev; d++) {
    char one[16];
    snprintf(one, sizeof one, "%d", d);
    fit_case(one);
  }
  if (tu_ndev >= 2) fit_case("0,1"); /* two replicas: each slice counts its own labels */
}
END_TEST

/* Every target masked: the step is refused, naming it. */
START_TEST(a_step_with_no_target_is_refused) {
  char path[128];
  int32_t none[NTOK];
  for (int i = 0; i < NTOK; i++) none[i] = -1;
  snprintf(path, sizeof path, "%s/none.targets", dir);
  ck_assert_int_eq(clt_tokens_write_targets(path, none, NTOK), 0);
  const char *tp = tok_path, *gp = path;
  clt_dataset *ds;
  ck_assert_int_eq(clt_dataset_open_tokens(&tp, 1, T, V, &ds), 0);
  ck_assert_msg(clt_dataset_tokens_targets(ds, &gp, 1) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_dataset_label_count(ds), 0);
  clt_model *m;
  seen s = {NAN, 0};
  clt_trainer *t = make_trainer("0", &m, &s);
  ck_assert_int_eq(clt_trainer_fit(t, ds, NULL), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "step 1: every target of its batch is masked"), "%s", clt_last_error());
  double loss, acc;
  ck_assert_int_eq(clt_trainer_evaluate(t, ds, &loss, &acc), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "every target is masked"), "%s", clt_last_error());
  clt_trainer_destroy(t);
  clt_model_destroy(m);
  clt_dataset_destroy(ds);
}
END_TEST

/* Bad shards, each refused naming the file and what is wrong. */
static void expect_refused(const int32_t *vals, int64_t n, const char *const *parts) {
  char path[128];
  snprintf(path, sizeof path, "%s/bad.targets", dir);
  ck_assert_int_eq(clt_tokens_write_targets(path, vals, n), 0);
  const char *tp = tok_path, *gp = path;
  clt_dataset *ds;
  ck_assert_int_eq(clt_dataset_open_tokens(&tp, 1, T, V, &ds), 0);
  int rc = clt_dataset_tokens_targets(ds, &gp, 1);
  ck_assert_int_eq(rc, CLT_EFORMAT);
  ck_assert_msg(strstr(clt_last_error(), path), "%s", clt_last_error());
  for (int i = 0; parts[i]; i++) ck_assert_msg(strstr(clt_last_error(), parts[i]), "no '%s' in: %s", parts[i], clt_last_error());
  ck_assert_int_eq(clt_dataset_label_count(ds), WINDOWS * T); /* left without targets */
  clt_dataset_destroy(ds);
}

START_TEST(bad_targets_are_refused) {
  int32_t v[NTOK + 1];
  memcpy(v, targets, sizeof targets);
  v[NTOK] = 0;
  v[7] = (int32_t)((tokens[7] + 1) % V); /* another token */
  expect_refused(v, NTOK, (const char *const[]){"target 7 is", "but the token there is", "not shifted", NULL});
  memcpy(v, targets, sizeof targets);
  v[9] = -100; /* Hugging Face's ignore index, not written as -1: the writer refuses it */
  ck_assert_int_eq(clt_tokens_write_targets("/nonexistent/x", v, NTOK), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "target 9 is -100"), "%s", clt_last_error());
  /* shifted by one, as a loss's labels would be */
  expect_refused(targets + 1, NTOK - 1, (const char *const[]){"but the token there is", "not shifted", NULL});
  /* one short, and one too many */
  expect_refused(targets, NTOK - 1, (const char *const[]){"hold 48 targets, the token shards 49 tokens", NULL});
  memcpy(v, targets, sizeof targets);
  expect_refused(v, NTOK + 1, (const char *const[]){"declares 50 targets", "49 tokens", NULL});
  /* the token shard itself given as the targets */
  const char *tp = tok_path, *gp = tok_path;
  clt_dataset *ds;
  ck_assert_int_eq(clt_dataset_open_tokens(&tp, 1, T, V, &ds), 0);
  ck_assert_int_eq(clt_dataset_tokens_targets(ds, &gp, 1), CLT_EFORMAT);
  ck_assert_msg(strstr(clt_last_error(), "not a targets shard: its magic is 20240520"), "%s", clt_last_error());
  clt_dataset_destroy(ds);
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  snprintf(dir, sizeof dir, "/tmp/clt-targets-XXXXXX");
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  snprintf(tok_path, sizeof tok_path, "%s/train.bin", dir);
  snprintf(tgt_path, sizeof tgt_path, "%s/train.targets", dir);
  make_data();
  if (clt_tokens_write(tok_path, tokens, NTOK, 0) < 0 || clt_tokens_write_targets(tgt_path, targets, NTOK) < 0) {
    fprintf(stderr, "%s\n", clt_last_error());
    return 1;
  }
  Suite *s = suite_create("token targets");
  TCase *tc = tcase_create("targets");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, windows_mask_their_targets);
  tcase_add_test(tc, fit_means_over_the_targets_that_count);
  tcase_add_test(tc, a_step_with_no_target_is_refused);
  tcase_add_test(tc, bad_targets_are_refused);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  tu_teardown();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return rc;
}
