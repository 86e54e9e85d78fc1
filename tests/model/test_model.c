/*
 * test_model.c: whole models through the layer table and a replica, on
 * every device: the gradient of the summed loss with respect to every
 * parameter tensor against central finite differences of the forward
 * pass, for a small GPT (token and position embeddings, two blocks of
 * layernorm, causal attention and a GELU MLP with residuals, the output
 * projection tied to the embedding), an MLP of residual blocks and a
 * regression MLP under MSE, L1 and Huber; and the same gradient in f16
 * activation storage within half's rounding.
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
                              "linear 5 init=he\n"; /* not the output layer's zeros: every gradient nonzero */

#define B 3

typedef struct fixture {
  clt_model_spec *spec;
  clt__replica *r;
  float *x;
  int32_t *y;   /* a classifier's labels, or NULL */
  float *t;     /* a regression model's targets, or NULL */
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
  if (s->loss != CLT_LOSS_CROSSENTROPY) { /* targets of the outputs' size */
    free(f->y), f->y = NULL;
    f->t = malloc((size_t)labels * 4);
    ref_random(f->t, (size_t)labels, 9);
    f->t[0] = 3.0f; /* beyond Huber's delta of the output, whatever the parameters */
  } else {
    f->t = NULL;
    for (int64_t i = 0; i < labels; i++) f->y[i] = (int32_t)((i * 5 + 3) % s->num_classes);
  }
  free(noise);
}

static void teardown_model(fixture *f) {
  clt__replica_destroy(f->r);
  clt__spec_destroy(f->spec);
  free(f->x), free(f->y), free(f->t);
}

static double loss_at(fixture *f, const float *params) {
  clt_tensor p = clt__replica_params(f->r);
  ck_assert_int_eq(clt_tensor_upload(f->r->ctx, &p, params, (size_t)f->P * 4), 0);
  clt__pass pass = {.targets = f->t};
  ck_assert_msg(clt__replica_run(f->r, f->x, f->y, B, &pass) == 0, "%s", clt_last_error());
  float loss;
  double correct;
  ck_assert_int_eq(clt__replica_read_loss(f->r, &loss, &correct), 0);
  return loss;
}

static void gradient_at(fixture *f, const float *params, float *grad) {
  clt_tensor p = clt__replica_params(f->r), g = clt__replica_grads(f->r);
  ck_assert_int_eq(clt_tensor_upload(f->r->ctx, &p, params, (size_t)f->P * 4), 0);
  ck_assert_int_eq(clt__replica_zero_grads(f->r), 0);
  clt__pass pass = {.train = 1, .targets = f->t};
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

/* Regression: an MLP whose output is 12 values, under each regression
 * loss (summing 3 x 12 terms: the same tolerance holds). L1 is piecewise
 * linear with kinks at d = 0 and Huber's second derivative jumps at |d| =
 * delta: a kink inside the step of 1e-2 would change one of the 36 terms'
 * difference quotients by up to its slope, and the fixed seeds keep every
 * d further than that from one (t[0] = 3 sits past delta). */
static const char *regress_spec = "input 8\n"
                                  "linear 16\n"
                                  "tanh\n"
                                  "linear 12\n"
                                  "layernorm\n"
                                  "linear 12\n";

START_TEST(regression_mlp_gradients_match_finite_differences) {
  static const char *const losses[] = {"loss mse\n", "loss l1\n", "loss huber delta=0.5\n"};
  char text[256];
  for (int d = 0; d < tu_ndev; d++)
    for (int k = 0; k < 3; k++) {
      snprintf(text, sizeof text, "%s%s", regress_spec, losses[k]);
      check_gradients(tu_ctx[d], text, losses[k]);
    }
}
END_TEST

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
  /* A device whose GEMMs run on the calling thread (src/core/blas_host.c,
   * rusticl) waits for its queue inside the run, at its first GEMM, as long
   * as the replica's timeout; others (GEMMs on the device, or native
   * kernels on its queue: PoCL) time out reading the loss. */
  double t0 = clt__now();
  int rc = clt__replica_run(f.r, f.x, f.y, B, &pass), in_run = rc != 0;
  float loss;
  double correct;
  if (!in_run) rc = clt__replica_read_loss(f.r, &loss, &correct);
  double took = clt__now() - t0;
  fprintf(stderr, "a device that never finishes: %s (after %.1f s)\n", clt_last_error(), took);
  ck_assert_msg(rc == CLT_ETIMEDOUT, "%s: %s", clt_status_name(rc), clt_last_error());
  ck_assert_msg(strstr(clt_last_error(), "has not finished after 1 s") && strstr(clt_last_error(), ctx->info.name) &&
                    strstr(clt_last_error(), in_run ? "the work queued before a host GEMM"
                                                    : "the forward and backward pass"),
                "%s", clt_last_error());
  int waits = clt__host_blas_use(ctx) && !clt__host_blas_native(ctx);
  ck_assert_msg(in_run == waits, "timed out %s the run on %s", in_run ? "in" : "after", tu_name(ctx));
  ck_assert_msg(took < 10, "the timeout of 1 s took %.1f s", took);
  /* The step's time is unknown rather than waited for. */
  ck_assert(clt__replica_run_time(f.r) == 0);
  clSetUserEventStatus(gate, CL_COMPLETE);
  clFinish(ctx->queue);
  clReleaseEvent(gate);
  teardown_model(&f);
}
END_TEST

