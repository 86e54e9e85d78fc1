/*
 * forward.c: clt_trainer_forward, the model's output for given inputs: the
 * forward pass of the trainer's first local replica in evaluation mode, its
 * last layer read back. What checks against another framework (transformers'
 * logits, tests/hf_check.py) and inference need; training never calls it.
 */
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>

int clt_trainer_forward(clt_trainer *t, const float *x, const int32_t *y, int64_t n, float *out, int64_t count,
                        double *loss) {
  int rc = CLT_OK;
  const clt_model_spec *s = t->model->spec;
  int64_t in = clt_model_input_size(t->model), B = t->micro_batch;
  int64_t labels = s->labels_per_sample, outs = labels * s->num_classes;
  int32_t *zeros = NULL;
  double sum = 0;
  if (!x || !out || n < 1)
    return clt__error(CLT_EINVAL, "clt_trainer_forward needs inputs, an output buffer and n >= 1 (n = %lld)",
                      (long long)n);
  if (t->nlocal < 1) return clt__error(CLT_EINVAL, "clt_trainer_forward: this rank has no replica");
  if (count < n * outs)
    return clt__error(CLT_ESHAPE, "clt_trainer_forward: %lld samples give %lld x %lld outputs but the buffer holds "
                      "%lld floats", (long long)n, (long long)n, (long long)outs, (long long)count);
  /* Without labels the loss is computed against class 0 and not reported. */
  if (!y && !(zeros = clt__calloc((size_t)(B * labels), sizeof *zeros))) return CLT_ENOMEM;
  for (int64_t at = 0; at < n; at += B) {
    int64_t m = n - at < B ? n - at : B;
    clt__pass pass = {.train = 0, .global_first = at, .logits = out + at * outs};
    float l;
    int32_t c;
    CLT_TRY(clt__replica_run(t->rep[0], x + at * in, y ? y + at * labels : zeros, m, &pass));
    CLT_TRY(clt__replica_read_loss(t->rep[0], &l, &c));
    sum += l;
  }
  if (loss) *loss = y ? sum : NAN;
fail:
  free(zeros);
  return rc;
}
