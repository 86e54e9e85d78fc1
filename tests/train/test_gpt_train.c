/*
 * test_gpt_train.c: a GPT gets every guarantee of training that the CNN
 * has, through the public API, on every device (PoCL and rusticl): a small
 * GPT (gptutil.h) on pseudo-text written with clt_tokens_write.
 *
 *   - it learns: the loss falls clearly over 30 AdamW steps, and the
 *     held-out loss is finite and below chance; eval_every puts the
 *     held-out loss into the step events;
 *   - two replicas in one process (PoCL + rusticl), with equal, unequal and
 *     automatic shares, train as one device on the same global batch, and
 *     are bitwise identical after every step;
 *   - a batch in accumulated micro-batches trains as the whole batch;
 *   - fp16 trains within a small loss difference of fp32;
 *   - clipping scales the update to the clip norm exactly, a clip above the
 *     norm changes nothing, and warm-up ramps the learning rate and the
 *     first update as documented;
 *   - a checkpoint resumes bit for bit (AdamW, cosine with warm-up,
 *     clipping, accumulation, dropout, partial batches, an epoch boundary;
 *     and fp16 on two replicas);
 *   - AdamW's weight decay applies to exactly the matrices (by default) or
 *     to everything (decay_all);
 *   - clt_trainer_forward is causal bit for bit and its loss is evaluate's;
 *   - clt_trainer_step on fit's batches gives fit's bits; with
 *     CLT_IGNORE_LABEL, a sample whose labels are all ignored changes
 *     nothing, and a label out of range is refused, naming it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gptutil.h"
#include "testutil.h"

static char train_path[96], val_path[96], tmp_dir[64];
static clt_dataset *train_ds, *val_ds; /* 4096 tokens: 255 windows; 1024 tokens: 63 windows */

/* ---- one training run ---------------------------------------------------- */

typedef struct grun {
  const char *spec, *devices;
  const clt_dataset *data;      /* NULL: train_ds */
  clt_optimizer_kind opt;
  float lr, weight_decay;       /* weight_decay < 0: the optimizer's default */
  float momentum;               /* SGD */
  int decay_all;
  int64_t batch, steps;
  int accumulate, epochs;       /* 0: 1 and 100 */
  clt_dtype precision;
  float loss_scale;             /* 0: the default */
  float clip;
  int64_t warmup;
  clt_schedule_kind schedule;
  clt_balance_mode balance;
  const double *weights;
  int nweights;
  int64_t balance_every;        /* 0: the default */
  const char *checkpoint_dir;
  int64_t checkpoint_every;
  const char *resume;           /* a checkpoint to load before fit */
  const char *start_weights;    /* weights to load before fit */
  int evaluate;                 /* evaluate on val_ds after fit */
  int64_t eval_every;           /* also evaluate on val_ds every N steps (fit's test set) */
} grun;

#define MAX_TRACE 64

typedef struct gtrace {
  int n;
  double loss[MAX_TRACE], lr[MAX_TRACE], grad_norm[MAX_TRACE], test_loss[MAX_TRACE];
  int64_t skipped;
  double loss_scale;
  int64_t shares[2];            /* the first two replicas' shares at the last step */
  double val_loss, val_acc;
} gtrace;

static void on_event(const clt_train_event *ev, void *user) {
  gtrace *tr = user;
  if (ev->kind != CLT_EVENT_STEP || tr->n >= MAX_TRACE) return;
  tr->loss[tr->n] = ev->loss;
  tr->lr[tr->n] = ev->lr;
  tr->grad_norm[tr->n] = ev->grad_norm;
  tr->test_loss[tr->n] = ev->test_loss;
  tr->skipped = ev->skipped;
  tr->loss_scale = ev->loss_scale;
  for (int r = 0; r < 2 && r < ev->nreplicas; r++) tr->shares[r] = ev->shares[r];
  tr->n++;
}

static void options_of(const grun *r, gtrace *tr, clt_train_options *o) {
  clt_train_options_defaults(o);
  clt_optimizer_defaults(r->opt, &o->optimizer);
  if (r->weight_decay >= 0) o->optimizer.weight_decay = r->weight_decay;
  if (r->opt == CLT_OPT_SGD) o->optimizer.momentum = r->momentum;
  o->decay_all = r->decay_all;
  o->schedule.kind = r->schedule;
  o->schedule.lr = r->lr;
  o->schedule.warmup_steps = r->warmup;
  o->schedule.total_steps = r->steps;
  o->batch = r->batch;
  o->accumulate = r->accumulate ? r->accumulate : 1;
  o->epochs = r->epochs ? r->epochs : 100;
  o->max_steps = r->steps;
  o->precision = r->precision;
  if (r->loss_scale > 0) o->loss_scale = r->loss_scale;
  o->clip = r->clip;
  o->balance = r->balance;
  o->balance_weights = r->weights;
  o->balance_nweights = r->nweights;
  if (r->balance_every) o->balance_every = r->balance_every;
  o->check_every = 1; /* every replica's parameters compared after every step: the trainer fails otherwise */
  o->log_every = 1;
  o->eval_every = r->eval_every;
  o->bucket_mb = 0.004; /* several gradient buckets even for this small model */
  o->checkpoint_dir = r->checkpoint_dir;
  o->checkpoint_every = r->checkpoint_every;
  o->checkpoint_keep = 0;
  o->callback = on_event;
  o->callback_user = tr;
}

