/*
 * test_checkpoint.c: resuming from checkpoints, in one process.
 *
 *   - a run saved and resumed (mid-epoch and at an epoch's start) ends with
 *     the bits of the run that was not interrupted, and reports the same
 *     epoch losses; saving checkpoints changes nothing in a run. A CNN with
 *     dropout, Adam and accumulated micro-batches, an MLP with Nesterov
 *     SGD, and an MLP with Adam on every device (on llvmpipe its step and
 *     state are on the host);
 *   - a checkpoint resumes on the other vendor's device and on two
 *     replicas, and a two-replica checkpoint on one: the same trajectory to
 *     float-summation tolerance;
 *   - another batch size resumes where the old position falls on a whole
 *     new micro-batch, and is refused where it does not; another training
 *     set is refused by fit.
 * Files that are damaged, from other models, disk full: test_checkpoint_files.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptutil.h"

#define STEPS 16 /* 2 epochs of 512 samples, batch 64 */

/* Epoch losses as events report them. */
typedef struct epochs_seen {
  double loss[4];
  int64_t step_in_epoch[4];
} epochs_seen;

static void on_event(const clt_train_event *ev, void *user) {
  epochs_seen *e = user;
  if (ev->kind != CLT_EVENT_EPOCH || ev->epoch < 1 || ev->epoch > 4) return;
  e->loss[ev->epoch - 1] = ev->loss;
  e->step_in_epoch[ev->epoch - 1] = ev->step_in_epoch;
}

static void checkpoint_path(const char *dir, int64_t step, char *out, size_t size) {
  ck_assert_int_eq(clt_checkpoint_path(dir, step, out, size), 0);
}

/* Train uninterrupted with checkpoints every 4 steps, then resume from
 * steps 4 (mid-epoch 1), 8 (epoch 2's start) and 12: the same bits. */
static void resume_matches(const char *text, const char *devices, clt_optimizer_kind kind, int accumulate, float lr) {
  char dir[64], path[128];
  clt_model *m;
  clt_trainer *t;
  clt_train_options o;
  epochs_seen whole, resumed;
  memset(&whole, 0, sizeof whole);
  cu_tmpdir(dir, sizeof dir);
  cu_options(&o);
  clt_optimizer_defaults(kind, &o.optimizer);
  if (kind == CLT_OPT_SGD) o.optimizer.nesterov = 1;
  o.schedule.lr = lr;
  o.schedule.kind = CLT_SCHED_COSINE; /* the learning rate depends on the step */
  o.schedule.total_steps = STEPS;
  o.accumulate = accumulate;
  o.callback = on_event;
  o.callback_user = &whole;
  o.checkpoint_dir = dir;
  o.checkpoint_every = 4;

  t = cu_trainer(text, devices, &o, &m);
  ck_assert_msg(clt_trainer_fit(t, cu_data, NULL) == 0, "%s", clt_last_error());
  float *ref = cu_params(t, m);
  int64_t P = clt_model_param_count(m);
  cu_done(t, m);
  /* Every 4 steps; those at epoch ends (8, 16) after the epoch's summary. */
  int64_t saved[] = {4, 8, 12, 16};
  for (int i = 0; i < 4; i++) {
    checkpoint_path(dir, saved[i], path, sizeof path);
    ck_assert_msg(cu_exists(path), "%s was not written", path);
  }

  /* Saving checkpoints leaves the run as it is. */
  o.checkpoint_dir = NULL;
  o.callback_user = NULL;
  o.callback = NULL;
  t = cu_trainer(text, devices, &o, &m);
  ck_assert_int_eq(clt_trainer_fit(t, cu_data, NULL), 0);
  float *plain = cu_params(t, m);
  ck_assert_msg(memcmp(plain, ref, (size_t)P * 4) == 0, "checkpointing changed the run: %g", cu_maxdiff(plain, ref, P));
  cu_done(t, m);
  free(plain);

  int64_t from[] = {4, 8, 12};
  for (int i = 0; i < 3; i++) {
    clt_sampler_pos pos;
    memset(&resumed, 0, sizeof resumed);
    o.callback = on_event;
    o.callback_user = &resumed;
    t = cu_trainer(text, devices, &o, &m);
    checkpoint_path(dir, from[i], path, sizeof path);
    ck_assert_msg(clt_trainer_load_checkpoint(t, path) == 0, "%s", clt_last_error());
    ck_assert_int_eq(clt_trainer_steps_done(t), from[i]);
    clt_trainer_position(t, &pos);
    int64_t micro = from[i] * accumulate; /* micro-batches done; 16 per epoch at batch 64/accumulate */
    ck_assert_int_eq(pos.epoch, micro / (8 * accumulate));
    ck_assert_int_eq(pos.step, micro % (8 * accumulate));
    ck_assert_msg(clt_trainer_fit(t, cu_data, NULL) == 0, "%s", clt_last_error());
    ck_assert_int_eq(clt_trainer_steps_done(t), STEPS);
    float *p = cu_params(t, m);
    ck_assert_msg(memcmp(p, ref, (size_t)P * 4) == 0, "%s on %s, resumed at step %lld: parameters differ by up to %g",
                  clt_optimizer_name(kind), devices, (long long)from[i], cu_maxdiff(p, ref, P));
    /* The epochs it finished report what the whole run did, the part
     * before the resume included. */
    for (int e = (int)pos.epoch; e < 2; e++) {
      ck_assert_msg(resumed.loss[e] == whole.loss[e], "epoch %d loss %.17g, not %.17g", e + 1, resumed.loss[e],
                    whole.loss[e]);
      ck_assert_int_eq(resumed.step_in_epoch[e], whole.step_in_epoch[e]);
    }
    free(p);
    cu_done(t, m);
  }
  free(ref);
  cu_rmdir(dir);
}

