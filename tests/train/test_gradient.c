/*
 * test_gradient.c: clt_trainer_gradient, the gradient of the mean loss
 * without an update, on every device:
 *  - for a small GPT (the output projection tied to the token embedding)
 *    and a small Llama (RMSNorm, grouped-query attention with q/k/v
 *    biases and rotary embeddings scaled as Llama 3.1's, SwiGLU, an
 *    untied head) over more samples than one batch (so in several runs,
 *    accumulated) with some labels CLT_IGNORE_LABEL: along a random
 *    direction inside every parameter tensor, against central finite
 *    differences of clt_trainer_forward's summed loss divided by the
 *    labels that count; its loss against forward's;
 *  - for an MLP with dropout: the same bits twice, parameters and step
 *    count untouched, and one plain SGD step (lr 1) on the same samples
 *    moves the parameters by exactly that gradient (dropout masks and all);
 *  - bad arguments refused, with the gradient buffer untouched.
 * (tests/train/torch_check.py checks a GPT-2's gradients against PyTorch's.)
 * The parameters are set through the replica's arena (internal API): the
 * public API loads them only from files.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"
#include "ref/ref.h"
#include "testutil.h"

static const char *gpt_spec = "input tokens 5 vocab=11\n"
                              "embedding 8 name=wte std=0.5\n"
                              "posembedding std=0.5\n"
                              "block repeat=2\n"
                              "  layernorm\n"
                              "  attention heads=2 std=0.4\n"
                              "  residual\n"
                              "  layernorm\n"
                              "  linear 16 init=normal std=0.4\n"
                              "  gelu\n"
                              "  linear 8 init=normal std=0.4\n"
                              "  residual\n"
                              "end\n"
                              "layernorm\n"
                              "linear 11 tie=wte bias=false\n";

/* Two heads of 4 sharing one key and value head; rope's llama3 bands at
 * an original context of 16: the wavelength 2 pi is smoothed, 200 pi
 * divided by 8. */
static const char *llama_spec =
    "input tokens 5 vocab=11\n"
    "embedding 8 std=0.5\n"
    "block repeat=2\n"
    "  rmsnorm\n"
    "  attention heads=2 kv_heads=1 rope_theta=10000 rope_scaling=llama3 factor=8 low_freq_factor=1 "
    "high_freq_factor=4 original_max_position_embeddings=16 bias=qkv std=0.4\n"
    "  residual\n"
    "  rmsnorm eps=1e-6\n"
    "  swiglu 12 std=0.4\n"
    "  residual\n"
    "end\n"
    "rmsnorm\n"
    "linear 11 bias=false init=normal std=0.4\n";

/* init=he on the output layer: with its default zeros the first layer's
 * gradient would be 0. */
static const char *dropout_spec = "input 6\nlinear 12\ntanh\ndropout 0.5\nlinear 4 init=he\n";

enum { T = 5, VOCAB = 11, N = 5, BATCH = 2 };

