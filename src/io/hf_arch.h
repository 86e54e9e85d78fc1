/*
 * hf_arch.h: Hugging Face checkpoints in and out, one row of a table per
 * model class (transformers' GPT2LMHeadModel, LlamaForCausalLM,
 * Qwen2ForCausalLM, MistralForCausalLM). A row says how its config.json
 * reads (what cltrain computes otherwise is refused naming the key), what
 * spec a configuration is, how a spec's tensors pair with the class's names
 * (one walk over the spec, which both directions go through so they cannot
 * disagree), whether a spec fits the class, and the config.json it writes.
 * The importer (hf_import.c) and the exporter (hf_export.c) know no class:
 * adding one is a row (hf_archs.c) and its functions.
 *
 * The correspondences themselves are above the functions of each family:
 * GPT-2's in hf_gpt2.c, the Llama family's in hf_llama.c.
 *
 * hf import records where a model came from in its spec's opening comment,
 * lines that the spec parser passes over and hf export reads back:
 *
 *   # hf-class: LlamaForCausalLM            the class to export to
 *   # hf-source: /abs/path/of/the/directory  where the tokenizer files are
 *   # hf-max-positions: 131072               max_position_embeddings, when
 *                                            the spec's context is shorter
 */
#ifndef CLT_IO_HF_ARCH_H
#define CLT_IO_HF_ARCH_H

#include <jansson.h>
#include <limits.h>

#include "core/internal.h"
#include "model/spec.h"

struct clt__hf_arch;

/* What config.json says, in cltrain's terms (and what a matching spec
 * gives). GPT-2's names are in hf_gpt2.c: n_embd is hidden, n_head heads,
 * n_layer layers, n_positions positions, n_inner inner. */
typedef struct clt__hf_config {
  int hidden, heads, layers, vocab;
  int inner;          /* the MLP's width */
  int positions;      /* GPT-2: the position table's rows; Llama: max_position_embeddings */
  int context;        /* T of cltrain's input line: positions unless shorter is asked for */
  float eps;          /* layer_norm_epsilon, rms_norm_eps */
  int tied;           /* tie_word_embeddings: lm_head is the token embedding */
  /* the Llama family */
  int kv_heads;       /* num_key_value_heads */
  int attn_bias;      /* CLT_BIAS_* flags: Llama's attention_bias (all), Qwen2's q, k and v */
  int mlp_bias;       /* Llama's mlp_bias */
  clt_rope_spec rope; /* rope_theta, and rope_scaling's llama3 numbers (inv_freq unused here) */
  int window;         /* import: the sliding window over the keys (0: none), refused when shorter than
                         the context */
  int attn_line, mlp_line; /* export: the spec lines of the first attention and MLP, for messages */
} clt__hf_config;

/* One parameter tensor of the spec and its name in the class's files. */
typedef struct clt__hf_tensor {
  int layer, param;   /* spec->layers[layer].param[param] */
  char name[96];      /* the name export writes: "transformer.h.0.ln_1.weight", "model.norm.weight" */
  int optional;       /* the first `optional` characters may be missing in a file (GPT2Model's and
                         LlamaModel's files lack "transformer." and "model.") */
  int transposed;     /* a GPT-2 Conv1D weight: stored as the transpose of cltrain's (out, in) */
} clt__hf_tensor;

/* A model class: a row of clt__hf_archs (hf_archs.c). */
typedef struct clt__hf_arch {
  const char *hf_class;    /* config.json's "architectures": "LlamaForCausalLM" */
  const char *model_type;  /* config.json's "model_type": "llama" */
  const char *positions_key; /* the key of the longest context: "n_positions", "max_position_embeddings" */
  /* Read config.json (parsed: j; path for messages) into c; a key asking
   * for what cltrain does not compute is CLT_EFORMAT naming path and key. */
  int (*read_config)(const struct clt__hf_arch *a, const char *path, json_t *j, clt__hf_config *c);
  /* The spec text of c (malloc'd), `record` (the hf- lines) at its top. */
  char *(*spec_text)(const struct clt__hf_arch *a, const clt__hf_config *c, const char *record);
  /* Check that spec has the family's structure and fill c and the tensors
   * (malloc'd into *out, *n of them; free it); what does not fit is
   * CLT_EFORMAT naming the first layer (file:line) that does not. */
  int (*match)(const clt_model_spec *spec, clt__hf_config *c, clt__hf_tensor **out, int *n);
  /* (optional) A matched spec the class cannot express (Qwen2 without its
   * q, k and v biases, ...): CLT_EFORMAT naming the spec's line. */
  int (*fits)(const struct clt__hf_arch *a, const clt_model_spec *spec, const clt__hf_config *c);
  /* config.json for c (a new object), max_position_embeddings `positions`. */
  json_t *(*config_json)(const struct clt__hf_arch *a, const clt__hf_config *c, int positions);
  /* (optional) A tensor of the files that is no weight (GPT-2's attention
   * mask buffers, older Llama files' rotary inv_freq): passed over. */
  int (*is_buffer)(const char *name);
  /* The Llama family's differences (hf_llama.c reads them). */
  int attn_bias;           /* q, k and v biases fixed by the class (Qwen2: CLT_BIAS_QKV), or -1: by
                              attention_bias (Llama); 0: none (Mistral) */
  int has_mlp_bias;        /* mlp_bias is read (Llama) */
  int rope_scaling;        /* rope_scaling llama3 is honoured (Llama); others refuse any */
  int sliding;             /* the sliding window: 0 none, 1 Mistral's sliding_window, 2 Qwen2's
                              use_sliding_window with sliding_window */
  int default_kv_heads;    /* num_key_value_heads when absent: 0 as many as heads */
  int default_positions;   /* max_position_embeddings when absent */
  float default_eps;       /* rms_norm_eps when absent */
} clt__hf_arch;

