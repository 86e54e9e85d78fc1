/*
 * checkpoint_shards.c: a checkpoint written in shards (doc/checkpoint.md,
 * "Sharded checkpoints"). Under ZeRO each rank holds the optimizer state of
 * its shard only; gathering it all on rank 0 to write one file costs rank 0
 * the whole model's state in host memory. Instead each rank writes what it
 * owns (the strategy's get_shard: ranges of the whole layout, disjoint over
 * the ranks) to a shard file of its own, and rank 0 then writes the index,
 * PATH itself: a version-2 checkpoint of no tensors whose metadata is a
 * one-file checkpoint's plus 'shards', which names each shard file, its
 * ranges and its data's size and CRC32.
 *
 *   ckpt-0000000010.safetensors                               the index
 *   ckpt-0000000010.5c1e09a2.shard-00000-of-00002.safetensors rank 0's shard
 *   ckpt-0000000010.5c1e09a2.shard-00001-of-00002.safetensors rank 1's shard
 *
 * Whole or nothing: every shard is written atomically (a temporary file,
 * fsync, rename) before the index is, and the index last, the same way;
 * "latest" lists indexes only, so it sees a checkpoint only once all of it
 * is on disk. The middle word is this save's random id, so a save over an
 * existing checkpoint (the same path) never touches that one's shards: its
 * index goes on naming whole files until the new index replaces it, and only
 * then are the old shards removed.
 *
 * Reading needs nothing of the layout that wrote it: a loader takes each
 * range from whichever shard holds it, so a checkpoint resumes at any rank
 * count, ZeRO stage, pipeline layout or shard weighting (ranges may have
 * any lengths). The shard files must be visible to every rank that writes
 * (one node, or a shared file system).
 */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "io/weights.h"
#include "model/spec.h"

#define SHARD_WORD ".shard-"
#define SUFFIX ".safetensors"

/* ---- names ---------------------------------------------------------------- */

/* The index path without ".safetensors" (a name without it: whole). */
static void stem_of(const char *index, char *out, size_t size) {
  size_t n = strlen(index), ls = strlen(SUFFIX);
  clt__strlcpy(out, index, size);
  if (n > ls && strcmp(index + n - ls, SUFFIX) == 0 && n - ls < size) out[n - ls] = 0;
}

static const char *base_of(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* The folder of path ("." for a bare name), with a trailing '/'. */
static void dir_of(const char *path, char *out, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    clt__strlcpy(out, "./", size);
    return;
  }
  size_t n = (size_t)(slash - path) + 1;
  if (n >= size) n = size - 1;
  memcpy(out, path, n);
  out[n] = 0;
}

static int shard_path(const char *index, const char *save, int r, int N, char *out, size_t size) {
  char stem[PATH_MAX];
  stem_of(index, stem, sizeof stem);
  int n = snprintf(out, size, "%s.%s" SHARD_WORD "%05d-of-%05d" SUFFIX, stem, save, r, N);
  if (n < 0 || (size_t)n >= size) {
    out[0] = 0; /* no name at all rather than a cut one */
    return clt__error(CLT_EINVAL, "the shard names of the checkpoint %s do not fit in %zu bytes", index, size);
  }
  return CLT_OK;
}

/* A save's id: 32 random bits as hex (the clock and pid without /dev/urandom). */
static void new_save_id(char *out, size_t size) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint32_t r = (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec ^ ((uint32_t)getpid() << 16);
  FILE *f = fopen("/dev/urandom", "rb");
  if (f) {
    if (fread(&r, sizeof r, 1, f) != 1) r ^= (uint32_t)ts.tv_nsec;
    fclose(f);
  }
  snprintf(out, size, "%08x", (unsigned)r);
}

/* ---- writing --------------------------------------------------------------- */

