/*
 * options_check.c: the C side of test_fortran's options test. The Fortran
 * test sets every component of clt_options_t to a value other than the
 * default, makes the library's clt_train_options of it (clt_options_to_c)
 * and reads each field back here, by the C member itself (this file's own
 * table, written against cltrain.h, not the shim's), so a row of the shim
 * that writes the wrong place shows. clt_test_options_audit then holds the
 * shim's table (clt_f_options_field, src/fortran/cltrain_shim.c) to the
 * struct:
 *   - its rows, sorted by offset, cover every byte of clt_train_options
 *     but alignment padding (less than 8 bytes, before an 8-aligned
 *     field), so a field appended to the struct without a row, or a row
 *     that lost its field, fails;
 *   - it has the rows this file has, at the same places;
 *   - every row's bytes differ from clt_train_options_defaults': every
 *     field was reached from Fortran.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain.h>

int clt_f_options_field(int i, const char **name, const char **c_name, size_t *offset, size_t *size, int *type);
int clt_test_options_audit(const clt_train_options *o);
int clt_test_options_differ(const clt_train_options *a, const clt_train_options *b);
int clt_test_option_int(const clt_train_options *o, const char *name, int64_t *v);
int clt_test_option_real(const clt_train_options *o, const char *name, double *v);
int clt_test_option_string(const clt_train_options *o, const char *name, char *buf, int cap);
int clt_test_option_reals(const clt_train_options *o, const char *name, double *buf, int cap);
int clt_test_option_callback(const clt_train_options *o);

/* How to read a field: an integer of its size, a float, a double, a
 * string, an array of doubles (with its count), the callback and its
 * user pointer. */
enum { INT, FLT, DBL, STR, ARR, FN, PTR };

typedef struct {
  const char *name; /* the Fortran component */
  size_t offset, size;
  int how;
  size_t count_offset; /* ARR */
} row;

#define R(fname, f, how) {fname, offsetof(clt_train_options, f), sizeof(((clt_train_options *)0)->f), how, 0}
#define A(fname, f, n) \
  {fname, offsetof(clt_train_options, f), sizeof(((clt_train_options *)0)->f), ARR, offsetof(clt_train_options, n)}
static const row rows[] = {
    R("batch", batch, INT),
    R("epochs", epochs, INT),
    R("max_steps", max_steps, INT),
    R("accumulate", accumulate, INT),
    R("optimizer", optimizer.kind, INT),
    R("momentum", optimizer.momentum, FLT),
    R("nesterov", optimizer.nesterov, INT),
    R("weight_decay", optimizer.weight_decay, FLT),
    R("beta1", optimizer.beta1, FLT),
    R("beta2", optimizer.beta2, FLT),
    R("eps", optimizer.eps, FLT),
    R("schedule", schedule.kind, INT),
    R("lr", schedule.lr, FLT),
    R("warmup_steps", schedule.warmup_steps, INT),
    R("total_steps", schedule.total_steps, INT),
    R("step_size", schedule.step_size, INT),
    R("gamma", schedule.gamma, FLT),
    R("min_lr", schedule.min_lr, FLT),
    R("clip", clip, FLT),
    R("decay_all", decay_all, INT),
    R("seed", seed, INT),
    R("eval_every", eval_every, INT),
    R("log_every", log_every, INT),
    R("metrics_path", metrics_path, STR),
    R("tensorboard_dir", tensorboard_dir, STR),
    R("drop_last", drop_last, INT),
    R("callback", callback, FN),
    R("callback_user", callback_user, PTR),
    R("bucket_mb", bucket_mb, DBL),
    R("balance", balance, INT),
    A("balance_weights", balance_weights, balance_nweights),
    R("balance_every", balance_every, INT),
    R("balance_min_share", balance_min_share, INT),
    R("check_every", check_every, INT),
    R("checkpoint_dir", checkpoint_dir, STR),
    R("checkpoint_every", checkpoint_every, INT),
    R("checkpoint_keep", checkpoint_keep, INT),
    R("precision", precision, INT),
    R("loss_scale", loss_scale, FLT),
    R("loss_scale_window", loss_scale_window, INT),
    R("max_skips", max_skips, INT),
    R("max_device_memory", max_device_memory, INT),
    R("zero", zero, INT),
    R("pipeline", pipeline, INT),
    R("micro_batches", micro_batches, INT),
    R("pipeline_schedule", pipeline_schedule, INT),
    R("stages", stages, STR),
    R("checkpoint_one_file", checkpoint_one_file, INT),
    R("progress_s", progress_s, DBL),
    R("run_json", run_json, STR),
    R("offload", offload, INT),
    R("shard_by", shard_by, INT),
    A("shard_weights", shard_weights, shard_nweights),
    R("recompute", recompute, INT),
};
#define NROWS (sizeof rows / sizeof *rows)

static const row *find(const char *name, int how) {
  for (size_t i = 0; i < NROWS; i++)
    if (!strcmp(rows[i].name, name) && (rows[i].how == how || (how == FLT && rows[i].how == DBL))) return &rows[i];
  printf("options_check: no field %s of that kind in the test's table\n", name);
  return NULL;
}

typedef struct {
  size_t offset, size;
  const char *name;
} span;

