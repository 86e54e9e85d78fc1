/*
 * hfutil.h: what the Hugging Face GPT-2 suites (test_hf, test_hf_refusals)
 * share: a small GPT-2 written by hand as save_pretrained writes it
 * (config.json, model.safetensors with GPT-2's names and Conv1D layout,
 * random values; also in half precision and in shards), in a temporary
 * directory, and comparisons of safetensors files tensor by tensor.
 */
#ifndef CLT_HFUTIL_H
#define CLT_HFUTIL_H

#include <check.h>
#include <stdint.h>

#include <cltrain.h>

#include "io/safetensors.h"

/* The small GPT-2 of these tests. */
enum { C = 16, H = 2, L = 2, P = 8, V = 32, MAXT = 64 };

/* The first lines of a spec of the small GPT-2's sizes. */
#define GPT_HEAD "input tokens 8 vocab=32\nembedding 16 name=wte\nposembedding\n"

/* The test's temporary directory ("" when none). */
extern char hu_root[256];
void hu_make_root(void);
void hu_rm_rf(const char *path);
/* Remove hu_root, if any (a Check fixture). */
void hu_teardown(void);

typedef struct hf_tensors {
  clt__st_tensor t[MAXT];
  float *data[MAXT];
  int n;
} hf_tensors;

/* Options of the GPT-2 directory to write. */
typedef struct variant {
  const char *prefix;      /* "transformer." or "" */
  int inner;               /* the MLP's width */
  int untied;              /* an lm_head.weight of its own */
  int buffers;             /* attn.bias / attn.masked_bias, as older files have */
  const char *skip;        /* leave this tensor out */
  const char *bad_shape;   /* give this tensor one row too many */
  const char *extra;       /* one more tensor, of no GPT2LMHeadModel */
} variant;

/* GPT-2's tensors, in its (in, out) Conv1D layout, with v's changes. */
void hu_make(hf_tensors *h, const variant *v);
void hu_free(hf_tensors *h);
void hu_write_file(const char *path, const char *text);
/* The config save_pretrained writes for the small GPT-2, with `extra`
 * ("\"key\": value" pairs) in front and `drop` left out. */
void hu_write_config(const char *dir, const char *extra, const char *drop, int inner, int untied);
/* A GPT-2 directory hu_root/name: the config (as hu_write_config) and h
 * (made by hu_make) as model.safetensors; its path into dir. */
void hu_write_hf(const char *name, const variant *v, const char *extra, const char *drop, hf_tensors *h, char *dir,
                 size_t len);
/* Tensor `name` of the file at path, as floats (malloc'd), and its shape. */
float *hu_read_tensor(const char *path, const char *name, int64_t shape[2], int *ndim);
/* Every tensor of h is in the file at path, same shape, same bits (with
 * `buffers`, but for the attention mask buffers, which are not weights). */
void hu_same_tensors(const hf_tensors *h, const char *path, int buffers);
/* Tensors `names` (NULL-ended) have the same shapes and bits in a and b. */
void hu_same_files(const char *a, const char *b, const char *const *names);
/* A small text file's contents (a static buffer). */
char *hu_slurp(const char *path);
/* h's tensors stored as F16 or BF16 at path; h's values become the
 * float32 the stored ones widen to. */
void hu_write_half(hf_tensors *h, const char *path, int bf16);
/* h's tensors over two shards in dir and the index naming them (the
 * second shard as `second`); model.safetensors removed. */
void hu_write_sharded(const hf_tensors *h, const char *dir, const char *second);

#endif
