/*
 * test_checkpoint_files.c: checkpoint files that are not what they should
 * be, and what must then happen:
 *
 *   - truncated files, flipped bits in the data or the header, empty and
 *     foreign files, a weights file, a missing file: refused, naming the
 *     file and the fault (size, CRC32), and the trainer is left as it was;
 *   - a save killed half-way (a stray temporary file, a cut final file) and
 *     damaged newer files: "latest" falls back to the newest whole one and
 *     ignores temporary files; only damaged ones is an error, none a
 *     fresh start (CLT_ENOTFOUND);
 *   - a disk that fills during a save (RLIMIT_FSIZE with SIGXFSZ ignored,
 *     as a full disk answers write with an error): CLT_EIO naming the file,
 *     the previous checkpoint untouched and no temporary file left, from
 *     clt_trainer_save_checkpoint and from fit's periodic saves; a
 *     checkpoint directory that cannot be made;
 *   - another model, optimizer or seed: refused naming what differs;
 *   - weights (or a checkpoint read as weights) holding a tensor the model
 *     lacks, a deeper model's: refused naming the file and the tensor;
 *   - a header whose CRCs are right but whose values no run writes (a
 *     step of 2^63 - 1, epoch sums of 1e308, another generator, a position
 *     that is not its micro-batches, an epoch that is not the sampler's, a
 *     metadata value that is not a string, ...): refused naming the file
 *     and the field;
 *   - --keep rotation, leftovers of killed saves removed, export of the
 *     weights alone, and load_weights reading a checkpoint.
 */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <jansson.h>
#include <math.h>
#include <zlib.h>

#include "ckptutil.h"

/* A checkpoint of the MLP after `steps` SGD steps, at path. */
static void make_checkpoint(const char *text, const clt_train_options *base, int64_t steps, const char *path) {
  clt_model *m;
  clt_train_options o = *base;
  o.max_steps = steps;
  clt_trainer *t = cu_trainer(text, "0", &o, &m);
  ck_assert_msg(clt_trainer_fit(t, cu_data, NULL) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_trainer_save_checkpoint(t, path) == 0, "%s", clt_last_error());
  cu_done(t, m);
}

/* Loading path into a fresh trainer fails with want, and the message has
 * every one of the (NULL-ended) fragments; the trainer is unchanged. */
static void refused(clt_trainer *t, const clt_model *m, const char *path, int want, ...) {
  float *before = cu_params(t, m);
  int64_t P = clt_model_param_count(m);
  int rc = clt_trainer_load_checkpoint(t, path);
  char msg[2048];
  snprintf(msg, sizeof msg, "%s", clt_last_error());
  ck_assert_msg(rc == want, "loading %s gave %s (%s), not %s", path, clt_status_name(rc), msg, clt_status_name(want));
  va_list ap;
  va_start(ap, want);
  for (const char *frag; (frag = va_arg(ap, const char *));)
    ck_assert_msg(strstr(msg, frag), "no '%s' in: %s", frag, msg);
  va_end(ap);
  fprintf(stderr, "refused as it should be: %s\n", msg);
  float *after = cu_params(t, m);
  ck_assert(memcmp(before, after, (size_t)P * 4) == 0);
  ck_assert_int_eq(clt_trainer_steps_done(t), 0);
  clt_sampler_pos pos;
  clt_trainer_position(t, &pos);
  ck_assert(pos.epoch == 0 && pos.step == 0);
  free(before), free(after);
}

/* The offset of text in the file's header (to flip a chosen byte). */
static long header_offset(const char *path, const char *text) {
  long n = cu_data_start(path);
  char *buf = calloc(1, (size_t)n + 1);
  FILE *f = fopen(path, "rb");
  ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  char *at = memmem(buf, (size_t)n, text, strlen(text));
  ck_assert_msg(at != NULL, "no '%s' in the header of %s", text, path);
  long off = at - buf;
  free(buf);
  return off;
}

/* How often text occurs in the file's header. */
static int header_count(const char *path, const char *text) {
  long n = cu_data_start(path);
  char *buf = calloc(1, (size_t)n + 1);
  FILE *f = fopen(path, "rb");
  ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  int count = 0;
  for (char *at = buf; (at = memmem(at, (size_t)(buf + n - at), text, strlen(text))); at++) count++;
  free(buf);
  return count;
}

/* The optimizer state's tensors are "optim/<slot>/<i>.weight", a tensor
 * per parameter tensor and slot of the optimizer's row (src/core/optim.c,
 * libcltrain(3)): for SGD and Adam the names cltrain always wrote, so the
 * files of older versions load. */
