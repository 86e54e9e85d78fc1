/*
 * zero.c: ZeRO stages 1 and 2 (issue 15): each rank keeps optimizer state
 * (stage 1), and the reduced gradient too (stage 2), only for its shard of
 * the parameter arena. Stage 3 (issue 37) is stage 2 with the shard's
 * parameters packed like its state and no arena on the device: the runs
 * read each layer's parameters from a ring (zero_units.c).
 *
 * Shard. Bucket b of the gradients, [lo_b, hi_b), is reduce-scattered
 * instead of all-reduced: rank r ends with the all-reduce's own segment of
 * it (clt_reduce_scatter_plan_part), bit for bit what --zero 0 has there.
 * The shard is those parts, one range per bucket, plus whatever of the
 * arena no bucket covers (no backward writes it; every rank steps that
 * itself, as --zero 0 does). Each rank steps its ranges with the same
 * scalars as --zero 0, so its parameters there are --zero 0's bits, and
 * the allgather of every bucket's parameters (zero_gather.c) hands them
 * to the others:
 * ZeRO at N ranks gives bitwise the parameters of --zero 0 at N ranks.
 *
 * State. The optimizer state of range k is per x n_k floats, packed one
 * range after another (Adam's m then v within each), so the fused kernels
 * run on each range as on a small arena. Checkpoints gather it to the
 * whole layout (every rank's ranges into one P-float array per component),
 * so a checkpoint is the same file at any stage and rank count.
 *
 * Norm. Clipping and the f16 overflow check need the norm of the whole
 * summed gradient, which no rank holds under ZeRO. On several ranks it is
 * therefore, at every stage, the sum over the ranks (in rank order, the
 * same on every rank) of each rank's sums of squares of its parts of the
 * buckets, each part summed by clt_sumsq on the rank's first device: at
 * --zero 0 the same parts of the same bits on the same device as under
 * ZeRO, so the clipping scale, and the parameters, are the same bits.
 *
 * Stage 2. The backward writes every layer's gradients into buckets, and a
 * bucket is reduce-scattered as soon as it is complete, straight into the
 * shard's gradient (shard_params floats, packed like the state): so no
 * replica needs a P-float gradient arena, only a small pool of bucket
 * buffers that the backward writes into and reuses once the host has read
 * a bucket out (replica_buckets.c; DeepSpeed's contiguous gradient
 * buckets). clt__grad_pool_make assigns the slots: the fewest the backward
 * needs open at once (1; 2 with tied weights, whose bucket stays open from
 * the output layer down to the embedding), plus one spare so that the
 * device writes the next bucket while the host reduces the last, and a
 * slot is reused only after every bucket the host reduces before it has
 * closed (the host reduces in bucket order), so the device never waits
 * for something the host does later. With --accumulate K the bits of
 * --zero 0 come from summing the K micro-batches locally before one
 * reduction; reducing each micro-batch and summing the shards adds in
 * another order, so stage 2 with accumulation keeps the whole local
 * gradient across micro-batches (stage 1's memory; said in the log, the
 * summary and README).
 */
#include "dp/dp_internal.h"

#include <stdlib.h>
#include <string.h>

#include <cltrain/opencl.h>

void clt__dp_zero_set(clt__dp *dp, int stage, int whole_local_grads) {
  if (stage > 0 && dp->nranks == 1) {
    clt__log(CLT_LOG_WARN, "--zero %d on one rank: there is nothing to shard across ranks, so it changes nothing "
             "(every replica keeps all optimizer state and gradients)", stage);
    stage = 0;
  }
  if (stage >= 2 && whole_local_grads)
    clt__log(CLT_LOG_INFO, "--zero %d with --accumulate (or in a pipeline's stages): each replica keeps its whole "
             "local gradient across the micro-batches (the sum --zero 0 reduces, for the same bits), so gradients take stage 1's memory", stage);
  dp->zero = stage;
  dp->pooled = stage >= 2 && !whole_local_grads;
}

/* ---- stage 2's pool of bucket buffers ---- */

