/*
 * trainer.c: a trainer's replicas (one per device of this rank), the
 * agreement check across ranks, the parameter broadcast, the optimizer step
 * applied identically on every replica, evaluation split across all
 * replicas, and the small collectives the other trainer files share (sums,
 * rank 0's outcome, everyone's).
 */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <cltrain/opencl.h>

void clt_train_options_defaults(clt_train_options *o) {
  memset(o, 0, sizeof *o);
  o->batch = 64;
  o->epochs = 10;
  o->accumulate = 1;
  clt_optimizer_defaults(CLT_OPT_SGD, &o->optimizer);
  o->schedule.kind = CLT_SCHED_CONSTANT;
  o->schedule.lr = 0.01f;
  o->schedule.gamma = 0.1f;
  o->seed = 42;
  o->log_every = 50;
  o->bucket_mb = 1.0;
  o->balance = CLT_BALANCE_EQUAL;
  o->balance_every = 10;
  o->check_every = 100;
  o->checkpoint_keep = 3;
  o->precision = CLT_F32;
  o->loss_scale = 65536.0f;
  o->loss_scale_window = 2000;
  o->max_skips = 20;
}

static int check_options(const clt_train_options *o) {
  if (o->batch < 1) return clt__error(CLT_EINVAL, "the batch size must be at least 1, not %lld", (long long)o->batch);
  if (o->epochs < 1) return clt__error(CLT_EINVAL, "epochs must be at least 1, not %d", o->epochs);
  if (o->accumulate < 1 || o->batch % o->accumulate)
    return clt__error(CLT_EINVAL, "--accumulate %d must be at least 1 and divide the batch size %lld", o->accumulate,
                      (long long)o->batch);
  if (!(o->schedule.lr > 0) || !isfinite(o->schedule.lr))
    return clt__error(CLT_EINVAL, "the learning rate must be a positive number, not %g", o->schedule.lr);
  if (!(o->schedule.min_lr >= 0 && o->schedule.min_lr <= o->schedule.lr))
    return clt__error(CLT_EINVAL, "--min-lr %g must be from 0 to the learning rate %g: the cosine schedule falls from "
                      "--lr to --min-lr", o->schedule.min_lr, o->schedule.lr);
  if (!(o->schedule.gamma > 0 && o->schedule.gamma <= 1))
    return clt__error(CLT_EINVAL, "--gamma %g must be above 0 and at most 1: the step schedule multiplies the "
                      "rate by it (0 would stop training after the first decay)", o->schedule.gamma);
  if (!(o->clip >= 0)) return clt__error(CLT_EINVAL, "--clip must be 0 (off) or positive, not %g", o->clip);
  if (!(o->bucket_mb >= 0 && o->bucket_mb <= 1e6)) return clt__error(CLT_EINVAL, "--bucket-mb must be from 0 to 1e6");
  if (o->balance == CLT_BALANCE_AUTO && o->balance_every < 1)
    return clt__error(CLT_EINVAL, "--balance auto needs a re-split interval of at least 1 step");
  if (o->checkpoint_every < 0) return clt__error(CLT_EINVAL, "--checkpoint-every must be at least 0");
  if (o->precision != CLT_F32 && o->precision != CLT_F16)
    return clt__error(CLT_EINVAL, "the precision must be fp32 or fp16, not %s", clt_dtype_name(o->precision));
  if (o->precision == CLT_F16) {
    if (!(o->loss_scale >= 1) || !isfinite(o->loss_scale))
      return clt__error(CLT_EINVAL, "the loss scale must be a finite number of at least 1, not %g", o->loss_scale);
    if (o->loss_scale_window < 1)
      return clt__error(CLT_EINVAL, "the loss scale window must be at least 1 step, not %lld",
                        (long long)o->loss_scale_window);
    if (o->max_skips < 1)
      return clt__error(CLT_EINVAL, "the most skipped steps in a row must be at least 1, not %d", o->max_skips);
  }
  if (o->checkpoint_dir && !o->checkpoint_dir[0])
    return clt__error(CLT_EINVAL, "the checkpoint directory is empty: name one, or give none (NULL)");
  if (o->checkpoint_keep < 0) return clt__error(CLT_EINVAL, "--keep must be at least 0 (0 keeps every checkpoint)");
  const clt_optimizer_config *c = &o->optimizer;
  if (!(c->momentum >= 0 && c->momentum < 1)) return clt__error(CLT_EINVAL, "momentum must be in [0, 1), not %g", c->momentum);
  if (!(c->weight_decay >= 0)) return clt__error(CLT_EINVAL, "weight decay must be at least 0, not %g", c->weight_decay);
  if (!(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 && c->beta2 < 1 && c->eps > 0))
    return clt__error(CLT_EINVAL, "Adam needs betas in [0, 1) and eps > 0");
  return CLT_OK;
}

