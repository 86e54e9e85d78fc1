/*
 * metrics.c: rank 0's records of a run: the events as JSON Lines (--metrics)
 * and TensorBoard scalars (--tensorboard). Every JSON record starts with
 * its UTC time ("time": "2026-12-07T17:20:01.123Z"), and every number is
 * written as the shortest text that reads back to the same value: a value
 * that is a float (the learning rate 0.01f, a loss summed in float) as the
 * shortest text of that float ("0.01", not "0.0099999997764825821"), any
 * other double as the shortest text of the double. jansson itself prints
 * "%.17g", hence our own small writer of its values.
 */
#include "io/tensorboard.h"
#include "train/trainer.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* NaN becomes JSON null. */
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

void clt__shortest_number(double v, char *buf, size_t len) {
  if (!isfinite(v)) {
    snprintf(buf, len, "null");
    return;
  }
  float f = (float)v;
  int p = 1;
  if ((double)f == v) { /* a float's value: the fewest digits that read back as that float */
    for (; p < 9; p++) {
      snprintf(buf, len, "%.*g", p, (double)f);
      if (strtof(buf, NULL) == f) break;
    }
  } else {
    for (; p < 17; p++) {
      snprintf(buf, len, "%.*g", p, v);
      if (strtod(buf, NULL) == v) break;
    }
  }
  snprintf(buf, len, "%.*e", p - 1, v);
  /* those digits without an exponent where Python's repr has none
   * (1e-4 <= |v| < 1e16): 10.0, not 1e+01 */
  int exp10 = atoi(strchr(buf, 'e') + 1);
  if (exp10 >= -4 && exp10 < 16) snprintf(buf, len, "%.*f", p - 1 - exp10 > 0 ? p - 1 - exp10 : 0, v);
  else snprintf(buf, len, "%.*g", p, v);
  /* stay a JSON real: "1" -> "1.0" */
  if (!strpbrk(buf, ".eEn") && strlen(buf) + 3 <= len) strcat(buf, ".0");
}

static int write_value(FILE *f, const json_t *v) {
  char b[64];
  switch (json_typeof(v)) {
  case JSON_OBJECT: {
    const char *key;
    json_t *val;
    int first = 1;
    if (fputc('{', f) == EOF) return -1;
    json_object_foreach((json_t *)v, key, val) {
      json_t *k = json_string(key);
      int bad = !k || (!first && fputc(',', f) == EOF) || json_dumpf(k, f, JSON_ENCODE_ANY) < 0 ||
                fputc(':', f) == EOF || write_value(f, val) < 0;
      json_decref(k);
      if (bad) return -1;
      first = 0;
    }
    return fputc('}', f) == EOF ? -1 : 0;
  }
  case JSON_ARRAY:
    if (fputc('[', f) == EOF) return -1;
    for (size_t i = 0; i < json_array_size(v); i++)
      if ((i && fputc(',', f) == EOF) || write_value(f, json_array_get(v, i)) < 0) return -1;
    return fputc(']', f) == EOF ? -1 : 0;
  case JSON_REAL:
    clt__shortest_number(json_real_value(v), b, sizeof b);
    return fputs(b, f) == EOF ? -1 : 0;
  default: /* strings (escaped by jansson), integers, true, false, null */
    return json_dumpf(v, f, JSON_ENCODE_ANY | JSON_COMPACT) < 0 ? -1 : 0;
  }
}

/* "2026-12-07T17:20:01.123Z" */
static void utc_now(char *buf, size_t len) {
  struct timeval tv;
  struct tm tm;
  gettimeofday(&tv, NULL);
  time_t s = tv.tv_sec;
  gmtime_r(&s, &tm);
  char day[32];
  strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%03dZ", day, (int)(tv.tv_usec / 1000));
}

