/*
 * model.c: the public model object: a parsed spec with its shapes and
 * parameter layout, loading from a file, and the summary table.
 */
#include "core/internal.h"
#include "model/layer.h"
#include "model/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Model spec files are small; anything this big is not one. */
#define MAX_SPEC_BYTES (1 << 20)

int clt_model_parse(const char *text, const char *name, clt_model **out) {
  CLT_ARG(out);
  *out = NULL;
  CLT_ARG(text);
  clt_model *m = clt__calloc(1, sizeof *m);
  if (!m) return CLT_ENOMEM;
  int rc = clt__spec_parse(text, name, &m->spec);
  if (rc < 0) {
    free(m);
    return rc;
  }
  *out = m;
  return CLT_OK;
}

int clt_model_load(const char *path, clt_model **out) {
  CLT_ARG(out);
  *out = NULL;
  CLT_PATH_ARG(path);
  FILE *f = fopen(path, "rb");
  if (!f) return clt__error(errno == ENOENT ? CLT_ENOTFOUND : CLT_EIO, "model spec %s: %s", path, strerror(errno));
  char *buf = clt__calloc(1, MAX_SPEC_BYTES + 1);
  if (!buf) {
    fclose(f);
    return CLT_ENOMEM;
  }
  size_t len = fread(buf, 1, MAX_SPEC_BYTES + 1, f);
  int bad = ferror(f), err = errno;
  fclose(f);
  int rc;
  if (bad && err == EISDIR)
    rc = clt__error(CLT_EIO, "model spec %s is a directory; name the spec file (for example %s/model.spec)", path,
                    path);
  else if (bad)
    rc = clt__error(CLT_EIO, "model spec %s: read error: %s", path, strerror(err));
  else if (len > MAX_SPEC_BYTES)
    rc = clt__error(CLT_EFORMAT, "model spec %s: larger than %d bytes; is it really a model spec?", path,
                    MAX_SPEC_BYTES);
  else if (memchr(buf, '\0', len))
    rc = clt__error(CLT_EFORMAT, "model spec %s: contains NUL bytes; is it really a model spec?", path);
  else
    rc = clt_model_parse(buf, path, out);
  free(buf);
  return rc;
}

void clt_model_destroy(clt_model *m) {
  if (!m) return;
  clt__spec_destroy(m->spec);
  free(m);
}

/* A NULL model (a Fortran handle never made) has nothing: 0, "", -1 for
 * its loss, NaN. */
int clt_model_layer_count(const clt_model *m) { return m ? m->spec->nlayers : 0; }
int64_t clt_model_param_count(const clt_model *m) { return m ? m->spec->param_count : 0; }
int64_t clt_model_input_size(const clt_model *m) { return m ? clt__shape_numel(&m->spec->layers[0].out_shape) : 0; }
int clt_model_num_classes(const clt_model *m) { return m ? m->spec->num_classes : 0; }
int clt_model_vocab(const clt_model *m) { return m ? m->spec->layers[0].out_shape.vocab : 0; }
const char *clt_model_text(const clt_model *m) { return m ? m->spec->text : ""; }
/* Classifiers label each sample once; sequence models label each
 * position. */
int clt_model_labels_per_sample(const clt_model *m) { return m ? (int)m->spec->labels_per_sample : 0; }
clt_loss_kind clt_model_loss(const clt_model *m) { return m ? (clt_loss_kind)m->spec->loss : (clt_loss_kind)-1; }
double clt_model_huber_delta(const clt_model *m) {
  return m && m->spec->loss == CLT_LOSS_HUBER ? (double)m->spec->huber_delta : NAN;
}

/* Each parameter tensor's range, a tied one's in its owner's place;
 * neighbours joined into one run. */
int clt__model_check_recompute(const clt_model *m, int recompute) {
  if (recompute != CLT_RECOMPUTE_BLOCKS || m->spec->nblocks > 0) return CLT_OK;
  return clt__error(CLT_EINVAL, "--recompute blocks: %s has no block: recomputation keeps each pass of a `block "
                    "repeat=N` ... `end` of the spec only by its input and runs it again in the backward; put the "
                    "repeated layers in a block, or train without --recompute", m->spec->name);
}

int clt__model_grad_ranges(const clt_model *m, int layer, clt__param_range *out, int cap) {
  const clt_layer_spec *l = &m->spec->layers[layer];
  int n = 0;
  for (int k = 0; k < l->nparams; k++) {
    const clt_param_spec *p = &l->param[k];
    if (n > 0 && n <= cap && out[n - 1].hi == p->offset) {
      out[n - 1].hi += p->count;
      continue;
    }
    if (n < cap) out[n] = (clt__param_range){p->offset, p->offset + p->count};
    n++;
  }
  return n;
}

