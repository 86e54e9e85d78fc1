/*
 * test_dp.c: data-parallel training against single-device training, run
 * under mpirun on 1 to 4 ranks (tests/dp/dp.sh). Rank r trains on device
 * r % D of this machine (PoCL and rusticl alternate: a mixed-vendor job);
 * with one rank it takes every device (several replicas in one process).
 * Rank 0 also trains the same model alone on one device, with the whole
 * global batch, as every rank's reference.
 *
 *   - equal and unequal shares give the reference's parameters;
 *   - replicas are bitwise identical after every step (check_every = 1:
 *     the trainer itself fails otherwise);
 *   - K accumulated micro-batches equal one batch of the same total;
 *   - fp16 (gradients all-reduced as half) stays near one device's fp16;
 *   - on PoCL everywhere, the exchange in place from shared memory gives
 *     the staged exchange's bits;
 *   - a rank with a different model spec, or other data (of another size,
 *     or of the same shape with other samples), fails on every rank,
 *     naming it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>
#include <cltrain/mpi.h>

#include "comm/comm.h" /* the arena: internal */
#include "data/data.h" /* clt__probe_sample: internal */
#include "mpiutil.h"
#include "testutil.h"
#include "fashion.h"

#define NSAMPLES 512
#define STEPS 6

static clt_comm *comm;
static int rank, nranks;
static clt_devices *mine; /* this rank's devices */
static clt_dataset *data;
static char data_path[64];
static const char *mlp = "input 784\nlinear 32\nrelu\nlinear 10\n";

static void options(clt_train_options *o, int64_t batch) {
  clt_train_options_defaults(o);
  o->batch = batch;
  o->epochs = 1;
  o->max_steps = STEPS;
  o->check_every = 1;
  o->log_every = 0;
  o->schedule.lr = 0.05f;
  o->bucket_mb = 0.01; /* several buckets even for this small model */
}

/* Train m for STEPS steps with devs on comm c (NULL: alone); params out. */
static void train(const char *text, const clt_devices *devs, clt_comm *c, const clt_train_options *o, float *params) {
  clt_model *m;
  clt_trainer *t;
  ck_assert_int_eq(clt_model_parse(text, "dp.model", &m), 0);
  ck_assert_msg(clt_trainer_create(m, devs, c, o, &t) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, data, NULL) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), o->max_steps);
  ck_assert_int_eq(clt_trainer_params(t, params, clt_model_param_count(m)), 0);
  clt_trainer_destroy(t);
  clt_model_destroy(m);
}

/* Float32 sums in another order differ by a few ulps per step; after six
 * SGD steps with momentum the parameters (of size ~0.1) differ by ~1e-6.
 * 2e-5 leaves room for that; a wrong division by the batch, a lost or
 * doubled slice, or a stale share moves them by ~1e-3. */
#define DP_TOL 2e-5

/* In fp16 each replica's gradient is rounded to half (relative 2^-11)
 * before the sum: after six steps of lr 0.05 the parameters moved up to
 * 3.2e-5 from one device's on 1 to 4 ranks (a lost slice moves them ~1e-3). */
#define DP_TOL_F16 2e-4

static void compare(const char *what, const float *a, const float *b, int64_t n, double tol) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
  ck_assert_msg(worst <= tol, "rank %d of %d, %s: parameters differ from one device's by %g", rank, nranks, what,
                worst);
  if (rank == 0) fprintf(stderr, "%s: largest difference from one device %g\n", what, worst);
}

static void against_reference_of(const char *text, const clt_train_options *o, const char *what, double tol) {
  clt_devices *one;
  clt_model *m;
  clt_model_parse(text, "dp.model", &m);
  int64_t P = clt_model_param_count(m);
  clt_model_destroy(m);
  float *ref = malloc(P * 4), *dp = malloc(P * 4);
  clt_train_options r = *o;
  r.accumulate = 1;
  r.balance_min_share = 0;
  r.callback = NULL;
  r.balance = CLT_BALANCE_EQUAL;
  ck_assert_int_eq(clt_devices_select(tu_devices, "0", &one), 0);
  /* The same device, data and options on every rank give the same bits:
   * rank 0 trains the reference and hands it on (the ranks share this
   * machine's cores; each training it cost dp.sh a third of its time). */
  if (rank == 0) train(text, one, NULL, &r, ref);
  MPI_Bcast(ref, (int)P, MPI_FLOAT, 0, MPI_COMM_WORLD);
  train(text, mine, comm, o, dp);
  compare(what, ref, dp, P, tol);
  /* and every rank's bits are rank 0's (a rank that sat out kept the
   * model on the host, and its replicas took it when read) */
  float *zero = malloc(P * 4);
  memcpy(zero, dp, P * 4);
  MPI_Bcast(zero, (int)P, MPI_FLOAT, 0, MPI_COMM_WORLD);
  ck_assert_msg(memcmp(zero, dp, P * 4) == 0, "rank %d, %s: the parameters differ from rank 0's", rank, what);
  free(zero);
  clt_devices_destroy(one);
  free(ref), free(dp);
}

