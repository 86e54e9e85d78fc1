/*
 * test_model.c: whole models through the layer table and a replica, on
 * every device: the gradient of the summed loss with respect to every
 * parameter tensor against central finite differences of the forward
 * pass, for a small GPT (token and position embeddings, two blocks of
 * layernorm, causal attention and a GELU MLP with residuals, the output
 * projection tied to the embedding) and an MLP of residual blocks; and the
 * same gradient in f16 activation storage within half's rounding.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layer.h"
#include "model/model.h"
#include "model/replica.h"
#include "ref/ref.h"
#include "testutil.h"

static const char *gpt_spec = "input tokens 6 vocab=13\n"
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
                              "linear 13 tie=wte bias=false\n";

static const char *mlp_spec = "input 10\n"
                              "linear 12\n"
                              "block repeat=2\n"
                              "  tanh\n"
                              "  linear 12\n"
                              "  residual\n"
                              "end\n"
                              "layernorm\n"
                              "linear 5\n";

#define B 3

typedef struct fixture {
  clt_model_spec *spec;
  clt__replica *r;
  float *x;
  int32_t *y;
  int64_t P;
} fixture;

static void setup_model(clt_context *ctx, const char *text, clt_dtype dt, fixture *f) {
  ck_assert_msg(clt__spec_parse(text, "t.model", &f->spec) == 0, "%s", clt_last_error());
  const clt_model_spec *s = f->spec;
  f->P = s->param_count;
  float *params = malloc((size_t)f->P * 4);
  clt__model_init_params(s, 7, params);
  ck_assert_msg(clt__replica_create(ctx, s, B, 0, dt, params, &f->r) == 0, "%s", clt_last_error());
  free(params);
  int64_t in = clt__shape_numel(&s->layers[0].out_shape), labels = B * s->labels_per_sample;
  f->x = malloc((size_t)(B * in) * 4);
  f->y = malloc((size_t)labels * 4);
  int vocab = s->layers[0].out_shape.vocab;
  float *noise = malloc((size_t)(B * in) * 4);
  ref_random(noise, (size_t)(B * in), 5);
  for (int64_t i = 0; i < B * in; i++) /* tokens repeat, so the embedding's scatter adds */
    f->x[i] = vocab ? (float)((i * 7 + i / 5) % 5 * 2) : noise[i];
  for (int64_t i = 0; i < labels; i++) f->y[i] = (int32_t)((i * 5 + 3) % s->num_classes);
  free(noise);
}

static void teardown_model(fixture *f) {
  clt__replica_destroy(f->r);
  clt__spec_destroy(f->spec);
  free(f->x), free(f->y);
}

static double loss_at(fixture *f, const float *params) {
  clt_tensor p = clt__replica_params(f->r);
  ck_assert_int_eq(clt_tensor_upload(f->r->ctx, &p, params, (size_t)f->P * 4), 0);
  clt__pass pass = {0};
  ck_assert_msg(clt__replica_run(f->r, f->x, f->y, B, &pass) == 0, "%s", clt_last_error());
  float loss;
  int32_t correct;
  ck_assert_int_eq(clt__replica_read_loss(f->r, &loss, &correct), 0);
  return loss;
}

static void gradient_at(fixture *f, const float *params, float *grad) {
  clt_tensor p = clt__replica_params(f->r), g = clt__replica_grads(f->r);
  ck_assert_int_eq(clt_tensor_upload(f->r->ctx, &p, params, (size_t)f->P * 4), 0);
  ck_assert_int_eq(clt__replica_zero_grads(f->r), 0);
  clt__pass pass = {.train = 1};
  ck_assert_msg(clt__replica_run(f->r, f->x, f->y, B, &pass) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_tensor_download(f->r->ctx, &g, grad, (size_t)f->P * 4), 0);
}

/* For every parameter tensor, the derivative of the loss along a random
 * direction inside it: (L(p + e v) - L(p - e v)) / 2e against g . v. The
 * loss is a float sum of ~18 terms (about 1e-6 of rounding), so with e =
 * 1e-2 the difference quotient carries ~1e-4 of noise besides its O(e^2)
 * error; 1e-3 + 2% separates that from a wrong gradient, which is off by
 * the size of the derivative itself. */
static void check_gradients(clt_context *ctx, const char *text, const char *what) {
  fixture f;
  setup_model(ctx, text, CLT_F32, &f);
  float *p0 = malloc((size_t)f.P * 4), *g = malloc((size_t)f.P * 4), *pp = malloc((size_t)f.P * 4);
  clt__model_init_params(f.spec, 7, p0);
  gradient_at(&f, p0, g);
  int checked = 0;
  for (int li = 0; li < f.spec->nlayers; li++) {
    const clt_layer_spec *l = &f.spec->layers[li];
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
      memcpy(pp, p0, (size_t)f.P * 4);
      for (int64_t i = 0; i < ps->count; i++) pp[ps->offset + i] = (float)(p0[ps->offset + i] + e * v[i]);
      double lp = loss_at(&f, pp);
      for (int64_t i = 0; i < ps->count; i++) pp[ps->offset + i] = (float)(p0[ps->offset + i] - e * v[i]);
      double lm = loss_at(&f, pp);
      double fd = (lp - lm) / (2 * e);
      ck_assert_msg(fabs(fd - gv) <= 1e-3 + 0.02 * fabs(fd),
                    "%s on %s: layer %d (%s line %d) %s: finite difference %.6g, gradient %.6g", what, tu_name(ctx),
                    li, l->kind->name, l->line, ps->name, fd, gv);
      checked++;
      free(v);
    }
  }
  ck_assert_int_gt(checked, 5);
  free(p0), free(g), free(pp);
  teardown_model(&f);
}

