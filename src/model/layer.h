/*
 * layer.h: the table of layer kinds. Each kind is one descriptor — its
 * name, option parsing, shape inference (which also lays out its parameter
 * tensors, with their safetensors names and initialisation, and says what
 * it keeps for the backward pass), forward and backward — and the spec
 * parser, replicas, initialisation and weight files all go through it.
 * Adding a layer is one entry in layer_table.c plus its functions and
 * kernels; nothing else asks which kind a layer is.
 *
 * Kinds live in kinds_dense.c (linear, layernorm, activations, dropout,
 * residual, flatten, input), kinds_image.c (conv2d and pooling),
 * kinds_seq.c (embeddings), kinds_attention.c (attention) and
 * kinds_llama.c (rmsnorm, swiglu), kinds_skip.c (save, concat),
 * kinds_groupnorm.c (groupnorm), kinds_volume.c (conv1d, conv3d, 1-D
 * and 3-D pooling), kinds_upconv.c (upsample, convtranspose1d/2d/3d) and
 * kinds_batchnorm.c (batchnorm).
 */
#ifndef CLT_MODEL_LAYER_H
#define CLT_MODEL_LAYER_H

#include "core/internal.h"
#include "model/spec.h"

/* ---- parsing one line of a spec ---- */

#define CLT_SPEC_MAX_TOKENS 16

typedef struct clt__token {
  const char *text; /* NUL-terminated, lower-cased copy */
  int col;          /* 1-based column */
} clt__token;

typedef struct clt__spec_line {
  const char *name; /* the file, for messages */
  int line;
  clt__token tok[CLT_SPEC_MAX_TOKENS];
  int ntok;
  unsigned used;    /* bit i: token i was consumed */
  const char *src;  /* the line as written, to quote in messages */
} clt__spec_line;

/* "file:line:col: what", quoting the line with a caret; CLT_EFORMAT. */
int clt__line_error(clt__spec_line *lc, int col, const char *fmt, ...) CLT__PRINTF(3, 4);
/* The keyword's column, for errors about the whole line. */
int clt__line_col(const clt__spec_line *lc);
/* Positional number i after the keyword: required (need_*: an error saying
 * `what` when missing) or optional (returns 0 when absent, 1 when read). */
int clt__need_int(clt__spec_line *lc, int i, const char *what, const char *example, int lo, int hi, int *out);
int clt__need_float(clt__spec_line *lc, int i, const char *what, const char *example, double lo, double hi,
                    int lo_open, float *out);
/* How many positionals (words without '=') follow the keyword. */
int clt__count_positionals(const clt__spec_line *lc);
int clt__opt_positional_float(clt__spec_line *lc, int i, const char *what, double lo, double hi, float *out);
/* A bare word (`causal`) among the positionals: 1 when present. */
int clt__flag(clt__spec_line *lc, const char *word);
/* key=value options: untouched when absent. */
int clt__opt_int(clt__spec_line *lc, const char *key, int lo, int hi, int *inout);
int clt__opt_float(clt__spec_line *lc, const char *key, double lo, double hi, int lo_open, float *inout);
int clt__opt_bool(clt__spec_line *lc, const char *key, int *inout);
int clt__opt_init(clt__spec_line *lc, clt_layer_spec *l);
/* key=word: *out points into the line, or stays NULL; *col its column. */
int clt__opt_word(clt__spec_line *lc, const char *key, const char **out, int *col);

/* ---- parameters ---- */

/* Append a parameter tensor to l (offsets are given by the parser). */
clt_param_spec *clt__add_param(clt_layer_spec *l, const char *name, int ndim, const int64_t *shape,
                               clt_param_init init, double scale, int decay);
/* The weight initialisation l's init= option asks for, for a weight with
 * these fans: He or Xavier uniform, or normal with l->std. */
void clt__weight_init(const clt_layer_spec *l, double fan_in, double fan_out, clt_param_init *init, double *scale);

/* ---- running a layer ---- */

/* What a run is for (model/replica.h runs it). */
typedef struct clt__pass {
  int train;            /* the backward too, and dropout active (keyed by seed, step and the first sample's
                           global index) */
  int record;           /* a recorded run: its device time is measured, and the hooks hung on the replica act
                           on it (a data-parallel step records its last micro-batch) */
  uint64_t seed, step;
  int64_t global_first; /* global index of sample 0 of this slice, for dropout masks */
  float loss_scale;     /* the backward starts from loss_scale * dloss (0 means 1) */
  float *logits;        /* not NULL: the last layer's output, (n, its shape) as f32, is read back into it
                           (the run then waits for the forward) */
  const float *targets; /* a regression model's float targets (n * labels_per_sample), which it takes in
                           place of labels (NULL then); must stay valid as the input */
} clt__pass;