START_TEST(state_tensors_are_named_by_the_slots) {
  static const struct {
    clt_optimizer_kind kind;
    const char *slots[3];
  } kinds[] = {{CLT_OPT_SGD, {"momentum"}}, {CLT_OPT_ADAM, {"m", "v"}}, {CLT_OPT_ADAMW, {"m", "v"}},
               {CLT_OPT_LION, {"m"}}};
  /* Every kind is here: a new optimizer says its slots' names. */
  ck_assert_int_eq(sizeof kinds / sizeof kinds[0], CLT_OPT_COUNT);
  char dir[64], path[128], name[64];
  cu_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/state.safetensors", dir);
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    clt_train_options o;
    cu_options(&o);
    clt_optimizer_defaults(kinds[k].kind, &o.optimizer);
    o.schedule.lr = 1e-3f;
    make_checkpoint(cu_mlp, &o, 2, path);
    int params = header_count(path, "\"params/"), slots = 0;
    ck_assert_int_eq(params, 4); /* 0.weight, 0.bias, 2.weight, 2.bias */
    for (; kinds[k].slots[slots]; slots++)
      for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "\"optim/%s/%d.%s\"", kinds[k].slots[slots], i / 2 * 2, i % 2 ? "bias" : "weight");
        ck_assert_msg(header_count(path, name) == 1, "%s: no tensor %s in %s", clt_optimizer_name(kinds[k].kind),
                      name, path);
      }
    ck_assert_msg(header_count(path, "\"optim/") == slots * params, "%s: %d optim/ tensors, not %d",
                  clt_optimizer_name(kinds[k].kind), header_count(path, "\"optim/"), slots * params);
  }
  cu_rmdir(dir);
}
END_TEST

START_TEST(damaged_files_are_refused_and_change_nothing) {
  char dir[64], good[128], bad[128], weights[128];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  snprintf(good, sizeof good, "%s/good.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
  snprintf(weights, sizeof weights, "%s/weights.safetensors", dir);
  cu_options(&o);
  make_checkpoint(cu_mlp, &o, 4, good);
  long size = cu_size(good), data = cu_data_start(good);
  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);

  cu_copy(good, bad, size - 100, -1);
  refused(t, m, bad, CLT_EFORMAT, bad, "truncated", "bytes of tensor data", NULL);
  cu_copy(good, bad, data - 10, -1); /* cut in the header */
  refused(t, m, bad, CLT_EFORMAT, bad, "truncated", NULL);
  cu_copy(good, bad, -1, data + 4000); /* a flipped bit in the data */
  refused(t, m, bad, CLT_EFORMAT, bad, "tensor data fails its CRC32 check", NULL);
  cu_copy(good, bad, -1, header_offset(good, "\"step\":\"4\"") + 8); /* "4" -> "5": still valid JSON */
  refused(t, m, bad, CLT_EFORMAT, bad, "header fails its CRC32 check", NULL);
  cu_copy(good, bad, -1, 12); /* in the JSON's syntax */
  refused(t, m, bad, CLT_EFORMAT, bad, NULL);
  cu_copy(good, bad, -1, 1); /* the header length */
  refused(t, m, bad, CLT_EFORMAT, bad, NULL);
  cu_copy(good, bad, 0, -1);
  refused(t, m, bad, CLT_EFORMAT, bad, "too short", NULL);
  FILE *f = fopen(bad, "w");
  fputs("input 784\nlinear 10\n", f);
  fclose(f);
  refused(t, m, bad, CLT_EFORMAT, bad, NULL);
  unlink(bad);
  refused(t, m, bad, CLT_ENOTFOUND, bad, NULL);
  ck_assert_int_eq(clt_trainer_save_weights(t, weights), 0);
  refused(t, m, weights, CLT_EFORMAT, weights, "weights only", "--weights", NULL);

  ck_assert_msg(clt_trainer_load_checkpoint(t, good) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 4);
  cu_done(t, m);
  cu_rmdir(dir);
}
END_TEST

START_TEST(latest_skips_damaged_and_temporary_files) {
  char dir[64], good[128], path[160], loaded[256];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  cu_options(&o);
  clt_checkpoint_path(dir, 4, good, sizeof good);
  make_checkpoint(cu_mlp, &o, 4, good);
  long size = cu_size(good);
  /* Newer ones: a flipped bit, one cut short (not written by us: ours are
   * renamed only once whole), and the temporary file of a killed save. */
  clt_checkpoint_path(dir, 8, path, sizeof path);
  cu_copy(good, path, -1, size - 7);
  clt_checkpoint_path(dir, 12, path, sizeof path);
  cu_copy(good, path, size / 2, -1);
  snprintf(path, sizeof path, "%s/ckpt-0000000016.safetensors.tmp.4242", dir);
  cu_copy(good, path, size / 3, -1);
  snprintf(path, sizeof path, "%s/notes.txt", dir);
  cu_copy(good, path, 10, -1);

  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);
  cu_capture(1);
  int rc = clt_trainer_resume_latest(t, dir, loaded, sizeof loaded);
  cu_capture(0);
  ck_assert_msg(rc == 0, "%s", clt_last_error());
  ck_assert_str_eq(loaded, good);
  ck_assert_int_eq(clt_trainer_steps_done(t), 4);
  const char *log = cu_captured();
  fprintf(stderr, "warnings:\n%s", log);
  ck_assert_msg(strstr(log, "ckpt-0000000008.safetensors") && strstr(log, "CRC32"), "%s", log);
  ck_assert_msg(strstr(log, "ckpt-0000000012.safetensors") && strstr(log, "truncated"), "%s", log);
  ck_assert_msg(!strstr(log, ".tmp.") && !strstr(log, "notes"), "%s", log);
  cu_done(t, m);

  /* Only damaged ones: an error naming the directory, not a fresh start. */
  unlink(good);
  t = cu_trainer(cu_mlp, "0", &o, &m);
  cu_capture(1);
  rc = clt_trainer_resume_latest(t, dir, loaded, sizeof loaded);
  cu_capture(0);
  ck_assert_int_eq(rc, CLT_EFORMAT);
  ck_assert_msg(strstr(clt_last_error(), "none of the 2 checkpoints") && strstr(clt_last_error(), dir), "%s",
                clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 0);
  cu_rmdir(dir);
  /* None at all, or no directory: CLT_ENOTFOUND, the caller's fresh start. */
  ck_assert_int_eq(clt_trainer_resume_latest(t, dir, loaded, sizeof loaded), CLT_ENOTFOUND);
  ck_assert_msg(strstr(clt_last_error(), dir), "%s", clt_last_error());
  cu_tmpdir(dir, sizeof dir);
  ck_assert_int_eq(clt_trainer_resume_latest(t, dir, NULL, 0), CLT_ENOTFOUND);
  ck_assert_msg(strstr(clt_last_error(), "holds no checkpoint"), "%s", clt_last_error());
  cu_done(t, m);
  cu_rmdir(dir);
}
END_TEST