/* The table, ended by a row of NULLs. */
extern const clt__hf_arch clt__hf_archs[];
/* The row of a class name or a model_type ("LlamaForCausalLM" or "llama"), or NULL. */
const clt__hf_arch *clt__hf_arch_find(const char *name);
/* "GPT2LMHeadModel, LlamaForCausalLM, ..." into buf, for messages; buf. */
const char *clt__hf_arch_list(char *buf, size_t len);

/* The rows' functions. */
int clt__hf_gpt2_read_config(const clt__hf_arch *a, const char *path, json_t *j, clt__hf_config *c);
char *clt__hf_gpt2_spec_text(const clt__hf_arch *a, const clt__hf_config *c, const char *record);
int clt__hf_gpt2_match(const clt_model_spec *spec, clt__hf_config *c, clt__hf_tensor **out, int *n);
json_t *clt__hf_gpt2_config_json(const clt__hf_arch *a, const clt__hf_config *c, int positions);
int clt__hf_gpt2_is_buffer(const char *name);
int clt__hf_llama_read_config(const clt__hf_arch *a, const char *path, json_t *j, clt__hf_config *c);
char *clt__hf_llama_spec_text(const clt__hf_arch *a, const clt__hf_config *c, const char *record);
int clt__hf_llama_match(const clt_model_spec *spec, clt__hf_config *c, clt__hf_tensor **out, int *n);
int clt__hf_llama_fits(const clt__hf_arch *a, const clt_model_spec *spec, const clt__hf_config *c);
json_t *clt__hf_llama_config_json(const clt__hf_arch *a, const clt__hf_config *c, int positions);
int clt__hf_llama_is_buffer(const char *name);

/* What hf import recorded in a spec's comment (the hf- lines above). */
typedef struct clt__hf_record {
  char hf_class[64];       /* "" when none */
  char source[PATH_MAX];   /* "" when none */
  int max_positions;       /* 0 when none */
} clt__hf_record;
/* The hf- lines for a: "# hf-class: ...\n# hf-source: ...\n" (malloc'd);
 * max_positions 0 leaves its line out. */
char *clt__hf_record_text(const clt__hf_arch *a, const char *source, int max_positions);
void clt__hf_record_read(const char *spec_text, clt__hf_record *r);

/* Keys of config.json, read alike by every row. Each error is CLT_EFORMAT
 * naming path and the key. */
/* A positive integer: required (dflt < 0, `needs` says what a config of
 * the class needs), or dflt when absent or null. */
int clt__hf_int_key(const char *path, json_t *j, const char *key, int dflt, const char *needs, int *out);
/* A number in (lo, hi], or dflt when absent or null. */
int clt__hf_float_key(const char *path, json_t *j, const char *key, double dflt, double lo, double hi, double *out);
/* true or false, or dflt when absent or null. */
int clt__hf_bool_key(const char *path, json_t *j, const char *key, int dflt, int *out);
/* A boolean key that must be `want` (absent or null: fine), else refused
 * saying why. */
int clt__hf_bool_must(const char *path, json_t *j, const char *key, int want, const char *why);
/* A JSON value as compact text, for messages (malloc'd, or NULL). */
char *clt__hf_json_text(const json_t *v);

/* The shortest decimal that reads back as the float v, as a double:
 * 1e-05, not 9.99999974737875e-06 (config.json's numbers). */
double clt__hf_short_decimal(float v);
/* The same as text, for a spec line ("1e-05", "500000"). */
void clt__hf_short_text(float v, char *buf, size_t len);

/* The class's shape of tensor t of spec: cltrain's, or its transpose. */
void clt__hf_shape(const clt_model_spec *spec, const clt__hf_tensor *t, int64_t shape[2], int *ndim);

/* dir + "/" + file (malloc'd). */
char *clt__hf_path(const char *dir, const char *file);
/* Write text to path atomically (a temporary file, flushed, renamed). */
int clt__hf_write_text(const char *path, const char *text);
/* The same for len bytes. */
int clt__hf_write_bytes(const char *path, const void *data, size_t len);
/* config.json's text for an object: sorted keys, indented, a newline at the end (malloc'd). */
char *clt__hf_json_dump(const json_t *j);

#endif
