/*
 * cut.c: where a pipeline cuts the model into stages (stage s is layers
 * [cut[s], cut[s + 1]) of the whole spec, blocks expanded, the input line
 * not counted). Boundaries go only where clt__spec_cut_ok allows (never
 * inside a residual's branch), and every stage holds some parameters (a
 * stage without any would only pass activations on). Three ways:
 *
 *   --stages a,b,c   layer counts by hand;
 *   (none)           even: layer counts as close to (layers) / P as the
 *                    allowed boundaries let (least squares);
 *   --stages auto    by measured cost: each rank times the forward and
 *                    backward of every piece between two allowed
 *                    boundaries on its own device, for its micro-batch;
 *                    the ranks share the times, a stage's piece costs what
 *                    its slowest replica took, and the cut minimises the
 *                    slowest stage's predicted time (then the total).
 *
 * Both computed cuts are exact dynamic programmes over the allowed
 * boundaries; auto's works in integer nanoseconds on times every rank
 * holds alike, so every rank chooses the same cut. A fast GPU stage so
 * takes more layers than a slow CPU one.
 *
 * What auto times includes each piece's copies of its activations to and
 * from the host (a stage of one piece pays them too; a stage of several
 * pays them once), so it leans a little towards stages of many small
 * pieces' worth of time; pieces are timed one at a time, so a model too
 * large for one device can still be measured.
 */
#include "pp/pp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parameters of layers [a, b). */
int64_t clt__pp_params_between(const clt_model_spec *s, int a, int b) {
  return (b < s->nlayers ? s->layers[b].param_offset : s->param_count) - s->layers[a].param_offset;
}

/* --stages a,b,c: layer counts into cuts (cut[s] = first layer of stage s,
 * cut[P] = nlayers). */
static int parse_stages(const clt_model_spec *s, const char *text, int P, int *cut) {
  int L = s->nlayers - 1, k = 0, sum = 0;
  const char *p = text;
  cut[0] = 1;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > L)
      return clt__error(CLT_EINVAL, "--stages %s: '%s' is not a layer count from 1 to %d; give one count per "
                        "stage, e.g. --stages 3,3, or auto", text, p, L);
    if (k >= P)
      return clt__error(CLT_EINVAL, "--stages %s gives more than the %d stages of --pipeline %d", text, P, P);
    sum += (int)v;
    cut[++k] = 1 + sum;
    p = end;
    if (*p == ',') p++;
    else if (*p)
      return clt__error(CLT_EINVAL, "--stages %s: '%s' is not a layer count; separate counts with commas", text, p);
  }
  if (k != P)
    return clt__error(CLT_EINVAL, "--stages %s gives %d stage%s, but --pipeline is %d", text, k, k == 1 ? "" : "s", P);
  if (sum != L)
    return clt__error(CLT_EINVAL, "--stages %s adds up to %d layers, but %s has %d (blocks expanded, the input line "
                      "not counted)", text, sum, s->name, L);
  char why[512];
  for (int i = 1; i < P; i++)
    if (!clt__spec_cut_ok(s, cut[i], why, sizeof why)) return clt__error(CLT_EINVAL, "--stages %s: %s", text, why);
  for (int i = 0; i < P; i++)
    if (clt__pp_params_between(s, cut[i], cut[i + 1]) == 0)
      return clt__error(CLT_EINVAL, "--stages %s: stage %d (%s:%d to line %d) has no parameters; every stage needs a "
                        "layer with some", text, i, s->name, s->layers[cut[i]].line, s->layers[cut[i + 1] - 1].line);
  return CLT_OK;
}

/* The allowed boundaries: pos[0] = 1, then every c with clt__spec_cut_ok,
 * then nlayers; *npos of them (malloc'd). */
static int allowed_boundaries(const clt_model_spec *s, int **pos, int *npos) {
  int L = s->nlayers, n = 0;
  char why[512];
  int *p = clt__calloc((size_t)L + 1, sizeof *p);
  if (!p) return CLT_ENOMEM;
  p[n++] = 1;
  for (int c = 2; c < L; c++)
    if (clt__spec_cut_ok(s, c, why, sizeof why)) p[n++] = c;
  p[n++] = L;
  *pos = p, *npos = n;
  return CLT_OK;
}

static int too_many_stages(const clt_model_spec *s, int P, int most) {
  return clt__error(CLT_EINVAL, "--pipeline %d: %s can be cut into at most %d stage%s (%d layers; stages hold whole "
                    "residual blocks and each has parameters): use fewer stages", P, s->name, most,
                    most == 1 ? "" : "s", s->nlayers - 1);
}