/* Files in dir whose names contain text. */
static int count_files(const char *dir, const char *text) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) n += strstr(e->d_name, text) != NULL;
  closedir(d);
  return n;
}

static void read_all(const char *path, char **buf, long *n) {
  *n = cu_size(path);
  *buf = malloc((size_t)*n);
  FILE *f = fopen(path, "rb");
  ck_assert_int_eq(fread(*buf, 1, (size_t)*n, f), (size_t)*n);
  fclose(f);
}

/* Files may grow to 4 MiB, and writing past that fails with EFBIG (the
 * signal that would end the process is ignored): a checkpoint of `wide`,
 * 6.5 MB, does not fit, as on a full disk. The OpenCL compilers go on
 * writing their smaller files (PoCL's are 250 KB at most), so fit can run
 * under the limit; with a limit below those, LLVM ends the process. */
#define FILE_LIMIT (4 << 20)
static const char *wide = "input 784\nlinear 1024\nrelu\nlinear 10\n";
static struct rlimit old_limit;
static void disk_full(int on) {
  if (on) {
    struct rlimit small;
    getrlimit(RLIMIT_FSIZE, &old_limit);
    small = old_limit;
    small.rlim_cur = FILE_LIMIT;
    signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
  } else {
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
    signal(SIGXFSZ, SIG_DFL);
  }
}

START_TEST(a_full_disk_leaves_the_previous_checkpoint) {
  char dir[64], path[128], *before, *after;
  long nb, na;
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  cu_options(&o);
  clt_checkpoint_path(dir, 2, path, sizeof path);
  make_checkpoint(wide, &o, 2, path);
  read_all(path, &before, &nb);
  ck_assert_int_gt(nb, FILE_LIMIT);

  /* A direct save over it. */
  o.max_steps = 4;
  clt_trainer *t = cu_trainer(wide, "0", &o, &m);
  ck_assert_int_eq(clt_trainer_fit(t, cu_data, NULL), 0);
  disk_full(1);
  int rc = clt_trainer_save_checkpoint(t, path);
  disk_full(0);
  ck_assert_int_eq(rc, CLT_EIO);
  fprintf(stderr, "full disk: %s\n", clt_last_error());
  ck_assert_msg(strstr(clt_last_error(), path) && strstr(clt_last_error(), "File too large") &&
                strstr(clt_last_error(), "is as it was"), "%s", clt_last_error());
  cu_done(t, m);
  read_all(path, &after, &na);
  ck_assert(na == nb && memcmp(before, after, (size_t)nb) == 0);
  free(after);
  ck_assert_int_eq(count_files(dir, ".tmp."), 0);

  /* fit's periodic save (step 4) fails the same way, and fit with it. */
  o.checkpoint_dir = dir;
  o.checkpoint_every = 2;
  t = cu_trainer(wide, "0", &o, &m);
  ck_assert_int_eq(clt_trainer_load_checkpoint(t, path), 0);
  disk_full(1);
  rc = clt_trainer_fit(t, cu_data, NULL);
  disk_full(0);
  ck_assert_int_eq(rc, CLT_EIO);
  ck_assert_msg(strstr(clt_last_error(), "ckpt-0000000004.safetensors") && strstr(clt_last_error(), "File too large"),
                "%s", clt_last_error());
  cu_done(t, m);
  read_all(path, &after, &na);
  ck_assert(na == nb && memcmp(before, after, (size_t)nb) == 0);
  ck_assert_int_eq(count_files(dir, "ckpt-"), 1);
  free(before), free(after);

  /* A directory that cannot be made (a file is in the way): found before
   * the first step, not at the first save. */
  snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/ckpt-0000000002.safetensors/sub");
  t = cu_trainer(cu_mlp, "0", &o, &m);
  ck_assert_int_eq(clt_trainer_fit(t, cu_data, NULL), CLT_EIO);
  ck_assert_msg(strstr(clt_last_error(), "cannot be made") && strstr(clt_last_error(), "is not a directory"), "%s",
                clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 0);
  cu_done(t, m);
  *strstr(dir, "/ckpt-") = 0;
  cu_rmdir(dir);
}
END_TEST

