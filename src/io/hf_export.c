/*
 * hf_export.c: clt_hf_export, a cltrain model (its spec and weights) into a
 * directory transformers' from_pretrained loads: config.json,
 * model.safetensors with the class's names (GPT-2's Conv1D weights
 * transposed to (in, out)) in float32, bfloat16 or float16, and the
 * tokenizer's files (hf_tokenizer_files.c). The class is the one asked
 * for, else the one hf import recorded in the spec, else the one the
 * spec's structure gives (hf_arch.h); clt_hf_gpt2_export is GPT-2's,
 * float32, without tokenizer files.
 */
#include "io/hf_arch.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/outfile.h"
#include "io/hf_tokenizer_files.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "model/layer.h"
#include "model/model.h"

void clt_hf_export_options_defaults(clt_hf_export_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->dtype = CLT_HF_F32;
}

static const struct {
  clt__st_dtype st;
  const char *torch; /* config.json's torch_dtype */
} dtypes[] = {[CLT_HF_F32] = {CLT__ST_F32, "float32"}, [CLT_HF_BF16] = {CLT__ST_BF16, "bfloat16"},
              [CLT_HF_F16] = {CLT__ST_F16, "float16"}};

/* bfloat16 is float32's high half: round to nearest, ties to even. */
static uint16_t bf16_from_float(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Tensor t's n values rounded into h; a value that becomes infinite (a
 * float16 above 65504) is CLT_ENONFINITE naming the tensor. */
static int round_tensor(const clt__st_tensor *t, const float *x, int64_t n, clt_hf_dtype d, uint16_t *h) {
  for (int64_t i = 0; i < n; i++) {
    h[i] = d == CLT_HF_BF16 ? bf16_from_float(x[i]) : clt__half_from_float(x[i]);
    int inf = d == CLT_HF_BF16 ? (h[i] & 0x7fffu) == 0x7f80u : (h[i] & 0x7fffu) == 0x7c00u;
    if (inf)
      return clt__error(CLT_ENONFINITE, "tensor '%s' holds %g at element %lld, beyond %s's range (its largest finite "
                        "value is %s); export with --dtype %s", t->name, (double)x[i], (long long)i,
                        dtypes[d].torch, d == CLT_HF_BF16 ? "3.39e38" : "65504",
                        d == CLT_HF_BF16 ? "f32" : "bf16 or f32");
  }
  return CLT_OK;
}

/* The class's row: the one asked for, the recorded one, or the spec's. */
static int pick_arch(const clt_model_spec *spec, const char *asked, const clt__hf_record *r,
                     const clt__hf_arch **out, int *inferred) {
  char list[256];
  *inferred = 0;
  if (asked || r->hf_class[0]) {
    const char *name = asked ? asked : r->hf_class;
    if (!(*out = clt__hf_arch_find(name)))
      return clt__error(CLT_EINVAL, "%s%s'%s' is not a class hf export writes (%s)", asked ? "" : spec->name,
                        asked ? "" : ": its hf-class: ", name, clt__hf_arch_list(list, sizeof list));
    return CLT_OK;
  }
  /* Llama's kinds anywhere make it the Llama family; else GPT-2 (whose walk
   * says where a model of neither stops fitting) */
  *inferred = 1;
  *out = clt__hf_arch_find("gpt2");
  for (int i = 1; i < spec->nlayers; i++) {
    const clt_layer_spec *l = &spec->layers[i];
    if (l->kind == &clt__kind_rmsnorm || l->kind == &clt__kind_swiglu ||
        (l->kind == &clt__kind_attention && l->kv_heads))
      *out = clt__hf_arch_find("llama");
  }
  return CLT_OK;
}

/* Each tensor in the class's layout: cltrain's own where it is the same
 * (every Llama tensor), a transposed copy at the same offset of the second
 * arena hf where not (GPT-2's Conv1D weights); rounded to 16 bits into h16
 * (same offsets) for bf16 and f16. */
static int arrange(const clt_model_spec *spec, const clt__hf_tensor *map, int n, const float *params, float *hf,
                   uint16_t *h16, clt_hf_dtype d, clt__st_tensor *out) {
  int rc = CLT_OK;
  for (int i = 0; i < n; i++) {
    const clt_param_spec *p = &spec->layers[map[i].layer].param[map[i].param];
    const float *src = params + p->offset;
    clt__st_tensor *t = &out[i];
    memset(t, 0, sizeof *t);
    clt__strlcpy(t->name, map[i].name, sizeof t->name);
    clt__hf_shape(spec, &map[i], t->shape, &t->ndim);
    t->data = src;
    if (map[i].transposed) {
      float *dst = hf + p->offset;
      int64_t rows = p->shape[0], cols = p->shape[1]; /* cltrain's (out, in) to GPT-2's (in, out) */
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
      t->data = dst;
    }
    if (d != CLT_HF_F32) {
      t->dtype = dtypes[d].st;
      t->data16 = h16 + p->offset;
      CLT_TRY(round_tensor(t, t->data, p->count, d, h16 + p->offset));
    }
  }
fail:
  return rc;
}

