/*
 * test_step_regress.c: regression through the public step API
 * (clt_trainer_step_targets, clt_trainer_forward_targets), run under mpirun
 * on 1 and 2 ranks (tests/train/step.sh). The model is an MLP from 8 inputs to 3
 * float outputs; the data a smooth function of the inputs, made here.
 *
 *   - the loss the step, the forward and the gradient report are the
 *     plain-C MSE, L1 and Huber of the forward's own outputs, the RMSE
 *     theirs, the step moves the parameters by lr times the gradient, and
 *     along it the loss falls by lr |g|^2 (the gradient is the loss's);
 *   - trained on every device of this process at once (PoCL and rusticl,
 *     two replicas, checked bit for bit after every step), the parameters
 *     are those of one device on the same global batches, and the loss
 *     falls; in f16 too; a checkpoint resumes the run bit for bit;
 *   - bad input (NULL or non-finite targets, a wrong count, labels to a
 *     regression model, targets to a classifier) is refused naming it, and
 *     changes nothing; fit refuses a regression model;
 *   - on 2 or more ranks, each passing a different n (0 on some), the
 *     parameters are those of one device passing the whole batch, and a
 *     NaN target on rank 1 is refused on every rank.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>
#include <cltrain/mpi.h>

#include "mpiutil.h"
#include "testutil.h"

#define IN 8
#define OUT 3
#define B 32

static clt_comm *comm;
static int rank, nranks;
static const char *mlp = "input 8\nlinear 16\ntanh\nlinear 3\nloss %s\n";

static clt_model *model(const char *loss) {
  char text[128];
  clt_model *m;
  snprintf(text, sizeof text, mlp, loss);
  ck_assert_msg(clt_model_parse(text, "regress.model", &m) == 0, "%s", clt_last_error());
  return m;
}

static void options(clt_train_options *o, int64_t batch) {
  clt_train_options_defaults(o);
  o->batch = batch;
  o->check_every = 1; /* the replicas must agree bit for bit after every step */
  o->log_every = 0;
  o->schedule.lr = 0.05f;
  o->bucket_mb = 0.0005; /* several buckets even for this small model */
}

/* Global batch k: inputs in [-1, 1) and targets a smooth function of them
 * that the MLP can learn. */
static void batch(int k, float *x, float *t) {
  for (int i = 0; i < B; i++) {
    uint32_t h = (uint32_t)(k * B + i) * 2654435761u;
    for (int j = 0; j < IN; j++) {
      h = h * 1664525u + 1013904223u;
      x[i * IN + j] = (float)((h >> 8) / 8388608.0 - 1.0);
    }
    const float *v = x + i * IN;
    t[i * OUT + 0] = 0.8f * v[0] - 0.5f * v[1] + 0.3f * v[2] * v[3];
    t[i * OUT + 1] = sinf(v[4] + v[5]);
    t[i * OUT + 2] = 2.0f * v[6] * v[7] - 0.5f; /* beyond Huber's delta of 1 at times */
  }
}

/* The plain-C loss of outputs y against targets t (PyTorch's, summed). */
static double ref_loss(clt_loss_kind kind, double delta, int64_t M, const float *y, const float *t, double *sq) {
  double sum = 0;
  *sq = 0;
  for (int64_t i = 0; i < M; i++) {
    double d = (double)y[i] - t[i], a = fabs(d);
    sum += kind == CLT_LOSS_MSE ? d * d : kind == CLT_LOSS_L1 ? a : a < delta ? 0.5 * d * d : delta * (a - 0.5 * delta);
    *sq += d * d;
  }
  return sum;
}

/* A float32 sum of B x OUT = 96 terms of size ~1 against the double one:
 * within ~1e-5 relative. */
#define LOSS_TOL 1e-5

