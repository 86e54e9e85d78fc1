/*
 * test_step.c: clt_trainer_step, the public training step, in an
 * application's own data loop; run under mpirun on 1 and 2 ranks
 * (tests/train/step.sh). Data: the first NSAMPLES Fashion-MNIST training images.
 *
 *   - steps on the batches fit would draw (the same sampler, read through
 *     the public API) give fit's parameters bit for bit, on every device of
 *     this process at once, and with accumulation on one device;
 *   - bad input is refused, naming it, and changes nothing;
 *   - a caller's queue that never finishes ends clt_trainer_step_buffers
 *     after CLT_TIMEOUT, naming the device;
 *   - on 2 or more ranks, each passing a different n (0 on some), the
 *     parameters are those of one device passing the whole batch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>
#include <cltrain/mpi.h>
#include <cltrain/opencl.h>

#include "mpiutil.h"
#include "testutil.h"
#include "fashion.h"

#define NSAMPLES 256
#define IN 784

static clt_comm *comm;
static int rank, nranks;
static clt_dataset *data;
static char data_path[64];
static const char *mlp = "input 784\nlinear 32\nrelu\nlinear 10\n";

static void options(clt_train_options *o, int64_t batch) {
  clt_train_options_defaults(o);
  o->batch = batch;
  o->epochs = 1;
  o->check_every = 1; /* the replicas must agree bit for bit after every step */
  o->log_every = 0;
  o->schedule.lr = 0.05f;
  o->bucket_mb = 0.01; /* several buckets even for this small model */
}

/* Global batch `step` of epoch 0 as fit's sampler draws it (micro-batches
 * of `micro` split over R replicas equally), replica by replica: the order
 * in which the trainer's replicas take their slices. */
static int64_t fit_batch(int64_t micro, int R, int64_t step, uint64_t seed, float *x, int32_t *y) {
  clt_sampler *s;
  int64_t shares[16], idx[256], got = 0, n;
  double w[16];
  for (int r = 0; r < R; r++) w[r] = 1;
  ck_assert_int_eq(clt_sampler_create(NSAMPLES, micro, seed, 0, &s), 0);
  ck_assert_int_eq(clt_shares_from_weights(R, w, micro, 1, shares), 0);
  ck_assert_int_eq(clt_sampler_set_shares(s, R, shares), 0);
  for (int r = 0; r < R; r++) {
    ck_assert_int_eq(clt_sampler_slice(s, 0, step, r, idx, &n), 0);
    ck_assert_int_eq(clt_dataset_get_batch(data, idx, n, x + got * IN, y + got), 0);
    got += n;
  }
  clt_sampler_destroy(s);
  return got;
}

/* fit for `steps` steps, then the same batches through clt_trainer_step:
 * the same bits. accumulate > 1: each step's batch is `accumulate` of fit's
 * micro-batches, which the step cuts again at the replica's capacity. */
