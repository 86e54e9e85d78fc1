/*
 * offload.c: the optimizer step of a replica whose optimizer state lives
 * in host memory: under --offload optimizer every replica's (ZeRO-Offload:
 * the moments of its shard, 8 bytes a parameter with Adam and AdamW, never
 * on the device), and without it a replica whose device rounds divide and
 * sqrt loosely (replicas.c). The arithmetic is the device kernel's
 * (clt_optimizer_step_host_masked), so the parameters are the same bits as
 * a step on the device.
 *
 * One step: the shard's gradient is read once (a blocking read on the
 * compute queue, so after the backward and the exchange that wrote it),
 * then range by range the host steps its parameters and moments and
 * writes the range's parameters back without waiting: the device's copy
 * of range k runs while the host steps range k + 1, and the last ranges'
 * copies while the host goes on (the allgather under ZeRO, the next
 * step's data and its forward's enqueue, which the in-order queue puts
 * behind the copies). The forward itself cannot start before its first
 * layer's parameters are back, and those are in the last range stepped
 * (ranges are in arena order), so the forward is not overlapped.
 *
 * The host copy of the parameters is read by the uploads until the queue
 * passes them; the next write to it is the next step's host step, after
 * that step's blocking read of the gradient on the same queue.
 *
 * No fp16 master weights to move: under --precision fp16 the parameters
 * stay float32 on the device (only activations are half), so the state is
 * all there is to offload.
 */
#include "dp/dp_internal.h"

#include <stdlib.h>
#include <string.h>

int clt__dp_device_state(const clt__dp *dp) { return !dp->offload; }

int clt__dp_step_on_host(clt__dp *dp, int i, const clt__update *u) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(dp->local);
  const clt_optimizer_config *cfg = &dp->o->optimizer;
  const int per = clt_optimizer_state_per_param(cfg), pooled = dp->pooled;
  const int packed = dp->zero == 3; /* stage 3: the device holds only the shard's parameters, packed */
  const clt__shard_range *s = dp->shard;
  clt_tensor p = clt__replica_params(dp->rep[i]), g = clt__dp_rep_grads(dp->drep[i]);
  CLT_TRY(clt_tensor_download(dp->ctx[i], &g, dp->host_grads, (size_t)(pooled ? dp->shard_params : P) * sizeof(float)));
  for (int k = 0; k < dp->nshard; k++) {
    size_t lo = (size_t)s[k].lo;
    clt_optimizer_step_host_masked(cfg, u->step, u->lr, u->scale, dp->host_params[i] + lo,
                                   dp->host_grads + (pooled ? (size_t)s[k].state_at : lo),
                                   dp->host_state[i] + (size_t)(s[k].state_at * per), (size_t)s[k].n,
                                   dp->decay_host ? dp->decay_host + lo : NULL);
    /* Only the shard: the rest of the host copy is stale under ZeRO (the
     * allgather brings it to the device). */
    clt_tensor pk;
    CLT_TRY(clt_tensor_view(p.buf, p.offset + (packed ? (size_t)s[k].state_at : lo) * 4, CLT_F32, 1, &s[k].n, &pk));
    CLT_TRY(clt_tensor_upload_async(dp->ctx[i], &pk, dp->host_params[i] + lo, (size_t)s[k].n * sizeof(float)));
  }
fail:
  return rc;
}
