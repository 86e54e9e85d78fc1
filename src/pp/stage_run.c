/*
 * stage_run.c: a pipeline stage's runs, from the replica's pieces
 * (model/replica.h) on one of the stage's activation sets: a micro-batch's
 * forward, whose output goes to the next stage (or, on the last stage, the
 * loss and the backward at once), and later its backward from the next
 * stage's input gradient, whose own input gradient goes to the stage
 * before. Each waits for the device before it returns, so the host
 * buffers it was given may be reused.
 */
#include "pp/pp_internal.h"

int clt__pp_stage_forward(clt__replica *r, clt__act_set *s, const float *x, const int32_t *y, int64_t n,
                          const clt__pass *pass, int last, float *out, float *dx) {
  int rc = CLT_OK;
  const clt_model_spec *spec = r->spec;
  int regression = spec->loss != CLT_LOSS_CROSSENTROPY;
  const void *targets = regression ? (const void *)pass->targets : (const void *)y;
  if (n < 1 || n > r->cfg.max_batch)
    return clt__error(CLT_EINVAL, "a batch of %lld samples on a replica made for 1 to %lld", (long long)n,
                      (long long)r->cfg.max_batch);
  if (last && !targets)
    return clt__error(CLT_EINVAL, "the last pipeline stage of a %s model takes %s",
                      regression ? "regression" : "classification", regression ? "float targets" : "int32 labels");
  CLT_TRY(clt__replica_begin(r, pass));
  CLT_TRY(clt__replica_input(r, s, x, last ? targets : NULL, n));
  CLT_TRY(clt__replica_forward(r, s, n, pass));
  if (!last) {
    clt_tensor y_out = clt__act_set_output(r, s);
    CLT_TRY(clt__replica_read(r, &y_out, out)); /* waits: the input's host memory is free again */
    CLT_TRY(clt__replica_end(r, pass));
    return CLT_OK;
  }
  CLT_TRY(clt__replica_loss(r, s, n, pass));
  if (pass->train) {
    clt_tensor g;
    CLT_TRY(clt__replica_backward(r, s, n, NULL, dx != NULL, pass, &g));
    if (dx) CLT_TRY(clt__replica_read(r, &g, dx));
  }
  CLT_TRY(clt__replica_end(r, pass));
  if (!dx) CLT_TRY(clt__replica_finish(r, "a pipeline stage's forward and backward")); /* x is free again */
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "a pipeline stage's forward of %lld samples on %s", (long long)n, r->ctx->info.name);
}

int clt__pp_stage_backward(clt__replica *r, clt__act_set *s, const float *dy, int64_t n, const clt__pass *pass,
                           float *dx) {
  int rc = CLT_OK;
  clt_tensor g;
  if (n < 1 || n > r->cfg.max_batch)
    return clt__error(CLT_EINVAL, "a batch of %lld samples on a replica made for 1 to %lld", (long long)n,
                      (long long)r->cfg.max_batch);
  CLT_TRY(clt__replica_begin(r, pass));
  CLT_TRY(clt__replica_backward(r, s, n, dy, dx != NULL, pass, &g));
  if (dx) CLT_TRY(clt__replica_read(r, &g, dx));
  CLT_TRY(clt__replica_end(r, pass));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "a pipeline stage's backward of %lld samples on %s", (long long)n, r->ctx->info.name);
}
