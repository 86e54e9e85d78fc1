/*
 * model.h: the layout of the public clt_model object (a parsed spec).
 */
#ifndef CLT_MODEL_MODEL_H
#define CLT_MODEL_MODEL_H

#include "model/spec.h"

struct clt_model {
  clt_model_spec *spec;
};

/* Fill the parameter arena (spec->param_count floats) with the seeded
 * initial values: the same on every device and replica. */
void clt__model_init_params(const clt_model_spec *spec, uint64_t seed, float *params);

#endif