/* One layer's description: "conv2d 32 k3 s1 p1". */
static void describe(const clt_layer_spec *l, char *buf, size_t len) {
  if (l->kind->describe) l->kind->describe(l, buf, len);
  else snprintf(buf, len, "%s", l->kind->name);
}

/* The tensors weight decay applies to (clt_param_spec.decay: the matrices
 * of linear, conv2d, attention and swiglu layers) as "q_proj k_proj", their
 * names without ".weight"; "-" when none; "- (tied)" for a weight that is
 * another layer's (it takes its owner's: an embedding's, none). Returns
 * the parameters counted. */
static int64_t decayed(const clt_layer_spec *l, char *buf, size_t len) {
  size_t used = 0;
  int64_t n = 0, tied = 0;
  buf[0] = 0;
  for (int k = 0; k < l->nparams; k++) {
    const clt_param_spec *p = &l->param[k];
    tied |= p->tied;
    if (!p->decay || p->tied || used >= len) continue;
    const char *dot = strstr(p->name, ".weight");
    int w = dot && dot[7] == 0 ? (int)(dot - p->name) : (int)strlen(p->name);
    used += (size_t)snprintf(buf + used, len - used, "%s%.*s", used ? " " : "", w, p->name);
    n += p->count;
  }
  if (!buf[0]) snprintf(buf, len, "%s", tied ? "- (tied)" : l->nparams ? "-" : "");
  return n;
}

int clt_model_summary(const clt_model *m, char **out) {
  CLT_ARG(out);
  *out = NULL;
  CLT_HANDLE(m, "model");
  const clt_model_spec *s = m->spec;
  size_t cap = 512 + (size_t)s->nlayers * 200, used = 0;
  char *buf = clt__calloc(1, cap);
  int wide = 28;
  int64_t decay = 0;
  if (!buf) return CLT_ENOMEM;
  for (int i = 0; i < s->nlayers; i++) { /* the layer column as wide as its widest */
    char what[64];
    describe(&s->layers[i], what, sizeof what);
    if ((int)strlen(what) > wide) wide = (int)strlen(what);
  }
  used += snprintf(buf + used, cap - used, "%-5s %-*s %-18s %12s  %s\n", "line", wide, "layer", "output", "parameters",
                   "weight decay");
  for (int i = 0; i < s->nlayers; i++) {
    char what[64], shape[64], dec[96];
    const clt_layer_spec *l = &s->layers[i];
    describe(l, what, sizeof what);
    clt__shape_str(&l->out_shape, shape, sizeof shape);
    decay += decayed(l, dec, sizeof dec);
    used += snprintf(buf + used, cap - used, "%-5d %-*s %-18s %12lld  %s\n", l->line, wide, what, shape,
                     (long long)l->param_count, dec);
  }
  char millions[32] = ""; /* "134.5M, ": as model cards count */
  if (s->param_count >= 1000000) snprintf(millions, sizeof millions, "%.1fM, ", s->param_count / 1e6);
  used += snprintf(buf + used, cap - used, "total parameters: %lld (%s%.2f MiB as float32); ", (long long)s->param_count,
                   millions, s->param_count * 4.0 / 1048576.0);
  if (s->loss == CLT_LOSS_CROSSENTROPY)
    used += snprintf(buf + used, cap - used, "%d classes\n", s->num_classes);
  else if (s->loss == CLT_LOSS_HUBER)
    used += snprintf(buf + used, cap - used, "regression, %lld targets per sample, loss huber (delta %g)\n",
                     (long long)s->labels_per_sample, (double)s->huber_delta);
  else
    used += snprintf(buf + used, cap - used, "regression, %lld targets per sample, loss %s\n",
                     (long long)s->labels_per_sample, clt_loss_name((clt_loss_kind)s->loss));
  int64_t buffers = 0;
  for (int i = 0; i < s->nlayers; i++)
    for (int k = 0; k < s->layers[i].nparams; k++)
      if (s->layers[i].param[k].buffer && !s->layers[i].param[k].tied) buffers += s->layers[i].param[k].count;
  if (buffers)
    used += snprintf(buf + used, cap - used, "buffers: %lld of the %lld (batchnorm's running statistics, written by "
                     "the forward, not trained): %lld trainable, as PyTorch counts them\n", (long long)buffers,
                     (long long)s->param_count, (long long)(s->param_count - buffers));
  snprintf(buf + used, cap - used, "weight decay (decoupled, as AdamW's): %lld of the %lld parameters, the tensors "
           "in the weight decay column (the matrices of linear, conv1d, conv2d, conv3d, attention and swiglu layers; "
           "not biases, norms or embeddings, nor an output tied to an embedding)\n", (long long)decay, (long long)s->param_count);
  *out = buf;
  return CLT_OK;
}
