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

/* The next line of a spec that says something (no blank or comment-only
 * lines), trimmed, into out; *p advances past it; 0 at the end. */
static int next_spec_line(const char **p, int *lineno, char *out, size_t len) {
  while (**p) {
    const char *s = *p, *e = strchr(s, '\n');
    if (!e) e = s + strlen(s);
    *p = *e ? e + 1 : e;
    (*lineno)++;
    const char *hash = memchr(s, '#', (size_t)(e - s));
    if (hash) e = hash;
    while (s < e && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
    if (e == s) continue;
    size_t n = (size_t)(e - s) < len - 1 ? (size_t)(e - s) : len - 1;
    memcpy(out, s, n);
    out[n] = 0;
    return 1;
  }
  return 0;
}

void clt__spec_difference(const char *saved, const char *whose, const clt_model_spec *now, char *out, size_t len) {
  const char *a = saved, *b = now->text;
  int la = 0, lb = 0;
  char x[128], y[128];
  out[0] = 0;
  for (;;) {
    int ha = next_spec_line(&a, &la, x, sizeof x), hb = next_spec_line(&b, &lb, y, sizeof y);
    if (!ha && !hb) return;
    if (ha && hb && strcmp(x, y) == 0) continue;
    if (ha && hb)
      snprintf(out, len, "; the specs differ from line %d of %s ('%s') and line %d of %s ('%s')", la, whose, x,
               lb, now->name, y);
    else if (hb)
      snprintf(out, len, "; %s spec ends before line %d of %s ('%s')", whose, lb, now->name, y);
    else
      snprintf(out, len, "; %s ends before line %d of %s spec ('%s')", now->name, la, whose, x);
    return;
  }
}


/* "(10, 784)": a tensor's shape for messages. */
static void shape_text(const clt__st_tensor *t, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "(");
  for (int d = 0; d < t->ndim && n < size; d++)
    n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  if (n < size) snprintf(buf + n, size - n, ")");
}

/* Does name start with pattern, where a '*' in pattern stands for one
 * path component ("optim/ * /" matches "optim/m/")? The rest of name. */
static const char *after_prefix(const char *name, const char *pattern) {
  for (; *pattern; pattern++) {
    if (*pattern == '*') {
      const char *slash = strchr(name, '/');
      if (!slash || slash == name) return NULL;
      name = slash;
      continue;
    }
    if (*name++ != *pattern) return NULL;
  }
  return name;
}

/* Is name "<i>.<param>", a tensor the model saves (nn.Sequential's index
 * i of a layer, not counting the input line; tied tensors are saved once,
 * under their owner's name)? */
static int model_tensor(const clt_model_spec *s, const char *name) {
  char *dot;
  if (*name < '0' || *name > '9') return 0;
  long i = strtol(name, &dot, 10);
  if (*dot != '.' || (name[0] == '0' && dot - name > 1) || i >= s->nlayers - 1) return 0; /* "00.weight" is not "0." */
  const clt_layer_spec *l = &s->layers[i + 1];
  for (int k = 0; k < l->nparams; k++)
    if (!l->param[k].tied && strcmp(dot + 1, l->param[k].name) == 0) return 1;
  return 0;
}

const char *clt__weights_stranger(clt__st_file *f, const clt_model_spec *s, const char *const *prefixes, int *count) {
  const char *first = NULL;
  void *it = NULL;
  int strangers = 0;
  for (const char *name; (name = clt__st_next_name(f, &it));) {
    int known = 0;
    for (int p = 0; !known && prefixes[p]; p++) {
      const char *rest = after_prefix(name, prefixes[p]);
      known = rest && model_tensor(s, rest);
    }
    if (!known && strangers++ == 0) first = name;
  }
  if (count) *count = strangers;
  return first;
}

int clt__weights_read(const clt_model_spec *s, const char *path, float *params) {
  int rc = CLT_OK, n;
  clt__st_tensor *tensors = NULL;
  clt__st_file *f = NULL;
  char diff[400] = "";
  CLT_TRY(clt__st_open(path, &f));
  CLT_TRY(clt__st_check_data(f, 0));
  CLT_TRY(clt__arena_tensors_alloc(s, params, &tensors, &n));
  /* A checkpoint holds the same tensors under "params/", and the
   * optimizer's state of each under "optim/<slot>/", which is left out. */
  const char *format = clt__st_metadata(f, "format"), *saved = clt__st_metadata(f, "model");
  int checkpoint = format && strcmp(format, "cltrain-checkpoint") == 0;
  const char *prefix = checkpoint ? "params/" : "";
  static const char *const weights_names[] = {"", NULL}, *const checkpoint_names[] = {"params/", "optim/*/", NULL};
  const char *whose = checkpoint ? "the checkpoint's" : "the file's";
  if (saved) clt__spec_difference(saved, whose, s, diff, sizeof diff);
  /* Every tensor of the file is one of the model's: one more is a file of
   * another model (a 3-layer MLP's weights would load into a 2-layer
   * spec's and evaluate as a model nobody trained). */
  int extra;
  const char *stranger = clt__weights_stranger(f, s, checkpoint ? checkpoint_names : weights_names, &extra);
  if (stranger) {
    char more[48] = "";
    if (extra > 1) snprintf(more, sizeof more, " (and %d more)", extra - 1);
    rc = clt__error(CLT_ESHAPE, "%s holds a tensor '%s'%s that the model %s does not have%s; was it saved from "
                    "another model?", path, stranger, more, s->name, diff);
    goto fail;
  }
  for (int i = 0; i < n; i++) {
    clt__st_tensor have;
    char name[160];
    int64_t count = 1;
    for (int d = 0; d < tensors[i].ndim; d++) count *= tensors[i].shape[d];
    snprintf(name, sizeof name, "%s%s", prefix, tensors[i].name);
    rc = clt__st_find(f, name, &have);
    if (rc == CLT_ENOTFOUND) {
      rc = clt__error(CLT_ESHAPE, "%s has no tensor '%s', which the model %s needs%s; was it saved from another "
                      "model?", path, name, s->name, diff);
      goto fail;
    }
    if (rc < 0) goto fail;
    int same = have.ndim == tensors[i].ndim;
    for (int d = 0; same && d < have.ndim; d++) same = have.shape[d] == tensors[i].shape[d];
    if (!same) {
      char hs[160], ms[160];
      shape_text(&have, hs, sizeof hs);
      shape_text(&tensors[i], ms, sizeof ms);
      rc = clt__error(CLT_ESHAPE, "%s: tensor '%s' has shape %s but the model's is %s%s; was it saved from another "
                      "model?", path, name, hs, ms, diff);
      goto fail;
    }
    CLT_TRY(clt__st_read(f, &have, (float *)tensors[i].data, count));
  }
  /* Everything fits a spec that says something else (another activation,
   * dropout rate): loaded, as a checkpoint is, with a warning. */
  if (diff[0])
    clt__log(CLT_LOG_WARN, "%s: the parameters fit the model %s, but its spec is not the one saved%s", path, s->name,
             diff);
fail:
  clt__st_close(f);
  free(tensors);
  return rc;
}
