/*
 * model.h: the layout of the public clt_model object (a parsed spec).
 */
#ifndef CLT_MODEL_MODEL_H
#define CLT_MODEL_MODEL_H

#include "model/spec.h"

struct clt_model {
  clt_model_spec *spec;
};

/* A range of the parameter arena, in floats: [lo, hi). */
typedef struct clt__param_range {
  int64_t lo, hi;
} clt__param_range;

/* The ranges of the parameter (and so gradient) arena that layer `layer`'s
 * backward writes: none, one or several; a parameter shared by two layers
 * (weight tying) appears under both. Count-then-fill: returns how many
 * there are and fills the first `cap` of them into out (out may be NULL
 * when cap is 0). A strategy that sums gradients as the backward goes
 * (src/dp) groups them from these. */
int clt__model_grad_ranges(const clt_model *m, int layer, clt__param_range *out, int cap);

/* Fill the parameter arena (spec->param_count floats) with the seeded
 * initial values: the same on every device and replica. */
void clt__model_init_params(const clt_model_spec *spec, uint64_t seed, float *params);

/* Which parameters take weight decay (decoupled, AdamW) in GPT-2's
 * practice: 1 for the matrices of linear, conv and attention layers, 0 for
 * biases, norms and embeddings; spec->param_count values into out. */
void clt__model_decay_mask(const clt_model_spec *spec, uint8_t *out);

/* --recompute blocks (recompute CLT_RECOMPUTE_BLOCKS) on m: CLT_EINVAL
 * naming the spec when it has no block for it to keep the input of. */
int clt__model_check_recompute(const clt_model *m, int recompute);

#endif