START_TEST(another_model_optimizer_or_seed_is_named) {
  char dir[64], path[128], nomom[128], loaded[256];
  clt_train_options o, p;
  clt_model *m;
  clt_trainer *t;
  cu_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/mlp32.safetensors", dir);
  snprintf(nomom, sizeof nomom, "%s/nomomentum.safetensors", dir);
  cu_options(&o);
  make_checkpoint(cu_mlp, &o, 2, path);

  t = cu_trainer("input 784\nlinear 16\nrelu\nlinear 10\n", "0", &o, &m);
  refused(t, m, path, CLT_ESHAPE, path, "'params/0.weight'", "(32, 784) in the file", "(16, 784) in the model",
          "line 2", "'linear 32'", "'linear 16'", NULL);
  cu_done(t, m);
  t = cu_trainer("input 784\nlinear 32\nrelu\nlinear 10\nlayernorm\n", "0", &o, &m);
  refused(t, m, path, CLT_ESHAPE, path, "no tensor 'params/3.weight'", NULL);
  cu_done(t, m);

  p = o;
  clt_optimizer_defaults(CLT_OPT_ADAM, &p.optimizer);
  t = cu_trainer(cu_mlp, "0", &p, &m);
  refused(t, m, path, CLT_EMISMATCH, path, "sgd optimizer", "uses adam", "--optimizer sgd", NULL);
  cu_done(t, m);
  p = o;
  p.seed = 7;
  t = cu_trainer(cu_mlp, "0", &p, &m);
  refused(t, m, path, CLT_EMISMATCH, path, "seed 42", "--seed 42", NULL);
  cu_done(t, m);

  /* Momentum: a run without it leaves the saved buffer out; a run with it
   * cannot start from a file that has none. */
  p = o;
  p.optimizer.momentum = 0;
  t = cu_trainer(cu_mlp, "0", &p, &m);
  cu_capture(1);
  ck_assert_msg(clt_trainer_load_checkpoint(t, path) == 0, "%s", clt_last_error());
  cu_capture(0);
  ck_assert_msg(strstr(cu_captured(), "momentum"), "%s", cu_captured());
  ck_assert_int_eq(clt_trainer_save_checkpoint(t, nomom), 0);
  cu_done(t, m);
  t = cu_trainer(cu_mlp, "0", &o, &m);
  refused(t, m, nomom, CLT_EMISMATCH, nomom, "no sgd optimizer state", "'optim/momentum/0.weight'", NULL);
  cu_done(t, m);

  /* Parameters that fit a spec that differs: loaded, with a warning. */
  t = cu_trainer("input 784\nlinear 32\ntanh\nlinear 10\n", "0", &o, &m);
  cu_capture(1);
  ck_assert_msg(clt_trainer_load_checkpoint(t, path) == 0, "%s", clt_last_error());
  cu_capture(0);
  ck_assert_msg(strstr(cu_captured(), "'relu'") && strstr(cu_captured(), "'tanh'"), "%s", cu_captured());
  cu_done(t, m);

  /* A whole checkpoint of another model ends the search for the latest:
   * falling back would hide the mistake. */
  char older[160], newer[160];
  clt_checkpoint_path(dir, 2, older, sizeof older);
  clt_checkpoint_path(dir, 4, newer, sizeof newer);
  make_checkpoint("input 784\nlinear 16\nrelu\nlinear 10\n", &o, 2, older);
  make_checkpoint(cu_mlp, &o, 4, newer);
  t = cu_trainer("input 784\nlinear 16\nrelu\nlinear 10\n", "0", &o, &m);
  ck_assert_int_eq(clt_trainer_resume_latest(t, dir, loaded, sizeof loaded), CLT_ESHAPE);
  ck_assert_msg(strstr(clt_last_error(), newer), "%s", clt_last_error());
  ck_assert_int_eq(clt_trainer_steps_done(t), 0);
  cu_done(t, m);
  cu_rmdir(dir);
}
END_TEST

START_TEST(keep_rotates_and_export_writes_the_weights) {
  char dir[64], path[160], weights[160];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ckpt-0000000001.safetensors.tmp.99999", dir); /* a killed save's */
  cu_copy("/dev/null", path, -1, -1);
  cu_options(&o);
  o.max_steps = 8;
  o.checkpoint_dir = dir;
  o.checkpoint_every = 2;
  o.checkpoint_keep = 2;
  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);
  ck_assert_int_eq(clt_trainer_fit(t, cu_data, NULL), 0);
  float *trained = cu_params(t, m);
  int64_t P = clt_model_param_count(m);
  cu_done(t, m);
  ck_assert_int_eq(count_files(dir, ".tmp."), 0);
  ck_assert_int_eq(count_files(dir, "ckpt-"), 2);
  ck_assert_int_eq(count_files(dir, "ckpt-0000000006.safetensors"), 1);
  ck_assert_int_eq(count_files(dir, "ckpt-0000000008.safetensors"), 1);

  clt_checkpoint_path(dir, 8, path, sizeof path);
  snprintf(weights, sizeof weights, "%s/weights.safetensors", dir);
  ck_assert_msg(clt_checkpoint_export(path, weights) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_checkpoint_export(path, path), CLT_EINVAL);
  ck_assert_int_eq(clt_checkpoint_export(weights, "/tmp/never-written.safetensors"), CLT_EFORMAT);
  ck_assert(cu_exists(path));
  ck_assert_int_lt(cu_size(weights), cu_size(path) / 2 + 4096); /* no momentum in it */
  /* The exported weights and the checkpoint itself give the parameters. */
  const char *from[] = {weights, path};
  for (int i = 0; i < 2; i++) {
    cu_options(&o);
    t = cu_trainer(cu_mlp, "0", &o, &m);
    ck_assert_msg(clt_trainer_load_weights(t, from[i]) == 0, "%s", clt_last_error());
    float *p = cu_params(t, m);
    ck_assert(memcmp(p, trained, (size_t)P * 4) == 0);
    free(p);
    cu_done(t, m);
  }
  free(trained);
  cu_rmdir(dir);
}
END_TEST

