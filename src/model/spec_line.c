/*
 * spec_line.c: reading one line of a model spec: numbers and options that
 * are checked whole ("3x" is an error naming the text), and errors as
 * file:line:col with the line quoted and a caret under the column. The
 * layer kinds' parse functions (model/kinds_*.c) are built on these.
 */
#include "model/layer.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int clt__line_error(clt__spec_line *lc, int col, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *src = lc->src ? lc->src : "";
  int caret = col - 1 < (int)strlen(src) + 1 ? col - 1 : 0;
  return clt__error(CLT_EFORMAT, "%s:%d:%d: %s\n    %s\n    %*s^", lc->name, lc->line, col, msg, src, caret, "");
}

int clt__line_col(const clt__spec_line *lc) { return lc->ntok ? lc->tok[0].col : 1; }

static int parse_int(clt__spec_line *lc, const clt__token *t, const char *what, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(t->text, &end, 10);
  if (end == t->text || *end || errno)
    return clt__line_error(lc, t->col, "%s must be a whole number, not '%s'", what, t->text);
  if (v < lo || v > hi) return clt__line_error(lc, t->col, "%s must be from %d to %d, not %ld", what, lo, hi, v);
  *out = (int)v;
  return CLT_OK;
}

static int parse_float(clt__spec_line *lc, const clt__token *t, const char *what, double lo, double hi, int lo_open,
                       float *out) {
  char *end;
  errno = 0;
  double v = strtod(t->text, &end);
  if (end == t->text || *end || errno || !isfinite(v))
    return clt__line_error(lc, t->col, "%s must be a number, not '%s'", what, t->text);
  if (v < lo || v > hi || (lo_open && v == lo))
    return clt__line_error(lc, t->col, "%s must be %s %g and at most %g, not '%s'", what,
                           lo_open ? "above" : "at least", lo, hi, t->text);
  *out = (float)v;
  return CLT_OK;
}

/* The i-th positional (non key=value) token after the keyword, or NULL. */
static const clt__token *positional(clt__spec_line *lc, int i) {
  for (int t = 1; t < lc->ntok; t++) {
    if (strchr(lc->tok[t].text, '=')) continue;
    if (i-- == 0) {
      lc->used |= 1u << t;
      return &lc->tok[t];
    }
  }
  return NULL;
}

