/*
 * shard_by.c: how large each rank's ZeRO shard is (issue 37). Shards are
 * equal by default (the all-reduce's own segments); --shard-weights 3,1
 * sizes them in proportion to given weights, one per rank, and --shard-by
 * memory in proportion to what each rank's devices have free for a shard.
 * The batch's shares are a separate matter (balance.c, by speed): a fast
 * device with little memory can take much of the batch and little state.
 *
 * Free for a shard. A replica needs its unsharded buffers whatever its
 * shard (the parameters, activations, scratch; under stage 2 the bucket
 * buffers, and the whole gradient on a device that keeps every bucket
 * apart; the parameters no bucket covers, which every rank steps), and
 * then so many bytes a parameter of its shard (optimizer state; under
 * stage 2 the gradient's shard), the same on every rank. So what a rank's
 * device has free for its shard is its memory (capped by
 * --max-device-memory) less that replica's need with an empty shard, and
 * shards in proportion to it leave every device the same fraction of its
 * room: the largest model that fits anywhere fits. A rank with several
 * devices holds one shard on each, so the smallest counts. A device whose
 * room is all taken gets weight 0 (no shard), and when no rank has any
 * room the shards stay equal and the memory check says what does not fit.
 *
 * The sizes themselves are cut in one place, clt__dp_shard_part (zero.c).
 */
#include "dp/dp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes a device of this rank has for its shard: the smallest over its
 * devices of memory (capped) less the replica's need with no shard. */
static int room_for_shard(clt__dp *dp, const clt__job *job, double *out) {
  int rc = CLT_OK, N = dp->nranks;
  const clt_train_options *o = dp->o;
  double *none = clt__calloc((size_t)N, sizeof *none);
  if (!none) return CLT_ENOMEM;
  for (int r = 0; r < N; r++) none[r] = r != dp->rank; /* every other rank holds it all */
  clt_replica_memory need;
  CLT_TRY(clt__dp_need(dp->local, o, N, dp->rank, dp->room, dp->nreplicas > 1 && o->precision == CLT_F16, &need,
                       NULL, none));
  *out = -1;
  int wire = dp->nreplicas > 1 && o->precision == CLT_F16;
  int64_t P = clt_model_param_count(dp->local);
  for (int i = 0; i < dp->nlocal; i++) {
    const clt_device_info *d = clt_devices_info(job->devs, i);
    uint64_t cap = d->global_mem_bytes, total = need.total;
    if (o->max_device_memory && (!cap || o->max_device_memory < cap)) cap = o->max_device_memory;
    /* Stage 2 on a device whose GEMMs the calling thread runs keeps every
     * bucket apart: the whole gradient besides (replicas.c checks it). */
    if (o->zero == 2 && o->accumulate == 1 && !clt__context_enqueues_ahead(job->ctx[i]))
      total += (uint64_t)P * (wire ? 6 : 4);
    double free_b = cap > total ? (double)(cap - total) : 0;
    if (*out < 0 || free_b < *out) *out = free_b;
  }
  if (*out < 0) *out = 0;
fail:
  free(none);
  return rc;
}

int clt__dp_shard_weights(clt__dp *dp, const clt__job *job) {
  int rc = CLT_OK, N = dp->nranks;
  const clt_train_options *o = dp->o;
  free(dp->shard_w);
  dp->shard_w = NULL;
  if (o->shard_by == CLT_SHARD_EQUAL || N < 2) return CLT_OK;
  double *w = clt__calloc((size_t)N, sizeof *w);
  if (!w) return CLT_ENOMEM;
  if (o->shard_by == CLT_SHARD_WEIGHTS) { /* checked: one per rank of the job, >= 0, not all 0 */
    memcpy(w, o->shard_weights, (size_t)N * sizeof *w);
  } else {
    double mine = 0;
    rc = room_for_shard(dp, job, &mine);
    CLT_TRY(clt__all_ok(dp->comm, rc, "measuring each device's room for its shard (--shard-by memory)"));
    CLT_TRY(clt_allgather(dp->comm, &mine, sizeof mine, w));
  }
  double sum = 0;
  for (int r = 0; r < N; r++) sum += w[r];
  if (!(sum > 0)) { /* nothing has room: equal shards, and the memory check names what does not fit */
    clt__log(CLT_LOG_WARN, "--shard-by memory: no rank's devices have room beyond a replica's unsharded buffers; "
             "the shards stay equal");
    free(w);
    return CLT_OK;
  }
  if (dp->rank == 0) {
    char line[512];
    size_t len = 0;
    for (int r = 0; r < N && len < sizeof line; r++)
      len += (size_t)snprintf(line + len, sizeof line - len, "%s%.3g", r ? ":" : "", w[r] / sum);
    clt__log(CLT_LOG_INFO, "%s: the ZeRO shards of ranks 0 to %d are %s of the parameters%s",
             o->shard_by == CLT_SHARD_MEMORY ? "--shard-by memory" : "--shard-weights", N - 1, line,
             o->shard_by == CLT_SHARD_MEMORY ? " (each rank's room beside its unsharded buffers)" : "");
  }
  dp->shard_w = w;
  return CLT_OK;
fail:
  free(w);
  return rc;
}
