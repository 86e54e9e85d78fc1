/*
 * checkpoint_dir.c: directories of checkpoints, as fit() keeps them:
 * DIR/ckpt-<step>.safetensors every N steps, the newest K kept, temporary
 * files of interrupted saves cleared away, and "latest" = the newest file
 * that loads, skipping damaged ones. Also the export of a checkpoint's
 * weights alone.
 */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/outfile.h"
#include "io/dir_lock.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "model/spec.h"

#define NAME_PREFIX "ckpt-"
#define NAME_SUFFIX ".safetensors"

int clt_checkpoint_path(const char *dir, int64_t step, char *out, size_t size) {
  CLT_PATH_ARG(dir);
  CLT_ARG(out);
  if (step < 0) return clt__error(CLT_EINVAL, "clt_checkpoint_path: step is %lld; give 0 or more", (long long)step);
  int n = snprintf(out, size, "%s/" NAME_PREFIX "%010lld" NAME_SUFFIX, dir, (long long)step);
  if (n < 0 || (size_t)n >= size)
    return clt__error(CLT_EINVAL, "the checkpoint path in %s does not fit in %zu bytes", dir, size);
  return CLT_OK;
}

/* The step of a name "ckpt-<digits>.safetensors", or -1 for any other
 * name (temporary files "ckpt-N.safetensors.tmp.PID" among them). */
static int64_t name_step(const char *name) {
  size_t lp = strlen(NAME_PREFIX), ls = strlen(NAME_SUFFIX), n = strlen(name);
  if (n <= lp + ls || strncmp(name, NAME_PREFIX, lp) != 0 || strcmp(name + n - ls, NAME_SUFFIX) != 0) return -1;
  int64_t step = 0;
  for (size_t i = lp; i < n - ls; i++) {
    if (name[i] < '0' || name[i] > '9' || step > INT64_MAX / 10 - 9) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

static int is_temporary(const char *name) {
  return strncmp(name, NAME_PREFIX, strlen(NAME_PREFIX)) == 0 && strstr(name, NAME_SUFFIX CLT__ST_TMP_INFIX) != NULL;
}

typedef struct entry {
  int64_t step;
  char path[PATH_MAX];
  int whole;          /* passed the checks of describe() */
  clt__run_info run;  /* its run record (zero: none, or not whole) */
} entry;

static int by_step(const void *a, const void *b) {
  int64_t x = ((const entry *)a)->step, y = ((const entry *)b)->step;
  return (x > y) - (x < y);
}

/* Newest first, as "latest" means it: the session that started last (a
 * resumed run starts a new session, so the checkpoints of a branch it
 * abandoned are older, whatever their steps), then the higher step. Not
 * whole ones go last. Files older than the run record count as started at
 * 0: older than any that has one. */
static int newest_first(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->whole != y->whole) return y->whole - x->whole;
  if (x->run.started_ns != y->run.started_ns) return (y->run.started_ns > x->run.started_ns) ? 1 : -1;
  return (y->step > x->step) - (y->step < x->step);
}

/* Read each entry's run record, checking what can be checked without
 * reading the data (framing, format, version, header CRC32, size); a file
 * that fails is not whole, and is logged with why after `what` (NULL: not). */
static void describe(entry *list, int n, const char *what) {
  for (int i = 0; i < n; i++) {
    int rc = clt__checkpoint_run_info(list[i].path, 0, &list[i].run);
    list[i].whole = rc == CLT_OK;
    if (rc < 0 && what) clt__log(CLT_LOG_WARN, "%s a damaged checkpoint: %s", what, clt_last_error());
  }
  if (n > 0) qsort(list, (size_t)n, sizeof *list, newest_first);
}

/* The checkpoints in dir, oldest first. A missing dir is CLT_ENOTFOUND. */
static int list_checkpoints(const char *dir, entry **out, int *n) {
  int rc = CLT_OK, cap = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  *out = NULL;
  *n = 0;
  if (!d)
    return clt__error(errno == ENOENT ? CLT_ENOTFOUND : CLT_EIO, "cannot read the checkpoint directory %s: %s", dir,
                      strerror(errno));
  while ((e = readdir(d))) {
    int64_t step = name_step(e->d_name);
    if (step < 0) continue;
    if (*n == cap) {
      entry *grown = realloc(*out, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *grown);
      if (!grown) { rc = clt__error(CLT_ENOMEM, "listing %s: out of memory", dir); break; }
      *out = grown;
    }
    (*out)[*n].step = step;
    snprintf((*out)[*n].path, sizeof (*out)[*n].path, "%s/%s", dir, e->d_name);
    (*n)++;
  }
  closedir(d);
  if (rc == CLT_OK && *n > 0) qsort(*out, (size_t)*n, sizeof **out, by_step);
  return rc;
}

/* Temporary files of saves that never finished (a killed job): the whole
 * size of a checkpoint each, and never read. One run owns its directory
 * (its lock, clt__checkpoint_dir_check), so none of them is being written
 * now. */
static void remove_leftovers(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[PATH_MAX + 256];
  if (!d) return;
  while ((e = readdir(d))) {
    if (!is_temporary(e->d_name)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) == 0)
      clt__log(CLT_LOG_INFO, "removed %s, left by a save that did not finish", path);
  }
  closedir(d);
}

