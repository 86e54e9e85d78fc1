/*
 * cli_paths.c: a command's files seen together. No two of its inputs and
 * outputs may be one file (CONVENTIONS #18: an input is never an output of
 * the same command, and two outputs never write over each other), compared
 * by device and inode where the files exist, by their absolute paths where
 * they do not. And the one output the tool writes itself (the cost model of
 * `bench allreduce --fit`), written whole as the library writes its own.
 * The library's writers follow src/core/outfile.c; the tool is linked to
 * the public API alone, so it keeps its own copy of the little it needs.
 */
#include "config.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* path made absolute with its directory's links resolved (malloc'd), for a
 * path that is not there; NULL when its directory is not there either. */
static char *absolute(const char *path) {
  char *copy = strdup(path), *copy2 = strdup(path), *out = NULL;
  if (copy && copy2) {
    char *dir = realpath(dirname(copy), NULL);
    const char *base = basename(copy2);
    if (dir) {
      size_t len = strlen(dir) + strlen(base) + 2;
      if ((out = malloc(len))) snprintf(out, len, "%s/%s", strcmp(dir, "/") ? dir : "", base);
      free(dir);
    }
  }
  free(copy), free(copy2);
  return out;
}

int cli_same_file(const char *a, const char *b) {
  struct stat sa, sb;
  int ha = stat(a, &sa) == 0, hb = stat(b, &sb) == 0;
  if (ha && hb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ha != hb) return 0;
  char *x = absolute(a), *y = absolute(b);
  int same = x && y ? strcmp(x, y) == 0 : strcmp(a, b) == 0;
  free(x), free(y);
  return same;
}

int cli_check_distinct(const char *cmd, const cli_file *files, int n) {
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      const cli_file *a = &files[i], *b = &files[j];
      if (!a->path || !b->path || (!a->output && !b->output) || !cli_same_file(a->path, b->path)) continue;
      if (a->output && b->output) {
        fprintf(stderr, "cltrain: %s: %s %s and %s %s are one file: each would write over the other; give them "
                        "different files\n", cmd, a->opt, a->path, b->opt, b->path);
      } else {
        const cli_file *out = a->output ? a : b, *in = a->output ? b : a;
        fprintf(stderr, "cltrain: %s: %s %s is %s %s, which this command reads: writing it would replace an input; "
                        "write %s to another file\n", cmd, out->opt, out->path, in->opt, in->path, out->opt);
      }
      return CLI_EXIT_USAGE;
    }
  return CLI_EXIT_OK;
}

int cli_write_whole(const char *path, const char *text) {
  struct stat st;
  char *target = NULL, tmp[PATH_MAX + 32];
  /* As the library writes: a symbolic link's regular file is replaced, and
   * nothing but a regular file (clt_check_output said so before the work). */
  if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) target = realpath(path, NULL);
  else target = strdup(path);
  if (!target || (stat(target, &st) == 0 && !S_ISREG(st.st_mode))) {
    fprintf(stderr, "cltrain: %s is not a regular file (or a link to one); nothing was written\n", path);
    free(target);
    return CLI_EXIT_ERROR;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", target, (long)getpid());
  FILE *f = fopen(tmp, "w");
  int bad = !f || fputs(text, f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0, err = errno;
  if (f && fclose(f) != 0 && !bad) bad = 1, err = errno;
  if (!bad && rename(tmp, target) != 0) bad = 1, err = errno;
  if (bad) {
    fprintf(stderr, "cltrain: writing %s failed: %s (it is as it was)\n", path, strerror(err));
    unlink(tmp);
  }
  free(target);
  return bad ? CLI_EXIT_ERROR : CLI_EXIT_OK;
}
