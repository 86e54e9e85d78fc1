/*
 * test_zero.c: ZeRO stages 1, 2 and 3 (--zero 1, 2, 3) against --zero 0 on the
 * same ranks, run under mpirun on 1 to 4 ranks (tests/dp/zero.sh); rank r
 * trains on device r % D, so PoCL and rusticl alternate (a mixed-vendor
 * job). The model has 19682 parameters in three buckets (stage 2 reuses a
 * bucket buffer on PoCL), so at 3 ranks the shards are uneven.
 *
 *   - the parameters of both stages are bit for bit those of --zero 0
 *     after every run:
 *     SGD with momentum (and Nesterov, weight decay), SGD without state,
 *     AdamW with its decay mask, Adam with clipping (the global norm),
 *     accumulated micro-batches, fp16 gradients on the wire, two devices
 *     on every rank; at stage 2, buckets copied out on the compute queue
 *     (CPU devices) and read by the exchange (GPUs; CLT_COPY_OUT=0);
 *   - the shards cover the arena once: their sizes add up to the
 *     parameter count over the ranks, each smaller than it on 2+ ranks;
 *   - a checkpoint saved at --zero 1 or 2 holds the whole state: resumed
 *     at every stage on the same ranks, and on rank 0 alone, it continues
 *     exactly as a --zero 0 checkpoint does; on 4 ranks, one of --zero 2
 *     on 3 ranks resumed on 2 at --zero 0 and on 4 at --zero 1 and 2;
 *   - the memory report (clt_model_replica_memory_ranks) counts the state
 *     of the largest shard, which is what the ranks allocate; under a
 *     --max-device-memory between the two, --zero 0 is refused on every
 *     rank naming it and --zero 1 trains; a wide MLP under a cap that
 *     stages 0 and 1 exceed (refused, naming --zero 2) trains at stage 2,
 *     whose report counts the shard's gradients and two bucket buffers;
 *   - --zero 4 is refused; under --zero 2 clt_trainer_gradient and a step
 *     of several runs are refused; ranks that ask for different stages
 *     are refused on every rank, naming the option; on one rank --zero 1
 *     and 2 are no-ops that say so.
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

#define NSAMPLES 256
#define STEPS 6

static clt_comm *comm;
static int rank, nranks;
static clt_devices *mine;
static clt_dataset *data;
static char data_path[64], dir[256];
static const char *mlp = "input 784\nlinear 24\nrelu\nlinear 16\nrelu\nlinear 16\nrelu\nlinear 10\n";

static char kept_log[8192];
static void keep_log(clt_log_level level, const char *msg, void *user) {
  (void)level, (void)user;
  size_t n = strlen(kept_log);
  snprintf(kept_log + n, sizeof kept_log - n, "%s\n", msg);
}

static void options(clt_train_options *o, int zero) {
  clt_train_options_defaults(o);
  o->batch = 48;
  o->epochs = 3;
  o->max_steps = STEPS;
  o->check_every = 1; /* every replica of every rank compared after each step */
  o->log_every = 0;
  o->schedule.lr = 0.05f;
  o->bucket_mb = 0.001; /* three buckets: stage 2 reuses a bucket buffer */
  o->zero = zero;
}

/* Train to o->max_steps on devs over c, from the checkpoint `from` (NULL:
 * the start); parameters out. */
static void train(const clt_devices *devs, clt_comm *c, const clt_train_options *o, const char *from, float *params) {
  clt_model *m;
  clt_trainer *t;
  ck_assert_int_eq(clt_model_parse(mlp, "zero.model", &m), 0);
  ck_assert_msg(clt_trainer_create(m, devs, c, o, &t) == 0, "rank %d: %s", rank, clt_last_error());
  if (from) ck_assert_msg(clt_trainer_load_checkpoint(t, from) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, data, NULL) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), o->max_steps);
  ck_assert_int_eq(clt_trainer_params(t, params, clt_model_param_count(m)), 0);
  clt_trainer_destroy(t);
  clt_model_destroy(m);
}

