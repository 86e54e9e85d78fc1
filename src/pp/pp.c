/*
 * pp.c: the pipeline's grid, its cut of the model into stages, the stage
 * and pipeline communicators, and the whole model gathered to rank 0 from
 * the stages (checkpoints hold the whole model in its own layout, so a run
 * resumes at any P and D, or without a pipeline).
 *
 * The grid: rank r is stage s = r % P of pipeline d = r / P, so one
 * pipeline's stages are neighbouring ranks (on one node when they fit),
 * and rank 0 is stage 0 of pipeline 0.
 *
 * The cut (cut.c): stage boundaries go between layers (blocks expanded),
 * never inside a residual's branch; by hand, evenly, or by measured cost.
 * A stage is a spec of its own (stage_spec.c).
 */
#include "pp/pp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int clt__pp_activation_sets(const clt__pp *pp) {
  if (pp->stage == pp->P - 1) return 1;
  if (pp->schedule == CLT_PIPELINE_GPIPE) return pp->M;
  return pp->P - pp->stage < pp->M ? pp->P - pp->stage : pp->M;
}

/* Stage i's copies of weights tied to other stages, into pp->ties. */
static int note_ties(clt__pp *pp, const clt_model_spec *whole, const clt_model_spec *st, int i) {
  for (int li = 1; li < st->nlayers; li++)
    for (int k = 0; k < st->layers[li].nparams; k++) {
      const clt_param_spec *p = &st->layers[li].param[k];
      if (!p->stage_copy) continue;
      int j = 0;
      while (j < pp->P - 1 && whole->layers[pp->cut[j + 1]].param_offset <= p->whole_offset) j++;
      clt__pp_tie *t = realloc(pp->ties, (size_t)(pp->nties + 1) * sizeof *t);
      if (!t) return CLT_ENOMEM;
      pp->ties = t;
      t[pp->nties++] = (clt__pp_tie){j, i, p->whole_offset - whole->layers[pp->cut[j]].param_offset, p->offset,
                                     p->count};
      if (clt_comm_rank(pp->comm) == 0)
        clt__log(CLT_LOG_INFO, "pipeline: %s:%d's %s is tied to stage %d's line %d: stage %d keeps a copy, and the "
                 "two gradients are summed before every update", whole->name, st->layers[li].line, p->name, j,
                 whole->layers[pp->cut[j]].line, i);
    }
  return CLT_OK;
}

/* A tied weight's floats [at, at + n) of the arena g under ZeRO: each rank
 * of the stage holds the summed gradient in its parts of the buckets alone
 * (clt__dp_summed_part), so the whole of it is put together from every
 * replica of the stage (write 0, into v: collective over the stage), or
 * this rank's parts written back from v (write 1). */
static int tie_parts(clt__pp *pp, clt_context *ctx, clt_tensor g, int64_t at, int64_t n, float *v, int write) {
  int rc = CLT_OK, D = clt_comm_size(pp->stage_comm), parts = clt__dp_summed_part(pp->dp, -1, NULL, NULL);
  float *all = NULL;
  unsigned char *held = NULL, *all_held = NULL;
  if (!write) {
    all = clt__calloc((size_t)(D * n) + 1, sizeof *all);
    held = clt__calloc((size_t)n + 1, 1), all_held = clt__calloc((size_t)(D * n) + 1, 1);
    if (!all || !held || !all_held) { rc = CLT_ENOMEM; goto fail; }
  }
  for (int k = 0; k < parts; k++) {
    int64_t lo, len;
    clt__dp_summed_part(pp->dp, k, &lo, &len);
    int64_t a = lo > at ? lo : at, b = lo + len < at + n ? lo + len : at + n, cnt = b - a;
    if (cnt <= 0) continue;
    clt_tensor t;
    CLT_TRY(clt_tensor_view(g.buf, g.offset + (size_t)a * 4, CLT_F32, 1, &cnt, &t));
    if (write) {
      CLT_TRY(clt_tensor_upload(ctx, &t, v + (a - at), (size_t)cnt * sizeof *v));
    } else {
      CLT_TRY(clt_tensor_download(ctx, &t, v + (a - at), (size_t)cnt * sizeof *v));
      memset(held + (a - at), 1, (size_t)cnt);
    }
  }
  if (write) goto fail;
  CLT_TRY(clt_allgather(pp->stage_comm, v, (size_t)n * sizeof *v, all));
  CLT_TRY(clt_allgather(pp->stage_comm, held, (size_t)n, all_held));
  for (int64_t i = 0; i < n; i++) {
    int d = 0;
    while (d < D && !all_held[(size_t)d * (size_t)n + (size_t)i]) d++;
    if (d == D) {
      rc = clt__error(CLT_EINTERNAL, "a tied weight's float %lld is in no rank's part of the buckets (--zero %d)",
                      (long long)(at + i), pp->o->zero);
      goto fail;
    }
    v[i] = all[(size_t)d * (size_t)n + (size_t)i];
  }
fail:
  free(all), free(held), free(all_held);
  return rc;
}

