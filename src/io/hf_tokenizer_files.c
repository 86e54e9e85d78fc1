/*
 * hf_tokenizer_files.c: the tokenizer's files that hf export copies beside
 * the model it writes (hf_tokenizer_files.h).
 */
#include "io/hf_tokenizer_files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "core/outfile.h"
#include "io/hf_arch.h"

/* What AutoTokenizer and generate() read, in a directory save_pretrained
 * wrote; the first three are a tokenizer (one of them must be there). */
static const char *const names[CLT__HF_TOKENIZER_MAX_FILES] = {
    "tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "generation_config.json"};
enum { TOKENIZERS = 3 };

/* The whole of a regular file: 1 when it is not there (or no regular file). */
static int slurp(const char *path, unsigned char **data, size_t *len) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 1;
  FILE *f = fopen(path, "rb");
  if (!f) return clt__error(CLT_EIO, "cannot read %s: %s", path, strerror(errno));
  *len = (size_t)st.st_size;
  if (!(*data = clt__calloc(1, *len + 1))) {
    fclose(f);
    return CLT_ENOMEM;
  }
  int bad = *len && fread(*data, 1, *len, f) != *len;
  fclose(f);
  if (bad) {
    free(*data);
    *data = NULL;
    return clt__error(CLT_EIO, "reading %s failed", path);
  }
  return CLT_OK;
}

static int add(clt__hf_tokenizer_files *t, const char *name, const char *src) {
  unsigned char *data = NULL;
  size_t len = 0;
  int rc = slurp(src, &data, &len);
  if (rc != CLT_OK) return rc;
  if (!(t->src[t->n] = clt__strdup(src))) {
    free(data);
    return CLT_ENOMEM;
  }
  t->name[t->n] = name;
  t->data[t->n] = data;
  t->len[t->n++] = len;
  return CLT_OK;
}

/* Nothing to copy: an error, or for the recorded directory a warning. */
static int none(const char *from, int recorded, const char *why) {
  if (!recorded)
    return clt__error(CLT_ENOTFOUND, "%s: %s (--tokenizer takes a directory with tokenizer.json, tokenizer.model or "
                      "vocab.json, or a tokenizer.json)", from, why);
  clt__log(CLT_LOG_WARN, "%s (hf-source, where hf import read the model): %s; the export has no tokenizer "
           "(give --tokenizer DIR)", from, why);
  return CLT_OK;
}

int clt__hf_tokenizer_read(const char *from, int recorded, clt__hf_tokenizer_files *t) {
  int rc = CLT_OK;
  struct stat st;
  memset(t, 0, sizeof *t);
  clt__strlcpy(t->from, from, sizeof t->from);
  if (stat(from, &st) != 0) return none(from, recorded, strerror(errno));
  if (S_ISREG(st.st_mode)) return add(t, "tokenizer.json", from);
  if (!S_ISDIR(st.st_mode)) return none(from, recorded, "neither a directory nor a file");
  for (int i = 0; i < CLT__HF_TOKENIZER_MAX_FILES; i++) {
    char *src = clt__hf_path(from, names[i]);
    if (!src) return CLT_ENOMEM;
    rc = add(t, names[i], src);
    free(src);
    if (rc < 0) return rc;
  }
  int tokenizer = 0;
  for (int i = 0; i < t->n; i++)
    for (int k = 0; k < TOKENIZERS; k++) tokenizer |= strcmp(t->name[i], names[k]) == 0;
  if (!tokenizer) {
    clt__hf_tokenizer_free(t);
    clt__strlcpy(t->from, from, sizeof t->from);
    return none(from, recorded, "no tokenizer.json, tokenizer.model or vocab.json there");
  }
  /* the ids generate() starts and stops with, from the model's config */
  char *cfg = clt__hf_path(from, "config.json");
  json_t *j = cfg ? json_load_file(cfg, 0, NULL) : NULL;
  static const char *const keys[] = {"bos_token_id", "eos_token_id", "pad_token_id"};
  for (size_t k = 0; json_is_object(j) && k < sizeof keys / sizeof *keys; k++) {
    json_t *v = json_object_get(j, keys[k]);
    if (!v) continue;
    if (!t->ids) t->ids = json_object();
    json_object_set(t->ids, keys[k], v);
  }
  json_decref(j);
  free(cfg);
  return CLT_OK;
}

void clt__hf_tokenizer_ids(const clt__hf_tokenizer_files *t, json_t *cfg) {
  if (t->ids) json_object_update(cfg, t->ids);
}

int clt__hf_tokenizer_check(const clt__hf_tokenizer_files *t, const char *dir, const char *const *inputs, int n) {
  int rc = CLT_OK;
  for (int i = 0; i < t->n; i++) {
    char *out = clt__hf_path(dir, t->name[i]);
    if (!out) return CLT_ENOMEM;
    const char *read = clt__same_file(out, t->src[i]) ? t->src[i] : NULL;
    for (int k = 0; !read && k < n; k++)
      if (clt__same_file(out, inputs[k])) read = inputs[k];
    if (read)
      rc = clt__error(CLT_EINVAL, "writing %s would replace %s, which the export reads (the tokenizer's files are "
                      "copied from %s); export into another directory", out, read, t->from);
    else
      rc = clt_check_output(out, CLT_OUTPUT_FILE);
    free(out);
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

int clt__hf_tokenizer_write(const clt__hf_tokenizer_files *t, const char *dir) {
  for (int i = 0; i < t->n; i++) {
    char *out = clt__hf_path(dir, t->name[i]);
    if (!out) return CLT_ENOMEM;
    int rc = clt__hf_write_bytes(out, t->data[i], t->len[i]);
    free(out);
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

void clt__hf_tokenizer_free(clt__hf_tokenizer_files *t) {
  for (int i = 0; i < t->n; i++) {
    free(t->src[i]);
    free(t->data[i]);
  }
  json_decref(t->ids);
  memset(t, 0, sizeof *t);
}
