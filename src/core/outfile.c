/*
 * outfile.c: the rules every file the user names is written by (see
 * outfile.h): replaced whole through a temporary file beside it, and only
 * where nothing or a regular file is; a symbolic link followed to the
 * regular file it leads to; appends only to a regular file; and whether
 * two paths are one file, so a command never writes over its own input.
 */
#include "core/internal.h"
#include "core/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *clt__file_kind(mode_t m) {
  static const struct { mode_t type; const char *name; } kinds[] = {
      {S_IFREG, "a regular file"},    {S_IFDIR, "a directory"}, {S_IFCHR, "a character device"},
      {S_IFBLK, "a block device"},    {S_IFIFO, "a FIFO"},      {S_IFSOCK, "a socket"},
      {S_IFLNK, "a symbolic link"}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if ((m & S_IFMT) == kinds[i].type) return kinds[i].name;
  return "not a regular file";
}

/* The refusal: what path is (via: where its link leads), and that nothing
 * was written. */
static int refuse(const char *what, const char *path, const char *via, mode_t m) {
  char lead[64] = "", link[PATH_MAX + 32] = "";
  if (what) snprintf(lead, sizeof lead, "%s ", what);
  if (via) snprintf(link, sizeof link, "a symbolic link to %s, ", via);
  return clt__error(CLT_EIO, "%s%s is %s%s, not a regular file: cltrain writes its outputs only to regular files (a "
                    "new file renamed over the old one, or appended to), so it wrote nothing; name a regular file",
                    lead, path, link, clt__file_kind(m));
}

int clt__output_resolve(const char *what, const char *path, char **target) {
  struct stat st;
  *target = NULL;
  if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) { /* nothing there (or a directory missing: the write says) */
    *target = clt__strdup(path);
    return *target ? CLT_OK : CLT_ENOMEM;
  }
  if (!S_ISLNK(st.st_mode)) return refuse(what, path, NULL, st.st_mode);
  char *real = realpath(path, NULL);
  if (!real) {
    char lead[64] = "";
    if (what) snprintf(lead, sizeof lead, "%s ", what);
    return clt__error(CLT_EIO, "%s%s is a symbolic link that leads to no file (%s): cltrain follows a link only to "
                      "a regular file that is there; remove the link or name another file", lead, path,
                      strerror(errno));
  }
  if (stat(real, &st) != 0 || !S_ISREG(st.st_mode)) {
    int rc = refuse(what, path, real, st.st_mode);
    free(real);
    return rc;
  }
  *target = real;
  return CLT_OK;
}

int clt__output_regular(const char *what, const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) return CLT_OK;
  return refuse(what, path, NULL, st.st_mode);
}

char *clt__tmp_path(const char *path) {
  char suffix[48];
  snprintf(suffix, sizeof suffix, CLT__TMP_INFIX "%ld", (long)getpid());
  size_t n = strlen(path), ls = strlen(suffix);
  const char *slash = strrchr(path, '/');
  size_t base = n - (size_t)(slash ? slash + 1 - path : 0), keep = n;
  if (base + ls > NAME_MAX) keep = n - (base + ls - NAME_MAX); /* cut the name's end, keep its directory */
  char *tmp = clt__calloc(1, keep + ls + 1);
  if (!tmp) return NULL;
  memcpy(tmp, path, keep);
  memcpy(tmp + keep, suffix, ls + 1);
  return tmp;
}

int clt__output_replace(const char *tmp, const char *target) {
  struct stat st;
  const char *left = lstat(target, &st) == 0 ? "is as it was" : "was not made";
  int rc = clt__output_regular(NULL, target); /* made a device, a FIFO, ... since the write began */
  if (rc < 0) {
    unlink(tmp);
    return rc;
  }
  if (rename(tmp, target) != 0) {
    rc = clt__error(CLT_EIO, "renaming %s to %s failed: %s (%s %s)", tmp, target, strerror(errno), target, left);
    unlink(tmp);
    return rc;
  }
  /* Flush the directory so the rename itself survives a crash. */
  char *dcopy = clt__strdup(target);
  if (!dcopy) return CLT_OK;
  int dfd = open(dirname(dcopy), O_RDONLY), synced = dfd >= 0 ? fsync(dfd) : 0, err = errno;
  if (dfd >= 0) close(dfd);
  free(dcopy);
  /* Some file systems cannot flush a directory (EINVAL): nothing to do. */
  if (dfd >= 0 && synced != 0 && err != EINVAL && err != EROFS)
    return clt__error(CLT_EIO, "%s is written, but flushing its directory failed: %s; the rename may not survive a "
                      "crash", target, strerror(err));
  return CLT_OK;
}

int clt__output_open_append(const char *what, const char *path, FILE **out) {
  struct stat st;
  char *target = NULL;
  *out = NULL;
  /* Looked at before opening: opening a FIFO for writing waits for a
   * reader, and opening a device can do things of its own. */
  int rc = clt__output_resolve(what, path, &target);
  if (rc < 0) return rc;
  int fd = open(target, O_WRONLY | O_APPEND | O_CREAT | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0644);
  free(target);
  if (fd < 0)
    return clt__error(CLT_EIO, "cannot open %s%s%s for appending: %s", what ? what : "", what ? " " : "", path,
                      strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { /* swapped since it was looked at */
    close(fd);
    return refuse(what, path, NULL, st.st_mode);
  }
  fcntl(fd, F_SETFL, O_APPEND); /* blocking writes again */
  if (!(*out = fdopen(fd, "a"))) {
    rc = clt__error(CLT_EIO, "cannot open %s%s%s for appending: %s", what ? what : "", what ? " " : "", path,
                    strerror(errno));
    close(fd);
  }
  return rc;
}

/* path made absolute with its directory's links resolved (malloc'd), for
 * a path that is not there; NULL when its directory is not there either. */
static char *absolute(const char *path) {
  char *copy = clt__strdup(path), *copy2 = clt__strdup(path), *out = NULL;
  if (copy && copy2) {
    char *dir = realpath(dirname(copy), NULL);
    const char *base = basename(copy2);
    if (dir) {
      size_t len = strlen(dir) + strlen(base) + 2;
      if ((out = clt__calloc(1, len))) snprintf(out, len, "%s/%s", strcmp(dir, "/") ? dir : "", base);
      free(dir);
    }
  }
  free(copy), free(copy2);
  return out;
}

int clt__same_file(const char *a, const char *b) {
  struct stat sa, sb;
  int ha = stat(a, &sa) == 0, hb = stat(b, &sb) == 0;
  if (ha && hb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ha != hb) return 0;
  char *x = absolute(a), *y = absolute(b);
  int same = x && y ? strcmp(x, y) == 0 : strcmp(a, b) == 0;
  free(x), free(y);
  return same;
}