/* One bucket more than the backward needs open at once: double buffering. */
#define CLT__POOL_SPARE 1

void clt__grad_pool_free(clt__grad_pool *p) {
  free(p->slot), free(p->slot_at);
  memset(p, 0, sizeof *p);
}

/* Walk the backward's order (layer by layer from the top: open the buckets
 * the layer starts, then close those it completes), giving each bucket a
 * slot: a new one while fewer than target exist, else the one whose last
 * user the host frees first among those it can free by then (that user and
 * every bucket before it closed), else a new one. The slot count. */
static int assign_slots(const clt__bucket_layout *b, int target, int *slot, int *after, int *holder,
                        unsigned char *closed) {
  int nb = b->n, count = 0, prefix = 0, top = -1, bottom = 0;
  for (int k = 0; k < nb; k++) {
    if (b->opened_at[k] > top) top = b->opened_at[k];
    if (k == 0 || b->closed_at[k] < bottom) bottom = b->closed_at[k];
  }
  if (nb > 0) memset(closed, 0, (size_t)nb);
  for (int i = top; i >= bottom && i >= 0; i--) {
    for (int k = 0; k < nb; k++) {
      if (b->opened_at[k] != i) continue;
      int s = -1;
      for (int q = 0; count >= target && q < count; q++)
        if (holder[q] >= 0 && holder[q] < prefix && (s < 0 || holder[q] < holder[s])) s = q;
      if (s < 0) holder[s = count++] = -1;
      after[k] = holder[s];
      holder[s] = k;
      slot[k] = s;
    }
    for (int k = 0; k < nb; k++)
      if (b->closed_at[k] == i) closed[k] = 1;
    while (prefix < nb && closed[prefix]) prefix++;
  }
  return count;
}

int clt__grad_pool_make(const clt__bucket_layout *b, clt__grad_pool *out) {
  int nb = b->n;
  memset(out, 0, sizeof *out);
  int *holder = clt__calloc((size_t)(nb ? nb : 1), sizeof *holder);
  unsigned char *closed = clt__calloc((size_t)(nb ? nb : 1), 1);
  out->slot = clt__calloc(2 * (size_t)(nb ? nb : 1), sizeof *out->slot);
  out->slot_at = clt__calloc((size_t)nb + 1, sizeof *out->slot_at);
  if (!holder || !closed || !out->slot || !out->slot_at) {
    free(holder), free(closed), clt__grad_pool_free(out);
    return CLT_ENOMEM;
  }
  out->after = out->slot + (nb ? nb : 1);
  int least = assign_slots(b, 1, out->slot, out->after, holder, closed);
  int target = least + CLT__POOL_SPARE < nb ? least + CLT__POOL_SPARE : nb;
  out->nslots = assign_slots(b, target, out->slot, out->after, holder, closed);
  /* Each slot as long as its longest bucket, not every slot as long as the
   * model's: a tied embedding's bucket, open through the whole backward,
   * has a slot of its own, and the other buckets take turns in slots of
   * their own sizes (GPT-2 small on 4 ranks: 165 MiB of buffers, not 3 x
   * the embedding's 147). */
  int64_t *len = out->slot_at + 1; /* lengths first, then prefix sums in place */
  for (int k = 0; k < nb; k++)
    if (b->hi[k] - b->lo[k] > len[out->slot[k]]) len[out->slot[k]] = b->hi[k] - b->lo[k];
  for (int s = 0; s < out->nslots; s++) {
    if (len[s] > out->largest) out->largest = len[s];
    len[s] += out->slot_at[s];
  }
  out->floats = out->slot_at[out->nslots];
  free(holder), free(closed);
  return CLT_OK;
}

const clt__shard_range *clt__dp_shard(const clt__dp *dp, int *n, int64_t *params) {
  *n = dp->nshard;
  *params = dp->shard_params;
  return dp->shard;
}

/* Every rank's count of a bucket of `count` floats under weights w (one
 * per rank, >= 0, not all 0): in proportion to them, the remainder one
 * float each to the largest fractions (ties to the lower rank), only to
 * ranks of weight above 0. The same arithmetic on every rank, so the
 * same counts. */