int clt__pp_sum_tied(clt__pp *pp, clt__replica *r, int64_t step) {
  int rc = CLT_OK, zero = pp->o->zero > 0 && clt__dp_summed_part(pp->dp, -1, NULL, NULL) > 0;
  float *mine = NULL, *theirs = NULL;
  clt_context *ctx = clt__replica_context(r);
  clt_tensor g = clt__replica_grads(r);
  for (int k = 0; k < pp->nties; k++) {
    const clt__pp_tie *t = &pp->ties[k];
    int owner = t->owner_stage == pp->stage;
    if (!owner && t->copy_stage != pp->stage) continue;
    int peer = owner ? t->copy_stage : t->owner_stage;
    int64_t at = owner ? t->owner_at : t->copy_at, n = t->count;
    clt_tensor v;
    clt__p2p_msg send, recv;
    memset(&send, 0, sizeof send), memset(&recv, 0, sizeof recv);
    free(mine), free(theirs);
    mine = clt__calloc((size_t)n, sizeof *mine), theirs = clt__calloc((size_t)n, sizeof *theirs);
    if (!mine || !theirs) { rc = CLT_ENOMEM; goto fail; }
    CLT_TRY(clt_tensor_view(g.buf, g.offset + (size_t)at * 4, CLT_F32, 1, &n, &v));
    if (zero) CLT_TRY(tie_parts(pp, ctx, g, at, n, mine, 0));
    else CLT_TRY(clt_tensor_download(ctx, &v, mine, (size_t)n * sizeof *mine));
    CLT_TRY(clt__p2p_irecv(pp->pipe_comm, theirs, (size_t)n * sizeof *theirs, peer, CLT__PP_TAG_TIE, (uint64_t)step,
                           &recv));
    CLT_TRY(clt__p2p_isend(pp->pipe_comm, mine, (size_t)n * sizeof *mine, peer, CLT__PP_TAG_TIE, (uint64_t)step, &send));
    rc = clt__p2p_wait(pp->pipe_comm, &recv, "pipeline tied-weight gradient");
    if (rc == CLT_OK) rc = clt__p2p_wait(pp->pipe_comm, &send, "pipeline tied-weight gradient");
    if (rc < 0) {
      clt__p2p_abandon(pp->pipe_comm, &recv), clt__p2p_abandon(pp->pipe_comm, &send);
      goto fail;
    }
    /* owner's + copy's, in that order on both stages: the same bits */
    for (int64_t i = 0; i < n; i++) mine[i] = owner ? mine[i] + theirs[i] : theirs[i] + mine[i];
    if (zero) CLT_TRY(tie_parts(pp, ctx, g, at, n, mine, 1));
    else CLT_TRY(clt_tensor_upload(ctx, &v, mine, (size_t)n * sizeof *mine));
  }
fail:
  free(mine), free(theirs);
  return rc < 0 ? clt__error_prefix(rc, "pipeline stage %d of %d, step %lld", pp->stage, pp->P, (long long)step) : rc;
}

int clt__pp_copies(const clt__pp *pp, int64_t *at, int64_t *count, int cap) {
  int n = 0;
  for (int k = 0; k < pp->nties; k++)
    if (pp->ties[k].copy_stage == pp->stage) {
      if (n < cap) at[n] = pp->ties[k].copy_at, count[n] = pp->ties[k].count;
      n++;
    }
  return n;
}

