/*
 * kinds_skip.c: named skip connections, the U-Net's, as entries of the
 * layer table (model/layer.h) on the residual's skip mechanism:
 *
 *   save NAME     the identity, naming the value at its line (a view: no
 *       copy, no kernel; `save name=NAME` reads the same);
 *   concat NAME   torch.cat([x, saved], dim=channels): the saved value's
 *       channels after the input's, per sample (dims[0] of (C, ...); the
 *       features of a flat input). Every other dimension must agree.
 *   residual NAME x + the saved value (the residual of kinds_dense.c with
 *       its source named rather than the block's start).
 *
 * The parser (spec.c) finds the nearest `save NAME` before the line and
 * sets l->skip to it, with its shape in l->skip_shape. Like a residual's,
 * the saved value's part of the gradient waits in a skip slot of its own
 * from the concat's backward until the backward reaches the save, where the
 * runner adds it (model/run.c); so several saves may be pending at once,
 * nested as a U-Net's levels are.
 *
 * A layer rather than an option on every line (name= already names a layer
 * for tie=): `conv2d 16 act=relu` is two layers, and an option on it would
 * leave unclear which output is meant; a `save` line marks the point in the
 * spec where the value is taken, read as the U-Net's diagram is.
 */
#include "model/layer.h"
#include "nn/nn.h"

#include <stdio.h>
#include <string.h>

/* NAME, the first word after the keyword (required), or save's name=. */
static int read_skip_name(clt__spec_line *lc, clt_layer_spec *l, const char *example) {
  const char *kw = lc->tok[0].text;
  if (lc->ntok < 2 || strchr(lc->tok[1].text, '=')) {
    if (l->kind == &clt__kind_save && l->name[0]) { /* save name=NAME */
      clt__strlcpy(l->skip_name, l->name, sizeof l->skip_name);
      l->skip_col = clt__line_col(lc);
      return CLT_OK;
    }
    if (l->kind == &clt__kind_residual) return CLT_OK; /* the block's start */
    return clt__line_error(lc, clt__line_col(lc), "%s needs a name (%s)%s", kw, example,
                           l->name[0] ? "; name= would name this layer itself" : "");
  }
  const clt__token *t = &lc->tok[1];
  if (strlen(t->text) >= sizeof l->skip_name)
    return clt__line_error(lc, t->col, "a name is 1 to %d characters", (int)sizeof l->skip_name - 1);
  clt__strlcpy(l->skip_name, t->text, sizeof l->skip_name);
  l->skip_col = t->col;
  lc->used |= 1u << 1;
  return CLT_OK;
}

static int save_parse(clt__spec_line *lc, clt_layer_spec *l) { return read_skip_name(lc, l, "save enc1"); }
static int concat_parse(clt__spec_line *lc, clt_layer_spec *l) {
  return read_skip_name(lc, l, "concat enc1, after a line save enc1");
}
int clt__residual_parse(clt__spec_line *lc, clt_layer_spec *l) {
  return read_skip_name(lc, l, "residual NAME, after a line save NAME");
}

static void describe_named(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "%s %s", l->kind->name, l->skip_name);
}

const clt__layer_kind clt__kind_save = {.name = "save",
                                        .flags = CLT_KIND_VIEW | CLT_KIND_KEEPS_GAIN,
                                        .parse = save_parse,
                                        .describe = describe_named};

/* ---- concat: y = [x | saved] along dims[0] ---- */

static int concat_infer(clt__spec_line *lc, clt_layer_spec *l) {
  const clt_shape *a = &l->in_shape, *b = &l->skip_shape;
  int same = a->ndim == b->ndim && !b->vocab;
  for (int d = 1; same && d < a->ndim; d++) same = a->dims[d] == b->dims[d];
  if (!same) {
    char sa[64], sb[64];
    return clt__line_error(lc, l->skip_col, "concat %s: the value saved at line %d is %s but this layer's input is "
                           "%s; all but the first dimension (the channels) must agree", l->skip_name, l->skip_line,
                           clt__shape_str(b, sb, sizeof sb), clt__shape_str(a, sa, sizeof sa));
  }
  l->out_shape = *a;
  l->out_shape.dims[0] = a->dims[0] + b->dims[0];
  return CLT_OK;
}

static int concat_forward(const clt__layer_io *io) {
  return clt_nn_concat_forward(io->ctx, &io->x, &io->skip, &io->y);
}

/* The input's part of dy to dx (when wanted), the saved value's into its
 * skip slot, which the runner adds to the gradient at the save. */
static int concat_backward(const clt__layer_io *io) {
  return clt_nn_concat_backward(io->ctx, &io->dy, io->dx.buf ? &io->dx : NULL, &io->skip);
}

const clt__layer_kind clt__kind_concat = {.name = "concat",
                                          .flags = CLT_KIND_KEEPS_GAIN,
                                          .parse = concat_parse,
                                          .infer = concat_infer,
                                          .forward = concat_forward,
                                          .backward = concat_backward,
                                          .describe = describe_named};