START_TEST(resume_is_bitwise_cnn_adam_dropout_accumulate) {
  resume_matches(cu_cnn, "0", CLT_OPT_ADAM, 2, 0.003f);
}
END_TEST

START_TEST(resume_is_bitwise_mlp_nesterov) {
  resume_matches(cu_mlp, "0", CLT_OPT_SGD, 1, 0.05f);
}
END_TEST

/* Adam on a device without correctly rounded divide and sqrt (llvmpipe)
 * steps on the host: its state lives in host memory, not the arena. */
START_TEST(resume_is_bitwise_mlp_adam_every_device) {
  for (int d = 0; d < tu_ndev; d++) {
    char spec[16];
    snprintf(spec, sizeof spec, "%d", d);
    resume_matches(cu_mlp, spec, CLT_OPT_ADAM, 1, 0.003f);
  }
}
END_TEST

/* Lion (one state slot, "optim/m/") on every device at once: the replicas
 * of both vendors step by the kernel, and resume to the same bits. */
START_TEST(resume_is_bitwise_mlp_lion_all_devices) {
  resume_matches(cu_mlp, "all", CLT_OPT_LION, 1, 3e-4f);
}
END_TEST

/* Train uninterrupted on `devices`, saving every 5 steps into dir; the
 * final parameters (malloc'd). */
static float *train_saving(const char *devices, const char *dir) {
  clt_model *m;
  clt_train_options o;
  cu_options(&o);
  o.checkpoint_dir = dir;
  o.checkpoint_every = 5;
  clt_trainer *t = cu_trainer(cu_mlp, devices, &o, &m);
  ck_assert_msg(clt_trainer_fit(t, cu_data, NULL) == 0, "%s", clt_last_error());
  float *p = cu_params(t, m);
  cu_done(t, m);
  return p;
}

/* Resume dir's step-5 checkpoint on `devices` and train to the end. */
static float *resume_on(const char *devices, const char *dir, int64_t *P) {
  char path[128];
  clt_model *m;
  clt_train_options o;
  cu_options(&o);
  clt_trainer *t = cu_trainer(cu_mlp, devices, &o, &m);
  checkpoint_path(dir, 5, path, sizeof path);
  ck_assert_msg(clt_trainer_load_checkpoint(t, path) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, cu_data, NULL) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), STEPS);
  float *p = cu_params(t, m);
  *P = clt_model_param_count(m);
  cu_done(t, m);
  return p;
}

/* Another device sums in another order: each of the 12 resumed steps adds
 * a few ulps, which momentum carries on; the parameters (~0.1) differ by
 * 6e-8 here, and test_dp allows 2e-5 after 6 steps. 1e-5 leaves room for
 * other devices, while a lost optimizer state, a wrong step count or a
 * wrong sample position moves them by 1e-2 and more. */
#define OTHER_ORDER_TOL 1e-5

