/*
 * forward.c: clt_trainer_forward (and _targets, for a regression model),
 * the model's output for given inputs: the forward pass of the trainer's
 * first local replica in evaluation mode, its last layer read back; and
 * clt_trainer_gradient (and _targets), the same replica's gradient of the mean loss on
 * given samples, without an update. What checks against another framework
 * (transformers' logits, tests/io/hf_check.py; PyTorch's gradients,
 * tests/train/torch_check.py) and inference need; training never calls them.
 */
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The forward of either entry point: labels y (a classifier) or float
 * targets (a regression model), or neither (the output alone). */
static int forward_raw(clt_trainer *t, const char *fn, const float *x, const int32_t *y, const float *targets,
                       int64_t n, float *out, int64_t count, double *loss, double *sq_error);

/* The caller's x normalised first when the trainer has a normalisation. */
static int forward_on(clt_trainer *t, const char *fn, const float *x, const int32_t *y, const float *targets,
                      int64_t n, float *out, int64_t count, double *loss, double *sq_error) {
  const float *use = x;
  float *copy = NULL;
  int rc = t ? clt__trainer_norm_input(t, x, n, &use, &copy) : CLT_OK;
  if (rc == CLT_OK) rc = forward_raw(t, fn, use, y, targets, n, out, count, loss, sq_error);
  free(copy);
  return rc;
}

static int forward_raw(clt_trainer *t, const char *fn, const float *x, const int32_t *y, const float *targets,
                       int64_t n, float *out, int64_t count, double *loss, double *sq_error) {
  int rc = CLT_OK;
  clt__replica *r = NULL;
  if (!t) return clt__null_arg(fn, "t", "trainer");
  if (!x) return clt__null_arg(fn, "x", NULL);
  if (!out) return clt__null_arg(fn, "out", NULL);
  const clt_model_spec *s = t->model->spec;
  int regression = s->loss != CLT_LOSS_CROSSENTROPY;
  int64_t in = clt_model_input_size(t->model), B = t->s.room;
  int64_t labels = s->labels_per_sample, outs = regression ? labels : labels * s->num_classes;
  void *zeros = NULL;
  double sum = 0, sq = 0;
  if (n < 1) return clt__error(CLT_EINVAL, "%s: n is %lld; give 1 or more samples", fn, (long long)n);
  if (t->nlocal < 1) return clt__error(CLT_EINVAL, "%s: this rank has no replica", fn);
  if ((rc = t->s.i->whole_replica(t->s.self, 0, &r)) < 0) return clt__error_prefix(rc, "%s", fn);
  if (regression && y)
    return clt__error(CLT_EINVAL, "%s: y is int32 labels, but the model is a regression model (loss %s) and takes "
                      "float targets: call clt_trainer_forward_targets", fn, clt_loss_name((clt_loss_kind)s->loss));
  if (!regression && targets)
    return clt__error(CLT_EINVAL, "%s: targets are float values, but the model is a classifier (loss crossentropy) "
                      "and takes int32 labels: call clt_trainer_forward", fn);
  if (count < n * outs)
    return clt__error(CLT_ESHAPE, "%s: %lld samples give %lld x %lld outputs but the buffer holds %lld floats", fn,
                      (long long)n, (long long)n, (long long)outs, (long long)count);
  for (int64_t k = 0; targets && k < n * labels; k++)
    if (!isfinite(targets[k]))
      return clt__error(CLT_EINVAL, "%s: target %lld (value %lld of sample %lld) is %g; targets must be finite", fn,
                        (long long)k, (long long)(k % labels), (long long)(k / labels), (double)targets[k]);
  /* Without labels or targets the loss is computed against class 0 (or
   * targets of 0) and not reported. */
  int given = regression ? targets != NULL : y != NULL;
  if (!given && !(zeros = clt__calloc((size_t)(B * labels), 4))) return CLT_ENOMEM;
  for (int64_t at = 0; at < n; at += B) {
    int64_t m = n - at < B ? n - at : B;
    clt__pass pass = {.train = 0, .global_first = at, .logits = out + at * outs};
    const int32_t *ly = NULL;
    if (regression) pass.targets = targets ? targets + at * labels : zeros;
    else ly = y ? y + at * labels : zeros;
    float l;
    double c;
    CLT_TRY(clt__replica_run(r, x + at * in, ly, m, &pass));
    CLT_TRY(clt__replica_read_loss(r, &l, &c));
    sum += l;
    sq += c;
  }
  if (loss) *loss = given ? sum : NAN;
  if (sq_error) *sq_error = given && regression ? sq : NAN;
fail:
  free(zeros);
  return rc;
}

