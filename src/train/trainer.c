/*
 * trainer.c: a trainer's options, its contexts (one per device of this
 * rank), the parallel strategy that makes its replicas one model (chosen
 * from the table below), the model's parameters in and out, and the small
 * collectives the other trainer files share (sums, rank 0's outcome,
 * everyone's). The step itself is step.c.
 */
#include "train/trainer.h"
#include "core/optim.h"
#include "io/dir_lock.h"
#include "pp/pp.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain/opencl.h>

/* The strategies, the first whose test the options pass: adding one (ZeRO
 * stage 3, tensor parallelism) is a line here and its folder. */
static int wants_pipeline(const clt_train_options *o) { return o->pipeline > 1; }
static const struct {
  int (*wants)(const clt_train_options *o); /* NULL: always */
  const clt__strategy_i *i;
} strategies[] = {
    {wants_pipeline, &clt__pp_strategy},
    {NULL, &clt__dp_strategy},
};

void clt_train_options_defaults(clt_train_options *o) {
  if (!o) return;
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

/* The fields one at a time (options_table.c), then what ties them. */
static int check_fields(const clt_train_options *o) {
  int rc = clt__options_check_fields(o);
  if (rc < 0) return rc;
  if (o->balance == CLT_BALANCE_WEIGHTS && !o->balance_weights)
    return clt__error(CLT_EINVAL, "clt_train_options.balance_weights is NULL with balance CLT_BALANCE_WEIGHTS "
                      "(balance_nweights %d): give one weight per replica of all ranks", o->balance_nweights);
  if (o->metrics_path && !o->metrics_path[0])
    return clt__error(CLT_EINVAL, "clt_train_options.metrics_path is empty: name a file, or give none (NULL)");
  if (o->tensorboard_dir && !o->tensorboard_dir[0])
    return clt__error(CLT_EINVAL, "clt_train_options.tensorboard_dir is empty: name a directory, or give none (NULL)");
  if (!(o->progress_s >= 0) || o->progress_s > 1e9)
    return clt__error(CLT_EINVAL, "clt_train_options.progress_s (--progress %g) must be 0 (none) or a number of "
                      "seconds up to 1e9", o->progress_s);
  if (o->run_json) {
    json_error_t err;
    json_t *j = json_loads(o->run_json, 0, &err);
    int object = json_is_object(j), parsed = j != NULL;
    json_decref(j);
    if (!object)
      return clt__error(CLT_EINVAL, "clt_train_options.run_json is not a JSON object (%s): give an object such as "
                        "{\"command\": \"...\"}, or NULL", parsed ? "another kind of value" : err.text);
  }
  return CLT_OK;
}

/* A pipeline's options on nranks ranks. The micro-batches are checked only
 * where the ranks fit the stages (the pipeline's setup names a mismatch,
 * after the devices), and --micro-batches is named only when it was given:
 * by default there are P. */
static int check_pipeline(const clt_train_options *o, int nranks) {
  int P = o->pipeline, M = o->micro_batches ? o->micro_batches : P;
  if (o->accumulate != 1)
    return clt__error(CLT_EINVAL, "--accumulate %d with --pipeline %d: a pipeline's --micro-batches (%d) are its "
                      "accumulation; leave --accumulate at 1", o->accumulate, o->pipeline, M);
  if (nranks % P == 0 && o->batch % M && o->micro_batches)
    return clt__error(CLT_EINVAL, "--micro-batches %d must divide the batch size %lld", M, (long long)o->batch);
  if (nranks % P == 0 && o->batch % M)
    return clt__error(CLT_EINVAL, "--pipeline %d streams %d micro-batches per step unless --micro-batches says, and "
                      "the batch size %lld does not divide by %d: give a batch that does, or --micro-batches M "
                      "dividing it", P, M, (long long)o->batch, M);
  if (o->shard_by != CLT_SHARD_EQUAL)
    return clt__error(CLT_EINVAL, "%s with --pipeline %d is not supported: a stage's replicas take equal ZeRO shards; "
                      "leave one of them out", o->shard_by == CLT_SHARD_MEMORY ? "--shard-by memory" : "--shard-weights",
                      o->pipeline);
  if (o->balance != CLT_BALANCE_EQUAL)
    return clt__error(CLT_EINVAL, "--balance %s with --pipeline %d is not supported: every stage must split "
                      "each micro-batch alike; use --balance equal", o->balance == CLT_BALANCE_AUTO ? "auto" : "weights",
                      o->pipeline);
  if (o->precision != CLT_F32)
    return clt__error(CLT_EINVAL, "--precision fp16 with --pipeline %d is not supported: stages exchange "
                      "fp32 activations", o->pipeline);
  return CLT_OK;
}

/* --offload and the shards' sizes (clt_train_options.offload, shard_by). */
static int check_sharding(const clt_train_options *o, int nranks) {
  static const char *const by[] = {"equal", "memory", "weights"};
  if (o->offload == CLT_OFFLOAD_OPTIMIZER && clt_optimizer_state_per_param(&o->optimizer) == 0)
    return clt__error(CLT_EINVAL, "--offload optimizer with --optimizer %s%s: that optimizer keeps no state to "
                      "offload; leave --offload out, or use one that does (sgd with --momentum, adam, adamw, lion)",
                      clt_optimizer_name(o->optimizer.kind), o->optimizer.kind == CLT_OPT_SGD ? " (no --momentum)" : "");
  if (o->offload == CLT_OFFLOAD_OPTIMIZER && o->pipeline > 1)
    return clt__error(CLT_EINVAL, "--offload optimizer with --pipeline %d is not supported: a stage's replicas keep "
                      "their optimizer state on their devices; leave one of them out", o->pipeline);
  if (o->shard_weights && o->shard_by != CLT_SHARD_WEIGHTS)
    return clt__error(CLT_EINVAL, "clt_train_options.shard_weights is given with shard_by %s (--shard-by %s): the "
                      "weights are for CLT_SHARD_WEIGHTS (--shard-weights) alone; give one or the other",
                      o->shard_by == CLT_SHARD_MEMORY ? "CLT_SHARD_MEMORY" : "CLT_SHARD_EQUAL", by[o->shard_by]);
  if (o->shard_by == CLT_SHARD_EQUAL) return CLT_OK;
  const char *flag = o->shard_by == CLT_SHARD_MEMORY ? "--shard-by memory" : "--shard-weights";
  if (o->zero == 0)
    return clt__error(CLT_EINVAL, "%s sizes the ZeRO shards of optimizer state (and gradients), and --zero is 0: "
                      "give --zero 1 or 2, or leave %s out", flag, flag);
  if (o->shard_by != CLT_SHARD_WEIGHTS) return CLT_OK;
  if (!o->shard_weights || o->shard_nweights != nranks)
    return clt__error(CLT_EINVAL, "--shard-weights gives %d weight%s, and the job has %d rank%s: give one per rank "
                      "(each rank's replicas hold one shard), like 3,1 for two", o->shard_weights ? o->shard_nweights : 0,
                      o->shard_nweights == 1 ? "" : "s", nranks, nranks == 1 ? "" : "s");
  double sum = 0;
  for (int r = 0; r < nranks; r++) {
    if (!(o->shard_weights[r] >= 0) || !isfinite(o->shard_weights[r]))
      return clt__error(CLT_EINVAL, "--shard-weights: rank %d's weight %g must be a finite number of 0 or more", r,
                        o->shard_weights[r]);
    sum += o->shard_weights[r];
  }
  if (!(sum > 0)) return clt__error(CLT_EINVAL, "--shard-weights gives every rank 0: at least one must hold a shard");
  return CLT_OK;
}

/* Every field of the options, on a job of nranks ranks. */
static int check_options(const clt_train_options *o, int nranks) {
  int rc = check_fields(o);
  if (rc < 0) return rc;
  if (o->batch % o->accumulate)
    return clt__error(CLT_EINVAL, "--accumulate %d must divide the batch size %lld", o->accumulate,
                      (long long)o->batch);
  if (o->pipeline > 1) {
    if ((rc = check_pipeline(o, nranks)) < 0) return rc;
  } else if (o->micro_batches > 1 || (o->stages && o->stages[0]) || o->pipeline_schedule != CLT_PIPELINE_1F1B) {
    return clt__error(CLT_EINVAL, "%s is for a pipeline: give --pipeline P with P > 1 (or --accumulate for "
                      "micro-batches without one)", o->micro_batches > 1 ? "--micro-batches"
                      : (o->stages && o->stages[0]) ? "--stages" : "--schedule-pipeline");
  }
  if (!(o->schedule.lr > 0) || !isfinite(o->schedule.lr))
    return clt__error(CLT_EINVAL, "the learning rate must be a positive number, not %g", o->schedule.lr);
  if (!(o->schedule.min_lr >= 0 && o->schedule.min_lr <= o->schedule.lr))
    return clt__error(CLT_EINVAL, "--min-lr %g must be from 0 to the learning rate %g: the cosine schedule falls from "
                      "--lr to --min-lr", o->schedule.min_lr, o->schedule.lr);
  if (!(o->schedule.gamma > 0 && o->schedule.gamma <= 1))
    return clt__error(CLT_EINVAL, "--gamma %g must be above 0 and at most 1: the step schedule multiplies the "
                      "rate by it (0 would stop training after the first decay)", o->schedule.gamma);
  if (!(o->clip >= 0)) return clt__error(CLT_EINVAL, "--clip must be 0 (off) or positive, not %g", o->clip);
  if (o->zero > 3)
    return clt__error(CLT_EINVAL, "--zero %d: the ZeRO stages are 0 (off), 1 (optimizer state sharded across ranks), "
                      "2 (gradients too) and 3 (parameters too)", o->zero);
  if (!(o->bucket_mb >= 0 && o->bucket_mb <= 1e6)) return clt__error(CLT_EINVAL, "--bucket-mb must be from 0 to 1e6");
  if (o->balance == CLT_BALANCE_AUTO && o->balance_every < 1)
    return clt__error(CLT_EINVAL, "--balance auto needs a re-split interval of at least 1 step");
  if (o->balance_min_share > 0 && o->balance != CLT_BALANCE_AUTO)
    return clt__error(CLT_EINVAL, "--balance-min-share %lld is the floor of --balance auto; with --balance %s "
                      "the shares are given (weights of 0 or more)", (long long)o->balance_min_share,
                      o->balance == CLT_BALANCE_EQUAL ? "equal" : "weights");
  if (o->precision != CLT_F32 && o->precision != CLT_F16)
    return clt__error(CLT_EINVAL, "the precision must be fp32 or fp16, not %s (clt_train_options.precision %d)",
                      clt_dtype_name(o->precision), (int)o->precision);
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
  if ((rc = clt__optimizer_check(&o->optimizer)) < 0) return rc; /* its row's check (src/core/optim.c) */
  return check_sharding(o, nranks);
}

int clt__trainer_sum(clt_trainer *t, double *vals, int n) { return clt__sum_ranks(t->comm, vals, n); }

int clt__trainer_all_ok(clt_trainer *t, int rc, const char *what) { return clt__all_ok(t->comm, rc, what); }

int clt__trainer_gather_replicas(clt_trainer *t, const void *mine, size_t size, void **all, int64_t **counts,
                                 int64_t *most) {
  int rc = CLT_OK;
  unsigned char *padded = NULL;
  *all = NULL, *most = t->nlocal;
  if (!(*counts = clt__calloc((size_t)t->nranks, sizeof **counts))) return CLT_ENOMEM;
  (*counts)[0] = t->nlocal;
  if (t->nranks > 1) CLT_TRY(clt_allgather(t->comm, most, sizeof *most, *counts));
  for (int r = 0; r < t->nranks; r++)
    if ((*counts)[r] > *most) *most = (*counts)[r];
  *all = clt__calloc((size_t)(t->nranks * *most) + 1, size);
  padded = clt__calloc((size_t)*most + 1, size);
  if (!*all || !padded) { rc = CLT_ENOMEM; goto fail; }
  memcpy(padded, mine, (size_t)t->nlocal * size);
  if (t->nranks > 1)
    CLT_TRY(clt_allgather(t->comm, padded, (size_t)*most * size, *all));
  else
    memcpy(*all, padded, (size_t)*most * size);
  free(padded);
  return CLT_OK;
fail:
  free(padded), free(*all), free(*counts);
  *all = NULL, *counts = NULL;
  return rc;
}

int clt__trainer_args_ok(clt_trainer *t, int rc, const char *what) {
  char own[1024] = "";
  if (rc < 0) clt__strlcpy(own, clt_last_error(), sizeof own);
  int grc = clt__all_ok(t->comm, rc, what);
  return rc < 0 ? clt__error(rc, "%s", own) : grc;
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

int clt_trainer_create(const clt_model *m, const clt_devices *devs, clt_comm *comm, const clt_train_options *o,
                       clt_trainer **out) {
  int rc = CLT_OK;
  clt_trainer *t = NULL;
  CLT_ARG(out);
  *out = NULL;
  CLT_HANDLE(m, "model");
  CLT_HANDLE(devs, "device list");
  CLT_ARG(o);
  if (clt_devices_count(devs) < 1) return clt__error(CLT_ENODEV, "clt_trainer_create: no devices given");
  CLT_TRY(check_options(o, comm ? clt_comm_size(comm) : 1));
  CLT_TRY(clt__model_check_recompute(m, o->recompute));
  if (!(t = clt__calloc(1, sizeof *t))) return CLT_ENOMEM;
  t->model = m;
  t->opts = *o;
  t->run.saved_step = -1;
  t->run.lock_fd = -1;
  clt__scaler_init(t);
  if (o->checkpoint_dir && !(t->opts.checkpoint_dir = t->run.checkpoint_dir = clt__strdup(o->checkpoint_dir))) {
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
  if (!(t->ctx = clt__calloc(t->nlocal, sizeof *t->ctx))) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < t->nlocal; i++) CLT_TRY(clt_context_create(devs, i, &t->ctx[i]));

  /* The strategy plans the replicas (refusing what cannot fit before it
   * allocates it) and makes them. */
  size_t k = 0;
  while (strategies[k].wants && !strategies[k].wants(o)) k++;
  clt__job job = {.model = m, .opts = &t->opts, .devs = devs, .ctx = t->ctx, .nlocal = t->nlocal, .comm = t->comm};
  t->s.i = strategies[k].i;
  CLT_TRY(t->s.i->plan(&job, &t->s));
  t->opts.accumulate = t->s.accumulate; /* fit's micro-batches per step */
  CLT_TRY(clt__trainer_memory_report(t)); /* what the replicas hold, measured, beside what was counted */
  t->flops_per_sample = clt__trainer_flops_per_sample(t);
  *out = t;
  return CLT_OK;
fail:
  clt_trainer_destroy(t);
  return rc;
}

void clt_trainer_destroy(clt_trainer *t) {
  if (!t) return;
  if (t->s.self) t->s.i->destroy(t->s.self);
  for (int i = 0; t->ctx && i < t->nlocal; i++) clt_context_destroy(t->ctx[i]);
  free(t->ctx);
  free(t->memory);
  free(t->peak_flops);
  free(t->norm.shift), free(t->norm.scale);
  clt__trace_destroy(t->timeline.trace);
  free(t->timeline.lanes);
  if (t->own_comm) clt_comm_destroy(t->comm);
  clt__dir_unlock(t->run.lock_fd);
  free(t->run.checkpoint_dir);
  free(t);
}

int64_t clt_trainer_steps_done(const clt_trainer *t) { return t ? t->steps_done : 0; }
int clt_trainer_replicas(const clt_trainer *t) { return t ? clt__dp_replicas(t->s.dp) : 0; }

int clt_trainer_stages(const clt_trainer *t, int *lines, int cap) {
  if (!t) return 0;
  const clt_model_spec *s = t->model->spec;
  int cut[65], P = t->s.i->stages ? t->s.i->stages(t->s.self, cut, 64) : 1;
  for (int i = 0; lines && i <= P && i <= cap; i++) {
    int layer = t->s.i->stages && i <= 64 ? cut[i] : (i == 0 ? 1 : s->nlayers);
    lines[i] = layer < s->nlayers ? s->layers[layer].line : s->layers[s->nlayers - 1].line + 1;
  }
  return P;
}

int clt_trainer_params(clt_trainer *t, float *out, int64_t count) {
  CLT_HANDLE(t, "trainer");
  int64_t P = clt_model_param_count(t->model);
  int rc = !out ? clt__null_arg(__func__, "out", NULL)
           : count != P ? clt__error(CLT_EINVAL, "clt_trainer_params: the model has %lld parameters, not %lld",
                                     (long long)P, (long long)count)
                        : CLT_OK;
  /* collective where the strategy holds a part of it: every rank learns of a bad argument on any */
  if (t->opts.pipeline > 1 && (rc = clt__trainer_args_ok(t, rc, "clt_trainer_params")) < 0) return rc;
  if (rc < 0) return rc;
  return t->s.i->get_state(t->s.self, out, NULL, 1);
}
