/*
 * kinds_groupnorm.c: `groupnorm G [eps=1e-5]`, torch.nn.GroupNorm(G, C) as
 * an entry of the layer table (model/layer.h) over src/nn/groupnorm.c: the
 * channels (dims[0] of (C, ...); the features of a flat input) in G groups
 * of C / G, each sample's group normalised over its channels and positions,
 * then a per-channel weight (ones) and bias (zeros), PyTorch's `weight` and
 * `bias`. Kept for the backward: a mean and 1/std per group (f32).
 */
#include "model/layer.h"
#include "nn/nn.h"

#include <stdio.h>

static int groupnorm_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc = CLT_OK;
  CLT_TRY(clt__need_int(lc, 0, "the number of groups", "groupnorm 8", 1, 1000000, &l->groups));
  CLT_TRY(clt__opt_float(lc, "eps", 0, 1, 1, &l->eps));
fail:
  return rc;
}

static int groupnorm_infer(clt__spec_line *lc, clt_layer_spec *l) {
  char s[64];
  int64_t c = l->in_shape.dims[0];
  if (c % l->groups)
    return clt__line_error(lc, lc->ntok > 1 ? lc->tok[1].col : clt__line_col(lc), "groupnorm %d: %d groups do not "
                           "divide the %lld channels of %s", l->groups, l->groups, (long long)c,
                           clt__shape_str(&l->in_shape, s, sizeof s));
  clt__add_param(l, "weight", 1, &c, CLT_PINIT_ONES, 0, 0);
  clt__add_param(l, "bias", 1, &c, CLT_PINIT_ZEROS, 0, 0);
  l->saved_f32 = 2 * l->groups; /* mean, rstd per group */
  return CLT_OK;
}

static int groupnorm_stats(const clt__layer_io *io, clt_tensor *mean, clt_tensor *rstd) {
  int rc = CLT_OK;
  int64_t g = io->l->groups;
  CLT_TRY(clt__io_aux(io, 0, CLT_F32, io->n * g, mean));
  CLT_TRY(clt__io_aux(io, g, CLT_F32, io->n * g, rstd));
fail:
  return rc;
}

static int groupnorm_forward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_tensor w, b, mean, rstd;
  CLT_TRY(clt__io_param(io, 0, &w));
  CLT_TRY(clt__io_param(io, 1, &b));
  CLT_TRY(groupnorm_stats(io, &mean, &rstd));
  CLT_TRY(clt_nn_groupnorm_forward(io->ctx, io->l->groups, io->l->eps, &io->x, &w, &b, &io->y, &mean, &rstd));
fail:
  return rc;
}

static int groupnorm_backward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_tensor w, dw, db, mean, rstd;
  CLT_TRY(clt__io_param(io, 0, &w));
  CLT_TRY(clt__io_grad(io, 0, &dw));
  CLT_TRY(clt__io_grad(io, 1, &db));
  CLT_TRY(groupnorm_stats(io, &mean, &rstd));
  CLT_TRY(clt_nn_groupnorm_backward(io->ctx, io->l->groups, &io->x, &w, &mean, &rstd, &io->dy,
                                    io->dx.buf ? &io->dx : NULL, &dw, &db));
fail:
  return rc;
}

static void groupnorm_describe(const clt_layer_spec *l, char *buf, size_t len) {
  snprintf(buf, len, "groupnorm %d", l->groups);
}

const clt__layer_kind clt__kind_groupnorm = {.name = "groupnorm",
                                             .parse = groupnorm_parse,
                                             .infer = groupnorm_infer,
                                             .forward = groupnorm_forward,
                                             .backward = groupnorm_backward,
                                             .describe = groupnorm_describe};