static void weighted_counts(const double *w, int nranks, size_t count, size_t *counts, double *frac) {
  double sum = 0;
  size_t given = 0;
  for (int r = 0; r < nranks; r++) sum += w[r];
  for (int r = 0; r < nranks; r++) {
    double exact = (double)count * (w[r] / sum);
    counts[r] = (size_t)exact;
    if (counts[r] > count) counts[r] = count;
    frac[r] = w[r] > 0 ? exact - (double)counts[r] : -1;
    given += counts[r];
  }
  while (given < count) {
    int best = -1;
    for (int r = 0; r < nranks; r++)
      if (w[r] > 0 && (best < 0 || frac[r] > frac[best])) best = r;
    counts[best]++, given++;
    frac[best] = -2; /* each rank at most one more, then round again */
    int left = 0;
    for (int r = 0; r < nranks; r++) left += w[r] > 0 && frac[r] > -2;
    if (!left)
      for (int r = 0; r < nranks; r++) frac[r] = w[r] > 0 ? 0 : -1;
  }
  while (given > count) /* not reached: the floors never sum above count */
    for (int r = nranks - 1; r >= 0 && given > count; r--)
      if (counts[r]) counts[r]--, given--;
}

int clt__dp_shard_part(const double *w, int nranks, int rank, size_t count, size_t *off, size_t *n) {
  size_t *seg = clt__calloc((size_t)nranks + 1, sizeof *seg);
  double *frac = clt__calloc((size_t)nranks, sizeof *frac);
  if (!seg || !frac) {
    free(seg), free(frac);
    return CLT_ENOMEM;
  }
  if (!w) { /* the all-reduce's segment (rank + 1) mod N (halves.c) */
    int j = (rank + 1) % nranks;
    clt__segments(count, nranks, seg);
    *off = seg[j], *n = seg[j + 1] - seg[j];
  } else { /* rank order, as a plan made with these counts lays them out */
    weighted_counts(w, nranks, count, seg + 1, frac);
    *off = 0;
    for (int r = 0; r < rank; r++) *off += seg[1 + r];
    *n = seg[1 + rank];
  }
  free(seg), free(frac);
  return CLT_OK;
}

