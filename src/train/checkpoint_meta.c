/*
 * checkpoint_meta.c: a checkpoint's metadata (doc/checkpoint.md,
 * "Metadata") read in full and checked against what some run can have
 * written: each field's type and range, and how the fields bind each
 * other (the epoch is the sampler's, the samples into the epoch are its
 * micro-batches times their size, a batch is its micro-batches, the
 * shares add up to a micro-batch, the epoch's sums lie within its
 * samples, no counter is below the steps it counts). A file whose CRCs
 * are right but which says what no run writes was edited or damaged: it
 * is refused naming the file and the field, before any of it is used.
 * What must also agree with this run (the model, the optimizer kind, the
 * seed, the batch) is checkpoint.c's.
 */
#include "train/checkpoint.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/optim.h"
#include "io/safetensors.h"

/* No run comes near 2^53 steps, micro-batches or samples (285 years at a
 * million steps a second), and every count below it is exact as a JSON
 * number in any reader: a larger one was written by no run. */
#define COUNT_LIMIT ((int64_t)1 << 53)
#define GENERATOR "philox4x32-10"

/* "ckpt.safetensors: the metadata 'rng' names the generator 'x' ...; no
 * run writes that: the file was edited or damaged" */
#define REFUSE(...) clt__error(CLT_EFORMAT, __VA_ARGS__)
#define AFTER "; no run writes that: the file was edited or damaged"

/* ---- one field at a time ------------------------------------------------------- */

typedef enum { WHOLE, NUMBER, TEXT, FLAG } field_kind;

/* A member of a JSON metadata value: its kind, its range (WHOLE: [lo, hi];
 * NUMBER: finite, then checked by the caller; TEXT: hi is the room of the
 * char buffer out points to) and where it goes. */
typedef struct member {
  const char *key;
  field_kind kind;
  int64_t lo, hi;
  void *out;
} member;

/* A metadata value that holds JSON: an object, or CLT_EFORMAT. */
static int meta_json(clt__st_file *f, const char *path, const char *key, json_t **out) {
  const char *v = clt__st_metadata(f, key);
  json_error_t err;
  *out = NULL;
  if (!v) return clt__error(CLT_EFORMAT, "%s: the metadata '%s' is missing", path, key);
  if (!(*out = json_loads(v, JSON_REJECT_DUPLICATES, &err)) || !json_is_object(*out)) {
    json_decref(*out);
    *out = NULL;
    return clt__error(CLT_EFORMAT, "%s: the metadata '%s' is not a JSON object: '%.80s'", path, key, v);
  }
  return CLT_OK;
}

int clt__ckpt_meta_whole(clt__st_file *f, const char *path, const char *key, int64_t lo, int64_t hi, int64_t *out) {
  const char *v = clt__st_metadata(f, key);
  char *end;
  if (!v) return clt__error(CLT_EFORMAT, "%s: the metadata '%s' is missing", path, key);
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < 0)
    return clt__error(CLT_EFORMAT, "%s: the metadata '%s' is '%.40s', not a whole number", path, key, v);
  if (x < lo || x > hi)
    return REFUSE("%s: the metadata '%s' is %lld, outside [%lld, %lld]" AFTER, path, key, x, (long long)lo,
                  (long long)hi);
  *out = x;
  return CLT_OK;
}

static const char *kind_text(field_kind k) {
  static const char *const names[] = {"a whole number", "a number", "a string", "true or false"};
  return names[k];
}

/* Every member of the JSON object in metadata `key` (which *obj keeps
 * open for the caller), each of its kind and in its range. */
static int read_members(clt__st_file *f, const char *path, const char *key, const member *ms, int n, json_t **obj) {
  int rc = meta_json(f, path, key, obj);
  for (int i = 0; rc == CLT_OK && i < n; i++) {
    const member *m = &ms[i];
    json_t *v = json_object_get(*obj, m->key);
    int ok = m->kind == WHOLE ? json_is_integer(v) : m->kind == NUMBER ? json_is_number(v)
             : m->kind == TEXT ? json_is_string(v) : json_is_boolean(v);
    if (!ok) {
      rc = clt__error(CLT_EFORMAT, "%s: the metadata '%s' lacks %s '%s'", path, key, kind_text(m->kind), m->key);
    } else if (m->kind == WHOLE) {
      json_int_t x = json_integer_value(v);
      if (x < m->lo || x > m->hi)
        rc = REFUSE("%s: the metadata '%s' member '%s' is %lld, outside [%lld, %lld]" AFTER, path, key, m->key,
                    (long long)x, (long long)m->lo, (long long)m->hi);
      else
        *(int64_t *)m->out = x;
    } else if (m->kind == NUMBER) {
      double x = json_number_value(v);
      if (!isfinite(x))
        rc = REFUSE("%s: the metadata '%s' member '%s' is %g, not a finite number" AFTER, path, key, m->key, x);
      else
        *(double *)m->out = x;
    } else if (m->kind == TEXT) {
      const char *s = json_string_value(v);
      if (strlen(s) >= (size_t)m->hi)
        rc = REFUSE("%s: the metadata '%s' member '%s' is '%.40s...', longer than any cltrain writes" AFTER, path,
                    key, m->key, s);
      else
        memcpy(m->out, s, strlen(s) + 1);
    } else {
      *(int *)m->out = json_is_true(v);
    }
  }
  return rc;
}