START_TEST(gpt_gradients_match_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) check_gradients(tu_ctx[d], gpt_spec, "gpt");
}
END_TEST

START_TEST(residual_mlp_gradients_match_finite_differences) {
  for (int d = 0; d < tu_ndev; d++) check_gradients(tu_ctx[d], mlp_spec, "residual mlp");
}
END_TEST

/* f16 activation storage: the same loss and gradient as f32 within what
 * rounding every stored activation to half (2^-11 relative) does over ~20
 * layers: a few parts in 1e3 of the largest gradient. */
START_TEST(gpt_f16_close_to_f32) {
  for (int d = 0; d < tu_ndev; d++) {
    fixture a, h;
    setup_model(tu_ctx[d], gpt_spec, CLT_F32, &a);
    setup_model(tu_ctx[d], gpt_spec, CLT_F16, &h);
    float *p0 = malloc((size_t)a.P * 4), *ga = malloc((size_t)a.P * 4), *gh = malloc((size_t)a.P * 4);
    clt__model_init_params(a.spec, 7, p0);
    double la = loss_at(&a, p0), lh = loss_at(&h, p0);
    ck_assert_msg(fabs(la - lh) <= 2e-3 * fabs(la), "f16 loss %g against f32 %g on %s", lh, la, tu_name(tu_ctx[d]));
    gradient_at(&a, p0, ga);
    gradient_at(&h, p0, gh);
    double gmax = 0, diff = 0;
    for (int64_t i = 0; i < a.P; i++) {
      gmax = fmax(gmax, fabs(ga[i]));
      diff = fmax(diff, fabs(ga[i] - gh[i]));
    }
    ck_assert_msg(diff <= 1e-2 * gmax, "f16 gradient differs by %g (largest %g) on %s", diff, gmax,
                  tu_name(tu_ctx[d]));
    free(p0), free(ga), free(gh);
    teardown_model(&a);
    teardown_model(&h);
  }
}
END_TEST

/* The token embedding's scatter-add and everything after it give the same
 * bits on every run. */
START_TEST(gpt_gradient_is_deterministic) {
  for (int d = 0; d < tu_ndev; d++) {
    fixture f;
    setup_model(tu_ctx[d], gpt_spec, CLT_F32, &f);
    float *p0 = malloc((size_t)f.P * 4), *g1 = malloc((size_t)f.P * 4), *g2 = malloc((size_t)f.P * 4);
    clt__model_init_params(f.spec, 7, p0);
    gradient_at(&f, p0, g1);
    gradient_at(&f, p0, g2);
    ck_assert_msg(memcmp(g1, g2, (size_t)f.P * 4) == 0, "two runs differ in bits on %s", tu_name(tu_ctx[d]));
    free(p0), free(g1), free(g2);
    teardown_model(&f);
  }
}
END_TEST

/* A device that never finishes (its queue held by a user event that is
 * never set): reading the loss ends after the replica's timeout with
 * CLT_ETIMEDOUT naming the device and what was waited for, instead of
 * blocking for ever; then destroying the replica waits for it no longer
 * than that either. The gate is opened at the end so the queue drains. */
START_TEST(a_hung_device_times_out) {
  clt_context *ctx = tu_ctx[0];
  fixture f;
  setup_model(ctx, mlp_spec, CLT_F32, &f);
  clt__replica_set_timeout(f.r, 1);
  cl_int e;
  cl_event gate = clCreateUserEvent(ctx->context, &e);
  ck_assert_int_eq(e, CL_SUCCESS);
  ck_assert_int_eq(clEnqueueMarkerWithWaitList(ctx->queue, 1, &gate, NULL), CL_SUCCESS);
  clt__pass pass = {.train = 1, .record = 1};
  /* A device whose GEMMs run on the host (src/blas_host.c) waits for its
   * queue inside the run, at its first GEMM, as long as the replica's
   * timeout; others time out reading the loss. */
  double t0 = clt__now();
  int rc = clt__replica_run(f.r, f.x, f.y, B, &pass), in_run = rc != 0;
  float loss;
  int32_t correct;
  if (!in_run) rc = clt__replica_read_loss(f.r, &loss, &correct);
  double took = clt__now() - t0;
  fprintf(stderr, "a device that never finishes: %s (after %.1f s)\n", clt_last_error(), took);
  ck_assert_msg(rc == CLT_ETIMEDOUT, "%s: %s", clt_status_name(rc), clt_last_error());
  ck_assert_msg(strstr(clt_last_error(), "has not finished after 1 s") && strstr(clt_last_error(), ctx->info.name) &&
                    strstr(clt_last_error(), in_run ? "the work queued before a host GEMM"
                                                    : "the forward and backward pass"),
                "%s", clt_last_error());
  ck_assert_msg(in_run == clt__host_blas_use(ctx), "timed out %s the run on %s", in_run ? "in" : "after",
                tu_name(ctx));
  ck_assert_msg(took < 10, "the timeout of 1 s took %.1f s", took);
  /* The step's time is unknown rather than waited for. */
  ck_assert(clt__replica_run_time(f.r) == 0);
  clSetUserEventStatus(gate, CL_COMPLETE);
  clFinish(ctx->queue);
  clReleaseEvent(gate);
  teardown_model(&f);
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("model");
  TCase *tc = tcase_create("model");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, gpt_gradients_match_finite_differences);
  tcase_add_test(tc, residual_mlp_gradients_match_finite_differences);
  tcase_add_test(tc, gpt_f16_close_to_f32);
  tcase_add_test(tc, gpt_gradient_is_deterministic);
  tcase_add_test(tc, a_hung_device_times_out);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
