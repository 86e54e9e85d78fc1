/*
 * hf_gpt2.c: the correspondence between a cltrain GPT and Hugging Face's
 * GPT-2 (see hf_gpt2.h): the structure check that pairs the spec's tensors
 * with GPT-2's names, the spec text of a GPT-2 configuration, and the small
 * file helpers the importer and exporter share.
 */
#include "io/hf_gpt2.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/outfile.h"
#include "io/safetensors.h"
#include "model/layer.h"

/* The walk over the spec's layers; dropout layers are passed over. */
typedef struct walk {
  const clt_model_spec *s;
  int i;                /* the next layer to look at */
  clt__hf_tensor *t;
  int n;
  int eps_line;         /* the first layernorm's line, 0 before it */
} walk;

static int skip_dropout(walk *w) {
  while (w->i < w->s->nlayers && w->s->layers[w->i].kind == &clt__kind_dropout) w->i++;
  return w->i;
}

/* The first layer that does not fit: where, what it is and what GPT-2 has there. */
static int misfit(const walk *w, int i, const char *fmt, ...) CLT__PRINTF(3, 4);
static int misfit(const walk *w, int i, const char *fmt, ...) {
  char want[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(want, sizeof want, fmt, ap);
  va_end(ap);
  const char *tail = "; hf export writes models of GPT-2's structure only (as examples/gpt2_124m.model)";
  if (i >= w->s->nlayers)
    return clt__error(CLT_EFORMAT, "%s: the model ends where GPT-2 has %s%s", w->s->name, want, tail);
  const clt_layer_spec *l = &w->s->layers[i];
  return clt__error(CLT_EFORMAT, "%s:%d: layer %d (%s) does not fit GPT-2, which has %s here%s", w->s->name,
                    l->line, i, clt__layer_kind_name(l), want, tail);
}

static void add(walk *w, int layer, int param, int transposed, const char *fmt, ...) CLT__PRINTF(5, 6);
static void add(walk *w, int layer, int param, int transposed, const char *fmt, ...) {
  clt__hf_tensor *t = &w->t[w->n++];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->name, sizeof t->name, fmt, ap);
  va_end(ap);
  t->layer = layer;
  t->param = param;
  t->base = 1;
  t->transposed = transposed;
}

/* The next layer, which must be of `kind`; its index, or a misfit. */
static int expect(walk *w, const clt__layer_kind *kind, const char *what) {
  int i = skip_dropout(w);
  if (i >= w->s->nlayers || w->s->layers[i].kind != kind) return misfit(w, i, "%s", what);
  w->i++;
  return i;
}

/* A layernorm: GPT-2 has one layer_norm_epsilon for all of them. */
static int layernorm(walk *w, clt__hf_config *cfg, const char *prefix, const char *what) {
  int i = expect(w, &clt__kind_layernorm, what);
  if (i < 0) return i;
  const clt_layer_spec *l = &w->s->layers[i];
  if (!w->eps_line) {
    cfg->eps = l->eps;
    w->eps_line = l->line;
  } else if (l->eps != cfg->eps) {
    return misfit(w, i, "%s with eps=%g like line %d's (GPT-2 has one layer_norm_epsilon)", what, cfg->eps,
                  w->eps_line);
  }
  add(w, i, 0, 0, "%s.weight", prefix);
  add(w, i, 1, 0, "%s.bias", prefix);
  return i;
}

/* A linear with a bias to `out` features (0: any), GPT-2's Conv1D. */
static int conv1d(walk *w, int out, const char *prefix, const char *what) {
  int i = skip_dropout(w);
  const clt_layer_spec *l = i < w->s->nlayers ? &w->s->layers[i] : NULL;
  if (!l || l->kind != &clt__kind_linear || !l->bias || l->tie >= 0 || (out && l->out != out))
    return out ? misfit(w, i, "%s (linear %d with a bias)", what, out) : misfit(w, i, "%s (linear with a bias)", what);
  w->i++;
  add(w, i, 0, 1, "%s.weight", prefix);
  add(w, i, 1, 0, "%s.bias", prefix);
  return i;
}

/* A residual whose skip branch starts at layer `from` (or at a dropout
 * between it and `before`, the same value in evaluation). */
static int residual(walk *w, int from, int before, const char *what) {
  int i = expect(w, &clt__kind_residual, what);
  if (i < 0) return i;
  int skip = w->s->layers[i].skip;
  if (skip < from || skip >= before) return misfit(w, i, "%s", what);
  return i;
}