static void against_reference(const clt_train_options *o, const char *what) {
  against_reference_of(mlp, o, what, o->precision == CLT_F16 ? DP_TOL_F16 : DP_TOL);
}

START_TEST(equal_shares_match_one_device) {
  clt_train_options o;
  options(&o, 48);
  against_reference(&o, "equal shares");
}
END_TEST

START_TEST(unequal_shares_match_one_device) {
  clt_train_options o;
  options(&o, 48);
  int R = 0;
  MPI_Allreduce(&(int){clt_devices_count(mine)}, &R, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  double w[16];
  for (int i = 0; i < R; i++) w[i] = 1 + 2 * (i % 3); /* 1, 3, 5, 1, ... */
  o.balance = CLT_BALANCE_WEIGHTS;
  o.balance_weights = w;
  o.balance_nweights = R;
  against_reference(&o, "unequal shares");
}
END_TEST

START_TEST(automatic_shares_match_one_device) {
  clt_train_options o;
  options(&o, 48);
  o.balance = CLT_BALANCE_AUTO;
  o.balance_every = 2; /* the split changes mid-run */
  against_reference(&o, "auto shares");
}
END_TEST

/* Replicas given 0 samples (the balancer's choice for a device that would
 * only slow the step; here by weights of 0): they contribute a zero
 * gradient, the update is still the global batch's, and they are bitwise
 * identical to the others whenever read (check_every = 1: after every
 * step). Every other replica, all but replica 0, or replica 0 alone at 0:
 * on 2 ranks or more a rank with nothing at all. */
enum { EVERY_OTHER, ALL_BUT_FIRST, FIRST };
static int zero_weights(clt_train_options *o, double *w, int which) {
  int R = 0;
  MPI_Allreduce(&(int){clt_devices_count(mine)}, &R, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < R; i++) w[i] = which == EVERY_OTHER ? (i % 2 == 0) : which == FIRST ? (i != 0) : (i == 0);
  o->balance = CLT_BALANCE_WEIGHTS;
  o->balance_weights = w;
  o->balance_nweights = R;
  return R;
}

START_TEST(zero_shares_match_one_device) {
  clt_train_options o;
  double w[16];
  options(&o, 48);
  zero_weights(&o, w, EVERY_OTHER);
  against_reference(&o, "every other replica at 0 samples");
  options(&o, 48);
  zero_weights(&o, w, ALL_BUT_FIRST);
  against_reference(&o, "all replicas but the first at 0 samples");
  /* A replica that sits out steps is brought up to date when read: here
   * only by the check after the last step, and replica 0, which
   * clt_trainer_params reads, is the one at 0. */
  options(&o, 48);
  o.check_every = STEPS;
  if (zero_weights(&o, w, FIRST) > 1) against_reference(&o, "replica 0 at 0 samples, checked after the last step");
}
END_TEST

START_TEST(zero_shares_with_accumulation) {
  clt_train_options o;
  double w[16];
  options(&o, 64);
  o.accumulate = 4;
  zero_weights(&o, w, EVERY_OTHER);
  against_reference(&o, "4 accumulated micro-batches, every other replica at 0");
}
END_TEST

/* --balance-min-share: auto re-splits every step, never below the floor
 * (every step's event, on rank 0), and the update is still exact. */
static int floor_events, floor_broken;
static void check_floor(const clt_train_event *ev, void *user) {
  int64_t floor = *(const int64_t *)user, sum = 0;
  if (ev->kind != CLT_EVENT_STEP) return;
  floor_events++;
  for (int r = 0; r < ev->nreplicas; r++) {
    floor_broken |= ev->shares[r] < floor;
    sum += ev->shares[r];
  }
  floor_broken |= sum != 48;
}

START_TEST(automatic_shares_keep_the_floor) {
  clt_train_options o;
  static int64_t floor = 3;
  options(&o, 48);
  o.balance = CLT_BALANCE_AUTO;
  o.balance_every = 1;
  o.balance_min_share = floor;
  o.log_every = 1;
  o.callback = check_floor;
  o.callback_user = &floor;
  floor_events = floor_broken = 0;
  against_reference(&o, "auto shares with a floor of 3");
  ck_assert(!floor_broken);
  if (rank == 0) ck_assert_int_eq(floor_events, STEPS);
}
END_TEST

START_TEST(accumulation_matches_one_batch) {
  clt_train_options o;
  options(&o, 64);
  o.accumulate = 4;
  o.bucket_mb = 0; /* one bucket at the end */
  against_reference(&o, "4 accumulated micro-batches");
}
END_TEST

/* fp16: gradients all-reduced as half, summed in float; the replicas stay
 * bitwise identical (check_every = 1) and near one device's fp16 run. */
START_TEST(fp16_matches_one_device) {
  clt_train_options o;
  options(&o, 48);
  o.precision = CLT_F16;
  o.loss_scale = 256; /* no overflow in these six steps: no skip to tell apart */
  against_reference(&o, "fp16");
}
END_TEST

/* The CNN of examples/fashion_cnn.model with its defaults (conv, ReLU,
 * max-pool, dropout 0.25, SGD momentum 0.9), held to what README promises
 * of N replicas against one device, exactly (README, "Data parallelism:
 * what is the same"). A sample's forward pass gives the same bits in any
 * batch (test_model), so from the same parameters the only difference is
 * the order of the gradient's float sums: after one step the parameters
 * agree to a few ulps (measured 1.5e-8 on 1 to 4 ranks, PoCL and rusticl;
 * CNN_TOL_STEP allows 1e-6). Later steps start from parameters a few ulps
 * apart, and the runs part for good once a value falls within rounding of
 * a branch (a ReLU input at 0, a max-pool window's two largest values):
 * with 64-sample batches of the full training set, 1 rank against 2 agreed
 * to 6e-8 for 30 steps and at step 31 took different maxima in one of the
 * 200,704 conv2 max-pool windows. Over 6 steps here (measured 3e-8) the MLP's
 * DP_TOL holds (a lost slice or a wrong division moves them ~1e-3). */
#define CNN "input 1 28 28\nconv2d 32 kernel=3 pad=1\nrelu\nmaxpool 2\nconv2d 64 kernel=3 pad=1\nrelu\nmaxpool 2\n" \
            "flatten\nlinear 128\nrelu\ndropout 0.25\nlinear 10"
static const char *cnn = CNN "\n";
/* For one step from the initial parameters: the output layer's default
 * zeros would leave every other layer's first gradient 0. */
static const char *cnn_he = CNN " init=he\n";
#define CNN_TOL_STEP 1e-6

START_TEST(the_cnn_one_step_matches_one_device) {
  clt_train_options o;
  options(&o, 48);
  o.schedule.lr = 0.01f; /* cltrain's default */
  o.max_steps = 1;
  against_reference_of(cnn_he, &o, "the CNN, one step", CNN_TOL_STEP);
}
END_TEST

START_TEST(the_cnn_matches_one_device) {
  clt_train_options o;
  options(&o, 48);
  o.schedule.lr = 0.01f;
  against_reference_of(cnn, &o, "the CNN, 6 steps", DP_TOL);
}
END_TEST

/* The CNN (dropout, max-pool) with a replica at 0 samples. */
START_TEST(zero_shares_the_cnn) {
  clt_train_options o;
  double w[16];
  options(&o, 48);
  o.schedule.lr = 0.01f;
  o.max_steps = 2;
  zero_weights(&o, w, EVERY_OTHER);
  against_reference_of(cnn_he, &o, "the CNN, every other replica at 0", DP_TOL);
}
END_TEST

/* Evaluation splits the set by the shares and runs a process's replicas
 * at once, each taking the next run when done: whatever the split, every
 * sample is evaluated once. Against one device on the same parameters:
 * the devices round differently (PoCL and rusticl: ~1e-7 of the loss), so
 * 1e-5; a lost or doubled run of 48 samples moves the loss and accuracy
 * by ~10%. */
START_TEST(evaluation_follows_the_shares) {
  static const char *he = "input 784\nlinear 32\nrelu\nlinear 10 init=he\n";
  clt_model *m;
  clt_devices *one;
  clt_trainer *ref, *t;
  clt_train_options o;
  double w[16], l0, a0, l, a;
  ck_assert_int_eq(clt_model_parse(he, "dp.model", &m), 0);
  ck_assert_int_eq(clt_devices_select(tu_devices, "0", &one), 0);
  options(&o, 48);
  ck_assert_int_eq(clt_trainer_create(m, one, NULL, &o, &ref), 0);
  ck_assert_msg(clt_trainer_evaluate(ref, data, &l0, &a0) == 0, "%s", clt_last_error());
  for (int which = -1; which <= FIRST; which++) {
    options(&o, 48);
    if (which >= 0 && zero_weights(&o, w, which) < 2 && which == FIRST) continue; /* one replica: not at 0 */
    ck_assert_msg(clt_trainer_create(m, mine, comm, &o, &t) == 0, "rank %d: %s", rank, clt_last_error());
    ck_assert_msg(clt_trainer_evaluate(t, data, &l, &a) == 0, "rank %d: %s", rank, clt_last_error());
    ck_assert_msg(fabs(l - l0) <= 1e-5 * fabs(l0) && fabs(a - a0) <= 1.0 / NSAMPLES,
                  "rank %d, split %d: loss %.9g accuracy %g, one device %.9g %g", rank, which, l, a, l0, a0);
    clt_trainer_destroy(t);
  }
  if (rank == 0) fprintf(stderr, "evaluation by the shares: one device's loss %.9g, accuracy %g\n", l0, a0);
  clt_trainer_destroy(ref);
  clt_devices_destroy(one);
  clt_model_destroy(m);
}
END_TEST

/* Every rank on PoCL, whose buffers are host memory in place: the
 * exchange sums each bucket where the backward wrote it (on one node, from
 * the node's shared memory: the trainer's arena, comm/shm_arena.c), with
 * no staging. The same bits as through the staging (CLT_IN_PLACE=0), with
 * several buckets and with accumulation. */
START_TEST(in_place_keeps_the_bits) {
  clt_devices *pocl = NULL;
  if (nranks < 2 || clt_devices_select(tu_devices, "pocl", &pocl) != 0) {
    if (rank == 0) fprintf(stderr, "in place: needs 2 ranks and PoCL, skipped\n");
    clt_devices_destroy(pocl);
    return;
  }
  clt_model *m;
  clt_model_parse(mlp, "dp.model", &m);
  int64_t P = clt_model_param_count(m);
  clt_model_destroy(m);
  float *a = malloc(P * 4), *b = malloc(P * 4);
  for (int acc = 1; acc <= 2; acc++) {
    clt_train_options o;
    options(&o, 64);
    o.accumulate = acc;
    train(mlp, pocl, comm, &o, a);
    /* Not on pretend nodes (dp_twolevel.sh: in place, through the window),
     * nor without room in /dev/shm (a container's). */
    if (clt_comm_node_count(comm) == 1 && clt__comm_arena_available(comm, (size_t)P * 4))
      ck_assert_msg(clt__arena_mine(comm) != NULL, "rank %d: the gradients never lay in shared memory", rank);
    setenv("CLT_IN_PLACE", "0", 1);
    train(mlp, pocl, comm, &o, b);
    unsetenv("CLT_IN_PLACE");
    ck_assert_msg(memcmp(a, b, P * 4) == 0, "rank %d, %d micro-batch(es): in place and staged differ", rank, acc);
  }
  free(a), free(b);
  clt_devices_destroy(pocl);
}
END_TEST

START_TEST(a_different_model_is_named_on_every_rank) {
  if (nranks < 2) return;
  clt_model *m;
  clt_trainer *t = NULL;
  clt_train_options o;
  options(&o, 48);
  ck_assert_int_eq(clt_model_parse(rank == 1 ? "input 784\nlinear 16\nrelu\nlinear 10\n" : mlp, "dp.model", &m), 0);
  ck_assert_int_eq(clt_trainer_create(m, mine, comm, &o, &t), CLT_EMISMATCH);
  ck_assert_ptr_null(t);
  ck_assert_msg(strstr(clt_last_error(), "rank 1") && strstr(clt_last_error(), "model spec"), "rank %d: %s", rank,
                clt_last_error());
  clt_model_destroy(m);
}
END_TEST

START_TEST(a_different_dataset_is_named_on_every_rank) {
  if (nranks < 2) return;
  clt_model *m;
  clt_trainer *t;
  clt_train_options o;
  options(&o, 48);
  ck_assert_int_eq(clt_model_parse(mlp, "dp.model", &m), 0);
  ck_assert_int_eq(clt_trainer_create(m, mine, comm, &o, &t), 0);
  /* Rank 1 reads only the first half of the samples. */
  clt_dataset *half = data;
  char path[80];
  snprintf(path, sizeof path, "%s.half", data_path);
  if (rank == 1) {
    static const int64_t dims[1] = {784};
    ck_assert_int_eq(tu_fashion_raw("train", NSAMPLES / 2, 1, dims, NULL, NULL, path), 0);
    ck_assert_int_eq(clt_dataset_open_raw(path, &half), 0);
  }
  ck_assert_int_eq(clt_trainer_fit(t, half, NULL), CLT_EMISMATCH);
  ck_assert_msg(strstr(clt_last_error(), "rank 1 trains on 256 samples"), "rank %d: %s", rank, clt_last_error());
  if (rank == 1) {
    clt_dataset_destroy(half);
    unlink(path);
  }
  clt_trainer_destroy(t);
  clt_model_destroy(m);
}
END_TEST

/* One value of one sample changed: the sample fingerprints probe. */
static void poke_probed_sample(float *x, int64_t n, void *user) {
  (void)user;
  x[clt__probe_sample(n, 5) * 784 + 100] += 0.5f;
}

/* Rank 1 reads data of the very shape of rank 0's, but other samples:
 * the test split's first 512, or the same samples with one value of one
 * probed sample changed. Every rank fails before the first step, and
 * before an evaluation, naming rank 1, its file and the sample; copies of
 * one file pass (each rank here reads its own copy in every other test).
 * So does a test set that rank 1 alone lacks. */
START_TEST(same_shape_other_data_is_named_on_every_rank) {
  if (nranks < 2) return;
  static const int64_t dims[1] = {784};
  clt_model *m;
  clt_trainer *t;
  clt_train_options o;
  options(&o, 48);
  ck_assert_int_eq(clt_model_parse(mlp, "dp.model", &m), 0);
  ck_assert_int_eq(clt_trainer_create(m, mine, comm, &o, &t), 0);
  char path[80], want[128];
  snprintf(path, sizeof path, "%s.other", data_path);
  for (int k = 0; k < 2; k++) {
    clt_dataset *other = data;
    if (rank == 1) {
      ck_assert_int_eq(tu_fashion_raw(k == 0 ? "test" : "train", NSAMPLES, 1, dims, k == 0 ? NULL : poke_probed_sample,
                                      NULL, path), 0);
      ck_assert_int_eq(clt_dataset_open_raw(path, &other), 0);
    }
    snprintf(want, sizeof want, "rank 1 trains on another sample %lld than rank 0",
             (long long)clt__probe_sample(NSAMPLES, k == 0 ? 0 : 5));
    int rc = clt_trainer_fit(t, other, NULL);
    ck_assert_msg(rc == CLT_EMISMATCH, "rank %d: fit gave %s: %s", rank, clt_status_name(rc), clt_last_error());
    ck_assert_msg(strstr(clt_last_error(), want) && strstr(clt_last_error(), ".raw.other") &&
                  !strstr(clt_last_error(), "rank 2"), "rank %d: %s", rank, clt_last_error());
    if (rank == 0) fprintf(stderr, "refused as it should be: %s\n", clt_last_error());
    ck_assert_int_eq(clt_trainer_steps_done(t), 0);
    double loss, acc;
    rc = clt_trainer_evaluate(t, other, &loss, &acc);
    ck_assert_msg(rc == CLT_EMISMATCH && strstr(clt_last_error(), "rank 1 evaluates on another sample"),
                  "rank %d: evaluate gave %s: %s", rank, clt_status_name(rc), clt_last_error());
    if (rank == 1) {
      clt_dataset_destroy(other);
      unlink(path);
    }
  }
  /* A test set on every rank but rank 1: named before the first step (its
   * evaluation would wait for rank 1 until the timeout). */
  int rc = clt_trainer_fit(t, data, rank == 1 ? NULL : data);
  ck_assert_msg(rc == CLT_EMISMATCH && strstr(clt_last_error(), "rank 1 evaluates on no dataset but rank 0 on one"),
                "rank %d: fit gave %s: %s", rank, clt_status_name(rc), clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 0);
  double loss, acc;
  ck_assert_int_eq(clt_trainer_evaluate(t, data, &loss, &acc), 0); /* and every rank goes on */
  clt_trainer_destroy(t);
  clt_model_destroy(m);
}
END_TEST

/* Rank 1 alone has samples of another size: every rank fails at once, the
 * others naming rank 1, in fit and in evaluate (not a wait for rank 1 in
 * the next collective until the timeout). */
START_TEST(one_rank_with_bad_data_fails_every_rank) {
  if (nranks < 2) return;
  clt_model *m;
  clt_trainer *t;
  clt_train_options o;
  options(&o, 48);
  ck_assert_int_eq(clt_model_parse(mlp, "dp.model", &m), 0);
  ck_assert_int_eq(clt_trainer_create(m, mine, comm, &o, &t), 0);
  clt_dataset *other = data;
  char path[80];
  snprintf(path, sizeof path, "%s.700", data_path);
  if (rank == 1) {
    static const int64_t dims[1] = {700};
    ck_assert_int_eq(tu_fashion_raw("train", 64, 1, dims, NULL, NULL, path), 0);
    ck_assert_int_eq(clt_dataset_open_raw(path, &other), 0);
  }
  double loss, acc;
  int rc = clt_trainer_fit(t, other, NULL);
  ck_assert_msg(rc == CLT_ESHAPE, "rank %d: fit gave %s: %s", rank, clt_status_name(rc), clt_last_error());
  ck_assert_msg(strstr(clt_last_error(), rank == 1 ? "samples of 700 values" : "failed on rank 1"), "rank %d: %s",
                rank, clt_last_error());
  rc = clt_trainer_evaluate(t, other, &loss, &acc);
  ck_assert_msg(rc == CLT_ESHAPE, "rank %d: evaluate gave %s: %s", rank, clt_status_name(rc), clt_last_error());
  ck_assert_int_eq(clt_trainer_evaluate(t, data, &loss, &acc), 0); /* and every rank goes on */
  if (rank == 1) {
    clt_dataset_destroy(other);
    unlink(path);
  }
  clt_trainer_destroy(t);
  clt_model_destroy(m);
}
END_TEST

int main(int argc, char **argv) {
  int rc = mu_start(&argc, &argv, 1, &rank, &nranks, &comm);
  if (rc) return rc;
  mu_rank_devices(rank, nranks, &mine);

  /* The first NSAMPLES training images, through the raw format. */
  static const int64_t dims[1] = {784};
  snprintf(data_path, sizeof data_path, "/tmp/clt-dp-%d-%ld.raw", rank, (long)getpid());
  if (tu_fashion_raw("train", NSAMPLES, 1, dims, NULL, NULL, data_path) < 0 ||
      clt_dataset_open_raw(data_path, &data) < 0) {
    fprintf(stderr, "%s\n", clt_last_error());
    return 1;
  }

  Suite *s = suite_create("dp");
  TCase *tc = tcase_create("dp");
  tcase_add_test(tc, equal_shares_match_one_device);
  tcase_add_test(tc, unequal_shares_match_one_device);
  tcase_add_test(tc, automatic_shares_match_one_device);
  tcase_add_test(tc, automatic_shares_keep_the_floor);
  tcase_add_test(tc, accumulation_matches_one_batch);
  tcase_add_test(tc, zero_shares_match_one_device);
  tcase_add_test(tc, zero_shares_with_accumulation);
  tcase_add_test(tc, zero_shares_the_cnn);
  tcase_add_test(tc, fp16_matches_one_device);
  tcase_add_test(tc, the_cnn_one_step_matches_one_device);
  tcase_add_test(tc, the_cnn_matches_one_device);
  tcase_add_test(tc, evaluation_follows_the_shares);
  tcase_add_test(tc, in_place_keeps_the_bits);
  tcase_add_test(tc, a_different_model_is_named_on_every_rank);
  tcase_add_test(tc, a_different_dataset_is_named_on_every_rank);
  tcase_add_test(tc, same_shape_other_data_is_named_on_every_rank);
  tcase_add_test(tc, one_rank_with_bad_data_fails_every_rank);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  unlink(data_path);
  clt_dataset_destroy(data);
  clt_devices_destroy(mine);
  clt_comm_destroy(comm);
  tu_teardown();
  return mu_finish(rc, rank, NULL);
}
