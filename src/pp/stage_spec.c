/*
 * stage.c: a pipeline stage of a model (src/pp): the contiguous layers
 * [lo, hi) of a spec as a spec of their own, so that a replica runs them
 * as a model. Its input line stands for layer lo - 1's output (the
 * activations the previous stage sends); its parameters are the whole
 * arena's floats [base, end), laid out from 0, so a rank holds only its
 * stage's parameters, gradients and optimizer state.
 *
 * A weight tied to a layer of another stage (GPT's output projection tied
 * to the token embedding of the first stage) gets a copy of its own after
 * the stage's parameters, as Megatron-LM does: both stages hold it, src/pp
 * sums the two gradients before every update, so both copies take the
 * same steps (and a checkpoint keeps the owner's).
 *
 * A cut must not separate a residual from the layer whose output it adds
 * (the skip branch would cross ranks): clt__spec_cut_ok says where one may
 * go.
 */
#include "core/internal.h"
#include "model/layer.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int clt__spec_cut_ok(const clt_model_spec *s, int c, char *why, size_t len) {
  if (c < 2 || c >= s->nlayers) {
    snprintf(why, len, "a stage boundary before layer %d: boundaries go between layers 1 and %d", c, s->nlayers - 1);
    return 0;
  }
  for (int j = c; j < s->nlayers; j++) {
    const clt_layer_spec *l = &s->layers[j];
    if (l->skip >= 0 && l->skip < c - 1) {
      snprintf(why, len, "a stage boundary before %s:%d (%s) cuts the %s branch from line %d to the "
               "%s at line %d: stages hold whole residual blocks and everything between a save and what reads it",
               s->name, s->layers[c].line, clt__layer_kind_name(&s->layers[c]),
               l->skip_name[0] ? "skip" : "residual", s->layers[l->skip].line, clt__layer_kind_name(l), l->line);
      return 0;
    }
  }
  return 1;
}

int clt__spec_stage(const clt_model_spec *s, int lo, int hi, clt_model_spec **out, int64_t *base_out) {
  int rc = CLT_OK;
  char why[512];
  *out = NULL;
  if (lo < 1 || hi > s->nlayers || lo >= hi)
    return clt__error(CLT_EINVAL, "%s: a stage of layers %d to %d of %d", s->name, lo, hi - 1, s->nlayers - 1);
  if (lo > 1 && !clt__spec_cut_ok(s, lo, why, sizeof why)) return clt__error(CLT_EINVAL, "%s", why);
  if (hi < s->nlayers && !clt__spec_cut_ok(s, hi, why, sizeof why)) return clt__error(CLT_EINVAL, "%s", why);
  int64_t base = s->layers[lo].param_offset;
  int64_t end = hi < s->nlayers ? s->layers[hi].param_offset : s->param_count;
  clt_model_spec *st = clt__calloc(1, sizeof *st);
  if (!st) return CLT_ENOMEM;
  *st = *s;
  st->name = clt__strdup(s->name);
  st->text = clt__strdup(s->text);
  st->nlayers = hi - lo + 1;
  st->layers = clt__calloc((size_t)st->nlayers, sizeof *st->layers);
  if (!st->name || !st->text || !st->layers) { rc = CLT_ENOMEM; goto fail; }
  st->param_count = end - base;
  st->layer_base = lo - 1;
  /* The input: layer lo - 1's output, as the previous stage sends it. */
  st->layers[0] = s->layers[0];
  if (lo > 1) {
    clt_layer_spec *in = &st->layers[0];
    in->in_shape = in->out_shape = s->layers[lo - 1].out_shape;
    in->line = s->layers[lo - 1].line;
  }
  for (int i = lo; i < hi; i++) {
    clt_layer_spec *l = &st->layers[i - lo + 1];
    *l = s->layers[i];
    l->param_offset -= base;
    for (int k = 0; k < l->nparams; k++) {
      clt_param_spec *p = &l->param[k];
      if (p->tied && (p->offset < base || p->offset + p->count > end)) {
        /* Tied to a layer of another stage: a copy of its own here
         * (Megatron's way), taking the owner's decay. */
        const clt_layer_spec *o = &s->layers[l->tie];
        p->tied = 0;
        p->stage_copy = 1;
        p->whole_offset = p->offset;
        p->decay = o->param[0].decay;
        p->offset = st->param_count;
        st->param_count += p->count;
        continue;
      }
      p->offset -= base;
    }
    if (l->tie >= 0) l->tie = l->tie >= lo ? l->tie - (lo - 1) : -1;
    if (l->skip >= 0) l->skip -= lo - 1;
  }
  int residuals = 0;
  for (int i = 1; i < st->nlayers; i++) residuals += st->layers[i].skip >= 0;
  if (!residuals) st->skip_slots = 0; /* else the whole model's slots, which its residuals' indices fit */
  *base_out = base;
  *out = st;
  return CLT_OK;
fail:
  clt__spec_destroy(st);
  return rc;
}