static clt_trainer *make_trainer(const grun *r, gtrace *tr, clt_model **m) {
  clt_devices *devs;
  clt_trainer *t;
  clt_train_options o;
  memset(tr, 0, sizeof *tr);
  options_of(r, tr, &o);
  ck_assert_msg(clt_model_parse(r->spec ? r->spec : gu_spec, "gpt.model", m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_model_param_count(*m), GU_PARAMS);
  ck_assert_int_eq(clt_devices_select(tu_devices, r->devices, &devs), 0);
  ck_assert_msg(clt_trainer_create(*m, devs, NULL, &o, &t) == 0, "%s", clt_last_error());
  clt_devices_destroy(devs);
  return t;
}

static float *params_of(clt_trainer *t) {
  float *p = malloc(GU_PARAMS * sizeof *p);
  ck_assert_int_eq(clt_trainer_params(t, p, GU_PARAMS), 0);
  return p;
}

/* Run r; the parameters at the end (malloc'd), its events in tr. */
static float *train(const grun *r, gtrace *tr) {
  clt_model *m;
  clt_trainer *t = make_trainer(r, tr, &m);
  if (r->start_weights) ck_assert_msg(clt_trainer_load_weights(t, r->start_weights) == 0, "%s", clt_last_error());
  if (r->resume) ck_assert_msg(clt_trainer_load_checkpoint(t, r->resume) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, r->data ? r->data : train_ds, r->eval_every ? val_ds : NULL) == 0, "%s on %s: %s", "fit", r->devices,
                clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), r->steps);
  tr->val_loss = tr->val_acc = NAN;
  if (r->evaluate) ck_assert_msg(clt_trainer_evaluate(t, val_ds, &tr->val_loss, &tr->val_acc) == 0, "%s", clt_last_error());
  float *p = params_of(t);
  clt_trainer_destroy(t);
  clt_model_destroy(m);
  return p;
}

/* The parameters r starts from (its seed's), before any step. */
static float *initial_params(const grun *r) {
  clt_model *m;
  gtrace tr;
  clt_trainer *t = make_trainer(r, &tr, &m);
  float *p = params_of(t);
  clt_trainer_destroy(t);
  clt_model_destroy(m);
  return p;
}

/* The largest difference of two parameter vectors, the attention key
 * biases left out (gu_is_key_bias: under Adam they follow rounding noise
 * and nothing depends on them); theirs in *key when key is not NULL. */
static double maxdiff_key(const float *a, const float *b, double *key) {
  double worst = 0, k = 0;
  for (int64_t i = 0; i < GU_PARAMS; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (gu_is_key_bias(i)) k = fmax(k, d);
    else worst = fmax(worst, d);
  }
  if (key) *key = k;
  return worst;
}

static double maxdiff(const float *a, const float *b) { return maxdiff_key(a, b, NULL); }

static double update_norm(const float *before, const float *after) {
  double s = 0;
  for (int64_t i = 0; i < GU_PARAMS; i++) s += ((double)after[i] - before[i]) * ((double)after[i] - before[i]);
  return sqrt(s);
}

static const char *dev_spec(int d) {
  static char s[16];
  snprintf(s, sizeof s, "%d", d);
  return s;
}

/* The runs most tests make: batch 8, SGD with momentum or AdamW. */
static grun gpt_run(const char *devices, clt_optimizer_kind opt, int64_t steps) {
  grun r = {.devices = devices, .opt = opt, .batch = 8, .steps = steps};
  if (opt == CLT_OPT_SGD) r.lr = 0.05f, r.momentum = 0.9f, r.weight_decay = 0;
  else r.lr = 1e-2f, r.weight_decay = -1;
  return r;
}

/* ---- (a) it learns --------------------------------------------------------- */

START_TEST(gpt_learns_on_every_device) {
  for (int d = 0; d < tu_ndev; d++) {
    grun r = gpt_run(dev_spec(d), CLT_OPT_ADAMW, 30);
    r.evaluate = 1;
    gtrace tr;
    free(train(&r, &tr));
    ck_assert_int_eq(tr.n, 30);
    double first = (tr.loss[0] + tr.loss[1] + tr.loss[2]) / 3, last = (tr.loss[27] + tr.loss[28] + tr.loss[29]) / 3;
    fprintf(stderr, "%s: loss %.3f -> %.3f over 30 AdamW steps; held-out loss %.3f accuracy %.3f (chance: %.3f)\n",
            tu_name(tu_ctx[d]), first, last, tr.val_loss, tr.val_acc, log(GU_VOCAB));
    /* An untrained model is near chance, ln 37 = 3.61. 30 steps of 8
     * windows learn the letters' frequencies (~2.9 nats) and start on the
     * words: 0.64 below the start, measured. 0.5 is a clear fall beyond
     * the batches' noise (~0.1); a step that does nothing, or goes the
     * wrong way, stays at chance or climbs. */
    ck_assert_msg(fabs(first - log(GU_VOCAB)) < 0.5, "the first losses %.3f are not near chance", first);
    ck_assert_msg(last < first - 0.5, "the loss fell only from %.3f to %.3f", first, last);
    ck_assert_msg(isfinite(tr.val_loss) && tr.val_loss < log(GU_VOCAB) - 0.5 && tr.val_acc > 1.0 / GU_VOCAB,
                  "held-out loss %.3f, accuracy %.3f", tr.val_loss, tr.val_acc);
  }
}
END_TEST

/* eval_every: the held-out loss every N steps, in that step's event: the
 * very value an evaluation after as many steps gives (evaluation changes
 * nothing, so the run goes on alike). */