static void step_against_fit(const char *devspec, int accumulate, const char *what) {
  const int steps = 5;
  const int64_t B = 32;
  clt_model *m;
  ck_assert_int_eq(clt_model_parse(mlp, "step.model", &m), 0);
  int64_t P = clt_model_param_count(m);
  clt_train_options o;
  options(&o, B);
  o.accumulate = accumulate;
  o.max_steps = steps;

  clt_trainer *t = mu_trainer(m, devspec, NULL, &o);
  ck_assert_msg(clt_trainer_fit(t, data, NULL) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), steps);
  float *ref = mu_params(t, m);
  int R = clt_trainer_replicas(t);
  clt_trainer_destroy(t);

  t = mu_trainer(m, devspec, NULL, &o);
  float *x = malloc(B * IN * sizeof *x);
  int32_t *y = malloc(B * sizeof *y);
  for (int k = 0; k < steps; k++) {
    int64_t n = 0;
    for (int a = 0; a < accumulate; a++) n += fit_batch(B / accumulate, R, (int64_t)k * accumulate + a, o.seed, x + n * IN, y + n);
    ck_assert_int_eq(n, B);
    clt_step_result res;
    ck_assert_msg(clt_trainer_step(t, x, y, n, &res) == 0, "%s", clt_last_error());
    ck_assert_int_eq(res.global_n, B);
    ck_assert_int_eq(res.skipped, 0);
    ck_assert_msg(isfinite(res.loss) && res.loss > 0 && res.accuracy >= 0 && res.accuracy <= 1, "loss %g, accuracy %g",
                  res.loss, res.accuracy);
    ck_assert_msg(isfinite(res.grad_norm) && res.grad_norm > 0, "gradient norm %g", res.grad_norm);
  }
  ck_assert_int_eq(clt_trainer_steps_done(t), steps);
  float *mine = mu_params(t, m);
  int64_t differ = 0;
  for (int64_t i = 0; i < P; i++) differ += memcmp(&ref[i], &mine[i], sizeof *ref) != 0;
  ck_assert_msg(differ == 0, "%s: %lld of %lld parameters differ from fit's", what, (long long)differ, (long long)P);
  if (rank == 0) fprintf(stderr, "%s: clt_trainer_step gives fit's parameters bit for bit\n", what);
  clt_trainer_destroy(t);
  free(x), free(y), free(ref), free(mine);
  clt_model_destroy(m);
}

START_TEST(step_matches_fit_on_every_device) { step_against_fit("all", 1, "all devices"); }
END_TEST

START_TEST(step_matches_fit_with_accumulation) { step_against_fit("0", 4, "4 accumulated micro-batches"); }
END_TEST

/* A refused step leaves the trainer as it was. */
static void refused(clt_trainer *t, const float *x, const int32_t *y, int64_t n, const char *expect) {
  clt_step_result res;
  int rc = clt_trainer_step(t, x, y, n, &res);
  ck_assert_msg(rc == CLT_EINVAL, "n = %lld: returned %d (%s), not CLT_EINVAL", (long long)n, rc, clt_strerror(rc));
  ck_assert_msg(strstr(clt_last_error(), expect), "n = %lld: \"%s\" does not say \"%s\"", (long long)n,
                clt_last_error(), expect);
}