/* One transformer block, h.K. */
static int block(walk *w, clt__hf_config *cfg, int k) {
  int rc = CLT_OK;
  char p[32], what[96];
  int start = w->i - 1; /* the block's input: the last layer taken, or a dropout after it */
  snprintf(p, sizeof p, "h.%d.ln_1", k);
  snprintf(what, sizeof what, "block %d's ln_1 (layernorm)", k);
  int ln1 = layernorm(w, cfg, p, what);
  if (ln1 < 0) return ln1;
  int at = skip_dropout(w);
  const clt_layer_spec *a = at < w->s->nlayers ? &w->s->layers[at] : NULL;
  if (k == 0) snprintf(what, sizeof what, "block 0's attention (attention heads=H with biases, without kv_heads= or "
                       "rope_theta=)");
  else snprintf(what, sizeof what, "block %d's attention (attention heads=%d with biases, without kv_heads= or "
                "rope_theta=)", k, cfg->n_head);
  /* GPT-2's: fused qkv and proj, both with biases, learned positions */
  if (!a || a->kind != &clt__kind_attention || a->bias != CLT_BIAS_ALL || a->kv_heads || a->rope.theta != 0 ||
      (k > 0 && a->heads != cfg->n_head))
    return misfit(w, at, "%s", what);
  cfg->n_head = a->heads;
  w->i++;
  add(w, at, 0, 1, "h.%d.attn.c_attn.weight", k);
  add(w, at, 1, 0, "h.%d.attn.c_attn.bias", k);
  add(w, at, 2, 1, "h.%d.attn.c_proj.weight", k);
  add(w, at, 3, 0, "h.%d.attn.c_proj.bias", k);
  snprintf(what, sizeof what, "block %d's first residual, adding the block's input", k);
  int res1 = residual(w, start, ln1, what);
  if (res1 < 0) return res1;
  snprintf(p, sizeof p, "h.%d.ln_2", k);
  snprintf(what, sizeof what, "block %d's ln_2 (layernorm)", k);
  int ln2 = layernorm(w, cfg, p, what);
  if (ln2 < 0) return ln2;
  snprintf(p, sizeof p, "h.%d.mlp.c_fc", k);
  snprintf(what, sizeof what, "block %d's mlp.c_fc", k);
  int fc = conv1d(w, k > 0 ? cfg->n_inner : 0, p, what);
  if (fc < 0) return fc;
  cfg->n_inner = w->s->layers[fc].out;
  snprintf(what, sizeof what, "block %d's GELU (gelu)", k);
  if ((rc = expect(w, &clt__kind_gelu, what)) < 0) return rc;
  snprintf(p, sizeof p, "h.%d.mlp.c_proj", k);
  snprintf(what, sizeof what, "block %d's mlp.c_proj", k);
  if ((rc = conv1d(w, cfg->n_embd, p, what)) < 0) return rc;
  snprintf(what, sizeof what, "block %d's second residual, adding the first one's output", k);
  if ((rc = residual(w, res1, ln2, what)) < 0) return rc;
  return CLT_OK;
}

/* Is the next layer (past dropouts) a layernorm followed by attention? */
static int block_follows(walk *w) {
  int i = skip_dropout(w), j = i + 1;
  if (i >= w->s->nlayers || w->s->layers[i].kind != &clt__kind_layernorm) return 0;
  while (j < w->s->nlayers && w->s->layers[j].kind == &clt__kind_dropout) j++;
  return j < w->s->nlayers && w->s->layers[j].kind == &clt__kind_attention;
}

int clt__hf_gpt2_match(const clt_model_spec *s, clt__hf_config *cfg, clt__hf_tensor **out, int *n) {
  int rc = CLT_OK;
  walk w = {.s = s, .i = 1};
  memset(cfg, 0, sizeof *cfg);
  *out = NULL;
  *n = 0;
  /* Every layer has at most 4 tensors, and lm_head one more. */
  if (!(w.t = clt__calloc((size_t)s->nlayers * CLT_MAX_LAYER_PARAMS + 1, sizeof *w.t))) return CLT_ENOMEM;
  const clt_shape *in = &s->layers[0].out_shape;
  if (in->ndim != 1 || !in->vocab) {
    rc = misfit(&w, 0, "input tokens T vocab=V");
    goto fail;
  }
  cfg->context = in->dims[0];
  cfg->vocab_size = in->vocab;
  int wte = expect(&w, &clt__kind_embedding, "the token embedding wte (embedding C name=wte)");
  if (wte < 0) { rc = wte; goto fail; }
  cfg->n_embd = s->layers[wte].out;
  add(&w, wte, 0, 0, "wte.weight");
  int wpe = expect(&w, &clt__kind_posembedding, "the position embedding wpe (posembedding)");
  if (wpe < 0) { rc = wpe; goto fail; }
  cfg->n_positions = s->layers[wpe].positions;
  add(&w, wpe, 0, 0, "wpe.weight");
  while (block_follows(&w)) {
    CLT_TRY(block(&w, cfg, cfg->n_layer));
    cfg->n_layer++;
  }
  if (cfg->n_layer == 0) {
    rc = misfit(&w, skip_dropout(&w), "block 0 (layernorm, attention, residual, layernorm, linear, gelu, linear, "
                "residual)");
    goto fail;
  }
  CLT_TRY(layernorm(&w, cfg, "ln_f", "the final layernorm ln_f"));
  int head = skip_dropout(&w);
  const clt_layer_spec *l = head < s->nlayers ? &s->layers[head] : NULL;
  if (!l || l->kind != &clt__kind_linear || l->bias || l->out != cfg->vocab_size || (l->tie >= 0 && l->tie != wte)) {
    rc = misfit(&w, head, "lm_head (linear %d tie=%s bias=false)", cfg->vocab_size,
                s->layers[wte].name[0] ? s->layers[wte].name : "wte");
    goto fail;
  }
  w.i++;
  cfg->tied = l->tie == wte;
  if (!cfg->tied) {
    add(&w, head, 0, 0, "lm_head.weight");
    w.t[w.n - 1].base = 0;
  }
  if (skip_dropout(&w) < s->nlayers) {
    rc = misfit(&w, w.i, "nothing: lm_head is GPT-2's last layer");
    goto fail;
  }
  *out = w.t;
  *n = w.n;
  return CLT_OK;
fail:
  free(w.t);
  return rc;
}