START_TEST(eval_every_reports_the_held_out_loss) {
  grun r4 = gpt_run("0", CLT_OPT_ADAMW, 4), r8 = gpt_run("0", CLT_OPT_ADAMW, 8);
  r4.evaluate = 1;
  r8.eval_every = 4;
  gtrace t4, t8;
  float *p4 = train(&r4, &t4);
  free(train(&r8, &t8));
  ck_assert_int_eq(t8.n, 8);
  for (int k = 0; k < 8; k++)
    ck_assert_msg(k == 3 || k == 7 ? isfinite(t8.test_loss[k]) : isnan(t8.test_loss[k]), "step %d: test loss %g", k + 1,
                  t8.test_loss[k]);
  ck_assert_msg(t8.test_loss[3] == t4.val_loss, "step 4's event says %.9g, an evaluation after 4 steps %.9g",
                t8.test_loss[3], t4.val_loss);
  ck_assert_msg(t8.test_loss[7] < t8.test_loss[3], "the held-out loss went from %g to %g", t8.test_loss[3],
                t8.test_loss[7]);
  fprintf(stderr, "eval_every 4: held-out loss %.4f at step 4, %.4f at step 8\n", t8.test_loss[3], t8.test_loss[7]);
  free(p4);
}
END_TEST

/* ---- (b) two replicas in one process against one device -------------------- */

/* Two replicas sum their halves' gradients in another order than one device
 * summing the whole batch (the GEMMs over the batch, the sums of the
 * embedding's and the bias gradients), so the gradients differ by a few
 * float ulps, and so do the parameters after a step. SGD with momentum
 * carries those differences on with the lr: after 8 steps the parameters
 * (of size ~0.02 to 1) differ by 6e-8 (measured; the log has it). AdamW
 * divides every step by the gradient's running size, so a parameter whose
 * gradient is mostly cancellation moves differently by a larger part of
 * its lr-sized step: 8e-7 after 8 steps of lr 1e-2 (measured), the key
 * biases left out (gu_is_key_bias: 2e-5, pure rounding noise). The
 * tolerances leave 10 to 30 times that; a lost or doubled slice, or a
 * stale share, moves the parameters by ~1e-3 and more in either, and SGD
 * also catches a division by the wrong batch, to which AdamW is blind. */
#define DP_TOL_SGD 2e-6
#define DP_TOL_ADAMW 1e-5
/* A step's loss is a float sum of 128 terms, taken in another order
 * (5e-7 apart, measured). */
#define LOSS_TOL 1e-5

static double tol_of(const grun *r) { return r->opt == CLT_OPT_SGD ? DP_TOL_SGD : DP_TOL_ADAMW; }

/* a and b, runs of the same steps, end with the same parameters and step
 * losses within the tolerances; b's trace into *out when not NULL. */
static void same_run_trace(const grun *a, const grun *b, const char *what, gtrace *out) {
  gtrace ta, tb;
  float *pa = train(a, &ta), *pb = train(b, &tb);
  double key, d = maxdiff_key(pa, pb, &key), dl = 0;
  for (int k = 0; k < ta.n; k++) dl = fmax(dl, fabs(ta.loss[k] - tb.loss[k]));
  fprintf(stderr, "%s, %s: parameters within %g (key biases %g), step losses within %g\n", what,
          clt_optimizer_name(a->opt), d, key, dl);
  ck_assert_int_eq(ta.n, tb.n);
  ck_assert_msg(d <= tol_of(a), "%s, %s: the parameters differ by %g", what, clt_optimizer_name(a->opt), d);
  ck_assert_msg(dl <= LOSS_TOL, "%s, %s: the step losses differ by %g", what, clt_optimizer_name(a->opt), dl);
  if (out) *out = tb;
  free(pa), free(pb);
}

static void same_run(const grun *a, const grun *b, const char *what) { same_run_trace(a, b, what, NULL); }

static void replicas_against_one(clt_balance_mode balance, const double *w, int nw, const char *what) {
  if (tu_ndev < 2) {
    fprintf(stderr, "%s: one device only; nothing to compare\n", what);
    return;
  }
  static const clt_optimizer_kind opts[] = {CLT_OPT_SGD, CLT_OPT_ADAMW};
  for (int k = 0; k < 2; k++) {
    grun one = gpt_run("0", opts[k], 8), two = one;
    two.devices = "all";
    two.balance = balance, two.weights = w, two.nweights = nw;
    same_run(&one, &two, what);
  }
}

START_TEST(two_replicas_equal_one_device) {
  replicas_against_one(CLT_BALANCE_EQUAL, NULL, 0, "two replicas, equal shares, against one device");
}
END_TEST

START_TEST(two_replicas_with_unequal_shares_equal_one_device) {
  static const double w[2] = {3, 1}; /* 6 and 2 of the 8 samples */
  replicas_against_one(CLT_BALANCE_WEIGHTS, w, 2, "two replicas, shares 3:1, against one device");
}
END_TEST

/* --balance auto: the split follows the replicas' measured speed (rusticl
 * is several times slower than PoCL here), re-made every 2 steps. */
START_TEST(two_replicas_with_automatic_shares_equal_one_device) {
  if (tu_ndev < 2) return;
  grun one = gpt_run("0", CLT_OPT_ADAMW, 8), two = one;
  two.devices = "all";
  two.balance = CLT_BALANCE_AUTO;
  two.balance_every = 2;
  gtrace tr;
  same_run_trace(&one, &two, "two replicas, automatic shares, against one device", &tr);
  fprintf(stderr, "automatic shares after 8 steps: %lld and %lld of 8\n", (long long)tr.shares[0],
          (long long)tr.shares[1]);
}
END_TEST

/* ---- (c) accumulation ------------------------------------------------------ */

/* Two micro-batches of 4 summed against one batch of 8: the same samples,
 * the gradient sums in another order: the tolerances above. */