static int64_t param_count(void) {
  clt_model *m;
  clt_model_parse(mlp, "zero.model", &m);
  int64_t P = clt_model_param_count(m);
  clt_model_destroy(m);
  return P;
}

/* --zero 1, 2 and 3 against --zero 0 with the same options on the
 * same ranks: the same parameters, bit for bit. */
static void same_as_zero0(clt_train_options *o, const char *what) {
  int64_t P = param_count();
  float *a = malloc(P * 4), *b = malloc(P * 4);
  o->zero = 0;
  train(mine, comm, o, NULL, a);
  for (int stage = 1; stage <= 3; stage++) {
    o->zero = stage;
    train(mine, comm, o, NULL, b);
    int64_t bad = -1;
    for (int64_t i = 0; i < P && bad < 0; i++)
      if (memcmp(&a[i], &b[i], 4) != 0) bad = i;
    ck_assert_msg(bad < 0, "rank %d of %d, %s: parameter %lld is %.9g at --zero %d, %.9g at --zero 0", rank, nranks,
                  what, (long long)bad, bad < 0 ? 0 : b[bad], stage, bad < 0 ? 0 : a[bad]);
  }
  free(a), free(b);
}

START_TEST(sgd_momentum) {
  clt_train_options o;
  options(&o, 1);
  same_as_zero0(&o, "SGD momentum 0.9");
  options(&o, 1);
  o.optimizer.nesterov = 1;
  o.optimizer.weight_decay = 0.01f;
  same_as_zero0(&o, "SGD Nesterov, weight decay");
  options(&o, 1);
  o.optimizer.momentum = 0;
  same_as_zero0(&o, "SGD without momentum (no state)");
}
END_TEST

START_TEST(adamw) {
  clt_train_options o;
  options(&o, 1);
  clt_optimizer_defaults(CLT_OPT_ADAMW, &o.optimizer);
  o.schedule.lr = 0.003f;
  same_as_zero0(&o, "AdamW (biases not decayed)");
}
END_TEST

START_TEST(adam_clipping) {
  clt_train_options o;
  options(&o, 1);
  clt_optimizer_defaults(CLT_OPT_ADAM, &o.optimizer);
  o.schedule.lr = 0.003f;
  o.clip = 0.05f; /* below the gradient norm (~0.5): every step clips */
  same_as_zero0(&o, "Adam, clipped to 0.05");
  options(&o, 1);
  o.clip = 0.05f;
  same_as_zero0(&o, "SGD, clipped to 0.05");
}
END_TEST

START_TEST(accumulation) {
  clt_train_options o;
  options(&o, 1);
  o.batch = 64;
  o.accumulate = 4;
  same_as_zero0(&o, "4 accumulated micro-batches");
  options(&o, 1);
  o.bucket_mb = 0; /* one bucket */
  same_as_zero0(&o, "one bucket");
}
END_TEST

START_TEST(fp16_wire) {
  clt_train_options o;
  options(&o, 1);
  o.precision = CLT_F16;
  o.loss_scale = 1024;
  same_as_zero0(&o, "fp16, gradients as half on the wire");
}
END_TEST

/* Stage 2 as on a GPU: the exchange reads each bucket out of its buffer on
 * its own queue and frees the buffer with a user event, instead of the
 * CPU devices' copy on the compute queue as the bucket closes. */
START_TEST(stage2_read_by_the_exchange) {
  clt_train_options o;
  setenv("CLT_COPY_OUT", "0", 1);
  options(&o, 2);
  same_as_zero0(&o, "SGD momentum 0.9, buckets read by the exchange");
  options(&o, 2);
  o.precision = CLT_F16;
  o.loss_scale = 1024;
  same_as_zero0(&o, "fp16 wire, buckets read by the exchange");
  unsetenv("CLT_COPY_OUT");
}
END_TEST