/* What clt__replica_memory reports is what clt__replica_create allocates,
 * buffer for buffer (the context's shared scratch at least its share), for
 * a GPT, a residual MLP and a CNN, in f32 and f16: the check that refuses a
 * model before allocating counts the same bytes training takes (what data
 * parallelism adds, the f16 copy on the wire and ZeRO's pool, is checked
 * by tests/memory_report.sh). */
static const char *cnn_spec = "input 1 12 12\nconv2d 4 kernel=3 pad=1\nrelu\nmaxpool 2\nflatten\nlinear 16\nrelu\n"
                              "dropout 0.25\nlinear 10\n";

START_TEST(replica_memory_is_what_a_replica_allocates) {
  const char *specs[] = {gpt_spec, mlp_spec, cnn_spec};
  clt_context *ctx = tu_ctx[0];
  for (int k = 0; k < 3; k++)
    for (int h = 0; h < 2; h++) {
      clt_dtype dt = h ? CLT_F16 : CLT_F32;
      clt_model_spec *s;
      clt__replica *r;
      clt_replica_memory need;
      ck_assert_msg(clt__spec_parse(specs[k], "t.model", &s) == 0, "%s", clt_last_error());
      float *params = calloc((size_t)s->param_count, 4);
      ck_assert_msg(clt__replica_create(ctx, s, 7, 2, dt, params, &r) == 0, "%s", clt_last_error());
      clt__replica_memory(s, &r->cfg, &need);
      cl_mem bufs[] = {r->params,    r->grads,  r->state,  r->own.act, r->dbuf[0],      r->dbuf[1], r->own.aux,
                       r->workspace, r->labels, r->losses, r->scalars, r->own.input32, r->gscratch};
      uint64_t own = 0, largest = 0;
      for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        uint64_t b = bufs[i] ? clt_buffer_size(bufs[i]) : 0;
        own += b;
        if (b > largest && bufs[i] != r->labels && bufs[i] != r->losses) largest = b;
      }
      for (int j = 0; j < s->skip_slots; j++) own += clt_buffer_size(r->skip[j]);
      uint64_t ws = r->workspace ? clt_buffer_size(r->workspace) : 0, scratch = need.workspace - ws;
      ck_assert_msg(own + scratch == need.total, "spec %d %s: the replica's buffers hold %llu bytes (and %llu of "
                    "scratch), the need says %llu", k, clt_dtype_name(dt), (unsigned long long)own,
                    (unsigned long long)scratch, (unsigned long long)need.total);
      ck_assert(!scratch || (ctx->scratch && clt_buffer_size(ctx->scratch) >= scratch));
      ck_assert_msg(need.largest >= largest && need.largest > 0, "largest %llu against %llu",
                    (unsigned long long)need.largest, (unsigned long long)largest);
      ck_assert_uint_eq(need.parameters, (uint64_t)s->param_count * 4);
      ck_assert_uint_eq(need.optimizer_state, (uint64_t)s->param_count * 8);
      clt__replica_destroy(r);
      free(params);
      clt__spec_destroy(s);
    }
}
END_TEST