START_TEST(losses_are_the_plain_c_ones) {
  if (rank != 0) return;
  static const char *const losses[] = {"mse", "l1", "huber", "huber delta=0.25"};
  float x[B * IN], t[B * OUT], y[B * OUT];
  batch(0, x, t);
  for (int k = 0; k < 4; k++) {
    clt_model *m = model(losses[k]);
    clt_train_options o;
    options(&o, B);
    o.optimizer.momentum = 0; /* p1 = p0 - lr g: the step's gradient shows */
    o.optimizer.weight_decay = 0;
    o.schedule.lr = 2e-3f;
    clt_trainer *tr = mu_trainer(m, "0", NULL, &o);
    double loss, sq, rsq, gloss;
    int64_t P = clt_model_param_count(m);
    float *g = malloc((size_t)P * sizeof *g), *p0 = mu_params(tr, m);
    ck_assert_msg(clt_trainer_forward_targets(tr, x, t, B, y, B * OUT, &loss, &sq) == 0, "%s", clt_last_error());
    double want = ref_loss(clt_model_loss(m), clt_model_huber_delta(m), B * OUT, y, t, &rsq);
    ck_assert_msg(fabs(loss - want) <= LOSS_TOL * (1 + fabs(want)), "%s: forward's loss %.9g, plain C %.9g", losses[k],
                  loss, want);
    ck_assert_msg(fabs(sq - rsq) <= LOSS_TOL * (1 + rsq), "%s: squared error %.9g, plain C %.9g", losses[k], sq, rsq);
    /* without targets: the output alone, the same bits */
    float y2[B * OUT];
    ck_assert_int_eq(clt_trainer_forward_targets(tr, x, NULL, B, y2, B * OUT, &loss, &sq), 0);
    ck_assert(isnan(loss) && isnan(sq) && memcmp(y, y2, sizeof y) == 0);
    ck_assert_int_eq(clt_trainer_forward(tr, x, NULL, B, y2, B * OUT, &loss), 0);
    ck_assert(memcmp(y, y2, sizeof y) == 0);
    /* clt_trainer_gradient_targets: the gradient of the mean of the same loss */
    ck_assert_msg(clt_trainer_gradient_targets(tr, x, t, B, g, P, &gloss) == 0, "%s", clt_last_error());
    ck_assert_msg(fabs(gloss - want / (B * OUT)) <= LOSS_TOL * (1 + gloss), "%s: gradient's loss %.9g, plain C %.9g",
                  losses[k], gloss, want / (B * OUT));
    /* the step reports the mean of the same loss, before its update, and
     * moves the parameters by lr times that gradient (p0 - lr g rounds to
     * parameters below 1: 6e-8 each, over lr) */
    clt_step_result res;
    ck_assert_msg(clt_trainer_step_targets(tr, x, t, B, B * OUT, &res) == 0, "%s", clt_last_error());
    float *p1 = mu_params(tr, m);
    double worst = 0, gmax = 0;
    for (int64_t i = 0; i < P; i++) {
      worst = fmax(worst, fabs((p0[i] - (double)p1[i]) / o.schedule.lr - g[i]));
      gmax = fmax(gmax, fabs(g[i]));
    }
    ck_assert_msg(gmax > 1e-3 && worst <= 1.2e-7 / o.schedule.lr + 1e-3 * gmax, "%s: the step moved the parameters "
                  "by lr x %g off the gradient (largest %g)", losses[k], worst, gmax);
    /* ... and the gradient is the loss's own: along -lr g the mean loss
     * falls by lr |g|^2, to first order (the second, lr/2 times the
     * curvature, is ~1% here; the loss's rounding ~1e-3 of the fall). A
     * gradient off by a factor moves the ratio by that factor. */
    double gg = 0, after, sq1;
    for (int64_t i = 0; i < P; i++) gg += (double)g[i] * g[i];
    ck_assert_int_eq(clt_trainer_forward_targets(tr, x, t, B, y2, B * OUT, &after, &sq1), 0);
    double ratio = (want - after) / (B * OUT) / (o.schedule.lr * gg);
    ck_assert_msg(fabs(ratio - 1) < 0.05, "%s: the loss fell by %g of lr |g|^2 along the gradient", losses[k], ratio);
    fprintf(stderr, "%s: loss %.6g as plain C's, along the gradient it falls by %.4f of lr |g|^2\n", losses[k],
            res.loss, ratio);
    free(g), free(p0), free(p1);
    ck_assert_msg(fabs(res.loss - want / (B * OUT)) <= LOSS_TOL * (1 + res.loss), "%s: step's loss %.9g, plain C %.9g",
                  losses[k], res.loss, want / (B * OUT));
    ck_assert_msg(fabs(res.rmse - sqrt(rsq / (B * OUT))) <= LOSS_TOL, "%s: rmse %.9g, plain C %.9g", losses[k],
                  res.rmse, sqrt(rsq / (B * OUT)));
    ck_assert(isnan(res.accuracy));
    ck_assert_int_eq(res.global_n, B);
    clt_trainer_destroy(tr);
    clt_model_destroy(m);
  }
}
END_TEST

