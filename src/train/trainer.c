/*
 * trainer.c: a trainer's options, its replicas (one per device of this
 * rank) and its data-parallel job (src/dp), the parameter broadcast,
 * evaluation split across all replicas, and the small collectives the
 * other trainer files share (sums, rank 0's outcome, everyone's). The step
 * itself is step.c.
 */
#include "train/trainer.h"
#include "pp/pp.h"
#include "core/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  if (o->pipeline < 0) return clt__error(CLT_EINVAL, "--pipeline %d: give 1 or more stages", o->pipeline);
  if (o->micro_batches < 0)
    return clt__error(CLT_EINVAL, "--micro-batches %d: a step needs at least 1 micro-batch", o->micro_batches);
  if (o->pipeline > 1) {
    int M = o->micro_batches ? o->micro_batches : o->pipeline;
    if (o->accumulate != 1)
      return clt__error(CLT_EINVAL, "--accumulate %d with --pipeline %d: a pipeline's --micro-batches (%d) are its "
                        "accumulation; leave --accumulate at 1", o->accumulate, o->pipeline, M);
    if (o->batch % M)
      return clt__error(CLT_EINVAL, "--micro-batches %d must divide the batch size %lld", M, (long long)o->batch);
    if (o->zero)
      return clt__error(CLT_EUNSUPPORTED, "--zero %d with --pipeline %d is not supported: a stage's replicas keep "
                        "all of its optimizer state", o->zero, o->pipeline);
    if (o->balance != CLT_BALANCE_EQUAL)
      return clt__error(CLT_EUNSUPPORTED, "--balance %s with --pipeline %d is not supported: every stage must split "
                        "each micro-batch alike; use --balance equal", o->balance == CLT_BALANCE_AUTO ? "auto" : "weights",
                        o->pipeline);
    if (o->precision != CLT_F32)
      return clt__error(CLT_EUNSUPPORTED, "--precision fp16 with --pipeline %d is not supported: stages exchange "
                        "fp32 activations", o->pipeline);
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
  if (o->zero < 0 || o->zero > 2)
    return clt__error(CLT_EINVAL, "--zero %d: the ZeRO stages are 0 (off), 1 (optimizer state sharded across ranks) "
                      "and 2 (gradients too)", o->zero);
  if (!(o->bucket_mb >= 0 && o->bucket_mb <= 1e6)) return clt__error(CLT_EINVAL, "--bucket-mb must be from 0 to 1e6");
  if (o->balance == CLT_BALANCE_AUTO && o->balance_every < 1)
    return clt__error(CLT_EINVAL, "--balance auto needs a re-split interval of at least 1 step");
  if (o->balance_min_share < 0)
    return clt__error(CLT_EINVAL, "--balance-min-share must be 0 or more samples, not %lld",
                      (long long)o->balance_min_share);
  if (o->balance_min_share > 0 && o->balance != CLT_BALANCE_AUTO)
    return clt__error(CLT_EINVAL, "--balance-min-share %lld is the floor of --balance auto; with --balance %s "
                      "the shares are given (weights of 0 or more)", (long long)o->balance_min_share,
                      o->balance == CLT_BALANCE_EQUAL ? "equal" : "weights");
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
  return clt__optimizer_check(&o->optimizer); /* its row's check (src/core/optim.c) */
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

/* A replica that does not fit d under o: which higher ZeRO stage on these
 * ranks would (a note for the refusal), or "". The device's whole memory
 * and one buffer, capped by o->max_device_memory, as the check takes them. */
static const char *higher_stage_fits(const clt_model *m, const clt_train_options *o, const clt_trainer *t,
                                     const clt_device_info *d) {
  static _Thread_local char note[160];
  uint64_t cap = d->global_mem_bytes, one = d->max_alloc_bytes;
  if (o->max_device_memory && (!cap || o->max_device_memory < cap)) cap = o->max_device_memory;
  if (o->max_device_memory && (!one || o->max_device_memory < one)) one = o->max_device_memory;
  note[0] = 0;
  for (int z = o->zero + 1; t->nranks > 1 && z <= 2; z++) {
    clt_train_options oz = *o;
    clt_replica_memory need;
    oz.zero = z;
    if (clt_model_replica_memory_ranks(m, &oz, t->nranks, &need, NULL) < 0) break;
    if ((!cap || need.total <= cap) && (!one || need.largest <= one)) {
      char b[32];
      snprintf(note, sizeof note, "; --zero %d on these %d ranks would fit (a replica then needs %s)", z, t->nranks,
               clt__fmt_bytes(need.total, b, sizeof b));
      break;
    }
  }
  return note;
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

/* The gradient arena in the node's shared memory (comm/shm_arena.c):
 * where every rank holds one replica on a device whose buffers may be
 * host memory in place (PoCL), all ranks on one node, and the gradients
 * are summed as they are (f32, no ZeRO, no pipeline), the backward writes
 * them where every peer reads them, and the exchange sums them there
 * (dp/buckets.c): no copy into a window. Making it is collective, so the
 * ranks agree first; *at stays NULL otherwise (CLT_IN_PLACE=0 too). */
static int take_arena(clt_trainer *t, clt_comm *comm, const clt_train_options *o, int64_t P, unsigned char **at) {
  const char *env = getenv("CLT_IN_PLACE");
  *at = NULL;
  if (t->nranks < 2) return CLT_OK;
  int mine = t->nlocal == 1 && t->nreplicas == t->nranks && !t->pp && o->zero == 0 && o->precision == CLT_F32 &&
             P > 0 && t->ctx[0]->shared_buffers && clt__comm_arena_available(comm, (size_t)P * sizeof(float)) &&
             !(env && strcmp(env, "0") == 0);
  double refusals = !mine;
  int rc = clt__trainer_sum(t, &refusals, 1);
  if (rc < 0 || refusals > 0) return rc;
  rc = clt__comm_arena_acquire(comm, (size_t)P * sizeof(float), at);
  if (rc == CLT_OK) t->arena_comm = comm;
  CLT_TRY(clt__trainer_all_ok(t, rc, "making the gradients' arena in the node's shared memory"));
  clt__log(CLT_LOG_INFO, "rank %d: the gradients lie in the node's shared memory, summed in place", t->rank);
fail:
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
  t->local = m;
  clt_comm *dp_comm = t->comm; /* under a pipeline, the stage's replicas */
  if (o->pipeline > 1) {
    if (t->nlocal != 1)
      rc = clt__error(CLT_EUNSUPPORTED, "--pipeline %d runs one device per rank, but rank %d was given %d; select "
                      "one (--devices, CLT_DEVICES)", o->pipeline, t->rank, t->nlocal);
    else
      rc = clt__pp_create(t->comm, m, o, devs, &t->pp);
    if (rc < 0) { /* every rank fails alike, each with its own message */
      char own[1024];
      clt__strlcpy(own, clt_last_error(), sizeof own);
      clt__trainer_all_ok(t, rc, "setting up the pipeline");
      rc = clt__error(rc, "%s", own);
      goto fail;
    }
    CLT_TRY(clt__trainer_all_ok(t, rc, "setting up the pipeline"));
    CLT_TRY(clt__pp_split(t->pp));
    t->local = clt__pp_stage_model(t->pp);
    dp_comm = clt__pp_stage_comm(t->pp);
    t->opts.accumulate = clt__pp_micro_batches(t->pp); /* fit's micro-batches per step */
  }
  CLT_TRY(clt__dp_create(dp_comm, t->nlocal, &t->dp));
  t->nreplicas = clt__dp_replicas(t->dp);
  t->first_replica = clt__dp_first_replica(t->dp);
  CLT_TRY(clt__dp_agree_options(t->dp, t->local, o));
  t->micro_batch = t->opts.batch / t->opts.accumulate;
  if (t->micro_batch < t->nreplicas) {
    rc = clt__error(CLT_EINVAL, "the batch of %lld (per micro-batch %lld) is smaller than the %d replicas: every "
                    "replica needs at least one sample", (long long)o->batch, (long long)t->micro_batch, t->nreplicas);
    goto fail;
  }

  CLT_TRY(clt__dp_shares_init(t->dp, &t->opts, t->micro_batch));

  /* What cannot fit is refused before anything is allocated, on every
   * rank at once: each replica is made for the whole micro-batch (a
   * pipeline stage's for its equal share of it, and an activation set
   * per micro-batch it holds at once). */
  clt_replica_memory need;
  int64_t state_params = clt_model_param_count(t->local);
  int64_t grad_floats = state_params;
  t->pp_room = t->pp ? (t->micro_batch + t->nreplicas - 1) / t->nreplicas : t->micro_batch;
  if (o->zero > 0) CLT_TRY(clt__dp_zero_shard_params(m, o->bucket_mb, t->nranks, t->rank, &state_params));
  CLT_TRY(clt__dp_zero_grad_floats(m, o, t->nranks, state_params, &grad_floats));
  clt__replica_memory_sharded(t->local->spec, t->pp_room, clt_optimizer_state_per_param(&o->optimizer), state_params,
                              grad_floats, o->precision, t->nreplicas > 1 && o->precision == CLT_F16, &need);
  int nsets = t->pp ? clt__pp_activation_sets(t->pp) : 1;
  if (nsets > 1) {
    uint64_t extra = (uint64_t)(nsets - 1) * clt__replica_set_bytes(t->local->spec, t->pp_room, o->precision);
    need.activations += extra, need.total += extra;
  }
  if (t->pp) {
    char a[32], b[32];
    clt__log(CLT_LOG_INFO, "pipeline stage %d of %d (rank %d): %d activation set%s of %lld samples, %s of "
             "activations (%s in all)", clt__pp_stage(t->pp), clt__pp_stages(t->pp), t->rank, nsets,
             nsets == 1 ? "" : "s", (long long)t->pp_room, clt__fmt_bytes(need.activations, a, sizeof a),
             clt__fmt_bytes(need.total, b, sizeof b));
  }
  int bad = -1;
  for (int i = 0; rc == CLT_OK && i < t->nlocal; i++)
    if ((rc = clt__replica_memory_fits(&need, clt_devices_info(devs, i), o->max_device_memory)) < 0) bad = i;
  if (rc < 0) { /* the model, why, and the stage that would fit */
    char why[2048];
    clt__strlcpy(why, clt_last_error(), sizeof why);
    clt__error(rc, "%s: %s%s", m->spec->name, why, higher_stage_fits(m, o, t, clt_devices_info(devs, bad)));
  }
  CLT_TRY(clt__trainer_all_ok(t, rc, "checking that the replicas fit their devices"));

  /* Parameters: initialised from the seed on rank 0, broadcast to all
   * (a pipeline stage keeps its part). */
  int64_t P = clt_model_param_count(t->local), whole_P = clt_model_param_count(m);
  if (!(params = clt__calloc((size_t)whole_P, sizeof *params))) { rc = CLT_ENOMEM; goto fail; }
  if (t->rank == 0) clt__model_init_params(m->spec, o->seed, params);
  if (t->nranks > 1) CLT_TRY(clt_bcast(t->comm, params, (size_t)whole_P * sizeof *params, 0));
  if (t->pp) clt__pp_take(t->pp, m->spec, params, NULL, 0, params, NULL); /* in place: the stage's part first */

  /* Buckets and their plans first: under ZeRO they say which shard of the
   * optimizer state this rank's replicas keep. */
  clt__dp_zero_set(t->dp, o->zero, o->accumulate > 1);
  CLT_TRY(clt__dp_buckets_create(t->dp, t->local, o->bucket_mb, o->precision));
  int nshard;
  int64_t shard_params;
  clt__dp_shard(t->dp, &nshard, &shard_params);
  if (shard_params != state_params) {
    rc = clt__error(CLT_EINTERNAL, "rank %d: the ZeRO shard holds %lld parameters, the memory check counted %lld",
                    t->rank, (long long)shard_params, (long long)state_params);
    goto fail;
  }

  int per = clt_optimizer_state_per_param(&o->optimizer), sync_rc = CLT_OK;
  t->stale = clt__calloc(t->nlocal, sizeof *t->stale);
  if (!t->stale) { rc = CLT_ENOMEM; goto fail; }
  t->ctx = clt__calloc(t->nlocal, sizeof *t->ctx);
  t->rep = clt__calloc(t->nlocal, sizeof *t->rep);
  t->host_params = clt__calloc(t->nlocal, sizeof *t->host_params);
  t->host_state = clt__calloc(t->nlocal, sizeof *t->host_state);
  if (!t->ctx || !t->rep || !t->host_params || !t->host_state) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < t->nlocal; i++) CLT_TRY(clt_context_create(devs, i, &t->ctx[i]));
  unsigned char *grads_at = NULL;
  CLT_TRY(take_arena(t, dp_comm, o, P, &grads_at));
  for (int i = 0; i < t->nlocal; i++) {
    if (clt__dp_zero_pooled(t->dp)) /* ZeRO stage 2: the gradient pool comes with the buckets */
      CLT_TRY(clt__replica_create_pooled(t->ctx[i], t->local->spec, t->pp_room, per, shard_params, o->precision,
                                         params, &t->rep[i]));
    else
      CLT_TRY(clt__replica_create_sharded(t->ctx[i], t->local->spec, t->pp_room, per, shard_params, o->precision,
                                          params, grads_at, &t->rep[i]));
    if (t->pp) CLT_TRY(clt__replica_set_activation_sets(t->rep[i], nsets));
    clt__replica_set_timeout(t->rep[i], clt_comm_timeout(t->comm));
    if (clt__dp_zero_pooled(t->dp) && !clt__replica_enqueues_ahead(t->rep[i]) && sync_rc == CLT_OK) {
      /* Its buckets cannot share buffers (model/replica_pool.c): whole
       * gradients beside the shard's, checked against the cap too. */
      clt_replica_memory more;
      clt__replica_memory_sharded(m->spec, t->micro_batch, per, shard_params, P + shard_params, o->precision,
                                  t->nreplicas > 1 && o->precision == CLT_F16, &more);
      if ((sync_rc = clt__replica_memory_fits(&more, clt_devices_info(devs, i), o->max_device_memory)) < 0)
        clt__error_prefix(sync_rc, "%s: under --zero 2 on a device whose GEMMs the calling thread runs",
                          m->spec->name);
    }
    if (clt_optimizer_needs_host(&o->optimizer, clt_context_device(t->ctx[i]))) {
      clt__log(CLT_LOG_INFO, "%s rounds float divide and sqrt loosely: its %s step runs on the host so that every "
               "replica holds the same bits", clt_context_device(t->ctx[i])->name, clt_optimizer_name(o->optimizer.kind));
      t->host_params[i] = clt__calloc((size_t)P, sizeof(float));
      t->host_state[i] = clt__calloc((size_t)(shard_params ? shard_params : 1) * (per ? per : 1), sizeof(float));
      if (!t->host_params[i] || !t->host_state[i]) { rc = CLT_ENOMEM; goto fail; }
      memcpy(t->host_params[i], params, (size_t)P * sizeof(float));
      if (!t->host_grads && !(t->host_grads = clt__calloc((size_t)P, sizeof(float)))) { rc = CLT_ENOMEM; goto fail; }
    }
  }
  if (clt_optimizer_decoupled_decay(o->optimizer.kind) && !o->decay_all) {
    if (!(t->decay_host = clt__calloc((size_t)P, 1)) || !(t->decay_dev = clt__calloc(t->nlocal, sizeof *t->decay_dev))) {
      rc = CLT_ENOMEM;
      goto fail;
    }
    clt__model_decay_mask(t->local->spec, t->decay_host);
    for (int i = 0; i < t->nlocal; i++) {
      clt_tensor d;
      CLT_TRY(clt_buffer_create(t->ctx[i], (size_t)P, &t->decay_dev[i]));
      CLT_TRY(clt_tensor_view(t->decay_dev[i], 0, CLT_U8, 1, &P, &d));
      CLT_TRY(clt_tensor_upload(t->ctx[i], &d, t->decay_host, (size_t)P));
    }
  }
  CLT_TRY(clt__trainer_all_ok(t, sync_rc, "checking that the replicas fit their devices"));
  CLT_TRY(clt__dp_buckets_attach(t->dp, t->rep));
  CLT_TRY(clt__trainer_memory_report(t, &need)); /* what the replicas hold, measured, beside what was counted */
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
  clt__dp_destroy(t->dp);
  clt__pp_destroy(t->pp); /* after dp: its plans are on the stage's communicator */
  for (int i = 0; i < t->nlocal; i++) {
    if (t->rep) clt__replica_destroy(t->rep[i]);
    if (t->decay_dev) clt_buffer_release(t->decay_dev[i]);
    if (t->ctx) clt_context_destroy(t->ctx[i]);
    if (t->host_params) free(t->host_params[i]);
    if (t->host_state) free(t->host_state[i]);
  }
  free(t->decay_dev);
  free(t->decay_host);
  free(t->rep);
  free(t->ctx);
  free(t->host_params);
  free(t->host_state);
  free(t->host_grads);
  free(t->zero_state);
  free(t->memory);
  free(t->stale);
  free(t->sit_params), free(t->sit_state), free(t->sit_grads);
  clt__trace_destroy(t->trace);
  free(t->trace_lanes);
  clt__comm_arena_release(t->arena_comm); /* its buffers went with the replicas */
  if (t->own_comm) clt_comm_destroy(t->comm);
  free(t->checkpoint_dir);
  free(t);
}

int64_t clt_trainer_steps_done(const clt_trainer *t) { return t->steps_done; }
int clt_trainer_replicas(const clt_trainer *t) { return t->nreplicas; }

int clt_trainer_stages(const clt_trainer *t, int *lines, int cap) {
  if (!t) return 0;
  const clt_model_spec *s = t->model->spec;
  int P = t->pp ? clt__pp_stages(t->pp) : 1;
  const int *cut = t->pp ? clt__pp_cut(t->pp) : NULL;
  for (int i = 0; lines && i <= P && i <= cap; i++) {
    int layer = cut ? cut[i] : (i == 0 ? 1 : s->nlayers);
    lines[i] = layer < s->nlayers ? s->layers[layer].line : s->layers[s->nlayers - 1].line + 1;
  }
  return P;
}

int clt__trainer_lead(const clt_trainer *t) {
  for (int i = 0; i < t->nlocal; i++)
    if (clt__dp_active(t->dp, i)) return i;
  return 0;
}

/* Replica src's parameters and optimizer state into params and state
 * (from its host copies where its step runs on the host). */
static int get_replica(clt_trainer *t, int src, float *params, float *state) {
  int rc = CLT_OK, per = clt_optimizer_state_per_param(&t->opts.optimizer);
  int64_t P = clt_model_param_count(t->local);
  size_t pb = (size_t)P * sizeof(float), sb = (size_t)P * (size_t)per * sizeof(float);
  clt_tensor p = clt__replica_params(t->rep[src]), s = clt__replica_state(t->rep[src]);
  if (t->host_params[src]) memcpy(params, t->host_params[src], pb);
  else CLT_TRY(clt_tensor_download(t->ctx[src], &p, params, pb));
  if (per && t->host_params[src]) memcpy(state, t->host_state[src], sb);
  else if (per) CLT_TRY(clt_tensor_download(t->ctx[src], &s, state, sb));
fail:
  return rc;
}

/* Replica dst takes params and state (its host copies too). */
static int put_replica(clt_trainer *t, int dst, const float *params, const float *state) {
  int rc = CLT_OK, per = clt_optimizer_state_per_param(&t->opts.optimizer);
  int64_t P = clt_model_param_count(t->local);
  size_t pb = (size_t)P * sizeof(float), sb = (size_t)P * (size_t)per * sizeof(float);
  clt_tensor p = clt__replica_params(t->rep[dst]), s = clt__replica_state(t->rep[dst]);
  CLT_TRY(clt_tensor_upload(t->ctx[dst], &p, params, pb));
  if (per) CLT_TRY(clt_tensor_upload(t->ctx[dst], &s, state, sb));
  if (t->host_params[dst]) {
    memcpy(t->host_params[dst], params, pb);
    if (per) memcpy(t->host_state[dst], state, sb);
  }
fail:
  return rc;
}

/* The model a rank keeps on the host while it sits out, from a replica
 * that is up to date; every replica is stale from now on. */
static int start_sitting(clt_trainer *t) {
  int rc = CLT_OK, per = clt_optimizer_state_per_param(&t->opts.optimizer), src = -1;
  int64_t P = clt_model_param_count(t->local);
  if (!t->sit_params && (!(t->sit_params = clt__calloc((size_t)P, sizeof(float))) ||
                         !(t->sit_state = clt__calloc((size_t)P * (per ? per : 1), sizeof(float))) ||
                         !(t->sit_grads = clt__calloc((size_t)P, sizeof(float)))))
    return CLT_ENOMEM;
  for (int i = 0; i < t->nlocal && src < 0; i++)
    if (!t->stale[i]) src = i;
  if (src < 0) return clt__error(CLT_EINVAL, "internal: no replica of this rank is up to date");
  CLT_TRY(get_replica(t, src, t->sit_params, t->sit_state));
  for (int i = 0; i < t->nlocal; i++) t->stale[i] = 1;
  t->sitting = 1;
fail:
  return rc;
}

int clt__trainer_sync_replicas(clt_trainer *t, int only_active) {
  int rc = CLT_OK, src = -1, per = clt_optimizer_state_per_param(&t->opts.optimizer);
  int64_t P = clt_model_param_count(t->local);
  float *buf = NULL;
  if (t->sitting != clt__dp_sits_out(t->dp) && only_active && !t->sitting) CLT_TRY(start_sitting(t));
  int due = 0; /* replicas to bring up to date: none on almost every step, so nothing is copied */
  for (int i = 0; i < t->nlocal; i++) due += t->stale[i] && !(only_active && !clt__dp_active(t->dp, i));
  if (!due) return CLT_OK;
  for (int i = 0; i < t->nlocal && src < 0; i++)
    if (!t->stale[i]) src = i;
  const float *params = t->sit_params, *state = t->sit_state; /* while sitting out: the host's model */
  if (!t->sitting && src >= 0) {
    if (!(buf = clt__calloc((size_t)P * (size_t)(1 + per), sizeof *buf))) { rc = CLT_ENOMEM; goto fail; }
    CLT_TRY(get_replica(t, src, buf, buf + P));
    params = buf, state = buf + P;
  }
  for (int i = 0; (t->sitting || src >= 0) && i < t->nlocal; i++) {
    if (!t->stale[i] || (only_active && !clt__dp_active(t->dp, i))) continue;
    CLT_TRY(put_replica(t, i, params, state));
    t->stale[i] = 0;
  }
  /* Back from sitting out: the replicas with work are up to date now. */
  if (t->sitting && only_active && !clt__dp_sits_out(t->dp)) t->sitting = 0;
fail:
  free(buf);
  return rc < 0 ? clt__error_prefix(rc, "bringing a replica that sat out steps up to date") : rc;
}

int clt_trainer_params(clt_trainer *t, float *out, int64_t count) {
  int64_t P = clt_model_param_count(t->model);
  if (count != P)
    return clt__error(CLT_EINVAL, "clt_trainer_params: the model has %lld parameters, not %lld", (long long)P,
                      (long long)count);
  if (t->pp) return clt__trainer_whole(t, out, NULL, 1); /* collective: from every stage */
  int rc = clt__trainer_sync_replicas(t, 0);
  if (rc < 0) return rc;
  clt_tensor p = clt__replica_params(t->rep[0]);
  return clt_tensor_download(t->ctx[0], &p, out, (size_t)P * sizeof(float));
}

int clt__trainer_whole(clt_trainer *t, float *params, float *state, int everywhere) {
  int rc = CLT_OK, per = clt_optimizer_state_per_param(&t->opts.optimizer);
  int64_t P = clt_model_param_count(t->model), Ps = clt_model_param_count(t->local);
  float *buf = NULL;
  if (!t->pp) {
    if (t->rank == 0 || everywhere) {
      clt_tensor p = clt__replica_params(t->rep[0]);
      CLT_TRY(clt__trainer_sync_replicas(t, 0));
      CLT_TRY(clt_tensor_download(t->ctx[0], &p, params, (size_t)P * sizeof(float)));
      if (state && per) CLT_TRY(get_replica(t, 0, params, state));
      if (state && per && t->zero_state) memcpy(state, t->zero_state, (size_t)(per * P) * sizeof *state);
    }
    return CLT_OK;
  }
  /* A stage's replicas are bitwise the same; each stage's first sends. */
  if (!(buf = clt__calloc((size_t)(Ps * (1 + per)) + 1, sizeof *buf))) return CLT_ENOMEM;
  rc = get_replica(t, 0, buf, buf + Ps);
  CLT_TRY(clt__trainer_all_ok(t, rc, "reading a pipeline stage's parameters"));
  CLT_TRY(clt__pp_gather(t->pp, t->model->spec, buf, buf + Ps, state ? per : 0, params, state));
  if (everywhere && t->nranks > 1) CLT_TRY(clt_bcast(t->comm, params, (size_t)P * sizeof *params, 0));
fail:
  free(buf);
  return rc;
}
