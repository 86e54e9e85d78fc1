/*
 * test_optim.c: the fused optimizer kernels (SGD, momentum, Nesterov,
 * weight decay, Adam, AdamW, Lion) against plain C over several steps on every
 * device, the optimizers' table (every kind a row, settings checked), the
 * learning-rate schedules, and bad arguments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref_optim.h"
#include "testutil.h"

#define N 1003
#define STEPS 5

/* After 5 steps the kernels and the double reference differ only by float
 * rounding of a few operations per step (~1e-7 relative each); 1e-5 leaves
 * room for that while a wrong formula (e.g. no bias correction) is ~1e-2. */
#define OPT_TOL 1e-5

static void check_optimizer(clt_context *ctx, const clt_optimizer_config *cfg, const char *what) {
  int per = clt_optimizer_state_per_param(cfg);
  int host = clt_optimizer_needs_host(cfg, clt_context_device(ctx));
  float *hp = malloc(N * 4), *hst = calloc(2 * N, 4);
  float *p = malloc(N * 4), *g = malloc(N * 4), *st = calloc(2 * N, 4), *got = malloc(N * 4), *gst = malloc(2 * N * 4);
  ref_random(p, N, 11);
  memcpy(hp, p, N * 4);
  cl_mem dp = tu_buffer(ctx, p, N), dg = tu_buffer(ctx, NULL, N), ds = tu_buffer(ctx, NULL, 2 * N);
  int64_t n1 = N, ns = (int64_t)(per ? per : 1) * N;
  clt_tensor tp, tg, ts;
  ck_assert_int_eq(clt_tensor_view(dp, 0, CLT_F32, 1, &n1, &tp), 0);
  ck_assert_int_eq(clt_tensor_view(dg, 0, CLT_F32, 1, &n1, &tg), 0);
  ck_assert_int_eq(clt_tensor_view(ds, 0, CLT_F32, 1, &ns, &ts), 0);
  for (int t = 1; t <= STEPS; t++) {
    ref_random(g, N, 100 + t);
    ck_assert_int_eq(clt_tensor_upload(ctx, &tg, g, N * 4), 0);
    float lr = 0.1f / t, scale = 0.5f;
    clt_optimizer_step_host(cfg, t, lr, scale, hp, g, hst, N);
    ref_optimizer_step(cfg, t, lr, scale, p, g, st, N);
    if (host) { /* the kernel refuses: it could not give the host's bits */
      ck_assert_int_eq(clt_optimizer_step(ctx, cfg, t, lr, scale, &tp, &tg, &ts), CLT_EUNSUPPORTED);
      ck_assert_ptr_nonnull(strstr(clt_last_error(), "correctly"));
      ck_assert_int_eq(clt_tensor_upload(ctx, &tp, hp, N * 4), 0);
      if (per) ck_assert_int_eq(clt_tensor_upload(ctx, &ts, hst, per * N * 4), 0);
    } else {
      ck_assert_msg(clt_optimizer_step(ctx, cfg, t, lr, scale, &tp, &tg, &ts) == 0, "%s", clt_last_error());
    }
  }
  tu_read(ctx, dp, 0, got, N);
  /* Replicas on different devices must agree bit for bit: the kernel and
   * the host step do the same float operations, each correctly rounded. */
  ck_assert_msg(memcmp(got, hp, N * 4) == 0, "%s on %s: kernel and host step differ in bits", what, tu_name(ctx));
  double err = ref_max_rel_error(got, p, N);
  ck_assert_msg(err <= OPT_TOL, "%s on %s: parameters differ by %g", what, tu_name(ctx), err);
  if (per) {
    tu_read(ctx, ds, 0, gst, per * N);
    err = ref_max_rel_error(gst, st, per * N);
    ck_assert_msg(err <= OPT_TOL, "%s on %s: state differs by %g", what, tu_name(ctx), err);
  }
  clt_buffer_release(dp), clt_buffer_release(dg), clt_buffer_release(ds);
  free(p), free(g), free(st), free(got), free(gst), free(hp), free(hst);
}

/* A decay mask: where it is 0 the step is exactly the step with weight
 * decay 0, where 1 exactly the step with it; the kernel gives the host's
 * bits. */
