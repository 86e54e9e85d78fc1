/*
 * checkpoint.h: what checkpoint.c (one file) and checkpoint_dir.c
 * (directories of them, export) share.
 */
#ifndef CLT_TRAIN_CHECKPOINT_H
#define CLT_TRAIN_CHECKPOINT_H

#include <limits.h>

#include "train/trainer.h"
#include "core/optim.h"
#include "strategy/strategy.h"

#define CLT__CKPT_FORMAT "cltrain-checkpoint"
#define CLT__CKPT_VERSION 1
#define CLT__CKPT_VERSION_STR "1"
/* An index of shards (checkpoint_shards.c): no tensors, the metadata of a
 * version-1 file and 'shards', which names each shard file, its ranges of
 * the whole layout and its data's size and CRC32. */
#define CLT__CKPT_SHARDED_VERSION 2
#define CLT__CKPT_SHARDED_VERSION_STR "2"
#define CLT__CKPT_SHARD_FORMAT "cltrain-checkpoint-shard"

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

/* A checkpoint's metadata, every field checked against what some run can
 * have written (checkpoint_meta.c, doc/checkpoint.md "Metadata"). */
typedef struct clt__ckpt_meta {
  const char *spec;              /* 'model': the spec as written (the open file's string) */
  int64_t param_count, steps_done;
  clt_sampler_pos pos;           /* 'sampler_position' (= 'epoch') in the file's micro-batches */
  int64_t micro_batch, train_samples;
  char seed[24];                 /* 'rng': the seed as written; the generator is cltrain's */
  int64_t dropout_step;          /* micro-batches done */
  double loss_scale;
  int fp16;                      /* 'loss_scaling' says fp16 (0: fp32, or a file older than it) */
  int64_t clean_steps, skipped;
  clt_optimizer_config optimizer; /* 'optimizer': the kind and its settings */
  int64_t replicas;              /* 'training' */
  int64_t *shares;               /* replicas of them, adding up to micro_batch */
  int64_t ep_steps;              /* 'epoch_progress' */
  double ep_sums[3];             /* loss, correct, labels */
  clt__run_info run;             /* zero in a file older than the record */
} clt__ckpt_meta;

/* Read and check every metadata field of an open checkpoint into m; free
 * it with clt__ckpt_meta_free (done on failure). What needs the model,
 * the epoch's labels (at most train_samples of labels_per_sample each),
 * clt__ckpt_meta_check_labels checks once the model is known to fit. */
int clt__ckpt_meta_read(struct clt__st_file *f, const char *path, clt__ckpt_meta *m);
int clt__ckpt_meta_check_labels(const clt__ckpt_meta *m, const char *path, int64_t labels_per_sample);
void clt__ckpt_meta_free(clt__ckpt_meta *m);
/* A top-level metadata string that is a whole number in [lo, hi]. */
int clt__ckpt_meta_whole(struct clt__st_file *f, const char *path, const char *key, int64_t lo, int64_t hi,
                         int64_t *out);
/* The run record alone (zero when there is none). */
int clt__ckpt_run_read(struct clt__st_file *f, const char *path, clt__run_info *out);

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
int clt__checkpoint_write(clt_trainer *t, const char *path, const float *buf, const char *shards);
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

/* ---- checkpoint_shards.c: a checkpoint written in shards ---- */

/* Collective: whether this save is written in shards (rank 0's say: the
 * strategy shards the state and the options do not ask for one file) and
 * then this rank's shard in *sh (free it with clt__state_shard_free). */
int clt__checkpoint_shard(clt_trainer *t, int *sharded, clt__state_shard *sh);
/* Collective: every rank writes its shard beside path, then rank 0 the
 * index at path once every shard is whole; every rank returns rank 0's
 * outcome. The shards of an earlier save to path go once it is whole. */
int clt__checkpoint_save_sharded(clt_trainer *t, const char *path, const clt__state_shard *sh);

/* An index's record of its shards, as read and checked. */
typedef struct clt__ckpt_shard_file {
  char path[PATH_MAX];   /* beside the index */
  int n;                 /* ranges */
  int64_t (*range)[2];   /* {first element, count} of the whole layout */
  int64_t count, data_bytes;
  char crc[16];
} clt__ckpt_shard_file;
typedef struct clt__ckpt_shards {
  int64_t params;        /* P: the ranges cover [0, P) once */
  int nslots;            /* optimizer-state components saved */
  char slot[CLT__OPTIM_MAX_SLOTS][32];
  int nfiles;
  clt__ckpt_shard_file *file;
} clt__ckpt_shards;

/* Whether an open checkpoint is an index of shards (format version 2). */
int clt__ckpt_is_sharded(struct clt__st_file *f);
/* Read and check the index's 'shards' (a bad index is CLT_EFORMAT naming
 * path and what is wrong). */
int clt__ckpt_shards_parse(struct clt__st_file *f, const char *path, clt__ckpt_shards *out);
void clt__ckpt_shards_free(clt__ckpt_shards *s);
/* Every shard there and whole: its framing and header CRC32, its size,
 * its ranges and CRC32 those of the index (with check_data its data's
 * CRC32 too); errors name the shard file and the index. */
int clt__ckpt_shards_check(const clt__ckpt_shards *s, const char *path, int check_data);
/* Component comp (0 the parameters, 1 + c the saved state slot c) of the
 * whole layout into dst (P floats), each range from the shard holding it. */
int clt__ckpt_shards_read(const clt__ckpt_shards *s, const char *path, int comp, float *dst);
/* Rank 0: the model and the optimizer state of an index's shards into
 * payload, checked as a one-file checkpoint's tensors are. */
int clt__ckpt_read_sharded(clt_trainer *t, struct clt__st_file *f, const char *path, const clt__ckpt_meta *m,
                           float *payload);
/* Remove the shard files of the index at path (its stem's), except those
 * of the save `keep` (NULL: all); and (orphans) shard files in dir whose
 * index is gone. */
void clt__ckpt_shards_remove(const char *path, const char *keep);
void clt__ckpt_shards_remove_orphans(const char *dir);

#endif