int clt__trainer_sum(clt_trainer *t, double *vals, int n) {
  if (t->nranks == 1) return CLT_OK;
  double *all = clt__calloc((size_t)t->nranks * n, sizeof *all);
  if (!all) return CLT_ENOMEM;
  int rc = clt_allgather(t->comm, vals, (size_t)n * sizeof *vals, all);
  if (rc == CLT_OK)
    for (int i = 0; i < n; i++) {
      vals[i] = 0;
      for (int r = 0; r < t->nranks; r++) vals[i] += all[(size_t)r * n + i];
    }
  free(all);
  return rc;
}

int clt__trainer_share_status(clt_trainer *t, int rc) {
  struct {
    int32_t rc;
    char msg[2040];
  } st;
  if (t->nranks == 1) return rc;
  memset(&st, 0, sizeof st);
  st.rc = rc;
  if (t->rank == 0 && rc < 0) clt__strlcpy(st.msg, clt_last_error(), sizeof st.msg);
  int brc = clt_bcast(t->comm, &st, sizeof st, 0);
  if (brc < 0) return brc;
  if (t->rank != 0 && st.rc < 0) return clt__error(st.rc, "%s", st.msg);
  return st.rc;
}

int clt__trainer_all_ok(clt_trainer *t, int rc, const char *what) {
  int32_t mine = rc, *all;
  if (t->nranks == 1) return rc;
  if (!(all = calloc((size_t)t->nranks, sizeof *all))) return clt__error(CLT_ENOMEM, "%s: out of memory", what);
  int grc = clt_allgather(t->comm, &mine, sizeof mine, all);
  for (int r = 0; grc == CLT_OK && r < t->nranks; r++)
    if (all[r] < 0) {
      grc = r == t->rank ? all[r] : clt__error(all[r], "%s failed on rank %d: %s", what, r, clt_strerror(all[r]));
      break;
    }
  free(all);
  return grc;
}

/* What must agree across ranks, compared field by field at start. */
typedef struct agreement {
  int64_t params, batch, accumulate, epochs, max_steps, seed, optimizer, checkpoints;
  uint32_t spec_crc;
  float lr;
} agreement;

static int check_agreement(clt_trainer *t) {
  if (t->nranks == 1) return CLT_OK;
  const clt_train_options *o = &t->opts;
  agreement mine = {clt_model_param_count(t->model), o->batch, o->accumulate, o->epochs, o->max_steps,
                    (int64_t)o->seed, o->optimizer.kind, o->checkpoint_dir ? o->checkpoint_every : -1, 0,
                    o->schedule.lr};
  const char *text = clt_model_text(t->model);
  mine.spec_crc = (uint32_t)crc32(0, (const Bytef *)text, (uInt)strlen(text));
  agreement *all = clt__calloc(t->nranks, sizeof *all);
  if (!all) return CLT_ENOMEM;
  int rc = clt_allgather(t->comm, &mine, sizeof mine, all);
  for (int r = 1; rc == CLT_OK && r < t->nranks; r++) {
    const agreement *a = &all[0], *b = &all[r];
#define FIELD(f, what)                                                                                            \
  if (a->f != b->f) {                                                                                             \
    rc = clt__error(CLT_EMISMATCH, "rank %d disagrees with rank 0 on %s (%lld vs %lld); every rank must run the " \
                    "same model and options", r, what, (long long)b->f, (long long)a->f);                         \
    break;                                                                                                         \
  }
    FIELD(spec_crc, "the model spec (CRC32 of its text)")
    FIELD(params, "the parameter count")
    FIELD(batch, "the batch size")
    FIELD(accumulate, "--accumulate")
    FIELD(epochs, "the number of epochs")
    FIELD(max_steps, "--max-steps")
    FIELD(seed, "the seed")
    FIELD(optimizer, "the optimizer")
    FIELD(checkpoints, "checkpoints (-1: none, else --checkpoint-every)")
#undef FIELD
    if (a->lr != b->lr) {
      rc = clt__error(CLT_EMISMATCH, "rank %d disagrees with rank 0 on the learning rate (%g vs %g)", r, b->lr, a->lr);
      break;
    }
  }
  free(all);
  return rc;
}

