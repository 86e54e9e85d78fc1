/*
 * spec.c: the model spec parser. One layer per line: a layer name, its
 * positional numbers, then name=value options; '#' starts a comment. Each
 * line's output shape is worked out from the one before, so a layer that
 * does not fit is reported where it is written, as file:line:col with the
 * offending text and both shapes.
 */
#include "internal.h"
#include "model/spec.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 16
#define MAX_DIM 1000000
/* Values per sample of any layer's output: shapes hold int dimensions and
 * kernels index one sample with int. */
#define MAX_VALUES INT_MAX
/* Parameters of a whole model (4 TiB of float32): far above any device,
 * and no sum of layers can overflow on the way. */
#define MAX_PARAMS (1LL << 40)

typedef struct token {
  const char *text; /* NUL-terminated copy inside the line buffer */
  int col;          /* 1-based column */
} token;

typedef struct line_ctx {
  const char *name;
  int line;
  token tok[MAX_TOKENS];
  int ntok;
  unsigned used;  /* bit i: token i was consumed */
  char src[256];  /* the line as written, to quote in messages */
} line_ctx;

static const struct {
  const char *name;
  clt_layer_kind kind;
} layer_names[] = {
    {"input", CLT_LAYER_INPUT},         {"linear", CLT_LAYER_LINEAR},       {"dense", CLT_LAYER_LINEAR},
    {"conv2d", CLT_LAYER_CONV2D},       {"conv", CLT_LAYER_CONV2D},         {"maxpool", CLT_LAYER_MAXPOOL},
    {"maxpool2d", CLT_LAYER_MAXPOOL},   {"avgpool", CLT_LAYER_AVGPOOL},     {"avgpool2d", CLT_LAYER_AVGPOOL},
    {"globalavgpool", CLT_LAYER_GLOBALAVGPOOL},                             {"relu", CLT_LAYER_RELU},
    {"leakyrelu", CLT_LAYER_LEAKYRELU}, {"leaky_relu", CLT_LAYER_LEAKYRELU}, {"gelu", CLT_LAYER_GELU},
    {"tanh", CLT_LAYER_TANH},           {"sigmoid", CLT_LAYER_SIGMOID},     {"dropout", CLT_LAYER_DROPOUT},
    {"flatten", CLT_LAYER_FLATTEN},     {"layernorm", CLT_LAYER_LAYERNORM},
};

const char *clt__layer_kind_name(clt_layer_kind kind) {
  for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
    if (layer_names[i].kind == kind) return layer_names[i].name;
  return "?";
}

int64_t clt__shape_numel(const clt_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
  return n;
}

const char *clt__shape_str(const clt_shape *s, char *buf, size_t len) {
  if (s->ndim == 1)
    snprintf(buf, len, "(%d)", s->dims[0]);
  else
    snprintf(buf, len, "(%d, %d, %d)", s->dims[0], s->dims[1], s->dims[2]);
  return buf;
}

static int line_error(line_ctx *lc, int col, const char *fmt, ...) CLT__PRINTF(3, 4);
static int line_error(line_ctx *lc, int col, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* Quote the line with a caret under the column, as compilers do. */
  int caret = col - 1 < (int)sizeof lc->src - 1 ? col - 1 : 0;
  return clt__error(CLT_EFORMAT, "%s:%d:%d: %s\n    %s\n    %*s^", lc->name, lc->line, col, msg, lc->src, caret, "");
}

/* Whole-token numbers only: "3x" or "" are errors naming the text. */
static int parse_int(line_ctx *lc, const token *t, const char *what, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(t->text, &end, 10);
  if (end == t->text || *end || errno)
    return line_error(lc, t->col, "%s must be a whole number, not '%s'", what, t->text);
  if (v < lo || v > hi) return line_error(lc, t->col, "%s must be from %d to %d, not %ld", what, lo, hi, v);
  *out = (int)v;
  return CLT_OK;
}

