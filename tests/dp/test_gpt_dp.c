/*
 * test_gpt_dp.c: a GPT trained data-parallel, under mpirun on 1 and 2
 * ranks (tests/dp/gpt_dp.sh). Rank r trains on device r % D of this machine
 * (PoCL and rusticl alternate: a mixed-vendor job); one rank takes every
 * device (two replicas in one process). Rank 0 also trains the same GPT
 * alone on device 0 with the whole global batch, as every rank's reference.
 * The model and pseudo-text are gptutil.h's.
 *
 *   - equal and unequal shares, SGD and AdamW, give the reference's
 *     parameters within float tolerance, and the replicas of all ranks are
 *     bitwise identical after every step (check_every = 1: the trainer
 *     fails otherwise);
 *   - 2 accumulated micro-batches equal the reference's one batch;
 *   - fp16 (gradients all-reduced as half) stays near one device's fp16;
 *   - a checkpoint written by the job resumes in the job bit for bit, and
 *     on one device alone within float tolerance;
 *   - clt_trainer_step with each rank's own samples, a rank's sample of
 *     ignored labels among them, is one device's step on them all.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>
#include <cltrain/mpi.h>

#include "gptutil.h"
#include "mpiutil.h"
#include "testutil.h"

#define STEPS 6

static clt_comm *comm;
static int rank, nranks;
static clt_devices *mine, *one; /* this rank's devices; device 0 */
static clt_dataset *data;       /* 2048 tokens: 127 windows of 16 */
static char data_path[64], dir[64];

static void options(clt_train_options *o, clt_optimizer_kind kind) {
  clt_train_options_defaults(o);
  clt_optimizer_defaults(kind, &o->optimizer);
  o->schedule.lr = kind == CLT_OPT_SGD ? 0.05f : 1e-2f;
  o->batch = 8;
  o->epochs = 10;
  o->max_steps = STEPS;
  o->check_every = 1;
  o->log_every = 0;
  o->bucket_mb = 0.004; /* several gradient buckets even for this small model */
  o->checkpoint_keep = 0;
}

static clt_trainer *trainer(const clt_devices *devs, clt_comm *c, const clt_train_options *o, clt_model **m) {
  clt_trainer *t;
  ck_assert_int_eq(clt_model_parse(gu_spec, "gpt.model", m), 0);
  ck_assert_msg(clt_trainer_create(*m, devs, c, o, &t) == 0, "rank %d: %s", rank, clt_last_error());
  return t;
}

static float *params_of(clt_trainer *t) {
  float *p = malloc(GU_PARAMS * sizeof *p);
  ck_assert_int_eq(clt_trainer_params(t, p, GU_PARAMS), 0);
  return p;
}

/* Train from the seed (or from checkpoint `resume`) to max_steps on
 * devs/c; the parameters, and the loss on the training set after. */
static double last_eval;

static float *train(const clt_devices *devs, clt_comm *c, const clt_train_options *o, const char *resume) {
  clt_model *m;
  clt_trainer *t = trainer(devs, c, o, &m);
  if (resume) ck_assert_msg(clt_trainer_load_checkpoint(t, resume) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, data, NULL) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), o->max_steps);
  double acc;
  ck_assert_msg(clt_trainer_evaluate(t, data, &last_eval, &acc) == 0, "rank %d: %s", rank, clt_last_error());
  float *p = params_of(t);
  clt_trainer_destroy(t);
  clt_model_destroy(m);
  return p;
}

/* The largest difference, the attention key biases left out: their
 * gradient is rounding noise alone, which Adam turns into lr-sized steps
 * (gu_is_key_bias). */
static double maxdiff(const float *a, const float *b) {
  double worst = 0;
  for (int64_t i = 0; i < GU_PARAMS; i++)
    if (!gu_is_key_bias(i)) worst = fmax(worst, fabs((double)a[i] - b[i]));
  return worst;
}

/* Gradients summed over replicas and ranks in another order than one
 * device sums the batch: a few ulps a step. test_gpt_train measured 6e-8
 * (SGD with momentum) and 8e-7 (AdamW) after 8 steps of two replicas in
 * one process; across ranks the sum is the same float additions, in the
 * ring's order. A lost or doubled slice moves the parameters by ~1e-3. */
#define DP_TOL_SGD 2e-6
#define DP_TOL_ADAMW 1e-5
/* fp16: each replica's gradient is rounded to half (2^-11 relative, and
 * absolute 6e-8 below 6e-5, the scale included) for the all-reduce, where
 * one device's fp16 run keeps its gradient in float. With SGD that moves
 * the parameters by 4e-5 after 6 steps (measured; the log has it); 2e-4
 * leaves room, as in test_dp; a lost slice is ~1e-3. AdamW is another matter: it
 * divides each step by the gradient's own running size, so where a
 * gradient is tiny (a few ulps of half at the scale) its rounding changes
 * the step by a good part of lr: 9e-3 after 6 steps of lr 1e-2, measured,
 * in a weight of 0.005. The parameters are compared under SGD; under
 * AdamW what they compute, the loss after training: 6e-6 apart, measured
 * (the steps themselves take it down by 0.4). */