/* The even cut: stages' layer counts closest to (layers) / P, least
 * squares, by dynamic programming over the allowed boundaries. */
static int even_cut(const clt_model_spec *s, int P, int *cut) {
  int nv, rc = CLT_OK, *pos = NULL, *from = NULL;
  double *best = NULL, share = (double)(s->nlayers - 1) / P;
  CLT_TRY(allowed_boundaries(s, &pos, &nv));
  /* best[i * nv + j]: the least cost of i stages covering layers [1, pos[j]) */
  best = clt__calloc((size_t)(P + 1) * nv, sizeof *best);
  from = clt__calloc((size_t)(P + 1) * nv, sizeof *from);
  if (!best || !from) { rc = CLT_ENOMEM; goto fail; }
  for (int k = 0; k < (P + 1) * nv; k++) best[k] = -1;
  best[0] = 0;
  for (int i = 1; i <= P; i++)
    for (int j = 1; j < nv; j++)
      for (int q = 0; q < j; q++) {
        double prev = best[(i - 1) * nv + q], d = (pos[j] - pos[q]) - share;
        if (prev < 0 || clt__pp_params_between(s, pos[q], pos[j]) == 0) continue;
        if (best[i * nv + j] < 0 || prev + d * d < best[i * nv + j])
          best[i * nv + j] = prev + d * d, from[i * nv + j] = q;
      }
  if (best[P * nv + nv - 1] < 0) {
    int most = 0;
    for (int i = 1; i <= P; i++)
      if (best[i * nv + nv - 1] >= 0) most = i;
    rc = too_many_stages(s, P, most);
    goto fail;
  }
  for (int i = P, j = nv - 1; i >= 1; j = from[i * nv + j], i--) cut[i] = pos[j];
  cut[0] = 1;
fail:
  free(pos), free(best), free(from);
  return rc;
}

/* One pass of clt__pp_cut_by_cost's programme: with cap < 0, best[i][j]
 * is the least slowest stage of i stages over pieces [0, j); with cap >=
 * 0, the least total of those whose every stage costs at most cap. -1:
 * impossible. from[i][j]: where stage i - 1 starts. */
static void cut_pass(int P, int nseg, const int64_t *cost, const int *has_params, int64_t cap, int64_t *best,
                     int *from) {
  int nv = nseg + 1;
  for (int k = 0; k < (P + 1) * nv; k++) best[k] = -1;
  best[0] = 0;
  for (int i = 1; i <= P; i++)
    for (int j = 1; j < nv; j++) {
      int64_t sum = 0;
      int params = 0;
      for (int q = j - 1; q >= 0; q--) { /* stage i - 1 is pieces [q, j) */
        sum += cost[(size_t)(i - 1) * nseg + q];
        params |= has_params[q];
        int64_t prev = best[(i - 1) * nv + q], *b = &best[i * nv + j];
        if (!params || prev < 0 || (cap >= 0 && sum > cap)) continue;
        int64_t v = cap < 0 ? (prev > sum ? prev : sum) : prev + sum;
        if (*b < 0 || v < *b) *b = v, from[i * nv + j] = q;
      }
    }
}

int clt__pp_cut_by_cost(int P, int nseg, const int64_t *cost, const int *has_params, int *bound, int64_t *worst) {
  int rc = CLT_OK, nv = nseg + 1;
  int64_t *best = clt__calloc((size_t)(P + 1) * nv, sizeof *best);
  int *from = clt__calloc((size_t)(P + 1) * nv, sizeof *from);
  if (!best || !from) { rc = CLT_ENOMEM; goto fail; }
  /* the least slowest stage first, then the least total within it (the
   * pair does not split over prefixes, the two passes do) */
  cut_pass(P, nseg, cost, has_params, -1, best, from);
  if ((*worst = best[P * nv + nseg]) < 0) {
    rc = CLT_EINVAL; /* the caller says why */
    goto fail;
  }
  cut_pass(P, nseg, cost, has_params, *worst, best, from);
  bound[P] = nseg;
  for (int i = P, j = nseg; i >= 1; i--) bound[i - 1] = j = from[i * nv + j];
fail:
  free(best), free(from);
  return rc;
}

/* Nanoseconds of the forward and backward of each piece [pos[i], pos[i +
 * 1]) of s on ctx, for n samples: the least of 3 runs after one that
 * builds the kernels. */