static int parse_float(line_ctx *lc, const token *t, const char *what, double lo, double hi, int lo_open,
                       float *out) {
  char *end;
  errno = 0;
  double v = strtod(t->text, &end);
  if (end == t->text || *end || errno || !isfinite(v))
    return line_error(lc, t->col, "%s must be a number, not '%s'", what, t->text);
  if (v < lo || v > hi || (lo_open && v == lo))
    return line_error(lc, t->col, "%s must be %s %g and at most %g, not '%s'", what, lo_open ? "above" : "at least",
                      lo, hi, t->text);
  *out = (float)v;
  return CLT_OK;
}

/* The i-th positional (non key=value) token after the layer name, or NULL. */
static const token *positional(line_ctx *lc, int i) {
  for (int t = 1; t < lc->ntok; t++) {
    if (strchr(lc->tok[t].text, '=')) continue;
    if (i-- == 0) {
      lc->used |= 1u << t;
      return &lc->tok[t];
    }
  }
  return NULL;
}

/* The value of option key=value, or NULL; *col gets the value's column. */
static const token *option(line_ctx *lc, const char *key, token *value) {
  size_t klen = strlen(key);
  for (int t = 1; t < lc->ntok; t++) {
    const char *s = lc->tok[t].text;
    if (strncmp(s, key, klen) == 0 && s[klen] == '=') {
      lc->used |= 1u << t;
      value->text = s + klen + 1;
      value->col = lc->tok[t].col + (int)klen + 1;
      return value;
    }
  }
  return NULL;
}

static int need_positional(line_ctx *lc, int i, const char *what, const token **out) {
  *out = positional(lc, i);
  if (*out) return CLT_OK;
  const token *last = &lc->tok[lc->ntok - 1];
  return line_error(lc, last->col + (int)strlen(last->text), "%s needs %s", lc->tok[0].text, what);
}

static int int_option(line_ctx *lc, const char *key, int lo, int hi, int *inout) {
  token v;
  if (!option(lc, key, &v)) return CLT_OK;
  return parse_int(lc, &v, key, lo, hi, inout);
}

static int bool_option(line_ctx *lc, const char *key, int *inout) {
  token v;
  if (!option(lc, key, &v)) return CLT_OK;
  if (strcmp(v.text, "true") == 0 || strcmp(v.text, "1") == 0 || strcmp(v.text, "yes") == 0) *inout = 1;
  else if (strcmp(v.text, "false") == 0 || strcmp(v.text, "0") == 0 || strcmp(v.text, "no") == 0) *inout = 0;
  else return line_error(lc, v.col, "%s must be true or false, not '%s'", key, v.text);
  return CLT_OK;
}

static int init_option(line_ctx *lc, clt_init_kind *inout) {
  token v;
  if (!option(lc, "init", &v)) return CLT_OK;
  if (strcmp(v.text, "he") == 0 || strcmp(v.text, "kaiming") == 0) *inout = CLT_INIT_HE;
  else if (strcmp(v.text, "xavier") == 0 || strcmp(v.text, "glorot") == 0) *inout = CLT_INIT_XAVIER;
  else return line_error(lc, v.col, "init must be he or xavier, not '%s'", v.text);
  return CLT_OK;
}