static int export_dir(const char *model_path, const char *weights_path, const char *dir, clt_hf_export_options *o,
                      const clt__hf_arch *only) {
  int rc = CLT_OK, n = 0, inferred = 0;
  clt_model *m = NULL;
  clt__hf_tensor *map = NULL;
  clt__st_tensor *out = NULL;
  float *params = NULL, *hf = NULL;
  uint16_t *h16 = NULL;
  char *cfg_path = NULL, *st_path = NULL, *cfg_text = NULL;
  json_t *cfg_json = NULL;
  clt__hf_tokenizer_files tok = {0};
  clt__hf_config cfg;
  clt__hf_record rec;
  const clt__hf_arch *a = only;
  o->written_class[0] = o->tokenizer_from[0] = 0;
  o->tokenizer_files = 0;
  if ((int)o->dtype < 0 || o->dtype > CLT_HF_F16)
    return clt__error(CLT_EINVAL, "hf export: dtype %d is not f32, bf16 or f16", (int)o->dtype);
  CLT_TRY(clt_model_load(model_path, &m));
  const clt_model_spec *spec = m->spec;
  clt__hf_record_read(clt_model_text(m), &rec);
  if (!a) CLT_TRY(pick_arch(spec, o->hf_class, &rec, &a, &inferred));
  CLT_TRY(a->match(spec, &cfg, &map, &n));
  if (inferred && a->match == clt__hf_llama_match && cfg.attn_bias == CLT_BIAS_QKV) a = clt__hf_arch_find("qwen2");
  if (a->fits) CLT_TRY(a->fits(a, spec, &cfg));
  int transposed = 0;
  for (int i = 0; i < n; i++) transposed |= map[i].transposed;
  if (!(params = clt__calloc((size_t)spec->param_count, sizeof *params)) ||
      (transposed && !(hf = clt__calloc((size_t)spec->param_count, sizeof *hf))) ||
      !(out = clt__calloc((size_t)n, sizeof *out)) ||
      (o->dtype != CLT_HF_F32 && !(h16 = clt__calloc((size_t)spec->param_count, sizeof *h16)))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  CLT_TRY(clt__weights_read(spec, weights_path, params));
  CLT_TRY(arrange(spec, map, n, params, hf, h16, o->dtype, out));

  /* The tokenizer's files, read now: the one asked for, else the imported
   * directory's (a warning when it has none), else none. */
  if (!o->no_tokenizer && (o->tokenizer || rec.source[0]))
    CLT_TRY(clt__hf_tokenizer_read(o->tokenizer ? o->tokenizer : rec.source, !o->tokenizer, &tok));

  int positions = rec.max_positions > cfg.context ? rec.max_positions : cfg.context;
  if (!(cfg_json = a->config_json(a, &cfg, positions))) { rc = CLT_ENOMEM; goto fail; }
  json_object_set_new(cfg_json, "torch_dtype", json_string(dtypes[o->dtype].torch));
  clt__hf_tokenizer_ids(&tok, cfg_json);
  if (!(cfg_text = clt__hf_json_dump(cfg_json)) || !(cfg_path = clt__hf_path(dir, "config.json")) ||
      !(st_path = clt__hf_path(dir, "model.safetensors"))) {
    rc = clt__error(CLT_ENOMEM, "out of memory writing %s", dir);
    goto fail;
  }
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    rc = clt__error(CLT_EIO, "cannot make the directory %s: %s", dir, strerror(errno));
    goto fail;
  }
  /* No file written is one read: --weights DIR/model.safetensors would be
   * replaced by its own export, a tokenizer by its copy. */
  const char *in[2] = {model_path, weights_path}, *made[2] = {st_path, cfg_path};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      if (clt__same_file(made[i], in[j])) {
        rc = clt__error(CLT_EINVAL, "writing %s would replace %s, which the export reads; export into "
                        "another directory", made[i], in[j]);
        goto fail;
      }
  CLT_TRY(clt__hf_tokenizer_check(&tok, dir, in, 2));
  /* All can be written (a FIFO as config.json would otherwise be found
   * only after model.safetensors was replaced). */
  CLT_TRY(clt_check_output(st_path, CLT_OUTPUT_FILE));
  CLT_TRY(clt_check_output(cfg_path, CLT_OUTPUT_FILE));
  /* transformers refuses a safetensors file without format "pt". */
  const char *meta[] = {"format", "pt", NULL};
  CLT_TRY(clt__st_write(st_path, out, n, meta));
  CLT_TRY(clt__hf_write_text(cfg_path, cfg_text));
  CLT_TRY(clt__hf_tokenizer_write(&tok, dir));
  clt__strlcpy(o->written_class, a->hf_class, sizeof o->written_class);
  if (tok.n) clt__strlcpy(o->tokenizer_from, tok.from, sizeof o->tokenizer_from);
  o->tokenizer_files = tok.n;
  clt__log(CLT_LOG_INFO, "%s: %s in %s%s%s", dir, a->hf_class, dtypes[o->dtype].torch,
           tok.n ? ", the tokenizer's files from " : "", tok.n ? tok.from : "");
fail:
  clt__hf_tokenizer_free(&tok);
  clt_model_destroy(m);
  json_decref(cfg_json);
  free(map), free(out), free(params), free(hf), free(h16), free(cfg_path), free(st_path), free(cfg_text);
  return rc;
}

int clt_hf_export(const char *model_path, const char *weights_path, const char *dir, clt_hf_export_options *o) {
  clt_hf_export_options d;
  CLT_PATH_ARG(model_path);
  CLT_PATH_ARG(weights_path);
  CLT_PATH_ARG(dir);
  if (!o) {
    clt_hf_export_options_defaults(&d);
    o = &d;
  }
  return export_dir(model_path, weights_path, dir, o, NULL);
}

int clt_hf_gpt2_export(const char *model_path, const char *weights_path, const char *dir) {
  clt_hf_export_options o;
  CLT_PATH_ARG(model_path);
  CLT_PATH_ARG(weights_path);
  CLT_PATH_ARG(dir);
  clt_hf_export_options_defaults(&o);
  o.no_tokenizer = 1;
  return export_dir(model_path, weights_path, dir, &o, clt__hf_arch_find("gpt2"));
}