START_TEST(accumulation_equals_the_whole_batch) {
  static const clt_optimizer_kind opts[] = {CLT_OPT_SGD, CLT_OPT_ADAMW};
  for (int d = 0; d < tu_ndev; d++)
    for (int k = 0; k < 1 + (d == 0); k++) { /* AdamW on the first device: the same code on every device */
      grun whole = gpt_run(dev_spec(d), opts[k], 8), acc = whole;
      acc.accumulate = 2;
      char what[160];
      snprintf(what, sizeof what, "%s: batch 8 in 2 accumulated micro-batches against one", tu_name(tu_ctx[d]));
      same_run(&whole, &acc, what);
    }
}
END_TEST

/* ---- (d) fp16 -------------------------------------------------------------- */

/* Against fp32 from a loss scale that never overflows (1024: no step
 * skipped, so both runs take the same steps): activations and their
 * gradients rounded to half (2^-11 relative) over ~20 layers move a
 * step's loss by ~1e-5, and the parameters drift apart a little more each
 * step: 3e-5 at most over 12 steps (3e-4 over 20), measured. 0.01 leaves
 * room for other devices' rounding and longer drift; fp16 gone wrong (a
 * gradient left scaled, or lost) is off by a whole nat within a few steps. From the default scale, 2^16:
 * the summed loss's gradient overflows half at first, each overflow skips
 * its step and halves the scale, and a few halvings settle it. */
START_TEST(fp16_trains_close_to_fp32) {
  for (int d = 0; d < tu_ndev; d++) {
    grun r32 = gpt_run(dev_spec(d), CLT_OPT_ADAMW, 12);
    r32.evaluate = 1;
    grun r16 = r32, r16d = r32;
    r16.precision = r16d.precision = CLT_F16;
    r16.loss_scale = 1024;
    gtrace a, b, c;
    free(train(&r32, &a));
    free(train(&r16, &b));
    free(train(&r16d, &c));
    double dl = 0;
    for (int k = 0; k < 12; k++) dl = fmax(dl, fabs(a.loss[k] - b.loss[k]));
    fprintf(stderr, "%s: fp16 against fp32 over 12 steps: step losses within %.2g, held-out %.4f against %.4f; from "
            "scale 2^16: %lld skipped, scale now %g, held-out %.4f\n", tu_name(tu_ctx[d]), dl, b.val_loss, a.val_loss,
            (long long)c.skipped, c.loss_scale, c.val_loss);
    ck_assert_msg(b.skipped == 0 && b.loss_scale == 1024, "from scale 1024: %lld skipped, scale %g", (long long)b.skipped,
                  b.loss_scale);
    ck_assert_msg(dl <= 0.01, "on %s the fp16 losses differ from fp32's by up to %g", tu_name(tu_ctx[d]), dl);
    ck_assert_msg(fabs(a.val_loss - b.val_loss) <= 0.01, "held-out loss %g in fp16, %g in fp32", b.val_loss, a.val_loss);
    ck_assert_msg(c.skipped <= 8 && c.loss_scale == ldexp(65536, -(int)c.skipped), "from 2^16: %lld skipped, scale %g",
                  (long long)c.skipped, c.loss_scale);
    /* Skipped steps are steps the run does not learn from: 3 of 12 cost
     * 0.04 of held-out loss, measured. */
    ck_assert_msg(fabs(a.val_loss - c.val_loss) <= 0.1, "held-out loss %g in fp16 from 2^16, %g in fp32", c.val_loss,
                  a.val_loss);
  }
}
END_TEST

/* ---- (e) clipping and warm-up ---------------------------------------------- */

/* Plain SGD (no momentum) makes the update -lr * scale * g, so its norm
 * shows the scale directly. */
static grun sgd_run(const char *devices, int64_t steps) {
  grun r = {.devices = devices, .opt = CLT_OPT_SGD, .lr = 0.1f, .weight_decay = 0, .momentum = 0, .batch = 8,
            .steps = steps};
  return r;
}

START_TEST(clipping_scales_the_update_to_the_clip) {
  for (int d = 0; d < tu_ndev; d++) {
    gtrace t1, tc, tbig;
    grun r1 = sgd_run(dev_spec(d), 1);
    float *p0 = initial_params(&r1);
    float *p1 = train(&r1, &t1);
    double g = t1.grad_norm[0];
    ck_assert_msg(isfinite(g) && g > 0, "gradient norm %g", g);
    /* Unclipped: the update is lr * |g|. The norm is the square root of
     * a float sum of squares (relative ~1e-6), and the update a float
     * difference of parameters near 1 (the norms' weights) of ~1e-3, so
     * ~1e-4 relative per element, averaging out over 5328: 1e-3. */
    double u1 = update_norm(p0, p1);
    ck_assert_msg(fabs(u1 - 0.1 * g) <= 1e-3 * 0.1 * g, "update %g, lr * |g| = %g", u1, 0.1 * g);

    /* Clipped to a quarter of the norm: the update is lr * clip, and the
     * reported norm is the one before clipping (as PyTorch's
     * clip_grad_norm_ returns it). */
    grun rc = r1;
    rc.clip = (float)(g / 4);
    float *pc = train(&rc, &tc);
    double uc = update_norm(p0, pc);
    fprintf(stderr, "%s: |g| %.4f; update %.6f unclipped (lr |g| %.6f), %.6f clipped to %.4f (lr clip %.6f)\n",
            tu_name(tu_ctx[d]), g, u1, 0.1 * g, uc, rc.clip, 0.1 * rc.clip);
    ck_assert_msg(fabs(uc - 0.1 * rc.clip) <= 1e-3 * 0.1 * rc.clip, "clipped update %g, lr * clip = %g", uc,
                  0.1 * rc.clip);
    ck_assert_msg(tc.grad_norm[0] == g, "reported norm %.9g clipped, %.9g not", tc.grad_norm[0], g);

    /* A clip above every step's norm changes nothing, bit for bit; one
     * below changes the trajectory. */
    grun r5 = sgd_run(dev_spec(d), 5), r5big = r5, r5small = r5;
    r5big.clip = 1000;
    r5small.clip = (float)(g / 4);
    float *q = train(&r5, &t1), *qbig = train(&r5big, &tbig);
    ck_assert_msg(memcmp(q, qbig, GU_PARAMS * sizeof *q) == 0, "a clip of 1000 changed the run by %g", maxdiff(q, qbig));
    for (int k = 0; k < 5; k++) ck_assert_msg(tbig.grad_norm[k] < 1000, "step %d: norm %g", k + 1, tbig.grad_norm[k]);
    float *qsmall = train(&r5small, &tc);
    ck_assert_msg(maxdiff(q, qsmall) > 1e-3, "clipping to %g changed the run by only %g", r5small.clip,
                  maxdiff(q, qsmall));
    free(p0), free(p1), free(pc), free(q), free(qbig), free(qsmall);
  }
}
END_TEST

