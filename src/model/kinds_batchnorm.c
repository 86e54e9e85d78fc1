/*
 * kinds_batchnorm.c: the batchnorm layer kind: torch.nn.BatchNorm1d/2d/3d
 * over the channels of a sample (C, ...) (dims[0]), or over the features
 * of a flat (F), with PyTorch's SyncBatchNorm in training: the mean and
 * biased variance are the GLOBAL batch's, every replica's samples of every
 * rank, so that N replicas compute what one device computes on the whole
 * batch (within float rounding); the backward's sums of dy and dy * xhat
 * are global too. Eval uses the running statistics.
 *
 * Each replica's kernels give per-channel partial sums (nn/batchnorm.c);
 * they are read to the host as doubles and added over replicas and ranks
 * by the replica's sum_stats hook (model/replica.h: data parallelism's,
 * src/dp; without one, one device's are the batch's). A replica's mean
 * and sum of squared deviations (two passes, accurate) go over the wire as
 * (count, sum, sum of squares) in double, so the sums add plainly and the
 * variance loses only double's rounding. The host then computes the
 * statistics and the running ones (so every replica has the same bits),
 * and uploads them.
 *
 * Parameters, as PyTorch's state_dict: weight, bias (C), and the buffers
 * running_mean, running_var (C) (clt_param_spec.buffer: no gradient, no
 * decay; every optimizer leaves them as they are), which the forward
 * writes, so weights files and checkpoints carry them.
 *
 * Per replica kept (aux, f32): mean, var (C each) of the last forward, the
 * global means of dy and dy * xhat (C each; in the forward, the unbiased
 * variance for the running one), and the partial sums (2C).
 */
#include "model/layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"

enum { P_WEIGHT, P_BIAS, P_MEAN, P_VAR };

/* Channels C and the positions S of a sample that share them. */
static void bn_dims(const clt_layer_spec *l, int64_t *C, int64_t *S) {
  const clt_shape *in = &l->in_shape;
  *C = in->dims[0], *S = 1;
  for (int d = 1; d < in->ndim; d++) *S *= in->dims[d];
}

static int bn_parse(clt__spec_line *lc, clt_layer_spec *l) {
  int rc;
  l->momentum = 0.1f;
  if ((rc = clt__opt_float(lc, "eps", 0, 1, 1, &l->eps)) < 0) return rc;
  return clt__opt_float(lc, "momentum", 0, 1, 0, &l->momentum);
}

static int bn_infer(clt__spec_line *lc, clt_layer_spec *l) {
  int64_t C, S;
  bn_dims(l, &C, &S);
  clt__add_param(l, "weight", 1, &C, CLT_PINIT_ONES, 0, 0);
  clt__add_param(l, "bias", 1, &C, CLT_PINIT_ZEROS, 0, 0);
  clt__add_param(l, "running_mean", 1, &C, CLT_PINIT_ZEROS, 0, 0)->buffer = 1;
  clt__add_param(l, "running_var", 1, &C, CLT_PINIT_ONES, 0, 0)->buffer = 1;
  l->saved_f32 = 6 * C; /* per sample, so that a batch of one holds the 6C floats kept */
  return CLT_OK;
}

/* The kept f32 vectors: k-th block of C floats of the layer's aux. */
static int kept(const clt__layer_io *io, int k, int64_t count, clt_tensor *t) {
  int64_t C, S;
  bn_dims(io->l, &C, &S);
  int rc = clt__io_aux(io, 0, CLT_F32, 6 * C, t);
  if (rc < 0) return rc;
  return clt_tensor_view(t->buf, t->offset + (size_t)(k * C) * 4, CLT_F32, 1, &count, t);
}

/* x as (n, C, S). */
static int as_ncs(const clt__layer_io *io, const clt_tensor *t, clt_tensor *out) {
  int64_t C, S;
  bn_dims(io->l, &C, &S);
  int64_t shape[3] = {io->n, C, S};
  return clt__reshape(t, 3, shape, out);
}

static int sum_over_replicas(const clt__layer_io *io, double *sums, int count) {
  return io->sum_stats ? io->sum_stats(io->grad_user, io->index, sums, count) : CLT_OK;
}

/* The values a channel's statistics are over, in the global batch: more
 * than one, or its variance is 0 and the output only the bias. */
static int check_count(const clt__layer_io *io, double M) {
  if (M >= 2) return CLT_OK;
  int64_t C, S;
  bn_dims(io->l, &C, &S);
  return clt__error(CLT_EINVAL, "batchnorm in training needs more than one value per channel, and the batch gives "
                    "%.0f (samples x %lld positions); train with a batch of at least 2 samples", M, (long long)S);
}

/* 1 when the hook adds this replica's sums to other replicas' or ranks'
 * (they go through the host), 0 when they are the batch's alone: then
 * they stay on the device, and a step's 8 batchnorm layers save 16 to 24
 * host round trips (each a wait for the queue: PoCL's worker thread wakes,
 * runs the transfer and signals back). */
