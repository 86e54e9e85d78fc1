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

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  char *tmp = NULL;
  FILE *f = NULL;
  size_t n = strlen(path) + 8;
  if (!(tmp = clt__calloc(n, 1))) return CLT_ENOMEM;
  snprintf(tmp, n, "%s.tmp", path);
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
  if (ferror(f) | (fclose(f) != 0)) {
    f = NULL;
    rc = clt__error(CLT_EIO, "cannot write the trace %s: %s", tmp, strerror(errno));
    goto fail;
  }
  f = NULL;
  if (rename(tmp, path) != 0) rc = clt__error(CLT_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
fail:
  if (f) fclose(f);
  if (rc < 0) remove(tmp);
  free(tmp);
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