static int time_pieces(clt_context *ctx, const clt_model_spec *s, const int *pos, int nseg, int64_t n, clt_dtype dt,
                       uint64_t seed, int64_t *ns) {
  int rc = CLT_OK;
  for (int i = 0; i < nseg; i++) {
    clt_model_spec *st = NULL;
    clt__replica *r = NULL;
    float *params = NULL, *x = NULL, *y = NULL, *dy = NULL;
    int64_t base;
    CLT_TRY(clt__spec_stage(s, pos[i], pos[i + 1], &st, &base));
    int64_t nin = n, nout = n;
    for (int d = 0; d < st->layers[0].out_shape.ndim; d++) nin *= st->layers[0].out_shape.dims[d];
    for (int d = 0; d < st->layers[st->nlayers - 1].out_shape.ndim; d++)
      nout *= st->layers[st->nlayers - 1].out_shape.dims[d];
    params = clt__calloc((size_t)st->param_count + 1, sizeof *params);
    x = clt__calloc((size_t)nin, sizeof *x); /* zeros: token 0, or a blank input */
    y = clt__calloc((size_t)nout, sizeof *y);
    dy = clt__calloc((size_t)nout, sizeof *dy);
    if (!params || !x || !y || !dy) rc = CLT_ENOMEM;
    if (rc == CLT_OK) {
      clt__model_init_params(st, seed, params);
      for (int64_t k = 0; k < nout; k++) dy[k] = (float)((k * 7919) % 201 - 100) * 1e-4f; /* an output gradient */
      rc = clt__replica_create(ctx, st, n, 0, dt, params, &r);
    }
    int64_t least = -1;
    for (int run = 0; rc == CLT_OK && run < 4; run++) {
      clt__pass pass = {.train = 1, .seed = seed, .step = (uint64_t)run + 1};
      double t0 = clt__now();
      rc = clt__pp_stage_forward(r, &r->own, x, NULL, n, &pass, 0, y, NULL);
      if (rc == CLT_OK) rc = clt__pp_stage_backward(r, &r->own, dy, n, &pass, pos[i] > 1 ? x : NULL);
      int64_t took = (int64_t)((clt__now() - t0) * 1e9);
      if (run > 0 && (least < 0 || took < least)) least = took;
    }
    ns[i] = least;
    clt__replica_destroy(r);
    clt__spec_destroy(st);
    free(params), free(x), free(y), free(dy);
    if (rc < 0) {
      clt__error_prefix(rc, "--stages auto: timing %s:%d to line %d on %s", s->name, s->layers[pos[i]].line,
                        s->layers[pos[i + 1] - 1].line, ctx->info.name);
      goto fail;
    }
  }
fail:
  return rc;
}

/* --stages auto (see the top). Collective over pp->comm; sets pp->cut and
 * pp->predicted_s. */