START_TEST(warmup_ramps_the_learning_rate) {
  for (int d = 0; d < tu_ndev; d++) {
    grun r1 = sgd_run(dev_spec(d), 1), w1 = r1, w6 = sgd_run(dev_spec(d), 6);
    w1.warmup = 10;
    w6.warmup = 4;
    gtrace t1, tw, tw6;
    float *p0 = initial_params(&r1), *p1 = train(&r1, &t1), *pw = train(&w1, &tw);
    /* Step 1 of 10 warm-up steps runs at lr / 10: the same gradient (the
     * same bits: the same parameters and batch), a tenth of the update. */
    ck_assert_msg(tw.grad_norm[0] == t1.grad_norm[0], "step 1's gradient norm %.9g with warm-up, %.9g without",
                  tw.grad_norm[0], t1.grad_norm[0]);
    double ratio = update_norm(p0, pw) / update_norm(p0, p1);
    ck_assert_msg(fabs(ratio - 0.1) <= 1e-3, "the first update with 10 warm-up steps is %g of the full one", ratio);
    ck_assert_msg(fabs(tw.lr[0] - 0.01) <= 1e-8, "step 1's learning rate %g", tw.lr[0]);
    /* 4 warm-up steps, then the constant rate: lr (k) / 4 for steps 1 to 4. */
    float *p6 = train(&w6, &tw6);
    for (int k = 0; k < 6; k++) {
      double want = k < 4 ? 0.1 * (k + 1) / 4 : 0.1;
      ck_assert_msg(fabs(tw6.lr[k] - want) <= 1e-7, "step %d: learning rate %g, not %g", k + 1, tw6.lr[k], want);
    }
    fprintf(stderr, "%s: warm-up: first update %.4f of the full one; rates %g %g %g %g %g %g\n", tu_name(tu_ctx[d]),
            ratio, tw6.lr[0], tw6.lr[1], tw6.lr[2], tw6.lr[3], tw6.lr[4], tw6.lr[5]);
    free(p0), free(p1), free(pw), free(p6);
  }
}
END_TEST

/* ---- (f) checkpoints ------------------------------------------------------- */

/* Train r uninterrupted (checkpoints every 4 steps), then resume from each
 * of `from` and train to the end: the same bits, and the same losses for
 * the steps after the resume. */
