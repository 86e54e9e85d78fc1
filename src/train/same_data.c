/*
 * same_data.c: every rank of a job trains and evaluates on the same data.
 * Each rank has opened its own copy (the same file on a shared file
 * system, or a copy on each node's disk); before fit's first step and
 * before an evaluation the ranks exchange their datasets' fingerprints
 * (data/fingerprint.c: shape, headers, samples at fixed positions) and
 * every rank fails alike, naming the ranks and files that differ from rank
 * 0's and how: a dataset of the same shape but other samples would train
 * on silently, each rank's gradient of other data.
 */
#include "data/data.h"
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How rank r's b differs from rank 0's a, to follow "rank r " ("" when
 * it does not). */
static void difference(const clt__data_fingerprint *a, const clt__data_fingerprint *b, const char *verb, char *out,
                       size_t len) {
  char da[96], db[96];
  out[0] = 0;
  if ((a->count < 0) != (b->count < 0)) /* a set on one rank, none on the other */
    snprintf(out, len, "%s %s but rank 0 on %s", verb, b->count < 0 ? "no dataset" : "a dataset",
             a->count < 0 ? "none" : "one");
  else if (a->count != b->count || a->sample_size != b->sample_size)
    snprintf(out, len, "%s %lld samples of %lld values but rank 0 on %lld of %lld", verb, (long long)b->count,
             (long long)b->sample_size, (long long)a->count, (long long)a->sample_size);
  else if (a->ntokens != b->ntokens)
    snprintf(out, len, "%s %lld tokens but rank 0 on %lld", verb, (long long)b->ntokens, (long long)a->ntokens);
  else if (a->ndims != b->ndims || memcmp(a->dims, b->dims, sizeof a->dims) || a->labels_per_sample != b->labels_per_sample)
    snprintf(out, len, "%s samples of shape %s but rank 0 on %s", verb, clt__dims_str(b->ndims, b->dims, db, sizeof db),
             clt__dims_str(a->ndims, a->dims, da, sizeof da));
  else if (a->num_classes != b->num_classes)
    snprintf(out, len, "%s %d classes but rank 0 on %d", verb, b->num_classes, a->num_classes);
  else if (a->header != b->header)
    snprintf(out, len, "%s files whose header differs from rank 0's (the same shape, another format or contents)",
             verb);
  for (int i = 0; !out[0] && i < CLT__DATA_PROBES; i++)
    if (a->probe[i] != b->probe[i])
      snprintf(out, len, "%s another sample %lld than rank 0, one of %d at fixed positions compared", verb,
               (long long)clt__probe_sample(a->count, i), CLT__DATA_PROBES);
  if (!out[0] && (memcmp(&a->mean, &b->mean, sizeof a->mean) || memcmp(&a->std, &b->std, sizeof a->std)))
    snprintf(out, len, "normalises with mean %g std %g but rank 0 with mean %g std %g", (double)b->mean,
             (double)b->std, (double)a->mean, (double)a->std);
}

int clt__trainer_same_data(clt_trainer *t, const clt_dataset *ds, const char *verb) {
  if (t->nranks == 1) return CLT_OK;
  clt__data_fingerprint mine, *all = clt__calloc((size_t)t->nranks, sizeof *all);
  if (!all) return CLT_ENOMEM;
  memset(&mine, 0, sizeof mine);
  if (ds)
    clt__dataset_fingerprint(ds, &mine);
  else
    mine.count = -1, clt__strlcpy(mine.path, "(none)", sizeof mine.path);
  int rc = clt_allgather(t->comm, &mine, sizeof mine, all);
  char msg[3072], how[256];
  size_t used = 0;
  int differ = 0;
  for (int r = 1; rc == CLT_OK && r < t->nranks && used < sizeof msg; r++) {
    difference(&all[0], &all[r], verb, how, sizeof how);
    if (!how[0]) continue;
    if (differ++ == 8) {
      used += (size_t)snprintf(msg + used, sizeof msg - used, "; ...");
      break;
    }
    if (strcmp(all[r].path, all[0].path) == 0)
      used += (size_t)snprintf(msg + used, sizeof msg - used, "%srank %d %s (%s on both)", used ? "; " : "", r, how,
                               all[r].path);
    else
      used += (size_t)snprintf(msg + used, sizeof msg - used, "%srank %d %s (rank %d reads %s, rank 0 %s)",
                               used ? "; " : "", r, how, r, all[r].path, all[0].path);
  }
  if (rc == CLT_OK && differ)
    rc = clt__error(CLT_EMISMATCH, "the ranks read different data: %s; every rank must read the same dataset (the same "
                    "file, or identical copies of it)", msg);
  free(all);
  return rc;
}