/* ---- file surgery that keeps the CRCs right --------------------------------
 * rewrite() reads a checkpoint, lets edit() change its JSON header and its
 * data section, then writes it back as the library would: the data's size
 * and CRC32 recomputed, the header's CRC32 (over the compact, key-sorted
 * header without itself) recomputed unless drop_header_crc, the header
 * padded to 8 bytes. So the file is refused for the edit, not as damage. */
typedef void (*edit_fn)(json_t *header, unsigned char **data, size_t *len, const void *arg);

static void rewrite(const char *from, const char *to, edit_fn edit, const void *arg, int drop_header_crc) {
  char *buf;
  long n;
  read_all(from, &buf, &n);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | (unsigned char)buf[i];
  json_error_t jerr;
  json_t *h = json_loadb(buf + 8, (size_t)hlen, 0, &jerr);
  ck_assert_msg(h != NULL, "%s: %s", from, jerr.text);
  size_t len = (size_t)n - 8 - (size_t)hlen;
  unsigned char *data = malloc(len + 1);
  memcpy(data, buf + 8 + hlen, len);
  free(buf);
  edit(h, &data, &len, arg);
  json_t *meta = json_object_get(h, "__metadata__");
  char num[32], hex[16];
  snprintf(num, sizeof num, "%zu", len);
  snprintf(hex, sizeof hex, "%08lx", crc32(0, data, (uInt)len));
  json_object_set_new(meta, "data_bytes", json_string(num));
  json_object_set_new(meta, "data_crc32", json_string(hex));
  json_object_del(meta, "header_crc32");
  char *text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
  if (!drop_header_crc) {
    snprintf(hex, sizeof hex, "%08lx", crc32(0, (const Bytef *)text, (uInt)strlen(text)));
    free(text);
    json_object_set_new(meta, "header_crc32", json_string(hex));
    text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
  }
  size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
  FILE *f = fopen(to, "wb");
  for (int i = 0; i < 8; i++) fputc((int)((uint64_t)padded >> (8 * i) & 255), f);
  fputs(text, f);
  for (size_t i = tl; i < padded; i++) fputc(' ', f);
  fwrite(data, 1, len, f);
  fclose(f);
  free(text), free(data);
  json_decref(h);
}

/* Where element `index` of tensor `name` is in the data section. */
static size_t element_offset(json_t *h, const char *name, size_t index) {
  json_t *t = json_object_get(h, name);
  ck_assert_msg(t != NULL, "no tensor %s", name);
  return (size_t)json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0)) + 4 * index;
}

typedef struct poke {
  const char *tensor;
  size_t index;
  float value;
} poke;

static void put_value(json_t *h, unsigned char **data, size_t *len, const void *arg) {
  const poke *p = arg;
  (void)len;
  memcpy(*data + element_offset(h, p->tensor, p->index), &p->value, 4);
}

/* A NaN or Inf in the parameters or the optimizer state, in a file whose
 * CRCs are right (a run that diverged, a file from elsewhere): refused on
 * load, naming the tensor and the first bad index, as a checkpoint and as
 * --weights; the trainer is left as it was. */
START_TEST(non_finite_values_are_refused_on_load) {
  char dir[64], good[128], bad[128];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  snprintf(good, sizeof good, "%s/good.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/nan.safetensors", dir);
  cu_options(&o);
  make_checkpoint(cu_mlp, &o, 2, good);
  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);

  poke nan_param = {"params/0.weight", 3 * 784 + 5, NAN};
  rewrite(good, bad, put_value, &nan_param, 0);
  refused(t, m, bad, CLT_ENONFINITE, bad, "tensor 'params/0.weight'", "NaN", "index [3, 5]", NULL);
  ck_assert_int_eq(clt_trainer_load_weights(t, bad), CLT_ENONFINITE);
  ck_assert_msg(strstr(clt_last_error(), "'params/0.weight'") && strstr(clt_last_error(), "[3, 5]"), "%s",
                clt_last_error());
  poke inf_state = {"optim/momentum/2.bias", 7, -INFINITY};
  rewrite(good, bad, put_value, &inf_state, 0);
  refused(t, m, bad, CLT_ENONFINITE, bad, "tensor 'optim/momentum/2.bias'", "-Inf", "index [7]", NULL);

  ck_assert_msg(clt_trainer_load_checkpoint(t, good) == 0, "%s", clt_last_error());
  cu_done(t, m);
  cu_rmdir(dir);
}
END_TEST

/* One more tensor, 4 bytes at the end of the data. */
static void add_tensor(json_t *h, unsigned char **data, size_t *len, const void *arg) {
  *data = realloc(*data, *len + 4);
  memset(*data + *len, 0, 4);
  json_object_set_new(h, arg, json_pack("{s:s, s:[i], s:[I, I]}", "dtype", "F32", "shape", 1, "data_offsets",
                                        (json_int_t)*len, (json_int_t)*len + 4));
  *len += 4;
}

/* params/2.bias (10 floats) made to cover the first bytes of params/2.weight. */
static void overlap(json_t *h, unsigned char **data, size_t *len, const void *arg) {
  (void)data, (void)len, (void)arg;
  json_int_t lo = (json_int_t)element_offset(h, "params/2.weight", 0);
  json_object_set_new(json_object_get(h, "params/2.bias"), "data_offsets", json_pack("[I, I]", lo, lo + 40));
}

