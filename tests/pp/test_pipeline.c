/*
 * test_pipeline.c: pipeline parallelism (--pipeline, issue 17) against one
 * device, run under mpirun on 2, 3, 4 and 6 ranks (tests/pp/pipeline.sh): P =
 * 2 and 3 stages with D = 1, and with D = 2 on 4 and 6 ranks. Rank r trains
 * on device r % D of this machine, so with PoCL and rusticl both present
 * stage 0 runs on PoCL and stage 1 on rusticl: a mixed-vendor pipeline.
 *
 *   - the MLP (M = 1, 4, 7; 1F1B and GPipe), the CNN (conv, max-pool,
 *     dropout; M = 4), a residual MLP (blocks kept whole; an even cut and
 *     --stages) and the tiny GPT (tokens, attention; untied, and tied
 *     across the first and last stage, clipped too) after a few
 *     steps equal one device's with the same micro-batches (--accumulate M,
 *     which also draws the same dropout masks), within PP_TOL; the D
 *     replicas of a stage hold the same bits;
 *   - evaluation through the stages gives one device's loss;
 *   - checkpoints hold the whole model: one saved by a pipeline resumes on
 *     one device, and one saved on one device resumes at P = ranks, each
 *     continuing as the uninterrupted run does;
 *   - refusals, on every rank, naming what is wrong: more stages than
 *     places to cut, P x D not the rank count, micro-batches < 1, --stages
 *     that do not add up or cut a residual's branch, a weight tied across
 *     stages, and the options a pipeline does not take.
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

#define NSAMPLES 224
#define STEPS 3

/* The devices round alike in a stage's forward and backward whichever
 * stage runs them, so with D = 1 the only differences from one device are
 * the vendors' (PoCL against rusticl: a few ulps per step); with D = 2 a
 * micro-batch's gradient is summed from two halves. After three SGD steps
 * with momentum, parameters of size ~0.1 move ~1e-7 from one device's; a
 * lost or doubled micro-batch, or a wrong divisor, moves them ~1e-3. */
#define PP_TOL 2e-5

static clt_comm *comm;
static int rank, nranks;
static clt_devices *mine;
static clt_dataset *data, *tokens, *set; /* Fashion-MNIST images, token windows; what train() uses */
static char tokens_path[64], gpt[2048];
static char data_path[64], dir[256];

static const char *mlp = "input 784\nlinear 32\nrelu\nlinear 16\nrelu\nlinear 10\n";
static const char *cnn = "input 1 28 28\nconv2d 8 kernel=3 pad=1\nrelu\nmaxpool 2\nconv2d 16 kernel=3 pad=1\nrelu\n"
                         "maxpool 2\nflatten\nlinear 32\nrelu\ndropout 0.25\nlinear 10\n";
static const char *resmlp = "input 784\nlinear 32\nrelu\nblock repeat=2\n  linear 32\n  relu\n  residual\nend\n"
                            "linear 10\n";

static void options(clt_train_options *o, int P, int M, clt_pipeline_schedule sched) {
  clt_train_options_defaults(o);
  o->batch = 56;
  o->epochs = 3;
  o->max_steps = STEPS;
  o->check_every = 1; /* a stage's replicas compared after each step */
  o->log_every = 0;
  o->schedule.lr = 0.05f;
  o->bucket_mb = 0.01;
  o->pipeline = P;
  o->micro_batches = M;
  o->pipeline_schedule = sched;
}

/* Train text to o->max_steps on devs over c (NULL: alone), from the
 * checkpoint `from` (NULL: the start), saving to `save` when not NULL;
 * the whole model's parameters into params. */
static void train(const char *text, const clt_devices *devs, clt_comm *c, const clt_train_options *o,
                  const char *from, const char *save, float *params, double *eval_loss) {
  clt_model *m;
  clt_trainer *t;
  ck_assert_int_eq(clt_model_parse(text, "pp.model", &m), 0);
  ck_assert_msg(clt_trainer_create(m, devs, c, o, &t) == 0, "rank %d: %s", rank, clt_last_error());
  if (from) ck_assert_msg(clt_trainer_load_checkpoint(t, from) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, set, NULL) == 0, "rank %d: %s", rank, clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), o->max_steps);
  ck_assert_msg(clt_trainer_params(t, params, clt_model_param_count(m)) == 0, "rank %d: %s", rank, clt_last_error());
  if (save) ck_assert_msg(clt_trainer_save_checkpoint(t, save) == 0, "rank %d: %s", rank, clt_last_error());
  if (eval_loss) {
    double acc;
    ck_assert_msg(clt_trainer_evaluate(t, set, eval_loss, &acc) == 0, "rank %d: %s", rank, clt_last_error());
  }
  clt_trainer_destroy(t);
  clt_model_destroy(m);
}

