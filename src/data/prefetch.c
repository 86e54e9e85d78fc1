/*
 * prefetch.c: a background thread that decodes a replica's next batch slice
 * (normalised float32 samples and int32 labels, one per sample or one per
 * position of a token window, or a regression dataset's float targets in
 * the labels' place: 4 bytes each either way) while the caller computes on the current one.
 *
 * Two slots, each EMPTY -> FILLING (thread) -> READY -> HELD (caller) ->
 * EMPTY. The caller holds at most one slot, the batch it is working on; the
 * thread fills the other with the next position. A slot is given back when
 * the caller asks for the next batch, so the memory of a batch stays valid
 * until then. The thread touches only the dataset (read only), its own copy
 * of the sampler and the slot it fills: memory allocated and, for pinned
 * memory, mapped by the caller's thread. It makes no OpenCL or MPI call.
 *
 * Reconfiguring (seek, new shares) pauses the thread, waits for the slot it
 * is filling, empties every slot and restarts from the new position.
 */
#include "data/data.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum slot_state { SLOT_EMPTY, SLOT_FILLING, SLOT_READY, SLOT_HELD };

struct slot {
  enum slot_state state;
  clt_pinned *pinned;  /* with a context; else mem */
  void *mem;
  float *x;            /* (capacity, sample_size) */
  int32_t *y;          /* (capacity, labels_per_sample) */
  int64_t *indices;    /* (capacity) */
  int64_t capacity;    /* rows */
  clt_sampler_pos pos;
  int64_t n, global_n, global_labels;
  int64_t *all;        /* with masked targets: room for the global batch's indices */
  int64_t all_cap;
  int last_in_epoch;
  int rc;
  char error[1024];
};

struct clt_prefetcher {
  const clt_dataset *ds;
  clt_sampler *sampler;  /* our own copy; used by the thread unless paused */
  int replica;
  clt_context *ctx;
  struct slot slots[2];
  clt_sampler_pos fill_pos;  /* the next position the thread decodes */
  clt_sampler_pos take_pos;  /* the next position the caller gets */
  int held;                  /* the slot the caller holds, or -1 */
  int stop, paused;
  int failed;                /* a slot came back with an error: sticky until seek */
  int fail_rc;
  char fail_msg[1200];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int thread_started;
};

static void advance(const clt_sampler *s, clt_sampler_pos *p) {
  if (++p->step >= clt_sampler_steps_per_epoch(s)) {
    p->step = 0;
    p->epoch++;
  }
}

static void slot_free(struct slot *sl) {
  clt_pinned_destroy(sl->pinned);
  free(sl->mem);
  free(sl->indices);
  free(sl->all);
  memset(sl, 0, sizeof *sl);
}

/* Room for `rows` samples of ds: x, then y at the next 64-byte boundary.
 * The slot is replaced only once the new memory exists, so a failure leaves
 * it as it was. */
static int slot_alloc(struct slot *sl, clt_context *ctx, int64_t rows, const clt_dataset *ds) {
  if (rows < 1) rows = 1; /* a replica with a share of 0 still has a (never filled) slot: no 0-byte buffers */
  const size_t xbytes = (size_t)rows * (size_t)clt_dataset_sample_size(ds) * sizeof(float);
  const size_t yoff = (xbytes + 63) / 64 * 64;
  const size_t bytes = yoff + (size_t)rows * (size_t)clt_dataset_labels_per_sample(ds) * sizeof(int32_t);
  struct slot fresh = {0};
  unsigned char *base;
  int rc;
  if (ctx) {
    if ((rc = clt_pinned_create(ctx, bytes, &fresh.pinned)) < 0)
      return clt__error_prefix(rc, "prefetch buffer of %lld samples", (long long)rows);
    base = clt_pinned_ptr(fresh.pinned);
  } else {
    if (posix_memalign(&fresh.mem, 64, bytes ? bytes : 64) != 0)
      return clt__error(CLT_ENOMEM, "cannot allocate %zu bytes for a prefetch buffer of %lld samples", bytes,
                        (long long)rows);
    base = fresh.mem;
  }
  fresh.indices = clt__calloc(rows ? (size_t)rows : 1, sizeof *fresh.indices);
  if (!fresh.indices) {
    slot_free(&fresh);
    return CLT_ENOMEM;
  }
  fresh.x = (float *)base;
  fresh.y = (int32_t *)(base + yoff);
  fresh.capacity = rows;
  slot_free(sl);
  *sl = fresh;
  return CLT_OK;
}

/* The labels that count in the whole global batch of the slot's position:
 * every replica's slice, added up (each rank's prefetchers find the same
 * sum: the sampler is the job's). */