static int stats_shared(const clt__layer_io *io) {
  return io->sum_stats && io->sum_stats(io->grad_user, io->index, NULL, 0) != 0;
}

/* The global batch's mean, biased and unbiased variances into kept 0, 1
 * and 2 (2: the backward's means' room, free until then) from the
 * replicas' sums, computed on the host in double so that every replica
 * has the same bits. */
static int bn_shared_stats(const clt__layer_io *io, const clt_tensor *x, const clt_tensor *part,
                           const clt_tensor *stats) {
  int rc = CLT_OK;
  int64_t C, S;
  bn_dims(io->l, &C, &S);
  double *sums = calloc((size_t)(1 + 2 * C), sizeof *sums);
  float *h = calloc((size_t)(3 * C), sizeof *h); /* partial sums (2C); then mean, var, unbiased var */
  if (!sums || !h) { rc = CLT_ENOMEM; goto fail; }
  if (io->n > 0) {
    CLT_TRY(clt_nn_batchnorm_stats(io->ctx, x, part));
    CLT_TRY(clt_tensor_download(io->ctx, part, h, (size_t)(2 * C) * 4));
    double cnt = (double)io->n * (double)S;
    sums[0] = cnt;
    for (int64_t c = 0; c < C; c++) {
      double mu = h[2 * c], m2 = h[2 * c + 1];
      sums[1 + c] = cnt * mu, sums[1 + C + c] = m2 + cnt * mu * mu;
    }
  }
  CLT_TRY(sum_over_replicas(io, sums, (int)(1 + 2 * C)));
  double M = sums[0];
  CLT_TRY(check_count(io, M));
  for (int64_t c = 0; c < C; c++) {
    double mu = sums[1 + c] / M, v = sums[1 + C + c] / M - mu * mu;
    if (v < 0) v = 0;
    h[c] = (float)mu, h[C + c] = (float)v, h[2 * C + c] = (float)(v * M / (M - 1));
  }
  CLT_TRY(clt_tensor_upload(io->ctx, stats, h, (size_t)(3 * C) * 4));
fail:
  free(sums), free(h);
  return rc;
}

/* Training: the global batch's mean and biased variance into kept 0 and
 * 1, the running statistics moved towards them (the unbiased variance, as
 * PyTorch), then the normalisation. */
static int bn_forward_train(const clt__layer_io *io) {
  int rc = CLT_OK;
  int64_t C, S;
  bn_dims(io->l, &C, &S);
  clt_tensor x, part, stats, rmean, rvar, w, b, mean, var, uvar;
  CLT_TRY(kept(io, 4, 2 * C, &part));
  CLT_TRY(kept(io, 0, 3 * C, &stats));
  if (io->n > 0) CLT_TRY(as_ncs(io, &io->x, &x));
  if (io->n > 0 && !stats_shared(io)) {
    CLT_TRY(check_count(io, (double)io->n * (double)S));
    CLT_TRY(clt_nn_batchnorm_stats(io->ctx, &x, &part));
    CLT_TRY(clt_nn_batchnorm_finish_stats(io->ctx, (double)io->n * (double)S, &part, &stats));
  } else {
    CLT_TRY(bn_shared_stats(io, &x, &part, &stats));
  }
  CLT_TRY(clt__io_param(io, P_MEAN, &rmean));
  CLT_TRY(clt__io_param(io, P_VAR, &rvar));
  CLT_TRY(kept(io, 0, C, &mean));
  CLT_TRY(kept(io, 1, C, &var));
  CLT_TRY(kept(io, 2, C, &uvar));
  CLT_TRY(clt_nn_batchnorm_running(io->ctx, io->l->momentum, &mean, &uvar, &rmean, &rvar));
  if (io->n > 0) {
    clt_tensor y;
    CLT_TRY(clt__io_param(io, P_WEIGHT, &w));
    CLT_TRY(clt__io_param(io, P_BIAS, &b));
    CLT_TRY(as_ncs(io, &io->y, &y));
    CLT_TRY(clt_nn_batchnorm_forward(io->ctx, io->l->eps, &x, &mean, &var, &w, &b, &y));
  }
fail:
  return rc;
}

static int bn_forward(const clt__layer_io *io) {
  int rc = CLT_OK;
  clt_tensor x, y, w, b, rmean, rvar;
  if (io->pass->train) return bn_forward_train(io);
  if (io->n == 0) return CLT_OK;
  CLT_TRY(as_ncs(io, &io->x, &x));
  CLT_TRY(as_ncs(io, &io->y, &y));
  CLT_TRY(clt__io_param(io, P_WEIGHT, &w));
  CLT_TRY(clt__io_param(io, P_BIAS, &b));
  CLT_TRY(clt__io_param(io, P_MEAN, &rmean));
  CLT_TRY(clt__io_param(io, P_VAR, &rvar));
  CLT_TRY(clt_nn_batchnorm_forward(io->ctx, io->l->eps, &x, &rmean, &rvar, &w, &b, &y));
fail:
  return rc;
}