static const clt__token *option(clt__spec_line *lc, const char *key, clt__token *value) {
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

static int missing(clt__spec_line *lc, const char *what, const char *example) {
  const clt__token *last = &lc->tok[lc->ntok - 1];
  return clt__line_error(lc, last->col + (int)strlen(last->text), "%s needs %s (%s)", lc->tok[0].text, what,
                         example);
}

int clt__need_int(clt__spec_line *lc, int i, const char *what, const char *example, int lo, int hi, int *out) {
  const clt__token *t = positional(lc, i);
  if (!t) return missing(lc, what, example);
  return parse_int(lc, t, what, lo, hi, out);
}

int clt__need_float(clt__spec_line *lc, int i, const char *what, const char *example, double lo, double hi,
                    int lo_open, float *out) {
  const clt__token *t = positional(lc, i);
  if (!t) return missing(lc, what, example);
  return parse_float(lc, t, what, lo, hi, lo_open, out);
}

int clt__count_positionals(const clt__spec_line *lc) {
  int n = 0;
  for (int t = 1; t < lc->ntok; t++) n += strchr(lc->tok[t].text, '=') == NULL;
  return n;
}

int clt__opt_positional_float(clt__spec_line *lc, int i, const char *what, double lo, double hi, float *out) {
  const clt__token *t = positional(lc, i);
  if (!t) return 0;
  int rc = parse_float(lc, t, what, lo, hi, 0, out);
  return rc < 0 ? rc : 1;
}

int clt__flag(clt__spec_line *lc, const char *word) {
  for (int t = 1; t < lc->ntok; t++)
    if (!(lc->used & (1u << t)) && strcmp(lc->tok[t].text, word) == 0) {
      lc->used |= 1u << t;
      return 1;
    }
  return 0;
}

int clt__opt_int(clt__spec_line *lc, const char *key, int lo, int hi, int *inout) {
  clt__token v;
  if (!option(lc, key, &v)) return CLT_OK;
  return parse_int(lc, &v, key, lo, hi, inout);
}

int clt__opt_float(clt__spec_line *lc, const char *key, double lo, double hi, int lo_open, float *inout) {
  clt__token v;
  if (!option(lc, key, &v)) return CLT_OK;
  return parse_float(lc, &v, key, lo, hi, lo_open, inout);
}

int clt__opt_bool(clt__spec_line *lc, const char *key, int *inout) {
  clt__token v;
  if (!option(lc, key, &v)) return CLT_OK;
  if (strcmp(v.text, "true") == 0 || strcmp(v.text, "1") == 0 || strcmp(v.text, "yes") == 0) *inout = 1;
  else if (strcmp(v.text, "false") == 0 || strcmp(v.text, "0") == 0 || strcmp(v.text, "no") == 0) *inout = 0;
  else return clt__line_error(lc, v.col, "%s must be true or false, not '%s'", key, v.text);
  return CLT_OK;
}

int clt__opt_word(clt__spec_line *lc, const char *key, const char **out, int *col) {
  clt__token v;
  if (!option(lc, key, &v)) return CLT_OK;
  *out = v.text;
  *col = v.col;
  return CLT_OK;
}

int clt__opt_init(clt__spec_line *lc, clt_layer_spec *l) {
  clt__token v;
  if (option(lc, "init", &v)) {
    if (strcmp(v.text, "auto") == 0) l->init = CLT_INIT_AUTO;
    else if (strcmp(v.text, "he") == 0 || strcmp(v.text, "kaiming") == 0) l->init = CLT_INIT_HE;
    else if (strcmp(v.text, "xavier") == 0 || strcmp(v.text, "glorot") == 0) l->init = CLT_INIT_XAVIER;
    else if (strcmp(v.text, "normal") == 0) l->init = CLT_INIT_NORMAL;
    else return clt__line_error(lc, v.col, "init must be auto, he, xavier or normal, not '%s'", v.text);
  }
  return clt__opt_float(lc, "std", 0, 10, 1, &l->std);
}

clt_param_spec *clt__add_param(clt_layer_spec *l, const char *name, int ndim, const int64_t *shape,
                               clt_param_init init, double scale, int decay) {
  clt_param_spec *p = &l->param[l->nparams++];
  memset(p, 0, sizeof *p);
  clt__strlcpy(p->name, name, sizeof p->name);
  p->ndim = ndim;
  p->count = 1;
  for (int d = 0; d < ndim; d++) p->shape[d] = shape[d], p->count *= shape[d];
  p->init = init;
  p->scale = scale;
  p->decay = decay;
  return p;
}

void clt__weight_init(const clt_layer_spec *l, double fan_in, double fan_out, clt_param_init *init, double *scale) {
  /* Uniform(-a, a) has variance a^2/3: He wants 2/fan_in, Xavier
   * 2/(fan_in+fan_out); auto starts at 1/fan_in (LeCun: gain 1), and the
   * spec's last pass sets its gain from the layer that follows. */
  if (l->init == CLT_INIT_NORMAL) *init = CLT_PINIT_NORMAL, *scale = l->std;
  else if (l->init == CLT_INIT_XAVIER) *init = CLT_PINIT_UNIFORM, *scale = sqrt(6.0 / (fan_in + fan_out));
  else if (l->init == CLT_INIT_AUTO) *init = CLT_PINIT_UNIFORM, *scale = sqrt(3.0 / fan_in);
  else *init = CLT_PINIT_UNIFORM, *scale = sqrt(6.0 / fan_in);
}
