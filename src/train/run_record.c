/*
 * run_record.c: the first record of a run's metrics, what the run was: the
 * library's version, every training option's value, the seed, the ranks,
 * each replica's device, host and peak FLOP/s, the host names, the model's
 * FLOPs per sample, and what the caller adds (run_json: the CLI's command
 * line and its own options). Every rank sends its replicas' lines to rank
 * 0, which also keeps each replica's peak for the MFU of the step records
 * (fit.c).
 */
#include "model/layer.h"
#include "train/trainer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One replica of the job, as rank 0 learns it. */
typedef struct replica_line {
  int64_t rank, replica, stage; /* replica: in its data-parallel group; stage: -1 without a pipeline */
  double peak;
  char source[16];              /* "measured" or "properties" */
  char device[128], host[64];
} replica_line;

/* Rank 0: the record itself, from every replica's line. */
static json_t *record(clt_trainer *t, const replica_line *all, const int64_t *counts, int64_t most) {
  json_t *o = json_object(), *devs = json_array(), *hosts = json_array();
  json_object_set_new(o, "event", json_string("run"));
  json_object_set_new(o, "version", json_string(clt_version()));
  json_object_set_new(o, "model", json_string(t->model->spec->name));
  json_object_set_new(o, "params", json_integer(clt_model_param_count(t->model)));
  json_object_set_new(o, "flops_per_sample", json_real(t->flops_per_sample));
  json_object_set_new(o, "seed", json_integer((json_int_t)t->opts.seed));
  json_object_set_new(o, "ranks", json_integer(t->nranks));
  json_object_set_new(o, "replicas", json_integer(clt__dp_replicas(t->s.dp)));
  for (int r = 0; r < t->nranks; r++)
    for (int64_t i = 0; i < counts[r]; i++) {
      const replica_line *l = &all[r * most + i];
      json_t *d = json_object();
      json_object_set_new(d, "rank", json_integer(l->rank));
      json_object_set_new(d, "replica", json_integer(l->replica));
      if (l->stage >= 0) json_object_set_new(d, "stage", json_integer(l->stage));
      json_object_set_new(d, "device", json_string(l->device));
      json_object_set_new(d, "host", json_string(l->host));
      json_object_set_new(d, "peak_flops", json_real(l->peak));
      json_object_set_new(d, "peak_source", json_string(l->source));
      json_array_append_new(devs, d);
      int seen = 0;
      for (size_t k = 0; k < json_array_size(hosts); k++)
        seen |= strcmp(json_string_value(json_array_get(hosts, k)), l->host) == 0;
      if (!seen) json_array_append_new(hosts, json_string(l->host));
    }
  json_object_set_new(o, "devices", devs);
  json_object_set_new(o, "hosts", hosts);
  json_object_set_new(o, "options", clt__options_json(&t->opts));
  if (t->opts.run_json) { /* checked by clt_trainer_create */
    json_t *extra = json_loads(t->opts.run_json, 0, NULL);
    if (json_is_object(extra)) json_object_update_missing(o, extra);
    json_decref(extra);
  }
  return o;
}

int clt__trainer_run_record(clt_trainer *t, FILE *metrics) {
  int rc = CLT_OK;
  int64_t most, *counts = NULL;
  replica_line *all = NULL, *mine = clt__calloc((size_t)t->nlocal + 1, sizeof *mine);
  if (!mine) return CLT_ENOMEM;
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  for (int i = 0; i < t->nlocal; i++) {
    clt__replica_report rep;
    const char *source = "properties";
    t->s.i->report(t->s.self, i, &rep);
    mine[i].rank = t->rank, mine[i].replica = rep.replica, mine[i].stage = rep.stage;
    CLT_TRY(clt_device_peak_flops(&t->ctx[i]->info, &mine[i].peak, &source));
    clt__strlcpy(mine[i].source, source, sizeof mine[i].source);
    clt__strlcpy(mine[i].device, t->ctx[i]->info.name, sizeof mine[i].device);
    clt__strlcpy(mine[i].host, host, sizeof mine[i].host);
  }
  CLT_TRY(clt__trainer_gather_replicas(t, mine, sizeof *mine, (void **)&all, &counts, &most));
  if (t->rank == 0) {
    /* The peaks of rank 0's data-parallel group (its pipeline stage's), by replica. */
    int R = clt__dp_replicas(t->s.dp);
    free(t->peak_flops);
    if (!(t->peak_flops = clt__calloc((size_t)R, sizeof *t->peak_flops))) { rc = CLT_ENOMEM; goto fail; }
    for (int r = 0; r < t->nranks; r++)
      for (int64_t i = 0; i < counts[r]; i++) {
        const replica_line *l = &all[r * most + i];
        if (l->stage == all[0].stage && l->replica >= 0 && l->replica < R) t->peak_flops[l->replica] = l->peak;
      }
    if (metrics) CLT_TRY(clt__trainer_metrics_write(t, metrics, record(t, all, counts, most)));
  }
fail:
  free(counts), free(all), free(mine);
  return rc;
}

double clt__trainer_flops_per_sample(const clt_trainer *t) {
  const clt_model_spec *s = t->s.local->spec;
  return 3.0 * clt__spec_flops(s, 0, s->nlayers);
}