/* Float32 sums in another order (per replica, then across ranks) differ by
 * a few ulps per step; after some SGD steps with momentum the parameters
 * (of size ~0.3) differ by ~1e-7. 2e-5, as in test_step, leaves room for
 * that; a lost or doubled sample, or a division by a replica's count of
 * targets instead of the global one, moves them by ~1e-3. */
#define STEP_TOL 2e-5
#define NSTEPS 40

/* Every device of this process at once against one device, the same
 * global batches; the loss falls. With accumulation too (16 a run). */
static void replicas_against_one_device(const char *loss, int accumulate) {
  clt_model *m = model(loss);
  int64_t P = clt_model_param_count(m);
  clt_train_options o;
  options(&o, B);
  o.accumulate = accumulate;
  clt_trainer *one = mu_trainer(m, "0", NULL, &o), *all = mu_trainer(m, "all", NULL, &o);
  float x[B * IN], t[B * OUT];
  double first = 0, last = 0;
  for (int k = 0; k < NSTEPS; k++) {
    batch(k % 8, x, t);
    clt_step_result a, b;
    ck_assert_msg(clt_trainer_step_targets(one, x, t, B, B * OUT, &a) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_trainer_step_targets(all, x, t, B, B * OUT, &b) == 0, "%s", clt_last_error());
    ck_assert_msg(fabs(a.loss - b.loss) < 1e-5 && fabs(a.rmse - b.rmse) < 1e-5, "%s step %d: loss %g vs %g", loss, k,
                  b.loss, a.loss);
    if (k < 8) first += a.loss;
    if (k >= NSTEPS - 8) last += a.loss;
  }
  float *p1 = mu_params(one, m), *pa = mu_params(all, m);
  double worst = 0;
  for (int64_t i = 0; i < P; i++) worst = fmax(worst, fabs((double)p1[i] - pa[i]));
  ck_assert_msg(worst <= STEP_TOL, "%s: %d replicas differ from one device by %g", loss, clt_trainer_replicas(all),
                worst);
  ck_assert_msg(last < 0.7 * first, "%s: the loss did not fall: %g over the first 8 steps, %g over the last", loss,
                first / 8, last / 8);
  fprintf(stderr, "%s, %d replicas%s: largest difference from one device %g; mean loss %.4g -> %.4g\n", loss,
          clt_trainer_replicas(all), accumulate > 1 ? ", accumulated" : "", worst, first / 8, last / 8);
  clt_trainer_destroy(one);
  clt_trainer_destroy(all);
  free(p1), free(pa);
  clt_model_destroy(m);
}

START_TEST(mse_replicas_match_one_device) {
  if (rank == 0) replicas_against_one_device("mse", 1);
}
END_TEST

START_TEST(l1_and_huber_replicas_match_one_device) {
  if (rank != 0) return;
  replicas_against_one_device("l1", 1);
  replicas_against_one_device("huber delta=0.5", 2);
}
END_TEST

/* Mixed precision: outputs and their gradients stored as f16 under loss
 * scaling, on every device at once. The replicas still agree bit for bit
 * (check_every), the loss falls as in f32, and the first step's loss is
 * f32's within half's rounding of the outputs (2^-11 relative of values
 * ~1, squared: ~1e-3 of the loss). */