static void check_masked(clt_context *ctx, const clt_optimizer_config *cfg, const char *what) {
  int per = clt_optimizer_state_per_param(cfg);
  clt_optimizer_config nodecay = *cfg;
  nodecay.weight_decay = 0;
  float *p = malloc(N * 4), *g = malloc(N * 4), *st = calloc(2 * N, 4), *got = malloc(N * 4);
  float *a = malloc(N * 4), *ast = calloc(2 * N, 4), *b = malloc(N * 4), *bst = calloc(2 * N, 4);
  uint8_t *mask = malloc(N);
  ref_random(p, N, 12);
  ref_random(g, N, 13);
  for (int i = 0; i < N; i++) mask[i] = (uint8_t)(i % 3 != 0);
  memcpy(a, p, N * 4), memcpy(b, p, N * 4);
  cl_mem dp = tu_buffer(ctx, p, N), dg = tu_buffer(ctx, g, N), ds = tu_buffer(ctx, NULL, 2 * N);
  cl_mem dm;
  ck_assert_int_eq(clt_buffer_create(ctx, N, &dm), 0);
  int64_t n1 = N, ns = (int64_t)(per ? per : 1) * N;
  clt_tensor tp, tg, ts, tm;
  ck_assert_int_eq(clt_tensor_view(dp, 0, CLT_F32, 1, &n1, &tp), 0);
  ck_assert_int_eq(clt_tensor_view(dg, 0, CLT_F32, 1, &n1, &tg), 0);
  ck_assert_int_eq(clt_tensor_view(ds, 0, CLT_F32, 1, &ns, &ts), 0);
  ck_assert_int_eq(clt_tensor_view(dm, 0, CLT_U8, 1, &n1, &tm), 0);
  ck_assert_int_eq(clt_tensor_upload(ctx, &tm, mask, N), 0);
  for (int t = 1; t <= 2; t++) {
    clt_optimizer_step_host_masked(cfg, t, 0.1f, 0.5f, p, g, st, N, mask);
    clt_optimizer_step_host(cfg, t, 0.1f, 0.5f, a, g, ast, N);
    clt_optimizer_step_host(&nodecay, t, 0.1f, 0.5f, b, g, bst, N);
    if (!clt_optimizer_needs_host(cfg, clt_context_device(ctx)))
      ck_assert_msg(clt_optimizer_step_masked(ctx, cfg, t, 0.1f, 0.5f, &tp, &tg, &ts, &tm) == 0, "%s",
                    clt_last_error());
  }
  for (int i = 0; i < N; i++)
    ck_assert_msg(memcmp(&p[i], mask[i] ? &a[i] : &b[i], 4) == 0, "%s: parameter %d (mask %d) is not the %s step",
                  what, i, mask[i], mask[i] ? "decayed" : "undecayed");
  if (!clt_optimizer_needs_host(cfg, clt_context_device(ctx))) {
    tu_read(ctx, dp, 0, got, N);
    ck_assert_msg(memcmp(got, p, N * 4) == 0, "%s on %s: masked kernel and host step differ in bits", what,
                  tu_name(ctx));
  }
  /* A mask of the wrong size or type is refused. */
  int64_t short_n = N - 1;
  clt_tensor bad;
  ck_assert_int_eq(clt_tensor_view(dm, 0, CLT_U8, 1, &short_n, &bad), 0);
  ck_assert_int_eq(clt_optimizer_step_masked(ctx, cfg, 1, 0.1f, 1, &tp, &tg, &ts, &bad), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "decay mask"));
  clt_buffer_release(dp), clt_buffer_release(dg), clt_buffer_release(ds), clt_buffer_release(dm);
  free(p), free(g), free(st), free(got), free(a), free(ast), free(b), free(bst), free(mask);
}

START_TEST(decay_masks) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_optimizer_config cfg;
    clt_optimizer_defaults(CLT_OPT_ADAMW, &cfg);
    cfg.weight_decay = 0.1f;
    check_masked(tu_ctx[d], &cfg, "adamw");
    clt_optimizer_defaults(CLT_OPT_SGD, &cfg);
    cfg.momentum = 0.9f;
    cfg.weight_decay = 0.05f;
    check_masked(tu_ctx[d], &cfg, "sgd");
    clt_optimizer_defaults(CLT_OPT_LION, &cfg);
    cfg.weight_decay = 0.5f;
    check_masked(tu_ctx[d], &cfg, "lion");
  }
}
END_TEST

