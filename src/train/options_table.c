/*
 * options_table.c: every field of clt_train_options once, a row each: its
 * name (a dotted path into the optimizer and schedule), where it lies, its
 * kind, the least a count may be and the tool's flag for it, an
 * enumeration's value names. trainer.c checks the options against the
 * table and the run record (run_record.c) writes them from it, so a field
 * added to the struct is one row here (the callback, its user and
 * run_json are not options of the run and have none).
 */
#include "train/trainer.h"

#include <jansson.h>
#include <stddef.h>
#include <string.h>

typedef enum { F_INT, F_I64, F_U64, F_FLOAT, F_DOUBLE, F_STR, F_BOOL, F_ENUM, F_DOUBLES } field_kind;

typedef struct option_field {
  const char *name;
  size_t offset;
  field_kind kind;
  const char *flag;           /* the tool's flag, for messages (NULL: none) */
  int64_t min;                /* F_INT, F_I64: the least value (checked when min_checked) */
  int min_checked;
  const char *const *names;   /* F_ENUM: value i's name, or NULL and name_of */
  int n;                      /* F_ENUM: checked to lie in [0, n) (0: left to the library's own checks) */
  const char *c_names;        /* F_ENUM: the C names, for the message */
  const char *(*name_of)(int); /* F_ENUM without names: the library's own name function */
  size_t count_offset;        /* F_DOUBLES: the int count beside the pointer */
  const char *count_name;
} option_field;

static const char *const balances[] = {"equal", "weights", "auto"};
static const char *const pipelines[] = {"1f1b", "gpipe"};
static const char *const offloads[] = {"none", "optimizer"};
static const char *const shard_bys[] = {"equal", "memory", "weights"};
static const char *const recomputes[] = {"none", "blocks"};
static const char *optimizer_name(int k) { return clt_optimizer_name((clt_optimizer_kind)k); }
static const char *dtype_name(int k) { return clt_dtype_name((clt_dtype)k); }
static const char *schedule_name(int k) { return clt_schedule_name((clt_schedule_kind)k); }

#define AT(f) #f, offsetof(clt_train_options, f)
#define COUNT(f, kind, flag, min) {AT(f), kind, flag, min, 1, NULL, 0, NULL, NULL, 0, NULL}
#define PLAIN(f, kind) {AT(f), kind, NULL, 0, 0, NULL, 0, NULL, NULL, 0, NULL}
#define ENUM(f, names, c) {AT(f), F_ENUM, NULL, 0, 0, names, sizeof names / sizeof *names, c, NULL, 0, NULL}
#define NAMED(f, fn, n, c) {AT(f), F_ENUM, NULL, 0, 0, NULL, n, c, fn, 0, NULL}
#define DOUBLES(f, count) {AT(f), F_DOUBLES, NULL, 0, 0, NULL, 0, NULL, NULL, offsetof(clt_train_options, count), #count}
static const option_field fields[] = {
    COUNT(batch, F_I64, "--batch", 1),
    COUNT(epochs, F_INT, "--epochs", 1),
    COUNT(max_steps, F_I64, "--max-steps", 0),
    COUNT(accumulate, F_INT, "--accumulate", 1),
    NAMED(optimizer.kind, optimizer_name, 0, NULL),
    PLAIN(optimizer.momentum, F_FLOAT),
    PLAIN(optimizer.nesterov, F_INT),
    PLAIN(optimizer.weight_decay, F_FLOAT),
    PLAIN(optimizer.beta1, F_FLOAT),
    PLAIN(optimizer.beta2, F_FLOAT),
    PLAIN(optimizer.eps, F_FLOAT),
    NAMED(schedule.kind, schedule_name, 3, "CLT_SCHED_CONSTANT (0), CLT_SCHED_STEP (1) or CLT_SCHED_COSINE (2)"),
    PLAIN(schedule.lr, F_FLOAT),
    COUNT(schedule.warmup_steps, F_I64, "--warmup", 0),
    COUNT(schedule.total_steps, F_I64, NULL, 0),
    COUNT(schedule.step_size, F_I64, "--step-size", 0),
    PLAIN(schedule.gamma, F_FLOAT),
    PLAIN(schedule.min_lr, F_FLOAT),
    PLAIN(clip, F_FLOAT),
    PLAIN(decay_all, F_BOOL),
    PLAIN(seed, F_U64),
    COUNT(eval_every, F_I64, "--eval-every", 0),
    COUNT(log_every, F_I64, "--log-every", 0),
    PLAIN(metrics_path, F_STR),
    PLAIN(tensorboard_dir, F_STR),
    PLAIN(drop_last, F_BOOL),
    PLAIN(bucket_mb, F_DOUBLE),
    ENUM(balance, balances, "CLT_BALANCE_EQUAL (0), CLT_BALANCE_WEIGHTS (1) or CLT_BALANCE_AUTO (2)"),
    DOUBLES(balance_weights, balance_nweights),
    COUNT(balance_every, F_I64, "--balance-every", 0),
    COUNT(balance_min_share, F_I64, "--balance-min-share", 0),
    COUNT(check_every, F_I64, "--check-every", 0),
    PLAIN(checkpoint_dir, F_STR),
    COUNT(checkpoint_every, F_I64, "--checkpoint-every", 0),
    COUNT(checkpoint_keep, F_INT, "--keep", 0),
    NAMED(precision, dtype_name, 0, NULL),
    PLAIN(loss_scale, F_FLOAT),
    COUNT(loss_scale_window, F_I64, NULL, 0),
    COUNT(max_skips, F_INT, NULL, 0),
    PLAIN(max_device_memory, F_U64),
    COUNT(zero, F_INT, "--zero", 0),
    COUNT(pipeline, F_INT, "--pipeline", 0),
    COUNT(micro_batches, F_INT, "--micro-batches", 0),
    ENUM(pipeline_schedule, pipelines, "CLT_PIPELINE_1F1B (0) or CLT_PIPELINE_GPIPE (1)"),
    PLAIN(stages, F_STR),
    PLAIN(checkpoint_one_file, F_BOOL),
    PLAIN(progress_s, F_DOUBLE),
    ENUM(offload, offloads, "CLT_OFFLOAD_NONE (0) or CLT_OFFLOAD_OPTIMIZER (1)"),
    ENUM(shard_by, shard_bys, "CLT_SHARD_EQUAL (0), CLT_SHARD_MEMORY (1) or CLT_SHARD_WEIGHTS (2)"),
    DOUBLES(shard_weights, shard_nweights),
    ENUM(recompute, recomputes, "CLT_RECOMPUTE_NONE (0) or CLT_RECOMPUTE_BLOCKS (1)"),
};
#undef AT
#undef COUNT
#undef PLAIN
#undef ENUM
#undef NAMED
#undef DOUBLES
#define NFIELDS (sizeof fields / sizeof *fields)