/* The first split of the global micro-batch: equal, or by given weights
 * (auto starts equal and learns). */
static int initial_shares(clt_trainer *t) {
  const clt_train_options *o = &t->opts;
  t->shares = clt__calloc(t->nreplicas, sizeof *t->shares);
  t->throughput = clt__calloc(t->nreplicas, sizeof *t->throughput);
  t->local_rate = clt__calloc(t->nlocal, sizeof *t->local_rate);
  double *w = clt__calloc(t->nreplicas, sizeof *w);
  if (!t->shares || !t->throughput || !t->local_rate || !w) {
    free(w);
    return CLT_ENOMEM;
  }
  int rc = CLT_OK;
  if (o->balance == CLT_BALANCE_WEIGHTS) {
    if (!o->balance_weights || o->balance_nweights != t->nreplicas)
      rc = clt__error(CLT_EINVAL, "--balance gives %d weights but the job has %d replicas (one weight per replica, "
                      "rank by rank)", o->balance_nweights, t->nreplicas);
    for (int r = 0; rc == CLT_OK && r < t->nreplicas; r++) {
      w[r] = o->balance_weights[r];
      if (!(w[r] > 0) || !isfinite(w[r]))
        rc = clt__error(CLT_EINVAL, "--balance weight %d is %g; weights must be positive numbers", r + 1, w[r]);
    }
  } else {
    for (int r = 0; r < t->nreplicas; r++) w[r] = 1.0;
  }
  if (rc == CLT_OK) rc = clt_shares_from_weights(t->nreplicas, w, t->micro_batch, 1, t->shares);
  free(w);
  return rc;
}

/* Buckets in backward order, each at least bucket_mb (the last may be
 * smaller), cut at layer boundaries; one all-reduce plan each. */
static int make_buckets(clt_trainer *t) {
  const clt_model_spec *s = t->model->spec;
  int L = s->nlayers, rc = CLT_OK;
  int *closed_by = clt__calloc(L, sizeof *closed_by);
  t->bucket_lo = clt__calloc(L, sizeof *t->bucket_lo);
  t->bucket_hi = clt__calloc(L, sizeof *t->bucket_hi);
  t->plans = clt__calloc(L, sizeof *t->plans);
  if (!closed_by || !t->bucket_lo || !t->bucket_hi || !t->plans) {
    free(closed_by);
    return CLT_ENOMEM;
  }
  int64_t limit = (int64_t)(t->opts.bucket_mb * 1048576.0 / 4.0), hi = s->param_count, lo = hi;
  int last_trainable = -1;
  for (int i = 0; i < L; i++) {
    closed_by[i] = -1;
    if (s->layers[i].weight_count) last_trainable = i;
  }
  for (int i = L - 1; i >= 0; i--) {
    const clt_layer_spec *l = &s->layers[i];
    if (!l->weight_count) continue;
    lo = l->param_offset;
    int first = 1; /* is i the lowest trainable layer? */
    for (int j = 0; j < i; j++) first &= !s->layers[j].weight_count;
    if (limit <= 0 ? first : (hi - lo >= limit || first)) {
      closed_by[i] = t->nbuckets;
      t->bucket_lo[t->nbuckets] = lo;
      t->bucket_hi[t->nbuckets] = hi;
      t->nbuckets++;
      hi = lo;
    }
  }
  (void)last_trainable;
  /* In f16, gradients travel as f16 (half the bytes), rounded per bucket
   * as its backward ends and summed in f32 on the host. */
  int wire = t->nreplicas > 1 && t->opts.precision == CLT_F16;
  for (int i = 0; rc == CLT_OK && i < t->nlocal; i++)
    rc = clt__replica_set_buckets(t->rep[i], t->nbuckets, closed_by, t->bucket_lo, t->bucket_hi, wire);
  free(closed_by);
  if (t->nreplicas > 1) {
    clt_allreduce_opts ao = {0, t->nlocal};
    for (int b = 0; rc == CLT_OK && b < t->nbuckets; b++)
      rc = clt_allreduce_plan_create(t->comm, (size_t)(t->bucket_hi[b] - t->bucket_lo[b]), wire ? CLT_F16 : CLT_F32,
                                     CLT_SUM, &ao, &t->plans[b]);
  }
  return rc;
}

