/*
 * weights.c: a trainer's parameters to and from .safetensors files, named
 * as PyTorch's nn.Sequential names the same layers (io/weights.c).
 */
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "io/weights.h"

int clt_trainer_save_weights(clt_trainer *t, const char *path) {
  int rc = CLT_OK;
  CLT_HANDLE(t, "trainer");
  int64_t P = clt_model_param_count(t->model);
  float *params = NULL;
  char *norm = NULL;
  clt__st_tensor *tensors = NULL;
  int n;
  /* collective where the strategy holds a part of the model (a pipeline's stages to rank 0) */
  params = clt__calloc((size_t)P, sizeof *params);
  rc = clt__path_arg(__func__, "path", path);
  CLT_TRY(clt__trainer_args_ok(t, rc < 0 ? rc : params ? CLT_OK : CLT_ENOMEM, "allocating for the weights"));
  CLT_TRY(t->s.i->get_state(t->s.self, params, NULL, 0));
  if (t->rank != 0) goto fail;
  CLT_TRY(clt__arena_tensors_alloc(t->model->spec, params, &tensors, &n));
  char step[32];
  snprintf(step, sizeof step, "%lld", (long long)t->steps_done);
  norm = clt__trainer_norm_json(t);
  const char *meta[] = {"format", "cltrain-weights", "version", "1", "model", clt_model_text(t->model),
                        "step", step, norm ? "normalization" : NULL, norm, NULL};
  CLT_TRY(clt__st_write(path, tensors, n, meta));
fail:
  free(norm);
  free(params);
  free(tensors);
  return rc;
}

int clt_trainer_load_weights(clt_trainer *t, const char *path) {
  CLT_HANDLE(t, "trainer");
  int64_t P = clt_model_param_count(t->model);
  float *params = clt__calloc((size_t)P, sizeof *params);
  int rc = clt__path_arg(__func__, "path", path);
  CLT_TRY(clt__trainer_args_ok(t, rc < 0 ? rc : params ? CLT_OK : CLT_ENOMEM, "allocating for the weights"));
  if (t->rank == 0) rc = clt__weights_read(t->model->spec, path, params);
  /* Every rank learns rank 0's outcome (and its message), then takes its bits. */
  CLT_TRY(clt__trainer_share_status(t, rc));
  if (t->nranks > 1) CLT_TRY(clt_bcast(t->comm, params, (size_t)P * sizeof *params, 0));
  CLT_TRY(t->s.i->set_state(t->s.self, params, NULL)); /* only the parameters change */
fail:
  free(params);
  return rc;
}
