/*
 * weights.c: a trainer's parameters to and from .safetensors files, named
 * as PyTorch's nn.Sequential names the same layers.
 */
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

int clt__arena_tensors(const clt_model_spec *s, const char *prefix, const float *base, clt__st_tensor *t, int *n) {
  int64_t covered = 0;
  *n = 0;
  for (int i = 1; i < s->nlayers; i++) {
    const clt_layer_spec *l = &s->layers[i];
    for (int k = 0; k < l->nparams; k++) {
      const clt_param_spec *p = &l->param[k];
      if (p->tied) continue; /* saved once, under its owner's name */
      clt__st_tensor *w = &t[(*n)++];
      memset(w, 0, sizeof *w);
      snprintf(w->name, sizeof w->name, "%s%d.%s", prefix, i - 1, p->name);
      w->ndim = p->ndim;
      for (int d = 0; d < p->ndim; d++) w->shape[d] = p->shape[d];
      w->data = base + p->offset;
      covered += p->count;
    }
  }
  if (covered != s->param_count)
    return clt__error(CLT_EINTERNAL, "%s: the layers' tensors cover %lld of the %lld parameters", s->name,
                      (long long)covered, (long long)s->param_count);
  return CLT_OK;
}

/* Allocating form of clt__arena_tensors. */
static int arena_tensors(const clt_model_spec *s, const float *params, clt__st_tensor **out, int *n) {
  clt__st_tensor *t = clt__calloc((size_t)s->nlayers * CLT_MAX_LAYER_PARAMS, sizeof *t);
  *out = t;
  *n = 0;
  if (!t) return CLT_ENOMEM;
  return clt__arena_tensors(s, "", params, t, n);
}

int clt_trainer_save_weights(clt_trainer *t, const char *path) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(t->model);
  float *params = NULL;
  clt__st_tensor *tensors = NULL;
  int n;
  /* collective where the strategy holds a part of the model (a pipeline's stages to rank 0) */
  params = clt__calloc((size_t)P, sizeof *params);
  CLT_TRY(clt__trainer_all_ok(t, params ? CLT_OK : CLT_ENOMEM, "allocating for the weights"));
  CLT_TRY(t->s.i->get_state(t->s.self, params, NULL, 0));
  if (t->rank != 0) goto fail;
  CLT_TRY(arena_tensors(t->model->spec, params, &tensors, &n));
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

/* "(10, 784)": a tensor's shape for messages. */
static void shape_text(const clt__st_tensor *t, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "(");
  for (int d = 0; d < t->ndim && n < size; d++)
    n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  if (n < size) snprintf(buf + n, size - n, ")");
}

int clt__weights_read(const clt_model_spec *s, const char *path, float *params) {
  int rc = CLT_OK, n;
  clt__st_tensor *tensors = NULL;
  clt__st_file *f = NULL;
  CLT_TRY(clt__st_open(path, &f));
  CLT_TRY(clt__st_check_data(f, 0));
  CLT_TRY(arena_tensors(s, params, &tensors, &n));
  /* A checkpoint holds the same tensors under "params/". */
  const char *format = clt__st_metadata(f, "format");
  const char *prefix = format && strcmp(format, "cltrain-checkpoint") == 0 ? "params/" : "";
  for (int i = 0; i < n; i++) {
    clt__st_tensor have;
    char name[160];
    int64_t count = 1;
    for (int d = 0; d < tensors[i].ndim; d++) count *= tensors[i].shape[d];
    snprintf(name, sizeof name, "%s%s", prefix, tensors[i].name);
    rc = clt__st_find(f, name, &have);
    if (rc == CLT_ENOTFOUND) {
      rc = clt__error(CLT_ESHAPE, "%s has no tensor '%s', which the model needs; was it saved from another model?",
                      path, name);
      goto fail;
    }
    if (rc < 0) goto fail;
    int same = have.ndim == tensors[i].ndim;
    for (int d = 0; same && d < have.ndim; d++) same = have.shape[d] == tensors[i].shape[d];
    if (!same) {
      char hs[160], ms[160];
      shape_text(&have, hs, sizeof hs);
      shape_text(&tensors[i], ms, sizeof ms);
      rc = clt__error(CLT_ESHAPE, "%s: tensor '%s' has shape %s but the model's is %s; was it saved from another "
                      "model?", path, name, hs, ms);
      goto fail;
    }
    CLT_TRY(clt__st_read(f, &have, (float *)tensors[i].data, count));
  }
fail:
  clt__st_close(f);
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
  CLT_TRY(t->s.i->set_state(t->s.self, params, NULL)); /* only the parameters change */
fail:
  free(params);
  return rc;
}