START_TEST(optimizers_match_plain_c) {
  for (int d = 0; d < tu_ndev; d++) {
    clt_optimizer_config cfg;
    clt_optimizer_defaults(CLT_OPT_SGD, &cfg);
    cfg.momentum = 0;
    check_optimizer(tu_ctx[d], &cfg, "sgd");
    cfg.momentum = 0.9f;
    cfg.weight_decay = 1e-2f;
    check_optimizer(tu_ctx[d], &cfg, "sgd momentum + weight decay");
    cfg.nesterov = 1;
    check_optimizer(tu_ctx[d], &cfg, "sgd nesterov");
    clt_optimizer_defaults(CLT_OPT_ADAM, &cfg);
    cfg.weight_decay = 1e-3f;
    check_optimizer(tu_ctx[d], &cfg, "adam");
    clt_optimizer_defaults(CLT_OPT_ADAMW, &cfg);
    check_optimizer(tu_ctx[d], &cfg, "adamw");
    clt_optimizer_defaults(CLT_OPT_LION, &cfg);
    check_optimizer(tu_ctx[d], &cfg, "lion");
    cfg.weight_decay = 0.3f;
    cfg.beta1 = 0.95f, cfg.beta2 = 0.98f;
    check_optimizer(tu_ctx[d], &cfg, "lion with weight decay and other betas");
  }
}
END_TEST

/* Lion's sign is torch.sign's: where the gradient and the state are 0,
 * beta1 * m + (1 - beta1) * g is exactly 0 and the parameter moves by
 * nothing but its decay, on the host, the device and in the reference
 * alike (a sign that made 0 into +1 would move it by lr). */
START_TEST(lion_sign_of_zero) {
  enum { n = 64 };
  for (int d = 0; d < tu_ndev; d++) {
    clt_context *ctx = tu_ctx[d];
    clt_optimizer_config cfg;
    clt_optimizer_defaults(CLT_OPT_LION, &cfg);
    cfg.weight_decay = 0.5f;
    float p[n], g[n], m[n] = {0}, host[n], hm[n] = {0}, ref[n], rm[n] = {0}, got[n], gm[n];
    ref_random(p, n, 21);
    for (int i = 0; i < n; i++) g[i] = i % 2 ? 0.0f : (float)(i + 1) / n * (i % 4 ? -1 : 1); /* g[0] > 0 */
    memcpy(host, p, sizeof p), memcpy(ref, p, sizeof p);
    cl_mem dp = tu_buffer(ctx, p, n), dg = tu_buffer(ctx, g, n), dm = tu_buffer(ctx, m, n);
    int64_t n1 = n;
    clt_tensor tp, tg, tm;
    ck_assert_int_eq(clt_tensor_view(dp, 0, CLT_F32, 1, &n1, &tp), 0);
    ck_assert_int_eq(clt_tensor_view(dg, 0, CLT_F32, 1, &n1, &tg), 0);
    ck_assert_int_eq(clt_tensor_view(dm, 0, CLT_F32, 1, &n1, &tm), 0);
    const float lr = 0.01f;
    for (int t = 1; t <= 3; t++) {
      ck_assert_msg(clt_optimizer_step(ctx, &cfg, t, lr, 1.0f, &tp, &tg, &tm) == 0, "%s", clt_last_error());
      clt_optimizer_step_host(&cfg, t, lr, 1.0f, host, g, hm, n);
      ref_optimizer_step(&cfg, t, lr, 1.0f, ref, g, rm, n);
    }
    tu_read(ctx, dp, 0, got, n);
    tu_read(ctx, dm, 0, gm, n);
    ck_assert_msg(memcmp(got, host, sizeof got) == 0 && memcmp(gm, hm, sizeof gm) == 0,
                  "lion on %s: kernel and host step differ in bits", tu_name(ctx));
    for (int i = 1; i < n; i += 2) {
      float w = p[i];
      for (int t = 1; t <= 3; t++) w = w * (1.0f - lr * cfg.weight_decay);
      ck_assert_msg(memcmp(&got[i], &w, 4) == 0 && gm[i] == 0.0f,
                    "lion on %s: parameter %d with gradient 0 and state 0 is %.9g, not its decay alone %.9g",
                    tu_name(ctx), i, got[i], w);
      ck_assert_msg(fabs(ref[i] - w) <= 1e-6 * fabs(w), "the reference moved parameter %d: %.9g, not %.9g", i,
                    ref[i], w);
    }
    /* ...while a gradient moves the others by lr a step (besides the decay). */
    double w0 = p[0];
    for (int t = 1; t <= 3; t++) w0 = w0 * (1 - lr * cfg.weight_decay) - lr;
    ck_assert_msg(fabs(got[0] - w0) < 1e-6, "lion on %s: parameter 0 moved from %.9g to %.9g, not %.9g", tu_name(ctx),
                  p[0], got[0], w0);
    clt_buffer_release(dp), clt_buffer_release(dg), clt_buffer_release(dm);
  }
}
END_TEST