static int64_t param_count(const char *text) {
  clt_model *m;
  clt_model_parse(text, "pp.model", &m);
  int64_t P = clt_model_param_count(m);
  clt_model_destroy(m);
  return P;
}

static void compare(const char *what, const float *a, const float *b, int64_t n, double tol) {
  double worst = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < n; i++)
    if (fabs((double)a[i] - b[i]) > worst) worst = fabs((double)a[i] - b[i]), at = i;
  if (worst > tol) fprintf(stderr, "rank %d, %s: worst at parameter %lld: %.9g against %.9g\n", rank, what, (long long)at, a[at], b[at]);
  ck_assert_msg(worst <= tol, "rank %d of %d, %s: parameters differ from one device's by %g", rank, nranks, what,
                worst);
  if (rank == 0) fprintf(stderr, "%s: largest difference from one device %g\n", what, worst);
}

/* The pipeline of o on every rank against one device (this rank's) with
 * the same micro-batches. */
static void against_one_device(const char *text, const clt_train_options *o, const char *what) {
  int64_t P = param_count(text);
  float *ref = malloc(P * 4), *pp = malloc(P * 4);
  double ref_loss, pp_loss;
  clt_train_options r = *o;
  r.pipeline = 0, r.micro_batches = 0, r.pipeline_schedule = CLT_PIPELINE_1F1B, r.stages = NULL;
  r.accumulate = o->micro_batches;
  train(text, mine, NULL, &r, NULL, NULL, ref, &ref_loss);
  train(text, mine, comm, o, NULL, NULL, pp, &pp_loss);
  compare(what, ref, pp, P, PP_TOL);
  ck_assert_msg(fabs(pp_loss - ref_loss) <= 1e-5 * fabs(ref_loss), "rank %d, %s: evaluation loss %.9g, one device's "
                "%.9g", rank, what, pp_loss, ref_loss);
  /* every rank reads the same whole model */
  float *zero = malloc(P * 4);
  memcpy(zero, pp, P * 4);
  MPI_Bcast(zero, (int)P, MPI_FLOAT, 0, MPI_COMM_WORLD);
  ck_assert_msg(memcmp(zero, pp, P * 4) == 0, "rank %d, %s: the parameters differ from rank 0's", rank, what);
  free(zero), free(ref), free(pp);
}

/* The grids this job can run: P stages with nranks / P replicas each. */
static int stages_here(void) { return nranks == 4 ? 2 : nranks == 6 ? 3 : nranks; }

START_TEST(mlp_1f1b) {
  clt_train_options o;
  static const int Ms[] = {1, 4, 7};
  for (int i = 0; i < 3; i++) {
    char what[96];
    options(&o, stages_here(), Ms[i], CLT_PIPELINE_1F1B);
    /* the batch of 56 divides by 1, 4 and 7 */
    snprintf(what, sizeof what, "the MLP, P=%d D=%d M=%d 1F1B", stages_here(), nranks / stages_here(), Ms[i]);
    against_one_device(mlp, &o, what);
  }
}
END_TEST

START_TEST(mlp_gpipe) {
  clt_train_options o;
  options(&o, stages_here(), 4, CLT_PIPELINE_GPIPE);
  char what[96];
  snprintf(what, sizeof what, "the MLP, P=%d D=%d M=4 GPipe", stages_here(), nranks / stages_here());
  against_one_device(mlp, &o, what);
}
END_TEST

START_TEST(cnn_1f1b) {
  clt_train_options o;
  options(&o, stages_here(), 4, CLT_PIPELINE_1F1B);
  o.batch = 32;
  o.max_steps = 2;
  o.schedule.lr = 0.01f;
  char what[96];
  snprintf(what, sizeof what, "the CNN, P=%d D=%d M=4 1F1B", stages_here(), nranks / stages_here());
  against_one_device(cnn, &o, what);
}
END_TEST

START_TEST(residual_blocks) {
  clt_train_options o;
  options(&o, stages_here(), 4, CLT_PIPELINE_1F1B);
  char what[96];
  snprintf(what, sizeof what, "the residual MLP, P=%d D=%d M=4", stages_here(), nranks / stages_here());
  against_one_device(resmlp, &o, what);
  if (stages_here() == 2) { /* by hand: 2 layers, then the blocks and the output */
    o.stages = "2,7";
    against_one_device(resmlp, &o, "the residual MLP, --stages 2,7");
  }
  o.stages = "auto"; /* by measured cost, whole blocks, whatever the cut */
  snprintf(what, sizeof what, "the residual MLP, P=%d D=%d M=4, --stages auto", stages_here(), nranks / stages_here());
  against_one_device(resmlp, &o, what);
}
END_TEST