int clt__dp_shard_counts(const double *w, int nranks, size_t count, size_t *counts) {
  for (int r = 0; r < nranks; r++) {
    size_t off;
    int rc = clt__dp_shard_part(w, nranks, r, count, &off, &counts[r]);
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

/* Rank `rank`'s part of each bucket, as the reduce-scatter cuts it
 * (clt__dp_shard_part), known without a plan. */
static int bucket_parts(const clt__bucket_layout *b, const double *w, int nranks, int rank, clt__shard_range *part) {
  for (int k = 0; k < b->n; k++) {
    size_t off, n;
    int rc = clt__dp_shard_part(w, nranks, rank, (size_t)(b->hi[k] - b->lo[k]), &off, &n);
    if (rc < 0) return rc;
    part[k] = (clt__shard_range){b->lo[k] + (int64_t)off, (int64_t)n, 0};
  }
  return CLT_OK;
}

/* The plans of every bucket, this rank's parts of them (for the norm, at
 * every stage on several ranks), its ranges in arena order, and under
 * stage 2 the pool's slots. */
int clt__dp_zero_plans(clt__dp *dp, int64_t P) {
  int rc = CLT_OK, nb = dp->buckets.n;
  const clt__bucket_layout *b = &dp->buckets;
  int64_t lowest = P, highest = 0;
  if (!(dp->shard = clt__calloc((size_t)nb + 2, sizeof *dp->shard))) return CLT_ENOMEM;
  dp->nshard = 0;
  if (dp->nranks > 1) {
    if (!(dp->part = clt__calloc(nb ? nb : 1, sizeof *dp->part))) return CLT_ENOMEM;
    CLT_TRY(bucket_parts(b, dp->zero ? dp->shard_w : NULL, dp->nranks, dp->rank, dp->part));
  }
  if (dp->zero) {
    size_t *counts = NULL;
    if (!(dp->rs = clt__calloc(nb ? nb : 1, sizeof *dp->rs))) return CLT_ENOMEM;
    if (dp->shard_w && !(counts = clt__calloc((size_t)dp->nranks, sizeof *counts))) return CLT_ENOMEM;
    clt_allreduce_opts ao = {0, dp->nlocal};
    for (int k = 0; k < nb; k++) {
      size_t count = (size_t)(b->hi[k] - b->lo[k]), off = 0, len = 0;
      if (counts && (rc = clt__dp_shard_counts(dp->shard_w, dp->nranks, count, counts)) < 0) break;
      if ((rc = clt_reduce_scatter_plan_create(dp->comm, count, counts, dp->wire ? CLT_F16 : CLT_F32, CLT_SUM, &ao,
                                               &dp->rs[k])) < 0)
        break;
      if ((rc = clt_reduce_scatter_plan_part(dp->rs[k], dp->rank, &off, &len)) < 0) break;
      if (b->lo[k] + (int64_t)off != dp->part[k].lo || (int64_t)len != dp->part[k].n) {
        rc = clt__error(CLT_EINTERNAL, "rank %d: bucket %d's part is %zu floats from %zu, the shard counted %lld from "
                        "%lld", dp->rank, k, len, off, (long long)dp->part[k].n,
                        (long long)(dp->part[k].lo - b->lo[k]));
        break;
      }
    }
    free(counts);
    if (rc < 0) goto fail;
    CLT_TRY(clt__dp_gather_plan(dp)); /* the parameters' allgather (zero_gather.c) */
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
  for (int k = nb - 1; k >= 0; k--) /* buckets are in backward order: highest first */
    if (dp->part[k].n) s[n++] = dp->part[k];
  if (highest < P) s[n++] = (clt__shard_range){highest, P - highest, 0};
  int64_t at = 0;
  for (int k = 0; k < n; k++) s[k].state_at = at, at += s[k].n;
  for (int k = 0; k < nb; k++) /* where each part sits in the shard (stage 2's gradient too) */
    for (int j = 0; j < n; j++)
      if (s[j].lo == dp->part[k].lo && dp->part[k].n) dp->part[k].state_at = s[j].state_at;
  dp->nshard = n;
  dp->shard_params = at;
  if (dp->pooled) {
    CLT_TRY(clt__grad_pool_make(b, &dp->pool));
    clt__log(CLT_LOG_INFO, "rank %d: --zero %d: optimizer state and gradients for %lld of %lld parameters (%d "
             "ranges); the backward writes into %d bucket buffers of %lld floats in all (the longest %lld)",
             dp->rank, dp->zero, (long long)at, (long long)P, n, dp->pool.nslots, (long long)dp->pool.floats,
             (long long)dp->pool.largest);
    if (at + dp->pool.floats >= P && dp->rank == 0 && dp->zero == 2)
      clt__log(CLT_LOG_WARN, "--zero 2: the gradient shard and the bucket buffers hold %lld floats, the whole "
               "gradient %lld: the largest bucket (%lld floats) is too large a part of the model to gain from stage "
               "2; lower --bucket-mb (a bucket holds at least one layer), or use --zero 1",
               (long long)(at + dp->pool.floats), (long long)P, (long long)dp->pool.largest);
  } else {
    clt__log(CLT_LOG_INFO, "rank %d: --zero %d: optimizer state for %lld of %lld parameters (%d ranges)", dp->rank,
             dp->zero, (long long)at, (long long)P, n);
  }
fail:
  return rc;
}

void clt__dp_zero_free(clt__dp *dp) {
  for (int k = 0; k < dp->buckets.n; k++) {
    if (dp->rs) clt_reduce_scatter_plan_destroy(dp->rs[k]);
  }
  clt__dp_gather_free(dp);
  free(dp->rs), free(dp->shard), free(dp->part);
  dp->rs = NULL, dp->shard = NULL, dp->part = NULL;
  clt__grad_pool_free(&dp->pool);
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

void clt__dp_unshard_state(const clt__dp *dp, const float *shard, int per, int64_t P, float *full) {
  for (int k = 0; k < dp->nshard; k++) copy_range(&dp->shard[k], per, P, full, (float *)shard, 1);
}

int clt__dp_zero_shard_params(const clt_model *m, double bucket_mb, int nranks, int rank, const double *w,
                              int64_t *params) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(m), covered = 0;
  clt__bucket_layout b;
  *params = P;
  if (nranks <= 1) return CLT_OK;
  CLT_TRY(clt__dp_model_layout(m, (int64_t)(bucket_mb * 1048576.0 / 4.0), &b));
  /* Rank r's part of every bucket (clt__dp_shard_part), and what no bucket covers. */
  int64_t mine = 0;
  for (int k = 0; k < b.n && rc == CLT_OK; k++) {
    size_t off, n;
    rc = clt__dp_shard_part(w, nranks, rank, (size_t)(b.hi[k] - b.lo[k]), &off, &n);
    mine += (int64_t)n;
    covered += b.hi[k] - b.lo[k];
  }
  *params = mine + (P - covered);
  clt__bucket_layout_free(&b);
fail:
  return rc;
}

int clt__dp_need(const clt_model *m, const clt_train_options *o, int nranks, int rank, int64_t room, int wire,
                 clt_replica_memory *need, int64_t *shard_params, const double *shard_w) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(m), state = P, pool_floats = 0;
  int pooled = o->zero >= 2 && nranks > 1 && o->accumulate == 1;
  int sharded_params = o->zero == 3 && nranks > 1; /* stage 3: the shard's parameters and the units' ring */
  clt__unit_layout units;
  memset(&units, 0, sizeof units);
  clt__bucket_layout b;
  clt__grad_pool pool;
  memset(&b, 0, sizeof b), memset(&pool, 0, sizeof pool);
  if (o->zero > 0 && nranks > 1) { /* this rank's shard, or (rank < 0) the largest any rank holds */
    state = 0;
    for (int r = rank < 0 ? 0 : rank; r < (rank < 0 ? nranks : rank + 1); r++) {
      int64_t p;
      CLT_TRY(clt__dp_zero_shard_params(m, o->bucket_mb, nranks, r, shard_w, &p));
      if (p > state) state = p;
    }
  }
  if (pooled) { /* no arena: the shard's gradient and the bucket buffers the backward writes into */
    CLT_TRY(clt__dp_model_layout(m, (int64_t)(o->bucket_mb * 1048576.0 / 4.0), &b));
    CLT_TRY(clt__grad_pool_make(&b, &pool));
    pool_floats = pool.floats;
  }
  clt__replica_config cfg = {.max_batch = room, .act_dtype = o->precision,
                             .state_per_param = o->offload == CLT_OFFLOAD_OPTIMIZER ? 0
                                                : clt_optimizer_state_per_param(&o->optimizer),
                             .state_params = state,
                             .no_grad_arena = pooled, .recompute = o->recompute,
                             .param_floats = sharded_params ? (state ? state : 1) : 0};
  clt__replica_memory(m->spec, &cfg, need);
  if (sharded_params) { /* the ring of gathered units beside the shard (zero_units.c) */
    CLT_TRY(clt__unit_layout_make(m->spec, &units));
    uint64_t ring = clt__unit_ring_bytes(&units);
    need->parameters += ring, need->total += ring;
    if (ring > need->largest) need->largest = ring, need->largest_what = "the ring of gathered units";
  }
  /* The f16 copies the wire sums (2 bytes a float), beside the f32 ones. */
  uint64_t more = pooled ? (uint64_t)(state + pool_floats) * (wire ? 6 : 4) : (wire ? (uint64_t)P * 2 : 0);
  need->gradients += more, need->total += more;
  if (shard_params) *shard_params = state;
fail:
  clt__unit_layout_free(&units);
  clt__grad_pool_free(&pool);
  clt__bucket_layout_free(&b);
  return rc;
}
