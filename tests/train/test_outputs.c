/*
 * test_outputs.c: what the library does with the files a caller names for
 * it to write (CONVENTIONS #18: writes never destroy what they did not
 * make), each with the bad output itself:
 *
 *   - a FIFO or a socket where weights, a checkpoint, an export, a token
 *     shard, a raw dataset, a trace or metrics go, or a symbolic link to
 *     one, or a link that leads nowhere: CLT_EIO naming the path and what is
 *     there, before anything is written, and it is still there, untouched;
 *     the rename helper itself refuses a FIFO made while the file was being
 *     written, and removes its temporary file;
 *   - a symbolic link to a regular file: followed, its file replaced (or
 *     appended to), the link left a link;
 *   - a checkpoint directory a trainer holds: another trainer's fit is
 *     refused naming the holder's PID and host, and gets it once the first
 *     is destroyed; a lock file left by a run that died is no obstacle;
 *   - a metrics write that fails (RLIMIT_FSIZE, as a full disk): the
 *     message gives the system's reason.
 * (tests/cli/outputs.sh makes the same refusals with device nodes.)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ckptutil.h"
#include "core/outfile.h"

static int is_fifo(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* The last error names every (NULL-ended) fragment. */
static void says(int rc, int want, ...) {
  const char *msg = clt_last_error();
  ck_assert_msg(rc == want, "got %s (%s), not %s", clt_status_name(rc), msg, clt_status_name(want));
  va_list ap;
  va_start(ap, want);
  for (const char *frag; (frag = va_arg(ap, const char *));) ck_assert_msg(strstr(msg, frag), "no '%s' in: %s", frag, msg);
  va_end(ap);
}

/* No "NAME.tmp.*" left in dir. */
static void no_temporary(const char *dir) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ls %s | grep -q '\\.tmp\\.'", dir);
  ck_assert_msg(system(cmd) != 0, "a temporary file is left in %s", dir);
}

START_TEST(non_regular_outputs_are_refused) {
  char dir[64], fifo[96], sock[96], link[96], dangling[96], ckpt[96], tmp[128];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  snprintf(sock, sizeof sock, "%s/sock", dir);
  snprintf(link, sizeof link, "%s/link", dir);
  snprintf(dangling, sizeof dangling, "%s/dangling", dir);
  snprintf(ckpt, sizeof ckpt, "%s/ckpt.safetensors", dir);
  ck_assert_int_eq(mkfifo(fifo, 0644), 0);
  ck_assert_int_eq(symlink("fifo", link), 0);
  ck_assert_int_eq(symlink("nowhere", dangling), 0);
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock);
  ck_assert_int_eq(bind(s, (struct sockaddr *)&addr, sizeof addr), 0);

  cu_options(&o);
  o.max_steps = 1;
  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);
  ck_assert_msg(clt_trainer_trace_start(t) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_fit(t, cu_data, NULL) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_save_checkpoint(t, ckpt) == 0, "%s", clt_last_error());
  says(clt_trainer_save_weights(t, fifo), CLT_EIO, fifo, "is a FIFO", "wrote nothing", NULL);
  says(clt_trainer_save_weights(t, sock), CLT_EIO, sock, "is a socket", NULL);
  says(clt_trainer_save_checkpoint(t, fifo), CLT_EIO, fifo, "is a FIFO", NULL);
  says(clt_trainer_save_checkpoint(t, link), CLT_EIO, link, "a symbolic link to", fifo, "a FIFO", NULL);
  says(clt_trainer_save_weights(t, dangling), CLT_EIO, dangling, "leads to no file", NULL);
  says(clt_trainer_trace_save(t, fifo), CLT_EIO, fifo, "is a FIFO", NULL);
  says(clt_checkpoint_export(ckpt, fifo), CLT_EIO, fifo, "is a FIFO", NULL);
  uint32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  says(clt_tokens_write(fifo, tokens, 8, 0), CLT_EIO, fifo, "is a FIFO", NULL);
  says(clt_tokens_write(link, tokens, 8, 0), CLT_EIO, link, "a FIFO", NULL);
  float x[4] = {0};
  int32_t y[1] = {0};
  int64_t dims[1] = {4};
  says(clt_dataset_write_raw(sock, 1, 1, dims, 2, x, y), CLT_EIO, sock, "is a socket", NULL);
  cu_done(t, m);

  /* fit's metrics: refused before the first step (opening a FIFO to write
   * would wait for a reader: this returns at once). */
  o.metrics_path = link;
  t = cu_trainer(cu_mlp, "0", &o, &m);
  says(clt_trainer_fit(t, cu_data, NULL), CLT_EIO, link, "a FIFO", NULL);
  ck_assert_int_eq(clt_trainer_steps_done(t), 0);
  cu_done(t, m);
  says(clt_check_output(fifo, CLT_OUTPUT_FILE), CLT_EIO, fifo, "is a FIFO", NULL);
  says(clt_check_output(sock, CLT_OUTPUT_APPEND), CLT_EIO, sock, "is a socket", NULL);

  /* The rename helper, when a FIFO took the file's place during the write. */
  snprintf(tmp, sizeof tmp, "%s/made.tmp.1", dir);
  FILE *f = fopen(tmp, "w");
  fputs("new", f);
  fclose(f);
  says(clt__output_replace(tmp, fifo), CLT_EIO, fifo, "is a FIFO", NULL);
  ck_assert_msg(access(tmp, F_OK) != 0, "the temporary file %s is left", tmp);

  ck_assert_msg(is_fifo(fifo), "the FIFO was replaced");
  struct stat st;
  ck_assert(lstat(sock, &st) == 0 && S_ISSOCK(st.st_mode));
  ck_assert(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
  ck_assert(lstat(dangling, &st) == 0 && S_ISLNK(st.st_mode));
  no_temporary(dir);
  close(s);
  cu_rmdir(dir);
}
END_TEST