/* ---- each metadata value ----------------------------------------------------------- */

/* 'sampler_position' and the top-level 'epoch': a place some run's sampler
 * was at after steps_done steps on a training set of train_samples. */
static int read_position(clt__st_file *f, const char *path, clt__ckpt_meta *m) {
  int64_t samples, epoch;
  json_t *o = NULL;
  const member ms[] = {{"epoch", WHOLE, 0, COUNT_LIMIT, &m->pos.epoch},
                       {"step", WHOLE, 0, INT64_MAX, &m->pos.step},
                       {"micro_batch", WHOLE, 1, COUNT_LIMIT, &m->micro_batch},
                       {"samples_in_epoch", WHOLE, 0, COUNT_LIMIT, &samples},
                       {"train_samples", WHOLE, 0, COUNT_LIMIT, &m->train_samples}};
  int rc = read_members(f, path, "sampler_position", ms, 5, &o);
  json_decref(o);
  if (rc < 0) return rc;
  CLT_TRY(clt__ckpt_meta_whole(f, path, "epoch", 0, COUNT_LIMIT, &epoch));
  /* Every epoch takes one step at least; a place in the epoch lies within
   * its samples (and within any int64). */
  if (m->pos.epoch > m->steps_done)
    return REFUSE("%s: its sampler position is epoch %lld, but after %lld steps no run can be past epoch %lld; the "
                  "file was edited or damaged", path, (long long)m->pos.epoch + 1, (long long)m->steps_done,
                  (long long)m->steps_done + 1);
  int64_t at;
  if (__builtin_mul_overflow(m->pos.step, m->micro_batch, &at) || at > m->train_samples)
    return REFUSE("%s: its sampler position, %lld micro-batches of %lld samples into epoch %lld, is past the %lld "
                  "training samples it refers to; the file was edited or damaged", path, (long long)m->pos.step,
                  (long long)m->micro_batch, (long long)m->pos.epoch + 1, (long long)m->train_samples);
  if (samples != at)
    return REFUSE("%s: the metadata 'sampler_position' says %lld samples into the epoch, but its %lld micro-batches "
                  "of %lld are %lld" AFTER, path, (long long)samples, (long long)m->pos.step,
                  (long long)m->micro_batch, (long long)at);
  if (epoch != m->pos.epoch)
    return REFUSE("%s: the metadata 'epoch' is %lld but the sampler position's epoch is %lld" AFTER, path,
                  (long long)epoch, (long long)m->pos.epoch);
  /* A trainer that never ran fit has no training set: it is at its start. */
  if (m->train_samples == 0 && (m->pos.epoch || m->pos.step))
    return REFUSE("%s: its sampler position is epoch %lld step %lld of a training set of 0 samples" AFTER, path,
                  (long long)m->pos.epoch + 1, (long long)m->pos.step);
fail:
  return rc;
}

/* 'rng': cltrain's one generator, a seed, and the micro-batches done
 * (which count every step at least once). */
static int read_rng(clt__st_file *f, const char *path, clt__ckpt_meta *m) {
  char generator[32];
  json_t *o = NULL;
  const member ms[] = {{"generator", TEXT, 0, sizeof generator, generator},
                       {"seed", TEXT, 0, sizeof m->seed, m->seed},
                       {"dropout_step", WHOLE, 0, COUNT_LIMIT, &m->dropout_step}};
  int rc = read_members(f, path, "rng", ms, 3, &o);
  json_decref(o);
  if (rc < 0) return rc;
  if (strcmp(generator, GENERATOR) != 0)
    return REFUSE("%s: the metadata 'rng' names the generator '%s'; cltrain's random numbers are all " GENERATOR
                  " (its checkpoints record nothing else)" AFTER, path, generator);
  char *end;
  errno = 0;
  (void)strtoull(m->seed, &end, 10); /* digits only, below 2^64: strtoull alone takes "-1" and " 1" */
  if (!m->seed[0] || *end || errno || m->seed[0] < '0' || m->seed[0] > '9')
    return REFUSE("%s: the metadata 'rng' has the seed '%s', not a whole number below 2^64" AFTER, path, m->seed);
  if (m->dropout_step < m->steps_done)
    return REFUSE("%s: the metadata 'rng' counts %lld micro-batches (dropout_step) but 'step' %lld steps, each of "
                  "one micro-batch at least" AFTER, path, (long long)m->dropout_step, (long long)m->steps_done);
  return CLT_OK;
}

