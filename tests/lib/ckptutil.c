/* ckptutil.c: shared helpers of the checkpoint suites (see ckptutil.h). */
#include "ckptutil.h"
#include "fashion.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


clt_dataset *cu_data, *cu_small;
const char *cu_mlp = "input 784\nlinear 32\nrelu\nlinear 10\n";
const char *cu_cnn = "input 1 28 28\nconv2d 4 kernel=3 pad=1\nrelu\nmaxpool 2\nflatten\ndropout 0.25\nlinear 10\n";
static char paths[2][64];

int cu_setup(void) {
  if (!fashion_dir()) {
    fprintf(stderr, "SKIP: Fashion-MNIST is not installed (dataset-fashion-mnist)\n");
    return TU_SKIP;
  }
  int rc = tu_setup();
  if (rc) return rc;
  static const int64_t dims[2] = {28, 28};
  for (int k = 0; k < 2; k++) snprintf(paths[k], sizeof paths[k], "/tmp/clt-ckpt-%d-%ld.raw", k, (long)getpid());
  /* the whole set, and its first half */
  rc = tu_fashion_raw("train", CU_NSAMPLES, 2, dims, NULL, NULL, paths[0]);
  if (rc == 0) rc = tu_fashion_raw("train", CU_NSAMPLES / 2, 2, dims, NULL, NULL, paths[1]);
  if (rc == 0 && (clt_dataset_open_raw(paths[0], &cu_data) < 0 || clt_dataset_open_raw(paths[1], &cu_small) < 0)) {
    fprintf(stderr, "%s\n", clt_last_error());
    rc = -1;
  }
  return rc < 0 ? 1 : 0;
}

void cu_teardown(void) {
  clt_dataset_destroy(cu_data);
  clt_dataset_destroy(cu_small);
  for (int k = 0; k < 2; k++) unlink(paths[k]);
  tu_teardown();
}

void cu_options(clt_train_options *o) {
  clt_train_options_defaults(o);
  o->batch = 64;
  o->epochs = 2;
  o->log_every = 0;
  o->check_every = 1;
  o->schedule.lr = 0.05f;
  o->checkpoint_keep = 0;
}

clt_trainer *cu_trainer(const char *text, const char *devices, const clt_train_options *o, clt_model **m) {
  clt_devices *d;
  clt_trainer *t;
  ck_assert_msg(clt_model_parse(text, "ckpt.model", m) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_devices_select(tu_devices, devices, &d) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_create(*m, d, NULL, o, &t) == 0, "%s", clt_last_error());
  clt_devices_destroy(d);
  return t;
}

void cu_done(clt_trainer *t, clt_model *m) {
  clt_trainer_destroy(t);
  clt_model_destroy(m);
}

float *cu_params(clt_trainer *t, const clt_model *m) {
  int64_t n = clt_model_param_count(m);
  float *p = malloc((size_t)n * sizeof *p);
  ck_assert_msg(clt_trainer_params(t, p, n) == 0, "%s", clt_last_error());
  return p;
}

double cu_maxdiff(const float *a, const float *b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
  return worst;
}

void cu_tmpdir(char *out, size_t size) {
  snprintf(out, size, "/tmp/clt-ckpt-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(out));
}

void cu_rmdir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[1200];
  if (!d) return;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  closedir(d);
  rmdir(dir);
}

void cu_copy(const char *from, const char *to, long keep, long flip) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  ck_assert_msg(in && out, "copying %s to %s", from, to);
  long at = 0;
  int c;
  while ((keep < 0 || at < keep) && (c = fgetc(in)) != EOF) {
    if (at == flip) c ^= 1;
    fputc(c, out);
    at++;
  }
  fclose(in);
  ck_assert_int_eq(fclose(out), 0);
}

long cu_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

int cu_exists(const char *path) { return access(path, F_OK) == 0; }

long cu_data_start(const char *path) {
  unsigned char b[8];
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fread(b, 1, 8, f), 8);
  fclose(f);
  long n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
  return 8 + n;
}

static char captured[16384];
static void capture(clt_log_level level, const char *msg, void *user) {
  (void)user;
  if (level > CLT_LOG_WARN) return;
  size_t at = strlen(captured);
  snprintf(captured + at, sizeof captured - at, "%s\n", msg);
}

void cu_capture(int on) {
  if (on) captured[0] = 0;
  clt_log_set(on ? capture : NULL, NULL);
}

const char *cu_captured(void) { return captured; }