int clt__pp_create(clt_comm *comm, const clt_model *m, const clt_train_options *o, const clt_devices *devs,
                   clt__pp **out) {
  int rc = CLT_OK;
  const clt_model_spec *s = m->spec;
  int ranks = clt_comm_size(comm), rank = clt_comm_rank(comm), P = o->pipeline;
  *out = NULL;
  if (P < 1) return clt__error(CLT_EINVAL, "--pipeline %d: give 1 or more stages", P);
  if (o->micro_batches < 0)
    return clt__error(CLT_EINVAL, "--micro-batches %d: a step needs at least 1 micro-batch", o->micro_batches);
  if (ranks % P && ranks < P)
    return clt__error(CLT_EINVAL, "--pipeline %d on %d rank%s: the ranks must be the stages times the replicas of "
                      "each (P x D); run %d ranks (or a multiple), or give fewer stages", P, ranks, ranks == 1 ? "" : "s",
                      P);
  if (ranks % P)
    return clt__error(CLT_EINVAL, "--pipeline %d on %d ranks: the ranks must be the stages times the replicas of "
                      "each (P x D); run %d or %d ranks, or change --pipeline", P, ranks, P * (ranks / P),
                      P * (ranks / P + 1));
  if (o->pipeline_schedule != CLT_PIPELINE_1F1B && o->pipeline_schedule != CLT_PIPELINE_GPIPE)
    return clt__error(CLT_EINVAL, "the pipeline schedule must be 1f1b or gpipe, not %d", (int)o->pipeline_schedule);
  clt__pp *pp = clt__calloc(1, sizeof *pp);
  if (!pp) return CLT_ENOMEM;
  pp->P = P, pp->D = ranks / P, pp->stage = rank % P, pp->d = rank / P;
  pp->M = o->micro_batches ? o->micro_batches : P;
  pp->schedule = o->pipeline_schedule;
  pp->comm = comm;
  pp->cut = clt__calloc((size_t)P + 1, sizeof *pp->cut);
  pp->predicted_s = clt__calloc((size_t)P, sizeof *pp->predicted_s);
  if (!pp->cut || !pp->predicted_s) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(clt__pp_make_cut(pp, s, o, devs));
  /* Every stage is checked on every rank (a weight tied across stages is
   * refused on all of them alike), and this rank's kept. */
  for (int i = 0; i < P; i++) {
    clt_model_spec *st;
    int64_t base;
    CLT_TRY(clt__spec_stage(s, pp->cut[i], pp->cut[i + 1], &st, &base));
    CLT_TRY(note_ties(pp, s, st, i));
    if (i == pp->stage)
      pp->stage_model.spec = st, pp->base = base, pp->owned = clt__pp_params_between(s, pp->cut[i], pp->cut[i + 1]);
    else clt__spec_destroy(st);
  }
  *out = pp;
  return CLT_OK;
fail:
  clt__pp_destroy(pp);
  return rc;
}

int clt__pp_split(clt__pp *pp) {
  int rc = CLT_OK;
  CLT_TRY(clt__comm_split(pp->comm, pp->stage, pp->d, &pp->stage_comm));
  CLT_TRY(clt__comm_split(pp->comm, pp->d, pp->stage, &pp->pipe_comm));
fail:
  return rc;
}

void clt__pp_destroy(clt__pp *pp) {
  if (!pp) return;
  /* The bubble: the share of the schedule's time this stage waited for
   * its neighbours (its device idle: the stage's passes are waited for),
   * against GPipe's and 1F1B's ideal (P - 1) / (M + P - 1). */
  if (pp->runs > 0 && pp->sum_total_s > 0) {
    char predicted[64] = "";
    if (pp->predicted_s[pp->stage] > 0)
      snprintf(predicted, sizeof predicted, " (--stages auto predicted %.2f ms)", pp->predicted_s[pp->stage] * 1e3);
    clt__log(CLT_LOG_INFO, "pipeline stage %d of %d (rank %d): waited %.3f s of %.3f s in %lld steps' schedules "
             "after the first: bubble %.1f%% (ideal (P-1)/(M+P-1) = %.1f%% at M = %d); computed %.2f ms a micro-batch%s", pp->stage,
             pp->P, clt_comm_rank(pp->comm), pp->sum_wait_s, pp->sum_total_s, (long long)pp->runs,
             100 * pp->sum_wait_s / pp->sum_total_s, 100.0 * (pp->P - 1) / (pp->M + pp->P - 1), pp->M,
             (pp->sum_total_s - pp->sum_wait_s) / (double)(pp->runs * pp->M) * 1e3, predicted);
  }
  clt__spec_destroy(pp->stage_model.spec);
  if (pp->stage_comm) clt_comm_destroy(pp->stage_comm);
  if (pp->pipe_comm) clt_comm_destroy(pp->pipe_comm);
  free(pp->cut);
  free(pp->predicted_s);
  free(pp->ties);
  free(pp);
}

/* Stage i's parameters in the whole arena: [lo, hi). */
static void stage_range(const clt__pp *pp, const clt_model_spec *whole, int i, int64_t *lo, int64_t *hi) {
  int a = pp->cut[i], b = pp->cut[i + 1];
  *lo = whole->layers[a].param_offset;
  *hi = b < whole->nlayers ? whole->layers[b].param_offset : whole->param_count;
}

