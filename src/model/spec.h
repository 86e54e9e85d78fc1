/*
 * spec.h: the parsed form of a model spec file (one layer per line, see
 * DESIGN.md "Files on disk") and the shapes that flow between layers. Host
 * only: no OpenCL here. The model layer (model.c) turns this into replicas.
 */
#ifndef CLT_MODEL_SPEC_H
#define CLT_MODEL_SPEC_H

#include <stdint.h>

typedef enum clt_layer_kind {
  CLT_LAYER_INPUT,
  CLT_LAYER_LINEAR,
  CLT_LAYER_CONV2D,
  CLT_LAYER_MAXPOOL,
  CLT_LAYER_AVGPOOL,
  CLT_LAYER_GLOBALAVGPOOL,
  CLT_LAYER_RELU,
  CLT_LAYER_LEAKYRELU,
  CLT_LAYER_GELU,
  CLT_LAYER_TANH,
  CLT_LAYER_SIGMOID,
  CLT_LAYER_DROPOUT,
  CLT_LAYER_FLATTEN,
  CLT_LAYER_LAYERNORM,
  CLT_LAYER_KIND_COUNT
} clt_layer_kind;

typedef enum clt_init_kind { CLT_INIT_HE, CLT_INIT_XAVIER } clt_init_kind;

/* A sample's shape: (features) or (C, H, W). */
typedef struct clt_shape {
  int ndim;     /* 1 or 3 */
  int dims[3];
} clt_shape;

typedef struct clt_layer_spec {
  clt_layer_kind kind;
  int line;             /* where it was written, for messages */
  int out;              /* linear: out features; conv2d: out channels */
  int kernel, stride, pad;
  int bias;             /* linear/conv2d have a bias */
  clt_init_kind init;
  float p;              /* dropout probability */
  float slope;          /* leaky relu */
  float eps;            /* layernorm */
  clt_shape in_shape, out_shape;
  int64_t weight_count; /* parameters: weights then bias, in this order */
  int64_t bias_count;
  int64_t param_offset; /* floats from the start of the parameter arena */
} clt_layer_spec;

typedef struct clt_model_spec {
  char *name;           /* the file name, for messages */
  char *text;           /* the spec as written (checkpoints keep it) */
  int nlayers;          /* including the input line */
  clt_layer_spec *layers;
  int64_t param_count;
  int num_classes;      /* the last layer's features */
} clt_model_spec;

/* Parse a whole spec; errors are CLT_EFORMAT with "name:line:col: what" and
 * the offending text. */
int clt__spec_parse(const char *text, const char *name, clt_model_spec **out);
void clt__spec_destroy(clt_model_spec *spec);
const char *clt__layer_kind_name(clt_layer_kind kind);
/* "(32, 14, 14)" */
const char *clt__shape_str(const clt_shape *s, char *buf, size_t len);
int64_t clt__shape_numel(const clt_shape *s);

#endif
