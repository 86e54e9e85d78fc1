/*
 * agree.c: what keeps the replicas of a data-parallel job one model.
 * At create, every rank must run the same model with the same options
 * (compared field by field, so the message can name the one that differs);
 * during training, every replica of every rank must hold the same
 * parameters bit for bit, which a CRC32 of each replica's arena, gathered
 * from all ranks, checks every check_every steps.
 */
#include "dp/dp_internal.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <cltrain/opencl.h>

/* What must agree across ranks, compared field by field at start. */
typedef struct agreement {
  int64_t params, batch, accumulate, epochs, max_steps, seed, optimizer, checkpoints, zero;
  int64_t balance, balance_every, balance_min_share; /* the rebalance is collective: all re-split alike */
  uint32_t spec_crc;
  float lr;
} agreement;

int clt__dp_agree_options(const clt__dp *dp, const clt_model *m, const clt_train_options *o) {
  if (dp->nranks == 1) return CLT_OK;
  agreement mine;
  memset(&mine, 0, sizeof mine); /* the padding is compared too */
  mine.params = clt_model_param_count(m);
  mine.batch = o->batch;
  mine.accumulate = o->accumulate;
  mine.epochs = o->epochs;
  mine.max_steps = o->max_steps;
  mine.seed = (int64_t)o->seed;
  mine.optimizer = o->optimizer.kind;
  mine.checkpoints = o->checkpoint_dir ? o->checkpoint_every : -1;
  mine.zero = o->zero;
  mine.lr = o->schedule.lr;
  mine.balance = o->balance;
  mine.balance_every = o->balance == CLT_BALANCE_AUTO ? o->balance_every : 0;
  mine.balance_min_share = o->balance == CLT_BALANCE_AUTO ? o->balance_min_share : 0;
  const char *text = clt_model_text(m);
  mine.spec_crc = (uint32_t)crc32(0, (const Bytef *)text, (uInt)strlen(text));
  agreement *all = clt__calloc(dp->nranks, sizeof *all);
  if (!all) return CLT_ENOMEM;
  int rc = clt_allgather(dp->comm, &mine, sizeof mine, all);
  for (int r = 1; rc == CLT_OK && r < dp->nranks; r++) {
    const agreement *a = &all[0], *b = &all[r];
#define FIELD(f, what)                                                                                            \
  if (a->f != b->f) {                                                                                             \
    rc = clt__error(CLT_EMISMATCH, "rank %d disagrees with rank 0 on %s (%lld vs %lld); every rank must run the " \
                    "same model and options", r, what, (long long)b->f, (long long)a->f);                         \
    break;                                                                                                         \
  }
    FIELD(spec_crc, "the model spec (CRC32 of its text)")
    FIELD(params, "the parameter count")
    FIELD(batch, "the batch size")
    FIELD(accumulate, "--accumulate")
    FIELD(epochs, "the number of epochs")
    FIELD(max_steps, "--max-steps")
    FIELD(seed, "the seed")
    FIELD(optimizer, "the optimizer")
    FIELD(checkpoints, "checkpoints (-1: none, else --checkpoint-every)")
    FIELD(zero, "--zero (the ZeRO stage)")
    FIELD(balance, "--balance (0 equal, 1 weights, 2 auto)")
    FIELD(balance_every, "--balance-every")
    FIELD(balance_min_share, "--balance-min-share")
#undef FIELD
    if (a->lr != b->lr) {
      rc = clt__error(CLT_EMISMATCH, "rank %d disagrees with rank 0 on the learning rate (%g vs %g)", r, b->lr, a->lr);
      break;
    }
  }
  free(all);
  return rc;
}

int clt__dp_check_replicas(const clt__dp *dp, clt__replica *const *reps, const uint8_t *skip,
                           const float *host_params, int64_t step) {
  int rc = CLT_OK;
  clt_tensor pt = clt__replica_params(reps[0]);
  int64_t P = pt.shape[0];
  float *p = clt__calloc((size_t)(P ? P : 1), sizeof *p), *shard = NULL;
  uint32_t *mine = clt__calloc(dp->max_local, sizeof *mine);
  uint32_t *all = clt__calloc((size_t)dp->nranks * dp->max_local, sizeof *all);
  if (!p || !mine || !all) { rc = CLT_ENOMEM; goto fail; }
  int first = -1;
  if (dp->zero == 3) P = clt_model_param_count(dp->local);
  if (dp->zero == 3) {
    float *whole = realloc(p, (size_t)(P ? P : 1) * sizeof *p);
    if (whole) p = whole;
    shard = clt__calloc((size_t)(dp->shard_params ? dp->shard_params : 1), sizeof *shard);
    if (!whole || !shard) { rc = CLT_ENOMEM; goto fail; }
  }
  for (int i = 0; i < dp->nlocal; i++) {
    if (skip && skip[i]) continue;
    pt = clt__replica_params(reps[i]);
    if (dp->zero == 3) { /* its shard over the host's whole parameters (the same on every rank) */
      memcpy(p, dp->z3_full, (size_t)P * sizeof *p);
      CLT_TRY(clt_tensor_download(clt__replica_context(reps[i]), &pt, shard, (size_t)dp->shard_params * sizeof *p));
      clt__dp_unshard_state(dp, shard, 1, P, p);
    } else {
      CLT_TRY(clt_tensor_download(clt__replica_context(reps[i]), &pt, p, (size_t)P * sizeof *p));
    }
    mine[i] = (uint32_t)crc32(0, (const Bytef *)p, (uInt)(P * sizeof *p));
    if (first < 0) first = i;
  }
  uint32_t stand_in = first >= 0 ? mine[first]
                     : host_params ? (uint32_t)crc32(0, (const Bytef *)host_params, (uInt)(P * sizeof *p)) : 0;
  for (int i = 0; i < dp->nlocal; i++) /* a copy of a checked one when it is read */
    if (skip && skip[i]) mine[i] = stand_in;
  if (dp->nranks > 1)
    CLT_TRY(clt_allgather(dp->comm, mine, (size_t)dp->max_local * sizeof *mine, all));
  else
    memcpy(all, mine, (size_t)dp->max_local * sizeof *mine);
  for (int r = 0; r < dp->nranks; r++)
    for (int i = 0; i < dp->rank_count[r]; i++) {
      uint32_t c = all[(size_t)r * dp->max_local + i];
      if (c != all[0]) {
        rc = clt__error(CLT_EMISMATCH, "after step %lld the parameters of replica %d (rank %d, device %d there) "
                        "differ from replica 0's (CRC32 %08x vs %08x): the replicas have diverged",
                        (long long)step, dp->rank_first[r] + i, r, i, c, all[0]);
        goto fail;
      }
    }
fail:
  free(p), free(mine), free(all), free(shard);
  return rc;
}