START_TEST(symbolic_links_are_followed) {
  char dir[64], target[96], link[96], metrics[96], mlink[96];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  snprintf(target, sizeof target, "%s/w.safetensors", dir);
  snprintf(link, sizeof link, "%s/latest.safetensors", dir);
  snprintf(metrics, sizeof metrics, "%s/m.jsonl", dir);
  snprintf(mlink, sizeof mlink, "%s/m-link.jsonl", dir);
  FILE *f = fopen(target, "w");
  fputs("old weights", f);
  fclose(f);
  f = fopen(metrics, "w");
  fputs("{\"earlier\":1}\n", f);
  fclose(f);
  ck_assert_int_eq(symlink("w.safetensors", link), 0);
  ck_assert_int_eq(symlink(metrics, mlink), 0);
  cu_options(&o);
  o.max_steps = 1;
  o.log_every = 1;
  o.metrics_path = mlink;
  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);
  ck_assert_msg(clt_trainer_fit(t, cu_data, NULL) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_save_weights(t, link) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_load_weights(t, target) == 0, "the link's file is not the weights: %s", clt_last_error());
  cu_done(t, m);
  struct stat st;
  ck_assert_msg(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced");
  ck_assert_msg(lstat(mlink, &st) == 0 && S_ISLNK(st.st_mode), "the metrics link was replaced");
  ck_assert_int_gt(cu_size(metrics), 20); /* appended to, after what was there */
  f = fopen(metrics, "r");
  char first[64] = "";
  ck_assert_ptr_nonnull(fgets(first, sizeof first, f));
  fclose(f);
  ck_assert_str_eq(first, "{\"earlier\":1}\n");
  no_temporary(dir);
  cu_rmdir(dir);
}
END_TEST

START_TEST(a_checkpoint_directory_has_one_run) {
  char dir[64], lock[96], ckpt[128], host[256] = "", pid[32];
  clt_train_options o;
  clt_model *m1, *m2;
  cu_tmpdir(dir, sizeof dir);
  snprintf(lock, sizeof lock, "%s/.cltrain-lock", dir);
  /* A lock file a dead run left: its words, but no lock. */
  FILE *f = fopen(lock, "w");
  fputs("pid 999999 host elsewhere since 2020-01-01T00:00:00Z\n", f);
  fclose(f);
  cu_options(&o);
  o.max_steps = 2;
  o.checkpoint_dir = dir;
  o.checkpoint_every = 1;
  clt_trainer *t1 = cu_trainer(cu_mlp, "0", &o, &m1);
  ck_assert_msg(clt_trainer_fit(t1, cu_data, NULL) == 0, "a stale lock file stopped the run: %s", clt_last_error());
  clt_checkpoint_path(dir, 2, ckpt, sizeof ckpt);
  long size = cu_size(ckpt);
  ck_assert_int_gt(size, 0);

  /* A second trainer on the same directory, while the first holds it. */
  gethostname(host, sizeof host - 1);
  snprintf(pid, sizeof pid, "PID %ld", (long)getpid());
  o.max_steps = 4;
  clt_trainer *t2 = cu_trainer(cu_mlp, "0", &o, &m2);
  says(clt_trainer_fit(t2, cu_data, NULL), CLT_EIO, dir, "in use by another run", pid, host, lock, NULL);
  ck_assert_int_eq(clt_trainer_steps_done(t2), 0);
  ck_assert_int_eq(cu_size(ckpt), size);
  says(clt_check_output(dir, CLT_OUTPUT_DIR), CLT_EIO, pid, NULL);

  /* Given back with the first trainer. */
  cu_done(t1, m1);
  ck_assert_msg(clt_check_output(dir, CLT_OUTPUT_DIR) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_fit(t2, cu_data, NULL) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t2), 4);
  cu_done(t2, m2);
  cu_rmdir(dir);
}
END_TEST

/* Files may grow to 4 MiB (tests/train/test_checkpoint_files.c says why
 * that leaves the OpenCL compilers room); a metrics file already past it
 * takes no more, as a full disk. */
START_TEST(a_failed_metrics_write_says_why) {
  char dir[64], metrics[96];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  snprintf(metrics, sizeof metrics, "%s/m.jsonl", dir);
  int fd = open(metrics, O_WRONLY | O_CREAT, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (5 << 20)), 0);
  close(fd);
  cu_options(&o);
  o.max_steps = 1;
  o.log_every = 1;
  o.metrics_path = metrics;
  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);
  struct rlimit old, small;
  getrlimit(RLIMIT_FSIZE, &old);
  small = old;
  small.rlim_cur = 4 << 20;
  signal(SIGXFSZ, SIG_IGN);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
  int rc = clt_trainer_fit(t, cu_data, NULL);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, SIG_DFL);
  says(rc, CLT_EIO, "writing metrics to", metrics, strerror(EFBIG), NULL);
  cu_done(t, m);
  cu_rmdir(dir);
}
END_TEST

int main(void) {
  int rc = cu_setup();
  if (rc) return rc;
  Suite *s = suite_create("outputs");
  TCase *tc = tcase_create("outputs");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, non_regular_outputs_are_refused);
  tcase_add_test(tc, symbolic_links_are_followed);
  tcase_add_test(tc, a_checkpoint_directory_has_one_run);
  tcase_add_test(tc, a_failed_metrics_write_says_why);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  cu_teardown();
  return rc;
}