static void no_edit(json_t *h, unsigned char **data, size_t *len, const void *arg) {
  (void)h, (void)data, (void)len, (void)arg;
}

/* The metadata "sampler_position" with one member set to a value. */
typedef struct position_edit {
  const char *key;
  json_int_t value;
} position_edit;

static void set_position(json_t *h, unsigned char **data, size_t *len, const void *arg) {
  const position_edit *e = arg;
  json_t *meta = json_object_get(h, "__metadata__");
  (void)data, (void)len;
  json_t *pos = json_loads(json_string_value(json_object_get(meta, "sampler_position")), 0, NULL);
  ck_assert(pos != NULL);
  json_object_set_new(pos, e->key, json_integer(e->value));
  char *text = json_dumps(pos, JSON_COMPACT);
  json_object_set_new(meta, "sampler_position", json_string(text));
  free(text);
  json_decref(pos);
}

/* Positions no run writes: an epoch far beyond the steps done (which
 * would train nothing and exit 0), and a step whose product with the
 * micro-batch overflows int64 (or passes the training set). */
START_TEST(impossible_positions_are_refused) {
  char dir[64], good[128], bad[128];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  snprintf(good, sizeof good, "%s/good.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
  cu_options(&o);
  make_checkpoint(cu_mlp, &o, 2, good);
  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);
  position_edit epoch = {"epoch", 999999}, overflow = {"step", (json_int_t)1 << 62}, past = {"step", 9};
  rewrite(good, bad, set_position, &epoch, 0);
  refused(t, m, bad, CLT_EFORMAT, bad, "epoch 1000000", "after 2 steps", NULL);
  rewrite(good, bad, set_position, &overflow, 0);
  refused(t, m, bad, CLT_EFORMAT, bad, "4611686018427387904 micro-batches of 64", "past the 512", NULL);
  rewrite(good, bad, set_position, &past, 0); /* 9 x 64 > 512 */
  refused(t, m, bad, CLT_EFORMAT, bad, "9 micro-batches", NULL);
  cu_done(t, m);
  cu_rmdir(dir);
}
END_TEST

/* Files whose CRCs are right but whose contents are not what cltrain
 * wrote: a tensor too many (the "and no more" of the model's tensors),
 * two tensors sharing bytes, and a checkpoint without its header CRC32
 * (which would otherwise be read unchecked). */
START_TEST(unexpected_contents_are_refused) {
  char dir[64], good[128], bad[128];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  snprintf(good, sizeof good, "%s/good.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
  cu_options(&o);
  make_checkpoint(cu_mlp, &o, 2, good);
  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);

  rewrite(good, bad, add_tensor, "params/9.weight", 0);
  refused(t, m, bad, CLT_EFORMAT, bad, "tensor 'params/9.weight'", "neither a parameter", NULL);
  rewrite(good, bad, add_tensor, "optim/m/0.weight", 0); /* adam's state in an sgd checkpoint */
  refused(t, m, bad, CLT_EFORMAT, bad, "tensor 'optim/m/0.weight'", "sgd", NULL);
  rewrite(good, bad, overlap, NULL, 0);
  refused(t, m, bad, CLT_EFORMAT, bad, "'params/2.weight'", "'params/2.bias'", "overlap", NULL);
  rewrite(good, bad, no_edit, NULL, 1);
  refused(t, m, bad, CLT_EFORMAT, bad, "'header_crc32' is missing", NULL);
  rewrite(good, bad, no_edit, NULL, 0); /* the surgery itself changes nothing that matters */
  ck_assert_msg(clt_trainer_load_checkpoint(t, bad) == 0, "%s", clt_last_error());
  cu_done(t, m);
  cu_rmdir(dir);
}
END_TEST

/* load_weights on rank 0 of path fails with want, every fragment in the
 * message, and the parameters are as they were. */
static void weights_refused(clt_trainer *t, const clt_model *m, const char *path, int want, ...) {
  float *before = cu_params(t, m);
  int rc = clt_trainer_load_weights(t, path);
  char msg[2048];
  snprintf(msg, sizeof msg, "%s", clt_last_error());
  ck_assert_msg(rc == want, "load_weights(%s) gave %s (%s), not %s", path, clt_status_name(rc), msg,
                clt_status_name(want));
  va_list ap;
  va_start(ap, want);
  for (const char *frag; (frag = va_arg(ap, const char *));)
    ck_assert_msg(strstr(msg, frag), "no '%s' in: %s", frag, msg);
  va_end(ap);
  fprintf(stderr, "refused as it should be: %s\n", msg);
  float *after = cu_params(t, m);
  ck_assert(memcmp(before, after, (size_t)clt_model_param_count(m) * 4) == 0);
  free(before), free(after);
}

/* Weights of a model with more tensors than this one's: every tensor of
 * the 2-layer MLP is in the 3-layer MLP's file with its shape, so they
 * loaded and evaluated as a model nobody trained. Refused (as --weights,
 * eval, generate and hf export read them), naming the file and the first
 * tensor the model lacks; so is a checkpoint with one tensor more, read as
 * weights. A spec that differs while every tensor fits (another
 * activation) loads with a warning, as a checkpoint does. */