static int global_labels(clt_prefetcher *pf, struct slot *sl) {
  const clt_dataset *ds = pf->ds;
  sl->global_labels = sl->global_n * clt_dataset_labels_per_sample(ds);
  if (!ds->window_labels) return CLT_OK;
  if (sl->all_cap < sl->global_n) {
    int64_t *grown = realloc(sl->all, (size_t)sl->global_n * sizeof *grown);
    if (!grown) return clt__error(CLT_ENOMEM, "the indices of a global batch of %lld", (long long)sl->global_n);
    sl->all = grown, sl->all_cap = sl->global_n;
  }
  sl->global_labels = 0;
  for (int r = 0; r < clt_sampler_replicas(pf->sampler); r++) {
    int64_t n = 0;
    int rc = clt_sampler_slice(pf->sampler, sl->pos.epoch, sl->pos.step, r, sl->all, &n);
    if (rc < 0) return rc;
    for (int64_t i = 0; i < n; i++) sl->global_labels += clt__dataset_sample_labels(ds, sl->all[i]);
  }
  return CLT_OK;
}

/* The thread's work: one slice into one slot (outside the lock). */
static void slot_fill(clt_prefetcher *pf, struct slot *sl) {
  sl->n = 0;
  sl->rc = clt_sampler_slice(pf->sampler, sl->pos.epoch, sl->pos.step, pf->replica, sl->indices, &sl->n);
  if (sl->rc == CLT_OK) sl->rc = clt__dataset_get(pf->ds, sl->indices, sl->n, sl->x, sl->y);
  sl->global_n = clt_sampler_batch_size(pf->sampler, sl->pos.step);
  if (sl->rc == CLT_OK) sl->rc = global_labels(pf, sl);
  sl->last_in_epoch = sl->pos.step == clt_sampler_steps_per_epoch(pf->sampler) - 1;
  if (sl->rc < 0) clt__strlcpy(sl->error, clt_last_error(), sizeof sl->error);
}

static int empty_slot(const clt_prefetcher *pf) {
  for (int i = 0; i < 2; i++)
    if (pf->slots[i].state == SLOT_EMPTY) return i;
  return -1;
}

static void *prefetch_main(void *arg) {
  clt_prefetcher *pf = arg;
  pthread_mutex_lock(&pf->mu);
  for (;;) {
    int k;
    while (!pf->stop && (pf->paused || pf->failed || (k = empty_slot(pf)) < 0)) pthread_cond_wait(&pf->cv, &pf->mu);
    if (pf->stop) break;
    struct slot *sl = &pf->slots[k];
    sl->state = SLOT_FILLING;
    sl->pos = pf->fill_pos;
    advance(pf->sampler, &pf->fill_pos);
    pthread_mutex_unlock(&pf->mu);
    slot_fill(pf, sl);
    pthread_mutex_lock(&pf->mu);
    sl->state = SLOT_READY;
    pthread_cond_broadcast(&pf->cv);
  }
  pthread_mutex_unlock(&pf->mu);
  return NULL;
}

