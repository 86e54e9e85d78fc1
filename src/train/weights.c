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

/* The normalisation path's metadata holds, for a model of F inputs. */
static int read_normalization(const char *path, int64_t F, int32_t *kind, float *norm) {
  clt_normalize_kind k;
  int64_t n;
  int rc = clt_weights_normalization(path, &k, norm, norm + F, F, &n);
  if (rc < 0) return rc;
  if (k != CLT_NORMALIZE_NONE && n != F)
    return clt__error(CLT_EFORMAT, "%s: its normalisation has %lld features, but the model takes %lld inputs", path,
                      (long long)n, (long long)F);
  *kind = (int32_t)k;
  return CLT_OK;
}

int clt_trainer_load_weights(clt_trainer *t, const char *path) {
  CLT_HANDLE(t, "trainer");
  const int64_t F = clt_model_input_size(t->model);
  float *norm = clt__calloc((size_t)(2 * F), sizeof *norm); /* shift, then scale */
  int32_t kind = CLT_NORMALIZE_NONE;
  int64_t P = clt_model_param_count(t->model);
  float *params = clt__calloc((size_t)P, sizeof *params);
  int rc = clt__path_arg(__func__, "path", path);
  CLT_TRY(clt__trainer_args_ok(t, rc < 0 ? rc : params ? CLT_OK : CLT_ENOMEM, "allocating for the weights"));
  if (!norm) rc = CLT_ENOMEM;
  if (t->rank == 0 && rc == CLT_OK) rc = clt__weights_read(t->model->spec, path, params);
  if (t->rank == 0 && rc == CLT_OK) rc = read_normalization(path, F, &kind, norm);
  /* Every rank learns rank 0's outcome (and its message), then takes its bits. */
  CLT_TRY(clt__trainer_share_status(t, rc));
  if (t->nranks > 1) {
    CLT_TRY(clt_bcast(t->comm, params, (size_t)P * sizeof *params, 0));
    CLT_TRY(clt_bcast(t->comm, &kind, sizeof kind, 0));
    CLT_TRY(clt_bcast(t->comm, norm, (size_t)(2 * F) * sizeof *norm, 0));
  }
  CLT_TRY(t->s.i->set_state(t->s.self, params, NULL)); /* only the parameters change */
  /* The inputs' normalisation travels with the weights (none saved: none). */
  CLT_TRY(clt_trainer_set_normalization(t, (clt_normalize_kind)kind, norm, norm + F));
fail:
  free(params);
  free(norm);
  return rc;
}