/* Rank 0, before a save: the path for this step, the directory, and what
 * saves that never finished left (temporary files, shards of no index). */
static int prepare_dir(clt_trainer *t, char *path, size_t size) {
  const char *dir = t->opts.checkpoint_dir;
  int rc = CLT_OK;
  CLT_TRY(clt_checkpoint_path(dir, t->steps_done, path, size));
  CLT_TRY(clt__make_dirs(dir, "the checkpoint directory"));
  remove_leftovers(dir);
  clt__ckpt_shards_remove_orphans(dir);
fail:
  return rc;
}

/* A checkpoint goes: an index with its shards. */
static void remove_checkpoint(const char *path, const char *why) {
  if (unlink(path) != 0)
    clt__log(CLT_LOG_WARN, "could not remove the %s checkpoint %s: %s", why ? why : "old", path, strerror(errno));
  clt__ckpt_shards_remove(path, NULL);
}

/* Rank 0, once the new checkpoint at path is whole: only now do others go:
 * the newest K whole ones stay (in latest's order, the new one first), and
 * no whole one is removed while a damaged one stays, so damaged files go
 * too. Those kept are checked in full (their data's CRC32 as well), so a
 * damaged file never takes the place of a whole one. */
static void rotate(clt_trainer *t, const char *path) {
  const char *dir = t->opts.checkpoint_dir;
  entry *list = NULL;
  int n;
  if (t->opts.checkpoint_keep > 0 && list_checkpoints(dir, &list, &n) == CLT_OK) {
    int kept = 0;
    describe(list, n, NULL); /* each is named below, with what becomes of it */
    for (int i = 0; i < n; i++) {
      const char *why = NULL;
      if (strcmp(list[i].path, path) == 0) {
        kept++;
        continue;
      }
      if (!list[i].whole) {
        /* Damaged (cut, a CRC32 that fails, a shard missing or damaged)
         * goes; a whole file this cltrain does not read (a newer format
         * version, another format) is not ours to delete, and does not
         * count either. */
        clt__st_file *f = NULL;
        clt__run_info again;
        if (clt__st_open(list[i].path, &f) == CLT_OK) {
          int index = clt__ckpt_is_sharded(f);
          clt__st_close(f);
          clt__checkpoint_run_info(list[i].path, 0, &again); /* for its reason */
          if (!index) {
            clt__log(CLT_LOG_WARN, "keeping %s, a whole file but not a checkpoint this cltrain reads: %s",
                     list[i].path, clt_last_error());
            continue;
          }
        }
        clt__log(CLT_LOG_WARN, "removing a damaged checkpoint: %s", clt_last_error());
        why = "damaged";
      } else if (kept < t->opts.checkpoint_keep) {
        clt__run_info again;
        if (clt__checkpoint_run_info(list[i].path, 1, &again) == CLT_OK) {
          kept++;
          continue;
        }
        clt__log(CLT_LOG_WARN, "removing a damaged checkpoint: %s", clt_last_error());
        why = "damaged";
      }
      remove_checkpoint(list[i].path, why);
    }
  }
  free(list);
}

static int save_to_dir(clt_trainer *t, const float *buf) {
  char path[PATH_MAX];
  int rc = CLT_OK;
  CLT_TRY(prepare_dir(t, path, sizeof path));
  CLT_TRY(clt__checkpoint_write(t, path, buf, NULL));
  rotate(t, path);
fail:
  return rc;
}

int clt__checkpoint_dir_check(clt_trainer *t) {
  char path[PATH_MAX];
  const char *dir = t->opts.checkpoint_dir;
  int rc = CLT_OK;
  if (!dir || t->run.lock_fd >= 0) return CLT_OK; /* none, or this trainer's already */
  CLT_TRY(clt_checkpoint_path(dir, INT64_MAX, path, sizeof path)); /* the longest name */
  CLT_TRY(clt_check_output(dir, CLT_OUTPUT_DIR));
  CLT_TRY(clt__make_dirs(dir, "the checkpoint directory"));
  CLT_TRY(clt__dir_lock("the checkpoint directory", dir, &t->run.lock_fd));
fail:
  return rc;
}