/* 'loss_scale' and 'loss_scaling' (which files older than it lack): a
 * scale a float holds, 1 in fp32, and counters within the steps. */
static int read_scaling(clt__st_file *f, const char *path, clt__ckpt_meta *m) {
  const char *scale = clt__st_metadata(f, "loss_scale");
  char *end, precision[8];
  m->loss_scale = scale ? strtod(scale, &end) : 0;
  if (!scale || *end || !(m->loss_scale > 0) || m->loss_scale > FLT_MAX)
    return clt__error(CLT_EFORMAT, "%s: the metadata 'loss_scale' is '%s', not a positive number a float holds",
                      path, scale ? scale : "(missing)");
  if (!clt__st_metadata(f, "loss_scaling")) return CLT_OK;
  json_t *o = NULL;
  const member ms[] = {{"precision", TEXT, 0, sizeof precision, precision},
                       {"clean_steps", WHOLE, 0, COUNT_LIMIT, &m->clean_steps},
                       {"skipped", WHOLE, 0, COUNT_LIMIT, &m->skipped}};
  int rc = read_members(f, path, "loss_scaling", ms, 3, &o);
  json_decref(o);
  if (rc < 0) return rc;
  m->fp16 = strcmp(precision, "fp16") == 0;
  if (!m->fp16 && strcmp(precision, "fp32") != 0)
    return REFUSE("%s: the metadata 'loss_scaling' names the precision '%s', neither fp16 nor fp32" AFTER, path,
                  precision);
  if (!m->fp16 && m->loss_scale != 1)
    return REFUSE("%s: the metadata 'loss_scale' is %s, but an fp32 run's is 1" AFTER, path, scale);
  if (m->clean_steps > m->steps_done || m->skipped > m->steps_done)
    return REFUSE("%s: the metadata 'loss_scaling' counts %lld %s steps, but 'step' is %lld" AFTER, path,
                  (long long)(m->skipped > m->steps_done ? m->skipped : m->clean_steps),
                  m->skipped > m->steps_done ? "skipped" : "clean", (long long)m->steps_done);
  return CLT_OK;
}

/* 'optimizer': settings some run trained with, checked as the trainer
 * checks a run's own (its optimizer's row, the schedule's ranges). */
static int read_optimizer(clt__st_file *f, const char *path, clt__ckpt_meta *m) {
  char kind[32], schedule[32];
  double momentum, weight_decay, beta1, beta2, eps, clip, lr, gamma, min_lr;
  int64_t warmup, total, step_size;
  int nesterov;
  json_t *o = NULL;
  const member ms[] = {{"kind", TEXT, 0, sizeof kind, kind},          {"momentum", NUMBER, 0, 0, &momentum},
                       {"nesterov", FLAG, 0, 0, &nesterov},           {"weight_decay", NUMBER, 0, 0, &weight_decay},
                       {"beta1", NUMBER, 0, 0, &beta1},               {"beta2", NUMBER, 0, 0, &beta2},
                       {"eps", NUMBER, 0, 0, &eps},                   {"clip", NUMBER, 0, 0, &clip},
                       {"schedule", TEXT, 0, sizeof schedule, schedule}, {"lr", NUMBER, 0, 0, &lr},
                       {"warmup_steps", WHOLE, 0, COUNT_LIMIT, &warmup}, {"total_steps", WHOLE, 0, COUNT_LIMIT, &total},
                       {"step_size", WHOLE, 0, COUNT_LIMIT, &step_size}, {"gamma", NUMBER, 0, 0, &gamma},
                       {"min_lr", NUMBER, 0, 0, &min_lr}};
  int rc = read_members(f, path, "optimizer", ms, (int)(sizeof ms / sizeof *ms), &o);
  json_decref(o);
  if (rc < 0) return rc;
  clt_schedule_kind sk;
  if (clt_optimizer_parse(kind, &m->optimizer.kind) < 0 || clt_schedule_parse(schedule, &sk) < 0)
    return clt__error_prefix(CLT_EFORMAT, "%s: the metadata 'optimizer'", path);
  m->optimizer.momentum = (float)momentum, m->optimizer.nesterov = nesterov;
  m->optimizer.weight_decay = (float)weight_decay, m->optimizer.beta1 = (float)beta1;
  m->optimizer.beta2 = (float)beta2, m->optimizer.eps = (float)eps;
  if (clt__optimizer_check(&m->optimizer) < 0)
    return clt__error_prefix(CLT_EFORMAT, "%s: the metadata 'optimizer' holds settings no run trains with", path);
  const char *bad = !(lr > 0) ? "lr" : !(min_lr >= 0 && min_lr <= lr) ? "min_lr" : !(gamma > 0 && gamma <= 1) ? "gamma"
                    : !(clip >= 0) ? "clip" : NULL;
  if (bad)
    return REFUSE("%s: the metadata 'optimizer' has %s %g, which no run trains with (lr > 0, min_lr in [0, lr], gamma "
                  "in (0, 1], clip >= 0)" AFTER, path, bad,
                  bad[0] == 'l' ? lr : bad[0] == 'm' ? min_lr : bad[0] == 'g' ? gamma : clip);
  return CLT_OK;
}