START_TEST(bad_input_is_refused_naming_it) {
  clt_model *m;
  ck_assert_int_eq(clt_model_parse(mlp, "step.model", &m), 0);
  int64_t P = clt_model_param_count(m);
  clt_train_options o;
  options(&o, 16);
  clt_trainer *t = mu_trainer(m, "0", NULL, &o);
  float *before = mu_params(t, m);
  float *x = calloc(8 * IN, sizeof *x);
  int32_t y[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  refused(t, x, y, -1, "n is -1");
  refused(t, NULL, y, 8, "x is NULL");
  refused(t, x, NULL, 8, "y is NULL");
  refused(t, x, y, 0, "no rank gave any samples");
  y[5] = 10; /* the model has classes 0 to 9 */
  refused(t, x, y, 8, "label 5 (of sample 5) is 10");
  y[5] = -1;
  refused(t, x, y, 8, "is -1");
  y[5] = 5;
  /* A NaN or Inf among the samples is named, not blamed on the learning
   * rate once the loss it makes is NaN. */
  x[3 * IN + 7] = NAN;
  ck_assert_int_eq(clt_trainer_step(t, x, y, 8, NULL), CLT_ENONFINITE);
  ck_assert_msg(strstr(clt_last_error(), "x holds NaN at value 7 of sample 3") &&
                !strstr(clt_last_error(), "learning rate"), "%s", clt_last_error());
  x[3 * IN + 7] = 0;
  x[7 * IN] = -INFINITY;
  ck_assert_int_eq(clt_trainer_step(t, x, y, 8, NULL), CLT_ENONFINITE);
  ck_assert_msg(strstr(clt_last_error(), "x holds -Inf at value 0 of sample 7"), "%s", clt_last_error());
  x[7 * IN] = 0;
  ck_assert_int_eq(clt_trainer_steps_done(t), 0);
  float *after = mu_params(t, m);
  ck_assert(memcmp(before, after, (size_t)P * sizeof *before) == 0);
  /* and it still trains */
  y[5] = 5;
  ck_assert_msg(clt_trainer_step(t, x, y, 8, NULL) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 1);
  clt_trainer_destroy(t);
  free(before), free(after), free(x);
  clt_model_destroy(m);
}
END_TEST

/* The same batches from the application's device buffers (written on a
 * queue of the last device: another context than the trainer's replica
 * when there are two) give the host-memory step's parameters bit for bit;
 * a buffer too small or missing, or no queue, is refused naming it and
 * changes nothing. */
START_TEST(step_buffers_match_the_host_step) {
  const int steps = 3;
  const int64_t B = 32;
  clt_model *m;
  ck_assert_int_eq(clt_model_parse(mlp, "step.model", &m), 0);
  int64_t P = clt_model_param_count(m);
  clt_train_options o;
  options(&o, B);
  clt_context *app = tu_ctx[tu_ndev - 1];
  cl_command_queue q = clt_context_queue(app);
  cl_mem bx, by, small;
  ck_assert_int_eq(clt_buffer_create(app, B * IN * sizeof(float), &bx), 0);
  ck_assert_int_eq(clt_buffer_create(app, B * sizeof(int32_t), &by), 0);
  ck_assert_int_eq(clt_buffer_create(app, 16, &small), 0);
  clt_trainer *host = mu_trainer(m, "0", NULL, &o), *dev = mu_trainer(m, "0", NULL, &o);
  float *x = malloc(B * IN * sizeof *x);
  int32_t *y = malloc(B * sizeof *y);
  float *before = mu_params(dev, m);
  clt_step_result res;
  ck_assert_int_eq(clt_trainer_step_buffers(dev, q, small, by, B, &res), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "x holds 16 bytes"), "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_step_buffers(dev, q, bx, NULL, B, &res), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "y is NULL"), "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_step_buffers(dev, NULL, bx, by, B, &res), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "queue is NULL"), "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(dev), 0);
  float *still = mu_params(dev, m);
  ck_assert(memcmp(before, still, (size_t)P * sizeof *before) == 0);
  for (int k = 0; k < steps; k++) {
    int64_t n = fit_batch(B, 1, k, o.seed, x, y);
    ck_assert_msg(clt_trainer_step(host, x, y, n, NULL) == 0, "%s", clt_last_error());
    ck_assert_int_eq(clEnqueueWriteBuffer(q, bx, CL_FALSE, 0, (size_t)(n * IN) * sizeof *x, x, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueWriteBuffer(q, by, CL_FALSE, 0, (size_t)n * sizeof *y, y, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_msg(clt_trainer_step_buffers(dev, q, bx, by, n, &res) == 0, "%s", clt_last_error());
    ck_assert_int_eq(res.global_n, n);
  }
  float *a = mu_params(host, m), *b = mu_params(dev, m);
  ck_assert_msg(memcmp(a, b, (size_t)P * sizeof *a) == 0, "the step from device buffers differs from the host step");
  if (rank == 0) fprintf(stderr, "clt_trainer_step_buffers (buffers on %s) gives the host step's parameters bit for bit\n",
                         tu_name(app));
  clt_trainer_destroy(host);
  clt_trainer_destroy(dev);
  clt_buffer_release(bx), clt_buffer_release(by), clt_buffer_release(small);
  free(x), free(y), free(before), free(still), free(a), free(b);
  clt_model_destroy(m);
}
END_TEST

/* A caller's queue that never gets to the reads (held by a user event the
 * test opens only afterwards): clt_trainer_step_buffers gives up after
 * CLT_TIMEOUT (here the trainer's communicator's 1 s) with CLT_ETIMEDOUT
 * naming the buffer and the queue's device, instead of waiting for ever
 * (step.sh's time limit ends a program that waits), and trains nothing.
 * Each rank on its own, on a one-rank communicator. */
START_TEST(step_buffers_on_a_queue_that_never_finishes) {
  const int64_t B = 8;
  clt_model *m;
  clt_comm *local;
  ck_assert_int_eq(clt_model_parse(mlp, "step.model", &m), 0);
  ck_assert_int_eq(clt_comm_create_local(&local), 0);
  ck_assert_int_eq(clt_comm_set_timeout(local, 1), 0);
  clt_train_options o;
  options(&o, B);
  clt_context *app = tu_ctx[tu_ndev - 1];
  cl_command_queue q = clt_context_queue(app);
  cl_mem bx, by;
  ck_assert_int_eq(clt_buffer_create(app, B * IN * sizeof(float), &bx), 0);
  ck_assert_int_eq(clt_buffer_create(app, B * sizeof(int32_t), &by), 0);
  clt_trainer *t = mu_trainer(m, "0", local, &o);
  cl_int e;
  cl_event gate = clCreateUserEvent(clt_context_cl(app), &e);
  ck_assert_int_eq(e, CL_SUCCESS);
  ck_assert_int_eq(clEnqueueMarkerWithWaitList(q, 1, &gate, NULL), CL_SUCCESS);
  clFlush(q);
  clt_step_result res;
  int rc = clt_trainer_step_buffers(t, q, bx, by, B, &res);
  if (rank == 0) fprintf(stderr, "a caller's queue that never finishes: %s\n", clt_last_error());
  char name[128] = "";
  cl_device_id d = NULL;
  clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof d, &d, NULL);
  clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name, name, NULL);
  ck_assert_msg(rc == CLT_ETIMEDOUT, "%s: %s", clt_status_name(rc), clt_last_error());
  ck_assert_msg(strstr(clt_last_error(), "reading x on the caller's queue") &&
                    strstr(clt_last_error(), "has not finished after 1 s") && strstr(clt_last_error(), name),
                "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 0);
  clSetUserEventStatus(gate, CL_COMPLETE);
  clFinish(q);
  clReleaseEvent(gate);
  clt_trainer_destroy(t);
  clt_comm_destroy(local);
  clt_buffer_release(bx), clt_buffer_release(by);
  clt_model_destroy(m);
}
END_TEST

/* Float32 sums in another order (per replica, then across ranks) differ by
 * a few ulps per step; after a few SGD steps with momentum the parameters
 * (of size ~0.1) differ by ~1e-7. 2e-5, as in test_dp, leaves room for
 * that; a lost or doubled sample, or a division by the rank's n instead of
 * the global one, moves them by ~1e-3. */
#define STEP_TOL 2e-5

/* How rank r's part of each step's 32 samples is cut: rank 0 takes n0[k],
 * the other ranks share the rest, the first ones one more. */
static const int64_t n0[] = {20, 32, 5, 16, 0};
#define NSTEPS ((int)(sizeof n0 / sizeof n0[0]))

static void my_part(int k, int64_t B, int64_t *lo, int64_t *n) {
  if (rank == 0) {
    *lo = 0, *n = n0[k];
    return;
  }
  int64_t rest = B - n0[k], others = nranks - 1, r = rank - 1;
  *lo = n0[k] + r * (rest / others) + (r < rest % others ? r : rest % others);
  *n = rest / others + (r < rest % others);
}

/* With zero_shares, every rank but 0 has its one replica at a share of 0
 * of fit's split (weights 1, 0, 0, ...): its own samples still count. */
static void different_n(int zero_shares) {
  const int64_t B = 32;
  clt_model *m;
  ck_assert_int_eq(clt_model_parse(mlp, "step.model", &m), 0);
  int64_t P = clt_model_param_count(m);
  clt_train_options o;
  options(&o, 16); /* at most 16 samples a run: rank 0's 20 and 32 take two */
  double w[16] = {1};
  if (zero_shares) {
    o.balance = CLT_BALANCE_WEIGHTS;
    o.balance_weights = w;
    o.balance_nweights = nranks;
  }
  char devspec[16];
  snprintf(devspec, sizeof devspec, "%d", rank % tu_ndev); /* PoCL and rusticl alternate */
  clt_train_options one = o;
  one.balance = CLT_BALANCE_EQUAL;
  clt_trainer *ref = mu_trainer(m, "0", NULL, &one), *t = mu_trainer(m, devspec, comm, &o);
  float *x = malloc(B * IN * sizeof *x);
  int32_t *y = malloc(B * sizeof *y);
  int64_t idx[32];
  for (int k = 0; k < NSTEPS; k++) {
    for (int64_t i = 0; i < B; i++) idx[i] = (k * B + i) % NSAMPLES;
    ck_assert_int_eq(clt_dataset_get_batch(data, idx, B, x, y), 0);
    clt_step_result a, b;
    ck_assert_msg(clt_trainer_step(ref, x, y, B, &a) == 0, "%s", clt_last_error());
    int64_t lo, n;
    my_part(k, B, &lo, &n);
    ck_assert_msg(clt_trainer_step(t, n ? x + lo * IN : NULL, n ? y + lo : NULL, n, &b) == 0, "rank %d: %s", rank,
                  clt_last_error());
    ck_assert_int_eq(b.global_n, B);
    ck_assert_msg(fabs(a.loss - b.loss) < 1e-5 && a.accuracy == b.accuracy, "rank %d step %d: loss %g vs %g",
                  rank, k, b.loss, a.loss);
  }
  float *pr = mu_params(ref, m), *pt = mu_params(t, m);
  double worst = 0;
  for (int64_t i = 0; i < P; i++) worst = fmax(worst, fabs((double)pr[i] - pt[i]));
  ck_assert_msg(worst <= STEP_TOL, "rank %d of %d: parameters differ from one device's by %g", rank, nranks, worst);
  if (rank == 0)
    fprintf(stderr, "%d ranks, different n%s: largest difference from one device %g\n", nranks,
            zero_shares ? ", shares 0 on ranks 1.." : "", worst);

  /* A bad label on rank 1 is refused on every rank, naming rank 1 on the
   * others, and the job goes on. */
  y[3] = rank == 1 ? 99 : y[3];
  int rc = clt_trainer_step(t, x, y, 4, NULL);
  ck_assert_int_eq(rc, CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), rank == 1 ? "is 99" : "rank 1"), "rank %d: %s", rank, clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), NSTEPS);
  y[3] = 0;
  ck_assert_msg(clt_trainer_step(t, x, y, 4, NULL) == 0, "rank %d: %s", rank, clt_last_error());

  clt_trainer_destroy(ref);
  clt_trainer_destroy(t);
  free(x), free(y), free(pr), free(pt);
  clt_model_destroy(m);
}