/* "eps=1e-06 " for a layernorm's line, or "" for cltrain's default. */
static void eps_option(float eps, char *buf, size_t len) {
  if (eps == 1e-5f) snprintf(buf, len, "%s", "");
  else snprintf(buf, len, " eps=%.9g", eps);
}

char *clt__hf_gpt2_spec_text(const clt__hf_config *c, const char *source) {
  char eps[48];
  eps_option(c->eps, eps, sizeof eps);
  size_t size = 2048 + strlen(source);
  char *text = clt__calloc(1, size), *src = clt__strdup(source);
  if (!text || !src) {
    free(text), free(src);
    return NULL;
  }
  for (char *p = src; *p; p++) /* the comment stays one line whatever the path holds */
    if (*p == '\n' || *p == '\r') *p = ' ';
  snprintf(text, size,
           "# GPT-2 imported from Hugging Face: %s\n"
           "# n_layer=%d n_head=%d n_embd=%d n_positions=%d vocab_size=%d\n"
           "input tokens %d vocab=%d\n"
           "embedding %d name=wte\n"
           "posembedding positions=%d\n"
           "block repeat=%d\n"
           "  layernorm%s\n"
           "  attention heads=%d\n"
           "  residual\n"
           "  layernorm%s\n"
           "  linear %d init=normal\n"
           "  gelu\n"
           "  linear %d init=normal std=%.3g\n"
           "  residual\n"
           "end\n"
           "layernorm%s\n"
           "linear %d%s bias=false\n",
           src, c->n_layer, c->n_head, c->n_embd, c->n_positions, c->vocab_size, c->context, c->vocab_size,
           c->n_embd, c->n_positions, c->n_layer, eps, c->n_head, eps, c->n_inner, c->n_embd,
           0.02 / sqrt(2.0 * c->n_layer), eps, c->vocab_size, c->tied ? " tie=wte" : "");
  free(src);
  return text;
}

void clt__hf_shape(const clt_model_spec *spec, const clt__hf_tensor *t, int64_t shape[2], int *ndim) {
  const clt_param_spec *p = &spec->layers[t->layer].param[t->param];
  *ndim = p->ndim;
  shape[0] = p->shape[0];
  shape[1] = p->ndim > 1 ? p->shape[1] : 0;
  if (t->transposed) {
    shape[0] = p->shape[1];
    shape[1] = p->shape[0];
  }
}

char *clt__hf_path(const char *dir, const char *file) {
  size_t len = strlen(dir) + strlen(file) + 2;
  char *p = clt__calloc(1, len);
  if (p) snprintf(p, len, "%s/%s", dir, file);
  return p;
}

int clt__hf_write_text(const char *path, const char *text) {
  int rc = CLT_OK;
  char *target = NULL, *tmp = NULL;
  CLT_TRY(clt__output_resolve(NULL, path, &target));
  if (!(tmp = clt__st_tmp_path(target))) { rc = CLT_ENOMEM; goto fail; }
  FILE *f = fopen(tmp, "w");
  if (!f) {
    rc = clt__error(CLT_EIO, "cannot create %s: %s", tmp, strerror(errno));
    goto fail;
  }
  int bad = fputs(text, f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0;
  if (fclose(f) != 0 || bad) {
    rc = clt__error(CLT_EIO, "writing %s failed: %s", tmp, strerror(errno));
    unlink(tmp);
    goto fail;
  }
  rc = clt__output_replace(tmp, target);
fail:
  free(tmp), free(target);
  return rc;
}