int clt__checkpoint_shard(clt_trainer *t, int *sharded, clt__state_shard *sh) {
  int per = clt_optimizer_state_per_param(&t->opts.optimizer), mine = 0, rc = CLT_OK;
  memset(sh, 0, sizeof *sh);
  *sharded = 0;
  if (!t->opts.checkpoint_one_file && t->s.i->get_shard) rc = t->s.i->get_shard(t->s.self, per > 0, &mine, sh);
  rc = clt__trainer_all_ok(t, rc, "taking each rank's shard of the state for a checkpoint");
  int32_t says = mine;
  if (rc == CLT_OK && t->nranks > 1) rc = clt_bcast(t->comm, &says, sizeof says, 0);
  /* Every rank runs the same strategy and stage; one that does not agree
   * would wait for files that never come. */
  if (rc == CLT_OK && says != mine)
    rc = clt__error(CLT_EINTERNAL, "rank %d: rank 0 writes this checkpoint %s, this rank %s", t->rank,
                    says ? "in shards" : "as one file", mine ? "in shards" : "as one file");
  rc = clt__trainer_all_ok(t, rc, "choosing how to write a checkpoint");
  if (rc < 0) clt__state_shard_free(sh);
  *sharded = rc == CLT_OK && says;
  return rc;
}

static json_t *ranges_json(int n, const int64_t (*range)[2]) {
  json_t *a = json_array();
  for (int k = 0; a && k < n; k++) json_array_append_new(a, json_pack("[I, I]", (json_int_t)range[k][0], (json_int_t)range[k][1]));
  return a;
}

/* This rank's shard file: "params" and "optim/<slot>" (count floats each,
 * range after range), and its ranges as metadata. */
static int write_shard(clt_trainer *t, const char *file, const clt__state_shard *sh) {
  int rc = CLT_OK, per = sh->state ? clt_optimizer_state_per_param(&t->opts.optimizer) : 0, n = 0;
  const clt__optimizer *row = clt__optimizer_of(t->opts.optimizer.kind);
  clt__st_tensor tensors[1 + CLT__OPTIM_MAX_SLOTS];
  char *ranges = NULL, rank[16], ranks[16], params[32], step[32];
  memset(tensors, 0, sizeof tensors);
  if (sh->count > 0) {
    tensors[n] = (clt__st_tensor){.ndim = 1, .shape = {sh->count}, .data = sh->params, .dtype = CLT__ST_F32};
    clt__strlcpy(tensors[n++].name, "params", sizeof tensors[0].name);
    for (int c = 0; c < per; c++) {
      tensors[n] = (clt__st_tensor){.ndim = 1, .shape = {sh->count}, .data = sh->state + (size_t)c * sh->count,
                                    .dtype = CLT__ST_F32};
      snprintf(tensors[n++].name, sizeof tensors[0].name, "optim/%s", row->slots[c]);
    }
  }
  json_t *r = ranges_json(sh->n, (const int64_t (*)[2])sh->range);
  ranges = r ? json_dumps(r, JSON_COMPACT) : NULL;
  json_decref(r);
  if (!ranges) return clt__error(CLT_ENOMEM, "%s: out of memory", file);
  snprintf(rank, sizeof rank, "%d", t->rank);
  snprintf(ranks, sizeof ranks, "%d", t->nranks);
  snprintf(params, sizeof params, "%lld", (long long)clt_model_param_count(t->model));
  snprintf(step, sizeof step, "%lld", (long long)t->steps_done);
  const char *meta[] = {"format", CLT__CKPT_SHARD_FORMAT, "format_version", CLT__CKPT_SHARDED_VERSION_STR,
                        "shard", rank, "shards", ranks, "param_count", params, "step", step, "ranges", ranges, NULL};
  rc = clt__st_write(file, tensors, n, meta);
  free(ranges);
  return rc;
}

/* Rank 0, once every shard is whole: the index's record, from each shard
 * file's own header (so it names what is on disk). */