/* In shards: rank 0 prepares the directory before any rank writes into
 * it, every rank writes its shard, rank 0 the index, then rotates. */
static int save_sharded_to_dir(clt_trainer *t, const clt__state_shard *sh) {
  char path[PATH_MAX];
  int rc = t->rank == 0 ? prepare_dir(t, path, sizeof path)
                        : clt_checkpoint_path(t->opts.checkpoint_dir, t->steps_done, path, sizeof path);
  rc = clt__trainer_share_status(t, rc);
  if (rc == CLT_OK) rc = clt__checkpoint_save_sharded(t, path, sh);
  if (rc == CLT_OK && t->rank == 0) rotate(t, path);
  return rc;
}

int clt__trainer_checkpoint_to_dir(clt_trainer *t) {
  float *buf;
  int sharded;
  clt__state_shard sh;
  int rc = clt__checkpoint_shard(t, &sharded, &sh);
  if (rc < 0 || sharded) {
    if (rc == CLT_OK) rc = save_sharded_to_dir(t, &sh);
    clt__state_shard_free(&sh);
    if (rc == CLT_OK) t->run.saved_step = t->steps_done;
    return rc;
  }
  rc = clt__checkpoint_gather(t, &buf);
  if (rc < 0) return rc;
  rc = t->rank == 0 ? save_to_dir(t, buf) : CLT_OK;
  free(buf);
  rc = clt__trainer_share_status(t, rc);
  if (rc == CLT_OK) t->run.saved_step = t->steps_done;
  return rc;
}

/* Rank 0: read the newest checkpoint of dir that is whole into h:
 * newest in newest_first's order, the newest session's highest step. */
static void read_latest(clt_trainer *t, const char *dir, clt__ckpt_header *h, int64_t *shares, float *payload) {
  entry *list = NULL;
  int n = 0, damaged = 0;
  h->rc = list_checkpoints(dir, &list, &n);
  if (h->rc == CLT_OK && n == 0)
    h->rc = clt__error(CLT_ENOTFOUND, "%s holds no checkpoint (" NAME_PREFIX "<step>" NAME_SUFFIX ")", dir);
  int64_t top_step = -1;
  const char *top = NULL;
  for (int i = 0; i < n; i++)
    if (list[i].step > top_step) top_step = list[i].step, top = list[i].path;
  char newest[PATH_MAX];
  clt__strlcpy(newest, top ? top : "", sizeof newest);
  if (h->rc == CLT_OK) describe(list, n, "skipping");
  int chosen = -1;
  for (int i = 0; h->rc == CLT_OK && i < n; i++) {
    int rc = list[i].whole ? clt__checkpoint_read(t, list[i].path, h, shares, payload) : CLT_EFORMAT;
    if (rc == CLT_OK) {
      chosen = i;
      break;
    }
    /* A damaged file (or one gone since the listing): try the next. A
     * whole file that does not fit this run is the user's to fix. */
    if (list[i].whole && rc != CLT_EFORMAT && rc != CLT_EIO && rc != CLT_ENOTFOUND) break;
    if (list[i].whole) clt__log(CLT_LOG_WARN, "skipping a damaged checkpoint: %s", clt_last_error());
    damaged++;
    h->rc = CLT_OK;
    if (i == n - 1)
      h->rc = clt__error(CLT_EFORMAT, "none of the %d checkpoints in %s is whole (the reasons are above); the newest "
                         "is %s", damaged, dir, newest);
  }
  if (h->rc == CLT_OK && damaged)
    clt__log(CLT_LOG_WARN, "resuming from %s, the newest whole checkpoint in %s", h->path, dir);
  /* Higher steps of a run abandoned since (resumed from an earlier step,
   * or replaced by a fresh run) are left alone: say so. */
  if (h->rc == CLT_OK && chosen >= 0) {
    for (int i = chosen + 1; i < n; i++)
      if (list[i].whole && list[i].step > list[chosen].step) {
        clt__log(CLT_LOG_WARN, "%s has a higher step than %s but is from a session that started earlier (run %s, "
                 "from step %lld): that branch was abandoned; resuming the newest run", list[i].path, h->path,
                 list[i].run.id[0] ? list[i].run.id : "without a run record", (long long)list[i].run.branched_from);
        break;
      }
  }
  free(list);
}