int clt__pp_gather(clt__pp *pp, const clt_model_spec *whole, const float *stage_params, const float *stage_state,
                   int per, float *whole_params, float *whole_state) {
  int rc = CLT_OK;
  int64_t P = whole->param_count, Ps = pp->stage_model.spec->param_count, own = pp->owned;
  float *buf = NULL;
  if (pp->d != 0) return CLT_OK; /* pipeline 0 holds every stage; its stage 0 is rank 0 */
  if (pp->stage > 0) { /* its own parameters and their state (not copies of tied weights) */
    clt__p2p_msg msg;
    if (!(buf = clt__calloc((size_t)(own * (1 + per)) + 1, sizeof *buf))) return CLT_ENOMEM;
    memcpy(buf, stage_params, (size_t)own * sizeof *buf);
    for (int c = 0; c < per; c++)
      memcpy(buf + own + c * own, stage_state + (size_t)(c * Ps), (size_t)own * sizeof *buf);
    CLT_TRY(clt__p2p_isend(pp->pipe_comm, buf, (size_t)(own * (1 + per)) * sizeof *buf, 0, CLT__PP_TAG_GATHER,
                           (uint64_t)pp->stage, &msg));
    CLT_TRY(clt__p2p_wait(pp->pipe_comm, &msg, "pipeline gather of a stage's parameters"));
    goto fail;
  }
  for (int i = 0; i < pp->P; i++) {
    int64_t lo, hi;
    stage_range(pp, whole, i, &lo, &hi);
    int64_t n = hi - lo;
    const float *src = stage_params, *src_state = stage_state;
    int64_t stride = Ps;
    if (i > 0) {
      stride = n;
      clt__p2p_msg msg;
      free(buf);
      if (!(buf = clt__calloc((size_t)(n * (1 + per)) + 1, sizeof *buf))) return CLT_ENOMEM;
      CLT_TRY(clt__p2p_irecv(pp->pipe_comm, buf, (size_t)(n * (1 + per)) * sizeof *buf, i, CLT__PP_TAG_GATHER,
                             (uint64_t)i, &msg));
      CLT_TRY(clt__p2p_wait(pp->pipe_comm, &msg, "pipeline gather of a stage's parameters"));
      src = buf, src_state = buf + n;
    }
    memcpy(whole_params + lo, src, (size_t)n * sizeof *src);
    for (int c = 0; c < per; c++)
      memcpy(whole_state + (size_t)(c * P + lo), src_state + (size_t)(c * stride), (size_t)n * sizeof *src);
  }
fail:
  free(buf);
  return rc < 0 ? clt__error_prefix(rc, "stage %d of %d", pp->stage, pp->P) : rc;
}

void clt__pp_take(const clt__pp *pp, const clt_model_spec *whole, const float *whole_params,
                  const float *whole_state, int per, float *stage_params, float *stage_state) {
  int64_t lo, hi, P = whole->param_count, Ps = pp->stage_model.spec->param_count;
  stage_range(pp, whole, pp->stage, &lo, &hi);
  int64_t n = hi - lo, ncopy = Ps - n;
  if (!whole_state) per = 0;
  /* Copies of tied weights first, aside: the moves below may be in place. */
  float *copy = ncopy ? calloc((size_t)(ncopy * (1 + per)), sizeof *copy) : NULL;
  for (int k = 0; copy && k < pp->nties; k++) {
    const clt__pp_tie *t = &pp->ties[k];
    if (t->copy_stage != pp->stage) continue;
    int64_t from = whole->layers[pp->cut[t->owner_stage]].param_offset + t->owner_at, to = t->copy_at - n;
    memcpy(copy + to, whole_params + from, (size_t)t->count * sizeof *copy);
    for (int c = 0; c < per; c++)
      memcpy(copy + ncopy * (1 + c) + to, whole_state + (size_t)(c * P + from), (size_t)t->count * sizeof *copy);
  }
  memmove(stage_params, whole_params + lo, (size_t)n * sizeof *stage_params); /* may be in place */
  for (int c = 0; c < per; c++)
    memmove(stage_state + (size_t)(c * Ps), whole_state + (size_t)(c * P + lo), (size_t)n * sizeof *stage_state);
  if (copy) {
    memcpy(stage_params + n, copy, (size_t)ncopy * sizeof *copy);
    for (int c = 0; c < per; c++)
      memcpy(stage_state + (size_t)(c * Ps + n), copy + ncopy * (1 + c), (size_t)ncopy * sizeof *copy);
  }
  free(copy);
}