START_TEST(weights_of_another_model_are_refused) {
  static const char *deeper = "input 784\nlinear 32\nrelu\nlinear 10\nrelu\nlinear 10\n";
  static const char *tanh_mlp = "input 784\nlinear 32\ntanh\nlinear 10\n";
  char dir[64], path[128], ckpt[128], bad[128];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  cu_options(&o);
  snprintf(path, sizeof path, "%s/deeper.safetensors", dir);
  snprintf(ckpt, sizeof ckpt, "%s/ckpt.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/more.safetensors", dir);
  clt_trainer *t = cu_trainer(deeper, "0", &o, &m);
  ck_assert_int_eq(clt_trainer_save_weights(t, path), 0);
  cu_done(t, m);
  make_checkpoint(cu_mlp, &o, 2, ckpt);

  t = cu_trainer(cu_mlp, "0", &o, &m);
  weights_refused(t, m, path, CLT_ESHAPE, path, "tensor '4.bias' (and 1 more)", "the model ckpt.model does not have",
                  "ckpt.model ends before line 5 of the file's spec ('relu')", NULL);
  rewrite(ckpt, bad, add_tensor, "params/4.weight", 0);
  weights_refused(t, m, bad, CLT_ESHAPE, bad, "tensor 'params/4.weight'", NULL);
  rewrite(ckpt, bad, add_tensor, "optim/momentum/3.weight", 0); /* state of a layer it does not have */
  weights_refused(t, m, bad, CLT_ESHAPE, bad, "tensor 'optim/momentum/3.weight'", NULL);
  rewrite(ckpt, bad, add_tensor, "00.weight", 0); /* not "0.weight" */
  weights_refused(t, m, bad, CLT_ESHAPE, bad, "tensor '00.weight'", NULL);
  ck_assert_msg(clt_trainer_load_weights(t, ckpt) == 0, "%s", clt_last_error()); /* its optimizer state aside */
  cu_done(t, m);

  t = cu_trainer(tanh_mlp, "0", &o, &m);
  cu_capture(1);
  ck_assert_msg(clt_trainer_load_weights(t, ckpt) == 0, "%s", clt_last_error());
  cu_capture(0);
  ck_assert_msg(strstr(cu_captured(), "'relu'") && strstr(cu_captured(), "'tanh'"), "%s", cu_captured());
  cu_done(t, m);
  cu_rmdir(dir);
}
END_TEST

/* A metadata value of the checkpoint set to a string. */
typedef struct meta_edit {
  const char *key, *value;
} meta_edit;

static void set_meta(json_t *h, unsigned char **data, size_t *len, const void *arg) {
  const meta_edit *e = arg;
  (void)data, (void)len;
  json_object_set_new(json_object_get(h, "__metadata__"), e->key, json_string(e->value));
}

/* One member of a JSON metadata value set to a JSON value (given as text). */
typedef struct member_edit {
  const char *key, *member, *json;
} member_edit;

static void set_member(json_t *h, unsigned char **data, size_t *len, const void *arg) {
  const member_edit *e = arg;
  json_t *meta = json_object_get(h, "__metadata__");
  (void)data, (void)len;
  json_t *o = json_loads(json_string_value(json_object_get(meta, e->key)), 0, NULL);
  ck_assert_msg(o != NULL, "no metadata '%s'", e->key);
  json_t *v = json_loads(e->json, JSON_DECODE_ANY, NULL);
  ck_assert_msg(v != NULL, "bad JSON %s", e->json);
  json_object_set_new(o, e->member, v);
  char *text = json_dumps(o, JSON_COMPACT);
  json_object_set_new(meta, e->key, json_string(text));
  free(text);
  json_decref(o);
}

/* A metadata value replaced by JSON that is not a string. */
static void unstring_meta(json_t *h, unsigned char **data, size_t *len, const void *arg) {
  json_t *meta = json_object_get(h, "__metadata__");
  (void)data, (void)len;
  json_t *v = json_loads(json_string_value(json_object_get(meta, arg)), JSON_DECODE_ANY, NULL);
  ck_assert(v != NULL);
  json_object_set_new(meta, arg, v);
}

/* Headers whose CRCs are right (the edit recomputes them) but whose values
 * no run writes: each refused with CLT_EFORMAT naming the file and the
 * field, the trainer left as it was; export refuses them too. Before,
 * a step of 2^63 - 1 trained nothing and exited 0, and epoch sums of 1e308
 * reported loss 1.0000 and accuracy 1.0000. The checkpoint: 2 steps of 64
 * of an epoch of 512 samples (8 steps), SGD with momentum, fp32. */
