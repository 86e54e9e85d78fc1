/*
 * memory.c: the memory report of every replica (issue 15): what the
 * trainer counted for it before allocating anything (the layout of
 * clt_model_replica_memory for this rank's ZeRO shard, the figures
 * `cltrain summary` prints) beside what its buffers measure now that they
 * are made, part by part: parameters, gradients, optimizer state,
 * activations, their gradients, workspaces, and the host memory the
 * exchange stages them through. Logged by each rank when the trainer is
 * made; written by rank 0 as the first records of --metrics, one per
 * replica of the job, so a run's file says what it held where. And the
 * public estimators of a replica's memory, from the strategy's count.
 */
#include "train/trainer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parts, in the order of the records' arrays; the device's total
 * (every part but the host's staging) after them. */
enum { PARAMS, GRADS, STATE, ACT, DACT, WORK, STAGING, TOTAL, NPARTS };
static const char *const part_names[NPARTS] = {"parameters",       "gradients", "optimizer_state", "activations",
                                               "activation_grads", "workspace", "staging",         "total"};

struct clt__memory_record {
  int64_t rank, replica, stage; /* stage: -1 without a pipeline */
  int64_t batch, zero, shard_params, params;
  uint64_t counted[NPARTS], measured[NPARTS];
  char device[96];
};

int clt__trainer_memory_report(clt_trainer *t) {
  free(t->memory);
  if (!(t->memory = clt__calloc(t->nlocal, sizeof *t->memory))) return CLT_ENOMEM;
  for (int i = 0; i < t->nlocal; i++) {
    clt__memory_record *m = &t->memory[i];
    clt__replica_report r;
    t->s.i->report(t->s.self, i, &r);
    memset(m, 0, sizeof *m);
    m->rank = t->rank, m->replica = r.replica, m->stage = r.stage;
    m->batch = r.counted.batch, m->zero = r.zero;
    m->shard_params = r.shard_params, m->params = r.params;
    clt__strlcpy(m->device, t->ctx[i]->info.name, sizeof m->device);
    const uint64_t counted[] = {r.counted.parameters,  r.counted.gradients,        r.counted.optimizer_state,
                                r.counted.activations, r.counted.activation_grads, r.counted.workspace};
    const uint64_t measured[] = {r.measured.parameters,  r.measured.gradients,        r.measured.optimizer_state,
                                 r.measured.activations, r.measured.activation_grads, r.measured.workspace};
    for (int k = PARAMS; k <= WORK; k++) {
      m->counted[k] = counted[k], m->measured[k] = measured[k];
      m->counted[TOTAL] += counted[k], m->measured[TOTAL] += measured[k];
    }
    m->counted[STAGING] = r.staging_counted, m->measured[STAGING] = r.staging_measured;
    char b[NPARTS][32], c[32], s[32];
    for (int k = 0; k < NPARTS; k++) clt__fmt_bytes(m->measured[k], b[k], sizeof b[k]);
    clt__log(CLT_LOG_INFO, "rank %d: replica %d holds %s on %s: parameters %s, gradients %s, optimizer state %s, "
             "activations %s, their gradients %s, workspace %s (counted before allocating: %s); host staging %s "
             "(counted %s)", t->rank, i, b[TOTAL], m->device, b[PARAMS], b[GRADS], b[STATE], b[ACT], b[DACT], b[WORK],
             clt__fmt_bytes(m->counted[TOTAL], c, sizeof c), b[STAGING], clt__fmt_bytes(m->counted[STAGING], s, sizeof s));
  }
  return CLT_OK;
}

static json_t *parts(const uint64_t *v) {
  json_t *o = json_object();
  for (int k = 0; k < NPARTS; k++) json_object_set_new(o, part_names[k], json_integer((json_int_t)v[k]));
  return o;
}

int clt__trainer_memory_records(clt_trainer *t, FILE *metrics) {
  int rc = CLT_OK;
  int64_t most, *counts = NULL;
  clt__memory_record *all = NULL;
  if (!t->memory) return CLT_OK;
  CLT_TRY(clt__trainer_gather_replicas(t, t->memory, sizeof *all, (void **)&all, &counts, &most));
  for (int r = 0; metrics && t->rank == 0 && r < t->nranks; r++)
    for (int64_t i = 0; i < counts[r]; i++) {
      const clt__memory_record *m = &all[r * most + i];
      json_t *o = json_object();
      json_object_set_new(o, "event", json_string("start"));
      json_object_set_new(o, "rank", json_integer(m->rank));
      json_object_set_new(o, "replica", json_integer(m->replica));
      if (m->stage >= 0) json_object_set_new(o, "stage", json_integer(m->stage));
      json_object_set_new(o, "device", json_string(m->device));
      json_object_set_new(o, "batch", json_integer(m->batch));
      json_object_set_new(o, "zero", json_integer(m->zero));
      if (t->opts.recompute) json_object_set_new(o, "recompute", json_string("blocks"));
      json_object_set_new(o, "params", json_integer(m->params));
      json_object_set_new(o, "shard_params", json_integer(m->shard_params));
      json_object_set_new(o, "counted", parts(m->counted));
      json_object_set_new(o, "measured", parts(m->measured));
      CLT_TRY(clt__trainer_metrics_write(t, metrics, o));
    }
fail:
  free(counts), free(all);
  return rc;
}

/* ---- the public estimators (cltrain.h): what a replica needs, before a
 * trainer exists (`cltrain summary`) ---- */

int clt_model_replica_memory(const clt_model *m, const clt_train_options *o, clt_replica_memory *out) {
  clt_train_options d;
  CLT_HANDLE(m, "model");
  CLT_ARG(out);
  if (!o) clt_train_options_defaults(&d), o = &d;
  if (o->batch < 1 || o->accumulate < 1 || o->batch % o->accumulate)
    return clt__error(CLT_EINVAL, "clt_model_replica_memory: batch %lld and accumulate %d: the batch must be at "
                      "least 1 and divide by accumulate", (long long)o->batch, o->accumulate);
  if (o->precision != CLT_F32 && o->precision != CLT_F16)
    return clt__error(CLT_EINVAL, "clt_model_replica_memory: the precision must be fp32 or fp16, not %s",
                      clt_dtype_name(o->precision));
  if ((unsigned)o->recompute > CLT_RECOMPUTE_BLOCKS)
    return clt__error(CLT_EINVAL, "clt_model_replica_memory: clt_train_options.recompute is %d: give "
                      "CLT_RECOMPUTE_NONE (0) or CLT_RECOMPUTE_BLOCKS (1)", (int)o->recompute);
  int rc = clt__model_check_recompute(m, o->recompute);
  if (rc < 0) return rc;
  /* one rank: every parameter's state and the whole gradient (with its f16 copy in fp16) */
  return clt__dp_need(m, o, 1, 0, o->batch / o->accumulate, o->precision == CLT_F16, out, NULL, NULL);
}

int clt_model_replica_memory_ranks(const clt_model *m, const clt_train_options *o, int nranks,
                                   clt_replica_memory *out, int64_t *shard_params) {
  clt_train_options d;
  int rc = CLT_OK;
  CLT_HANDLE(m, "model");
  CLT_ARG(out);
  if (!o) clt_train_options_defaults(&d), o = &d;
  CLT_TRY(clt_model_replica_memory(m, o, out)); /* checks the options */
  if (nranks < 1) return clt__error(CLT_EINVAL, "clt_model_replica_memory_ranks: %d ranks (at least 1)", nranks);
  if (o->zero < 0 || o->zero > 3)
    return clt__error(CLT_EINVAL, "clt_model_replica_memory_ranks: ZeRO stage %d (0, 1, 2 or 3)", o->zero);
  int64_t most = clt_model_param_count(m);
  if (o->zero > 0 && nranks > 1) /* the largest shard of any rank */
    CLT_TRY(clt__dp_need(m, o, nranks, -1, o->batch / o->accumulate, o->precision == CLT_F16, out, &most,
                         o->shard_by == CLT_SHARD_WEIGHTS && o->shard_weights && o->shard_nweights == nranks
                             ? o->shard_weights : NULL));
  if (shard_params) *shard_params = most;
fail:
  return rc;
}