static int index_record(clt_trainer *t, const char *path, const char *save, char **out) {
  int rc = CLT_OK, per = clt_optimizer_state_per_param(&t->opts.optimizer);
  const clt__optimizer *row = clt__optimizer_of(t->opts.optimizer.kind);
  json_t *files = json_array(), *slots = json_array(), *rec = NULL;
  clt__st_file *f = NULL;
  char file[PATH_MAX];
  *out = NULL;
  for (int c = 0; c < per; c++) json_array_append_new(slots, json_string(row->slots[c]));
  for (int r = 0; r < t->nranks; r++) {
    CLT_TRY(shard_path(path, save, r, t->nranks, file, sizeof file));
    CLT_TRY(clt__st_open(file, &f));
    const char *ranges = clt__st_metadata(f, "ranges"), *bytes = clt__st_metadata(f, "data_bytes"),
               *crc = clt__st_metadata(f, "data_crc32");
    json_t *rj = ranges ? json_loads(ranges, 0, NULL) : NULL;
    if (!rj || !bytes || !crc) {
      json_decref(rj);
      rc = clt__error(CLT_EIO, "%s: the shard just written has no ranges or data record; was it replaced?", file);
      goto fail;
    }
    json_array_append_new(files, json_pack("{s:s, s:o, s:I, s:s}", "file", base_of(file), "ranges", rj, "data_bytes",
                                           (json_int_t)strtoll(bytes, NULL, 10), "data_crc32", crc));
    clt__st_close(f), f = NULL;
  }
  rec = json_pack("{s:s, s:O, s:O}", "save", save, "slots", slots, "files", files);
  if (!rec || !(*out = json_dumps(rec, JSON_COMPACT | JSON_SORT_KEYS))) rc = clt__error(CLT_ENOMEM, "%s: out of memory", path);
fail:
  clt__st_close(f);
  json_decref(files), json_decref(slots), json_decref(rec);
  return rc;
}

int clt__checkpoint_save_sharded(clt_trainer *t, const char *path, const clt__state_shard *sh) {
  char save[16] = "", file[PATH_MAX] = "", *record = NULL;
  int rc = CLT_OK;
  double t0 = clt__now();
  if (t->rank == 0) new_save_id(save, sizeof save);
  if (t->nranks > 1) rc = clt_bcast(t->comm, save, sizeof save, 0);
  if (rc == CLT_OK) rc = shard_path(path, save, t->rank, t->nranks, file, sizeof file);
  if (rc == CLT_OK) rc = write_shard(t, file, sh);
  rc = clt__trainer_all_ok(t, rc, "writing the checkpoint's shards");
  if (rc == CLT_OK && t->rank == 0) {
    rc = index_record(t, path, save, &record);
    if (rc == CLT_OK) rc = clt__checkpoint_write(t, path, NULL, record);
    free(record);
  }
  rc = clt__trainer_share_status(t, rc);
  if (rc < 0) {
    if (file[0]) unlink(file); /* this save's, never an earlier one's: whatever index names them stays whole */
    return rc;
  }
  if (t->rank == 0) {
    clt__ckpt_shards_remove(path, save); /* an earlier save to this path */
    clt__log(CLT_LOG_INFO, "saved checkpoint %s in %d shards (this rank's %lld parameters) in %.3f s", path,
             t->nranks, (long long)sh->count, clt__now() - t0);
  }
  return CLT_OK;
}

/* ---- reading --------------------------------------------------------------- */

int clt__ckpt_is_sharded(clt__st_file *f) {
  const char *v = clt__st_metadata(f, "format_version");
  return v && strcmp(v, CLT__CKPT_SHARDED_VERSION_STR) == 0;
}

void clt__ckpt_shards_free(clt__ckpt_shards *s) {
  for (int i = 0; s->file && i < s->nfiles; i++) free(s->file[i].range);
  free(s->file);
  memset(s, 0, sizeof *s);
}

static int bad_index(const char *path, const char *what) {
  return clt__error(CLT_EFORMAT, "%s: the index of shards is bad: %s; the file was edited or damaged", path, what);
}

static int whole(const json_t *v, int64_t lo, int64_t hi, int64_t *out) {
  if (!json_is_integer(v)) return 0;
  *out = json_integer_value(v);
  return *out >= lo && *out <= hi;
}

static int by_first(const void *a, const void *b) {
  int64_t x = (*(const int64_t *const *)a)[0], y = (*(const int64_t *const *)b)[0];
  return (x > y) - (x < y);
}