static int auto_cut(clt__pp *pp, const clt_model_spec *s, const clt_train_options *o, const clt_devices *devs) {
  int rc = CLT_OK, nv = 0, *pos = NULL, *has = NULL, *bound = NULL, ranks = clt_comm_size(pp->comm);
  int64_t *mine = NULL, *all = NULL, *cost = NULL, worst;
  clt_context *ctx = NULL;
  CLT_TRY(allowed_boundaries(s, &pos, &nv));
  int nseg = nv - 1;
  /* one stage replica's share of a micro-batch, as the trainer makes it */
  int64_t micro = o->batch / pp->M, n = (micro + pp->D - 1) / pp->D;
  mine = clt__calloc((size_t)nseg + 1, sizeof *mine);
  all = clt__calloc((size_t)(nseg + 1) * ranks, sizeof *all);
  cost = clt__calloc((size_t)nseg * pp->P, sizeof *cost);
  has = clt__calloc((size_t)nseg, sizeof *has);
  bound = clt__calloc((size_t)pp->P + 1, sizeof *bound);
  if (!mine || !all || !cost || !has || !bound) { rc = CLT_ENOMEM; goto fail; }
  /* mine[0]: this rank's status, so a failure ends every rank alike */
  int trc = n < 1 ? clt__error(CLT_EINVAL, "--stages auto: a batch of %lld in %d micro-batches over %d replicas "
                               "leaves no samples to time", (long long)o->batch, pp->M, pp->D)
                  : clt_context_create(devs, 0, &ctx);
  if (trc == CLT_OK) trc = time_pieces(ctx, s, pos, nseg, n, o->precision, o->seed, mine + 1);
  clt_context_destroy(ctx);
  char own[1024];
  clt__strlcpy(own, clt_last_error(), sizeof own);
  mine[0] = trc;
  CLT_TRY(clt_allgather(pp->comm, mine, (size_t)(nseg + 1) * sizeof *mine, all));
  for (int r = 0; r < ranks; r++)
    if (all[(size_t)r * (nseg + 1)] < 0) {
      int bad = (int)all[(size_t)r * (nseg + 1)];
      rc = r == clt_comm_rank(pp->comm) ? clt__error(bad, "%s", own)
                                        : clt__error(bad, "--stages auto: timing the model failed on rank %d: %s", r,
                                                     clt_strerror(bad));
      goto fail;
    }
  /* a stage's piece costs what its slowest replica took (rank r is stage r % P) */
  for (int r = 0; r < ranks; r++)
    for (int i = 0; i < nseg; i++) {
      int64_t *c = &cost[(size_t)(r % pp->P) * nseg + i], t = all[(size_t)r * (nseg + 1) + 1 + i];
      if (t > *c) *c = t;
    }
  for (int i = 0; i < nseg; i++) has[i] = clt__pp_params_between(s, pos[i], pos[i + 1]) > 0;
  if ((rc = clt__pp_cut_by_cost(pp->P, nseg, cost, has, bound, &worst)) < 0) {
    int most = 0;
    for (int i = 0; i < nseg; i++) most += has[i];
    rc = too_many_stages(s, pp->P, most < pp->P ? most : pp->P - 1);
    goto fail;
  }
  for (int i = 0; i <= pp->P; i++) pp->cut[i] = pos[bound[i]];
  for (int i = 0; i < pp->P; i++) {
    int64_t t = 0;
    for (int q = bound[i]; q < bound[i + 1]; q++) t += cost[(size_t)i * nseg + q];
    pp->predicted_s[i] = (double)t * 1e-9;
  }
  if (clt_comm_rank(pp->comm) == 0) {
    char line[2048];
    size_t len = (size_t)snprintf(line, sizeof line, "pipeline: --stages auto timed %d piece%s of %s on each rank's "
                                  "device for %lld samples (ms, forward and backward, each stage's slowest replica):",
                                  nseg, nseg == 1 ? "" : "s", s->name, (long long)n);
    for (int i = 0; i < pp->P && len < sizeof line; i++) {
      len += (size_t)snprintf(line + len, sizeof line - len, "%s stage %d", i ? ";" : "", i);
      for (int q = 0; q < nseg && len < sizeof line; q++)
        len += (size_t)snprintf(line + len, sizeof line - len, " %s%.2f%s", q == bound[i] ? "[" : "",
                                (double)cost[(size_t)i * nseg + q] * 1e-6, q + 1 == bound[i + 1] ? "]" : "");
    }
    clt__log(CLT_LOG_INFO, "%s", line);
  }
fail:
  free(pos), free(has), free(bound), free(mine), free(all), free(cost);
  return rc;
}

static void log_cut(const clt__pp *pp, const clt_model_spec *s) {
  char line[2048];
  size_t n = (size_t)snprintf(line, sizeof line, "pipeline: %d stage%s x %d replica%s, %d micro-batches, %s; %s cut",
                              pp->P, pp->P == 1 ? "" : "s", pp->D, pp->D == 1 ? "" : "s", pp->M,
                              pp->schedule == CLT_PIPELINE_GPIPE ? "gpipe" : "1f1b", s->name);
  for (int i = 0; i < pp->P && n < sizeof line; i++) {
    int lo = pp->cut[i], hi = pp->cut[i + 1];
    n += (size_t)snprintf(line + n, sizeof line - n, "%s stage %d: %d layer%s, lines %d-%d, %lld parameters",
                          i ? ";" : ":", i, hi - lo, hi - lo == 1 ? "" : "s", s->layers[lo].line,
                          s->layers[hi - 1].line, (long long)clt__pp_params_between(s, lo, hi));
    if (pp->predicted_s[i] > 0 && n < sizeof line)
      n += (size_t)snprintf(line + n, sizeof line - n, ", predicted %.2f ms a micro-batch",
                            pp->predicted_s[i] * 1e3);
  }
  clt__log(CLT_LOG_INFO, "%s", line);
}

int clt__pp_make_cut(clt__pp *pp, const clt_model_spec *s, const clt_train_options *o, const clt_devices *devs) {
  int rc = CLT_OK;
  if (o->stages && strcmp(o->stages, "auto") == 0) CLT_TRY(auto_cut(pp, s, o, devs));
  else if (o->stages && o->stages[0]) CLT_TRY(parse_stages(s, o->stages, pp->P, pp->cut));
  else CLT_TRY(even_cut(s, pp->P, pp->cut));
  if (clt_comm_rank(pp->comm) == 0) log_cut(pp, s);
fail:
  return rc;
}
