/*
 * dir_lock.c: a directory's lock, DIR/.cltrain-lock (see dir_lock.h): an
 * exclusive flock taken without waiting, and the holder's line, "pid 1234
 * host node1 since 2024-05-20T10:00:00Z", written into the file for the
 * run that is refused.
 */
#include "core/internal.h"
#include "io/dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static char *lock_path(const char *dir) {
  size_t len = strlen(dir) + sizeof CLT__DIR_LOCK_NAME + 1;
  char *p = clt__calloc(1, len);
  if (p) snprintf(p, len, "%s/" CLT__DIR_LOCK_NAME, dir);
  return p;
}

/* The refusal: dir is held, by whom the file says. */
static int held(const char *what, const char *dir, const char *path, int fd) {
  char line[512] = "";
  ssize_t n = pread(fd, line, sizeof line - 1, 0);
  line[n > 0 ? n : 0] = 0;
  line[strcspn(line, "\n")] = 0;
  long pid = 0;
  char host[256] = "", since[64] = "";
  int got = sscanf(line, "pid %ld host %255s since %63s", &pid, host, since);
  char who[400];
  if (got >= 2)
    snprintf(who, sizeof who, "PID %ld on host %s%s%s", pid, host, got == 3 ? ", since " : "", got == 3 ? since : "");
  else
    snprintf(who, sizeof who, "a process that has not written its PID yet");
  return clt__error(CLT_EIO, "%s %s is in use by another run: %s holds its lock %s. Two runs in one directory remove "
                    "and overwrite each other's files; wait for that run to end, or give another directory", what, dir,
                    who, path);
}

int clt__dir_lock(const char *what, const char *dir, int *fd) {
  int rc = CLT_OK;
  char *path = lock_path(dir);
  *fd = -1;
  if (!path) return CLT_ENOMEM;
  int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (f < 0) {
    rc = clt__error(CLT_EIO, "cannot open the lock file %s of %s %s: %s", path, what, dir, strerror(errno));
    goto out;
  }
  /* A few tries, half a second in all: another run's clt__dir_lock_check
   * holds a shared lock for a moment; a run holds it for its whole life. */
  int locked = flock(f, LOCK_EX | LOCK_NB);
  for (int i = 0; locked != 0 && errno == EWOULDBLOCK && i < 10; i++) {
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    locked = flock(f, LOCK_EX | LOCK_NB);
  }
  if (locked != 0) {
    if (errno == EWOULDBLOCK) {
      rc = held(what, dir, path, f);
      close(f);
      goto out;
    }
    clt__log(CLT_LOG_WARN, "%s %s cannot be locked (%s: %s); going on without the lock: make sure no other run "
             "uses it", what, dir, path, strerror(errno));
  }
  char host[256] = "localhost", since[64] = "?", line[400];
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
  int len = snprintf(line, sizeof line, "pid %ld host %s since %s\n", (long)getpid(), host, since);
  /* What it says is for the refused run's message; the lock is what counts. */
  if (ftruncate(f, 0) != 0 || pwrite(f, line, (size_t)len, 0) != len)
    clt__log(CLT_LOG_INFO, "could not write the holder into %s: %s", path, strerror(errno));
  *fd = f;
out:
  free(path);
  return rc;
}

void clt__dir_unlock(int fd) {
  if (fd >= 0) close(fd); /* the lock goes with the file */
}

int clt__dir_lock_check(const char *what, const char *dir) {
  int rc = CLT_OK;
  char *path = lock_path(dir);
  if (!path) return CLT_ENOMEM;
  int f = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (f >= 0) {
    if (flock(f, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) rc = held(what, dir, path, f);
    close(f); /* and a shared lock taken here with it */
  }
  free(path);
  return rc;
}