/* The global batch's means of dy and dy * xhat into g (kept 2, 3) from
 * the replicas' sums, through the host. */
static int bn_shared_means(const clt__layer_io *io, const clt_tensor *part, const clt_tensor *g) {
  int rc = CLT_OK;
  int64_t C, S;
  bn_dims(io->l, &C, &S);
  double *sums = calloc((size_t)(1 + 2 * C), sizeof *sums);
  float *h = calloc((size_t)(2 * C), sizeof *h);
  if (!sums || !h) { rc = CLT_ENOMEM; goto fail; }
  if (io->n > 0) {
    CLT_TRY(clt_tensor_download(io->ctx, part, h, (size_t)(2 * C) * 4));
    sums[0] = (double)io->n * (double)S;
    for (int64_t c = 0; c < C; c++) sums[1 + c] = h[2 * c], sums[1 + C + c] = h[2 * c + 1];
  }
  CLT_TRY(sum_over_replicas(io, sums, (int)(1 + 2 * C)));
  CLT_TRY(check_count(io, sums[0]));
  for (int64_t c = 0; c < 2 * C; c++) h[c] = (float)(sums[1 + c] / sums[0]);
  CLT_TRY(clt_tensor_upload(io->ctx, g, h, (size_t)(2 * C) * 4));
fail:
  free(sums), free(h);
  return rc;
}

/* The parameter gradients are the replica's own (the exchange sums them);
 * the input gradient needs the global batch's means of dy and dy * xhat. */
static int bn_backward(const clt__layer_io *io) {
  int rc = CLT_OK;
  int64_t C, S;
  bn_dims(io->l, &C, &S);
  clt_tensor x, dy, dx, part, mean, var, w, dw, db, gdy, gdyx, g;
  CLT_TRY(kept(io, 4, 2 * C, &part));
  CLT_TRY(kept(io, 0, C, &mean));
  CLT_TRY(kept(io, 1, C, &var));
  CLT_TRY(kept(io, 2, 2 * C, &g));
  if (io->n > 0) {
    CLT_TRY(as_ncs(io, &io->x, &x));
    CLT_TRY(as_ncs(io, &io->dy, &dy));
    CLT_TRY(clt__io_grad(io, P_WEIGHT, &dw));
    CLT_TRY(clt__io_grad(io, P_BIAS, &db));
    CLT_TRY(clt_nn_batchnorm_backward_sums(io->ctx, io->l->eps, &x, &mean, &var, &dy, &dw, &db, &part));
  }
  if (io->n > 0 && !stats_shared(io)) {
    CLT_TRY(check_count(io, (double)io->n * (double)S));
    CLT_TRY(clt_nn_batchnorm_means(io->ctx, (double)io->n * (double)S, &part, &g));
  } else {
    CLT_TRY(bn_shared_means(io, &part, &g));
  }
  if (io->n > 0 && io->dx.buf) {
    CLT_TRY(kept(io, 2, C, &gdy));
    CLT_TRY(kept(io, 3, C, &gdyx));
    CLT_TRY(clt__io_param(io, P_WEIGHT, &w));
    CLT_TRY(as_ncs(io, &io->dx, &dx));
    CLT_TRY(clt_nn_batchnorm_backward_input(io->ctx, io->l->eps, &x, &mean, &var, &w, &gdy, &gdyx, &dy, &dx));
  }
fail:
  return rc;
}

static void bn_describe(const clt_layer_spec *l, char *buf, size_t len) {
  int64_t C, S;
  bn_dims(l, &C, &S);
  snprintf(buf, len, "batchnorm %lld", (long long)C);
}

const clt__layer_kind clt__kind_batchnorm = {.name = "batchnorm",
                                             .flags = CLT_KIND_SYNC_STATS,
                                             .parse = bn_parse,
                                             .infer = bn_infer,
                                             .forward = bn_forward,
                                             .backward = bn_backward,
                                             .describe = bn_describe};

int clt__spec_check_batch_stats(const clt_model_spec *spec, int64_t batch) {
  for (int i = 1; i < spec->nlayers; i++) {
    const clt_layer_spec *l = &spec->layers[i];
    int64_t C, S;
    if (!(l->kind->flags & CLT_KIND_SYNC_STATS)) continue;
    bn_dims(l, &C, &S);
    if (batch * S < 2)
      return clt__error(CLT_EINVAL, "%s:%d: batchnorm on a batch of %lld sample%s of %lld value%s per channel: "
                        "its variance would be 0 (PyTorch refuses it too); train with a batch of at least 2 samples "
                        "(per micro-batch, over all replicas)", spec->name, l->line, (long long)batch,
                        batch == 1 ? "" : "s", (long long)S, S == 1 ? "" : "s");
  }
  return CLT_OK;
}

int clt__spec_has_sync_stats(const clt_model_spec *spec) {
  for (int i = 1; i < spec->nlayers; i++)
    if (spec->layers[i].kind->flags & CLT_KIND_SYNC_STATS) return i;
  return 0;
}