/* A sample's forward pass gives the same bits in any batch: alone, at
 * either end of a batch or inside one of any size. This is what makes N
 * replicas differ from one device only in the order of the gradient's sums
 * (test_dp; README, "Data parallelism: what is the same"): a GEMM that
 * chose its kernel or tiling by the batch and rounded a sample's values
 * differently would flip ReLUs and max-pool choices between them. The
 * example CNN's shapes (its im2col GEMMs span samples) and the GPT, on
 * every device whose GEMMs are CLBlast's: a CPU device's GEMMs on the host
 * BLAS (src/core/blas_host.c) are OpenBLAS's, which chooses its kernels (small-
 * matrix ones among them) by the matrices' sizes, and do not keep it
 * (run with CLT_HOST_BLAS=0 to check a CPU device). */
START_TEST(a_samples_forward_does_not_depend_on_its_batch) {
  const char *cnn28 = "input 1 28 28\nconv2d 32 kernel=3 pad=1\nrelu\nmaxpool 2\nconv2d 64 kernel=3 pad=1\nrelu\n"
                      "maxpool 2\nflatten\nlinear 128\nrelu\ndropout 0.25\nlinear 10 init=he\n"; /* scores not all 0 */
  const char *specs[] = {cnn28, gpt_spec};
  enum { N = 16 };
  for (int d = 0; d < tu_ndev; d++)
    for (int k = 0; k < 2; k++) {
      clt_model_spec *s;
      clt__replica *r;
      if (clt__host_blas_use(tu_ctx[d])) { /* OpenBLAS picks its kernels by the matrices' sizes */
        if (k == 0) fprintf(stderr, "%s: GEMMs on the host BLAS, batch independence not promised\n", tu_name(tu_ctx[d]));
        continue;
      }
      ck_assert_msg(clt__spec_parse(specs[k], "t.model", &s) == 0, "%s", clt_last_error());
      int64_t in = clt__shape_numel(&s->layers[0].out_shape), out = clt__shape_numel(&s->layers[s->nlayers - 1].out_shape);
      int vocab = s->layers[0].out_shape.vocab;
      float *params = malloc((size_t)s->param_count * 4), *x = malloc((size_t)(N * in) * 4);
      float *all = malloc((size_t)(N * out) * 4), *some = malloc((size_t)(N * out) * 4);
      int32_t *y = calloc((size_t)(N * s->labels_per_sample), 4);
      clt__model_init_params(s, 7, params);
      ref_random(x, (size_t)(N * in), 3);
      for (int64_t i = 0; vocab && i < N * in; i++) x[i] = (float)((i * 7 + i / 3) % vocab);
      ck_assert_msg(clt__replica_create(tu_ctx[d], s, N, 0, CLT_F32, params, &r) == 0, "%s", clt_last_error());
      clt__pass pass = {.train = 0, .logits = all};
      ck_assert_msg(clt__replica_run(r, x, y, N, &pass) == 0, "%s", clt_last_error());
      const int runs[][2] = {{0, 1}, {N - 1, 1}, {3, 5}, {1, N - 1}, {0, N / 2}, {N / 2, N / 2}};
      for (size_t j = 0; j < sizeof runs / sizeof runs[0]; j++) {
        int at = runs[j][0], n = runs[j][1];
        pass.logits = some;
        ck_assert_msg(clt__replica_run(r, x + at * in, y + at * s->labels_per_sample, n, &pass) == 0, "%s",
                      clt_last_error());
        ck_assert_msg(memcmp(some, all + at * out, (size_t)(n * out) * 4) == 0,
                      "%s on %s: samples %d..%d alone give other bits than in a batch of %d",
                      k ? "the GPT" : "the CNN", tu_name(tu_ctx[d]), at, at + n - 1, N);
      }
      clt__replica_destroy(r);
      free(params), free(x), free(all), free(some), free(y);
      clt__spec_destroy(s);
    }
}
END_TEST

/* The default initialisation (init=auto; README, "Initialisation"): He /
 * Kaiming uniform over fan_in, U(-g sqrt(3 / fan_in), +), with the gain g
 * of the activation that follows past pooling, flatten and dropout (ReLU
 * and GELU sqrt 2, leaky ReLU sqrt(2 / (1 + a^2)), tanh 5/3, sigmoid and
 * none 1); init=he keeps ReLU's whatever follows; biases and the output
 * layer start at zero, so the example CNN's first loss is ln 10 (it was
 * 3.88 with ReLU's gain on the output layer too). */