/* 'training': a batch of whole micro-batches, and the balancer's shares,
 * one a replica, adding up to a micro-batch. */
static int read_training(clt__st_file *f, const char *path, clt__ckpt_meta *m) {
  char balance[16];
  int64_t ranks, batch, accumulate, replicas;
  json_t *o = NULL;
  const member ms[] = {{"batch", WHOLE, 1, COUNT_LIMIT, &batch},
                       {"accumulate", WHOLE, 1, COUNT_LIMIT, &accumulate},
                       {"ranks", WHOLE, 1, INT32_MAX, &ranks},
                       {"replicas", WHOLE, 1, INT32_MAX, &replicas},
                       {"balance", TEXT, 0, sizeof balance, balance}};
  int rc = read_members(f, path, "training", ms, 5, &o);
  if (rc < 0) goto fail;
  if (strcmp(balance, "equal") && strcmp(balance, "weights") && strcmp(balance, "auto")) {
    rc = REFUSE("%s: the metadata 'training' names the balance '%s', none of equal, weights or auto" AFTER, path,
                balance);
    goto fail;
  }
  int64_t whole;
  if (__builtin_mul_overflow(m->micro_batch, accumulate, &whole) || whole != batch) {
    rc = REFUSE("%s: the sampler position's micro-batch is %lld samples, but the metadata 'training' has a batch of "
                "%lld in %lld micro-batches" AFTER, path, (long long)m->micro_batch, (long long)batch,
                (long long)accumulate);
    goto fail;
  }
  json_t *sh = json_object_get(o, "shares");
  if (!json_is_array(sh) || (int64_t)json_array_size(sh) != replicas) {
    rc = REFUSE("%s: the metadata 'training' lacks the shares of its %lld replicas" AFTER, path, (long long)replicas);
    goto fail;
  }
  if (!(m->shares = clt__calloc((size_t)replicas, sizeof *m->shares))) { rc = CLT_ENOMEM; goto fail; }
  int64_t sum = 0;
  for (int64_t r = 0; r < replicas; r++) {
    json_t *e = json_array_get(sh, (size_t)r);
    if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > m->micro_batch) {
      rc = REFUSE("%s: the metadata 'training' gives replica %lld the share %s, not a whole number of samples in "
                  "[0, %lld]" AFTER, path, (long long)r, json_is_integer(e) ? "out of range" : "of no number",
                  (long long)m->micro_batch);
      goto fail;
    }
    sum += m->shares[r] = json_integer_value(e);
  }
  if (sum != m->micro_batch) {
    rc = REFUSE("%s: the metadata 'training' shares add up to %lld samples, not the micro-batch's %lld" AFTER, path,
                (long long)sum, (long long)m->micro_batch);
    goto fail;
  }
  m->replicas = replicas;
fail:
  json_decref(o);
  return rc;
}

/* 'epoch_progress': the sums of the steps taken in the epoch so far (the
 * labels among them clt__ckpt_meta_check_labels checks, knowing the
 * model's labels per sample). */
