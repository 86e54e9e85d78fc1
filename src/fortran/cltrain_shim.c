/*
 * cltrain_shim.c: the C half of the Fortran module (src/fortran/cltrain.f90),
 * for what the module cannot bind to directly.
 *
 * Training options. clt_train_options holds pointers, a callback, nested
 * structs and enums, and it grows as features land; a bind(C) copy of it in
 * Fortran would go on compiling after a field is added on the C side and
 * then read every later field from the wrong offset. So the module's
 * clt_options_t is a Fortran type of its own (numbers, allocatable strings
 * and arrays, a procedure pointer), and nothing crosses by layout: the
 * module hands each of its components to an options object made here
 * (clt_f_options: a clt_train_options, first, so that a pointer to the
 * object is one to the struct, and the strings, arrays and callback it
 * owns), by name, through the table `fields` below: one row per field of
 * clt_train_options, its Fortran name, its C name, where it is and what it
 * holds. The object lives as long as the trainer made from it, since the
 * trainer keeps the struct's pointers.
 *
 * tests/fortran/options_check.c holds the table to the struct: its rows
 * must cover every byte of clt_train_options (a field added to the struct
 * without a row makes it fail), and the test sets every option from
 * Fortran to a value other than the default and reads each back here.
 *
 * clt_f_options_field is exported for that test and for C code that wants
 * the table; the rest is hidden: the library exports the module.
 */
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain.h>

#define CLT_F_HIDDEN __attribute__((visibility("hidden")))
#define CLT_F_EXPORT __attribute__((visibility("default")))

/* What a field holds (the `type` of clt_f_options_field). */
enum {
  F_I32 = 0,   /* int or an enum: an integer of the int range */
  F_I64 = 1,   /* int64_t */
  F_U64 = 2,   /* uint64_t of 0 or more (a negative value is refused) */
  F_SEED = 3,  /* uint64_t from Fortran's int64 bits (Fortran has no unsigned) */
  F_F32 = 4,   /* float */
  F_F64 = 5,   /* double */
  F_STR = 6,   /* const char *: NULL or a copy the object owns */
  F_REALS = 7, /* const double * and, at count_offset, its int count */
  F_FN = 8,    /* the callback: set through clt_f_options_set_callback */
  F_USER = 9   /* the callback's user pointer: the object itself (the trampoline's) */
};

typedef struct field {
  const char *name;    /* the Fortran component: opts%name */
  const char *c_name;  /* the clt_train_options field */
  size_t offset, size;
  int type;
  size_t max_len;      /* F_STR: the longest value; 0 none */
  size_t count_offset; /* F_REALS: where its count is */
} field;

