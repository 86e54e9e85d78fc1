/*
 * spec.h: the parsed form of a model spec file (one layer per line, see
 * DESIGN.md "Files on disk"): the layers in the order they run, each with
 * its kind (an entry of the layer table, model/layer.h), its options, the
 * shapes that flow in and out of it, and its parameter tensors laid out in
 * the one parameter arena. Host only: no OpenCL here.
 *
 * Beyond a straight list: `block repeat=N` ... `end` repeats the lines
 * between them (expanded here, so every copy is a layer of its own and
 * messages still name the line written); `residual` adds the value at the
 * start of the current block pass, or at the last residual, whichever is
 * later, `save NAME` names the value at its line and `concat NAME` or
 * `residual NAME` reads it back later (U-Net skips); `tie=NAME` makes a linear layer use the weight of the layer named
 * NAME (the output projection tied to the token embedding). A last line
 * `loss mse|l1|huber [delta=D]|crossentropy` says what training minimises
 * (model/spec.c); without one, cross-entropy on class labels.
 */
#ifndef CLT_MODEL_SPEC_H
#define CLT_MODEL_SPEC_H

#include <stddef.h>
#include <stdint.h>

struct clt__layer_kind;

/* A sample's shape: (features), (T, C) for sequences, (C, L) for signals,
 * (C, H, W) for images, (C, D, H, W) for volumes (channels first, as
 * PyTorch lays them out: a convolution reads dims[0] as its channels, a
 * linear layer the last dimension as its features); an input of token ids
 * is (T) with vocab > 0 (ids below vocab, carried as exact floats). */
#define CLT_SHAPE_MAX_DIMS 4
typedef struct clt_shape {
  int ndim; /* 1 to CLT_SHAPE_MAX_DIMS */
  int dims[CLT_SHAPE_MAX_DIMS];
  int vocab;
} clt_shape;

/* A weight's initialisation (init=): auto, the default of linear and
 * conv2d, is He / Kaiming uniform with the gain of the activation that
 * follows, and zeros for the output layer (spec.c, default_gains; README,
 * "Initialisation"); he always takes ReLU's gain. */
typedef enum clt_init_kind { CLT_INIT_AUTO, CLT_INIT_HE, CLT_INIT_XAVIER, CLT_INIT_NORMAL } clt_init_kind;

/* How a parameter tensor starts. */
typedef enum clt_param_init {
  CLT_PINIT_UNIFORM, /* uniform in (-scale, scale) */
  CLT_PINIT_NORMAL,  /* normal with standard deviation scale */
  CLT_PINIT_ZEROS,
  CLT_PINIT_ONES
} clt_param_init;

/* attention's four projections with their biases (Qwen2's q, k, v) */
#define CLT_MAX_LAYER_PARAMS 8

/* One parameter tensor of a layer: a range of the arena seen with a shape. */
typedef struct clt_param_spec {
  char name[24];       /* "weight", "bias", "qkv.weight": the safetensors name after "<layer>." */
  int ndim;
  int64_t shape[5];    /* up to 5 dimensions: conv3d's (out, in, k, k, k) */
  int64_t count;
  int64_t offset;      /* floats from the start of the parameter arena */
  clt_param_init init;
  double scale;
  int decay;           /* decoupled weight decay applies (matrices), not to biases, norms, embeddings */
  int tied;            /* another layer's tensor seen here: not owned, saved or initialised twice */
  int stage_copy;      /* a part of a model (a pipeline stage's spec, src/pp) holds its own copy of a weight
                          tied to a layer outside it: the owner is at whole_offset of the whole arena */
  int64_t whole_offset;
  int buffer;          /* a buffer, not a trainable parameter (batchnorm's running statistics): written by the
                          forward, its gradient always 0 and no decay, so every optimizer leaves it as it is */
} clt_param_spec;

/* Rotary position embeddings of an attention layer (rope_theta= and
 * rope_scaling=llama3's options, model/rope.c): the inverse frequencies
 * of the head's D / 2 pairs, computed once in float32 as transformers
 * computes them, and uploaded with every forward. */
#define CLT_ROPE_MAX_PAIRS 128
typedef enum clt_rope_scaling { CLT_ROPE_PLAIN = 0, CLT_ROPE_LLAMA3 = 1 } clt_rope_scaling;
typedef struct clt_rope_spec {
  float theta;                 /* 0: no rotary embedding */
  clt_rope_scaling scaling;
  float factor, low_freq_factor, high_freq_factor;
  int original_max;            /* original_max_position_embeddings */
  int pairs;                   /* D / 2 */
  float inv_freq[CLT_ROPE_MAX_PAIRS];
} clt_rope_spec;

/* attention's bias= (bit flags): on the q, k and v projections, on the
 * output projection. */