static clt_trainer *make_trainer(int device, const char *text, clt_optimizer_kind opt, clt_model **m,
                                 clt_devices **one) {
  char spec[16];
  clt_trainer *t;
  snprintf(spec, sizeof spec, "%d", device);
  ck_assert_msg(clt_model_parse(text, "t.model", m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_devices_select(tu_devices, spec, one), 0);
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.batch = BATCH;
  clt_optimizer_defaults(opt, &o.optimizer);
  o.optimizer.momentum = 0;
  o.schedule.lr = 1.0f;
  ck_assert_msg(clt_trainer_create(*m, *one, NULL, &o, &t) == 0, "%s", clt_last_error());
  return t;
}

static void set_params(clt_trainer *t, const float *p) {
  clt_tensor view = clt__replica_params(t->s.rep[0]);
  ck_assert_int_eq(clt_tensor_upload(t->ctx[0], &view, p, (size_t)clt_model_param_count(t->model) * 4), 0);
}

static double summed_loss(clt_trainer *t, const float *x, const int32_t *y, float *logits) {
  double sum;
  ck_assert_msg(clt_trainer_forward(t, x, y, N, logits, N * T * VOCAB, &sum) == 0, "%s", clt_last_error());
  return sum;
}

/* Along a random unit direction v inside each tensor: the derivative of
 * the mean loss, (L(p + e v) - L(p - e v)) / 2e / labels, against g . v.
 * forward's loss is a sum of float sums of ~20 terms each (~1e-6 of
 * rounding), so with e = 1e-2 the quotient carries ~1e-4 / labels of noise
 * besides its O(e^2) error; 1e-4 + 2% separates that from a wrong
 * gradient, which is off by the size of the derivative itself (a missing
 * division by the labels, or a run not accumulated, is off by 2x or more). */
static void gradient_case(const char *spec, int min_checked) {
  float x[N * T];
  int32_t y[N * T];
  int counted = 0;
  for (int i = 0; i < N * T; i++) {
    x[i] = (float)((i * 7 + i / 3) % VOCAB);
    y[i] = i % 7 == 3 ? CLT_IGNORE_LABEL : (int32_t)((i * 5 + 2) % VOCAB);
    counted += y[i] != CLT_IGNORE_LABEL;
  }
  for (int d = 0; d < tu_ndev; d++) {
    clt_model *m;
    clt_devices *one;
    clt_trainer *t = make_trainer(d, spec, CLT_OPT_SGD, &m, &one);
    const clt_model_spec *s = m->spec;
    int64_t P = clt_model_param_count(m);
    float *p0 = malloc((size_t)P * 4), *g = malloc((size_t)P * 4), *pp = malloc((size_t)P * 4);
    float *logits = malloc((size_t)N * T * VOCAB * 4);
    ck_assert_int_eq(clt_trainer_params(t, p0, P), 0);
    double loss;
    ck_assert_msg(clt_trainer_gradient(t, x, y, N, g, P, &loss) == 0, "%s", clt_last_error());
    double sum = summed_loss(t, x, y, logits);
    ck_assert_msg(fabs(loss - sum / counted) <= 1e-6 * fabs(loss), "%s: gradient's loss %.9g, forward's %.9g / %d",
                  tu_name(tu_ctx[d]), loss, sum, counted);
    int checked = 0;
    for (int li = 1; li < s->nlayers; li++) {
      const clt_layer_spec *l = &s->layers[li];
      for (int k = 0; k < l->nparams; k++) {
        const clt_param_spec *ps = &l->param[k];
        if (ps->tied) continue; /* its gradient adds into the owner's, checked there */
        float *v = malloc((size_t)ps->count * 4);
        ref_random(v, (size_t)ps->count, (unsigned)(100 + li * 8 + k));
        double norm = 0, gv = 0;
        for (int64_t i = 0; i < ps->count; i++) norm += (double)v[i] * v[i];
        norm = sqrt(norm);
        for (int64_t i = 0; i < ps->count; i++) v[i] = (float)(v[i] / norm), gv += (double)v[i] * g[ps->offset + i];
        const double e = 1e-2;
        memcpy(pp, p0, (size_t)P * 4);
        for (int64_t i = 0; i < ps->count; i++) pp[ps->offset + i] = (float)(p0[ps->offset + i] + e * v[i]);
        set_params(t, pp);
        double lp = summed_loss(t, x, y, logits);
        for (int64_t i = 0; i < ps->count; i++) pp[ps->offset + i] = (float)(p0[ps->offset + i] - e * v[i]);
        set_params(t, pp);
        double lm = summed_loss(t, x, y, logits);
        double fd = (lp - lm) / (2 * e) / counted;
        ck_assert_msg(fabs(fd - gv) <= 1e-4 + 0.02 * fabs(fd),
                      "%s: layer %d (%s, line %d) %s: finite difference %.6g, gradient %.6g", tu_name(tu_ctx[d]), li,
                      clt__layer_kind_name(l), l->line, ps->name, fd, gv);
        checked++;
        free(v);
      }
    }
    ck_assert_int_ge(checked, min_checked);
    free(p0), free(g), free(pp), free(logits);
    clt_trainer_destroy(t);
    clt_devices_destroy(one);
    clt_model_destroy(m);
  }
}

START_TEST(gpt_gradient_matches_finite_differences) { gradient_case(gpt_spec, 20); }
END_TEST

START_TEST(llama_gradient_matches_finite_differences) { gradient_case(llama_spec, 27); }
END_TEST

/* With dropout, in several runs: the same bits twice; nothing else moves;
 * and SGD at lr 1 without momentum or decay subtracts exactly this
 * gradient (its own is the same sums, scaled in float: a few ulps). */
START_TEST(gradient_is_what_a_step_applies) {
  enum { IN = 6, M = 5 };
  float x[M * IN];
  int32_t y[M] = {0, 3, CLT_IGNORE_LABEL, 1, 2};
  ref_random(x, M * IN, 3);
  for (int d = 0; d < tu_ndev; d++) {
    clt_model *m;
    clt_devices *one;
    clt_trainer *t = make_trainer(d, dropout_spec, CLT_OPT_SGD, &m, &one);
    int64_t P = clt_model_param_count(m);
    float *p0 = malloc((size_t)P * 4), *p1 = malloc((size_t)P * 4), *g = malloc((size_t)P * 4),
          *g2 = malloc((size_t)P * 4);
    ck_assert_int_eq(clt_trainer_params(t, p0, P), 0);
    double l1, l2;
    ck_assert_msg(clt_trainer_gradient(t, x, y, M, g, P, &l1) == 0, "%s", clt_last_error());
    ck_assert_msg(clt_trainer_gradient(t, x, y, M, g2, P, &l2) == 0, "%s", clt_last_error());
    ck_assert_msg(memcmp(g, g2, (size_t)P * 4) == 0 && l1 == l2, "%s: two calls differ", tu_name(tu_ctx[d]));
    ck_assert_int_eq(clt_trainer_params(t, p1, P), 0);
    ck_assert_int_eq(memcmp(p0, p1, (size_t)P * 4), 0);
    ck_assert_int_eq(clt_trainer_steps_done(t), 0);
    double gnorm = 0;
    for (int64_t i = 0; i < P; i++) gnorm += (double)g[i] * g[i];
    ck_assert(gnorm > 0);

    clt_step_result r;
    ck_assert_msg(clt_trainer_step(t, x, y, M, &r) == 0, "%s", clt_last_error());
    ck_assert_msg(fabs(r.loss - l1) <= 1e-6 * fabs(l1), "%s: the step's loss %.9g, the gradient's %.9g",
                  tu_name(tu_ctx[d]), r.loss, l1);
    ck_assert_int_eq(clt_trainer_params(t, p1, P), 0);
    double worst = 0, gmax = 0;
    for (int64_t i = 0; i < P; i++) {
      worst = fmax(worst, fabs((double)(p0[i] - p1[i]) - g[i]));
      gmax = fmax(gmax, fabs(g[i]));
    }
    /* p0 - p1 is rounded at the parameters' scale (~1: 6e-8) */
    ck_assert_msg(worst <= 1e-6 + 1e-5 * gmax, "%s: the step moved the parameters by the gradient +- %g (largest %g)",
                  tu_name(tu_ctx[d]), worst, gmax);
    free(p0), free(p1), free(g), free(g2);
    clt_trainer_destroy(t);
    clt_devices_destroy(one);
    clt_model_destroy(m);
  }
}
END_TEST

START_TEST(bad_arguments) {
  float x[N * T];
  int32_t y[N * T], ignored[N * T];
  for (int i = 0; i < N * T; i++) x[i] = (float)(i % VOCAB), y[i] = i % VOCAB, ignored[i] = CLT_IGNORE_LABEL;
  clt_model *m;
  clt_devices *one;
  clt_trainer *t = make_trainer(0, gpt_spec, CLT_OPT_ADAMW, &m, &one);
  int64_t P = clt_model_param_count(m);
  float *g = malloc((size_t)P * 4);
  for (int64_t i = 0; i < P; i++) g[i] = 42.0f;
  double loss = 7;
  ck_assert_int_eq(clt_trainer_gradient(NULL, x, y, N, g, P, &loss), CLT_EINVAL);
  ck_assert_int_eq(clt_trainer_gradient(t, x, y, 0, g, P, &loss), CLT_EINVAL);
  ck_assert_int_eq(clt_trainer_gradient(t, NULL, y, N, g, P, &loss), CLT_EINVAL);
  ck_assert_int_eq(clt_trainer_gradient(t, x, NULL, N, g, P, &loss), CLT_EINVAL);
  ck_assert_int_eq(clt_trainer_gradient(t, x, y, N, NULL, P, &loss), CLT_EINVAL);
  ck_assert_int_eq(clt_trainer_gradient(t, x, y, N, g, P - 1, &loss), CLT_ESHAPE);
  char want[64];
  snprintf(want, sizeof want, "holds %lld floats", (long long)P - 1);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), want));
  y[7] = VOCAB;
  ck_assert_int_eq(clt_trainer_gradient(t, x, y, N, g, P, &loss), CLT_EINVAL);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "label 7 (of sample 1) is 11"));
  y[7] = -1;
  ck_assert_int_eq(clt_trainer_gradient(t, x, y, N, g, P, &loss), CLT_EINVAL);
  ck_assert_int_eq(clt_trainer_gradient(t, x, ignored, N, g, P, &loss), CLT_EINVAL);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "every label is CLT_IGNORE_LABEL"));
  for (int64_t i = 0; i < P; i++) ck_assert(g[i] == 42.0f);
  ck_assert(loss == 7);
  /* and after all that, a good call works; loss may be NULL */
  y[7] = 0;
  ck_assert_msg(clt_trainer_gradient(t, x, y, N, g, P, NULL) == 0, "%s", clt_last_error());
  free(g);
  clt_trainer_destroy(t);
  clt_devices_destroy(one);
  clt_model_destroy(m);
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *su = suite_create("gradient");
  TCase *tc = tcase_create("gradient");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, gpt_gradient_matches_finite_differences);
  tcase_add_test(tc, llama_gradient_matches_finite_differences);
  tcase_add_test(tc, gradient_is_what_a_step_applies);
  tcase_add_test(tc, bad_arguments);
  suite_add_tcase(su, tc);
  rc = tu_run(su);
  tu_teardown();
  return rc;
}