START_TEST(bad_arguments) {
  clt_context *ctx = tu_ctx[0];
  cl_mem buf = tu_buffer(ctx, NULL, 100);
  int64_t n10 = 10, n20 = 20, n9 = 9;
  clt_tensor p, g, s, g9;
  clt_tensor_view(buf, 0, CLT_F32, 1, &n10, &p);
  clt_tensor_view(buf, 40, CLT_F32, 1, &n10, &g);
  clt_tensor_view(buf, 80, CLT_F32, 1, &n20, &s);
  clt_tensor_view(buf, 0, CLT_F32, 1, &n9, &g9);
  clt_optimizer_config cfg;
  clt_optimizer_defaults(CLT_OPT_ADAM, &cfg);
  ck_assert_int_eq(clt_optimizer_step(ctx, &cfg, 1, 0.1f, 1, &p, &g9, &s), CLT_ESHAPE);
  ck_assert_int_eq(clt_optimizer_step(ctx, &cfg, 1, 0.1f, 1, &p, &g, &g), CLT_ESHAPE);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "adam needs 2 x 10 floats of state"));
  ck_assert_int_eq(clt_optimizer_step(ctx, &cfg, 0, 0.1f, 1, &p, &g, &s), CLT_EINVAL);
  ck_assert_int_eq(clt_optimizer_step(ctx, &cfg, 1, 0.1f, 1, &p, &g, &s), 0);
  clt_buffer_release(buf);

  clt_optimizer_kind k;
  ck_assert_int_eq(clt_optimizer_parse("adamw", &k), 0);
  ck_assert_int_eq(k, CLT_OPT_ADAMW);
  ck_assert_int_eq(clt_optimizer_parse("adagrad", &k), CLT_EINVAL);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "'adagrad'"));
  clt_schedule_kind sk;
  ck_assert_int_eq(clt_schedule_parse("cosine", &sk), 0);
  ck_assert_int_eq(clt_schedule_parse("exponential", &sk), CLT_EINVAL);
}
END_TEST

/* Every kind has its row: a name that parses back to it, defaults of its
 * kind whose settings pass its check, state for at most two slots, and a
 * place in the list that an unknown name is answered with. */
START_TEST(every_kind_has_a_row) {
  ck_assert_int_eq(clt_optimizer_parse("adagrad", &(clt_optimizer_kind){0}), CLT_EINVAL);
  char unknown[512];
  snprintf(unknown, sizeof unknown, "%s", clt_last_error());
  for (int k = 0; k < CLT_OPT_COUNT; k++) {
    const char *name = clt_optimizer_name((clt_optimizer_kind)k);
    clt_optimizer_kind back;
    ck_assert_msg(strcmp(name, "?") != 0, "optimizer kind %d has no row in src/core/optim.c's table", k);
    ck_assert_msg(clt_optimizer_parse(name, &back) == 0 && back == (clt_optimizer_kind)k, "'%s' does not parse back",
                  name);
    ck_assert_msg(strstr(unknown, name), "the unknown optimizer's message '%s' does not list %s", unknown, name);
    clt_optimizer_config cfg;
    clt_optimizer_defaults((clt_optimizer_kind)k, &cfg);
    ck_assert_int_eq(cfg.kind, k);
    int per = clt_optimizer_state_per_param(&cfg);
    ck_assert_msg(per >= 0 && per <= 2, "%s: %d floats of state per parameter", name, per);
  }
  ck_assert_str_eq(clt_optimizer_name(CLT_OPT_COUNT), "?");
  ck_assert_int_eq(clt_optimizer_decoupled_decay(CLT_OPT_ADAMW), 1);
  ck_assert_int_eq(clt_optimizer_decoupled_decay(CLT_OPT_ADAM), 0);
  ck_assert_int_eq(clt_optimizer_decoupled_decay(CLT_OPT_SGD), 0);
  ck_assert_int_eq(clt_optimizer_decoupled_decay(CLT_OPT_LION), 1);
  clt_optimizer_config lion;
  clt_optimizer_defaults(CLT_OPT_LION, &lion); /* lion-pytorch's defaults; one slot */
  ck_assert(lion.beta1 == 0.9f && lion.beta2 == 0.99f && lion.weight_decay == 0.0f);
  ck_assert_int_eq(clt_optimizer_state_per_param(&lion), 1);
}
END_TEST

/* clt_trainer_create refuses settings an optimizer cannot work with
 * (its row's check), naming the optimizer, the setting and its value. */
