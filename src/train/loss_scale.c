/*
 * loss_scale.c: fp16's dynamic loss scaling (and fp32's refusal of a
 * gradient that is not finite). The backward starts from the loss times
 * the scale, so that small gradients survive f16; the update divides it
 * out. Every rank holds the same summed gradient (an inf or NaN on any
 * rank reaches it), so every rank decides alike: skip the step and halve
 * the scale when it overflowed, double it after a window of clean steps,
 * give up after max_skips skips in a row.
 */
#include "train/trainer.h"

#include <math.h>

void clt__scaler_init(clt_trainer *t) {
  t->scaler.scale = t->opts.precision == CLT_F16 ? t->opts.loss_scale : 1.0;
  t->scaler.clean_steps = t->scaler.in_row = t->scaler.skipped = 0;
}

/* fp32: the gradient is not finite; name the layer where that starts when
 * the strategy can tell. */
static int nonfinite(clt_trainer *t) {
  const clt_model_spec *s = t->s.local->spec;
  int i = t->s.i->nonfinite_layer ? t->s.i->nonfinite_layer(t->s.self) : -1;
  if (i < 1)
    return clt__error(CLT_ENONFINITE, "the gradient is not finite (inf or NaN); lower the learning rate or clip "
                      "gradients (--clip)");
  const clt_layer_spec *l = &s->layers[i];
  return clt__error(CLT_ENONFINITE, "the gradient of %s:%d (%s) is not finite (inf or NaN); lower the learning "
                    "rate (%g) or clip gradients (--clip)", s->name, l->line, clt__layer_kind_name(l),
                    clt_schedule_lr(&t->opts.schedule, t->steps_done));
}

int clt__scaler_nonfinite(clt_trainer *t, int *skip) {
  clt__loss_scaler *c = &t->scaler;
  *skip = 0;
  if (t->opts.precision != CLT_F16) return nonfinite(t);
  *skip = 1;
  c->skipped++;
  c->in_row++;
  c->clean_steps = 0;
  double was = c->scale;
  if (c->scale > 1) c->scale /= 2;
  clt__log(CLT_LOG_INFO, "step %lld: the f16 gradient is not finite at loss scale %g: step skipped, scale now %g",
           (long long)t->steps_done + 1, was, c->scale);
  if (c->in_row >= t->opts.max_skips)
    return clt__error(CLT_ENONFINITE, "step %lld: the f16 gradient was not finite %lld steps in a row, down to loss "
                      "scale %g: the values overflow f16 itself; train with --precision fp32, or lower the learning "
                      "rate (%g)", (long long)t->steps_done + 1, (long long)c->in_row, was,
                      clt_schedule_lr(&t->opts.schedule, t->steps_done));
  t->steps_done++;
  return CLT_OK;
}

void clt__scaler_unscale(clt_trainer *t, float *scale, float *ss, int64_t labels) {
  clt__loss_scaler *c = &t->scaler;
  if (t->opts.precision != CLT_F16) return;
  c->in_row = 0;
  *scale = (float)(1.0 / ((double)labels * c->scale));
  *ss = (float)((double)*ss / (c->scale * c->scale));
  if (++c->clean_steps >= t->opts.loss_scale_window && c->scale * 2 <= 1e30) {
    c->scale *= 2;
    c->clean_steps = 0;
  }
}