/* Read one line's layer and its options into l (shapes come later). */
static int parse_layer(line_ctx *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  const token *t;
  const char *kw = lc->tok[0].text;
  int known = 0;
  for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
    if (strcmp(kw, layer_names[i].name) == 0) l->kind = layer_names[i].kind, known = 1;
  if (!known)
    return line_error(lc, lc->tok[0].col,
                      "unknown layer '%s' (known: input, linear, conv2d, maxpool, avgpool, globalavgpool, relu, "
                      "leakyrelu, gelu, tanh, sigmoid, dropout, flatten, layernorm)", kw);
  lc->used = 1;
  l->bias = 1;
  l->init = CLT_INIT_HE;
  l->eps = 1e-5f;
  l->slope = 0.01f;
  switch (l->kind) {
  case CLT_LAYER_INPUT: {
    int d[3], n = 0;
    for (; n < 3 && (t = positional(lc, n)); n++) CLT_TRY(parse_int(lc, t, "an input dimension", 1, MAX_DIM, &d[n]));
    if (n != 1 && n != 3)
      return line_error(lc, lc->tok[0].col, "input needs 1 number (features) or 3 (channels height width), got %d",
                        n);
    l->out_shape.ndim = n;
    memcpy(l->out_shape.dims, d, sizeof d);
    break;
  }
  case CLT_LAYER_LINEAR:
    CLT_TRY(need_positional(lc, 0, "the number of output features (linear 128)", &t));
    CLT_TRY(parse_int(lc, t, "output features", 1, MAX_DIM, &l->out));
    CLT_TRY(bool_option(lc, "bias", &l->bias));
    CLT_TRY(init_option(lc, &l->init));
    break;
  case CLT_LAYER_CONV2D:
    CLT_TRY(need_positional(lc, 0, "the number of output channels (conv2d 32 kernel=3)", &t));
    CLT_TRY(parse_int(lc, t, "output channels", 1, MAX_DIM, &l->out));
    l->kernel = 3, l->stride = 1, l->pad = 0;
    CLT_TRY(int_option(lc, "kernel", 1, 64, &l->kernel));
    CLT_TRY(int_option(lc, "stride", 1, 64, &l->stride));
    CLT_TRY(int_option(lc, "pad", 0, 64, &l->pad));
    CLT_TRY(bool_option(lc, "bias", &l->bias));
    CLT_TRY(init_option(lc, &l->init));
    break;
  case CLT_LAYER_MAXPOOL:
  case CLT_LAYER_AVGPOOL:
    CLT_TRY(need_positional(lc, 0, "a window size (maxpool 2)", &t));
    CLT_TRY(parse_int(lc, t, "the window size", 1, 64, &l->kernel));
    l->stride = l->kernel;
    CLT_TRY(int_option(lc, "stride", 1, 64, &l->stride));
    break;
  case CLT_LAYER_LEAKYRELU:
    if ((t = positional(lc, 0))) CLT_TRY(parse_float(lc, t, "the slope", 0, 1, 0, &l->slope));
    else {
      token v;
      if (option(lc, "slope", &v)) CLT_TRY(parse_float(lc, &v, "slope", 0, 1, 0, &l->slope));
    }
    break;
  case CLT_LAYER_DROPOUT:
    CLT_TRY(need_positional(lc, 0, "a drop probability (dropout 0.25)", &t));
    CLT_TRY(parse_float(lc, t, "the drop probability", 0, 0.99, 0, &l->p));
    break;
  case CLT_LAYER_LAYERNORM: {
    token v;
    if (option(lc, "eps", &v)) CLT_TRY(parse_float(lc, &v, "eps", 0, 1, 1, &l->eps));
    break;
  }
  default:
    break;
  }
  /* Anything not consumed is a mistake: say which. */
  for (int i = 1; i < lc->ntok; i++) {
    if (lc->used & (1u << i)) continue;
    const char *eq = strchr(lc->tok[i].text, '=');
    int len = eq ? (int)(eq - lc->tok[i].text) : 0;
    for (int j = 1; eq && j < i; j++) /* an option given twice: the first was taken */
      if ((lc->used & (1u << j)) && strncmp(lc->tok[j].text, lc->tok[i].text, (size_t)len + 1) == 0)
        return line_error(lc, lc->tok[i].col, "option '%.*s' is given twice for %s; give it once", len,
                          lc->tok[i].text, kw);
    if (eq)
      return line_error(lc, lc->tok[i].col, "unknown option '%.*s' for %s", len, lc->tok[i].text, kw);
    return line_error(lc, lc->tok[i].col, "unexpected '%s': %s takes no more numbers", lc->tok[i].text, kw);
  }
  return CLT_OK;
fail:
  return rc;
}