START_TEST(f16_trains_like_f32) {
  if (rank != 0) return;
  clt_model *m = model("huber");
  clt_train_options o;
  options(&o, B);
  clt_trainer *f32 = mu_trainer(m, "all", NULL, &o);
  o.precision = CLT_F16;
  o.loss_scale = 1024;
  clt_trainer *f16 = mu_trainer(m, "all", NULL, &o);
  float x[B * IN], t[B * OUT];
  double first = 0, last = 0;
  for (int k = 0; k < NSTEPS; k++) {
    batch(k % 8, x, t);
    clt_step_result a, h;
    ck_assert_msg(clt_trainer_step_targets(f32, x, t, B, B * OUT, &a) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_trainer_step_targets(f16, x, t, B, B * OUT, &h) == 0, "%s", clt_last_error());
    ck_assert_int_eq(h.skipped, 0);
    if (k == 0) ck_assert_msg(fabs(a.loss - h.loss) <= 2e-3 * a.loss, "f16 loss %g, f32 %g", h.loss, a.loss);
    if (k < 8) first += h.loss;
    if (k >= NSTEPS - 8) last += h.loss;
  }
  ck_assert_msg(last < 0.7 * first, "f16: the loss did not fall: %g over the first 8 steps, %g over the last",
                first / 8, last / 8);
  fprintf(stderr, "huber in f16, %d replicas: mean loss %.4g -> %.4g\n", clt_trainer_replicas(f16), first / 8,
          last / 8);
  clt_trainer_destroy(f32);
  clt_trainer_destroy(f16);
  clt_model_destroy(m);
}
END_TEST

/* A checkpoint of a regression model (its spec keeps the loss line)
 * resumes the run bit for bit: 6 steps, save, load into a new trainer, 6
 * more, against 12 uninterrupted. */
START_TEST(checkpoint_resumes_bit_for_bit) {
  if (rank != 0) return;
  clt_model *m = model("l1");
  int64_t P = clt_model_param_count(m);
  clt_train_options o;
  options(&o, B);
  o.optimizer.kind = CLT_OPT_ADAM;
  o.schedule.lr = 1e-2f;
  clt_trainer *whole = mu_trainer(m, "all", NULL, &o), *first = mu_trainer(m, "all", NULL, &o);
  float x[B * IN], t[B * OUT];
  char path[64];
  snprintf(path, sizeof path, "/tmp/clt-regress-%ld.safetensors", (long)getpid());
  for (int k = 0; k < 12; k++) {
    batch(k, x, t);
    ck_assert_msg(clt_trainer_step_targets(whole, x, t, B, B * OUT, NULL) == 0, "%s", clt_last_error());
    if (k < 6) ck_assert_msg(clt_trainer_step_targets(first, x, t, B, B * OUT, NULL) == 0, "%s", clt_last_error());
  }
  ck_assert_msg(clt_trainer_save_checkpoint(first, path) == 0, "%s", clt_last_error());
  clt_trainer_destroy(first);
  clt_model *again;
  ck_assert_int_eq(clt_model_parse(clt_model_text(m), "again.model", &again), 0);
  ck_assert_int_eq(clt_model_loss(again), CLT_LOSS_L1);
  clt_trainer *resumed = mu_trainer(again, "all", NULL, &o);
  ck_assert_msg(clt_trainer_load_checkpoint(resumed, path) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(resumed), 6);
  for (int k = 6; k < 12; k++) {
    batch(k, x, t);
    ck_assert_msg(clt_trainer_step_targets(resumed, x, t, B, B * OUT, NULL) == 0, "%s", clt_last_error());
  }
  float *pw = mu_params(whole, m), *pr = mu_params(resumed, again);
  ck_assert_msg(memcmp(pw, pr, (size_t)P * sizeof *pw) == 0, "the resumed run's parameters differ from the whole run's");
  unlink(path);
  free(pw), free(pr);
  clt_trainer_destroy(whole);
  clt_trainer_destroy(resumed);
  clt_model_destroy(m);
  clt_model_destroy(again);
}
END_TEST

/* A refused step leaves the trainer as it was. */
static void refused(int rc, const char *expect) {
  ck_assert_msg(rc == CLT_EINVAL, "returned %d (%s), not CLT_EINVAL; wanted \"%s\"", rc, clt_strerror(rc), expect);
  ck_assert_msg(strstr(clt_last_error(), expect), "\"%s\" does not say \"%s\"", clt_last_error(), expect);
}