START_TEST(impossible_header_values_are_refused) {
  static const struct {
    int in_json; /* 0: a top-level value (key = value); 1: a member of a JSON value */
    const char *key, *member, *value, *frag1, *frag2;
  } cases[] = {
      {0, "step", NULL, "9223372036854775807", "'step' is 9223372036854775807", "outside"},
      {0, "step", NULL, "1", "counts 2 steps in the epoch", "'step' is 1"},
      {0, "epoch", NULL, "3", "'epoch' is 3", "sampler position's epoch is 0"},
      {0, "param_count", NULL, "99999999999999999", "'param_count'", "outside"},
      {0, "loss_scale", NULL, "0.5", "'loss_scale' is 0.5", "fp32 run's is 1"},
      {0, "loss_scale", NULL, "1e39", "'loss_scale'", "a float holds"},
      {1, "epoch_progress", "loss_sum", "1e308", "a loss of 1e+308 over 128 labels", NULL},
      {1, "epoch_progress", "samples", "1e308", "'epoch_progress' sums 1e+308 labels", "512 samples"},
      {1, "epoch_progress", "correct", "1e308", "'epoch_progress' counts 1e+308 labels right", NULL},
      {1, "epoch_progress", "loss_sum", "-1", "a loss of -1", NULL},
      {1, "epoch_progress", "samples", "127.5", "sums 127.5 labels", NULL},
      {1, "epoch_progress", "steps", "9", "counts 9 steps in the epoch", NULL},
      {1, "rng", "generator", "\"mt19937\"", "the generator 'mt19937'", "philox4x32-10"},
      {1, "rng", "seed", "\"-42\"", "the seed '-42'", NULL},
      {1, "rng", "dropout_step", "1", "counts 1 micro-batches", NULL},
      {1, "sampler_position", "samples_in_epoch", "100", "says 100 samples into the epoch", "are 128"},
      {1, "sampler_position", "micro_batch", "32", "says 128 samples into the epoch", "2 micro-batches of 32 are 64"},
      {1, "sampler_position", "train_samples", "0", "past the 0 training samples", NULL},
      {1, "training", "batch", "128", "micro-batch is 64 samples", "batch of 128 in 1 micro-batches"},
      {1, "training", "shares", "[63]", "shares add up to 63", "micro-batch's 64"},
      {1, "training", "shares", "[32, 32]", "the shares of its 1 replicas", NULL},
      {1, "training", "balance", "\"fair\"", "the balance 'fair'", NULL},
      {1, "training", "ranks", "0", "'training' member 'ranks' is 0", "outside"},
      {1, "optimizer", "kind", "\"adagrad\"", "'optimizer'", "adagrad"},
      {1, "optimizer", "momentum", "1.5", "'optimizer' holds settings no run trains with", "momentum"},
      {1, "optimizer", "lr", "0", "'optimizer' has lr 0", NULL},
      {1, "optimizer", "schedule", "\"linear\"", "'optimizer'", "linear"},
      {1, "optimizer", "nesterov", "\"no\"", "'optimizer' lacks true or false 'nesterov'", NULL},
      {1, "loss_scaling", "precision", "\"fp8\"", "the precision 'fp8'", NULL},
      {1, "loss_scaling", "skipped", "3", "counts 3 skipped steps", "'step' is 2"},
      {1, "run", "id", "\"not-hex\"", "the id 'not-hex'", "16 hex digits"},
      {1, "run", "branched_from", "5", "started at step 5", "after its 'step' 2"},
  };
  char dir[64], good[128], bad[128], out[160];
  clt_train_options o;
  clt_model *m;
  cu_tmpdir(dir, sizeof dir);
  snprintf(good, sizeof good, "%s/good.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
  snprintf(out, sizeof out, "%s/weights.safetensors", dir);
  cu_options(&o);
  make_checkpoint(cu_mlp, &o, 2, good);
  clt_trainer *t = cu_trainer(cu_mlp, "0", &o, &m);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].in_json) {
      member_edit e = {cases[i].key, cases[i].member, cases[i].value};
      rewrite(good, bad, set_member, &e, 0);
    } else {
      meta_edit e = {cases[i].key, cases[i].value};
      rewrite(good, bad, set_meta, &e, 0);
    }
    refused(t, m, bad, CLT_EFORMAT, bad, cases[i].frag1, cases[i].frag2, NULL);
  }
  /* A metadata value that is JSON, not the string of JSON safetensors
   * metadata holds: it read as missing, and 'run' as a file older than
   * the record. */
  rewrite(good, bad, unstring_meta, "run", 0);
  refused(t, m, bad, CLT_EFORMAT, bad, "the metadata 'run' is an object, not a string", NULL);
  rewrite(good, bad, unstring_meta, "step", 0);
  refused(t, m, bad, CLT_EFORMAT, bad, "the metadata 'step' is a number, not a string", NULL);
  /* export writes no weights of an edited file */
  meta_edit step = {"step", "9223372036854775807"};
  rewrite(good, bad, set_meta, &step, 0);
  ck_assert_int_eq(clt_checkpoint_export(bad, out), CLT_EFORMAT);
  ck_assert_msg(strstr(clt_last_error(), "'step'"), "%s", clt_last_error());
  ck_assert(!cu_exists(out));
  ck_assert_msg(clt_trainer_load_checkpoint(t, good) == 0, "%s", clt_last_error());
  cu_done(t, m);
  cu_rmdir(dir);
}
END_TEST

int main(void) {
  int rc = cu_setup();
  if (rc) return rc;
  Suite *s = suite_create("checkpoint files");
  TCase *tc = tcase_create("files");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, state_tensors_are_named_by_the_slots);
  tcase_add_test(tc, damaged_files_are_refused_and_change_nothing);
  tcase_add_test(tc, latest_skips_damaged_and_temporary_files);
  tcase_add_test(tc, a_full_disk_leaves_the_previous_checkpoint);
  tcase_add_test(tc, another_model_optimizer_or_seed_is_named);
  tcase_add_test(tc, keep_rotates_and_export_writes_the_weights);
  tcase_add_test(tc, non_finite_values_are_refused_on_load);
  tcase_add_test(tc, unexpected_contents_are_refused);
  tcase_add_test(tc, impossible_positions_are_refused);
  tcase_add_test(tc, weights_of_another_model_are_refused);
  tcase_add_test(tc, impossible_header_values_are_refused);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  cu_teardown();
  return rc;
}
