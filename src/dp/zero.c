/*
 * zero.c: ZeRO stage 1 (issue 15): each rank keeps optimizer state only
 * for its shard of the parameter arena.
 *
 * Shard. Bucket b of the gradients, [lo_b, hi_b), is reduce-scattered
 * instead of all-reduced: rank r ends with the all-reduce's own segment of
 * it (clt_reduce_scatter_plan_part), bit for bit what --zero 0 has there.
 * The shard is those parts, one range per bucket, plus whatever of the
 * arena no bucket covers (no backward writes it; every rank steps that
 * itself, as --zero 0 does). Each rank steps its ranges with the same
 * scalars as --zero 0, so its parameters there are --zero 0's bits, and
 * the allgather of every bucket's parameters hands them to the others:
 * ZeRO at N ranks gives bitwise the parameters of --zero 0 at N ranks.
 *
 * State. The optimizer state of range k is per x n_k floats, packed one
 * range after another (Adam's m then v within each), so the fused kernels
 * run on each range as on a small arena. Checkpoints gather it to the
 * whole layout (every rank's ranges into one P-float array per component),
 * so a checkpoint is the same file at any stage and rank count.
 *
 * Clipping needs the norm of the whole summed gradient; --zero 0 takes it
 * from rank 0's whole arena, summed in clt_sumsq's order. A sum of shard
 * norms would round differently, so with clipping the gradients are
 * all-reduced whole (reduce-scatter and allgather: the same bits) and only
 * the state is sharded; without it only the shards are reduced, and the
 * reported norm is the sum of the shards' sums of squares (in rank order:
 * the same on every rank), equal to --zero 0's up to rounding.
 *
 * Stage 2 (gradients kept for the shard only) is refused for now. What it
 * needs, for whoever builds it: backward writes every layer's gradients
 * into the one P-float arena (model/replica.c), so holding less means
 * pointing each bucket's layer views into a small pool of bucket buffers
 * that the device may reuse only once the host has reduce-scattered them
 * (markers both ways between the queue and the exchange), with the
 * reduced shard kept in a packed shard buffer. And with --accumulate K the
 * bits of --zero 0 come from summing the K micro-batches locally before
 * one reduction; reducing each micro-batch and summing the shards adds in
 * another order, so bitwise equality with accumulation needs the whole
 * local gradient kept across micro-batches (no saving until the last).
 */
#include "dp/dp_internal.h"

#include <stdlib.h>
#include <string.h>

#include <cltrain/opencl.h>

void clt__dp_zero_set(clt__dp *dp, int stage, int full_grads) {
  if (stage > 0 && dp->nranks == 1) {
    clt__log(CLT_LOG_WARN, "--zero %d on one rank: there is nothing to shard across ranks, so it changes nothing "
             "(every replica keeps all optimizer state)", stage);
    stage = 0;
  }
  dp->zero = stage;
  dp->full_grads = full_grads;
}

int clt__dp_zero(const clt__dp *dp) { return dp->zero; }

int clt__dp_zero_sharded_grads(const clt__dp *dp) { return dp->zero && !dp->full_grads; }

const clt__shard_range *clt__dp_shard(const clt__dp *dp, int *n, int64_t *params) {
  *n = dp->nshard;
  *params = dp->shard_params;
  return dp->shard;
}