START_TEST(bad_input_is_refused_naming_it) {
  if (rank != 0) return;
  clt_model *m = model("mse"), *cls;
  ck_assert_int_eq(clt_model_parse("input 8\nlinear 3\n", "c.model", &cls), 0);
  clt_train_options o;
  options(&o, 16);
  clt_trainer *t = mu_trainer(m, "0", NULL, &o), *c = mu_trainer(cls, "0", NULL, &o);
  float *before = mu_params(t, m), x[8 * IN] = {0}, tg[8 * OUT] = {0}, y[8 * OUT];
  int32_t labels[8] = {0};
  double loss;
  refused(clt_trainer_step_targets(t, x, NULL, 8, 8 * OUT, NULL), "clt_trainer_step_targets: targets is NULL");
  refused(clt_trainer_step_targets(t, NULL, tg, 8, 8 * OUT, NULL), "x is NULL");
  refused(clt_trainer_step_targets(t, x, tg, 8, 8, NULL), "count is 8, but 8 samples of 3 targets each are 24");
  refused(clt_trainer_step_targets(t, x, tg, -1, 0, NULL), "n is -1");
  refused(clt_trainer_step_targets(t, x, tg, 0, 0, NULL), "no rank gave any samples");
  tg[7] = NAN;
  refused(clt_trainer_step_targets(t, x, tg, 8, 8 * OUT, NULL), "target 7 (value 1 of sample 2) is nan");
  refused(clt_trainer_forward_targets(t, x, tg, 8, y, 8 * OUT, &loss, NULL), "target 7 (value 1 of sample 2) is nan");
  tg[7] = INFINITY;
  refused(clt_trainer_step_targets(t, x, tg, 8, 8 * OUT, NULL), "is inf; targets must be finite");
  tg[7] = 0;
  refused(clt_trainer_step(t, x, labels, 8, NULL),
          "clt_trainer_step: y is int32 labels, but the model is a regression model (loss mse)");
  refused(clt_trainer_forward(t, x, labels, 8, y, 8 * OUT, &loss), "call clt_trainer_forward_targets");
  refused(clt_trainer_step_targets(c, x, tg, 8, 8 * OUT, NULL),
          "targets are float values, but the model is a classifier (loss crossentropy)");
  refused(clt_trainer_forward_targets(c, x, tg, 8, y, 8 * OUT, &loss, NULL), "call clt_trainer_forward");
  float grad[1000];
  refused(clt_trainer_gradient(t, x, labels, 8, grad, 1000, &loss), "call clt_trainer_gradient_targets");
  refused(clt_trainer_gradient_targets(c, x, tg, 8, grad, 1000, &loss), "call clt_trainer_gradient");
  tg[2] = NAN;
  refused(clt_trainer_gradient_targets(t, x, tg, 8, grad, 1000, &loss), "target 2 (value 2 of sample 0) is nan");
  tg[2] = 0;
  ck_assert_int_eq(clt_trainer_forward_targets(t, x, tg, 8, y, 8 * OUT - 1, &loss, NULL), CLT_ESHAPE);
  /* fit and evaluate train a regression model on float targets (clt_dataset_open with regression):
   * a dataset of class labels is refused naming it */
  char raw[64];
  const int64_t dims[1] = {IN};
  snprintf(raw, sizeof raw, "/tmp/clt-regress-%ld.raw", (long)getpid());
  ck_assert_int_eq(clt_dataset_write_raw(raw, 8, 1, dims, OUT, x, labels), 0);
  clt_dataset *lab;
  ck_assert_int_eq(clt_dataset_open_raw(raw, &lab), 0);
  unlink(raw);
  refused(clt_trainer_fit(t, lab, NULL), "holds class labels, but the model is a regression model (loss mse)");
  refused(clt_trainer_evaluate(t, lab, &loss, &loss), "holds class labels, but the model is a regression model");
  clt_dataset_destroy(lab);
  ck_assert_int_eq(clt_trainer_steps_done(t), 0);
  float *after = mu_params(t, m);
  ck_assert(memcmp(before, after, (size_t)clt_model_param_count(m) * sizeof *before) == 0);
  /* and it still trains */
  ck_assert_msg(clt_trainer_step_targets(t, x, tg, 8, 8 * OUT, NULL) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 1);
  clt_trainer_destroy(t);
  clt_trainer_destroy(c);
  free(before), free(after);
  clt_model_destroy(m);
  clt_model_destroy(cls);
}
END_TEST

/* How each step's 32 samples are cut: rank 0 takes n0[k], the other ranks
 * share the rest, the first ones one more. */