int clt_trainer_forward(clt_trainer *t, const float *x, const int32_t *y, int64_t n, float *out, int64_t count,
                        double *loss) {
  return forward_on(t, "clt_trainer_forward", x, y, NULL, n, out, count, loss, NULL);
}

int clt_trainer_forward_targets(clt_trainer *t, const float *x, const float *targets, int64_t n, float *out,
                                int64_t count, double *loss, double *sq_error) {
  return forward_on(t, "clt_trainer_forward_targets", x, NULL, targets, n, out, count, loss, sq_error);
}

/* The gradient's input: CLT_OK, or CLT_EINVAL naming what is wrong; the
 * labels that count (or target values) into *counted. Labels y for a
 * classifier, targets for a regression model. */
static int check_gradient_args(const clt_trainer *t, const char *fn, const float *x, const int32_t *y,
                               const float *targets, int64_t n, const float *grad, int64_t count, int64_t *counted) {
  int64_t P = clt_model_param_count(t->model), lps = clt_model_labels_per_sample(t->model);
  int64_t C = clt_model_num_classes(t->model);
  int regression = clt_model_loss(t->model) != CLT_LOSS_CROSSENTROPY;
  if (!x) return clt__null_arg(fn, "x", NULL);
  if (!y && !targets) return clt__null_arg(fn, strstr(fn, "_targets") ? "targets" : "y", NULL);
  if (!grad) return clt__null_arg(fn, "grad", NULL);
  if (n < 1) return clt__error(CLT_EINVAL, "%s: n is %lld; give 1 or more samples", fn, (long long)n);
  if (t->nlocal < 1) return clt__error(CLT_EINVAL, "%s: this rank has no replica", fn);
  if (regression && y)
    return clt__error(CLT_EINVAL, "%s: y is int32 labels, but the model is a regression model (loss %s) and takes "
                      "float targets: call clt_trainer_gradient_targets", fn, clt_loss_name(clt_model_loss(t->model)));
  if (!regression && targets)
    return clt__error(CLT_EINVAL, "%s: targets are float values, but the model is a classifier (loss crossentropy) "
                      "and takes int32 labels: call clt_trainer_gradient", fn);
  if (count < P)
    return clt__error(CLT_ESHAPE, "%s: the model has %lld parameters but the buffer holds %lld floats", fn,
                      (long long)P, (long long)count);
  *counted = 0;
  for (int64_t k = 0; regression && k < n * lps; k++, ++*counted)
    if (!isfinite(targets[k]))
      return clt__error(CLT_EINVAL, "%s: target %lld (value %lld of sample %lld) is %g; targets must be finite", fn,
                        (long long)k, (long long)(k % lps), (long long)(k / lps), (double)targets[k]);
  for (int64_t k = 0; !regression && k < n * lps; k++) {
    if (y[k] == CLT_IGNORE_LABEL) continue;
    if (y[k] < 0 || y[k] >= C)
      return clt__error(CLT_EINVAL, "%s: label %lld (of sample %lld) is %d, but the model has %lld classes (0 to "
                        "%lld, or CLT_IGNORE_LABEL)", fn, (long long)k, (long long)(k / lps), (int)y[k], (long long)C,
                        (long long)C - 1);
    ++*counted;
  }
  if (*counted == 0)
    return clt__error(CLT_EINVAL, "%s: every label is CLT_IGNORE_LABEL; the mean needs at least one that counts", fn);
  return CLT_OK;
}