int clt_trainer_create(const clt_model *m, const clt_devices *devs, clt_comm *comm, const clt_train_options *o,
                       clt_trainer **out) {
  int rc = CLT_OK;
  float *params = NULL;
  clt_trainer *t = NULL;
  *out = NULL;
  if (!m || !devs || !o) return clt__error(CLT_EINVAL, "clt_trainer_create: model, devices and options are needed");
  if (clt_devices_count(devs) < 1) return clt__error(CLT_ENODEV, "clt_trainer_create: no devices given");
  CLT_TRY(check_options(o));
  if (!(t = clt__calloc(1, sizeof *t))) return CLT_ENOMEM;
  t->model = m;
  t->opts = *o;
  t->saved_step = -1;
  t->loss_scale = o->precision == CLT_F16 ? o->loss_scale : 1.0;
  if (o->checkpoint_dir && !(t->opts.checkpoint_dir = t->checkpoint_dir = clt__strdup(o->checkpoint_dir))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  if (comm) {
    t->comm = comm;
  } else {
    CLT_TRY(clt_comm_create_local(&t->comm));
    t->own_comm = 1;
  }
  t->rank = clt_comm_rank(t->comm);
  t->nranks = clt_comm_size(t->comm);
  t->nlocal = clt_devices_count(devs);
  CLT_TRY(check_agreement(t));

  /* Global replica numbering: rank r's replicas follow those of ranks < r. */
  {
    int64_t *counts = clt__calloc(t->nranks, sizeof *counts), mine = t->nlocal;
    t->rank_first = clt__calloc(t->nranks, sizeof *t->rank_first);
    t->rank_count = clt__calloc(t->nranks, sizeof *t->rank_count);
    if (!counts || !t->rank_first || !t->rank_count) { free(counts); rc = CLT_ENOMEM; goto fail; }
    rc = t->nranks > 1 ? clt_allgather(t->comm, &mine, sizeof mine, counts) : (counts[0] = mine, CLT_OK);
    for (int r = 0; rc == CLT_OK && r < t->nranks; r++) {
      t->rank_first[r] = t->nreplicas;
      t->rank_count[r] = (int)counts[r];
      if (counts[r] > t->max_local) t->max_local = (int)counts[r];
      t->nreplicas += (int)counts[r];
    }
    t->first_replica = t->rank_first[t->rank];
    free(counts);
    if (rc < 0) goto fail;
  }
  t->micro_batch = o->batch / o->accumulate;
  if (t->micro_batch < t->nreplicas) {
    rc = clt__error(CLT_EINVAL, "the batch of %lld (per micro-batch %lld) is smaller than the %d replicas: every "
                    "replica needs at least one sample", (long long)o->batch, (long long)t->micro_batch, t->nreplicas);
    goto fail;
  }

  CLT_TRY(initial_shares(t));

  /* Parameters: initialised from the seed on rank 0, broadcast to all. */
  int64_t P = clt_model_param_count(m);
  if (!(params = clt__calloc((size_t)P, sizeof *params))) { rc = CLT_ENOMEM; goto fail; }
  if (t->rank == 0) clt__model_init_params(m->spec, o->seed, params);
  if (t->nranks > 1) CLT_TRY(clt_bcast(t->comm, params, (size_t)P * sizeof *params, 0));

  int per = clt_optimizer_state_per_param(&o->optimizer);
  t->ctx = clt__calloc(t->nlocal, sizeof *t->ctx);
  t->rep = clt__calloc(t->nlocal, sizeof *t->rep);
  t->host_params = clt__calloc(t->nlocal, sizeof *t->host_params);
  t->host_state = clt__calloc(t->nlocal, sizeof *t->host_state);
  if (!t->ctx || !t->rep || !t->host_params || !t->host_state) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < t->nlocal; i++) {
    CLT_TRY(clt_context_create(devs, i, &t->ctx[i]));
    CLT_TRY(clt__replica_create(t->ctx[i], m->spec, t->micro_batch, per, o->precision, params, &t->rep[i]));
    if (clt_optimizer_needs_host(&o->optimizer, clt_context_device(t->ctx[i]))) {
      clt__log(CLT_LOG_INFO, "%s rounds float divide and sqrt loosely: its %s step runs on the host so that every "
               "replica holds the same bits", clt_context_device(t->ctx[i])->name, clt_optimizer_name(o->optimizer.kind));
      t->host_params[i] = clt__calloc((size_t)P, sizeof(float));
      t->host_state[i] = clt__calloc((size_t)P * (per ? per : 1), sizeof(float));
      if (!t->host_params[i] || !t->host_state[i]) { rc = CLT_ENOMEM; goto fail; }
      memcpy(t->host_params[i], params, (size_t)P * sizeof(float));
      if (!t->host_grads && !(t->host_grads = clt__calloc((size_t)P, sizeof(float)))) { rc = CLT_ENOMEM; goto fail; }
    }
  }
  CLT_TRY(make_buckets(t));
  free(params);
  *out = t;
  return CLT_OK;
fail:
  free(params);
  clt_trainer_destroy(t);
  return rc;
}