/* The tiny GPT (tests/lib/gptutil.c: token embedding, positions, two blocks
 * of attention and MLP with dropout, each block whole in a stage) with its
 * output projection untied: a tie across stages is refused (refusals). */
START_TEST(gpt_untied) {
  clt_train_options o;
  options(&o, stages_here(), 4, CLT_PIPELINE_1F1B);
  o.batch = 16;
  o.max_steps = 2;
  char what[96];
  snprintf(what, sizeof what, "the tiny GPT (untied, dropout), P=%d D=%d M=4", stages_here(), nranks / stages_here());
  set = tokens;
  against_one_device(gpt, &o, what);
  set = data;
}
END_TEST

/* The tiny GPT as written: its output projection on the last stage tied
 * to the token embedding on the first. The last stage keeps a copy; the
 * two gradients are summed before each update, so both take the same
 * steps: one device's parameters (the owner's), also clipped by the norm
 * (the copy counted once). SGD: with AdamW a few position-embedding
 * entries whose gradients are rounding noise take steps that differ by
 * ~5e-5 even between PoCL's and rusticl's runs on one device. */
START_TEST(gpt_tied) {
  clt_train_options o;
  options(&o, stages_here(), 4, CLT_PIPELINE_1F1B);
  o.batch = 16;
  o.max_steps = 2;
  char what[96];
  snprintf(what, sizeof what, "the tiny GPT (tied), P=%d D=%d M=4", stages_here(), nranks / stages_here());
  set = tokens;
  against_one_device(gu_spec, &o, what);
  o.clip = 0.5f; /* below the norm (~1.3): the copy counted once in it */
  snprintf(what, sizeof what, "the tiny GPT (tied), clipped, P=%d D=%d M=4", stages_here(), nranks / stages_here());
  against_one_device(gu_spec, &o, what);
  set = data;
}
END_TEST

/* A checkpoint holds the whole model at any layout: STEPS + 2 steps in
 * one go, against 2 then 2 more across a change of layout. */
START_TEST(resume_across_layouts) {
  int64_t P = param_count(mlp);
  float *ref = malloc(P * 4), *got = malloc(P * 4);
  clt_train_options o, one;
  char solo[300], piped[300];
  options(&o, stages_here(), 4, CLT_PIPELINE_1F1B);
  one = o;
  one.pipeline = 0, one.micro_batches = 0, one.accumulate = 4;
  one.max_steps = 4;
  train(mlp, mine, NULL, &one, NULL, NULL, ref, NULL);
  /* one device, then the pipeline */
  snprintf(solo, sizeof solo, "%s/solo-%d.safetensors", dir, rank);
  one.max_steps = 2;
  train(mlp, mine, NULL, &one, NULL, solo, got, NULL);
  MPI_Barrier(MPI_COMM_WORLD);
  o.max_steps = 4;
  snprintf(solo, sizeof solo, "%s/solo-0.safetensors", dir); /* rank 0 reads it */
  train(mlp, mine, comm, &o, solo, NULL, got, NULL);
  compare("one device to the pipeline", ref, got, P, PP_TOL);
  /* the pipeline, then one device */
  snprintf(piped, sizeof piped, "%s/piped.safetensors", dir);
  o.max_steps = 2;
  train(mlp, mine, comm, &o, NULL, piped, got, NULL);
  one.max_steps = 4;
  train(mlp, mine, NULL, &one, piped, NULL, got, NULL);
  compare("the pipeline to one device", ref, got, P, PP_TOL);
  free(ref), free(got);
}
END_TEST

/* clt_trainer_create fails on every rank with a message holding `needle`. */
static void refused(const char *text, const clt_train_options *o, const char *needle) {
  clt_model *m;
  clt_trainer *t = NULL;
  ck_assert_int_eq(clt_model_parse(text, "pp.model", &m), 0);
  int rc = clt_trainer_create(m, mine, comm, o, &t);
  ck_assert_msg(rc < 0, "rank %d: a trainer was made where '%s' was expected", rank, needle);
  ck_assert_msg(strstr(clt_last_error(), needle), "rank %d: expected '%s' in: %s", rank, needle, clt_last_error());
  clt_model_destroy(m);
}