int clt_trainer_resume_latest(clt_trainer *t, const char *dir, char *loaded, size_t size) {
  clt__ckpt_header *h = NULL;
  int64_t *shares = NULL;
  float *payload = NULL;
  CLT_HANDLE(t, "trainer");
  int rc = clt__path_arg(__func__, "dir", dir);
  if (rc == CLT_OK) rc = clt__checkpoint_alloc(t, &h, &shares, &payload);
  rc = clt__trainer_args_ok(t, rc, "allocating for a checkpoint");
  if (rc < 0) {
    free(h), free(shares), free(payload);
    return rc;
  }
  if (t->rank == 0) read_latest(t, dir, h, shares, payload);
  rc = clt__checkpoint_apply(t, h, shares, payload);
  if (rc == CLT_OK && loaded && size) clt__strlcpy(loaded, h->path, size);
  free(h), free(shares), free(payload);
  return rc;
}

/* ---- export ------------------------------------------------------------------ */

int clt_checkpoint_export(const char *checkpoint, const char *out) {
  int rc = CLT_OK, n;
  clt__st_file *f = NULL;
  clt_model_spec *spec = NULL;
  clt__st_tensor *want = NULL, *named = NULL;
  clt__ckpt_meta checked = {0};
  float *params = NULL;
  CLT_PATH_ARG(checkpoint);
  CLT_PATH_ARG(out);
  if (clt__same_file(checkpoint, out))
    return clt__error(CLT_EINVAL, "exporting %s onto itself would replace the checkpoint with its weights; name "
                      "another file", checkpoint);
  CLT_TRY(clt__checkpoint_open(checkpoint, 1, &f));
  CLT_TRY(clt__ckpt_meta_read(f, checkpoint, &checked)); /* no weights of an edited file */
  const char *text = checked.spec, *step = clt__st_metadata(f, "step");
  if ((rc = clt__spec_parse(text, checkpoint, &spec)) < 0) {
    rc = clt__error_prefix(rc, "%s: its model spec does not parse", checkpoint);
    goto fail;
  }
  CLT_TRY(clt__ckpt_meta_check_labels(&checked, checkpoint, spec->labels_per_sample));
  want = clt__calloc((size_t)spec->nlayers * CLT_MAX_LAYER_PARAMS, sizeof *want);
  named = clt__calloc((size_t)spec->nlayers * CLT_MAX_LAYER_PARAMS, sizeof *named);
  params = clt__calloc((size_t)spec->param_count, sizeof *params);
  if (!want || !named || !params) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(clt__arena_tensors(spec, "params/", params, want, &n));
  CLT_TRY(clt__arena_tensors(spec, "", params, named, &n));
  if (clt__ckpt_is_sharded(f)) { /* the parameters' ranges from the shards that hold them */
    clt__ckpt_shards sh;
    CLT_TRY(clt__ckpt_shards_parse(f, checkpoint, &sh));
    if (sh.params != spec->param_count)
      rc = clt__error(CLT_EFORMAT, "%s: its shards hold %lld parameters, its own model spec %lld", checkpoint,
                      (long long)sh.params, (long long)spec->param_count);
    else
      rc = clt__ckpt_shards_read(&sh, checkpoint, 0, params);
    clt__ckpt_shards_free(&sh);
    if (rc < 0) goto fail;
  }
  for (int i = 0; i < n && !clt__ckpt_is_sharded(f); i++) {
    clt__st_tensor have;
    int64_t count = 1;
    for (int d = 0; d < want[i].ndim; d++) count *= want[i].shape[d];
    CLT_TRY(clt__st_find(f, want[i].name, &have));
    int same = have.ndim == want[i].ndim;
    for (int d = 0; same && d < have.ndim; d++) same = have.shape[d] == want[i].shape[d];
    if (!same) {
      rc = clt__error(CLT_EFORMAT, "%s: tensor '%s' does not have the shape its own model spec gives it", checkpoint,
                      want[i].name);
      goto fail;
    }
    CLT_TRY(clt__st_read(f, &have, (float *)want[i].data, count));
  }
  const char *meta[] = {"format", "cltrain-weights", "version", "1", "model", text, "step", step ? step : "0", NULL};
  CLT_TRY(clt__st_write(out, named, n, meta));
fail:
  clt__ckpt_meta_free(&checked);
  clt__st_close(f);
  clt__spec_destroy(spec);
  free(want), free(named), free(params);
  return rc;
}
