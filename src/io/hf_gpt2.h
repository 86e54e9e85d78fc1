/*
 * hf_gpt2.h: how a cltrain GPT corresponds to Hugging Face's GPT-2
 * (transformers' GPT2LMHeadModel, as save_pretrained writes it: config.json
 * and model.safetensors). One walk over a parsed spec checks that it has
 * GPT-2's structure and pairs each of its parameter tensors with GPT-2's
 * name for it; the importer (hf_import.c) and the exporter (hf_export.c)
 * both go through it, so the two directions cannot disagree.
 *
 *   cltrain layer (spec line)      its tensor     HF tensor ("transformer." + ...)
 *   embedding C name=wte           weight (V, C)  wte.weight (V, C)
 *   posembedding positions=P       weight (P, C)  wpe.weight (P, C)
 *   block K: layernorm             weight, bias   h.K.ln_1.weight, .bias
 *            attention heads=H     qkv.weight     h.K.attn.c_attn.weight (C, 3C)  transposed
 *                                  qkv.bias       h.K.attn.c_attn.bias
 *                                  proj.weight    h.K.attn.c_proj.weight (C, C)   transposed
 *                                  proj.bias      h.K.attn.c_proj.bias
 *            residual
 *            layernorm             weight, bias   h.K.ln_2.weight, .bias
 *            linear 4C             weight, bias   h.K.mlp.c_fc.weight (C, 4C)     transposed
 *            gelu
 *            linear C              weight, bias   h.K.mlp.c_proj.weight (4C, C)   transposed
 *            residual
 *   layernorm                      weight, bias   ln_f.weight, .bias
 *   linear V tie=wte bias=false    (wte's)        none: lm_head.weight is tied to wte
 *   linear V bias=false (untied)   weight (V, C)  lm_head.weight (V, C), no prefix
 *
 * GPT-2's Conv1D keeps its weight as (in, out); cltrain's linear and
 * attention projections as (out, in), like nn.Linear: those are transposed.
 * c_attn's output columns are q | k | v, head h at [h*D, (h+1)*D) of each,
 * which is the layout of cltrain's fused QKV (nn.h), so nothing else moves.
 * Dropout layers may stand anywhere in the spec: they are the identity in
 * evaluation, and the exported config has every dropout at 0.
 */
#ifndef CLT_IO_HF_GPT2_H
#define CLT_IO_HF_GPT2_H

#include "core/internal.h"
#include "model/spec.h"

/* What config.json says (and what a matching spec gives). */
typedef struct clt__hf_config {
  int n_embd, n_head, n_layer, n_positions, vocab_size;
  int n_inner;        /* the MLP's width: 4 n_embd unless the config says otherwise */
  int context;        /* T of cltrain's input line: n_positions unless shorter is asked for */
  float eps;          /* layer_norm_epsilon */
  int tied;           /* tie_word_embeddings: lm_head is wte */
} clt__hf_config;

/* One parameter tensor of the spec and its GPT-2 name. */
typedef struct clt__hf_tensor {
  int layer, param;   /* spec->layers[layer].param[param] */
  char name[64];      /* GPT-2's name, without "transformer." */
  int base;           /* 1: the name takes "transformer." in front (all but lm_head) */
  int transposed;     /* a Conv1D weight: GPT-2 stores the transpose of cltrain's (out, in) */
} clt__hf_tensor;

/* Check that spec has GPT-2's structure (above) and fill cfg and the
 * tensors (malloc'd into *out, *n of them; free it). What does not fit is
 * CLT_EFORMAT naming the first layer (file:line) that does not and what
 * GPT-2 has there. */
int clt__hf_gpt2_match(const clt_model_spec *spec, clt__hf_config *cfg, clt__hf_tensor **out, int *n);

/* The model spec of a GPT-2 with this configuration (malloc'd), the form
 * of examples/gpt2_124m.model; `source` goes into its opening comment. */
char *clt__hf_gpt2_spec_text(const clt__hf_config *cfg, const char *source);

/* GPT-2's shape of tensor t of spec: cltrain's, or its transpose. */
void clt__hf_shape(const clt_model_spec *spec, const clt__hf_tensor *t, int64_t shape[2], int *ndim);

/* dir + "/" + file (malloc'd). */
char *clt__hf_path(const char *dir, const char *file);

/* Write text to path atomically (a temporary file, flushed, renamed). */
int clt__hf_write_text(const char *path, const char *text);

#endif
