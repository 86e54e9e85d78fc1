/*
 * batch_stats.c: batchnorm's statistics over the global batch under data
 * parallelism (PyTorch's SyncBatchNorm): the replicas' sum_stats hook adds
 * a layer's per-channel sums over every rank (clt__sum_ranks: in rank
 * order, the same bits on every rank, so every replica computes the same
 * statistics and running statistics), and what the scheme cannot carry is
 * refused before the first step, on every rank alike.
 *
 * The sums are a blocking collective inside a layer's forward and
 * backward, so every rank's replica must make the same calls in the same
 * order: a replica with no samples of a micro-batch runs the layers'
 * sums with zeros (clt__replica_run_empty, strategy.c). Replicas of one
 * rank run one after another in one thread, so a rank holds one replica
 * here; see doc/design.md.
 */
#include "dp/dp_internal.h"

int clt__dp_sum_stats(void *user, int layer, double *sums, int count) {
  clt__dp_rep *d = user;
  (void)layer;
  if (!d->stats_on || !d->stats_comm || clt_comm_size(d->stats_comm) < 2) return CLT_OK;
  return clt__sum_ranks(d->stats_comm, sums, count);
}

void clt__dp_stats_on(clt__dp *dp, int on) {
  for (int i = 0; dp->drep && i < dp->nlocal; i++)
    if (dp->drep[i]) dp->drep[i]->stats_on = on, dp->drep[i]->stats_comm = dp->comm;
}

/* A training step's micro-batch must give each channel more than one
 * value (checked at the step, not at create: evaluation may take a batch
 * of one). The same on every rank: the micro-batch is global. */
int clt__dp_check_step_batch(const clt__dp *dp) {
  return clt__spec_check_batch_stats(dp->local->spec, dp->micro_batch);
}

/* What batchnorm's global statistics cannot go with yet, each naming the
 * option: the running statistics are written by the forward into the
 * parameters, which ZeRO stage 3 and a host optimizer step overwrite. */
static int refuse(const clt__dp *dp, const clt__dp_how *how, const clt_layer_spec *l) {
  const clt_train_options *o = dp->o;
  const char *name = how->local->spec->name;
  const char *why = NULL;
  if (how->stage >= 0) why = "--pipeline: a stage's micro-batches would need their statistics summed stage by stage";
  else if (dp->nlocal > 1)
    why = "several replicas on one rank (--devices): they run one after another and cannot sum their statistics in "
          "the middle of a layer; give each rank one device";
  else if (o->zero == 3) why = "--zero 3: the running statistics live in the parameters, which stage 3 gathers anew";
  else if (o->offload == CLT_OFFLOAD_OPTIMIZER)
    why = "--offload optimizer: the host's step would write its copy of the running statistics over the device's";
  else if (o->recompute) why = "--recompute blocks: a block run again would update the running statistics twice";
  else if (o->balance == CLT_BALANCE_AUTO)
    why = "--balance auto: a rank at 0 samples sits out and would miss the statistics' sums";
  for (int i = 0; !why && i < dp->nlocal; i++)
    if (dp->host_params && dp->host_params[i])
      why = "a device that rounds divide and sqrt loosely, whose optimizer step runs on the host";
  if (!why) return CLT_OK;
  return clt__error(CLT_EUNSUPPORTED, "%s:%d: batchnorm (statistics over the global batch) does not go with %s",
                    name, l->line, why);
}

int clt__dp_check_batch_stats(const clt__dp *dp, const clt__job *job, const clt__dp_how *how) {
  const clt_model_spec *spec = how->local->spec;
  int first = clt__spec_has_sync_stats(spec), rc = CLT_OK;
  if (!first) return CLT_OK;
  rc = refuse(dp, how, &spec->layers[first]);
  return clt__all_ok(job->comm, rc, "checking batchnorm's options");
}