int clt__ckpt_shards_parse(clt__st_file *f, const char *path, clt__ckpt_shards *out) {
  int rc = CLT_OK;
  int64_t total = 0, **all = NULL, nall = 0;
  char what[PATH_MAX + 200];
  json_t *rec = NULL;
  memset(out, 0, sizeof *out);
  CLT_TRY(clt__ckpt_meta_whole(f, path, "param_count", 0, (int64_t)1 << 53, &out->params));
  const char *text = clt__st_metadata(f, "shards");
  rec = text ? json_loads(text, 0, NULL) : NULL;
  json_t *slots = json_object_get(rec, "slots"), *files = json_object_get(rec, "files");
  if (!rec) { rc = bad_index(path, "its metadata 'shards' is missing or not JSON"); goto fail; }
  if (!json_is_array(slots) || json_array_size(slots) > CLT__OPTIM_MAX_SLOTS || !json_is_array(files) ||
      json_array_size(files) == 0 || json_array_size(files) > 1 << 20) {
    rc = bad_index(path, "'shards' needs 'slots' (at most " "2" " names) and 'files' (at least one)");
    goto fail;
  }
  out->nslots = (int)json_array_size(slots);
  for (int c = 0; c < out->nslots; c++) {
    const char *s = json_string_value(json_array_get(slots, (size_t)c));
    if (!s || strlen(s) >= sizeof out->slot[c]) { rc = bad_index(path, "a slot name is not a short string"); goto fail; }
    clt__strlcpy(out->slot[c], s, sizeof out->slot[c]);
  }
  out->nfiles = (int)json_array_size(files);
  if (!(out->file = clt__calloc((size_t)out->nfiles, sizeof *out->file))) { rc = CLT_ENOMEM; goto fail; }
  char dir[PATH_MAX];
  dir_of(path, dir, sizeof dir);
  for (int i = 0; i < out->nfiles; i++) {
    clt__ckpt_shard_file *s = &out->file[i];
    json_t *e = json_array_get(files, (size_t)i), *ranges = json_object_get(e, "ranges");
    const char *name = json_string_value(json_object_get(e, "file")), *crc = json_string_value(json_object_get(e, "data_crc32"));
    if (!name || !*name || strchr(name, '/') || strcmp(name, "..") == 0 || strcmp(name, ".") == 0) {
      snprintf(what, sizeof what, "shard %d's 'file' is not a file name beside the index", i);
      rc = bad_index(path, what);
      goto fail;
    }
    if (!crc || strlen(crc) != 8 || strspn(crc, "0123456789abcdef") != 8 ||
        !whole(json_object_get(e, "data_bytes"), 0, INT64_MAX / 2, &s->data_bytes) || !json_is_array(ranges) ||
        json_array_size(ranges) > (size_t)1 << 24) {
      snprintf(what, sizeof what, "shard %s needs 'ranges', 'data_bytes' and 'data_crc32' (8 hex digits)", name);
      rc = bad_index(path, what);
      goto fail;
    }
    snprintf(s->path, sizeof s->path, "%s%s", dir, name);
    clt__strlcpy(s->crc, crc, sizeof s->crc);
    s->n = (int)json_array_size(ranges);
    if (!(s->range = clt__calloc((size_t)s->n + 1, sizeof *s->range))) { rc = CLT_ENOMEM; goto fail; }
    for (int k = 0; k < s->n; k++) {
      json_t *r = json_array_get(ranges, (size_t)k);
      if (!json_is_array(r) || json_array_size(r) != 2 || !whole(json_array_get(r, 0), 0, out->params, &s->range[k][0]) ||
          !whole(json_array_get(r, 1), 1, out->params - s->range[k][0], &s->range[k][1])) {
        snprintf(what, sizeof what, "range %d of shard %s is not [first, count] inside the %lld parameters", k, name,
                 (long long)out->params);
        rc = bad_index(path, what);
        goto fail;
      }
      s->count += s->range[k][1];
    }
    if (s->data_bytes != s->count * (1 + out->nslots) * (int64_t)sizeof(float)) {
      snprintf(what, sizeof what, "shard %s records %lld bytes of data, its ranges %lld floats of %d components",
               name, (long long)s->data_bytes, (long long)s->count, 1 + out->nslots);
      rc = bad_index(path, what);
      goto fail;
    }
    nall += s->n;
    total += s->count;
  }
  /* Together the ranges cover every parameter exactly once. */
  if (!(all = clt__calloc((size_t)nall + 1, sizeof *all))) { rc = CLT_ENOMEM; goto fail; }
  nall = 0;
  for (int i = 0; i < out->nfiles; i++)
    for (int k = 0; k < out->file[i].n; k++) all[nall++] = out->file[i].range[k];
  qsort(all, (size_t)nall, sizeof *all, by_first);
  int64_t at = 0;
  for (int64_t k = 0; k < nall; k++) {
    if (all[k][0] != at) break;
    at += all[k][1];
  }
  if (at != out->params || total != out->params) {
    snprintf(what, sizeof what, "its shards' ranges %s the %lld parameters (covered to %lld, %lld in all)",
             total > out->params ? "overlap, or exceed," : "do not cover", (long long)out->params, (long long)at,
             (long long)total);
    rc = bad_index(path, what);
    goto fail;
  }
fail:
  free(all);
  json_decref(rec);
  if (rc < 0) clt__ckpt_shards_free(out);
  return rc;
}