START_TEST(ranks_with_different_n_match_one_device) {
  if (nranks < 2) return;
  different_n(0);
  different_n(1);
}
END_TEST

int main(int argc, char **argv) {
  int rc = mu_start(&argc, &argv, 1, &rank, &nranks, &comm);
  if (rc) return rc;
  static const int64_t dims[1] = {IN};
  snprintf(data_path, sizeof data_path, "/tmp/clt-step-%d-%ld.raw", rank, (long)getpid());
  if (tu_fashion_raw("train", NSAMPLES, 1, dims, NULL, NULL, data_path) < 0 ||
      clt_dataset_open_raw(data_path, &data) < 0) {
    fprintf(stderr, "%s\n", clt_last_error());
    return 1;
  }

  Suite *s = suite_create("step");
  TCase *tc = tcase_create("step");
  tcase_add_test(tc, step_matches_fit_on_every_device);
  tcase_add_test(tc, step_matches_fit_with_accumulation);
  tcase_add_test(tc, bad_input_is_refused_naming_it);
  tcase_add_test(tc, step_buffers_match_the_host_step);
  tcase_add_test(tc, step_buffers_on_a_queue_that_never_finishes);
  tcase_add_test(tc, ranks_with_different_n_match_one_device);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  unlink(data_path);
  clt_dataset_destroy(data);
  clt_comm_destroy(comm);
  tu_teardown();
  return mu_finish(rc, rank, NULL);
}
