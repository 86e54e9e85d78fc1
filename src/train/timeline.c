/*
 * timeline.c: clt_trainer_trace_start and clt_trainer_trace_save, a Chrome
 * / Perfetto trace of training (cltrain train --trace FILE.json).
 *
 * Each rank records spans (src/core/trace.c) on its lanes: "host", the thread
 * that drives the step (the step, its data waits, the enqueueing of each
 * micro-batch, the gradient exchange bucket by bucket, the waits for the
 * devices, the update, the checks, evaluation, checkpoints), and one lane
 * per replica, its device's work layer by layer, read from markers the
 * replica puts after every layer (forward, loss, backward) and placed on
 * the host's clock; under a pipeline (src/pp) the host lane has each
 * micro-batch's forward and backward and each wait for a neighbour, so the
 * bubble shows. The ranks start together after a barrier, so every
 * rank's time 0 is the same moment to within that barrier's skew; the
 * file holds one process per rank (pid = rank).
 */
#include "train/trainer.h"
#include "core/outfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void stop(clt_trainer *t) {
  t->s.i->set_trace(t->s.self, NULL, 0, NULL);
  clt__trace_destroy(t->timeline.trace);
  t->timeline.trace = NULL;
  free(t->timeline.lanes);
  t->timeline.lanes = NULL;
}

int clt_trainer_trace_start(clt_trainer *t) {
  int rc = CLT_OK;
  CLT_HANDLE(t, "trainer");
  if (t->timeline.trace) stop(t);
  double v[1] = {0};
  CLT_TRY(clt__trainer_sum(t, v, 1)); /* a barrier: every rank's time 0 is the same moment */
  CLT_TRY(clt__trace_create(&t->timeline.trace));
  if (!(t->timeline.lanes = clt__calloc(t->nlocal ? (size_t)t->nlocal : 1, sizeof *t->timeline.lanes))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  t->timeline.host = clt__trace_lane(t->timeline.trace, "host");
  for (int i = 0; i < t->nlocal; i++) {
    char name[256];
    snprintf(name, sizeof name, "replica %d: %s", clt__dp_first_replica(t->s.dp) + i, t->ctx[i]->info.name);
    t->timeline.lanes[i] = clt__trace_lane(t->timeline.trace, name);
  }
  t->s.i->set_trace(t->s.self, t->timeline.trace, t->timeline.host, t->timeline.lanes);
  return CLT_OK;
fail:
  stop(t);
  return rc;
}

/* Rank 0: the file from every rank's events (pieces[r], lens[r] bytes). */
static int write_file(const char *path, int nranks, char *const *pieces, const uint64_t *lens, int dropped) {
  int rc = CLT_OK;
  char *tmp = NULL, *target = NULL;
  FILE *f = NULL;
  CLT_TRY(clt__output_resolve("the trace", path, &target));
  if (!(tmp = clt__tmp_path(target))) { rc = CLT_ENOMEM; goto fail; }
  if (!(f = fopen(tmp, "w"))) {
    rc = clt__error(CLT_EIO, "cannot write the trace %s: %s", tmp, strerror(errno));
    goto fail;
  }
  fputs("{\"traceEvents\":[\n", f);
  for (int r = 0; r < nranks; r++) {
    if (r > 0) fputs(",\n", f);
    fwrite(pieces[r], 1, (size_t)lens[r], f);
  }
  fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"cltrain %s\",\"ranks\":%d,"
          "\"dropped_spans\":%s}}\n", clt_version(), nranks, dropped ? "true" : "false");
  int bad = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
  if ((fclose(f) != 0) | bad) {
    f = NULL;
    rc = clt__error(CLT_EIO, "cannot write the trace %s: %s", tmp, strerror(errno));
    goto fail;
  }
  f = NULL;
  rc = clt__output_replace(tmp, target); /* removes tmp when it fails */
  free(tmp), free(target);
  return rc;
fail:
  if (f) fclose(f);
  if (tmp) remove(tmp);
  free(tmp), free(target);
  return rc;
}

int clt_trainer_trace_save(clt_trainer *t, const char *path) {
  int rc = CLT_OK;
  char *mine = NULL, **pieces = NULL;
  uint64_t *lens = NULL;
  size_t len = 0;
  CLT_HANDLE(t, "trainer");
  CLT_PATH_ARG(path);
  if (!t->timeline.trace) return clt__error(CLT_EINVAL, "clt_trainer_trace_save: no trace was started (clt_trainer_trace_start)");
  char process[64];
  snprintf(process, sizeof process, "rank %d", t->rank);
  rc = clt__trace_events(t->timeline.trace, t->rank, process, &mine, &len);
  CLT_TRY(clt__trainer_all_ok(t, rc, "collecting the trace"));
  double dropped[1] = {clt__trace_dropped(t->timeline.trace)};
  CLT_TRY(clt__trainer_sum(t, dropped, 1));
  /* Every rank's events to rank 0: their sizes, then each rank's in turn. */
  lens = clt__calloc((size_t)t->nranks, sizeof *lens);
  pieces = clt__calloc((size_t)t->nranks, sizeof *pieces);
  if (!lens || !pieces) rc = CLT_ENOMEM;
  CLT_TRY(clt__trainer_all_ok(t, rc, "collecting the trace"));
  uint64_t l64 = len;
  CLT_TRY(clt_allgather(t->comm, &l64, sizeof l64, lens));
  for (int r = 0; r < t->nranks; r++) {
    if (r == t->rank) pieces[r] = mine, mine = NULL;
    else if (!(pieces[r] = malloc(lens[r] ? (size_t)lens[r] : 1))) rc = clt__error(CLT_ENOMEM, "out of memory");
    CLT_TRY(clt__trainer_all_ok(t, rc, "collecting the trace"));
    if (t->nranks > 1) CLT_TRY(clt_bcast(t->comm, pieces[r], (size_t)lens[r], r));
  }
  if (t->rank == 0) rc = write_file(path, t->nranks, pieces, lens, dropped[0] > 0);
  CLT_TRY(clt__trainer_share_status(t, rc));
  stop(t);
fail:
  for (int r = 0; pieces && r < t->nranks; r++) free(pieces[r]);
  free(pieces), free(lens), free(mine);
  return rc;
}