static void refused(clt_optimizer_kind kind, const char *setting, float value, const char *want) {
  static const char *const text = "input 4\nlinear 3\n";
  clt_model *m;
  clt_devices *one;
  clt_trainer *t = NULL;
  clt_train_options o;
  ck_assert_msg(clt_model_parse(text, "tiny.model", &m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_devices_select(tu_devices, "0", &one), 0);
  clt_train_options_defaults(&o);
  clt_optimizer_defaults(kind, &o.optimizer);
  float *field = strcmp(setting, "momentum") == 0 ? &o.optimizer.momentum
               : strcmp(setting, "weight_decay") == 0 ? &o.optimizer.weight_decay
               : strcmp(setting, "beta1") == 0 ? &o.optimizer.beta1
               : strcmp(setting, "beta2") == 0 ? &o.optimizer.beta2 : &o.optimizer.eps;
  ck_assert_msg(clt_trainer_create(m, one, NULL, &o, &t) == 0, "%s defaults: %s", clt_optimizer_name(kind),
                clt_last_error());
  clt_trainer_destroy(t);
  t = NULL;
  *field = value;
  ck_assert_int_eq(clt_trainer_create(m, one, NULL, &o, &t), CLT_EINVAL);
  ck_assert_ptr_null(t);
  char expect[160];
  snprintf(expect, sizeof expect, "the %s optimizer's %s must be %s, not %g", clt_optimizer_name(kind), setting, want,
           (double)value);
  ck_assert_msg(strstr(clt_last_error(), expect), "'%s' does not say '%s'", clt_last_error(), expect);
  clt_devices_destroy(one);
  clt_model_destroy(m);
}

START_TEST(settings_are_checked) {
  refused(CLT_OPT_SGD, "momentum", 1.0f, "in [0, 1)");
  refused(CLT_OPT_SGD, "weight_decay", -0.5f, "at least 0");
  refused(CLT_OPT_ADAM, "beta1", 1.0f, "in [0, 1)");
  refused(CLT_OPT_ADAMW, "beta2", -0.25f, "in [0, 1)");
  refused(CLT_OPT_ADAM, "eps", 0.0f, "above 0");
  refused(CLT_OPT_ADAMW, "weight_decay", NAN, "at least 0");
  refused(CLT_OPT_LION, "beta1", 1.5f, "in [0, 1]");
  refused(CLT_OPT_LION, "beta2", -0.5f, "in [0, 1]");
  refused(CLT_OPT_LION, "weight_decay", -1.0f, "at least 0");
}
END_TEST

START_TEST(schedules) {
  clt_schedule s = {.kind = CLT_SCHED_CONSTANT, .lr = 0.1f};
  ck_assert_float_eq(clt_schedule_lr(&s, 0), 0.1f);
  ck_assert_float_eq(clt_schedule_lr(&s, 1000), 0.1f);
  s.warmup_steps = 4; /* 0.025, 0.05, 0.075, 0.1, then the schedule */
  ck_assert_float_eq_tol(clt_schedule_lr(&s, 0), 0.025f, 1e-7);
  ck_assert_float_eq_tol(clt_schedule_lr(&s, 2), 0.075f, 1e-7);
  ck_assert_float_eq(clt_schedule_lr(&s, 4), 0.1f);

  clt_schedule st = {.kind = CLT_SCHED_STEP, .lr = 1.0f, .step_size = 10, .gamma = 0.5f};
  ck_assert_float_eq(clt_schedule_lr(&st, 9), 1.0f);
  ck_assert_float_eq(clt_schedule_lr(&st, 10), 0.5f);
  ck_assert_float_eq(clt_schedule_lr(&st, 25), 0.25f);

  clt_schedule c = {.kind = CLT_SCHED_COSINE, .lr = 1.0f, .total_steps = 110, .warmup_steps = 10, .min_lr = 0.0f};
  ck_assert_float_eq_tol(clt_schedule_lr(&c, 10), 1.0f, 1e-6);
  ck_assert_float_eq_tol(clt_schedule_lr(&c, 60), 0.5f, 1e-6);
  ck_assert_float_eq_tol(clt_schedule_lr(&c, 110), 0.0f, 1e-6);
  ck_assert_float_eq_tol(clt_schedule_lr(&c, 500), 0.0f, 1e-6);
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("optim");
  TCase *tc = tcase_create("optim");
  tcase_add_test(tc, optimizers_match_plain_c);
  tcase_add_test(tc, decay_masks);
  tcase_add_test(tc, lion_sign_of_zero);
  tcase_add_test(tc, bad_arguments);
  tcase_add_test(tc, every_kind_has_a_row);
  tcase_add_test(tc, settings_are_checked);
  tcase_add_test(tc, schedules);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