/* Work out l's output shape and parameter counts from the input shape. */
static int infer_shape(line_ctx *lc, clt_layer_spec *l, const clt_shape *in) {
  char s[64];
  const char *kw = lc->tok[0].text;
  int col = lc->tok[0].col;
  l->in_shape = *in;
  l->out_shape = *in;
  switch (l->kind) {
  case CLT_LAYER_INPUT:
    return line_error(lc, col, "input may only be the first layer");
  case CLT_LAYER_LINEAR:
    if (in->ndim != 1)
      return line_error(lc, col, "linear needs a flat input but the previous layer gives %s; add 'flatten' before it",
                        clt__shape_str(in, s, sizeof s));
    l->out_shape.dims[0] = l->out;
    l->weight_count = (int64_t)l->out * in->dims[0];
    l->bias_count = l->bias ? l->out : 0;
    return CLT_OK;
  case CLT_LAYER_CONV2D:
  case CLT_LAYER_MAXPOOL:
  case CLT_LAYER_AVGPOOL: {
    if (in->ndim != 3)
      return line_error(lc, col, "%s needs a (channels, height, width) input but the previous layer gives %s", kw,
                        clt__shape_str(in, s, sizeof s));
    int pad = l->kind == CLT_LAYER_CONV2D ? l->pad : 0;
    int h = (in->dims[1] + 2 * pad - l->kernel) / l->stride + 1;
    int w = (in->dims[2] + 2 * pad - l->kernel) / l->stride + 1;
    if (in->dims[1] + 2 * pad < l->kernel || in->dims[2] + 2 * pad < l->kernel || h < 1 || w < 1)
      return line_error(lc, col, "%s window %d is larger than its input %s (padding %d)", kw, l->kernel,
                        clt__shape_str(in, s, sizeof s), pad);
    if (l->kind == CLT_LAYER_CONV2D) {
      l->out_shape.dims[0] = l->out;
      l->weight_count = (int64_t)l->out * in->dims[0] * l->kernel * l->kernel;
      l->bias_count = l->bias ? l->out : 0;
    }
    l->out_shape.dims[1] = h;
    l->out_shape.dims[2] = w;
    return CLT_OK;
  }
  case CLT_LAYER_GLOBALAVGPOOL:
    if (in->ndim != 3)
      return line_error(lc, col, "globalavgpool needs a (channels, height, width) input but the previous layer gives %s",
                        clt__shape_str(in, s, sizeof s));
    l->out_shape.ndim = 1;
    return CLT_OK;
  case CLT_LAYER_FLATTEN:
    if (clt__shape_numel(in) > MAX_VALUES) /* would not fit the int of a flat shape */
      return line_error(lc, col, "flatten of %s gives %lld features, more than the %d cltrain supports",
                        clt__shape_str(in, s, sizeof s), (long long)clt__shape_numel(in), MAX_VALUES);
    l->out_shape.ndim = 1;
    l->out_shape.dims[0] = (int)clt__shape_numel(in);
    return CLT_OK;
  case CLT_LAYER_LAYERNORM:
    if (in->ndim != 1)
      return line_error(lc, col, "layernorm normalises features and needs a flat input, not %s",
                        clt__shape_str(in, s, sizeof s));
    l->weight_count = in->dims[0]; /* gamma */
    l->bias_count = in->dims[0];   /* beta */
    return CLT_OK;
  default:
    return CLT_OK; /* elementwise: same shape */
  }
}

/* Split a line into tokens in place; returns the count or -1 if too many. */
static int tokenize(char *line, token *tok) {
  int n = 0;
  char *p = line;
  while (*p) {
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (!*p) break;
    if (n == MAX_TOKENS) return -1;
    tok[n].text = p;
    tok[n].col = (int)(p - line) + 1;
    n++;
    while (*p && *p != ' ' && *p != '\t' && *p != '\r') {
      *p = (char)tolower((unsigned char)*p);
      p++;
    }
    if (*p) *p++ = '\0';
  }
  return n;
}