START_TEST(resume_on_other_devices_and_replica_counts) {
  if (tu_ndev < 2) {
    fprintf(stderr, "one device only: no other vendor or replica count to resume on\n");
    return;
  }
  char one[64], two[64];
  int64_t P;
  cu_tmpdir(one, sizeof one);
  cu_tmpdir(two, sizeof two);
  float *ref1 = train_saving("0", one);      /* one replica */
  float *ref2 = train_saving("0,1", two);    /* two replicas, two vendors */
  struct {
    const char *devices, *dir;
    const float *ref;
    const char *what;
  } cases[] = {{"1", one, ref1, "one replica's checkpoint on the other vendor"},
               {"0,1", one, ref1, "one replica's checkpoint on two replicas"},
               {"0", two, ref2, "two replicas' checkpoint on one"},
               {"1,0", two, ref2, "two replicas' checkpoint on two, in the other order"}};
  for (int i = 0; i < 4; i++) {
    float *p = resume_on(cases[i].devices, cases[i].dir, &P);
    double d = cu_maxdiff(p, cases[i].ref, P);
    fprintf(stderr, "%s: parameters within %g of the run not interrupted\n", cases[i].what, d);
    ck_assert_msg(d <= OTHER_ORDER_TOL, "%s: parameters differ by %g", cases[i].what, d);
    free(p);
  }
  free(ref1), free(ref2);
  cu_rmdir(one);
  cu_rmdir(two);
}
END_TEST

START_TEST(another_batch_resumes_where_the_samples_allow) {
  char dir[64], path[128];
  clt_model *m;
  clt_train_options o;
  clt_sampler_pos pos;
  cu_tmpdir(dir, sizeof dir);
  cu_options(&o);
  o.max_steps = 4; /* 256 samples into epoch 1 */
  o.checkpoint_dir = dir;
  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);
  ck_assert_int_eq(clt_trainer_fit(t, cu_data, NULL), 0);
  cu_done(t, m);
  checkpoint_path(dir, 4, path, sizeof path);

  cu_options(&o);
  o.batch = 32; /* 256 samples are 8 of these */
  t = cu_trainer(cu_mlp, "0", &o, &m);
  ck_assert_msg(clt_trainer_load_checkpoint(t, path) == 0, "%s", clt_last_error());
  clt_trainer_position(t, &pos);
  ck_assert_int_eq(pos.epoch, 0);
  ck_assert_int_eq(pos.step, 8);
  ck_assert_msg(clt_trainer_fit(t, cu_data, NULL) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 4 + 8 + 16); /* the rest of epoch 1, then epoch 2 */
  cu_done(t, m);

  o.batch = 48; /* 256 is no multiple of 48 */
  t = cu_trainer(cu_mlp, "0", &o, &m);
  ck_assert_int_eq(clt_trainer_load_checkpoint(t, path), CLT_EMISMATCH);
  ck_assert_msg(strstr(clt_last_error(), "256 samples") && strstr(clt_last_error(), path), "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 0);
  cu_done(t, m);

  /* The position means nothing on another training set. */
  cu_options(&o);
  t = cu_trainer(cu_mlp, "0", &o, &m);
  ck_assert_int_eq(clt_trainer_load_checkpoint(t, path), 0);
  ck_assert_int_eq(clt_trainer_fit(t, cu_small, NULL), CLT_EMISMATCH);
  ck_assert_msg(strstr(clt_last_error(), "512 samples") && strstr(clt_last_error(), "same training set"), "%s",
                clt_last_error());
  cu_done(t, m);
  cu_rmdir(dir);
}
END_TEST

int main(void) {
  int rc = cu_setup();
  if (rc) return rc;
  Suite *s = suite_create("checkpoint");
  TCase *tc = tcase_create("resume");
  tcase_set_timeout(tc, 900);
  tcase_add_test(tc, resume_is_bitwise_cnn_adam_dropout_accumulate);
  tcase_add_test(tc, resume_is_bitwise_mlp_nesterov);
  tcase_add_test(tc, resume_is_bitwise_mlp_adam_every_device);
  tcase_add_test(tc, resume_is_bitwise_mlp_lion_all_devices);
  tcase_add_test(tc, resume_on_other_devices_and_replica_counts);
  tcase_add_test(tc, another_batch_resumes_where_the_samples_allow);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  cu_teardown();
  return rc;
}