#define DP_TOL_F16 2e-4
#define FP16_ADAMW_LOSS_TOL 2e-4

static double tol_of(const clt_train_options *o) {
  if (o->precision == CLT_F16) return DP_TOL_F16;
  return o->optimizer.kind == CLT_OPT_SGD ? DP_TOL_SGD : DP_TOL_ADAMW;
}

/* Train o on this rank's devices in the job and on device 0 alone: the
 * parameters (or, fp16 with AdamW, the losses after) within tolerance. */
static void against_reference(const clt_train_options *o, const char *what) {
  clt_train_options r = *o;
  r.accumulate = 1;
  r.balance = CLT_BALANCE_EQUAL;
  /* Rank 0's reference is every rank's: the same device, data and
   * options give the same bits (see test_dp.c). */
  float *ref = rank == 0 ? train(one, NULL, &r, NULL) : malloc(GU_PARAMS * sizeof *ref);
  double ref_loss = last_eval;
  ck_assert_ptr_nonnull(ref);
  MPI_Bcast(ref, (int)GU_PARAMS, MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_Bcast(&ref_loss, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  float *dp = train(mine, comm, o, NULL);
  double d = maxdiff(ref, dp), dl = fabs(last_eval - ref_loss);
  const char *opt = clt_optimizer_name(o->optimizer.kind);
  if (rank == 0)
    fprintf(stderr, "%d rank(s), %s, %s: largest difference from one device %g; loss after %.6f, one device's %.6f\n",
            nranks, what, opt, d, last_eval, ref_loss);
  /* The loss after: evaluation split over the job's replicas, a float
   * sum of 2032 terms in another order, of parameters within the
   * tolerance (fp16 AdamW: see above). */
  ck_assert_msg(dl <= FP16_ADAMW_LOSS_TOL, "rank %d of %d, %s, %s: the loss after is %.7f, one device's %.7f", rank,
                nranks, what, opt, last_eval, ref_loss);
  if (o->precision == CLT_F16 && o->optimizer.kind != CLT_OPT_SGD)
    ck_assert_msg(dl <= FP16_ADAMW_LOSS_TOL, "rank %d of %d, %s, %s: the loss after is %.6f, one device's %.6f", rank,
                  nranks, what, opt, last_eval, ref_loss);
  else
    ck_assert_msg(d <= tol_of(o), "rank %d of %d, %s, %s: parameters differ from one device's by %g", rank, nranks,
                  what, opt, d);
  free(ref), free(dp);
}

START_TEST(equal_shares_match_one_device) {
  clt_train_options o;
  options(&o, CLT_OPT_SGD);
  against_reference(&o, "equal shares");
  options(&o, CLT_OPT_ADAMW);
  against_reference(&o, "equal shares");
}
END_TEST

START_TEST(unequal_shares_match_one_device) {
  clt_train_options o;
  options(&o, CLT_OPT_ADAMW);
  int R = 0;
  MPI_Allreduce(&(int){clt_devices_count(mine)}, &R, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  double w[16];
  for (int i = 0; i < R; i++) w[i] = 1 + 2 * (i % 2); /* 1, 3: 2 and 6 of the 8 */
  o.balance = CLT_BALANCE_WEIGHTS;
  o.balance_weights = w;
  o.balance_nweights = R;
  against_reference(&o, "shares 1:3");
}
END_TEST

START_TEST(accumulation_matches_one_batch) {
  clt_train_options o;
  options(&o, CLT_OPT_SGD);
  o.accumulate = 2;
  o.bucket_mb = 0; /* one bucket at the end */
  against_reference(&o, "2 accumulated micro-batches");
}
END_TEST

START_TEST(fp16_matches_one_device) {
  static const clt_optimizer_kind kinds[] = {CLT_OPT_SGD, CLT_OPT_ADAMW};
  for (int k = 0; k < 2; k++) {
    clt_train_options o;
    options(&o, kinds[k]);
    o.precision = CLT_F16;
    o.loss_scale = 1024; /* no overflow in these steps: no skip to tell apart */
    against_reference(&o, "fp16");
  }
}
END_TEST

/* The job saves at steps 3 and 6; resumed at 3 in the job it ends with the
 * bits of the uninterrupted job on every rank; resumed at 3 on one device
 * alone, within the tolerance of another summation order. */
START_TEST(a_checkpoint_of_the_job_resumes_bit_for_bit) {
  char sub[96], path[160];
  snprintf(sub, sizeof sub, "%s/job", dir);
  clt_train_options o;
  options(&o, CLT_OPT_ADAMW);
  o.schedule.kind = CLT_SCHED_COSINE;
  o.schedule.warmup_steps = 2;
  o.schedule.total_steps = STEPS;
  o.clip = 0.5f;
  o.checkpoint_dir = sub;
  o.checkpoint_every = 3;
  float *whole = train(mine, comm, &o, NULL);
  o.checkpoint_dir = NULL;
  ck_assert_int_eq(clt_checkpoint_path(sub, 3, path, sizeof path), 0);
  float *p = train(mine, comm, &o, path);
  ck_assert_msg(memcmp(p, whole, GU_PARAMS * sizeof *p) == 0, "rank %d of %d: resumed at step 3, differs by %g", rank,
                nranks, maxdiff(p, whole));
  float *alone = train(one, NULL, &o, path);
  double d = maxdiff(alone, whole);
  if (rank == 0)
    fprintf(stderr, "%d rank(s): the job's checkpoint resumed in the job bit for bit, on one device within %g\n", nranks,
            d);
  ck_assert_msg(d <= DP_TOL_ADAMW, "rank %d: the job's checkpoint on one device: differs by %g", rank, d);
  free(whole), free(p), free(alone);
}
END_TEST

/* clt_trainer_step, DDP style: the global batch is 4 samples per rank;
 * rank r passes its own 4, and on the last rank the second sample's
 * labels are all CLT_IGNORE_LABEL. One device passing all of them takes
 * the same step: the ignored labels count on no rank, and the mean
 * divides by the labels that count on all ranks together. */
START_TEST(own_samples_with_ignored_labels_match_one_device) {
  clt_model *m1, *m2;
  clt_train_options o;
  options(&o, CLT_OPT_ADAMW);
  o.batch = 4; /* a replica's runs: up to 4 samples */
  char devspec[16];
  snprintf(devspec, sizeof devspec, "%d", rank % tu_ndev);
  clt_devices *me;
  ck_assert_int_eq(clt_devices_select(tu_devices, devspec, &me), 0);
  clt_trainer *ref = trainer(one, NULL, &o, &m1), *t = trainer(me, comm, &o, &m2);
  int64_t B = 4 * nranks, idx[64];
  float *x = malloc((size_t)B * GU_T * sizeof *x);
  int32_t *y = malloc((size_t)B * GU_T * sizeof *y);
  for (int k = 0; k < 4; k++) {
    for (int64_t i = 0; i < B; i++) idx[i] = (k * B + i) % clt_dataset_count(data);
    ck_assert_int_eq(clt_dataset_get_batch(data, idx, B, x, y), 0);
    for (int j = 0; j < GU_T; j++) y[(B - 3) * GU_T + j] = CLT_IGNORE_LABEL;
    clt_step_result a, b;
    ck_assert_msg(clt_trainer_step(ref, x, y, B, &a) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_trainer_step(t, x + rank * 4 * GU_T, y + rank * 4 * GU_T, 4, &b) == 0, "rank %d: %s", rank,
                  clt_last_error());
    ck_assert_int_eq(b.global_n, B);
    ck_assert_msg(fabs(a.loss - b.loss) <= 1e-5 && a.accuracy == b.accuracy, "rank %d step %d: loss %g against %g, "
                  "accuracy %g against %g", rank, k + 1, b.loss, a.loss, b.accuracy, a.accuracy);
  }
  float *pr = params_of(ref), *pt = params_of(t);
  double d = maxdiff(pr, pt);
  if (rank == 0) fprintf(stderr, "%d rank(s), own samples with ignored labels: within %g of one device\n", nranks, d);
  ck_assert_msg(d <= DP_TOL_ADAMW, "rank %d of %d: parameters differ from one device's by %g", rank, nranks, d);
  clt_trainer_destroy(ref);
  clt_trainer_destroy(t);
  clt_devices_destroy(me);
  clt_model_destroy(m1);
  clt_model_destroy(m2);
  free(x), free(y), free(pr), free(pt);
}
END_TEST

int main(int argc, char **argv) {
  int rc = mu_start(&argc, &argv, 0, &rank, &nranks, &comm);
  if (rc) return rc;
  mu_rank_devices(rank, nranks, &mine);
  clt_devices_select(tu_devices, "0", &one);
  if (mu_shared_tmpdir(rank, "clt-gpt-dp", dir, sizeof dir) < 0) return mu_finish(1, rank, NULL);
  /* Every rank reads its own copy of the same tokens. */
  snprintf(data_path, sizeof data_path, "/tmp/clt-gpt-dp-%d-%ld.bin", rank, (long)getpid());
  const char *dp = data_path;
  if (gu_write_tokens(data_path, 2048, 3) < 0 || clt_dataset_open_tokens(&dp, 1, GU_T, GU_VOCAB, &data) < 0) {
    fprintf(stderr, "%s\n", clt_last_error());
    return 1;
  }

  Suite *s = suite_create("gpt dp");
  TCase *tc = tcase_create("gpt dp");
  tcase_add_test(tc, equal_shares_match_one_device);
  tcase_add_test(tc, unequal_shares_match_one_device);
  tcase_add_test(tc, accumulation_matches_one_batch);
  tcase_add_test(tc, fp16_matches_one_device);
  tcase_add_test(tc, a_checkpoint_of_the_job_resumes_bit_for_bit);
  tcase_add_test(tc, own_samples_with_ignored_labels_match_one_device);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  unlink(data_path);
  clt_dataset_destroy(data);
  clt_devices_destroy(mine);
  clt_devices_destroy(one);
  clt_comm_destroy(comm);
  tu_teardown();
  return mu_finish(rc, rank, dir);
}
