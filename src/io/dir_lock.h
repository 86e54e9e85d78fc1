/*
 * dir_lock.h: one run to a directory. A run that writes into a directory
 * it manages (a checkpoint directory: it removes old checkpoints and the
 * temporary files of saves that died) holds an exclusive flock(2) on
 * DIR/.cltrain-lock, which names its holder (PID, host, since when). The
 * kernel drops the lock when the holder's file is closed or the process
 * dies, however it dies, so a stale lock file is never in the way; the file
 * itself stays. flock, not fcntl: an fcntl lock is the whole process's and
 * any close of the file by the process would drop it, where a flock lock is
 * its open file's, so two trainers of one process conflict too. On NFS,
 * Linux takes flock locks through the server's byte-range locks.
 */
#ifndef CLT_IO_DIR_LOCK_H
#define CLT_IO_DIR_LOCK_H

#define CLT__DIR_LOCK_NAME ".cltrain-lock"

/* Take dir's lock (dir must exist) into *fd, the holder's line written in
 * it. Held by another: CLT_EIO naming dir, the holder (PID and host) and
 * what to do (what: "the checkpoint directory"). A file system that cannot
 * lock: a warning, and CLT_OK with *fd open but unlocked. */
int clt__dir_lock(const char *what, const char *dir, int *fd);
/* Give it back (fd < 0: nothing). */
void clt__dir_unlock(int fd);
/* Whether another holds dir's lock now: CLT_OK (no lock file, or free),
 * else the refusal clt__dir_lock would give. Takes nothing. */
int clt__dir_lock_check(const char *what, const char *dir);

#endif