static int by_offset(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

int clt_test_options_audit(const clt_train_options *o) {
  int bad = 0;
  span sp[256];
  int n = 0;
  const char *name, *c_name;
  size_t offset, size;
  int type;
  clt_train_options d;
  clt_train_options_defaults(&d);
  for (int i = 0; clt_f_options_field(i, &name, &c_name, &offset, &size, &type) == CLT_OK; i++) {
    if (n == 256) {
      printf("options_check: the shim's table has more than 256 rows\n");
      return bad + 1;
    }
    sp[n++] = (span){offset, size, c_name};
    if (!memcmp((const char *)o + offset, (const char *)&d + offset, size)) {
      printf("options_check: clt_train_options.%s (opts%%%s) still holds its default: the Fortran options never "
             "set it\n", c_name, name);
      bad++;
    }
    size_t k = 0;
    while (k < NROWS && !(rows[k].offset == offset || (rows[k].how == ARR && rows[k].count_offset == offset))) k++;
    if (k == NROWS || strcmp(rows[k].name, name)) {
      printf("options_check: the shim's row opts%%%s (clt_train_options.%s) is not this test's row at its offset "
             "%zu (%s)\n", name, c_name, offset, k == NROWS ? "none" : rows[k].name);
      bad++;
    }
  }
  if (n < (int)NROWS) {
    printf("options_check: the shim's table has %d rows for this test's %zu fields\n", n, NROWS);
    bad++;
  }
  qsort(sp, (size_t)n, sizeof *sp, by_offset);
  size_t end = 0;
  for (int i = 0; i < n; i++) {
    size_t gap = sp[i].offset - end;
    if (sp[i].offset < end) {
      printf("options_check: clt_train_options.%s (offset %zu) overlaps the row before it\n", sp[i].name,
             sp[i].offset);
      bad++;
    } else if (gap && !(gap < 8 && sp[i].offset % 8 == 0)) {
      printf("options_check: clt_train_options has %zu bytes before .%s (offset %zu) that no row of the Fortran "
             "shim covers: a field without its Fortran option (src/fortran/cltrain_shim.c)\n", gap, sp[i].name,
             sp[i].offset);
      bad++;
    }
    if (sp[i].offset + sp[i].size > end) end = sp[i].offset + sp[i].size;
  }
  if (sizeof(clt_train_options) - end >= 8 || (sizeof(clt_train_options) > end && end % 8 == 0)) {
    printf("options_check: clt_train_options has %zu bytes after its last row (of %zu): a field appended without "
           "its Fortran option (src/fortran/cltrain_shim.c, cltrain.f90's clt_options_t)\n",
           sizeof(clt_train_options) - end, sizeof(clt_train_options));
    bad++;
  }
  return bad;
}

/* The first row (1-based) where a and b differ (strings compared as
 * strings, arrays by value); 0 when none. */
int clt_test_options_differ(const clt_train_options *a, const clt_train_options *b) {
  for (size_t i = 0; i < NROWS; i++) {
    const char *pa = (const char *)a + rows[i].offset, *pb = (const char *)b + rows[i].offset;
    if (rows[i].how == STR) {
      const char *sa, *sb;
      memcpy(&sa, pa, sizeof sa);
      memcpy(&sb, pb, sizeof sb);
      if ((sa == NULL) != (sb == NULL) || (sa && strcmp(sa, sb))) return (int)i + 1;
    } else if (rows[i].how != ARR && memcmp(pa, pb, rows[i].size)) {
      return (int)i + 1;
    }
  }
  return 0;
}

int clt_test_option_int(const clt_train_options *o, const char *name, int64_t *v) {
  const row *r = find(name, INT);
  if (!r) return -1;
  if (r->size == sizeof(int)) {
    int i;
    memcpy(&i, (const char *)o + r->offset, sizeof i);
    *v = i;
  } else {
    memcpy(v, (const char *)o + r->offset, sizeof *v);
  }
  return 0;
}

int clt_test_option_real(const clt_train_options *o, const char *name, double *v) {
  const row *r = find(name, FLT);
  if (!r) return -1;
  if (r->how == FLT) {
    float f;
    memcpy(&f, (const char *)o + r->offset, sizeof f);
    *v = f;
  } else {
    memcpy(v, (const char *)o + r->offset, sizeof *v);
  }
  return 0;
}

/* The string's length (its first cap - 1 bytes into buf, NUL-ended), or
 * -1 for NULL. */
int clt_test_option_string(const clt_train_options *o, const char *name, char *buf, int cap) {
  const row *r = find(name, STR);
  const char *s;
  if (!r) return -2;
  memcpy(&s, (const char *)o + r->offset, sizeof s);
  if (!s) return -1;
  snprintf(buf, (size_t)cap, "%s", s);
  return (int)strlen(s);
}

/* The array's count (its first cap values into buf), or -1 for NULL. */
int clt_test_option_reals(const clt_train_options *o, const char *name, double *buf, int cap) {
  const row *r = find(name, ARR);
  const double *p;
  int n;
  if (!r) return -2;
  memcpy(&p, (const char *)o + r->offset, sizeof p);
  memcpy(&n, (const char *)o + r->count_offset, sizeof n);
  if (!p) return -1;
  for (int i = 0; i < n && i < cap; i++) buf[i] = p[i];
  return n;
}

/* Call the options' callback as fit would, with a STEP event of step 7 on
 * two replicas (shares 3 and 4): 0, or -1 when there is none. */
int clt_test_option_callback(const clt_train_options *o) {
  static const int64_t shares[2] = {3, 4};
  static const double throughput[2] = {10, 20};
  clt_train_event ev;
  if (!o->callback) return -1;
  memset(&ev, 0, sizeof ev);
  ev.kind = CLT_EVENT_STEP;
  ev.epoch = 1, ev.epochs = 2, ev.step = 7, ev.steps_total = 9;
  ev.loss = 0.5, ev.accuracy = 0.75, ev.lr = 0.125;
  ev.nreplicas = 2, ev.shares = shares, ev.throughput = throughput;
  o->callback(&ev, o->callback_user);
  return 0;
}