/* What a layer's forward and backward get: views of this layer's places in
 * the replica's buffers for a batch of n samples. */
typedef struct clt__layer_io {
  clt_context *ctx;
  const clt_model_spec *spec;
  const clt_layer_spec *l;
  int index;          /* in the whole model's layers (spec->layers[index - spec->layer_base]) */
  int64_t n;          /* samples */
  clt_dtype dt;       /* activation storage: f32, or f16 under mixed precision */
  clt_tensor x, y;    /* input (n, in_shape) and output (n, out_shape) */
  clt_tensor dy, dx;  /* backward: gradient at y; dx overwritten, or dx.buf NULL when not needed */
  clt_tensor skip;    /* residual: forward, the output it adds; backward, its skip-gradient buffer */
  cl_mem params, grads;
  /* Where a parameter's gradient is written when not in its range of the
   * grads arena (a hook of the replica's: model/replica.h), or NULL. */
  int (*grad_view)(void *user, const clt_param_spec *p, clt_tensor *out);
  void *grad_user;
  /* Where a parameter is read when not in its range of the params arena
   * (the hook param_view), or NULL; its user is grad_user. */
  int (*param_view)(void *user, const clt_param_spec *p, clt_tensor *out);
  cl_mem saved;       /* activation-dtype values kept for the backward, from element saved_off */
  int64_t saved_off;
  cl_mem aux;         /* f32 / i32 values kept for the backward, from element aux_off */
  int64_t aux_off;
  cl_mem gscratch;    /* activation-dtype backward scratch, from element 0 */
  cl_mem workspace;   /* conv2d's im2col workspace */
  const clt__pass *pass;
  /* Sum count doubles over every replica of every rank, in place (a hook
   * of the replica's, model/replica.h), or NULL: the replica's own sums
   * are the whole batch's. Its user is grad_user. With sums NULL: 1 when it
   * would add others' sums, 0 when it would not (model/replica.h). */
  int (*sum_stats)(void *user, int layer, double *sums, int count);
} clt__layer_io;

/* View of parameter k of the layer in the parameter or gradient arena. */
int clt__io_param(const clt__layer_io *io, int k, clt_tensor *t);
int clt__io_grad(const clt__layer_io *io, int k, clt_tensor *t);
/* Views of this layer's regions for n samples: `at` is the offset in
 * elements PER SAMPLE (the region holds its arrays one after another, each
 * n times its per-sample size), then the shape of one sample (saved,
 * scratch: (n, dims...) in the activation dtype) or a flat count (aux). */
int clt__io_saved(const clt__layer_io *io, int64_t at, int ndim, const int64_t *dims, clt_tensor *t);
int clt__io_aux(const clt__layer_io *io, int64_t at, clt_dtype dt, int64_t count, clt_tensor *t);
int clt__io_scratch(const clt__layer_io *io, int64_t at, int ndim, const int64_t *dims, clt_tensor *t);
/* dst = src, same dtype and size (any dtype). */
int clt__copy(clt_context *ctx, const clt_tensor *src, const clt_tensor *dst);
/* The same storage as t seen with another shape (rows x cols, ...). */
int clt__reshape(const clt_tensor *t, int ndim, const int64_t *shape, clt_tensor *out);
/* t as (rows, feat): a batch of samples or of sequences, one row a position. */
int clt__rows(const clt_tensor *t, int64_t feat, clt_tensor *out);

/* Kind flags. */
enum {
  CLT_KIND_VIEW = 1,       /* the output is the input's storage seen with another shape (flatten) */
  CLT_KIND_TRAIN_ONLY = 2, /* the identity outside training (dropout) */
  CLT_KIND_INPUT = 4,      /* the first line */
  CLT_KIND_PASS_GRAD = 8,  /* the input gradient is dy itself: backward gets dx = dy and only adds elsewhere */
  CLT_KIND_ACTIVATION = 16, /* elementwise, no parameters: what `act=NAME` on a linear or conv2d line may name */
  CLT_KIND_KEEPS_GAIN = 32, /* leaves the gain of the activation after it as it is (flatten, dropout, pooling):
                               init=auto looks past it (spec.c) */
  CLT_KIND_SYNC_STATS = 64  /* in training its forward and backward sum statistics over every replica (io's
                               sum_stats, batchnorm): a replica of no samples still runs it with n = 0 */
};

