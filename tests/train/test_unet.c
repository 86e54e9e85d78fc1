/*
 * test_unet.c: a U-Net-shaped model (tests/train/unet_small.model: conv2d,
 * max pooling, three nested save/concat skips, groupnorm) through
 * clt_trainer_gradient on every device (PoCL and rusticl): the gradient of
 * the mean loss along a random direction inside every parameter tensor
 * against central finite differences of clt_trainer_forward's summed
 * loss, over more samples than one batch (several runs, accumulated); and
 * `residual NAME` adding a saved value likewise. The skip slots: one a
 * save pending at once (3 for the U-Net).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"
#include "ref/ref.h"
#include "testutil.h"

#ifndef SRCDIR
#define SRCDIR "."
#endif

/* a residual NAME over two levels, a flat concat and a flat groupnorm */
static const char *named_residual_spec = "input 6\n"
                                         "linear 8 act=tanh\n"
                                         "save a\n"
                                         "linear 8 act=tanh\n"
                                         "save b\n"
                                         "linear 8 act=tanh\n"
                                         "residual b\n"
                                         "concat a\n"
                                         "groupnorm 4\n"
                                         "linear 8 act=tanh\n"
                                         "residual a\n"
                                         "linear 3 init=he\n";

enum { N = 5, BATCH = 2, CLASSES = 3 };

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char *buf = calloc(1, 1 << 16);
  size_t n = fread(buf, 1, (1 << 16) - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

static double summed_loss(clt_trainer *t, const float *x, const int32_t *y, float *logits) {
  double sum;
  ck_assert_msg(clt_trainer_forward(t, x, y, N, logits, N * CLASSES, &sum) == 0, "%s", clt_last_error());
  return sum;
}

static void set_params(clt_trainer *t, const float *p) {
  clt_tensor view = clt__replica_params(t->s.rep[0]);
  ck_assert_int_eq(clt_tensor_upload(t->ctx[0], &view, p, (size_t)clt_model_param_count(t->model) * 4), 0);
}

/* As tests/train/test_gradient.c: e = 1e-2, the loss's float sums carry
 * ~1e-6 of rounding; 1e-4 + 2% separates that from a wrong gradient (a
 * skip's part dropped or added twice is off by its whole size). */
static void gradient_case(const char *text, int want_slots) {
  clt_model *m;
  ck_assert_msg(clt_model_parse(text, "t.model", &m) == 0, "%s", clt_last_error());
  const clt_model_spec *s = m->spec;
  ck_assert_int_eq(s->skip_slots, want_slots);
  int64_t in = clt_model_input_size(m), P = clt_model_param_count(m);
  float *x = malloc((size_t)(N * in) * 4);
  int32_t y[N];
  ref_random(x, (size_t)(N * in), 9);
  for (int i = 0; i < N; i++) y[i] = (i * 2 + 1) % CLASSES;
  for (int d = 0; d < tu_ndev; d++) {
    char spec[16];
    clt_devices *one;
    clt_trainer *t;
    snprintf(spec, sizeof spec, "%d", d);
    ck_assert_int_eq(clt_devices_select(tu_devices, spec, &one), 0);
    clt_train_options o;
    clt_train_options_defaults(&o);
    o.batch = BATCH;
    clt_optimizer_defaults(CLT_OPT_SGD, &o.optimizer);
    ck_assert_msg(clt_trainer_create(m, one, NULL, &o, &t) == 0, "%s", clt_last_error());
    float *p0 = malloc((size_t)P * 4), *g = malloc((size_t)P * 4), *pp = malloc((size_t)P * 4);
    float logits[N * CLASSES];
    ck_assert_int_eq(clt_trainer_params(t, p0, P), 0);
    double loss;
    ck_assert_msg(clt_trainer_gradient(t, x, y, N, g, P, &loss) == 0, "%s", clt_last_error());
    double sum = summed_loss(t, x, y, logits);
    ck_assert_msg(fabs(loss - sum / N) <= 1e-6 * fabs(loss), "%s: gradient's loss %.9g, forward's %.9g / %d",
                  tu_name(tu_ctx[d]), loss, sum, N);
    int checked = 0;
    for (int li = 1; li < s->nlayers; li++) {
      const clt_layer_spec *l = &s->layers[li];
      for (int k = 0; k < l->nparams; k++) {
        const clt_param_spec *ps = &l->param[k];
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
        double fd = (lp - lm) / (2 * e) / N;
        ck_assert_msg(fabs(fd - gv) <= 1e-4 + 0.02 * fabs(fd),
                      "%s: layer %d (%s, line %d) %s: finite difference %.6g, gradient %.6g", tu_name(tu_ctx[d]), li,
                      clt__layer_kind_name(l), l->line, ps->name, fd, gv);
        checked += fabs(gv) > 1e-6; /* a tensor whose gradient is 0 would pass unseen */
        free(v);
      }
    }
    int tensors = 0;
    for (int li = 1; li < s->nlayers; li++) tensors += s->layers[li].nparams;
    ck_assert_msg(checked == tensors, "%s: %d of %d tensors have a gradient", tu_name(tu_ctx[d]), checked, tensors);
    free(p0), free(g), free(pp);
    clt_trainer_destroy(t);
    clt_devices_destroy(one);
  }
  free(x);
  clt_model_destroy(m);
}

START_TEST(unet_gradient_matches_finite_differences) {
  char *text = read_text(SRCDIR "/tests/train/unet_small.model");
  gradient_case(text, 3);
  free(text);
}
END_TEST

START_TEST(named_residual_gradient_matches_finite_differences) { gradient_case(named_residual_spec, 3); }
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *su = suite_create("unet");
  TCase *tc = tcase_create("unet");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, unet_gradient_matches_finite_differences);
  tcase_add_test(tc, named_residual_gradient_matches_finite_differences);
  suite_add_tcase(su, tc);
  rc = tu_run(su);
  tu_teardown();
  return rc;
}