/* The gradient of either entry point: labels y or float targets. */
static int gradient_raw(clt_trainer *t, const char *fn, const float *x, const int32_t *y, const float *targets,
                        int64_t n, float *grad, int64_t count, double *loss);

/* The caller's x normalised first when the trainer has a normalisation. */
static int gradient_on(clt_trainer *t, const char *fn, const float *x, const int32_t *y, const float *targets,
                       int64_t n, float *grad, int64_t count, double *loss) {
  const float *use = x;
  float *copy = NULL;
  int rc = t ? clt__trainer_norm_input(t, x, n, &use, &copy) : CLT_OK;
  if (rc == CLT_OK) rc = gradient_raw(t, fn, use, y, targets, n, grad, count, loss);
  free(copy);
  return rc;
}

static int gradient_raw(clt_trainer *t, const char *fn, const float *x, const int32_t *y, const float *targets,
                        int64_t n, float *grad, int64_t count, double *loss) {
  int rc = CLT_OK;
  clt__replica *r = NULL;
  if (!t) return clt__null_arg(fn, "t", "trainer");
  int64_t in = clt_model_input_size(t->model), lps = clt_model_labels_per_sample(t->model);
  int64_t P = clt_model_param_count(t->model), B = t->s.room, labels = 0;
  double sum = 0;
  if ((rc = check_gradient_args(t, fn, x, y, targets, n, grad, count, &labels)) < 0) return rc;
  if ((rc = t->s.i->whole_replica(t->s.self, 1, &r)) < 0) return clt__error_prefix(rc, "%s", fn);

  /* The backward accumulates the gradient of the SUMMED loss (scaled by the
   * loss scale in f16) over the runs; one division makes it the mean. */
  CLT_TRY(clt__replica_zero_grads(r));
  for (int64_t at = 0; at < n; at += B) {
    int64_t m = n - at < B ? n - at : B;
    /* Dropout draws the masks the next clt_trainer_step would draw for the
     * same samples on one replica (it keys them by the same step). */
    clt__pass pass = {.train = 1, .seed = t->opts.seed, .step = (uint64_t)t->micro_steps, .global_first = at,
                      .loss_scale = (float)t->scaler.scale, .targets = targets ? targets + at * lps : NULL};
    float l;
    double c;
    CLT_TRY(clt__replica_run(r, x + at * in, y ? y + at * lps : NULL, m, &pass));
    CLT_TRY(clt__replica_read_loss(r, &l, &c));
    sum += l;
  }
  clt_tensor g = clt__replica_grads(r);
  CLT_TRY(clt_tensor_download(clt__replica_context(r), &g, grad, (size_t)P * sizeof *grad));
  double scale = 1.0 / ((double)labels * t->scaler.scale);
  for (int64_t i = 0; i < P; i++) grad[i] = (float)(grad[i] * scale);
  if (loss) *loss = sum / (double)labels;
fail:
  /* A step zeroes the gradients itself; zeroing here too leaves nothing of
   * this call behind for anything that reads them before then. */
  if (rc == CLT_OK) rc = clt__replica_zero_grads(r);
  else (void)clt__replica_zero_grads(r);
  return rc < 0 ? clt__error_prefix(rc, "%s", fn) : rc;
}

int clt_trainer_gradient(clt_trainer *t, const float *x, const int32_t *y, int64_t n, float *grad, int64_t count,
                         double *loss) {
  return gradient_on(t, "clt_trainer_gradient", x, y, NULL, n, grad, count, loss);
}

int clt_trainer_gradient_targets(clt_trainer *t, const float *x, const float *targets, int64_t n, float *grad,
                                 int64_t count, double *loss) {
  return gradient_on(t, "clt_trainer_gradient_targets", x, NULL, targets, n, grad, count, loss);
}