void clt_trainer_destroy(clt_trainer *t) {
  if (!t) return;
  for (int b = 0; t->plans && b < t->nbuckets; b++) clt_allreduce_plan_destroy(t->plans[b]);
  free(t->plans);
  free(t->bucket_lo);
  free(t->bucket_hi);
  free(t->rank_first);
  free(t->rank_count);
  free(t->shares);
  free(t->throughput);
  free(t->local_rate);
  for (int i = 0; i < t->nlocal; i++) {
    if (t->rep) clt__replica_destroy(t->rep[i]);
    if (t->ctx) clt_context_destroy(t->ctx[i]);
    if (t->host_params) free(t->host_params[i]);
    if (t->host_state) free(t->host_state[i]);
  }
  free(t->rep);
  free(t->ctx);
  free(t->host_params);
  free(t->host_state);
  free(t->host_grads);
  if (t->own_comm) clt_comm_destroy(t->comm);
  free(t->checkpoint_dir);
  free(t);
}

int64_t clt_trainer_steps_done(const clt_trainer *t) { return t->steps_done; }
int clt_trainer_replicas(const clt_trainer *t) { return t->nreplicas; }

int clt_trainer_params(clt_trainer *t, float *out, int64_t count) {
  int64_t P = clt_model_param_count(t->model);
  if (count != P)
    return clt__error(CLT_EINVAL, "clt_trainer_params: the model has %lld parameters, not %lld", (long long)P,
                      (long long)count);
  clt_tensor p = clt__replica_params(t->rep[0]);
  return clt_tensor_download(t->ctx[0], &p, out, (size_t)P * sizeof(float));
}

/* The gradient is not finite: name the layer where that starts. Backward
 * runs from the last layer to the first and carries an inf or NaN on to
 * every layer before, so the culprit is the last layer with one. */
static int nonfinite_layer(clt_trainer *t) {
  const clt_model_spec *s = t->model->spec;
  for (int i = s->nlayers - 1; i >= 1; i--) {
    const clt_layer_spec *l = &s->layers[i];
    int64_t n = l->weight_count + l->bias_count;
    clt_tensor g;
    float ss = 0;
    if (!n || clt_tensor_view(t->rep[0]->grads, (size_t)l->param_offset * 4, CLT_F32, 1, &n, &g) < 0 ||
        clt_sumsq(t->ctx[0], &g, &ss) < 0 || isfinite(ss))
      continue;
    return clt__error(CLT_ENONFINITE, "the gradient of %s:%d (%s) is not finite (inf or NaN); lower the learning "
                      "rate (%g) or clip gradients (--clip)", s->name, l->line, clt__layer_kind_name(l->kind),
                      clt_schedule_lr(&t->opts.schedule, t->steps_done));
  }
  return clt__error(CLT_ENONFINITE, "the gradient is not finite (inf or NaN); lower the learning rate or clip "
                    "gradients (--clip)");
}