int clt__trainer_metrics_write(clt_trainer *t, FILE *metrics, json_t *o) {
  char when[48];
  utc_now(when, sizeof when);
  json_t *rec = json_object();
  json_object_set_new(rec, "time", json_string(when));
  json_object_update(rec, o); /* after the time, in o's order */
  json_decref(o);
  errno = 0;
  int bad = write_value(metrics, rec) < 0 || fputc('\n', metrics) == EOF || fflush(metrics) == EOF;
  int err = errno;
  json_decref(rec);
  if (!bad) return CLT_OK;
  return clt__error(CLT_EIO, "writing metrics to %s failed: %s", t->opts.metrics_path,
                    err ? strerror(err) : "the write came short");
}

/* The event's scalars for TensorBoard, named as in the JSON Lines (an
 * epoch's under epoch/). */
static int emit_tb(clt__tb *tb, const clt_train_event *ev) {
  enum { FIXED = 16, MAX_TAGS = FIXED + 6 * 64 };
  const char *tags[MAX_TAGS];
  double v[MAX_TAGS];
  char names[6 * 64][32];
  int n = 0, step = ev->kind == CLT_EVENT_STEP;
#define TB(tag, x) (tags[n] = (tag), v[n++] = (x))
  TB(step ? "loss" : "epoch/loss", ev->loss);
  TB(step ? "accuracy" : "epoch/accuracy", ev->accuracy);
  TB(step ? "test_loss" : "epoch/test_loss", ev->test_loss);
  TB(step ? "test_accuracy" : "epoch/test_accuracy", ev->test_accuracy);
  if (step) {
    TB("lr", ev->lr);
    TB("samples_per_s", ev->samples_per_s);
    TB("tokens_per_s", ev->tokens_per_s);
    TB("grad_norm", ev->grad_norm);
    TB("comm_s", ev->comm_s);
    TB("comm_hidden", ev->comm_hidden);
    TB("prefetch_wait_s", ev->prefetch_wait_s);
    TB("loss_scale", ev->loss_scale);
    TB("skipped", (double)ev->skipped);
    for (int r = 0; r < ev->nreplicas && r < 64; r++) {
      snprintf(names[2 * r], sizeof names[0], "replica%d/share", r);
      snprintf(names[2 * r + 1], sizeof names[0], "replica%d/samples_per_s", r);
      TB(names[2 * r], (double)ev->shares[r]);
      TB(names[2 * r + 1], ev->throughput[r]);
    }
    for (int r = 0; ev->fixed_s && ev->per_sample_s && r < ev->nreplicas && r < 64; r++) {
      snprintf(names[128 + 2 * r], sizeof names[0], "replica%d/fixed_s", r);
      snprintf(names[128 + 2 * r + 1], sizeof names[0], "replica%d/per_sample_s", r);
      TB(names[128 + 2 * r], ev->fixed_s[r]);
      TB(names[128 + 2 * r + 1], ev->per_sample_s[r]);
    }
  }
  for (int r = 0; ev->flops && ev->mfu && r < ev->nreplicas && r < 64; r++) {
    snprintf(names[256 + 2 * r], sizeof names[0], "%sreplica%d/flops", step ? "" : "epoch/", r);
    snprintf(names[256 + 2 * r + 1], sizeof names[0], "%sreplica%d/mfu", step ? "" : "epoch/", r);
    TB(names[256 + 2 * r], ev->flops[r]);
    TB(names[256 + 2 * r + 1], ev->mfu[r]);
  }
#undef TB
  return clt__tb_scalars(tb, ev->step, n, tags, v);
}

/* Per replica arrays of the event: FLOP/s, peak and MFU. */
static void flops_fields(json_t *o, const clt_train_event *ev) {
  if (!ev->flops || !ev->peak_flops || !ev->mfu) return;
  json_t *fl = json_array(), *pk = json_array(), *mfu = json_array();
  for (int r = 0; r < ev->nreplicas; r++) {
    json_array_append_new(fl, num(ev->flops[r]));
    json_array_append_new(pk, num(ev->peak_flops[r]));
    json_array_append_new(mfu, num(ev->mfu[r]));
  }
  json_object_set_new(o, "flops_per_sample", num(ev->flops_per_sample));
  json_object_set_new(o, "flops", fl);
  json_object_set_new(o, "peak_flops", pk);
  json_object_set_new(o, "mfu", mfu);
}