typedef struct clt__layer_kind {
  const char *name;
  const char *alias;       /* another accepted keyword, or NULL */
  unsigned flags;
  /* Read the line's numbers and options into l (defaults are set first). */
  int (*parse)(clt__spec_line *lc, clt_layer_spec *l);
  /* From l->in_shape: l->out_shape, the parameter tensors (clt__add_param)
   * and the per-sample saved sizes; errors at the line. NULL: same shape,
   * nothing kept. */
  int (*infer)(clt__spec_line *lc, clt_layer_spec *l);
  /* Bytes of the context's scratch (clt__context_scratch) and of the
   * replica's workspace for n samples with activations stored as dt; NULL:
   * none. */
  size_t (*scratch_bytes)(const clt_layer_spec *l, int64_t n, clt_dtype dt);
  size_t (*workspace_bytes)(const clt_layer_spec *l, int64_t n);
  int (*forward)(const clt__layer_io *io);
  /* NULL: the backward is the identity (dx is dy's storage). */
  int (*backward)(const clt__layer_io *io);
  /* The summary's description ("conv2d 32 k3 s1 p1"); NULL: the name. */
  void (*describe)(const clt_layer_spec *l, char *buf, size_t len);
  /* Activations (optional): the gain of init=auto for the weights of the
   * layer before it (spec.c); NULL: 1. */
  double (*gain)(const clt_layer_spec *l);
  /* (optional) The forward pass's floating-point operations per sample, a
   * multiply-add counted as 2, as llm.c and PaLM count them: the matrix
   * products (linear, conv2d, attention's projections and its scores and
   * weighted sums, swiglu); NULL: 0, as the elementwise layers. A training
   * step costs 3 times this (the backward twice the forward). */
  double (*flops)(const clt_layer_spec *l);
} clt__layer_kind;

/* The kind called `word`, or NULL; the list of names for messages, into
 * buf (returned). */
const clt__layer_kind *clt__layer_kind_find(const char *word);
const char *clt__layer_kind_list(char *buf, size_t len);
/* The forward FLOPs per sample of a spec's layers [first, last), each
 * kind's flops() added (MFU: train/fit.c). */
double clt__spec_flops(const clt_model_spec *spec, int first, int last);

/* Layers whose statistics are the global batch's (batchnorm): the first
 * one's index, or 0 when none; and CLT_EINVAL naming the first whose
 * channels would get fewer than two values from a micro-batch of `batch`
 * samples (all replicas together). */
int clt__spec_has_sync_stats(const clt_model_spec *spec);
int clt__spec_check_batch_stats(const clt_model_spec *spec, int64_t batch);

/* The kinds, for the table (layer_table.c) and the parser's special cases. */
extern const clt__layer_kind clt__kind_input, clt__kind_linear, clt__kind_layernorm, clt__kind_relu,
    clt__kind_leakyrelu, clt__kind_gelu, clt__kind_tanh, clt__kind_sigmoid, clt__kind_dropout, clt__kind_flatten,
    clt__kind_residual, clt__kind_conv2d, clt__kind_maxpool, clt__kind_avgpool, clt__kind_globalavgpool,
    clt__kind_embedding, clt__kind_posembedding, clt__kind_attention, clt__kind_silu, clt__kind_rmsnorm,
    clt__kind_swiglu, clt__kind_save, clt__kind_concat, clt__kind_groupnorm;
/* residual's parse: an optional NAME of a saved value (kinds_skip.c). */
int clt__residual_parse(clt__spec_line *lc, clt_layer_spec *l);
/* kinds_volume.c */
extern const clt__layer_kind clt__kind_conv1d, clt__kind_conv3d, clt__kind_maxpool1d, clt__kind_avgpool1d,
    clt__kind_maxpool3d, clt__kind_avgpool3d;
/* A convolution layer (conv1d, conv3d, or conv2d with dilation=) through
 * src/nn/conv_nd.c, its geometry from l's options and in_shape. */
int clt__convnd_layer_forward(const clt__layer_io *io);
int clt__convnd_layer_backward(const clt__layer_io *io);
extern const clt__layer_kind clt__kind_upsample, clt__kind_convtranspose1d, clt__kind_convtranspose2d,
    clt__kind_convtranspose3d, clt__kind_batchnorm;

#endif