/* The plans of every bucket, and this rank's ranges in arena order. */
int clt__dp_zero_plans(clt__dp *dp, int64_t P) {
  int rc = CLT_OK, nb = dp->buckets.n;
  const clt__bucket_layout *b = &dp->buckets;
  int64_t lowest = P, highest = 0;
  if (!(dp->shard = clt__calloc((size_t)nb + 2, sizeof *dp->shard))) return CLT_ENOMEM;
  dp->nshard = 0;
  if (dp->zero) {
    if (!(dp->ag = clt__calloc(nb ? nb : 1, sizeof *dp->ag)) ||
        (!dp->full_grads && !(dp->rs = clt__calloc(nb ? nb : 1, sizeof *dp->rs))))
      return CLT_ENOMEM;
    clt_allreduce_opts ao = {0, dp->nlocal};
    for (int k = 0; k < nb; k++) {
      size_t count = (size_t)(b->hi[k] - b->lo[k]);
      if (!dp->full_grads)
        CLT_TRY(clt_reduce_scatter_plan_create(dp->comm, count, NULL, dp->wire ? CLT_F16 : CLT_F32, CLT_SUM, &ao,
                                               &dp->rs[k]));
      CLT_TRY(clt_allgather_plan_create(dp->comm, count, NULL, CLT_F32, &ao, &dp->ag[k]));
    }
  }
  if (!dp->zero) { /* the whole arena, one range: one kernel per step */
    dp->shard[0] = (clt__shard_range){0, P, 0};
    dp->nshard = P > 0;
    dp->shard_params = P;
    return CLT_OK;
  }
  /* Ranges in arena order: what no bucket covers below and above (buckets
   * cover one contiguous span), and this rank's part of each bucket. */
  for (int k = 0; k < nb; k++) {
    if (b->lo[k] < lowest) lowest = b->lo[k];
    if (b->hi[k] > highest) highest = b->hi[k];
  }
  if (nb == 0) lowest = highest = P;
  clt__shard_range *s = dp->shard;
  int n = 0;
  if (lowest > 0) s[n++] = (clt__shard_range){0, lowest, 0};
  for (int k = nb - 1; k >= 0; k--) { /* buckets are in backward order: highest first */
    size_t off = 0, len = (size_t)(b->hi[k] - b->lo[k]);
    if (dp->zero) CLT_TRY(clt_allgather_plan_part(dp->ag[k], dp->rank, &off, &len));
    if (len) s[n++] = (clt__shard_range){b->lo[k] + (int64_t)off, (int64_t)len, 0};
  }
  if (highest < P) s[n++] = (clt__shard_range){highest, P - highest, 0};
  int64_t at = 0;
  for (int k = 0; k < n; k++) s[k].state_at = at, at += s[k].n;
  dp->nshard = n;
  dp->shard_params = at;
  if (dp->zero)
    clt__log(CLT_LOG_INFO, "rank %d: --zero %d: optimizer state for %lld of %lld parameters (%d ranges)%s", dp->rank,
             dp->zero, (long long)at, (long long)P, n,
             dp->full_grads ? "; gradients all-reduced whole, since clipping needs their norm" : "");
fail:
  return rc;
}

void clt__dp_zero_free(clt__dp *dp) {
  for (int k = 0; k < dp->buckets.n; k++) {
    if (dp->rs) clt_reduce_scatter_plan_destroy(dp->rs[k]);
    if (dp->ag) clt_allgather_plan_destroy(dp->ag[k]);
  }
  free(dp->rs), free(dp->ag), free(dp->shard);
  dp->rs = NULL, dp->ag = NULL, dp->shard = NULL;
}

int clt__dp_allgather_params(clt__dp *dp, clt__replica *const *reps, int64_t step) {
  int rc = CLT_OK, n = dp->nlocal;
  if (!dp->zero) return CLT_OK;
  cl_command_queue *q = clt__calloc(n, sizeof *q);
  cl_mem *bufs = clt__calloc(n, sizeof *bufs);
  size_t *offs = clt__calloc(n, sizeof *offs);
  if (!q || !bufs || !offs) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < n; i++) {
    clt_tensor p = clt__replica_params(reps[i]);
    /* The compute queue: in order after the optimizer's kernels. */
    q[i] = clt_context_queue(clt__replica_context(reps[i]));
    bufs[i] = p.buf;
  }
  for (int b = 0; b < dp->buckets.n; b++) {
    for (int i = 0; i < n; i++) offs[i] = (size_t)dp->buckets.lo[b] * sizeof(float);
    double t0 = clt__now();
    CLT_TRY(clt__allreduce_run_devices_split(clt__allgather_base(dp->ag[b]), n, q, q, bufs, offs));
    dp->comm_s += clt__now() - t0;
  }
fail:
  free(q), free(bufs), free(offs);
  return rc < 0 ? clt__error_prefix(rc, "gathering the parameters of step %lld (--zero %d)", (long long)step, dp->zero)
                : rc;
}