/* One shard's tensor named name, count floats, or an error naming both files. */
static int shard_tensor(clt__st_file *f, const clt__ckpt_shard_file *s, const char *index, const char *name,
                        clt__st_tensor *out) {
  int rc = clt__st_find(f, name, out);
  if (rc < 0 || out->ndim != 1 || out->shape[0] != s->count)
    return clt__error(CLT_EFORMAT, "%s, a shard of %s: it has no 1-D tensor '%s' of %lld floats as the index says",
                      s->path, index, name, (long long)s->count);
  return CLT_OK;
}

/* Open shard i and hold it to the index: its format, ranges and data record. */
static int open_shard(const clt__ckpt_shards *sh, int i, const char *path, int check_data, clt__st_file **out) {
  const clt__ckpt_shard_file *s = &sh->file[i];
  clt__st_file *f = NULL;
  int rc = CLT_OK;
  struct stat st;
  *out = NULL;
  if (stat(s->path, &st) != 0)
    return clt__error(CLT_EFORMAT, "%s is not whole: its shard %s is missing (%s)", path, s->path, strerror(errno));
  rc = clt__st_open(s->path, &f);
  if (rc < 0) return clt__error_prefix(CLT_EFORMAT, "%s is not whole: its shard", path);
  const char *format = clt__st_metadata(f, "format"), *crc = clt__st_metadata(f, "data_crc32"),
             *bytes = clt__st_metadata(f, "data_bytes"), *ranges = clt__st_metadata(f, "ranges");
  json_t *want = ranges_json(s->n, (const int64_t (*)[2])s->range), *have = ranges ? json_loads(ranges, 0, NULL) : NULL;
  int same = format && strcmp(format, CLT__CKPT_SHARD_FORMAT) == 0 && crc && strcmp(crc, s->crc) == 0 && bytes &&
             strtoll(bytes, NULL, 10) == s->data_bytes && want && have && json_equal(want, have);
  json_decref(want), json_decref(have);
  if (!same) {
    rc = clt__error(CLT_EFORMAT, "%s, a shard of %s, is not the one the index names (its format, ranges or data "
                    "record differ): the files come from different saves, or were edited", s->path, path);
    goto fail;
  }
  if (check_data && (rc = clt__st_check_data(f, 1)) < 0) {
    rc = clt__error_prefix(rc, "%s is not whole: its shard", path);
    goto fail;
  }
  *out = f;
  return CLT_OK;
fail:
  clt__st_close(f);
  return rc;
}