static void resume_matches(grun r, const int64_t *from, int nfrom, const char *what) {
  char dir[96], path[160];
  snprintf(dir, sizeof dir, "%s/ckpt-%s", tmp_dir, what);
  for (char *c = dir + strlen(tmp_dir) + 1; *c; c++)
    if (*c == ' ' || *c == ',' || *c == '/') *c = '-';
  r.checkpoint_dir = dir;
  r.checkpoint_every = 4;
  gtrace whole, part;
  float *ref = train(&r, &whole);
  r.checkpoint_dir = NULL;
  for (int i = 0; i < nfrom; i++) {
    ck_assert_int_eq(clt_checkpoint_path(dir, from[i], path, sizeof path), 0);
    ck_assert_msg(access(path, R_OK) == 0, "%s was not written", path);
    r.resume = path;
    float *p = train(&r, &part);
    ck_assert_msg(memcmp(p, ref, GU_PARAMS * sizeof *p) == 0, "%s, resumed at step %lld: parameters differ by %g",
                  what, (long long)from[i], maxdiff(p, ref));
    ck_assert_int_eq(part.n, r.steps - from[i]);
    for (int k = 0; k < part.n; k++)
      ck_assert_msg(part.loss[k] == whole.loss[from[i] + k], "%s, resumed at %lld: step %lld's loss %.9g, not %.9g",
                    what, (long long)from[i], (long long)(from[i] + k + 1), part.loss[k], whole.loss[from[i] + k]);
    free(p);
  }
  fprintf(stderr, "%s: resumed at %d step(s), bit for bit\n", what, nfrom);
  free(ref);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* 63 windows at batch 8 make epochs of 8 steps, the last of 7 samples:
 * steps 4 (mid-epoch), 8 (an epoch's end) and 12 (mid-epoch 2). */
START_TEST(resume_is_bitwise_adamw_cosine_clip_accumulate_dropout) {
  grun r = {.spec = gu_spec_dropout, .devices = "0", .data = val_ds, .opt = CLT_OPT_ADAMW, .lr = 1e-2f,
            .weight_decay = 0.1f, .batch = 8, .accumulate = 2, .steps = 16, .clip = 0.5f, .warmup = 3,
            .schedule = CLT_SCHED_COSINE};
  static const int64_t from[] = {4, 8, 12};
  resume_matches(r, from, 3, "adamw cosine clip accumulate dropout");
}
END_TEST

START_TEST(resume_is_bitwise_fp16_on_two_replicas) {
  grun r = {.devices = "all", .data = val_ds, .opt = CLT_OPT_ADAMW, .lr = 1e-2f, .weight_decay = -1, .batch = 8,
            .steps = 8, .precision = CLT_F16, .warmup = 2};
  static const int64_t from[] = {4};
  resume_matches(r, from, 1, tu_ndev > 1 ? "fp16 on two replicas" : "fp16 on one device");
}
END_TEST

/* ---- (g) the weight-decay mask --------------------------------------------- */

/* One AdamW step from the same parameters on the same batch, with the mask
 * (decay_all 0) and without (1). The gradients and Adam's moments are the
 * same bits either way, so a tensor the mask leaves out ends up exactly as
 * decoupled decay leaves it out: p - lr * wd * p away from the other run;
 * a matrix is decayed in both runs and ends bitwise the same. Starting
 * from trained weights, so that biases are not zero (decay would leave a
 * zero alone). */
START_TEST(adamw_decays_exactly_the_matrices) {
  char weights[96];
  snprintf(weights, sizeof weights, "%s/start.safetensors", tmp_dir);
  gu_tensor lay[64];
  int nt = gu_layout(lay, 64);
  ck_assert_int_gt(nt, 0);
  for (int d = 0; d < tu_ndev; d++) {
    /* A few SGD steps away from the initialisation. */
    clt_model *m;
    gtrace tr;
    grun pre = sgd_run(dev_spec(d), 3);
    pre.momentum = 0.9f;
    clt_trainer *t = make_trainer(&pre, &tr, &m);
    ck_assert_int_eq(clt_trainer_fit(t, train_ds, NULL), 0);
    ck_assert_msg(clt_trainer_save_weights(t, weights) == 0, "%s", clt_last_error());
    float *p0 = params_of(t);
    clt_trainer_destroy(t);
    clt_model_destroy(m);

    const float lr = 1e-2f, wd = 0.5f;
    grun r = {.devices = dev_spec(d), .opt = CLT_OPT_ADAMW, .lr = lr, .weight_decay = wd, .batch = 8, .steps = 1,
              .start_weights = weights};
    gtrace a, b;
    float *masked = train(&r, &a);
    r.decay_all = 1;
    float *all = train(&r, &b);
    ck_assert_msg(a.grad_norm[0] == b.grad_norm[0], "the gradients differ: norms %.9g and %.9g", a.grad_norm[0],
                  b.grad_norm[0]);
    for (int k = 0; k < nt; k++) {
      const gu_tensor *x = &lay[k];
      int64_t differ = 0, off = 0;
      double worst = 0;
      for (int64_t i = x->offset; i < x->offset + x->count; i++) {
        differ += memcmp(&masked[i], &all[i], sizeof *all) != 0;
        /* decay_all's extra term: masked - all = lr * wd * p (p taken
         * before the step). Each side is a float rounded once per
         * operation: a few ulps of itself (4 allowed), against lr * wd *
         * p = 5e-3 p; beyond that 1e-3 of the decay. A doubled or missing
         * decay is off by 100%. */
        double want = x->cls == GU_MATRIX ? 0 : (double)lr * wd * p0[i];
        double err = fabs(((double)masked[i] - all[i]) - want);
        if (err > 1e-3 * fabs(want) + 4.8e-7 * fmax(fabs(masked[i]), fabs(all[i]))) off++;
        worst = fmax(worst, err);
      }
      if (x->cls == GU_MATRIX)
        ck_assert_msg(differ == 0, "%s (%s): %lld of %lld values differ between decay_all 0 and 1 on %s", x->name,
                      gu_class_name(x->cls), (long long)differ, (long long)x->count, tu_name(tu_ctx[d]));
      else
        ck_assert_msg(off == 0 && differ > x->count / 2, "%s (%s) on %s: %lld of %lld values differ, %lld not by lr "
                      "* wd * p (by up to %g off)", x->name, gu_class_name(x->cls), tu_name(tu_ctx[d]),
                      (long long)differ, (long long)x->count, (long long)off, worst);
    }
    fprintf(stderr, "%s: AdamW with decay_all 0 and 1: matrices bitwise equal, biases, norms and embeddings "
            "apart by lr * wd * p\n", tu_name(tu_ctx[d]));
    free(p0), free(masked), free(all);
  }
  unlink(weights);
}
END_TEST

/* ---- clt_trainer_step against fit -------------------------------------------- */

/* The batches fit draws (the seeded sampler, through the public API), given
 * to clt_trainer_step: fit's parameters bit for bit, on one device and on
 * two replicas (whose slices are consecutive parts of each batch). */
START_TEST(step_on_fits_batches_gives_fits_bits) {
  for (int all = 0; all < 1 + (tu_ndev > 1); all++) {
    grun r = gpt_run(all ? "all" : "0", CLT_OPT_ADAMW, 5);
    gtrace tr, unused;
    float *ref = train(&r, &tr);
    clt_model *m;
    clt_trainer *t = make_trainer(&r, &unused, &m);
    int R = clt_trainer_replicas(t);
    clt_sampler *smp;
    ck_assert_int_eq(clt_sampler_create(clt_dataset_count(train_ds), 8, 42, 0, &smp), 0);
    ck_assert_int_eq(clt_sampler_set_shares(smp, R, NULL), 0);
    float x[8 * GU_T];
    int32_t y[8 * GU_T];
    for (int k = 0; k < 5; k++) {
      int64_t got = 0, n, idx[8];
      for (int q = 0; q < R; q++) {
        ck_assert_int_eq(clt_sampler_slice(smp, 0, k, q, idx, &n), 0);
        ck_assert_int_eq(clt_dataset_get_batch(train_ds, idx, n, x + got * GU_T, y + got * GU_T), 0);
        got += n;
      }
      ck_assert_int_eq(got, 8);
      clt_step_result res;
      ck_assert_msg(clt_trainer_step(t, x, y, 8, &res) == 0, "%s", clt_last_error());
      ck_assert_msg(res.loss == tr.loss[k], "step %d: loss %.9g, fit's %.9g", k + 1, res.loss, tr.loss[k]);
    }
    float *p = params_of(t);
    ck_assert_msg(memcmp(p, ref, GU_PARAMS * sizeof *p) == 0, "%d replica(s): clt_trainer_step differs from fit by %g",
                  R, maxdiff(p, ref));
    fprintf(stderr, "%d replica(s): clt_trainer_step on fit's batches gives fit's parameters bit for bit\n", R);
    clt_sampler_destroy(smp);
    clt_trainer_destroy(t);
    clt_model_destroy(m);
    free(ref), free(p);
  }
}
END_TEST

/* ---- the forward pass generation uses ---------------------------------------- */

/* clt_trainer_forward: (n, T, V) logits; causal, so changing the tokens
 * from position j on leaves every logit before j as it was, bit for bit,
 * in forwards of the same shape (generate pads a short prompt after its
 * end on that promise; a host BLAS may round a one-sample GEMM unlike an
 * n-sample one: OpenBLAS's AVX-512 small-matrix kernels do); and its
 * summed loss over the held-out windows is what clt_trainer_evaluate
 * averages (a float sum of 1008 terms in another order: 1e-6). */
START_TEST(forward_is_causal_and_agrees_with_evaluate) {
  for (int d = 0; d < tu_ndev; d++) {
    grun r = gpt_run(dev_spec(d), CLT_OPT_ADAMW, 3);
    clt_model *m;
    gtrace tr;
    clt_trainer *t = make_trainer(&r, &tr, &m);
    ck_assert_int_eq(clt_trainer_fit(t, train_ds, NULL), 0);
    const int64_t n = clt_dataset_count(val_ds), TV = GU_T * GU_VOCAB;
    float *x = malloc((size_t)n * GU_T * sizeof *x), *logits = malloc((size_t)(n * TV) * sizeof *logits);
    float *other = malloc((size_t)TV * sizeof *other);
    int32_t *y = malloc((size_t)n * GU_T * sizeof *y);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    ck_assert_int_eq(clt_dataset_get_batch(val_ds, idx, n, x, y), 0);
    double sum, mean, acc;
    ck_assert_msg(clt_trainer_forward(t, x, y, n, logits, n * TV, &sum) == 0, "%s", clt_last_error());
    ck_assert_int_eq(clt_trainer_evaluate(t, val_ds, &mean, &acc), 0);
    ck_assert_msg(fabs(sum / (double)(n * GU_T) - mean) <= 1e-6, "forward's loss %.9g per label, evaluate's %.9g",
                  sum / (double)(n * GU_T), mean);
    ck_assert_int_eq(clt_trainer_forward(t, x, NULL, n, logits, n * TV - 1, NULL), CLT_ESHAPE); /* no room */
    ck_assert_msg(strstr(clt_last_error(), "the buffer holds"), "%s", clt_last_error());
    ck_assert_int_eq(clt_trainer_forward(t, x, NULL, 1, logits, TV, NULL), 0); /* sample 0 alone */
    for (int j = 1; j < GU_T; j += 5) {
      float xj[GU_T];
      memcpy(xj, x, sizeof xj);
      for (int k = j; k < GU_T; k++) xj[k] = (float)((k * 7 + 3) % GU_VOCAB);
      ck_assert_int_eq(clt_trainer_forward(t, xj, NULL, 1, other, TV, NULL), 0);
      ck_assert_msg(memcmp(other, logits, (size_t)j * GU_VOCAB * sizeof *other) == 0,
                    "on %s, tokens from position %d on changed the logits before it", tu_name(tu_ctx[d]), j);
      ck_assert_msg(memcmp(other + j * GU_VOCAB, logits + j * GU_VOCAB, GU_VOCAB * sizeof *other) != 0,
                    "changing position %d's token left its logits alone", j);
    }
    fprintf(stderr, "%s: forward is causal, bit for bit; its loss %.6f per label, evaluate's %.6f\n",
            tu_name(tu_ctx[d]), sum / (double)(n * GU_T), mean);
    free(x), free(logits), free(other), free(y), free(idx);
    clt_trainer_destroy(t);
    clt_model_destroy(m);
  }
}
END_TEST

/* ---- (h) ignored labels in clt_trainer_step -------------------------------- */

static void batch_of(int64_t first, int64_t n, float *x, int32_t *y) {
  int64_t idx[16];
  for (int64_t i = 0; i < n; i++) idx[i] = first + i;
  ck_assert_int_eq(clt_dataset_get_batch(train_ds, idx, n, x, y), 0);
}

/* Four samples with the third one's labels all CLT_IGNORE_LABEL against
 * the other three alone: the ignored sample adds zeros to every gradient
 * and nothing to the divisor, so the steps are the same but for the
 * summation order over the batch (the GEMMs see 4 rows of samples or 3):
 * DP_TOL_ADAMW's reasoning, over 4 AdamW steps. */
START_TEST(ignored_labels_count_for_nothing) {
  for (int d = 0; d < tu_ndev; d++) {
    grun r = {.devices = dev_spec(d), .opt = CLT_OPT_ADAMW, .lr = 1e-2f, .weight_decay = -1, .batch = 4};
    clt_model *m1, *m2;
    gtrace t1, t2;
    clt_trainer *with = make_trainer(&r, &t1, &m1), *without = make_trainer(&r, &t2, &m2);
    float x4[4 * GU_T], x3[3 * GU_T];
    int32_t y4[4 * GU_T], y3[3 * GU_T];
    double dl = 0;
    for (int k = 0; k < 4; k++) {
      batch_of(4 * k, 4, x4, y4);
      for (int j = 0; j < GU_T; j++) y4[2 * GU_T + j] = CLT_IGNORE_LABEL;
      memcpy(x3, x4, 2 * GU_T * sizeof *x3), memcpy(x3 + 2 * GU_T, x4 + 3 * GU_T, GU_T * sizeof *x3);
      memcpy(y3, y4, 2 * GU_T * sizeof *y3), memcpy(y3 + 2 * GU_T, y4 + 3 * GU_T, GU_T * sizeof *y3);
      clt_step_result a, b;
      ck_assert_msg(clt_trainer_step(with, x4, y4, 4, &a) == 0, "%s", clt_last_error());
      ck_assert_msg(clt_trainer_step(without, x3, y3, 3, &b) == 0, "%s", clt_last_error());
      ck_assert_int_eq(a.global_n, 4);
      ck_assert_int_eq(b.global_n, 3);
      ck_assert_msg(a.accuracy == b.accuracy, "step %d: accuracy %g with the ignored sample, %g without", k + 1,
                    a.accuracy, b.accuracy);
      dl = fmax(dl, fabs(a.loss - b.loss));
    }
    float *pa = params_of(with), *pb = params_of(without);
    double dp = maxdiff(pa, pb);
    fprintf(stderr, "%s: a sample of ignored labels: parameters within %g, losses within %g of the batch without it\n",
            tu_name(tu_ctx[d]), dp, dl);
    ck_assert_msg(dp <= DP_TOL_ADAMW, "the ignored sample moved the parameters by %g", dp);
    ck_assert_msg(dl <= LOSS_TOL, "the ignored sample moved the loss by %g", dl);

    /* Refused, naming the label, and nothing changes. */
    for (int j = 0; j < 4 * GU_T; j++) y4[j] = j % GU_VOCAB;
    static const int32_t bad[] = {GU_VOCAB, -1, -99, 1000};
    for (int b = 0; b < 4; b++) {
      char want[64];
      y4[GU_T + 5] = bad[b];
      snprintf(want, sizeof want, "label %d (of sample 1) is %d", GU_T + 5, bad[b]);
      ck_assert_int_eq(clt_trainer_step(with, x4, y4, 4, NULL), CLT_EINVAL);
      ck_assert_msg(strstr(clt_last_error(), want) && strstr(clt_last_error(), "37 classes"), "\"%s\" does not say "
                    "\"%s\"", clt_last_error(), want);
    }
    for (int j = 0; j < 4 * GU_T; j++) y4[j] = CLT_IGNORE_LABEL;
    ck_assert_int_eq(clt_trainer_step(with, x4, y4, 4, NULL), CLT_EINVAL);
    ck_assert_msg(strstr(clt_last_error(), "every label of the step is CLT_IGNORE_LABEL"), "%s", clt_last_error());
    ck_assert_int_eq(clt_trainer_steps_done(with), 4);
    float *after = params_of(with);
    ck_assert(memcmp(after, pa, GU_PARAMS * sizeof *pa) == 0);
    free(pa), free(pb), free(after);
    clt_trainer_destroy(with);
    clt_trainer_destroy(without);
    clt_model_destroy(m1);
    clt_model_destroy(m2);
  }
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/clt-gpt-train-XXXXXX");
  if (!mkdtemp(tmp_dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(train_path, sizeof train_path, "%s/train.bin", tmp_dir);
  snprintf(val_path, sizeof val_path, "%s/val.bin", tmp_dir);
  if (gu_write_tokens(train_path, 4096, 1) < 0 || gu_write_tokens(val_path, 1024, 2) < 0) return 1;
  const char *tp = train_path, *vp = val_path;
  if (clt_dataset_open_tokens(&tp, 1, GU_T, GU_VOCAB, &train_ds) < 0 ||
      clt_dataset_open_tokens(&vp, 1, GU_T, GU_VOCAB, &val_ds) < 0) {
    fprintf(stderr, "%s\n", clt_last_error());
    return 1;
  }

  /* One case per guarantee, so that CK_RUN_CASE=decay (for one) runs it alone. */
  Suite *s = suite_create("gpt training");
  struct {
    const char *name;
    const TTest *tests[4];
  } cases[] = {
      {"learning", {gpt_learns_on_every_device, eval_every_reports_the_held_out_loss}},
      {"forward", {forward_is_causal_and_agrees_with_evaluate}},
      {"replicas", {two_replicas_equal_one_device, two_replicas_with_unequal_shares_equal_one_device,
                    two_replicas_with_automatic_shares_equal_one_device}},
      {"accumulation", {accumulation_equals_the_whole_batch}},
      {"fp16", {fp16_trains_close_to_fp32}},
      {"clipping and warm-up", {clipping_scales_the_update_to_the_clip, warmup_ramps_the_learning_rate}},
      {"checkpoints", {resume_is_bitwise_adamw_cosine_clip_accumulate_dropout, resume_is_bitwise_fp16_on_two_replicas}},
      {"decay", {adamw_decays_exactly_the_matrices}},
      {"step", {step_on_fits_batches_gives_fits_bits, ignored_labels_count_for_nothing}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    TCase *tc = tcase_create(cases[c].name);
    for (int k = 0; k < 4 && cases[c].tests[k]; k++) tcase_add_test(tc, cases[c].tests[k]);
    suite_add_tcase(s, tc);
  }
  rc = tu_run(s);
  clt_dataset_destroy(train_ds);
  clt_dataset_destroy(val_ds);
  unlink(train_path);
  unlink(val_path);
  rmdir(tmp_dir);
  tu_teardown();
  return rc;
}