static int read_progress(clt__st_file *f, const char *path, clt__ckpt_meta *m) {
  json_t *o = NULL;
  double *s = m->ep_sums;
  const member ms[] = {{"steps", WHOLE, 0, COUNT_LIMIT, &m->ep_steps},
                       {"loss_sum", NUMBER, 0, 0, &s[0]},
                       {"correct", NUMBER, 0, 0, &s[1]},
                       {"samples", NUMBER, 0, 0, &s[2]}};
  int rc = read_members(f, path, "epoch_progress", ms, 4, &o);
  json_decref(o);
  if (rc < 0) return rc;
  if (m->ep_steps > m->steps_done || m->ep_steps > m->train_samples)
    return REFUSE("%s: the metadata 'epoch_progress' counts %lld steps in the epoch, but 'step' is %lld and an epoch "
                  "of %lld samples has at most as many steps" AFTER, path, (long long)m->ep_steps,
                  (long long)m->steps_done, (long long)m->train_samples);
  if (!(s[1] >= 0 && s[1] <= s[2] && s[1] == floor(s[1])))
    return REFUSE("%s: the metadata 'epoch_progress' counts %.17g labels right, not a whole number from 0 to its "
                  "%.17g labels" AFTER, path, s[1], s[2]);
  /* Cross-entropy on float32 scores is at most their largest difference
   * plus the log of the classes: below 3 FLT_MAX a label. */
  if (!(s[0] >= 0 && s[0] <= s[2] * 3.0 * FLT_MAX))
    return REFUSE("%s: the metadata 'epoch_progress' sums a loss of %.17g over %.17g labels; a label's loss is from 0 "
                  "to 3 times the largest float" AFTER, path, s[0], s[2]);
  return CLT_OK;
}

/* The epoch's labels are at most an epoch's: train_samples samples of lps
 * labels (a callback may save after the epoch's last step, before the
 * sums start again: then a whole epoch's). */
int clt__ckpt_meta_check_labels(const clt__ckpt_meta *m, const char *path, int64_t lps) {
  double labels = (double)m->train_samples * (double)lps, n = m->ep_sums[2];
  if (!(n >= 0 && n <= labels && n == floor(n)))
    return REFUSE("%s: the metadata 'epoch_progress' sums %.17g labels, not a whole number from 0 to the %.17g of an "
                  "epoch of %lld samples of %lld labels" AFTER, path, n, labels, (long long)m->train_samples,
                  (long long)lps);
  return CLT_OK;
}

int clt__ckpt_run_read(clt__st_file *f, const char *path, clt__run_info *out) {
  char id[sizeof out->id];
  json_t *o = NULL;
  memset(out, 0, sizeof *out);
  if (!clt__st_metadata(f, "run")) return CLT_OK; /* a file older than the record */
  const member ms[] = {{"id", TEXT, 0, sizeof id, id},
                       {"branched_from", WHOLE, 0, COUNT_LIMIT, &out->branched_from},
                       {"started", WHOLE, 0, INT64_MAX, &out->started_ns}};
  int rc = read_members(f, path, "run", ms, 3, &o);
  json_decref(o);
  if (rc == CLT_OK && (strlen(id) != 16 || strspn(id, "0123456789abcdef") != 16))
    rc = REFUSE("%s: the metadata 'run' has the id '%s', not the 16 hex digits of a run's" AFTER, path, id);
  if (rc < 0) {
    memset(out, 0, sizeof *out);
    return rc;
  }
  clt__strlcpy(out->id, id, sizeof out->id);
  return CLT_OK;
}

/* ---- the whole header ---------------------------------------------------------------- */

int clt__ckpt_meta_read(clt__st_file *f, const char *path, clt__ckpt_meta *m) {
  int rc = CLT_OK;
  memset(m, 0, sizeof *m);
  if (!(m->spec = clt__st_metadata(f, "model")))
    return clt__error(CLT_EFORMAT, "%s: the metadata 'model' (the model spec) is missing", path);
  CLT_TRY(clt__ckpt_meta_whole(f, path, "param_count", 0, COUNT_LIMIT, &m->param_count));
  CLT_TRY(clt__ckpt_meta_whole(f, path, "step", 0, COUNT_LIMIT, &m->steps_done));
  CLT_TRY(read_rng(f, path, m));
  CLT_TRY(read_scaling(f, path, m));
  CLT_TRY(read_position(f, path, m));
  CLT_TRY(read_optimizer(f, path, m));
  CLT_TRY(read_training(f, path, m));
  CLT_TRY(read_progress(f, path, m));
  CLT_TRY(clt__ckpt_run_read(f, path, &m->run));
  if (m->run.id[0] && m->run.branched_from > m->steps_done)
    rc = REFUSE("%s: the metadata 'run' says the session that wrote it started at step %lld, after its 'step' %lld"
                AFTER, path, (long long)m->run.branched_from, (long long)m->steps_done);
fail:
  if (rc < 0) clt__ckpt_meta_free(m);
  return rc;
}

void clt__ckpt_meta_free(clt__ckpt_meta *m) {
  free(m->shares);
  m->shares = NULL;
}