int clt__ckpt_shards_check(const clt__ckpt_shards *s, const char *path, int check_data) {
  for (int i = 0; i < s->nfiles; i++) {
    clt__st_file *f = NULL;
    int rc = open_shard(s, i, path, check_data, &f);
    clt__st_close(f);
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

int clt__ckpt_shards_read(const clt__ckpt_shards *s, const char *path, int comp, float *dst) {
  int rc = CLT_OK;
  clt__st_file *f = NULL;
  float *buf = NULL;
  char name[64];
  if (comp == 0)
    snprintf(name, sizeof name, "params");
  else
    snprintf(name, sizeof name, "optim/%s", s->slot[comp - 1]);
  for (int i = 0; i < s->nfiles; i++) {
    const clt__ckpt_shard_file *sf = &s->file[i];
    clt__st_tensor t;
    if (sf->count == 0) continue;
    CLT_TRY(open_shard(s, i, path, 0, &f)); /* the data's CRC32 was checked when the index was opened */
    CLT_TRY(shard_tensor(f, sf, path, name, &t));
    if (!(buf = clt__calloc((size_t)sf->count, sizeof *buf))) { rc = CLT_ENOMEM; goto fail; }
    CLT_TRY(clt__st_read(f, &t, buf, sf->count)); /* a NaN or Inf is refused, naming the shard */
    int64_t at = 0;
    for (int k = 0; k < sf->n; k++) {
      memcpy(dst + sf->range[k][0], buf + at, (size_t)sf->range[k][1] * sizeof *buf);
      at += sf->range[k][1];
    }
    free(buf), buf = NULL;
    clt__st_close(f), f = NULL;
  }
fail:
  free(buf);
  clt__st_close(f);
  return rc;
}

static const char *shape_text(const clt__st_tensor *t, char *buf, size_t len) {
  size_t at = (size_t)snprintf(buf, len, "(");
  for (int d = 0; d < t->ndim && at < len; d++)
    at += (size_t)snprintf(buf + at, len - at, d ? ", %lld" : "%lld", (long long)t->shape[d]);
  if (at < len) snprintf(buf + at, len - at, ")");
  return buf;
}

/* The model: the saved spec lays out the same tensors, shapes and places
 * as the run's (the shards hold the layout, not named tensors). */
static int check_layout(clt_trainer *t, const char *path, const clt__ckpt_meta *m, const float *base) {
  const clt_model_spec *spec = t->model->spec;
  clt_model_spec *saved = NULL;
  clt__st_tensor *want = NULL, *have = NULL;
  int rc = CLT_OK, nw = 0, nh = 0;
  char diff[400], s1[96], s2[96];
  clt__spec_difference(m->spec, "the checkpoint's", spec, diff, sizeof diff);
  if (clt__spec_parse(m->spec, path, &saved) < 0) {
    rc = clt__error_prefix(CLT_EFORMAT, "%s: its model spec does not parse", path);
    goto fail;
  }
  want = clt__calloc((size_t)spec->nlayers * CLT_MAX_LAYER_PARAMS + 1, sizeof *want);
  have = clt__calloc((size_t)saved->nlayers * CLT_MAX_LAYER_PARAMS + 1, sizeof *have);
  if (!want || !have) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(clt__arena_tensors(spec, "params/", base, want, &nw));
  CLT_TRY(clt__arena_tensors(saved, "params/", base, have, &nh));
  for (int i = 0; i < nw; i++) {
    int j = 0;
    while (j < nh && strcmp(have[j].name, want[i].name) != 0) j++;
    if (j == nh) {
      rc = clt__error(CLT_ESHAPE, "%s does not fit the model %s: it has no tensor '%s', which the model needs%s", path,
                      spec->name, want[i].name, diff);
      goto fail;
    }
    int same = have[j].ndim == want[i].ndim;
    for (int d = 0; same && d < have[j].ndim; d++) same = have[j].shape[d] == want[i].shape[d];
    if (!same) {
      rc = clt__error(CLT_ESHAPE, "%s does not fit the model %s: tensor '%s' is %s in the file and %s in the model%s",
                      path, spec->name, want[i].name, shape_text(&have[j], s1, sizeof s1),
                      shape_text(&want[i], s2, sizeof s2), diff);
      goto fail;
    }
    if (have[j].data != want[i].data) {
      rc = clt__error(CLT_ESHAPE, "%s does not fit the model %s: tensor '%s' lies elsewhere in the file's layout%s",
                      path, spec->name, want[i].name, diff);
      goto fail;
    }
  }
  if (m->param_count != spec->param_count || nh != nw) {
    rc = clt__error(CLT_ESHAPE, "%s does not fit the model %s: it holds %lld parameters, the model has %lld%s", path,
                    spec->name, (long long)m->param_count, (long long)spec->param_count, diff);
    goto fail;
  }
  if (diff[0])
    clt__log(CLT_LOG_WARN, "%s: the parameters fit the model %s, but its spec is not the one saved%s", path,
             spec->name, diff);
fail:
  clt__spec_destroy(saved);
  free(want), free(have);
  return rc;
}

int clt__ckpt_read_sharded(clt_trainer *t, clt__st_file *f, const char *path, const clt__ckpt_meta *m,
                           float *payload) {
  int rc = CLT_OK, per = clt_optimizer_state_per_param(&t->opts.optimizer);
  int64_t P = clt_model_param_count(t->model);
  const clt__optimizer *row = clt__optimizer_of(t->opts.optimizer.kind);
  const char *kind = clt_optimizer_name(m->optimizer.kind);
  clt__ckpt_shards sh = {0};
  CLT_TRY(check_layout(t, path, m, payload));
  if (m->optimizer.kind != t->opts.optimizer.kind)
    return clt__error(CLT_EMISMATCH, "%s holds the state of the %s optimizer but this run uses %s; resume with "
                      "--optimizer %s, or start from its weights alone with --weights", path, kind,
                      clt_optimizer_name(t->opts.optimizer.kind), kind);
  CLT_TRY(clt__ckpt_shards_parse(f, path, &sh));
  if (per > 0 && sh.nslots == 0) {
    rc = clt__error(CLT_EMISMATCH, "%s has no %s optimizer state: it was trained without momentum, and this run uses "
                    "momentum %g; resume with --momentum 0, or start from its weights with --weights", path, kind,
                    (double)t->opts.optimizer.momentum);
    goto fail;
  }
  if (per == 0 && sh.nslots > 0)
    clt__log(CLT_LOG_WARN, "%s: this run uses no momentum, so the saved momentum is left out", path);
  for (int c = 0; c < sh.nslots; c++)
    if (c >= row->nslots || strcmp(sh.slot[c], row->slots[c]) != 0) {
      rc = clt__error(CLT_EFORMAT, "%s holds optimizer state '%s', which the %s optimizer does not have; the file "
                      "was edited, or written by another cltrain", path, sh.slot[c], kind);
      goto fail;
    }
  CLT_TRY(clt__ckpt_shards_read(&sh, path, 0, payload));
  for (int c = 0; c < per; c++) CLT_TRY(clt__ckpt_shards_read(&sh, path, 1 + c, payload + (size_t)P * (1 + c)));
fail:
  clt__ckpt_shards_free(&sh);
  return rc;
}

/* ---- removal --------------------------------------------------------------- */

/* Whether name (in the index's folder) is a shard of stem's base, of the
 * save `keep` or not; temporary files of shards included. */
static int is_shard_of(const char *name, const char *base, const char *keep) {
  size_t lb = strlen(base);
  if (strncmp(name, base, lb) != 0 || name[lb] != '.' || !strstr(name + lb, SHARD_WORD)) return 0;
  if (keep && strncmp(name + lb + 1, keep, strlen(keep)) == 0 && name[lb + 1 + strlen(keep)] == '.') return 0;
  return 1;
}

void clt__ckpt_shards_remove(const char *path, const char *keep) {
  char stem[PATH_MAX], dir[PATH_MAX], file[2 * PATH_MAX];
  stem_of(path, stem, sizeof stem);
  dir_of(path, dir, sizeof dir);
  const char *base = base_of(stem);
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return;
  while ((e = readdir(d))) {
    if (!is_shard_of(e->d_name, base, keep)) continue;
    snprintf(file, sizeof file, "%s%s", dir, e->d_name);
    if (unlink(file) != 0)
      clt__log(CLT_LOG_WARN, "could not remove %s, a shard of %s: %s", file, path, strerror(errno));
  }
  closedir(d);
}

void clt__ckpt_shards_remove_orphans(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char index[2 * PATH_MAX], file[2 * PATH_MAX];
  struct stat st;
  if (!d) return;
  while ((e = readdir(d))) {
    const char *w = strstr(e->d_name, SHARD_WORD);
    if (strncmp(e->d_name, "ckpt-", 5) != 0 || !w) continue;
    /* ckpt-<step>.<save>.shard-...: its index is ckpt-<step>.safetensors */
    const char *dot = strchr(e->d_name, '.');
    if (!dot || dot >= w) continue;
    snprintf(index, sizeof index, "%s/%.*s" SUFFIX, dir, (int)(dot - e->d_name), e->d_name);
    if (stat(index, &st) == 0) continue;
    snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
    if (unlink(file) == 0) clt__log(CLT_LOG_INFO, "removed %s, a shard of a save that did not finish", file);
  }
  closedir(d);
}
