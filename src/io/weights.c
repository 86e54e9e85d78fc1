/*
 * weights.c: a model's parameters as safetensors tensors, named as
 * PyTorch's nn.Sequential names the same layers, and weights files (or a
 * checkpoint's parameters) read into a parameter arena.
 */
#include "io/weights.h"

#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int clt__arena_tensors_alloc(const clt_model_spec *s, const float *params, clt__st_tensor **out, int *n) {
  clt__st_tensor *t = clt__calloc((size_t)s->nlayers * CLT_MAX_LAYER_PARAMS, sizeof *t);
  *out = t;
  *n = 0;
  if (!t) return CLT_ENOMEM;
  return clt__arena_tensors(s, "", params, t, n);
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
  CLT_TRY(clt__arena_tensors_alloc(s, params, &tensors, &n));
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