int clt_prefetcher_create(const clt_dataset *ds, const clt_sampler *s, int replica, clt_context *ctx,
                          clt_prefetcher **out) {
  int rc = CLT_OK;
  CLT_ARG(out);
  *out = NULL;
  CLT_HANDLE(ds, "dataset");
  CLT_HANDLE(s, "sampler");
  if (clt_dataset_count(ds) != clt_sampler_count(s))
    return clt__error(CLT_EINVAL, "prefetcher: the sampler covers %lld samples but %s has %lld",
                      (long long)clt_sampler_count(s), clt_dataset_path(ds), (long long)clt_dataset_count(ds));
  if (replica < 0 || replica >= clt_sampler_replicas(s))
    return clt__error(CLT_EINVAL, "prefetcher: replica %d does not exist; the sampler has %d", replica,
                      clt_sampler_replicas(s));
  clt_prefetcher *pf = clt__calloc(1, sizeof *pf);
  if (!pf) return CLT_ENOMEM;
  pthread_mutex_init(&pf->mu, NULL);
  pthread_cond_init(&pf->cv, NULL);
  pf->ds = ds;
  pf->replica = replica;
  pf->ctx = ctx;
  pf->held = -1;
  CLT_TRY(clt_sampler_clone(s, &pf->sampler));
  clt_sampler_get_position(s, &pf->take_pos);
  pf->fill_pos = pf->take_pos;
  for (int i = 0; i < 2; i++)
    CLT_TRY(slot_alloc(&pf->slots[i], ctx, clt_sampler_share(s, replica), ds));

  /* The thread takes no signals: they stay with the application's threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(&pf->thread, NULL, prefetch_main, pf);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err != 0) {
    rc = clt__error(CLT_ENOMEM, "cannot start the prefetch thread: %s", strerror(err));
    goto fail;
  }
  pf->thread_started = 1;
  *out = pf;
  return CLT_OK;
fail:
  clt_prefetcher_destroy(pf);
  return rc;
}

void clt_prefetcher_destroy(clt_prefetcher *pf) {
  if (!pf) return;
  if (pf->thread_started) {
    pthread_mutex_lock(&pf->mu);
    pf->stop = 1;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->thread, NULL);
  }
  for (int i = 0; i < 2; i++) slot_free(&pf->slots[i]);
  clt_sampler_destroy(pf->sampler);
  pthread_cond_destroy(&pf->cv);
  pthread_mutex_destroy(&pf->mu);
  free(pf);
}

int clt_prefetcher_next(clt_prefetcher *pf, clt_batch *batch) {
  clt_batch *b = batch;
  CLT_HANDLE(pf, "prefetcher");
  CLT_ARG(batch);
  memset(b, 0, sizeof *b);
  pthread_mutex_lock(&pf->mu);
  if (pf->held >= 0) { /* the caller is done with the batch it held */
    pf->slots[pf->held].state = SLOT_EMPTY;
    pf->held = -1;
    pthread_cond_broadcast(&pf->cv);
  }
  struct slot *sl = NULL;
  while (!pf->failed && !sl) {
    for (int i = 0; i < 2; i++)
      if (pf->slots[i].state == SLOT_READY && pf->slots[i].pos.epoch == pf->take_pos.epoch &&
          pf->slots[i].pos.step == pf->take_pos.step)
        sl = &pf->slots[i];
    if (!sl) pthread_cond_wait(&pf->cv, &pf->mu);
  }
  if (sl && sl->rc < 0) {
    pf->failed = 1;
    pf->fail_rc = sl->rc;
    snprintf(pf->fail_msg, sizeof pf->fail_msg, "prefetch thread, replica %d, epoch %lld step %lld: %s",
             pf->replica, (long long)sl->pos.epoch, (long long)sl->pos.step, sl->error);
    sl->state = SLOT_EMPTY;
  }
  if (pf->failed) {
    int rc = pf->fail_rc;
    char msg[sizeof pf->fail_msg];
    memcpy(msg, pf->fail_msg, sizeof msg);
    pthread_mutex_unlock(&pf->mu);
    return clt__error(rc, "%s", msg);
  }
  sl->state = SLOT_HELD;
  pf->held = (int)(sl - pf->slots);
  advance(pf->sampler, &pf->take_pos);
  b->x = sl->x;
  b->y = pf->ds->targets ? NULL : sl->y;
  b->targets = pf->ds->targets ? (const float *)(const void *)sl->y : NULL; /* floats in the labels' room */
  b->n = sl->n;
  b->sample_size = clt_dataset_sample_size(pf->ds);
  b->labels_per_sample = clt_dataset_labels_per_sample(pf->ds);
  b->global_n = sl->global_n;
  b->global_labels = sl->global_labels;
  b->epoch = sl->pos.epoch;
  b->step = sl->pos.step;
  b->last_in_epoch = sl->last_in_epoch;
  pthread_mutex_unlock(&pf->mu);
  return CLT_OK;
}

void clt_prefetcher_position(const clt_prefetcher *pf, clt_sampler_pos *pos) {
  if (pf && pos) *pos = pf->take_pos; /* only the caller's thread writes it */
}

/* Pause the thread, wait for the slot it is filling and empty every slot;
 * returns with the lock held. */
static void pause_and_drain(clt_prefetcher *pf) {
  pthread_mutex_lock(&pf->mu);
  pf->paused = 1;
  while (pf->slots[0].state == SLOT_FILLING || pf->slots[1].state == SLOT_FILLING)
    pthread_cond_wait(&pf->cv, &pf->mu);
  for (int i = 0; i < 2; i++) pf->slots[i].state = SLOT_EMPTY;
  pf->held = -1;
}

static void resume(clt_prefetcher *pf) {
  pf->fill_pos = pf->take_pos;
  pf->failed = 0;
  pf->paused = 0;
  pthread_cond_broadcast(&pf->cv);
  pthread_mutex_unlock(&pf->mu);
}

int clt_prefetcher_seek(clt_prefetcher *pf, clt_sampler_pos pos) {
  CLT_HANDLE(pf, "prefetcher");
  pause_and_drain(pf);
  int rc = clt_sampler_set_position(pf->sampler, pos);
  if (rc == CLT_OK) pf->take_pos = pos;
  resume(pf);
  return rc;
}

int clt_prefetcher_set_shares(clt_prefetcher *pf, int nreplicas, const int64_t *shares) {
  int rc = CLT_OK;
  clt_sampler *fresh = NULL;
  CLT_HANDLE(pf, "prefetcher");
  if (pf->replica >= nreplicas)
    return clt__error(CLT_EINVAL, "prefetcher of replica %d: new shares for only %d replicas", pf->replica,
                      nreplicas);
  pause_and_drain(pf);
  /* Everything that can fail happens on a copy; the prefetcher changes only
   * when all of it worked. */
  CLT_TRY(clt_sampler_clone(pf->sampler, &fresh));
  CLT_TRY(clt_sampler_set_shares(fresh, nreplicas, shares));
  const int64_t rows = clt_sampler_share(fresh, pf->replica);
  for (int i = 0; i < 2; i++)
    if (pf->slots[i].capacity < rows)
      CLT_TRY(slot_alloc(&pf->slots[i], pf->ctx, rows, pf->ds));
  clt_sampler_destroy(pf->sampler);
  pf->sampler = fresh;
  fresh = NULL;
fail:
  clt_sampler_destroy(fresh);
  resume(pf);
  return rc;
}
