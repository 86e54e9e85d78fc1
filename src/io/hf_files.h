/*
 * hf_files.h: the tensors of a Hugging Face checkpoint directory, wherever
 * they are: model.safetensors, or the shards that
 * model.safetensors.index.json maps each tensor to (save_pretrained splits
 * a model above max_shard_size, 5 GB by default). Shards are opened as
 * tensors are asked for; every message names the file (and the index that
 * sent the reader there).
 */
#ifndef CLT_IO_HF_FILES_H
#define CLT_IO_HF_FILES_H

#include <jansson.h>

#include "io/hf_arch.h"
#include "io/safetensors.h"

#define CLT__HF_MAX_SHARDS 256

typedef struct clt__hf_files {
  const char *dir;
  char *path;                   /* model.safetensors, or the index: for messages */
  json_t *map;                  /* the index's weight_map, or NULL for one file */
  int n;
  char *names[CLT__HF_MAX_SHARDS]; /* the shards opened so far (one without an index) */
  clt__st_file *files[CLT__HF_MAX_SHARDS];
} clt__hf_files;

/* Find dir's model.safetensors or its index (read now); neither is
 * CLT_ENOTFOUND naming model.safetensors. */
int clt__hf_files_open(const char *dir, clt__hf_files *fs);
void clt__hf_files_close(clt__hf_files *fs);
/* Tensor `name`: 0, or 1 when no file has it, or an error (a shard the
 * index names that cannot be read is one, and so is a shard that lacks
 * what the index puts in it). *file is the path of the file it is in (for
 * messages; the fs's). */
int clt__hf_files_find(clt__hf_files *fs, const char *name, clt__st_file **f, clt__st_tensor *t, const char **file);
/* Warn about the tensors of the files that the import leaves out (another
 * class's heads): none of used[0..n), no buffer of a, and not
 * lm_head.weight when tied (it is the embedding's). */
void clt__hf_files_warn_unused(clt__hf_files *fs, const clt__hf_arch *a, char (*used)[96], int n, int tied);
/* Whether path is one of the files the import reads (config.json aside):
 * model.safetensors, the index or a shard it names. */
int clt__hf_files_reads(const clt__hf_files *fs, const char *path, char *which, size_t len);

#endif
