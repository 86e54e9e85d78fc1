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
  char path[PATH_MAX];
  char msg[2048];            /* rank 0's error */
} clt__ckpt_header;

/* Rank 0: write the trainer's state to path (atomically). */
int clt__checkpoint_write(clt_trainer *t, const char *path);
/* Open path and check it is a whole checkpoint of a version we read: the
 * format, the version, the header's and the data's CRC32 and size. */
int clt__checkpoint_open(const char *path, struct clt__st_file **out);
/* Buffers for a load (free each with free()). */
int clt__checkpoint_alloc(clt_trainer *t, clt__ckpt_header **h, int64_t **shares, float **payload);
/* Rank 0: read and check path against the trainer (model, optimizer, seed,
 * batch) into h, shares and payload; h->rc gets the status. */
int clt__checkpoint_read(clt_trainer *t, const char *path, clt__ckpt_header *h, int64_t *shares, float *payload);
/* Collective: broadcast rank 0's reading and apply it to every replica. */
int clt__checkpoint_apply(clt_trainer *t, clt__ckpt_header *h, int64_t *shares, float *payload);

#endif