START_TEST(refusals) {
  clt_train_options o;
  int P = stages_here();
  options(&o, P, 4, CLT_PIPELINE_1F1B);
  refused("input 784\nlinear 10\n", &o, "can be cut into at most 1 stage");
  refused("input 784\nblock\n  linear 784\n  relu\n  residual\nend\n", &o, "can be cut into at most 1 stage");
  options(&o, nranks + 1, 4, CLT_PIPELINE_1F1B);
  refused(mlp, &o, "the ranks must be the stages times the replicas");
  options(&o, P, -1, CLT_PIPELINE_1F1B);
  refused(mlp, &o, "--micro-batches -1");
  options(&o, P, 5, CLT_PIPELINE_1F1B);
  refused(mlp, &o, "--micro-batches 5 must divide the batch size 56");
  options(&o, 2, 4, CLT_PIPELINE_1F1B);
  if (nranks % 2 == 0) {
    o.stages = "1,1";
    refused(mlp, &o, "adds up to 2 layers, but pp.model has 5");
    o.stages = "2,1,2";
    refused(mlp, &o, "more than the 2 stages");
    o.stages = "3,6"; /* the boundary inside the first block */
    refused(resmlp, &o, "cuts the residual branch");
    o.stages = "1,1"; /* a relu alone */
    refused("input 784\nlinear 10\nrelu\n", &o, "stage 1 (pp.model:3 to line 3) has no parameters");
    o.stages = NULL;

  }
  options(&o, P, 4, CLT_PIPELINE_1F1B);
  o.zero = 2;
  o.shard_by = CLT_SHARD_MEMORY;
  refused(mlp, &o, "--shard-by memory with --pipeline");
  options(&o, P, 4, CLT_PIPELINE_1F1B);
  o.precision = CLT_F16;
  refused(mlp, &o, "--precision fp16 with --pipeline");
  options(&o, P, 4, CLT_PIPELINE_1F1B);
  o.accumulate = 2;
  refused(mlp, &o, "--accumulate 2 with --pipeline");
  options(&o, P, 4, CLT_PIPELINE_1F1B);
  o.balance = CLT_BALANCE_AUTO;
  refused(mlp, &o, "--balance auto with --pipeline");
  options(&o, 0, 4, CLT_PIPELINE_1F1B);
  refused(mlp, &o, "--micro-batches is for a pipeline");
}
END_TEST

int main(int argc, char **argv) {
  int rc = mu_start(&argc, &argv, 1, &rank, &nranks, &comm);
  if (rc) return rc;
  if (nranks < 2) {
    fprintf(stderr, "test_pipeline needs 2 or more ranks\n");
    return mu_finish(77, rank, NULL);
  }
  mu_rank_devices(rank, nranks, &mine);
  static const int64_t dims[3] = {1, 28, 28};
  snprintf(data_path, sizeof data_path, "/tmp/clt-pp-%d-%ld.raw", rank, (long)getpid());
  if (tu_fashion_raw("train", NSAMPLES, 3, dims, NULL, NULL, data_path) < 0 ||
      clt_dataset_open_raw(data_path, &data) < 0) {
    fprintf(stderr, "%s\n", clt_last_error());
    return 1;
  }
  set = data;
  snprintf(tokens_path, sizeof tokens_path, "/tmp/clt-pp-%d-%ld.bin", rank, (long)getpid());
  const char *tp = tokens_path;
  if (gu_write_tokens(tokens_path, 2048, 3) < 0 || clt_dataset_open_tokens(&tp, 1, GU_T, GU_VOCAB, &tokens) < 0) {
    fprintf(stderr, "%s\n", clt_last_error());
    return 1;
  }
  const char *tie = strstr(gu_spec_dropout, " tie=wte");
  snprintf(gpt, sizeof gpt, "%.*s%s", (int)(tie - gu_spec_dropout), gu_spec_dropout, tie + strlen(" tie=wte"));
  if (mu_shared_tmpdir(rank, "clt-pp", dir, sizeof dir) < 0) return mu_finish(1, rank, NULL);
  Suite *s = suite_create("pipeline");
  TCase *tc = tcase_create("pipeline");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, refusals);
  tcase_add_test(tc, mlp_1f1b);
  tcase_add_test(tc, mlp_gpipe);
  tcase_add_test(tc, residual_blocks);
  tcase_add_test(tc, resume_across_layouts);
  tcase_add_test(tc, cnn_1f1b);
  tcase_add_test(tc, gpt_untied);
  tcase_add_test(tc, gpt_tied);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  unlink(data_path);
  unlink(tokens_path);
  clt_dataset_destroy(data);
  clt_dataset_destroy(tokens);
  clt_devices_destroy(mine);
  clt_comm_destroy(comm);
  tu_teardown();
  return mu_finish(rc, rank, dir);
}
