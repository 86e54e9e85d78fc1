/*
 * dp.c: the data-parallel job: how many replicas each rank has and their
 * global numbering (rank r's replicas follow those of ranks < r), which
 * every gather of per-replica values in src/dp relies on; and its end.
 */
#include "dp/dp_internal.h"

#include <stdlib.h>

int clt__dp_create(clt_comm *comm, int nlocal, clt__dp **out) {
  int rc = CLT_OK;
  int64_t *counts = NULL, mine = nlocal;
  clt__dp *dp = clt__calloc(1, sizeof *dp);
  *out = NULL;
  if (!dp) return CLT_ENOMEM;
  dp->comm = dp->job_comm = comm;
  dp->stage = -1;
  dp->rank = clt_comm_rank(comm);
  dp->nranks = clt_comm_size(comm);
  dp->nlocal = nlocal;
  dp->probed = -1;
  counts = clt__calloc(dp->nranks, sizeof *counts);
  dp->rank_first = clt__calloc(dp->nranks, sizeof *dp->rank_first);
  dp->rank_count = clt__calloc(dp->nranks, sizeof *dp->rank_count);
  if (!counts || !dp->rank_first || !dp->rank_count) { rc = CLT_ENOMEM; goto fail; }
  if (dp->nranks > 1)
    CLT_TRY(clt_allgather(comm, &mine, sizeof mine, counts));
  else
    counts[0] = mine;
  for (int r = 0; r < dp->nranks; r++) {
    dp->rank_first[r] = dp->nreplicas;
    dp->rank_count[r] = (int)counts[r];
    if (counts[r] > dp->max_local) dp->max_local = (int)counts[r];
    dp->nreplicas += (int)counts[r];
  }
  dp->first_replica = dp->rank_first[dp->rank];
  free(counts);
  *out = dp;
  return CLT_OK;
fail:
  free(counts);
  clt__dp_destroy(dp);
  return rc;
}

void clt__dp_destroy(clt__dp *dp) {
  if (!dp) return;
  clt__dp_zero_free(dp); /* first: it waits for the last gather's writes to the replicas */
  for (int b = 0; dp->plans && b < dp->buckets.n; b++) clt_allreduce_plan_destroy(dp->plans[b]);
  free(dp->plans);
  clt__dp_free_replicas(dp);
  free(dp->lanes);
  clt__bucket_layout_free(&dp->buckets);
  free(dp->rank_first);
  free(dp->rank_count);
  free(dp->shares);
  free(dp->throughput);
  free(dp->local_rate);
  free(dp->cost);
  free(dp->fixed_s);
  free(dp->per_sample_s);
  free(dp->probe_gap);
  free(dp->probe_at);
  free(dp->obs);
  free(dp->shard_w);
  free(dp);
}

int clt__dp_replicas(const clt__dp *dp) { return dp->nreplicas; }
int clt__dp_first_replica(const clt__dp *dp) { return dp->first_replica; }