static const void *at(const clt_train_options *o, size_t offset) { return (const char *)o + offset; }
static int int_at(const clt_train_options *o, size_t offset) {
  int v;
  memcpy(&v, at(o, offset), sizeof v);
  return v;
}
static int64_t i64_at(const clt_train_options *o, size_t offset) {
  int64_t v;
  memcpy(&v, at(o, offset), sizeof v);
  return v;
}

int clt__options_check_fields(const clt_train_options *o) {
  for (size_t i = 0; i < NFIELDS; i++) {
    const option_field *f = &fields[i];
    int64_t v = f->kind == F_I64 ? i64_at(o, f->offset) : f->kind == F_DOUBLES ? int_at(o, f->count_offset)
                                                                                : int_at(o, f->offset);
    const char *name = f->kind == F_DOUBLES ? f->count_name : f->name;
    int64_t min = f->kind == F_DOUBLES ? 0 : f->min;
    if ((f->min_checked || f->kind == F_DOUBLES) && v < min) {
      if (f->flag)
        return clt__error(CLT_EINVAL, "clt_train_options.%s (%s %lld) must be %lld or more", name, f->flag,
                          (long long)v, (long long)min);
      return clt__error(CLT_EINVAL, "clt_train_options.%s is %lld: it must be %lld or more", name, (long long)v,
                        (long long)min);
    }
    if ((f->kind == F_ENUM && f->n && (v < 0 || v >= f->n)) || (f->kind == F_BOOL && (v < 0 || v > 1)))
      return clt__error(CLT_EINVAL, "clt_train_options.%s is %lld: give %s", name, (long long)v,
                        f->kind == F_BOOL ? "0 or 1" : f->c_names);
  }
  return CLT_OK;
}

static json_t *value_json(const clt_train_options *o, const option_field *f) {
  const void *p = at(o, f->offset);
  switch (f->kind) {
  case F_INT: case F_BOOL: return json_integer(int_at(o, f->offset));
  case F_I64: return json_integer(i64_at(o, f->offset));
  case F_U64: { uint64_t v; memcpy(&v, p, sizeof v); return json_integer((json_int_t)v); }
  case F_FLOAT: { float v; memcpy(&v, p, sizeof v); return json_real(v); }
  case F_DOUBLE: { double v; memcpy(&v, p, sizeof v); return json_real(v); }
  case F_STR: { const char *s; memcpy(&s, p, sizeof s); return s ? json_string(s) : json_null(); }
  case F_ENUM: {
    int v = int_at(o, f->offset);
    if (f->name_of) return json_string(f->name_of(v));
    return v >= 0 && v < f->n ? json_string(f->names[v]) : json_integer(v);
  }
  case F_DOUBLES: {
    const double *w;
    json_t *a = json_array();
    memcpy(&w, p, sizeof w);
    for (int i = 0, n = int_at(o, f->count_offset); w && i < n; i++) json_array_append_new(a, json_real(w[i]));
    return a;
  }
  }
  return json_null();
}

json_t *clt__options_json(const clt_train_options *o) {
  json_t *j = json_object();
  for (size_t i = 0; i < NFIELDS; i++) {
    const char *name = fields[i].name, *dot = strchr(name, '.');
    json_t *in = j;
    if (dot) { /* optimizer.kind: the member kind of the object optimizer */
      char outer[32];
      size_t len = (size_t)(dot - name) < sizeof outer ? (size_t)(dot - name) : sizeof outer - 1;
      memcpy(outer, name, len), outer[len] = 0;
      if (!(in = json_object_get(j, outer))) json_object_set_new(j, outer, in = json_object());
      name = dot + 1;
    }
    json_object_set_new(in, name, value_json(o, &fields[i]));
  }
  return j;
}