/* f16: the summed gradient is not finite. Every rank holds the same sum
 * (an inf or NaN on any rank reaches it), so every rank decides alike:
 * leave the parameters, halve the scale, and give up after max_skips in a
 * row. */
static int skip_step(clt_trainer *t, int *skipped) {
  *skipped = 1;
  t->skipped++;
  t->skips_in_row++;
  t->scale_clean_steps = 0;
  double was = t->loss_scale;
  if (t->loss_scale > 1) t->loss_scale /= 2;
  clt__log(CLT_LOG_INFO, "step %lld: the f16 gradient is not finite at loss scale %g: step skipped, scale now %g",
           (long long)t->steps_done + 1, was, t->loss_scale);
  if (t->skips_in_row >= t->opts.max_skips)
    return clt__error(CLT_ENONFINITE, "step %lld: the f16 gradient was not finite %lld steps in a row, down to loss "
                      "scale %g: the values overflow f16 itself; train with --precision fp32, or lower the learning "
                      "rate (%g)", (long long)t->steps_done + 1, (long long)t->skips_in_row, was,
                      clt_schedule_lr(&t->opts.schedule, t->steps_done));
  t->steps_done++;
  return CLT_OK;
}

int clt__trainer_apply(clt_trainer *t, int64_t total_n, double *grad_norm, int *skipped) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(t->model);
  const clt_optimizer_config *cfg = &t->opts.optimizer;
  float scale = 1.0f / (float)total_n;
  *grad_norm = NAN;
  *skipped = 0;

  /* Every replica of every rank now holds the same summed gradient, so
   * each rank can tell alone whether it is finite (and stop before the
   * update spoils the parameters), and clipping can use its norm. */
  float ss = 0;
  clt_tensor g = clt__replica_grads(t->rep[0]);
  CLT_TRY(clt_sumsq(t->ctx[0], &g, &ss));
  if (t->opts.precision == CLT_F16) {
    /* The gradient was scaled by the loss scale; in f16 an inf or NaN
     * means the scale is too large (or the data overflow f16 outright). */
    if (!isfinite(ss)) return skip_step(t, skipped);
    t->skips_in_row = 0;
    scale = (float)(1.0 / ((double)total_n * t->loss_scale));
    ss = (float)((double)ss / (t->loss_scale * t->loss_scale));
    if (++t->scale_clean_steps >= t->opts.loss_scale_window && t->loss_scale * 2 <= 1e30) {
      t->loss_scale *= 2;
      t->scale_clean_steps = 0;
    }
  } else if (!isfinite(ss)) {
    rc = nonfinite_layer(t);
    goto fail;
  }
  /* Clipping: the norm of the summed gradient / total_n. Devices may sum in
   * different orders, so rank 0's first replica decides for everyone. */
  if (t->opts.clip > 0) {
    double v[1] = {t->rank == 0 ? sqrt((double)ss) / (double)total_n : 0.0};
    CLT_TRY(clt__trainer_sum(t, v, 1));
    *grad_norm = v[0];
    if (v[0] > t->opts.clip) scale = (float)(scale * (t->opts.clip / (v[0] + 1e-6)));
  }

  float lr = clt_schedule_lr(&t->opts.schedule, t->steps_done);
  int64_t step = t->steps_done + 1 - t->skipped; /* the optimizer's own count (Adam's bias correction) */
  for (int i = 0; i < t->nlocal; i++) {
    clt__replica *r = t->rep[i];
    clt_tensor p = clt__replica_params(r), g = clt__replica_grads(r), s = clt__replica_state(r);
    if (!t->host_params[i]) {
      CLT_TRY(clt_optimizer_step(t->ctx[i], cfg, step, lr, scale, &p, &g, &s));
      continue;
    }
    CLT_TRY(clt_tensor_download(t->ctx[i], &g, t->host_grads, (size_t)P * sizeof(float)));
    clt_optimizer_step_host(cfg, step, lr, scale, t->host_params[i], t->host_grads, t->host_state[i], (size_t)P);
    CLT_TRY(clt_tensor_upload(t->ctx[i], &p, t->host_params[i], (size_t)P * sizeof(float)));
  }
  t->steps_done++;
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "optimizer step %lld", (long long)t->steps_done + 1);
}

