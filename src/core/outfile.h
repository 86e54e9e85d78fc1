/*
 * outfile.h: how the library writes a file the user names (CONVENTIONS
 * #18, writes never destroy what they did not make). A file is replaced
 * whole: written to a temporary file beside it, flushed, and renamed over
 * it, and only where there is nothing or a regular file. A symbolic link
 * is followed: the regular file it leads to is replaced and the link
 * stays, as the shell's `>` would. A device, a FIFO, a socket or a
 * directory in the output's place is refused before anything is written,
 * and checked again just before the rename. An input of a command is never
 * one of its outputs: clt__same_file tells whether two paths are one file.
 */
#ifndef CLT_CORE_OUTFILE_H
#define CLT_CORE_OUTFILE_H

#include <stdio.h>
#include <sys/types.h>

/* "a character device", "a FIFO", ...: what a file of mode m is, for
 * messages; "a regular file" for one. */
const char *clt__file_kind(mode_t m);

/* The file a write to path replaces (malloc'd into *target): path itself
 * when nothing or a regular file is there, the file a symbolic link leads
 * to when that is a regular file. Anything else is CLT_EIO naming path and
 * what it is (what, e.g. "the output file", goes in front; may be NULL).
 * Other failures of lstat (a missing directory) are left to the write. */
int clt__output_resolve(const char *what, const char *path, char **target);
/* Just before the rename: path (not followed) is nothing or a regular
 * file, else CLT_EIO as above. */
int clt__output_regular(const char *what, const char *path);
/* The infix of temporary names: "model.safetensors.tmp.1234". */
#define CLT__TMP_INFIX ".tmp."
/* The temporary name a write of path uses (malloc'd, or NULL): path +
 * ".tmp." + the process id, the file name shortened first where that would
 * pass NAME_MAX, so a valid name stays valid. */
char *clt__tmp_path(const char *path);
/* Rename the finished temporary file tmp over target (after
 * clt__output_regular), then flush target's directory so the rename
 * survives a crash. On a failure to rename tmp is removed and target is as
 * it was; a failed flush of the directory leaves target written (the
 * message says so). */
int clt__output_replace(const char *tmp, const char *target);

/* Open path for appending (made if missing), refusing, without writing,
 * what is not a regular file (a symbolic link to one is followed). */
int clt__output_open_append(const char *what, const char *path, FILE **out);

/* Whether a and b are one file: the same device and inode where both
 * exist (a hard link or a symbolic link to the other is the same file),
 * else the same absolute path once the directories' links are resolved. */
int clt__same_file(const char *a, const char *b);

#endif
