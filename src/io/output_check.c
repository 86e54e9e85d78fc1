/*
 * output_check.c: whether a file or directory can be written, asked before
 * a run spends hours on work it then cannot save (clt_check_output). Each
 * check does what the later write will do, where it can without leaving
 * anything behind: it creates the writer's own temporary file and removes
 * it, so a read-only file system, a missing or foreign directory, a name
 * too long, a directory, a device, a FIFO or a socket in the file's place
 * (core/outfile.h) are all found up front.
 */
#include "core/internal.h"
#include "core/outfile.h"
#include "io/dir_lock.h"
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Create `probe` (which must not exist) and remove it again. */
static int try_create(const char *what, const char *path, const char *probe, const char *dir) {
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0 && errno != EEXIST)
    return clt__error(CLT_EIO, "%s %s cannot be written: creating a file in %s fails: %s", what, path, dir,
                      strerror(errno));
  if (fd >= 0) {
    close(fd);
    unlink(probe);
  }
  return CLT_OK;
}

/* The directory part of path ("." for a bare name), malloc'd. */
static char *parent_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return clt__strdup(".");
  if (slash == path) return clt__strdup("/");
  char *d = clt__calloc(1, (size_t)(slash - path) + 1);
  if (d) memcpy(d, path, (size_t)(slash - path));
  return d;
}

static int check_name(const char *what, const char *path) {
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  if (strlen(path) >= PATH_MAX)
    return clt__error(CLT_EIO, "%s %.60s... is %zu bytes long; paths are limited to %d", what, path, strlen(path),
                      PATH_MAX - 1);
  if (strlen(base) > NAME_MAX)
    return clt__error(CLT_EIO, "%s %s: the name '%.40s...' is %zu bytes long; file names are limited to %d", what,
                      path, base, strlen(base), NAME_MAX);
  return CLT_OK;
}

/* A file replaced whole (or appended to): nothing or a regular file there
 * (a symbolic link is followed to one), its directory there and taking new
 * files. */
static int check_file(const char *what, const char *path, int append) {
  struct stat st;
  char *target = NULL, *dir = NULL;
  int rc = check_name(what, path);
  if (rc < 0) return rc;
  int exists = stat(path, &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    return clt__error(CLT_EIO, "%s %s is a directory; name a file (for example %s/%s)", what, path, path,
                      append ? "metrics.jsonl" : "model.safetensors");
  CLT_TRY(clt__output_resolve(what, path, &target)); /* a device, a FIFO, a socket: refused */
  if (!(dir = parent_of(target))) { rc = CLT_ENOMEM; goto fail; }
  if (stat(dir, &st) != 0)
    rc = clt__error(CLT_EIO, "%s %s cannot be written: the directory %s %s", what, path, dir,
                    errno == ENOENT ? "does not exist" : strerror(errno));
  else if (!S_ISDIR(st.st_mode))
    rc = clt__error(CLT_EIO, "%s %s cannot be written: %s is not a directory", what, path, dir);
  else if (append && exists) {
    int fd = open(target, O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
      rc = clt__error(CLT_EIO, "%s %s cannot be appended to: %s", what, path, strerror(errno));
    else
      close(fd);
  } else {
    /* The writer's own temporary name, or the file itself when appending. */
    char *probe = append ? clt__strdup(target) : clt__st_tmp_path(target);
    rc = probe ? try_create(what, path, probe, dir) : CLT_ENOMEM;
    free(probe);
  }
fail:
  free(dir), free(target);
  return rc;
}

/* A directory: there and writable, or creatable under its nearest
 * existing ancestor; not one another run holds (io/dir_lock.h). */
static int check_dir(const char *what, const char *path) {
  struct stat st;
  int rc = check_name(what, path);
  if (rc < 0) return rc;
  char *at = clt__strdup(path), probe[PATH_MAX + 64];
  if (!at) return CLT_ENOMEM;
  while (stat(at, &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) { /* ENOTDIR: a file on the way up, found below */
      rc = clt__error(CLT_EIO, "%s %s cannot be made: %s: %s", what, path, at, strerror(errno));
      goto done;
    }
    char *up = parent_of(at);
    if (!up) { rc = CLT_ENOMEM; goto done; }
    int same = strcmp(up, at) == 0;
    free(at);
    at = up;
    if (same) break;
  }
  if (!S_ISDIR(st.st_mode)) {
    rc = clt__error(CLT_EIO, "%s %s cannot be %s: %s is not a directory", what, path,
                    strcmp(at, path) == 0 ? "used" : "made", at);
    goto done;
  }
  snprintf(probe, sizeof probe, "%s/.cltrain-probe.%ld", at, (long)getpid());
  rc = try_create(what, path, probe, at);
  /* A directory another run holds (a checkpoint directory's lock). */
  if (rc == CLT_OK && strcmp(at, path) == 0) rc = clt__dir_lock_check(what, path);
done:
  free(at);
  return rc;
}

int clt_check_output(const char *path, clt_output_kind kind) {
  if (!path || !*path) return clt__error(CLT_EINVAL, "clt_check_output: no path given");
  switch (kind) {
  case CLT_OUTPUT_FILE: return check_file("the output file", path, 0);
  case CLT_OUTPUT_APPEND: return check_file("the output file", path, 1);
  case CLT_OUTPUT_DIR: return check_dir("the output directory", path);
  }
  return clt__error(CLT_EINVAL, "clt_check_output: unknown kind %d", (int)kind);
}

int clt__make_dirs(const char *dir, const char *what) {
  char *p = clt__strdup(dir);
  int rc = CLT_OK;
  if (!p) return CLT_ENOMEM;
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char c = *s;
    *s = 0;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      rc = clt__error(CLT_EIO, "cannot create %s %s: %s: %s", what, dir, p, strerror(errno));
      break;
    }
    *s = c;
    if (!c) break;
  }
  free(p);
  struct stat st;
  if (rc == CLT_OK && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
    rc = clt__error(CLT_EIO, "%s %s is not a directory", what, dir);
  return rc;
}