START_TEST(default_initialisation_takes_the_gain_of_what_follows) {
  const char *text = "input 1 8 8\n"
                     "conv2d 16 kernel=3 pad=1\nmaxpool 2\nrelu\nflatten\n" /* fan_in 9, ReLU past the pool */
                     "linear 16\nleakyrelu 0.2\n"                           /* fan_in 256 */
                     "linear 16\ntanh\n"
                     "linear 16 init=he\nsigmoid\n"
                     "linear 16\nsigmoid\n"
                     "linear 16\ngelu\n"
                     "linear 16\nlayernorm\ndropout 0.1\n"
                     "linear 10\n";
  const struct { int layer; double bound; } want[] = {
      {1, sqrt(2.0) * sqrt(3.0 / 9)}, {5, sqrt(2.0 / 1.04) * sqrt(3.0 / 256)}, {7, 5.0 / 3 * sqrt(3.0 / 16)},
      {9, sqrt(6.0 / 16)},            {11, sqrt(3.0 / 16)},                    {13, sqrt(6.0 / 16)},
      {15, sqrt(3.0 / 16)},           {18, 0}};
  clt_model_spec *s;
  ck_assert_msg(clt__spec_parse(text, "t.model", &s) == 0, "%s", clt_last_error());
  float *p = malloc((size_t)s->param_count * 4);
  clt__model_init_params(s, 7, p);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const clt_layer_spec *l = &s->layers[want[i].layer];
    ck_assert_int_eq(l->nparams, 2);
    const clt_param_spec *w = &l->param[0], *b = &l->param[1];
    double top = 0;
    for (int64_t k = 0; k < w->count; k++) top = fmax(top, fabs(p[w->offset + k]));
    /* 144 or more uniform draws: the largest is within 10% of the bound
     * (all below 0.9 of it: 0.9^144 = 3e-7) */
    ck_assert_msg(top <= want[i].bound && top >= 0.9 * want[i].bound, "%s (line %d): largest |weight| %g, bound %g",
                  l->kind->name, l->line, top, want[i].bound);
    for (int64_t k = 0; k < b->count; k++) ck_assert(p[b->offset + k] == 0.0f);
  }
  free(p);
  clt__spec_destroy(s);

  /* The example CNN's first loss: every score 0, ln 10 per sample. */
  const char *cnn28 = "input 1 28 28\nconv2d 32 kernel=3 pad=1\nrelu\nmaxpool 2\nconv2d 64 kernel=3 pad=1\nrelu\n"
                      "maxpool 2\nflatten\nlinear 128\nrelu\ndropout 0.25\nlinear 10\n";
  ck_assert_msg(clt__spec_parse(cnn28, "cnn.model", &s) == 0, "%s", clt_last_error());
  enum { N = 8 };
  clt__replica *r;
  float *params = malloc((size_t)s->param_count * 4), *x = malloc(N * 784 * 4), loss;
  int32_t y[N] = {0, 1, 2, 3, 4, 5, 6, 7};
  double correct;
  clt__model_init_params(s, 42, params);
  ref_random(x, N * 784, 9);
  ck_assert_msg(clt__replica_create(tu_ctx[0], s, N, 0, CLT_F32, params, &r) == 0, "%s", clt_last_error());
  clt__pass pass = {.train = 1, .seed = 42};
  ck_assert_msg(clt__replica_run(r, x, y, N, &pass) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt__replica_read_loss(r, &loss, &correct), 0);
  ck_assert_msg(fabs(loss / N - log(10.0)) < 1e-6, "the first loss is %.7f, not ln 10 = %.7f", loss / N, log(10.0));
  clt__replica_destroy(r);
  free(params), free(x);
  clt__spec_destroy(s);
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
  tcase_add_test(tc, regression_mlp_gradients_match_finite_differences);
  tcase_add_test(tc, gpt_f16_close_to_f32);
  tcase_add_test(tc, gpt_gradient_is_deterministic);
  tcase_add_test(tc, a_hung_device_times_out);
  tcase_add_test(tc, replica_memory_is_what_a_replica_allocates);
  tcase_add_test(tc, a_samples_forward_does_not_depend_on_its_batch);
  tcase_add_test(tc, default_initialisation_takes_the_gain_of_what_follows);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