/* Range k of the shard to or from the whole layout. */
static void copy_range(const clt__shard_range *s, int per, int64_t P, float *full, float *shard, int to_full) {
  for (int c = 0; c < per; c++) {
    float *f = full + (size_t)c * (size_t)P + s->lo, *h = shard + (size_t)s->state_at * per + (size_t)c * s->n;
    if (to_full)
      memcpy(f, h, (size_t)s->n * sizeof *f);
    else
      memcpy(h, f, (size_t)s->n * sizeof *f);
  }
}

void clt__dp_scatter_state(const clt__dp *dp, const float *full, int per, int64_t P, float *shard) {
  for (int k = 0; k < dp->nshard; k++) copy_range(&dp->shard[k], per, P, (float *)full, shard, 0);
}

int clt__dp_gather_state(clt__dp *dp, const float *shard, int per, int64_t P, float *full) {
  int rc = CLT_OK;
  clt_allgather_plan *plan = NULL;
  for (int k = 0; k < dp->nshard; k++) copy_range(&dp->shard[k], per, P, full, (float *)shard, 1);
  if (!dp->zero) return CLT_OK;
  /* Host plans of one buffer each (the trainer's have a replica's worth):
   * made here, on the rare save. */
  for (int b = 0; b < dp->buckets.n; b++) {
    CLT_TRY(clt_allgather_plan_create(dp->comm, (size_t)(dp->buckets.hi[b] - dp->buckets.lo[b]), NULL, CLT_F32,
                                      NULL, &plan));
    for (int c = 0; c < per; c++) CLT_TRY(clt_allgather_run(plan, full + (size_t)c * (size_t)P + dp->buckets.lo[b]));
    clt_allgather_plan_destroy(plan);
    plan = NULL;
  }
fail:
  clt_allgather_plan_destroy(plan);
  return rc < 0 ? clt__error_prefix(rc, "gathering the optimizer state of every rank (--zero %d)", dp->zero) : rc;
}

int clt__dp_zero_shard_params(const clt_model *m, double bucket_mb, int nranks, int rank, int64_t *params) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(m), covered = 0;
  clt__bucket_layout b;
  size_t *seg = NULL;
  *params = P;
  if (nranks <= 1) return CLT_OK;
  CLT_TRY(clt__dp_model_layout(m, (int64_t)(bucket_mb * 1048576.0 / 4.0), &b));
  if (!(seg = clt__calloc((size_t)nranks + 1, sizeof *seg))) {
    rc = CLT_ENOMEM;
    goto done;
  }
  /* Rank r's part of a bucket is its segment (r + 1) mod N (halves.c). */
  int64_t mine = 0;
  int j = (rank + 1) % nranks;
  for (int k = 0; k < b.n; k++) {
    clt__segments((size_t)(b.hi[k] - b.lo[k]), nranks, seg);
    mine += (int64_t)(seg[j + 1] - seg[j]);
    covered += b.hi[k] - b.lo[k];
  }
  *params = mine + (P - covered);
done:
  free(seg);
  clt__bucket_layout_free(&b);
fail:
  return rc;
}

int clt_model_replica_memory_ranks(const clt_model *m, const clt_train_options *o, int nranks,
                                   clt_replica_memory *out, int64_t *shard_params) {
  clt_train_options d;
  int rc = CLT_OK;
  if (!o) clt_train_options_defaults(&d), o = &d;
  CLT_TRY(clt_model_replica_memory(m, o, out)); /* checks m, out and the options */
  if (nranks < 1) return clt__error(CLT_EINVAL, "clt_model_replica_memory_ranks: %d ranks (at least 1)", nranks);
  if (o->zero < 0 || o->zero > 1)
    return clt__error(CLT_EINVAL, "clt_model_replica_memory_ranks: ZeRO stage %d (0 or 1)", o->zero);
  int64_t most = clt_model_param_count(m);
  if (o->zero == 1 && nranks > 1) {
    most = 0;
    for (int r = 0; r < nranks; r++) {
      int64_t p;
      CLT_TRY(clt__dp_zero_shard_params(m, o->bucket_mb, nranks, r, &p));
      if (p > most) most = p;
    }
    clt__replica_memory_sharded(m->spec, o->batch / o->accumulate, clt_optimizer_state_per_param(&o->optimizer), most,
                                o->precision, o->precision == CLT_F16, out);
  }
  if (shard_params) *shard_params = most;
fail:
  return rc;
}