int clt__trainer_allreduce(clt_trainer *t) {
  int rc = CLT_OK, n = t->nlocal;
  cl_command_queue *q = clt__calloc(n, sizeof *q), *wq = clt__calloc(n, sizeof *wq);
  cl_mem *bufs = clt__calloc(n, sizeof *bufs);
  size_t *offs = clt__calloc(n, sizeof *offs);
  if (!q || !wq || !bufs || !offs) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < n; i++) {
    q[i] = clt_context_transfer_queue(t->ctx[i]), wq[i] = clt_context_queue(t->ctx[i]);
    bufs[i] = t->rep[i]->wire ? t->rep[i]->wire : t->rep[i]->grads;
    /* Submit the queued backward now: a driver may hold unflushed
     * commands back until something waits on them. */
    CLT_CL_TRY(clFlush(clt_context_queue(t->ctx[i])));
  }
  for (int b = 0; b < t->nbuckets && t->plans[b]; b++) {
    /* Bucket b is complete once the backward of its layers is; the copies
     * then go on the transfer queue while earlier layers still compute.
     * The host waits for the marker rather than making the transfer queue
     * wait on it: PoCL, for one, serves such cross-queue waits slowly
     * (~100 ms a step here). */
    for (int i = 0; i < n; i++) {
      CLT_TRY(clt__wait_event(t->ctx[i], t->rep[i]->bucket_ev[b], clt_comm_timeout(t->comm), "the backward pass"));
      offs[i] = (size_t)t->bucket_lo[b] * (t->rep[i]->wire ? 2 : sizeof(float));
    }
    double t0 = clt__now();
    CLT_TRY(clt__allreduce_run_devices_split(t->plans[b], n, q, wq, bufs, offs));
    double dt = clt__now() - t0;
    t->comm_s += dt;
    /* Hidden if some replica's backward was still running when it ended. */
    for (int i = 0; i < n; i++) {
      cl_int st = CL_COMPLETE;
      clGetEventInfo(t->rep[i]->end_ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
      if (st != CL_COMPLETE) {
        t->comm_hidden_s += dt;
        break;
      }
    }
  }
  /* The f16 sums back into the f32 arenas (after the write-backs, which
   * are on the same in-order queue). */
  for (int i = 0; i < n && t->plans[0]; i++) {
    if (!t->rep[i]->wire) continue;
    clt_tensor w = clt__replica_wire(t->rep[i]), g = clt__replica_grads(t->rep[i]);
    CLT_TRY(clt_convert(t->ctx[i], &w, &g));
  }
fail:
  free(q), free(wq), free(bufs), free(offs);
  return rc < 0 ? clt__error_prefix(rc, "summing the gradients of step %lld", (long long)t->steps_done + 1) : rc;
}

int clt__trainer_gather_rates(clt_trainer *t) {
  int rc = CLT_OK;
  double *mine = clt__calloc(t->max_local, sizeof *mine), *all = clt__calloc((size_t)t->nranks * t->max_local, sizeof *all);
  double *w = clt__calloc(t->nreplicas, sizeof *w);
  if (!mine || !all || !w) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < t->nlocal; i++) mine[i] = t->local_rate[i];
  if (t->nranks > 1)
    CLT_TRY(clt_allgather(t->comm, mine, (size_t)t->max_local * sizeof *mine, all));
  else
    memcpy(all, mine, (size_t)t->max_local * sizeof *mine);
  for (int r = 0; r < t->nranks; r++)
    for (int i = 0; i < t->rank_count[r]; i++) t->throughput[t->rank_first[r] + i] = all[(size_t)r * t->max_local + i];
fail:
  free(mine), free(all), free(w);
  return rc;
}

int clt__trainer_rebalance(clt_trainer *t) {
  int rc = clt__trainer_gather_rates(t);
  if (rc < 0) return rc;
  for (int r = 0; r < t->nreplicas; r++)
    if (!(t->throughput[r] > 0) || !isfinite(t->throughput[r])) return CLT_OK; /* not measured yet */
  /* Every rank has the same rates, so every rank computes the same shares. */
  return clt_shares_from_weights(t->nreplicas, t->throughput, t->micro_batch, 1, t->shares);
}