static const int64_t n0[] = {20, 32, 5, 16, 0, 11};
#define NPARTS ((int)(sizeof n0 / sizeof n0[0]))

static void my_part(int k, int64_t *lo, int64_t *n) {
  if (rank == 0) {
    *lo = 0, *n = n0[k];
    return;
  }
  int64_t rest = B - n0[k], others = nranks - 1, r = rank - 1;
  *lo = n0[k] + r * (rest / others) + (r < rest % others ? r : rest % others);
  *n = rest / others + (r < rest % others);
}

START_TEST(ranks_with_different_n_match_one_device) {
  if (nranks < 2) return;
  clt_model *m = model("mse");
  int64_t P = clt_model_param_count(m);
  clt_train_options o;
  options(&o, 16); /* at most 16 samples a run: rank 0's 20 and 32 take two */
  char devspec[16];
  snprintf(devspec, sizeof devspec, "%d", rank % tu_ndev); /* PoCL and rusticl alternate */
  clt_trainer *ref = mu_trainer(m, "0", NULL, &o), *t = mu_trainer(m, devspec, comm, &o);
  float x[B * IN], tg[B * OUT];
  for (int k = 0; k < 3 * NPARTS; k++) {
    batch(k, x, tg);
    clt_step_result a, b;
    ck_assert_msg(clt_trainer_step_targets(ref, x, tg, B, B * OUT, &a) == 0, "%s", clt_last_error());
    int64_t lo, n;
    my_part(k % NPARTS, &lo, &n);
    ck_assert_msg(clt_trainer_step_targets(t, n ? x + lo * IN : NULL, n ? tg + lo * OUT : NULL, n, n * OUT, &b) == 0,
                  "rank %d: %s", rank, clt_last_error());
    ck_assert_int_eq(b.global_n, B);
    ck_assert_msg(fabs(a.loss - b.loss) < 1e-5 && fabs(a.rmse - b.rmse) < 1e-5, "rank %d step %d: loss %g vs %g",
                  rank, k, b.loss, a.loss);
  }
  float *pr = mu_params(ref, m), *pt = mu_params(t, m);
  double worst = 0;
  for (int64_t i = 0; i < P; i++) worst = fmax(worst, fabs((double)pr[i] - pt[i]));
  ck_assert_msg(worst <= STEP_TOL, "rank %d of %d: parameters differ from one device's by %g", rank, nranks, worst);
  if (rank == 0) fprintf(stderr, "%d ranks, different n: largest difference from one device %g\n", nranks, worst);

  /* A NaN target on rank 1 is refused on every rank, naming rank 1 on the
   * others, and the job goes on. */
  tg[4] = rank == 1 ? NAN : tg[4];
  int rc = clt_trainer_step_targets(t, x, tg, 4, 4 * OUT, NULL);
  ck_assert_int_eq(rc, CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), rank == 1 ? "target 4 (value 1 of sample 1) is nan" : "rank 1's input is bad"),
                "rank %d: %s", rank, clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 3 * NPARTS);
  tg[4] = 0;
  ck_assert_msg(clt_trainer_step_targets(t, x, tg, 4, 4 * OUT, NULL) == 0, "rank %d: %s", rank, clt_last_error());

  clt_trainer_destroy(ref);
  clt_trainer_destroy(t);
  free(pr), free(pt);
  clt_model_destroy(m);
}
END_TEST

int main(int argc, char **argv) {
  int rc = mu_start(&argc, &argv, 0, &rank, &nranks, &comm);
  if (rc) return rc;
  Suite *s = suite_create("step_regress");
  TCase *tc = tcase_create("step_regress");
  tcase_add_test(tc, losses_are_the_plain_c_ones);
  tcase_add_test(tc, mse_replicas_match_one_device);
  tcase_add_test(tc, l1_and_huber_replicas_match_one_device);
  tcase_add_test(tc, f16_trains_like_f32);
  tcase_add_test(tc, checkpoint_resumes_bit_for_bit);
  tcase_add_test(tc, bad_input_is_refused_naming_it);
  tcase_add_test(tc, ranks_with_different_n_match_one_device);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  clt_comm_destroy(comm);
  tu_teardown();
  return mu_finish(rc, rank, NULL);
}