#define PATH_LEN 4095 /* PATH_MAX less the NUL: a longer path cannot be opened */
#define FIELD(fname, f, type, max) \
  {fname, #f, offsetof(clt_train_options, f), sizeof(((clt_train_options *)0)->f), type, max, 0}
#define REALS(fname, f, n) \
  {fname, #f, offsetof(clt_train_options, f), sizeof(((clt_train_options *)0)->f), F_REALS, 0, \
   offsetof(clt_train_options, n)}
#define COUNT(fname, f) \
  {fname, #f, offsetof(clt_train_options, f), sizeof(((clt_train_options *)0)->f), F_I32, 0, (size_t)-1}

/* Every field of clt_train_options, in the struct's order. A count that goes
 * with an array (balance_nweights) is the array's size in Fortran: its row
 * has count_offset (size_t)-1 and no setter of its own. */
static const field fields[] = {
    FIELD("batch", batch, F_I64, 0),
    FIELD("epochs", epochs, F_I32, 0),
    FIELD("max_steps", max_steps, F_I64, 0),
    FIELD("accumulate", accumulate, F_I32, 0),
    FIELD("optimizer", optimizer.kind, F_I32, 0),
    FIELD("momentum", optimizer.momentum, F_F32, 0),
    FIELD("nesterov", optimizer.nesterov, F_I32, 0),
    FIELD("weight_decay", optimizer.weight_decay, F_F32, 0),
    FIELD("beta1", optimizer.beta1, F_F32, 0),
    FIELD("beta2", optimizer.beta2, F_F32, 0),
    FIELD("eps", optimizer.eps, F_F32, 0),
    FIELD("schedule", schedule.kind, F_I32, 0),
    FIELD("lr", schedule.lr, F_F32, 0),
    FIELD("warmup_steps", schedule.warmup_steps, F_I64, 0),
    FIELD("total_steps", schedule.total_steps, F_I64, 0),
    FIELD("step_size", schedule.step_size, F_I64, 0),
    FIELD("gamma", schedule.gamma, F_F32, 0),
    FIELD("min_lr", schedule.min_lr, F_F32, 0),
    FIELD("clip", clip, F_F32, 0),
    FIELD("decay_all", decay_all, F_I32, 0),
    FIELD("seed", seed, F_SEED, 0),
    FIELD("eval_every", eval_every, F_I64, 0),
    FIELD("log_every", log_every, F_I64, 0),
    FIELD("metrics_path", metrics_path, F_STR, PATH_LEN),
    FIELD("tensorboard_dir", tensorboard_dir, F_STR, PATH_LEN),
    FIELD("drop_last", drop_last, F_I32, 0),
    FIELD("callback", callback, F_FN, 0),
    FIELD("callback_user", callback_user, F_USER, 0),
    FIELD("bucket_mb", bucket_mb, F_F64, 0),
    FIELD("balance", balance, F_I32, 0),
    REALS("balance_weights", balance_weights, balance_nweights),
    COUNT("balance_weights", balance_nweights),
    FIELD("balance_every", balance_every, F_I64, 0),
    FIELD("balance_min_share", balance_min_share, F_I64, 0),
    FIELD("check_every", check_every, F_I64, 0),
    FIELD("checkpoint_dir", checkpoint_dir, F_STR, PATH_LEN),
    FIELD("checkpoint_every", checkpoint_every, F_I64, 0),
    FIELD("checkpoint_keep", checkpoint_keep, F_I32, 0),
    FIELD("precision", precision, F_I32, 0),
    FIELD("loss_scale", loss_scale, F_F32, 0),
    FIELD("loss_scale_window", loss_scale_window, F_I64, 0),
    FIELD("max_skips", max_skips, F_I32, 0),
    FIELD("max_device_memory", max_device_memory, F_U64, 0),
    FIELD("zero", zero, F_I32, 0),
    FIELD("pipeline", pipeline, F_I32, 0),
    FIELD("micro_batches", micro_batches, F_I32, 0),
    FIELD("pipeline_schedule", pipeline_schedule, F_I32, 0),
    FIELD("stages", stages, F_STR, 65536),
    FIELD("checkpoint_one_file", checkpoint_one_file, F_I32, 0),
    FIELD("progress_s", progress_s, F_F64, 0),
    FIELD("run_json", run_json, F_STR, 1 << 24),
    FIELD("offload", offload, F_I32, 0),
    FIELD("shard_by", shard_by, F_I32, 0),
    REALS("shard_weights", shard_weights, shard_nweights),
    COUNT("shard_weights", shard_nweights),
    FIELD("recompute", recompute, F_I32, 0),
};
#define NFIELDS (sizeof fields / sizeof *fields)
#undef FIELD
#undef REALS
#undef COUNT

/* The event as the module reads it: numbers, then the per-replica arrays
 * (NULL or nreplicas long), then the two ints; the module's bind(C)
 * c_event_t, field for field. */
typedef struct clt_f_event {
  int64_t epoch, epochs, step, steps_total, step_in_epoch, steps_per_epoch, skipped;
  double loss, accuracy, lr, samples_per_s, elapsed_s, eta_s, test_loss, test_accuracy, grad_norm, comm_s,
      comm_hidden, loss_scale, tokens_per_s, prefetch_wait_s, flops_per_sample, comm_bytes;
  const int64_t *shares;
  const double *throughput, *fixed_s, *per_sample_s, *flops, *peak_flops, *mfu;
  int32_t kind, nreplicas;
} clt_f_event;

typedef void (*clt_f_event_fn)(const clt_f_event *ev, void *user);

/* The options object: the struct first (a pointer to the object is one to
 * it), then what its pointers point at. */
typedef struct clt_f_options {
  clt_train_options o;
  char *strings[NFIELDS];   /* the copies its F_STR fields point at */
  double *reals[NFIELDS];   /* the copies its F_REALS fields point at */
  clt_f_event_fn fortran_fn; /* the module's trampoline, and the callback's holder */
  void *fortran_user;
} clt_f_options;

CLT_F_EXPORT int clt_f_options_field(int i, const char **name, const char **c_name, size_t *offset, size_t *size,
                                     int *type);
CLT_F_HIDDEN const char *clt_f_error(void);
CLT_F_HIDDEN int clt_f_options_create(int optimizer, clt_f_options **out);
CLT_F_HIDDEN void clt_f_options_destroy(clt_f_options *h);
CLT_F_HIDDEN int clt_f_options_set_int(clt_f_options *h, const char *name, int64_t v);
CLT_F_HIDDEN int clt_f_options_get_int(const clt_f_options *h, const char *name, int64_t *v);
CLT_F_HIDDEN int clt_f_options_set_real(clt_f_options *h, const char *name, double v);
CLT_F_HIDDEN int clt_f_options_get_real(const clt_f_options *h, const char *name, double *v);
CLT_F_HIDDEN int clt_f_options_set_string(clt_f_options *h, const char *name, const char *s, int64_t len,
                                          int present);
CLT_F_HIDDEN int clt_f_options_set_reals(clt_f_options *h, const char *name, const double *v, int64_t n,
                                         int present);
CLT_F_HIDDEN void clt_f_options_set_callback(clt_f_options *h, clt_f_event_fn fn, void *user);
CLT_F_HIDDEN int clt_f_trainer_create(const clt_model *m, const clt_devices *devs, clt_comm *comm,
                                      const clt_f_options *h, clt_trainer **out);
CLT_F_HIDDEN int clt_f_dataset_open(const char *path, const char *labels, const char *target, const char *features,
                                    int regression, int num_classes, clt_dataset **out);
CLT_F_HIDDEN const char *clt_f_device_name(const clt_devices *devs, int i);
CLT_F_HIDDEN int clt_f_device_type(const clt_devices *devs, int i);

/* The shim's own last failure, for the module's clt_error_message (the
 * library's clt_last_error is the library's to write). */
static _Thread_local char shim_error[1024];

const char *clt_f_error(void) { return shim_error; }

__attribute__((format(printf, 2, 3))) static int fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(shim_error, sizeof shim_error, fmt, ap);
  va_end(ap);
  return status;
}

int clt_f_options_field(int i, const char **name, const char **c_name, size_t *offset, size_t *size, int *type) {
  if (i < 0 || (size_t)i >= NFIELDS) return CLT_ENOTFOUND;
  if (name) *name = fields[i].name;
  if (c_name) *c_name = fields[i].c_name;
  if (offset) *offset = fields[i].offset;
  if (size) *size = fields[i].size;
  if (type) *type = fields[i].type;
  return CLT_OK;
}

/* The row named `name` that takes values of a kind in [lo, hi]; NULL, the
 * failure recorded, for none. */
static const field *find(const char *name, int lo, int hi, int *index) {
  for (size_t i = 0; i < NFIELDS; i++)
    if (!strcmp(fields[i].name, name) && fields[i].count_offset != (size_t)-1 && fields[i].type >= lo &&
        fields[i].type <= hi) {
      if (index) *index = (int)i;
      return &fields[i];
    }
  snprintf(shim_error, sizeof shim_error,
           "cltrain (Fortran): the options have no field %s of this kind: the module and libcltrain_fortran are "
           "from different builds",
           name);
  return NULL;
}

int clt_f_options_create(int optimizer, clt_f_options **out) {
  clt_f_options *h = calloc(1, sizeof *h);
  *out = h;
  if (!h) {
    snprintf(shim_error, sizeof shim_error, "cltrain (Fortran): out of memory for the training options");
    return CLT_ENOMEM;
  }
  clt_train_options_defaults(&h->o);
  if (optimizer >= 0 && optimizer < CLT_OPT_COUNT)
    clt_optimizer_defaults((clt_optimizer_kind)optimizer, &h->o.optimizer);
  return CLT_OK;
}

void clt_f_options_destroy(clt_f_options *h) {
  if (!h) return;
  for (size_t i = 0; i < NFIELDS; i++) {
    free(h->strings[i]);
    free(h->reals[i]);
  }
  free(h);
}

int clt_f_options_set_int(clt_f_options *h, const char *name, int64_t v) {
  const field *f = find(name, F_I32, F_SEED, NULL);
  if (!f) return CLT_EINTERNAL;
  char *at = (char *)&h->o + f->offset;
  if (f->type == F_I32) {
    if (v < INT_MIN || v > INT_MAX)
      return fail(CLT_EINVAL, "opts%%%s is %lld: it must fit a C int (%d at most)", name, (long long)v, INT_MAX);
    int i = (int)v;
    memcpy(at, &i, sizeof i);
  } else if (f->type == F_U64 || f->type == F_SEED) {
    if (f->type == F_U64 && v < 0) return fail(CLT_EINVAL, "opts%%%s is %lld: it must be 0 or more", name, (long long)v);
    uint64_t u = (uint64_t)v;
    memcpy(at, &u, sizeof u);
  } else {
    memcpy(at, &v, sizeof v);
  }
  return CLT_OK;
}

int clt_f_options_get_int(const clt_f_options *h, const char *name, int64_t *v) {
  const field *f = find(name, F_I32, F_SEED, NULL);
  if (!f) return CLT_EINTERNAL;
  const char *at = (const char *)&h->o + f->offset;
  if (f->type == F_I32) {
    int i;
    memcpy(&i, at, sizeof i);
    *v = i;
  } else if (f->type == F_U64 || f->type == F_SEED) {
    uint64_t u;
    memcpy(&u, at, sizeof u);
    *v = (int64_t)u;
  } else {
    memcpy(v, at, sizeof *v);
  }
  return CLT_OK;
}

int clt_f_options_set_real(clt_f_options *h, const char *name, double v) {
  const field *f = find(name, F_F32, F_F64, NULL);
  if (!f) return CLT_EINTERNAL;
  char *at = (char *)&h->o + f->offset;
  if (f->type == F_F32) {
    float x = (float)v;
    memcpy(at, &x, sizeof x);
  } else {
    memcpy(at, &v, sizeof v);
  }
  return CLT_OK;
}

int clt_f_options_get_real(const clt_f_options *h, const char *name, double *v) {
  const field *f = find(name, F_F32, F_F64, NULL);
  if (!f) return CLT_EINTERNAL;
  const char *at = (const char *)&h->o + f->offset;
  if (f->type == F_F32) {
    float x;
    memcpy(&x, at, sizeof x);
    *v = x;
  } else {
    memcpy(v, at, sizeof *v);
  }
  return CLT_OK;
}

/* A string option: not present (an unallocated component) is NULL; a value
 * longer than the field holds (a path beyond PATH_MAX) is refused here,
 * naming it, rather than cut. */
int clt_f_options_set_string(clt_f_options *h, const char *name, const char *s, int64_t len, int present) {
  int i;
  const field *f = find(name, F_STR, F_STR, &i);
  if (!f) return CLT_EINTERNAL;
  char *copy = NULL;
  if (present) {
    if (len < 0 || (f->max_len && (uint64_t)len > f->max_len))
      return fail(CLT_EINVAL, "opts%%%s is %lld characters long: it may have at most %lld (trailing blanks trimmed)",
                  name, (long long)len, (long long)f->max_len);
    if (!(copy = malloc((size_t)len + 1)))
      return fail(CLT_ENOMEM, "opts%%%s: out of memory for %lld bytes", name, (long long)len);
    memcpy(copy, s, (size_t)len);
    copy[len] = '\0';
  }
  free(h->strings[i]);
  h->strings[i] = copy;
  memcpy((char *)&h->o + f->offset, &copy, sizeof copy);
  return CLT_OK;
}

int clt_f_options_set_reals(clt_f_options *h, const char *name, const double *v, int64_t n, int present) {
  int i;
  const field *f = find(name, F_REALS, F_REALS, &i);
  if (!f) return CLT_EINTERNAL;
  double *copy = NULL;
  if (present) {
    if (n < 0 || n > INT_MAX) return fail(CLT_EINVAL, "opts%%%s has %lld values: at most %d", name, (long long)n, INT_MAX);
    if (!(copy = malloc(((size_t)n ? (size_t)n : 1) * sizeof *copy)))
      return fail(CLT_ENOMEM, "opts%%%s: out of memory for %lld values", name, (long long)n);
    if (n) memcpy(copy, v, (size_t)n * sizeof *copy);
  }
  free(h->reals[i]);
  h->reals[i] = copy;
  int count = present ? (int)n : 0;
  const double *p = copy;
  memcpy((char *)&h->o + f->offset, &p, sizeof p);
  memcpy((char *)&h->o + f->count_offset, &count, sizeof count);
  return CLT_OK;
}

/* The library calls this on rank 0 for every event; it hands the module a
 * clt_f_event, which the module turns into its clt_event_t. */
static void event_trampoline(const clt_train_event *ev, void *user) {
  const clt_f_options *h = user;
  clt_f_event f = {
      .epoch = ev->epoch, .epochs = ev->epochs, .step = ev->step, .steps_total = ev->steps_total,
      .step_in_epoch = ev->step_in_epoch, .steps_per_epoch = ev->steps_per_epoch, .skipped = ev->skipped,
      .loss = ev->loss, .accuracy = ev->accuracy, .lr = ev->lr, .samples_per_s = ev->samples_per_s,
      .elapsed_s = ev->elapsed_s, .eta_s = ev->eta_s, .test_loss = ev->test_loss,
      .test_accuracy = ev->test_accuracy, .grad_norm = ev->grad_norm, .comm_s = ev->comm_s,
      .comm_hidden = ev->comm_hidden, .loss_scale = ev->loss_scale, .tokens_per_s = ev->tokens_per_s,
      .prefetch_wait_s = ev->prefetch_wait_s, .flops_per_sample = ev->flops_per_sample,
      .comm_bytes = ev->comm_bytes, .shares = ev->shares, .throughput = ev->throughput, .fixed_s = ev->fixed_s,
      .per_sample_s = ev->per_sample_s, .flops = ev->flops, .peak_flops = ev->peak_flops, .mfu = ev->mfu,
      .kind = (int32_t)ev->kind, .nreplicas = ev->nreplicas};
  h->fortran_fn(&f, h->fortran_user);
}

/* fn NULL: no callback. */
void clt_f_options_set_callback(clt_f_options *h, clt_f_event_fn fn, void *user) {
  h->fortran_fn = fn;
  h->fortran_user = user;
  h->o.callback = fn ? event_trampoline : NULL;
  h->o.callback_user = fn ? h : NULL;
}

int clt_f_trainer_create(const clt_model *m, const clt_devices *devs, clt_comm *comm, const clt_f_options *h,
                         clt_trainer **out) {
  return clt_trainer_create(m, devs, comm, h ? &h->o : NULL, out);
}

/* clt_data_options, whose strings are NULL where the Fortran caller gave
 * none. */
int clt_f_dataset_open(const char *path, const char *labels, const char *target, const char *features,
                       int regression, int num_classes, clt_dataset **out) {
  clt_data_options o = {.labels = labels, .target = target, .features = features, .regression = regression,
                        .num_classes = num_classes};
  return clt_dataset_open(path, &o, out);
}

/* clt_device_info is a struct of fixed-size strings and sizes that the
 * module does not mirror either; these give what a Fortran program prints. */
const char *clt_f_device_name(const clt_devices *devs, int i) {
  const clt_device_info *info = clt_devices_info(devs, i);
  return info ? info->name : NULL;
}

int clt_f_device_type(const clt_devices *devs, int i) {
  const clt_device_info *info = clt_devices_info(devs, i);
  return info ? (int)info->type : 0;
}