/* Two devices on every rank (PoCL and rusticl): the reduce-scatter sums a
 * rank's replicas first, each replica steps the rank's shard with state of
 * its own, and the allgather hands the parameters to both. */
START_TEST(two_devices_per_rank) {
  if (tu_ndev < 2 || nranks == 1) return;
  clt_devices *both, *keep = mine;
  ck_assert_int_eq(clt_devices_select(tu_devices, "all", &both), 0);
  mine = both;
  clt_train_options o;
  options(&o, 1);
  same_as_zero0(&o, "SGD momentum, two devices per rank");
  options(&o, 1);
  clt_optimizer_defaults(CLT_OPT_ADAMW, &o.optimizer);
  o.schedule.lr = 0.003f;
  same_as_zero0(&o, "AdamW, two devices per rank");
  mine = keep;
  clt_devices_destroy(both);
}
END_TEST

/* The log's "optimizer state for X of P parameters": the shards add up to
 * the arena over the ranks; on one rank the no-op is said instead. */
static void shards_at(clt_train_options *o_) {
  clt_train_options o = *o_;
  clt_model *m;
  clt_trainer *t;
  ck_assert_int_eq(clt_model_parse(mlp, "zero.model", &m), 0);
  kept_log[0] = 0;
  clt_log_level level = clt_log_get_level();
  clt_log_set(keep_log, NULL);
  clt_log_set_level(CLT_LOG_INFO);
  int rc = clt_trainer_create(m, mine, comm, &o, &t);
  clt_log_set(NULL, NULL);
  clt_log_set_level(level);
  ck_assert_msg(rc == 0, "%s", clt_last_error());
  long long mine_n = -1, P = -1;
  const char *at = strstr(kept_log, o.zero == 2 ? "optimizer state and gradients for " : "optimizer state for ");
  if (nranks == 1) {
    ck_assert_msg(strstr(kept_log, o.zero == 2 ? "--zero 2 on one rank" : "--zero 1 on one rank") &&
                  strstr(kept_log, "changes nothing"), "%s", kept_log);
    ck_assert_ptr_null(at);
  } else {
    ck_assert_msg(at && sscanf(strstr(at, " for ") + 5, "%lld of %lld", &mine_n, &P) == 2, "%s", kept_log);
    ck_assert_msg(mine_n < P && mine_n > 0, "rank %d keeps state for %lld of %lld parameters", rank, mine_n, P);
    long long total = 0, most = 0;
    MPI_Allreduce(&mine_n, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&mine_n, &most, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_msg(total == P, "the shards hold %lld parameters over %d ranks, the model %lld", total, nranks, P);
    /* The report counts the largest of them. */
    clt_replica_memory need, all;
    int64_t shard = 0;
    ck_assert_int_eq(clt_model_replica_memory_ranks(m, &o, nranks, &need, &shard), 0);
    ck_assert_msg(shard == most, "the report's shard %lld, the largest rank's %lld", (long long)shard, most);
    ck_assert_int_eq(clt_model_replica_memory(m, &o, &all), 0);
    ck_assert(need.optimizer_state == (uint64_t)shard * 4 && all.optimizer_state == (uint64_t)P * 4);
    ck_assert(need.total + all.optimizer_state + all.gradients == all.total + need.optimizer_state + need.gradients);
    ck_assert(o.zero == 2 ? need.gradients > (uint64_t)shard * 4 : need.gradients == all.gradients);
  }
  clt_trainer_destroy(t);
  clt_model_destroy(m);
}

START_TEST(shards_cover_the_arena) {
  clt_train_options o;
  options(&o, 1);
  shards_at(&o);
  options(&o, 2);
  shards_at(&o);
}
END_TEST

/* Save at step 3 at a stage on c (devices devs), resume elsewhere, train
 * to step 6. */
static void save_at_3_on(const clt_devices *devs, clt_comm *c, int zero, const char *path);
static void save_at_3(int zero, const char *path) { save_at_3_on(mine, comm, zero, path); }
static void save_at_3_on(const clt_devices *devs, clt_comm *c, int zero, const char *path) {
  clt_train_options o;
  options(&o, zero);
  clt_optimizer_defaults(CLT_OPT_ADAMW, &o.optimizer);
  o.schedule.lr = 0.003f;
  o.max_steps = 3;
  clt_model *m;
  clt_trainer *t;
  ck_assert_int_eq(clt_model_parse(mlp, "zero.model", &m), 0);
  ck_assert_msg(clt_trainer_create(m, devs, c, &o, &t) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, data, NULL) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_msg(clt_trainer_save_checkpoint(t, path) == 0, "rank %d: %s", rank, clt_last_error());
  clt_trainer_destroy(t);
  clt_model_destroy(m);
}

static void resume(const clt_devices *devs, clt_comm *c, int zero, const char *path, float *params) {
  clt_train_options o;
  options(&o, zero);
  clt_optimizer_defaults(CLT_OPT_ADAMW, &o.optimizer);
  o.schedule.lr = 0.003f;
  train(devs, c, &o, path, params);
}

static void assert_same(const float *a, const float *b, int64_t P, const char *what) {
  int64_t bad = -1;
  for (int64_t i = 0; i < P && bad < 0; i++)
    if (memcmp(&a[i], &b[i], 4) != 0) bad = i;
  ck_assert_msg(bad < 0, "rank %d of %d, %s: parameter %lld is %.9g, expected %.9g", rank, nranks, what, (long long)bad,
                bad < 0 ? 0 : a[bad], bad < 0 ? 0 : b[bad]);
}

START_TEST(checkpoints_hold_the_whole_state) {
  int64_t P = param_count();
  char z0[512], z1[512];
  snprintf(z0, sizeof z0, "%s/zero0.safetensors", dir);
  snprintf(z1, sizeof z1, "%s/zero1.safetensors", dir);
  save_at_3(0, z0);
  save_at_3(1, z1);
  char z2[512];
  snprintf(z2, sizeof z2, "%s/zero2.safetensors", dir);
  save_at_3(2, z2);
  float *ref = malloc(P * 4), *got = malloc(P * 4);
  resume(mine, comm, 0, z0, ref);
  resume(mine, comm, 0, z1, got);
  assert_same(got, ref, P, "a --zero 1 checkpoint resumed at --zero 0");
  resume(mine, comm, 1, z1, got);
  assert_same(got, ref, P, "a --zero 1 checkpoint resumed at --zero 1");
  resume(mine, comm, 1, z0, got);
  assert_same(got, ref, P, "a --zero 0 checkpoint resumed at --zero 1");
  resume(mine, comm, 0, z2, got);
  assert_same(got, ref, P, "a --zero 2 checkpoint resumed at --zero 0");
  resume(mine, comm, 2, z2, got);
  assert_same(got, ref, P, "a --zero 2 checkpoint resumed at --zero 2");
  resume(mine, comm, 2, z0, got);
  assert_same(got, ref, P, "a --zero 0 checkpoint resumed at --zero 2");
  /* Another number of ranks: rank 0 alone, one device. */
  if (rank == 0) {
    clt_devices *one;
    ck_assert_int_eq(clt_devices_select(tu_devices, "0", &one), 0);
    resume(one, NULL, 0, z0, ref);
    resume(one, NULL, 0, z1, got);
    assert_same(got, ref, P, "a --zero 1 checkpoint resumed on one rank");
    clt_devices_destroy(one);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(ref), free(got);
}
END_TEST

/* The first n ranks of the job as a communicator (NULL on the others). */
static clt_comm *first_ranks(int n) {
  MPI_Comm sub;
  clt_comm *c = NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &sub);
  if (sub == MPI_COMM_NULL) return NULL;
  ck_assert_int_eq(clt_comm_create(sub, &c), 0);
  MPI_Comm_free(&sub); /* clt_comm_create keeps a duplicate */
  return c;
}

/* Issue 15's resume: --zero 2 on 3 ranks saved at step 3, resumed on 2
 * ranks at --zero 0 and on 4 at --zero 1, continues exactly as a --zero 0
 * checkpoint of those 3 ranks resumed there (the checkpoints are the same
 * state: the whole of it). */
START_TEST(stage2_resumed_on_other_ranks) {
  if (nranks != 4) return;
  int64_t P = param_count();
  char z0[512], z2[512];
  snprintf(z0, sizeof z0, "%s/three-zero0.safetensors", dir);
  snprintf(z2, sizeof z2, "%s/three-zero2.safetensors", dir);
  clt_comm *three = first_ranks(3), *two = first_ranks(2);
  if (three) {
    save_at_3_on(mine, three, 0, z0);
    save_at_3_on(mine, three, 2, z2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  float *ref = malloc(P * 4), *got = malloc(P * 4);
  if (two) {
    resume(mine, two, 0, z0, ref);
    resume(mine, two, 0, z2, got);
    assert_same(got, ref, P, "a --zero 2 checkpoint of 3 ranks resumed on 2 at --zero 0");
  }
  resume(mine, comm, 1, z0, ref);
  resume(mine, comm, 1, z2, got);
  assert_same(got, ref, P, "a --zero 2 checkpoint of 3 ranks resumed on 4 at --zero 1");
  resume(mine, comm, 2, z2, got);
  assert_same(got, ref, P, "a --zero 2 checkpoint of 3 ranks resumed on 4 at --zero 2");
  clt_comm_destroy(three), clt_comm_destroy(two);
  free(ref), free(got);
}
END_TEST

/* A cap between the two needs: --zero 0 does not fit, --zero 1 does. */
START_TEST(max_device_memory) {
  if (nranks == 1) return;
  clt_train_options o;
  options(&o, 0);
  clt_optimizer_defaults(CLT_OPT_ADAMW, &o.optimizer);
  o.schedule.lr = 0.003f;
  clt_model *m;
  clt_trainer *t = NULL;
  clt_replica_memory full, sharded;
  ck_assert_int_eq(clt_model_parse(mlp, "zero.model", &m), 0);
  ck_assert_int_eq(clt_model_replica_memory_ranks(m, &o, nranks, &full, NULL), 0);
  o.zero = 1;
  ck_assert_int_eq(clt_model_replica_memory_ranks(m, &o, nranks, &sharded, NULL), 0);
  ck_assert(sharded.total < full.total);
  o.max_device_memory = (full.total + sharded.total) / 2;
  o.zero = 0;
  int rc = clt_trainer_create(m, mine, comm, &o, &t);
  /* Rank 0 says why; the others that rank 0 failed (the first to fail). */
  ck_assert_msg(rc == CLT_EDEVMEM && (rank == 0 ? strstr(clt_last_error(), "--max-device-memory") &&
                                                      strstr(clt_last_error(), "the total does not fit")
                                                : strstr(clt_last_error(), "failed on rank 0") != NULL),
                "rank %d: %s", rank, clt_last_error());
  o.zero = 1;
  ck_assert_msg(clt_trainer_create(m, mine, comm, &o, &t) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, data, NULL) == 0, "rank %d: %s", rank, clt_last_error());
  clt_trainer_destroy(t);
  clt_model_destroy(m);
}
END_TEST

/* Issue 15's target: a wide MLP (414,000 parameters, most in 256 x 256
 * layers of a bucket each) under a cap that neither --zero 0 nor --zero 1
 * fits trains at --zero 2: gradients are the shard's and two bucket
 * buffers' (the report counts exactly that), not the whole arena's. */
static const char *wide = "input 784\nlinear 16\nrelu\nlinear 256\nrelu\nlinear 256\nrelu\nlinear 256\nrelu\n"
                          "linear 256\nrelu\nlinear 256\nrelu\nlinear 256\nrelu\nlinear 10\n";
START_TEST(stage2_fits_where_stage1_does_not) {
  if (nranks == 1) return;
  /* PoCL: its GEMMs are native kernels, so its backward is enqueued ahead
   * and the buckets share two buffers (a device whose host GEMMs the
   * calling thread runs keeps every bucket apart: more than stage 1). */
  clt_devices *pocl;
  if (clt_devices_select(tu_devices, "pocl", &pocl) < 0) return;
  clt_train_options o;
  options(&o, 0);
  clt_optimizer_defaults(CLT_OPT_ADAMW, &o.optimizer);
  o.schedule.lr = 0.003f;
  o.bucket_mb = 0.25;
  o.max_steps = 2;
  clt_model *m;
  clt_trainer *t = NULL;
  clt_replica_memory need[3];
  int64_t shard[3];
  ck_assert_int_eq(clt_model_parse(wide, "wide.model", &m), 0);
  int64_t P = clt_model_param_count(m);
  for (int z = 0; z < 3; z++) {
    o.zero = z;
    ck_assert_int_eq(clt_model_replica_memory_ranks(m, &o, nranks, &need[z], &shard[z]), 0);
  }
  ck_assert(need[0].total > need[1].total && need[1].total > need[2].total);
  ck_assert(need[1].gradients == (uint64_t)P * 4 && shard[1] == shard[2]);
  /* Two slots: one holds the largest bucket, 2570 + 65792 floats (the
   * output layer joins the layer below it), the other a 256 x 256 layer
   * (each slot as long as its longest bucket). */
  ck_assert_msg(need[2].gradients == (uint64_t)(shard[2] + (2570 + 65792) + 65792) * 4, "gradients %llu, shard %lld",
                (unsigned long long)need[2].gradients, (long long)shard[2]);
  ck_assert(need[2].optimizer_state == need[1].optimizer_state);
  o.max_device_memory = (need[1].total + need[2].total) / 2;
  for (int z = 0; z < 2; z++) {
    o.zero = z;
    int rc = clt_trainer_create(m, pocl, comm, &o, &t);
    ck_assert_msg(rc == CLT_EDEVMEM && (rank > 0 || (strstr(clt_last_error(), "the total does not fit") &&
                                                     strstr(clt_last_error(), "--zero 2 on these"))),
                  "rank %d, --zero %d: %s", rank, z, clt_last_error());
  }
  o.zero = 2;
  ck_assert_msg(clt_trainer_create(m, pocl, comm, &o, &t) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, data, NULL) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 2);
  clt_trainer_destroy(t);
  clt_model_destroy(m);
  clt_devices_destroy(pocl);
}
END_TEST

START_TEST(refusals) {
  clt_train_options o;
  clt_model *m;
  clt_trainer *t = NULL;
  ck_assert_int_eq(clt_model_parse(mlp, "zero.model", &m), 0);
  options(&o, 4);
  int rc = clt_trainer_create(m, mine, comm, &o, &t);
  ck_assert_msg(rc == CLT_EINVAL && strstr(clt_last_error(), "--zero 4") && strstr(clt_last_error(), "0 (off)"), "%s",
                clt_last_error());
  /* Under --zero 2 no replica holds the whole gradient (several ranks,
   * no accumulation): clt_trainer_gradient is refused, and so is a step
   * of more samples than a replica runs at once. */
  options(&o, 2);
  o.batch = 8 * nranks;
  ck_assert_msg(clt_trainer_create(m, mine, comm, &o, &t) == 0, "%s", clt_last_error());
  int64_t P = clt_model_param_count(m), in = clt_model_input_size(m), many = (8 * nranks + 1) * clt_devices_count(mine);
  float *x = calloc((size_t)(many * in), sizeof *x), *g = calloc((size_t)P, sizeof *g);
  int32_t *y = calloc((size_t)many, sizeof *y);
  rc = clt_trainer_gradient(t, x, y, 4, g, P, NULL);
  if (nranks > 1)
    ck_assert_msg(rc == CLT_EUNSUPPORTED && strstr(clt_last_error(), "--zero 2") &&
                  strstr(clt_last_error(), "clt_trainer_gradient"), "%s", clt_last_error());
  else
    ck_assert_msg(rc == 0, "%s", clt_last_error()); /* a no-op on one rank */
  rc = clt_trainer_step(t, x, y, many, NULL);
  if (nranks > 1)
    ck_assert_msg(rc == CLT_EINVAL && strstr(clt_last_error(), "--zero 2") && strstr(clt_last_error(), "2 runs") &&
                  strstr(clt_last_error(), "--accumulate"), "rank %d: %s", rank, clt_last_error());
  else
    ck_assert_msg(rc == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_step(t, x, y, 8, NULL) == 0, "rank %d: %s", rank, clt_last_error());
  free(x), free(g), free(y);
  clt_trainer_destroy(t);
  t = NULL;
  options(&o, -1);
  ck_assert_int_eq(clt_trainer_create(m, mine, comm, &o, &t), CLT_EINVAL);
  if (nranks > 1) {
    /* Rank 0 asks for stage 0, the others for 1 (2 on the last): every rank refuses. */
    options(&o, rank == 0 ? 0 : rank == nranks - 1 ? 2 : 1);
    rc = clt_trainer_create(m, mine, comm, &o, &t);
    ck_assert_msg(rc == CLT_EMISMATCH && strstr(clt_last_error(), "--zero") &&
                  strstr(clt_last_error(), "rank 1 disagrees with rank 0"), "rank %d: %s", rank, clt_last_error());
    ck_assert_ptr_null(t);
  }
  clt_model_destroy(m);
}
END_TEST

int main(int argc, char **argv) {
  int rc = mu_start(&argc, &argv, 1, &rank, &nranks, &comm);
  if (rc) return rc;
  mu_rank_devices(rank, nranks, &mine);
  static const int64_t dims[1] = {784};
  snprintf(data_path, sizeof data_path, "/tmp/clt-zero-%d-%ld.raw", rank, (long)getpid());
  if (tu_fashion_raw("train", NSAMPLES, 1, dims, NULL, NULL, data_path) < 0 ||
      clt_dataset_open_raw(data_path, &data) < 0) {
    fprintf(stderr, "%s\n", clt_last_error());
    return 1;
  }
  if (mu_shared_tmpdir(rank, "clt-zero", dir, sizeof dir) < 0) return mu_finish(1, rank, NULL);
  Suite *s = suite_create("zero");
  TCase *tc = tcase_create("zero");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, sgd_momentum);
  /* On one rank every stage is --zero 0 (clt__dp_zero_set says so in the
   * log): the same code on both sides, nothing more for these to compare.
   * SGD and AdamW are compared on 2 to 4 ranks; clipping, accumulation and
   * the f16 wire on 2 and 3 (even and uneven shards), where 4 ranks on
   * this machine's 2 cores add 16 s alone (54 to 38 s) and no new case. */
  if (nranks > 1) tcase_add_test(tc, adamw);
  if (nranks > 1 && nranks < 4) {
    tcase_add_test(tc, adam_clipping);
    tcase_add_test(tc, accumulation);
    tcase_add_test(tc, fp16_wire);
    tcase_add_test(tc, stage2_read_by_the_exchange);
  }
  tcase_add_test(tc, two_devices_per_rank);
  tcase_add_test(tc, shards_cover_the_arena);
  tcase_add_test(tc, checkpoints_hold_the_whole_state);
  tcase_add_test(tc, stage2_resumed_on_other_ranks);
  tcase_add_test(tc, max_device_memory);
  tcase_add_test(tc, stage2_fits_where_stage1_does_not);
  tcase_add_test(tc, refusals);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  unlink(data_path);
  clt_dataset_destroy(data);
  clt_devices_destroy(mine);
  clt_comm_destroy(comm);
  tu_teardown();
  return mu_finish(rc, rank, dir);
}
