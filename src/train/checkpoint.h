/*
 * checkpoint.h: what checkpoint.c (one file) and checkpoint_dir.c
 * (directories of them, export) share.
 */
#ifndef CLT_TRAIN_CHECKPOINT_H
#define CLT_TRAIN_CHECKPOINT_H

#include <limits.h>

#include "train/trainer.h"

#define CLT__CKPT_FORMAT "cltrain-checkpoint"
#define CLT__CKPT_VERSION 1
#define CLT__CKPT_VERSION_STR "1"

struct clt__st_file;

/* What rank 0 read from a checkpoint and every rank needs: broadcast as
 * is, then the shares (nshares of them) and the payload (parameters, then
 * each float of optimizer state per parameter, in arena layout). */
typedef struct clt__ckpt_header {
  int32_t rc;                /* rank 0's status: nothing is applied unless 0 */
  int32_t nshares;           /* balancer shares to restore (0: keep this run's) */
  int64_t steps_done, micro_steps;
  int64_t epoch, step;       /* sampler position, in this run's micro-batches */
  int64_t count;             /* training samples the position refers to */
  int64_t ep_steps;
  double ep_sums[3];
  double loss_scale;         /* f16 runs: the dynamic loss scale and its counters (0: start afresh) */
  int64_t scale_clean_steps, skipped;
  char run_id[24];           /* the run the checkpoint belongs to ("" in files older than the record) */
  char path[PATH_MAX];
  char msg[2048];            /* rank 0's error */
} clt__ckpt_header;

/* A checkpoint's run record (metadata "run", doc/checkpoint.md): the run's
 * id, kept across resumes; the step the writing session started from (0,
 * or the step it resumed); and when that session started, in ns since the
 * Unix epoch. "latest" is the newest session's newest step. */
typedef struct clt__run_info {
  char id[24];
  int64_t branched_from, started_ns;
} clt__run_info;

/* Open path and check its framing, format, version and header CRC32 (and,
 * with check_data, its data's CRC32), then read its run record (zero for
 * files older than the record); the file is closed again. */
int clt__checkpoint_run_info(const char *path, int check_data, clt__run_info *out);

/* Collective: the whole model's parameters and optimizer state from every
 * rank's replicas (the strategy's get_state) into *out (P (1 + per)
 * floats, parameters then state; freed by the caller; NULL on failure). */
int clt__checkpoint_gather(clt_trainer *t, float **out);
/* Rank 0: write the trainer's state to path (atomically), with the
 * parameters and state clt__checkpoint_gather gave. */
int clt__checkpoint_write(clt_trainer *t, const char *path, const float *buf);
/* Open path and check it is a whole checkpoint of a version we read: the
 * format, the version, the header's CRC32 and size, and with check_data the
 * data's CRC32. */
int clt__checkpoint_open(const char *path, int check_data, struct clt__st_file **out);
/* Buffers for a load (free each with free()). */
int clt__checkpoint_alloc(clt_trainer *t, clt__ckpt_header **h, int64_t **shares, float **payload);
/* Rank 0: read and check path against the trainer (model, optimizer, seed,
 * batch) into h, shares and payload; h->rc gets the status. */
int clt__checkpoint_read(clt_trainer *t, const char *path, clt__ckpt_header *h, int64_t *shares, float *payload);
/* Collective: broadcast rank 0's reading and apply it to every replica. */
int clt__checkpoint_apply(clt_trainer *t, clt__ckpt_header *h, int64_t *shares, float *payload);

#endif
