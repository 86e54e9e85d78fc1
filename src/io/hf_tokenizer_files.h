/*
 * hf_tokenizer_files.h: the tokenizer's files of a Hugging Face directory,
 * copied by hf export beside the model so that from_pretrained finds the
 * tokenizer with it: tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, added_tokens.json, vocab.json, merges.txt,
 * tokenizer.model and generation_config.json, those of them that are there.
 * They are read whole before anything is written and copied unchanged.
 */
#ifndef CLT_IO_HF_TOKENIZER_FILES_H
#define CLT_IO_HF_TOKENIZER_FILES_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>

#define CLT__HF_TOKENIZER_MAX_FILES 8

typedef struct clt__hf_tokenizer_files {
  char from[PATH_MAX];                         /* the directory (or tokenizer.json) they come from */
  int n;
  const char *name[CLT__HF_TOKENIZER_MAX_FILES]; /* the file's name in the export */
  char *src[CLT__HF_TOKENIZER_MAX_FILES];      /* where it is read */
  unsigned char *data[CLT__HF_TOKENIZER_MAX_FILES];
  size_t len[CLT__HF_TOKENIZER_MAX_FILES];
  json_t *ids;                                 /* bos_token_id, eos_token_id, pad_token_id of from's
                                                  config.json, or NULL */
} clt__hf_tokenizer_files;

/* Read the files of `from`, a directory or a tokenizer.json. A directory
 * with none of tokenizer.json, tokenizer.model and vocab.json, or a path
 * that is not there, is CLT_ENOTFOUND naming it, unless `recorded` (the
 * directory hf import recorded, which may have moved since): then a
 * warning, and no files. */
int clt__hf_tokenizer_read(const char *from, int recorded, clt__hf_tokenizer_files *t);
/* Put the token ids of from's config.json into the exported config cfg. */
void clt__hf_tokenizer_ids(const clt__hf_tokenizer_files *t, json_t *cfg);
/* Each file's copy in dir can be written and is none of the files read
 * (the copied file itself, or inputs[0..n)): CLT_EINVAL naming both. */
int clt__hf_tokenizer_check(const clt__hf_tokenizer_files *t, const char *dir, const char *const *inputs, int n);
/* Write the copies into dir, each atomically. */
int clt__hf_tokenizer_write(const clt__hf_tokenizer_files *t, const char *dir);
void clt__hf_tokenizer_free(clt__hf_tokenizer_files *t);

#endif
