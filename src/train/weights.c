/*
 * weights.c: a trainer's parameters to and from .safetensors files, named
 * as PyTorch's nn.Sequential names the same layers (io/weights.c).
 */
#include "train/trainer.h"
#include "pp/pp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "io/weights.h"

int clt_trainer_save_weights(clt_trainer *t, const char *path) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(t->model);
  float *params = NULL;
  clt__st_tensor *tensors = NULL;
  int n;
  if (t->pp) { /* collective: the stages' parts to rank 0 */
    params = clt__calloc((size_t)P, sizeof *params);
    CLT_TRY(clt__trainer_all_ok(t, params ? CLT_OK : CLT_ENOMEM, "allocating for the weights"));
    CLT_TRY(clt__trainer_whole(t, params, NULL, 0));
    if (t->rank != 0) goto fail;
  } else {
    if (t->rank != 0) return CLT_OK;
    if (!(params = clt__calloc((size_t)P, sizeof *params))) return CLT_ENOMEM;
    CLT_TRY(clt_trainer_params(t, params, P));
  }
  CLT_TRY(clt__arena_tensors_alloc(t->model->spec, params, &tensors, &n));
  char step[32];
  snprintf(step, sizeof step, "%lld", (long long)t->steps_done);
  const char *meta[] = {"format", "cltrain-weights", "version", "1", "model", clt_model_text(t->model),
                        "step", step, NULL};
  CLT_TRY(clt__st_write(path, tensors, n, meta));
fail:
  free(params);
  free(tensors);
  return rc;
}

int clt_trainer_load_weights(clt_trainer *t, const char *path) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(t->model);
  float *params = clt__calloc((size_t)P, sizeof *params);
  CLT_TRY(clt__trainer_all_ok(t, params ? CLT_OK : CLT_ENOMEM, "allocating for the weights"));
  if (t->rank == 0) rc = clt__weights_read(t->model->spec, path, params);
  /* Every rank learns rank 0's outcome (and its message), then takes its bits. */
  CLT_TRY(clt__trainer_share_status(t, rc));
  if (t->nranks > 1) CLT_TRY(clt_bcast(t->comm, params, (size_t)P * sizeof *params, 0));
  /* every replica's optimizer state up to date first: only the parameters change */
  CLT_TRY(clt__trainer_sync_replicas(t, 0));
  t->sitting = 0;
  if (t->pp) { /* this stage's part */
    clt__pp_take(t->pp, t->model->spec, params, NULL, 0, params, NULL);
    P = clt_model_param_count(t->local);
  }
  for (int i = 0; i < t->nlocal; i++) {
    clt_tensor p = clt__replica_params(t->rep[i]);
    CLT_TRY(clt_tensor_upload(t->ctx[i], &p, params, (size_t)P * sizeof *params));
    if (t->host_params[i]) memcpy(t->host_params[i], params, (size_t)P * sizeof *params);
  }
fail:
  free(params);
  return rc;
}
