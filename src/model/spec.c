/*
 * spec.c: the model spec parser. One layer per line: a layer name, its
 * positional numbers, then name=value options; '#' starts a comment.
 * `block repeat=N` ... `end` repeats the lines between them, `residual`
 * adds the value at the start of the block pass or at the last residual,
 * `save NAME` names a value that a later `concat NAME` or `residual NAME`
 * reads (resolve_saved), `tie=NAME` shares a named layer's weight, and `act=NAME` on a linear or
 * conv2d line is that activation as the next layer; a last line `loss
 * KIND` chooses the loss (cross-entropy by default). Each line's output shape is
 * worked out from the one before through the layer table (model/layer.h),
 * so a layer that does not fit is reported where it is written, as
 * file:line:col with the offending text and both shapes.
 */
#include "core/internal.h"
#include "model/layer.h"
#include "model/spec.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values per sample of any layer's output: shapes hold int dimensions and
 * kernels index one sample with int. */
#define MAX_VALUES INT_MAX
/* Parameters of a whole model (4 TiB of float32): far above any device,
 * and no sum of layers can overflow on the way. */
#define MAX_PARAMS (1LL << 40)
/* Layers after blocks are expanded: far beyond any real model. */
#define MAX_LAYERS 100000
#define MAX_REPEAT 10000

int64_t clt__shape_numel(const clt_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
  return n;
}

int64_t clt__shape_rows(const clt_shape *s) { return s->ndim == 2 ? s->dims[0] : 1; }

const char *clt__shape_str(const clt_shape *s, char *buf, size_t len) {
  if (s->vocab)
    snprintf(buf, len, "(%d tokens)", s->dims[0]);
  else {
    size_t used = 0;
    for (int i = 0; i < s->ndim && used < len; i++)
      used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? ", " : "(", s->dims[i]);
    if (used < len) snprintf(buf + used, len - used, ")");
  }
  return buf;
}

const char *clt__layer_kind_name(const clt_layer_spec *l) { return l->kind ? l->kind->name : "?"; }

/* One line of the file, split into tokens. */
typedef struct raw_line {
  int line;
  int ntok;
  clt__token tok[CLT_SPEC_MAX_TOKENS];
  char *words;   /* the tokens' storage */
  char src[256]; /* the line as written */
  int rep_block, rep_end; /* the innermost block repeated more than once around it: its `block` and `end`
                             lines (raw indices), or -1 */
} raw_line;

/* The expanded program: layer lines in order, and the start of every
 * block pass (where the next residual's value comes from). */
typedef struct item {
  int raw;       /* index into the raw lines, or -1 for a block start */
  int pass;      /* the outermost block pass it is in (--recompute blocks' unit), or -1 */
} item;

typedef struct parser {
  const char *name;
  raw_line *lines;
  int nlines;
  item *items;
  int nitems, cap;
  int npasses;   /* outermost block passes so far */
} parser;

static void line_ctx(const parser *p, int raw, clt__spec_line *lc) {
  const raw_line *r = &p->lines[raw];
  memset(lc, 0, sizeof *lc);
  lc->name = p->name;
  lc->line = r->line;
  lc->ntok = r->ntok;
  memcpy(lc->tok, r->tok, sizeof r->tok);
  lc->src = r->src;
}

