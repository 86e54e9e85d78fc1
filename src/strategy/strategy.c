/*
 * strategy.c: what every strategy's plan shares: the initial parameters,
 * and the small collectives that keep the ranks agreeing on an outcome.
 */
#include "strategy/strategy.h"

#include <stdlib.h>
#include <string.h>

int clt__strategy_initial_params(clt_comm *comm, const clt_model *m, uint64_t seed, float **out) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(m);
  float *params = clt__calloc((size_t)(P ? P : 1), sizeof *params);
  *out = NULL;
  if (!params) return CLT_ENOMEM;
  if (clt_comm_rank(comm) == 0) clt__model_init_params(m->spec, seed, params);
  if (clt_comm_size(comm) > 1) CLT_TRY(clt_bcast(comm, params, (size_t)P * sizeof *params, 0));
  *out = params;
  return CLT_OK;
fail:
  free(params);
  return rc;
}

int clt__all_ok(clt_comm *comm, int rc, const char *what) {
  int nranks = clt_comm_size(comm), rank = clt_comm_rank(comm);
  int32_t mine = rc, *all;
  if (nranks == 1) return rc;
  if (!(all = calloc((size_t)nranks, sizeof *all))) return clt__error(CLT_ENOMEM, "%s: out of memory", what);
  int grc = clt_allgather(comm, &mine, sizeof mine, all);
  for (int r = 0; grc == CLT_OK && r < nranks; r++)
    if (all[r] < 0) {
      grc = r == rank ? all[r] : clt__error(all[r], "%s failed on rank %d: %s", what, r, clt_strerror(all[r]));
      break;
    }
  free(all);
  return grc;
}

int clt__sum_ranks(clt_comm *comm, double *vals, int n) {
  int nranks = clt_comm_size(comm);
  if (nranks == 1) return CLT_OK;
  double *all = clt__calloc((size_t)nranks * n, sizeof *all);
  if (!all) return CLT_ENOMEM;
  int rc = clt_allgather(comm, vals, (size_t)n * sizeof *vals, all);
  if (rc == CLT_OK)
    for (int i = 0; i < n; i++) {
      vals[i] = 0;
      for (int r = 0; r < nranks; r++) vals[i] += all[(size_t)r * n + i];
    }
  free(all);
  return rc;
}

void clt__state_shard_free(clt__state_shard *s) {
  if (!s) return;
  free(s->range), free(s->params), free(s->state);
  memset(s, 0, sizeof *s);
}
