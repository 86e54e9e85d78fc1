/*
 * model.h: the layout of the public clt_model object (a parsed spec).
 */
#ifndef CLT_MODEL_MODEL_H
#define CLT_MODEL_MODEL_H

#include "model/spec.h"

struct clt_model {
  clt_model_spec *spec;
};

#endif