enum { CLT_BIAS_QKV = 1, CLT_BIAS_OUT = 2, CLT_BIAS_ALL = 3 };

typedef struct clt_layer_spec {
  const struct clt__layer_kind *kind;
  int line;            /* where it was written, for messages */
  char name[32];       /* name=..., what tie= refers to ("" when none) */
  /* Options; which ones a kind reads is its own business (model/kinds_*.c). */
  int out;             /* linear: out features; conv2d: out channels; embedding: width; swiglu: hidden */
  int kernel, stride, pad;
  int bias;            /* linear, conv2d, swiglu: 0 or 1; attention: CLT_BIAS_* flags */
  int heads;           /* attention */
  int kv_heads;        /* attention: key and value heads (0: not given, as many as heads, GPT-2's fused
                          qkv tensor; given: Llama's q_proj, k_proj, v_proj and o_proj) */
  clt_rope_spec rope;  /* attention */
  int positions;       /* posembedding: rows of the table */
  clt_init_kind init;
  float std;           /* init=normal */
  float p;             /* dropout probability */
  float slope;         /* leaky relu */
  float eps;           /* layernorm, rmsnorm */
  int tie;             /* linear tie=NAME: the layer whose weight it uses, else -1 */
  int skip;            /* residual: the layer whose output it adds */
  int skip_slot;       /* residual: which pending-gradient buffer its skip branch uses */
  clt_shape in_shape, out_shape;
  int nparams;
  clt_param_spec param[CLT_MAX_LAYER_PARAMS];
  int64_t param_offset; /* the parameters it owns are the arena floats [param_offset, + param_count) */
  int64_t param_count;  /* (tied tensors excluded) */
  /* Per sample, in elements, besides the output: activation-dtype values
   * kept from forward to backward, f32 (or i32) values kept, and
   * activation-dtype scratch for the backward. */
  int64_t saved_act, saved_f32, grad_scratch;
  int block;           /* the pass of a top-level `block` it is in (0, 1, ... in order; a nested block's
                          layers are their outer pass's), or -1: --recompute blocks' unit */
  int skip_outside;    /* a residual or concat outside that pass (or outside blocks) reads this layer's output */
  /* save NAME: the name it gives its input; concat NAME and residual NAME:
   * the saved value they read (layer skip, a save), written at column
   * skip_col ("" when none; model/kinds_skip.c). */
  char skip_name[32];
  int skip_col;
  clt_shape skip_shape; /* residual, concat: layer skip's output shape (what infer checks against) */
  int skip_line;        /* and the line it is written at */
  int groups;           /* groupnorm: G groups of channels */
  int dilation;        /* conv1d, conv2d, conv3d: spacing of the kernel's taps (1: none) */
  int output_pad;      /* convtranspose*: output_pad= (0 to stride - 1) */
  int scale;           /* upsample: scale= */
  int upsample_linear; /* upsample: mode=linear (0: nearest) */
  float momentum;      /* batchnorm: the running statistics' momentum */
} clt_layer_spec;

typedef struct clt_model_spec {
  char *name;          /* the file name, for messages */
  char *text;          /* the spec as written (checkpoints keep it) */
  int nlayers;         /* including the input line; blocks expanded */
  clt_layer_spec *layers;
  int64_t param_count;
  int num_classes;     /* the last layer's features (the vocabulary for a sequence model); 0 for regression */
  int64_t labels_per_sample; /* 1 for a classifier, T for a sequence model (a label per position); for
                                regression the float targets per sample: the output's values */
  int loss;            /* clt_loss_kind: the `loss` line (after the last layer), else cross-entropy */
  float huber_delta;   /* huber's delta= (1) */
  int loss_line;       /* where the loss line is (0: none, the default) */
  int skip_slots;      /* pending skip-branch gradients at most at once in the backward */
  int nblocks;         /* top-level block passes with a layer (the `block` of its layers: 0 .. nblocks - 1) */
  int layer_base;      /* a part of a model (a pipeline stage's spec, src/pp): its layer i is the whole
                          model's i + layer_base (what keys each dropout layer's masks); 0 for a whole model */
} clt_model_spec;

/* Parse a whole spec; errors are CLT_EFORMAT with "name:line:col: what" and
 * the offending text. */
int clt__spec_parse(const char *text, const char *name, clt_model_spec **out);
void clt__spec_destroy(clt_model_spec *spec);
const char *clt__layer_kind_name(const clt_layer_spec *l);
/* "(32, 14, 14)", "(1024 tokens)" */
const char *clt__shape_str(const clt_shape *s, char *buf, size_t len);
int64_t clt__shape_numel(const clt_shape *s);
/* Rows of a layer's last dimension per sample: 1 for a flat shape, T for
 * (T, C); what linear and layernorm multiply the batch by. */
int64_t clt__shape_rows(const clt_shape *s);

#endif