int clt__trainer_check_replicas(clt_trainer *t) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(t->model);
  float *p = clt__calloc((size_t)P, sizeof *p);
  uint32_t *mine = clt__calloc(t->max_local, sizeof *mine), *all = clt__calloc((size_t)t->nranks * t->max_local, sizeof *all);
  if (!p || !mine || !all) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < t->nlocal; i++) {
    clt_tensor pt = clt__replica_params(t->rep[i]);
    CLT_TRY(clt_tensor_download(t->ctx[i], &pt, p, (size_t)P * sizeof *p));
    mine[i] = (uint32_t)crc32(0, (const Bytef *)p, (uInt)(P * sizeof *p));
  }
  if (t->nranks > 1)
    CLT_TRY(clt_allgather(t->comm, mine, (size_t)t->max_local * sizeof *mine, all));
  else
    memcpy(all, mine, (size_t)t->max_local * sizeof *mine);
  for (int r = 0; r < t->nranks; r++)
    for (int i = 0; i < t->rank_count[r]; i++) {
      uint32_t c = all[(size_t)r * t->max_local + i];
      if (c != all[0]) {
        rc = clt__error(CLT_EMISMATCH, "after step %lld the parameters of replica %d (rank %d, device %d there) "
                        "differ from replica 0's (CRC32 %08x vs %08x): the replicas have diverged",
                        (long long)t->steps_done, t->rank_first[r] + i, r, i, c, all[0]);
        goto fail;
      }
    }
fail:
  free(p), free(mine), free(all);
  return rc;
}

int clt_trainer_evaluate(clt_trainer *t, const clt_dataset *ds, double *loss, double *accuracy) {
  int rc = CLT_OK;
  int64_t count = clt_dataset_count(ds), B = t->micro_batch, in = clt_model_input_size(t->model);
  int64_t *idx = NULL;
  float *x = NULL;
  int32_t *y = NULL;
  double sums[2] = {0, 0}; /* loss, correct */
  if (clt_dataset_sample_size(ds) != in)
    return clt__error(CLT_ESHAPE, "%s has samples of %lld values but the model's input takes %lld",
                      clt_dataset_path(ds), (long long)clt_dataset_sample_size(ds), (long long)in);
  /* As fit checks: a label past the model's scores would read past them. */
  if (clt_dataset_num_classes(ds) > clt_model_num_classes(t->model))
    return clt__error(CLT_ESHAPE, "%s has %d classes but the model's last layer gives %d scores",
                      clt_dataset_path(ds), clt_dataset_num_classes(ds), clt_model_num_classes(t->model));
  idx = clt__calloc((size_t)B, sizeof *idx);
  x = clt__calloc((size_t)(B * in), sizeof *x);
  y = clt__calloc((size_t)B, sizeof *y);
  if (!idx || !x || !y) { rc = CLT_ENOMEM; goto fail; }
  /* Replica g of R takes samples [g*count/R, (g+1)*count/R). */
  for (int i = 0; i < t->nlocal; i++) {
    int g = t->first_replica + i;
    int64_t lo = count * g / t->nreplicas, hi = count * (g + 1) / t->nreplicas;
    for (int64_t at = lo; at < hi; at += B) {
      int64_t n = hi - at < B ? hi - at : B;
      for (int64_t k = 0; k < n; k++) idx[k] = at + k;
      CLT_TRY(clt_dataset_get_batch(ds, idx, n, x, y));
      clt__pass pass = {.train = 0, .global_first = at};
      CLT_TRY(clt__replica_run(t->rep[i], x, y, n, &pass));
      float l;
      int32_t c;
      CLT_TRY(clt__replica_read_loss(t->rep[i], &l, &c));
      sums[0] += l;
      sums[1] += c;
    }
  }
  CLT_TRY(clt__trainer_sum(t, sums, 2));
  *loss = sums[0] / (double)count;
  *accuracy = sums[1] / (double)count;
fail:
  free(idx), free(x), free(y);
  return rc < 0 ? clt__error_prefix(rc, "evaluating on %s", clt_dataset_path(ds)) : CLT_OK;
}