int clt__spec_parse(const char *text, const char *name, clt_model_spec **out) {
  int rc = CLT_OK;
  clt_model_spec *spec = clt__calloc(1, sizeof *spec);
  char *buf = NULL;
  line_ctx lc = {.name = name ? name : "<model>"};
  *out = NULL;
  if (!spec || !(spec->name = clt__strdup(lc.name)) || !(spec->text = clt__strdup(text)) ||
      !(buf = clt__strdup(text))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  int cap = 0;
  clt_shape shape = {0, {0, 0, 0}};
  char *save = NULL, *line = buf, *next;
  for (lc.line = 1; line; lc.line++, line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    clt__strlcpy(lc.src, line, sizeof lc.src);
    for (char *c = lc.src; *c; c++)
      if (*c == '\t' || *c == '\r') *c = ' '; /* keep the caret under its column */
    lc.ntok = tokenize(line, lc.tok);
    if (lc.ntok == 0) continue;
    if (lc.ntok < 0) {
      rc = line_error(&lc, 1, "too many words on one line (at most %d)", MAX_TOKENS);
      goto fail;
    }
    if (spec->nlayers == cap) {
      cap = cap ? 2 * cap : 16;
      clt_layer_spec *grown = realloc(spec->layers, cap * sizeof *grown);
      if (!grown) { rc = clt__error(CLT_ENOMEM, "out of memory parsing %s", lc.name); goto fail; }
      spec->layers = grown;
    }
    clt_layer_spec *l = &spec->layers[spec->nlayers];
    memset(l, 0, sizeof *l);
    l->line = lc.line;
    CLT_TRY(parse_layer(&lc, l));
    if (spec->nlayers == 0) {
      if (l->kind != CLT_LAYER_INPUT) {
        rc = line_error(&lc, lc.tok[0].col, "the first layer must be 'input' giving the sample shape "
                                            "(input 784, or input 1 28 28), not '%s'", lc.tok[0].text);
        goto fail;
      }
      shape = l->out_shape;
      l->in_shape = shape;
    } else {
      CLT_TRY(infer_shape(&lc, l, &shape));
      shape = l->out_shape;
    }
    if (clt__shape_numel(&shape) > MAX_VALUES) {
      char sh[64];
      rc = line_error(&lc, lc.tok[0].col, "%s holds %lld values per sample, more than the %d cltrain supports",
                      clt__shape_str(&shape, sh, sizeof sh), (long long)clt__shape_numel(&shape), MAX_VALUES);
      goto fail;
    }
    l->param_offset = spec->param_count;
    spec->param_count += l->weight_count + l->bias_count;
    if (spec->param_count > MAX_PARAMS) {
      rc = line_error(&lc, lc.tok[0].col, "the model has %lld parameters up to here, more than the %lld cltrain "
                      "supports", (long long)spec->param_count, (long long)MAX_PARAMS);
      goto fail;
    }
    spec->nlayers++;
  }
  (void)save;
  if (spec->nlayers == 0) {
    rc = clt__error(CLT_EFORMAT, "%s: the model spec has no layers (it needs at least 'input' and one more)", lc.name);
    goto fail;
  }
  if (spec->nlayers < 2 || shape.ndim != 1 || spec->param_count == 0) {
    char s[64];
    rc = clt__error(CLT_EFORMAT, "%s:%d: the last layer must give one score per class (e.g. 'linear 10'), "
                    "but the model ends with %s%s", lc.name, spec->layers[spec->nlayers - 1].line,
                    clt__shape_str(&shape, s, sizeof s), spec->param_count == 0 ? " and has no parameters" : "");
    goto fail;
  }
  if (shape.dims[0] < 2) {
    rc = clt__error(CLT_EFORMAT, "%s:%d: the model ends with %d output; classification needs at least 2 classes",
                    lc.name, spec->layers[spec->nlayers - 1].line, shape.dims[0]);
    goto fail;
  }
  spec->num_classes = shape.dims[0];
  free(buf);
  *out = spec;
  return CLT_OK;
fail:
  free(buf);
  clt__spec_destroy(spec);
  return rc;
}

void clt__spec_destroy(clt_model_spec *spec) {
  if (!spec) return;
  free(spec->name);
  free(spec->text);
  free(spec->layers);
  free(spec);
}