/* Split a line into tokens in place; returns the count or -1 if too many. */
static int tokenize(char *line, clt__token *tok) {
  int n = 0;
  char *p = line;
  while (*p) {
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (!*p) break;
    if (n == CLT_SPEC_MAX_TOKENS) return -1;
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

/* Read the text into non-empty raw lines. */
static int read_lines(parser *p, const char *text) {
  int cap = 0, lineno = 1;
  for (const char *s = text; *s || s == text; lineno++) {
    const char *e = strchr(s, '\n');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    char *words = clt__calloc(1, len + 1);
    if (!words) return CLT_ENOMEM;
    memcpy(words, s, len);
    char *hash = strchr(words, '#');
    if (hash) *hash = '\0';
    if (p->nlines == cap) {
      cap = cap ? 2 * cap : 32;
      raw_line *grown = realloc(p->lines, (size_t)cap * sizeof *grown);
      if (!grown) {
        free(words);
        return clt__error(CLT_ENOMEM, "out of memory parsing %s", p->name);
      }
      p->lines = grown;
    }
    raw_line *r = &p->lines[p->nlines];
    memset(r, 0, sizeof *r);
    r->line = lineno;
    r->words = words;
    r->rep_block = r->rep_end = -1;
    clt__strlcpy(r->src, words, sizeof r->src);
    for (char *c = r->src; *c; c++)
      if (*c == '\t' || *c == '\r') *c = ' '; /* keep the caret under its column */
    r->ntok = tokenize(words, r->tok);
    p->nlines++;
    if (r->ntok < 0) {
      clt__spec_line lc;
      r->ntok = 0;
      line_ctx(p, p->nlines - 1, &lc);
      return clt__line_error(&lc, 1, "too many words on one line (at most %d)", CLT_SPEC_MAX_TOKENS);
    }
    if (r->ntok == 0) free(r->words), r->words = NULL, p->nlines--;
    if (!e) break;
    s = e + 1;
  }
  return CLT_OK;
}

static int push_item(parser *p, int raw, int pass) {
  if (p->nitems == MAX_LAYERS)
    return clt__error(CLT_EFORMAT, "%s: more than %d layers once blocks are repeated", p->name, MAX_LAYERS);
  if (p->nitems == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 64;
    item *grown = realloc(p->items, (size_t)p->cap * sizeof *grown);
    if (!grown) return clt__error(CLT_ENOMEM, "out of memory parsing %s", p->name);
    p->items = grown;
  }
  p->items[p->nitems].raw = raw;
  p->items[p->nitems++].pass = pass;
  return CLT_OK;
}

static int is_word(const raw_line *r, const char *w) { return r->ntok > 0 && strcmp(r->tok[0].text, w) == 0; }

/* Expand raw lines [from, to) into items; blocks recursively. pass is the
 * outermost block pass they are in (-1: none): a pass of a top-level block
 * is the unit --recompute blocks keeps the input of (a nested block's
 * passes are part of it). */
static int expand(parser *p, int from, int to, int pass) {
  int rc = CLT_OK;
  for (int i = from; i < to; i++) {
    raw_line *r = &p->lines[i];
    clt__spec_line lc;
    line_ctx(p, i, &lc);
    if (is_word(r, "end")) return clt__line_error(&lc, r->tok[0].col, "'end' without a 'block' before it");
    if (!is_word(r, "block")) {
      CLT_TRY(push_item(p, i, pass));
      continue;
    }
    int repeat = 1, depth = 1, j;
    lc.used = 1;
    CLT_TRY(clt__opt_int(&lc, "repeat", 1, MAX_REPEAT, &repeat));
    for (int t = 1; t < lc.ntok; t++)
      if (!(lc.used & (1u << t)))
        return clt__line_error(&lc, lc.tok[t].col, "unexpected '%s': block takes only repeat=N", lc.tok[t].text);
    for (j = i + 1; j < to && depth; j++) depth += is_word(&p->lines[j], "block") - is_word(&p->lines[j], "end");
    if (depth) return clt__line_error(&lc, r->tok[0].col, "this block has no 'end'");
    for (int k = i + 1; k < j - 1; k++)
      if (is_word(&p->lines[k], "loss")) {
        clt__spec_line in;
        line_ctx(p, k, &in);
        return clt__line_error(&in, in.tok[0].col, "the loss line goes after the last layer, not inside a block");
      }
    for (int k = i + 1; repeat > 1 && k < j - 1; k++) /* inner blocks, expanded later, overwrite it */
      p->lines[k].rep_block = i, p->lines[k].rep_end = j - 1;
    for (int k = 0; k < repeat; k++) {
      int in = pass >= 0 ? pass : p->npasses++;
      CLT_TRY(push_item(p, -1, in));
      CLT_TRY(expand(p, i + 1, j - 1, in));
    }
    i = j - 1;
  }
fail:
  return rc;
}

/* The defaults every layer starts from. */
static void layer_defaults(clt_layer_spec *l, int line) {
  memset(l, 0, sizeof *l);
  l->line = line;
  l->bias = 1;
  l->init = CLT_INIT_AUTO;
  l->std = 0.02f;
  l->eps = 1e-5f;
  l->slope = 0.01f;
  l->tie = -1;
  l->skip = -1;
  l->block = -1;
}

/* name=NAME, what a later tie= refers to (the nearest layer before it of
 * that name, so a name inside a repeated block means that pass's layer). */
static int read_name(clt__spec_line *lc, clt_layer_spec *l) {
  const char *nm = NULL;
  int col = 0;
  int rc = clt__opt_word(lc, "name", &nm, &col);
  if (rc < 0 || !nm) return rc;
  if (!*nm || strlen(nm) >= sizeof l->name) return clt__line_error(lc, col, "a name is 1 to %d characters", (int)sizeof l->name - 1);
  clt__strlcpy(l->name, nm, sizeof l->name);
  return CLT_OK;
}

/* Anything not consumed is a mistake: say which. */
static int check_all_used(clt__spec_line *lc) {
  const char *kw = lc->tok[0].text;
  for (int i = 1; i < lc->ntok; i++) {
    if (lc->used & (1u << i)) continue;
    const char *eq = strchr(lc->tok[i].text, '=');
    int len = eq ? (int)(eq - lc->tok[i].text) : 0;
    for (int j = 1; eq && j < i; j++) /* an option given twice: the first was taken */
      if ((lc->used & (1u << j)) && strncmp(lc->tok[j].text, lc->tok[i].text, (size_t)len + 1) == 0)
        return clt__line_error(lc, lc->tok[i].col, "option '%.*s' is given twice for %s; give it once", len,
                               lc->tok[i].text, kw);
    if (eq) return clt__line_error(lc, lc->tok[i].col, "unknown option '%.*s' for %s", len, lc->tok[i].text, kw);
    return clt__line_error(lc, lc->tok[i].col, "unexpected '%s': %s takes no more numbers", lc->tok[i].text, kw);
  }
  return CLT_OK;
}

static int grow_layers(clt_model_spec *spec, int *cap) {
  if (spec->nlayers < *cap) return CLT_OK;
  *cap = *cap ? 2 * *cap : 16;
  clt_layer_spec *grown = realloc(spec->layers, (size_t)*cap * sizeof *grown);
  if (!grown) return clt__error(CLT_ENOMEM, "out of memory parsing %s", spec->name);
  spec->layers = grown;
  return CLT_OK;
}

/* Lay out l's parameters at the end of the arena (tied ones point at
 * their owner's). */
static int place_params(clt__spec_line *lc, clt_model_spec *spec, clt_layer_spec *l) {
  l->param_count = 0;
  l->param_offset = spec->param_count;
  for (int k = 0; k < l->nparams; k++) {
    clt_param_spec *ps = &l->param[k];
    if (ps->tied) continue;
    ps->offset = spec->param_count + l->param_count;
    l->param_count += ps->count;
  }
  spec->param_count += l->param_count;
  if (spec->param_count > MAX_PARAMS)
    return clt__line_error(lc, clt__line_col(lc), "the model has %lld parameters up to here, more than the %lld "
                           "cltrain supports", (long long)spec->param_count, (long long)MAX_PARAMS);
  return CLT_OK;
}

/* tie=NAME: the weight (param 0) of the named earlier layer, same shape. */
static int resolve_tie(clt__spec_line *lc, clt_model_spec *spec, clt_layer_spec *l, const char *target, int col) {
  int j = spec->nlayers - 1;
  while (j >= 0 && strcmp(spec->layers[j].name, target) != 0) j--;
  if (j < 0) return clt__line_error(lc, col, "tie=%s names no layer before this one (name a layer with name=%s)", target, target);
  const clt_layer_spec *o = &spec->layers[j];
  clt_param_spec *w = &l->param[0];
  if (o->nparams == 0 || o->param[0].tied)
    return clt__line_error(lc, col, "layer '%s' (line %d) has no weight of its own to share", target, o->line);
  const clt_param_spec *ow = &o->param[0];
  int same = ow->ndim == w->ndim;
  for (int d = 0; same && d < w->ndim; d++) same = ow->shape[d] == w->shape[d];
  if (!same)
    return clt__line_error(lc, col, "tie=%s: its weight is %lld x %lld but this layer needs %lld x %lld", target,
                           (long long)ow->shape[0], (long long)(ow->ndim > 1 ? ow->shape[1] : 1),
                           (long long)w->shape[0], (long long)(w->ndim > 1 ? w->shape[1] : 1));
  w->tied = 1;
  w->offset = ow->offset;
  l->tie = j;
  return CLT_OK;
}

/* `act=NAME` on the line just added: the activation NAME as a layer of its
 * own after it, at the same line (its defaults: leakyrelu's slope 0.01). */
static int add_activation(clt__spec_line *lc, clt_model_spec *spec, const char *word, int col, int *cap) {
  const clt__layer_kind *kind = clt__layer_kind_find(word);
  if (!kind || !(kind->flags & CLT_KIND_ACTIVATION))
    return clt__line_error(lc, col, "act=%s is not an activation (relu, leakyrelu, gelu, tanh, sigmoid, silu)", word);
  int rc = grow_layers(spec, cap);
  if (rc < 0) return rc;
  clt_layer_spec *l = &spec->layers[spec->nlayers];
  layer_defaults(l, lc->line);
  l->kind = kind;
  l->in_shape = l->out_shape = spec->layers[spec->nlayers - 1].out_shape;
  l->param_offset = spec->param_count;
  spec->nlayers++;
  return CLT_OK;
}

/* concat NAME, residual NAME: the nearest `save NAME` before it (l->skip),
 * written on an earlier line, and not inside a repeated block that the
 * line is outside (which pass's value would it be?). */
static int resolve_saved(const parser *p, int raw, clt__spec_line *lc, const clt_model_spec *spec, clt_layer_spec *l) {
  const char *nm = l->skip_name, *kw = lc->tok[0].text;
  int j = spec->nlayers - 1;
  while (j >= 0 && !(spec->layers[j].kind == &clt__kind_save && strcmp(spec->layers[j].skip_name, nm) == 0)) j--;
  int rs = -1; /* the save's raw line */
  for (int k = 0; j >= 0 && k < p->nlines && rs < 0; k++)
    if (p->lines[k].line == spec->layers[j].line) rs = k;
  if (j < 0 || rs > raw) {
    for (int k = raw + 1; k < p->nlines; k++)
      if (is_word(&p->lines[k], "save") && p->lines[k].ntok > 1 && strcmp(p->lines[k].tok[1].text, nm) == 0)
        return clt__line_error(lc, l->skip_col, "%s %s: '%s' is saved later, at line %d; a value is saved before "
                               "the line that reads it", kw, nm, nm, p->lines[k].line);
    char known[200] = "";
    size_t used = 0;
    for (int k = 0; k < spec->nlayers && used < sizeof known; k++)
      if (spec->layers[k].kind == &clt__kind_save && !strstr(known, spec->layers[k].skip_name))
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", spec->layers[k].skip_name);
    return clt__line_error(lc, l->skip_col, "%s %s: no line 'save %s' before this one (saved so far: %s)", kw, nm, nm,
                           used ? known : "none");
  }
  const raw_line *sr = &p->lines[rs];
  if (sr->rep_block >= 0 && !(raw > sr->rep_block && raw < sr->rep_end))
    return clt__line_error(lc, l->skip_col, "%s %s: 'save %s' (line %d) is inside the block at line %d, which "
                           "repeats, and this line is outside it: which pass's value is meant? Read it inside the "
                           "block, or save it outside", kw, nm, nm, sr->line, p->lines[sr->rep_block].line);
  l->skip = j;
  return CLT_OK;
}

/* One layer line: parse, connect, infer, place. */
static int add_layer(parser *p, int raw, clt_model_spec *spec, int mark, int *cap) {
  int rc = CLT_OK;
  clt__spec_line lc;
  line_ctx(p, raw, &lc);
  CLT_TRY(grow_layers(spec, cap));
  clt_layer_spec *l = &spec->layers[spec->nlayers];
  layer_defaults(l, lc.line);
  const char *kw = lc.tok[0].text;
  if (!(l->kind = clt__layer_kind_find(kw))) {
    char known[512];
    return clt__line_error(&lc, lc.tok[0].col, "unknown layer '%s' (known: %s)", kw,
                           clt__layer_kind_list(known, sizeof known));
  }
  lc.used = 1;
  CLT_TRY(read_name(&lc, l));
  const char *tie = NULL, *act = NULL;
  int tie_col = 0, act_col = 0;
  if (l->kind == &clt__kind_linear) CLT_TRY(clt__opt_word(&lc, "tie", &tie, &tie_col));
  if (l->kind == &clt__kind_linear || l->kind == &clt__kind_conv2d || l->kind == &clt__kind_conv1d ||
      l->kind == &clt__kind_conv3d)
    CLT_TRY(clt__opt_word(&lc, "act", &act, &act_col));
  if (l->kind->parse) CLT_TRY(l->kind->parse(&lc, l));
  CLT_TRY(check_all_used(&lc));

  int first = spec->nlayers == 0, is_input = (l->kind->flags & CLT_KIND_INPUT) != 0;
  if (first && !is_input)
    return clt__line_error(&lc, lc.tok[0].col, "the first layer must be 'input' giving the sample shape (input 784, "
                           "input 1 28 28, or input tokens 1024 vocab=50257), not '%s'", kw);
  if (!first && is_input) return clt__line_error(&lc, lc.tok[0].col, "input may only be the first layer");
  if (!first) l->in_shape = spec->layers[spec->nlayers - 1].out_shape;
  if (l->skip_name[0] && l->kind != &clt__kind_save) CLT_TRY(resolve_saved(p, raw, &lc, spec, l));
  else if (l->kind == &clt__kind_residual) {
    if (mark < 0)
      return clt__line_error(&lc, lc.tok[0].col, "residual adds the value at the start of a block or at the last "
                             "residual, and there is none before it: put it in a 'block' (or name a value: "
                             "save NAME ... residual NAME)");
    l->skip = mark;
  }
  if (l->skip >= 0) {
    l->skip_shape = spec->layers[l->skip].out_shape;
    l->skip_line = spec->layers[l->skip].line;
  }
  if (l->kind == &clt__kind_residual) {
    char a[64], b[64];
    const clt_shape *s = &l->skip_shape;
    if (s->ndim != l->in_shape.ndim || clt__shape_numel(s) != clt__shape_numel(&l->in_shape) || s->vocab)
      return clt__line_error(&lc, l->skip_name[0] ? l->skip_col : lc.tok[0].col, "residual adds %s (line %d's "
                             "output) to %s: the shapes differ", clt__shape_str(s, a, sizeof a), l->skip_line,
                             clt__shape_str(&l->in_shape, b, sizeof b));
  }
  if (l->in_shape.vocab && !first && l->kind != &clt__kind_embedding)
    return clt__line_error(&lc, lc.tok[0].col, "%s cannot take token ids; put 'embedding WIDTH' right after the input",
                           kw);
  l->out_shape = l->in_shape;
  if (l->kind->infer) CLT_TRY(l->kind->infer(&lc, l));
  if (tie) CLT_TRY(resolve_tie(&lc, spec, l, tie, tie_col));
  if (clt__shape_numel(&l->out_shape) > MAX_VALUES) {
    char sh[64];
    return clt__line_error(&lc, lc.tok[0].col, "%s holds %lld values per sample, more than the %d cltrain supports",
                           clt__shape_str(&l->out_shape, sh, sizeof sh), (long long)clt__shape_numel(&l->out_shape),
                           MAX_VALUES);
  }
  CLT_TRY(place_params(&lc, spec, l));
  spec->nlayers++;
  if (act) CLT_TRY(add_activation(&lc, spec, act, act_col, cap));
fail:
  return rc;
}

/* The loss kinds a `loss` line names, by clt_loss_kind. */
static const char *const loss_names[] = {"crossentropy", "mse", "l1", "huber"};

const char *clt_loss_name(clt_loss_kind k) {
  return (int)k >= 0 && (int)k < (int)(sizeof loss_names / sizeof *loss_names) ? loss_names[k] : NULL;
}

/* `loss KIND [delta=D]`: after the last layer, once. */
static int add_loss(parser *p, int raw, clt_model_spec *spec) {
  int rc = CLT_OK;
  clt__spec_line lc;
  line_ctx(p, raw, &lc);
  int col = lc.tok[0].col;
  if (spec->loss_line)
    return clt__line_error(&lc, col, "a second loss line (the first is line %d); give the loss once", spec->loss_line);
  if (spec->nlayers == 0)
    return clt__line_error(&lc, col, "the loss line goes after the last layer, and there are no layers before it "
                           "(the first line must be 'input')");
  if (lc.ntok < 2 || strchr(lc.tok[1].text, '='))
    return clt__line_error(&lc, col, "loss needs a kind: loss mse, loss l1, loss huber [delta=1.0] or loss "
                           "crossentropy");
  const char *kind = lc.tok[1].text;
  int k = 0, n = (int)(sizeof loss_names / sizeof *loss_names);
  while (k < n && strcmp(loss_names[k], kind) != 0) k++;
  if (k == n)
    return clt__line_error(&lc, lc.tok[1].col, "unknown loss '%s' (known: crossentropy, mse, l1, huber)", kind);
  lc.used = 3;
  spec->loss = k;
  spec->loss_line = lc.line;
  spec->huber_delta = 1.0f;
  if (k == CLT_LOSS_HUBER) CLT_TRY(clt__opt_float(&lc, "delta", 0, 1e30, 1, &spec->huber_delta));
  for (int i = 2; i < lc.ntok; i++)
    if (!(lc.used & (1u << i)) && strncmp(lc.tok[i].text, "delta=", 6) == 0)
      return clt__line_error(&lc, lc.tok[i].col, "delta= is an option of loss huber, not of %s", kind);
  CLT_TRY(check_all_used(&lc));
fail:
  return rc;
}

/* The model's output must fit its loss: one score per class (at least 2)
 * for cross-entropy; any shape for regression, one target per value. */
static int check_output(const parser *p, clt_model_spec *spec, int loss_raw) {
  const clt_layer_spec *last = &spec->layers[spec->nlayers - 1];
  const clt_shape *shape = &last->out_shape;
  char s[64];
  if (spec->loss != CLT_LOSS_CROSSENTROPY) {
    if (spec->nlayers < 2 || spec->param_count == 0)
      return clt__error(CLT_EFORMAT, "%s:%d: the model ends with %s and has no parameters; a regression model needs "
                        "a layer with parameters after the input (e.g. 'linear 3')", p->name, last->line,
                        clt__shape_str(shape, s, sizeof s));
    spec->num_classes = 0;
    spec->labels_per_sample = clt__shape_numel(shape);
    return CLT_OK;
  }
  if (spec->nlayers < 2 || shape->ndim > 2 || shape->vocab || spec->param_count == 0)
    return clt__error(CLT_EFORMAT, "%s:%d: the last layer must give one score per class (e.g. 'linear 10'), or per "
                      "position and token ('linear VOCAB' on a sequence), but the model ends with %s%s; for "
                      "regression on outputs of any shape add a line 'loss mse' (or l1, huber)", p->name, last->line,
                      clt__shape_str(shape, s, sizeof s), spec->param_count == 0 ? " and has no parameters" : "");
  int classes = shape->dims[shape->ndim - 1];
  if (classes < 2) {
    if (loss_raw >= 0) {
      clt__spec_line lc;
      line_ctx(p, loss_raw, &lc);
      return clt__line_error(&lc, lc.tok[1].col, "loss crossentropy needs at least 2 classes but the model ends with "
                             "%d output; for regression use loss mse, l1 or huber", classes);
    }
    return clt__error(CLT_EFORMAT, "%s:%d: the model ends with %d output; classification needs at least 2 classes "
                      "(for regression add a line 'loss mse', or l1, huber)", p->name, last->line, classes);
  }
  spec->num_classes = classes;
  spec->labels_per_sample = clt__shape_rows(shape);
  return CLT_OK;
}

/* A skip branch's gradient waits from its residual's backward until the
 * backward reaches the layer the branch started at (where it is added to
 * the gradient at that layer's output): give each residual a buffer that
 * no other waiting one holds. busy_until[s] is the layer slot s waits for;
 * it is free again from that layer down (-1). */
static int assign_skip_slots(clt_model_spec *spec) {
  int *busy_until = clt__calloc((size_t)spec->nlayers, sizeof *busy_until), nslots = 0; /* at most a slot a layer */
  if (!busy_until) return CLT_ENOMEM;
  for (int i = spec->nlayers - 1; i >= 0; i--) {
    clt_layer_spec *l = &spec->layers[i];
    for (int s = 0; s < nslots; s++)
      if (busy_until[s] >= i) busy_until[s] = -1;
    if (l->skip < 0) continue;
    int s = 0;
    while (s < nslots && busy_until[s] >= 0) s++;
    if (s == nslots) nslots++;
    busy_until[s] = l->skip;
    l->skip_slot = s;
  }
  spec->skip_slots = nslots;
  free(busy_until);
  return CLT_OK;
}

/* init=auto (linear and conv2d by default): He / Kaiming uniform over
 * fan_in, U(-g sqrt(3 / fan_in), g sqrt(3 / fan_in)), with the gain g of
 * the activation that follows the layer (its kind's gain: kinds_dense.c;
 * kinds flagged CLT_KIND_KEEPS_GAIN in between, flatten, dropout and
 * pooling, change nothing), 1 where none follows (LeCun). The output layer, whose values are the softmax's
 * scores, starts at zero: every class gets the same score, so the first
 * loss is ln(classes) whatever the features' scale (Fixup, Zhang et al.
 * 2019, zero-initialises the classifier likewise). The old default, ReLU's
 * gain everywhere, gave the CNN's output layer scores of std ~3 and a
 * first loss of 3.88 against ln 10 = 2.30. */
static void default_gains(clt_model_spec *spec) {
  for (int i = 0; i < spec->nlayers; i++) {
    clt_layer_spec *l = &spec->layers[i];
    if (l->init != CLT_INIT_AUTO || l->nparams == 0) continue;
    int j = i + 1;
    while (j < spec->nlayers && (spec->layers[j].kind->flags & CLT_KIND_KEEPS_GAIN)) j++;
    const clt_layer_spec *next = j < spec->nlayers ? &spec->layers[j] : NULL;
    double gain = next && next->kind->gain ? next->kind->gain(next) : 1;
    for (int k = 0; k < l->nparams; k++) {
      clt_param_spec *p = &l->param[k];
      if (p->tied || p->init != CLT_PINIT_UNIFORM) continue;
      if (next) p->scale *= gain;
      else p->init = CLT_PINIT_ZEROS, p->scale = 0;
    }
  }
}

int clt__spec_parse(const char *text, const char *name, clt_model_spec **out) {
  int rc = CLT_OK;
  clt_model_spec *spec = clt__calloc(1, sizeof *spec);
  parser p = {.name = name ? name : "<model>"};
  *out = NULL;
  if (!spec || !(spec->name = clt__strdup(p.name)) || !(spec->text = clt__strdup(text))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  CLT_TRY(read_lines(&p, text));
  CLT_TRY(expand(&p, 0, p.nlines, -1));
  int cap = 0, mark = -1, loss_raw = -1;
  for (int i = 0; i < p.nitems; i++) {
    if (p.items[i].raw < 0) { /* a block pass starts: the next residual adds this */
      mark = spec->nlayers - 1;
      continue;
    }
    if (is_word(&p.lines[p.items[i].raw], "loss")) {
      CLT_TRY(add_loss(&p, p.items[i].raw, spec));
      loss_raw = p.items[i].raw;
      continue;
    }
    if (spec->loss_line) {
      clt__spec_line lc;
      line_ctx(&p, p.items[i].raw, &lc);
      rc = clt__line_error(&lc, lc.tok[0].col, "a layer after the loss line (line %d): the loss goes after the "
                           "last layer", spec->loss_line);
      goto fail;
    }
    int added = spec->nlayers;
    CLT_TRY(add_layer(&p, p.items[i].raw, spec, mark, &cap));
    for (; added < spec->nlayers; added++) spec->layers[added].block = p.items[i].pass; /* with its act= */
    if (p.items[i].pass >= spec->nblocks) spec->nblocks = p.items[i].pass + 1;
    if (spec->layers[spec->nlayers - 1].kind == &clt__kind_residual) mark = spec->nlayers - 1;
  }
  if (spec->nlayers == 0) {
    rc = clt__error(CLT_EFORMAT, "%s: the model spec has no layers (it needs at least 'input' and one more)", p.name);
    goto fail;
  }
  CLT_TRY(check_output(&p, spec, loss_raw));
  CLT_TRY(assign_skip_slots(spec));
  for (int i = 0; i < spec->nlayers; i++) {
    const clt_layer_spec *l = &spec->layers[i];
    if (l->skip >= 0 && spec->layers[l->skip].block != l->block) spec->layers[l->skip].skip_outside = 1;
  }
  default_gains(spec);
  *out = spec;
  spec = NULL;
fail:
  for (int i = 0; i < p.nlines; i++) free(p.lines[i].words);
  free(p.lines);
  free(p.items);
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