static void step_fields(json_t *o, const clt_train_event *ev, const char *test_acc) {
  if (isfinite(ev->test_loss)) { /* an evaluation of eval_every */
    json_object_set_new(o, "test_loss", num(ev->test_loss));
    json_object_set_new(o, test_acc, num(ev->test_accuracy));
  }
  if (isfinite(ev->tokens_per_s)) json_object_set_new(o, "tokens_per_s", num(ev->tokens_per_s));
  json_object_set_new(o, "grad_norm", num(ev->grad_norm));
  json_object_set_new(o, "comm_s", num(ev->comm_s));
  json_object_set_new(o, "comm_hidden", num(ev->comm_hidden));
  json_object_set_new(o, "comm_bytes", num(ev->comm_bytes));
  json_object_set_new(o, "prefetch_wait_s", num(ev->prefetch_wait_s));
  json_t *sh = json_array(), *tp = json_array();
  for (int r = 0; r < ev->nreplicas; r++) {
    json_array_append_new(sh, json_integer(ev->shares[r]));
    json_array_append_new(tp, num(ev->throughput[r]));
  }
  json_object_set_new(o, "shares", sh);
  json_object_set_new(o, "throughput", tp);
  /* the replicas at 0 samples, said outright; and auto's cost models */
  json_t *idle = json_array();
  for (int r = 0; r < ev->nreplicas; r++)
    if (ev->shares[r] == 0) json_array_append_new(idle, json_integer(r));
  json_object_set_new(o, "idle_replicas", idle);
  if (ev->fixed_s && ev->per_sample_s) {
    json_t *fx = json_array(), *ps = json_array();
    for (int r = 0; r < ev->nreplicas; r++) {
      json_array_append_new(fx, num(ev->fixed_s[r]));
      json_array_append_new(ps, num(ev->per_sample_s[r]));
    }
    json_object_set_new(o, "fixed_s", fx);
    json_object_set_new(o, "per_sample_s", ps);
  }
  json_object_set_new(o, "loss_scale", num(ev->loss_scale));
  json_object_set_new(o, "skipped", json_integer(ev->skipped));
}

int clt__trainer_emit(clt_trainer *t, const clt__sinks *out, const clt_train_event *ev) {
  if (t->rank != 0) return CLT_OK;
  if (t->opts.callback) t->opts.callback(ev, t->opts.callback_user);
  if (ev->kind == CLT_EVENT_PROGRESS) return CLT_OK; /* the callback's alone */
  if (out->tb) {
    int rc = emit_tb(out->tb, ev);
    if (rc < 0) return rc;
  }
  FILE *metrics = out->metrics;
  if (!metrics) return CLT_OK;
  const int reg = clt__trainer_regression(t); /* its metric is the RMSE */
  const char *acc = reg ? "rmse" : "accuracy", *test_acc = reg ? "test_rmse" : "test_accuracy";
  json_t *o = json_object();
  json_object_set_new(o, "event", json_string(ev->kind == CLT_EVENT_STEP ? "step" : "epoch"));
  json_object_set_new(o, "epoch", json_integer(ev->epoch));
  json_object_set_new(o, "step", json_integer(ev->step));
  json_object_set_new(o, "loss", num(ev->loss));
  json_object_set_new(o, acc, num(ev->accuracy));
  json_object_set_new(o, "lr", num(ev->lr));
  json_object_set_new(o, "samples_per_s", num(ev->samples_per_s));
  json_object_set_new(o, "elapsed_s", num(ev->elapsed_s));
  if (ev->kind == CLT_EVENT_STEP) {
    step_fields(o, ev, test_acc);
  } else {
    json_object_set_new(o, "test_loss", num(ev->test_loss));
    json_object_set_new(o, test_acc, num(ev->test_accuracy));
  }
  flops_fields(o, ev);
  return clt__trainer_metrics_write(t, metrics, o);
}
