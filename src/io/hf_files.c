/*
 * hf_files.c: the tensors of a Hugging Face checkpoint directory, in one
 * model.safetensors or in the shards its index names (hf_files.h).
 */
#include "io/hf_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/outfile.h"

void clt__hf_files_close(clt__hf_files *fs) {
  for (int i = 0; i < fs->n; i++) {
    clt__st_close(fs->files[i]);
    free(fs->names[i]);
  }
  json_decref(fs->map);
  free(fs->path);
  memset(fs, 0, sizeof *fs);
}

static int open_shard(clt__hf_files *fs, const char *name, clt__st_file **out) {
  int rc = CLT_OK;
  for (int i = 0; i < fs->n; i++)
    if (strcmp(fs->names[i], name) == 0) {
      *out = fs->files[i];
      return CLT_OK;
    }
  if (fs->n == CLT__HF_MAX_SHARDS)
    return clt__error(CLT_EFORMAT, "%s names more than %d shards", fs->path, CLT__HF_MAX_SHARDS);
  if (strchr(name, '/'))
    return clt__error(CLT_EFORMAT, "%s: shard '%s' is not a file of %s", fs->path, name, fs->dir);
  char *path = clt__hf_path(fs->dir, name);
  if (!path || !(fs->names[fs->n] = clt__strdup(name))) {
    free(path);
    return CLT_ENOMEM;
  }
  rc = clt__st_open(path, &fs->files[fs->n]);
  free(path);
  if (rc < 0) {
    free(fs->names[fs->n]);
    return rc;
  }
  *out = fs->files[fs->n++];
  return CLT_OK;
}

int clt__hf_files_open(const char *dir, clt__hf_files *fs) {
  int rc = CLT_OK;
  memset(fs, 0, sizeof *fs);
  fs->dir = dir;
  char *single = clt__hf_path(dir, "model.safetensors"), *index = clt__hf_path(dir, "model.safetensors.index.json");
  if (!single || !index) {
    rc = CLT_ENOMEM;
    goto out;
  }
  FILE *probe = fopen(single, "rb");
  if (probe || !(probe = fopen(index, "r"))) { /* one file (or neither: its open says so) */
    if (probe) fclose(probe);
    fs->path = single;
    single = NULL;
    clt__st_file *f;
    rc = open_shard(fs, "model.safetensors", &f);
    if (rc == CLT_ENOTFOUND) {
      char why[512];
      clt__strlcpy(why, clt_last_error(), sizeof why);
      rc = clt__error(rc, "%s: hf import reads the safetensors files save_pretrained writes (pytorch_model.bin is "
                      "not read: save with safe_serialization=True)", why);
    }
    goto out;
  }
  fclose(probe);
  fs->path = index;
  index = NULL;
  json_error_t err;
  json_t *j = json_load_file(fs->path, 0, &err);
  json_t *map = j ? json_object_get(j, "weight_map") : NULL;
  if (!json_is_object(map)) {
    rc = clt__error(CLT_EFORMAT, "%s: %s", fs->path, j ? "no \"weight_map\" object" : err.text);
  } else {
    fs->map = json_incref(map);
  }
  json_decref(j);
out:
  free(single);
  free(index);
  return rc;
}

int clt__hf_files_find(clt__hf_files *fs, const char *name, clt__st_file **f, clt__st_tensor *t, const char **file) {
  const char *shard = "model.safetensors";
  *file = fs->path;
  if (fs->map) {
    json_t *v = json_object_get(fs->map, name);
    if (!v) return 1;
    if (!json_is_string(v))
      return clt__error(CLT_EFORMAT, "%s: the weight_map entry of '%s' is not a file name", fs->path, name);
    shard = json_string_value(v);
  }
  int rc = open_shard(fs, shard, f);
  if (rc < 0)
    return fs->map ? clt__error_prefix(rc, "%s puts '%s' in %s, which cannot be read", fs->path, name, shard) : rc;
  rc = clt__st_find(*f, name, t);
  if (rc == CLT_ENOTFOUND && fs->map) /* the index has it, the shard it names has not */
    return clt__error(CLT_EFORMAT, "%s puts '%s' in %s, but %s/%s has no tensor '%s'; the index does not belong to "
                      "these shards (was a shard replaced, or the index edited?)", fs->path, name, shard, fs->dir,
                      shard, name);
  if (rc == CLT_ENOTFOUND) {
    clt_clear_error();
    return 1;
  }
  if (rc == CLT_OK && fs->map) {
    for (int i = 0; i < fs->n; i++)
      if (fs->files[i] == *f) *file = fs->names[i];
  }
  return rc;
}

void clt__hf_files_warn_unused(clt__hf_files *fs, const clt__hf_arch *a, char (*used)[96], int n, int tied) {
  int left_out = 0;
  char first[128] = "";
  void *iter = NULL;
  const char *name;
  for (;;) {
    if (fs->map) {
      iter = iter ? json_object_iter_next(fs->map, iter) : json_object_iter(fs->map);
      name = iter ? json_object_iter_key(iter) : NULL;
    } else {
      name = clt__st_next_name(fs->files[0], &iter);
    }
    if (!name) break;
    if ((a->is_buffer && a->is_buffer(name)) || (tied && strcmp(name, "lm_head.weight") == 0)) continue;
    int known = 0;
    for (int i = 0; i < n && !known; i++) known = strcmp(used[i], name) == 0;
    if (!known && left_out++ == 0) clt__strlcpy(first, name, sizeof first);
  }
  if (left_out)
    clt__log(CLT_LOG_WARN, "%s: %d tensor(s) that are not part of %s are left out ('%s'%s)", fs->path, left_out,
             a->hf_class, first, left_out > 1 ? ", ..." : "");
}

int clt__hf_files_reads(const clt__hf_files *fs, const char *path, char *which, size_t len) {
  if (fs->path && clt__same_file(path, fs->path)) {
    clt__strlcpy(which, fs->path, len);
    return 1;
  }
  const char *key;
  json_t *v;
  json_object_foreach(fs->map, key, v) {
    char *shard = json_is_string(v) ? clt__hf_path(fs->dir, json_string_value(v)) : NULL;
    int same = shard && clt__same_file(path, shard);
    if (same) clt__strlcpy(which, shard, len);
    free(shard);
    if (same) return 1;
  }
  return 0;
}
