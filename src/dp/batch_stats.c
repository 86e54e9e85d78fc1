/*
 * batch_stats.c: batchnorm's statistics over the global batch under data
 * parallelism (PyTorch's SyncBatchNorm): the replicas' sum_stats hook adds
 * a layer's per-channel sums over this rank's replicas (in replica order)
 * and then over every rank (clt__sum_ranks: in rank order, the same bits
 * on every rank, so every replica computes the same statistics and running
 * statistics); what the scheme cannot carry is refused before the first
 * step, on every rank alike.
 *
 * The sums are blocking, inside a layer's forward and backward, so every
 * replica must make the same calls in the same order: one with no samples
 * of a micro-batch runs the layers' sums with zeros
 * (clt__replica_run_empty, strategy.c). A rank's replicas otherwise run
 * one after another in one thread, where replica 0 would wait forever for
 * replica 1's sums; with batchnorm they run side by side instead, a thread
 * each (clt__dp_run_together), and meet at each sum:
 *
 *   replica 0 thread:  ... stats ─┐            ┌─ normalise ... stats ─┐
 *   replica 1 thread:  ... stats ─┤  main:     ├─ normalise ... stats ─┤ ...
 *                                 └─ add, sum ─┘                       └─
 *                                    the ranks
 *
 * The main thread adds the replicas' sums and makes the MPI call (MPI is
 * initialised FUNNELED); the replicas' OpenCL queues are their own.
 */
#include "dp/dp_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Where this rank's replicas meet: each one's sums of the round in
 * progress, how many have arrived at it and how many have ended their
 * run; the main thread closes a round when every replica has done one or
 * the other. */
typedef struct clt__stats_meet {
  pthread_mutex_t mu;
  pthread_cond_t to_main, to_replicas;
  int n, arrived, ended, round, rc;
  double **sums;
  int *count;
  char why[1024]; /* the failed round's message */
} clt__stats_meet;

/* A replica's sums into the meeting; back with every replica's and rank's. */
static int meet_sum(clt__stats_meet *m, int i, double *sums, int count) {
  pthread_mutex_lock(&m->mu);
  int round = m->round;
  m->sums[i] = sums, m->count[i] = count, m->arrived++;
  pthread_cond_signal(&m->to_main);
  while (m->round == round) pthread_cond_wait(&m->to_replicas, &m->mu);
  int rc = m->rc;
  pthread_mutex_unlock(&m->mu);
  return rc < 0 ? clt__error(rc, "%s", m->why) : CLT_OK;
}

int clt__dp_sum_stats(void *user, int layer, double *sums, int count) {
  clt__dp_rep *d = user;
  (void)layer;
  if (!sums) /* the question: are there others' sums to add? */
    return d->stats_on && (d->meet || (d->stats_comm && clt_comm_size(d->stats_comm) > 1));
  if (!d->stats_on) return CLT_OK;
  if (d->meet) return meet_sum(d->meet, d->index, sums, count);
  if (!d->stats_comm || clt_comm_size(d->stats_comm) < 2) return CLT_OK;
  return clt__sum_ranks(d->stats_comm, sums, count);
}

void clt__dp_stats_on(clt__dp *dp, int on) {
  for (int i = 0; dp->drep && i < dp->nlocal; i++)
    if (dp->drep[i]) dp->drep[i]->stats_on = on, dp->drep[i]->stats_comm = dp->comm, dp->drep[i]->index = i;
}

/* The main thread: each round, once every replica has arrived, their sums
 * added in replica order and then over the ranks, and handed back; a
 * round that some replica ended its run without (it failed) fails for all
 * (the others then fail too, and end). Returns when every run has ended. */
static int meet_rounds(clt__dp *dp, clt__stats_meet *m) {
  int rc = CLT_OK;
  double *total = NULL;
  pthread_mutex_lock(&m->mu);
  for (;;) {
    while (m->arrived + m->ended < m->n) pthread_cond_wait(&m->to_main, &m->mu);
    if (m->arrived == 0) break; /* every run has ended */
    int count = -1, r = CLT_OK;
    for (int i = 0; i < m->n; i++)
      if (m->sums[i] && count < 0) count = m->count[i];
      else if (m->sums[i] && m->count[i] != count) count = -2;
    if (m->ended > 0 || count < 0)
      r = clt__error(CLT_EINTERNAL, "rank %d: its replicas' batchnorm statistics are out of step (a replica's run "
                     "failed, or summed another layer)", dp->rank);
    else if (!(total = realloc(total, (size_t)count * sizeof *total)))
      r = CLT_ENOMEM;
    else {
      memset(total, 0, (size_t)count * sizeof *total);
      for (int i = 0; i < m->n; i++)
        for (int k = 0; k < count; k++) total[k] += m->sums[i][k];
      if (clt_comm_size(dp->comm) > 1) r = clt__sum_ranks(dp->comm, total, count);
      for (int i = 0; r == CLT_OK && i < m->n; i++) memcpy(m->sums[i], total, (size_t)count * sizeof *total);
    }
    if (r < 0) clt__strlcpy(m->why, clt_last_error(), sizeof m->why);
    if (r < 0 && rc == CLT_OK) rc = r;
    for (int i = 0; i < m->n; i++) m->sums[i] = NULL;
    m->rc = r, m->arrived = 0, m->round++;
    pthread_cond_broadcast(&m->to_replicas);
  }
  pthread_mutex_unlock(&m->mu);
  free(total);
  return rc;
}

typedef struct run_thread {
  clt__dp *dp;
  clt__stats_meet *m;
  int i, rc;
  int (*run)(clt__dp *dp, int i, void *arg);
  void *arg;
  char why[1024];
} run_thread;

static void *run_one(void *p) {
  run_thread *t = p;
  t->rc = t->run(t->dp, t->i, t->arg);
  if (t->rc < 0) clt__strlcpy(t->why, clt_last_error(), sizeof t->why);
  pthread_mutex_lock(&t->m->mu);
  t->m->ended++;
  pthread_cond_signal(&t->m->to_main);
  pthread_mutex_unlock(&t->m->mu);
  return NULL;
}

int clt__dp_run_together(clt__dp *dp, int (*run)(clt__dp *dp, int i, void *arg), void *arg) {
  int rc = CLT_OK, n = dp->nlocal, started = 0;
  clt__stats_meet m;
  run_thread *t = calloc((size_t)n, sizeof *t);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  memset(&m, 0, sizeof m);
  m.n = n;
  m.sums = calloc((size_t)n, sizeof *m.sums);
  m.count = calloc((size_t)n, sizeof *m.count);
  if (!t || !th || !m.sums || !m.count) {
    free(t), free(th), free(m.sums), free(m.count);
    return CLT_ENOMEM;
  }
  pthread_mutex_init(&m.mu, NULL);
  pthread_cond_init(&m.to_main, NULL);
  pthread_cond_init(&m.to_replicas, NULL);
  for (int i = 0; i < n; i++) dp->drep[i]->meet = &m;
  for (int i = 0; i < n; i++) {
    t[i] = (run_thread){.dp = dp, .m = &m, .i = i, .run = run, .arg = arg};
    if (pthread_create(&th[i], NULL, run_one, &t[i]) != 0) {
      rc = clt__error(CLT_ENOMEM, "rank %d: no thread for replica %d's run", dp->rank, i);
      pthread_mutex_lock(&m.mu);
      m.ended += n - i; /* the replicas never started count as ended: the others' rounds fail */
      pthread_mutex_unlock(&m.mu);
      break;
    }
    started++;
  }
  int r = meet_rounds(dp, &m);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < n; i++) dp->drep[i]->meet = NULL;
  /* the first replica that failed on its own, else the meeting's failure */
  for (int i = 0; rc == CLT_OK && i < started; i++)
    if (t[i].rc < 0 && !strstr(t[i].why, "out of step")) rc = clt__error(t[i].rc, "%s", t[i].why);
  if (rc == CLT_OK && r < 0) rc = clt__error(r, "%s", m.why);
  for (int i = 0; rc == CLT_OK && i < started; i++)
    if (t[i].rc < 0) rc = clt__error(t[i].rc, "%s", t[i].why);
  pthread_cond_destroy(&m.to_main), pthread_cond_destroy(&m.to_replicas), pthread_mutex_destroy(&m.mu);
  free(t), free(th), free(m.sums), free(m.count);
  return rc;
}

/* A training step's micro-batch must give each channel more than one
 * value (checked at the step, not at create: evaluation may take a batch
 * of one). The same on every rank: the micro-batch is global. */
int clt__dp_check_step_batch(const clt__dp *dp) {
  return clt__spec_check_batch_stats(dp->local->spec, dp->micro_batch);
}

/* What batchnorm's global statistics cannot go with yet, each naming the
 * option: the running statistics are written by the forward into the
 * parameters, which ZeRO stage 3 and a host optimizer step overwrite. */
static int refuse(const clt__dp *dp, const clt__dp_how *how, const char *name, const clt_layer_spec *l) {
  const clt_train_options *o = dp->o;
  const char *why = NULL;
  if (how->stage >= 0) why = "--pipeline: a stage's micro-batches would need their statistics summed stage by stage";
  else if (o->zero == 3) why = "--zero 3: the running statistics live in the parameters, which stage 3 gathers anew";
  else if (o->offload == CLT_OFFLOAD_OPTIMIZER)
    why = "--offload optimizer: the host's step would write its copy of the running statistics over the device's";
  else if (o->recompute) why = "--recompute blocks: a block run again would update the running statistics twice";
  else if (o->balance == CLT_BALANCE_AUTO)
    why = "--balance auto: a rank at 0 samples sits out and would miss the statistics' sums";
  for (int k = 0; !why && o->balance == CLT_BALANCE_WEIGHTS && o->balance_weights && k < o->balance_nweights; k++)
    if (o->balance_weights[k] == 0)
      why = "--balance weights with a weight of 0: a rank whose replicas all sit out keeps the model on the host, "
            "where the running statistics are not updated";
  for (int i = 0; !why && i < dp->nlocal; i++)
    if (dp->host_params && dp->host_params[i])
      why = "a device that rounds divide and sqrt loosely, whose optimizer step runs on the host";
  if (!why) return CLT_OK;
  return clt__error(CLT_EUNSUPPORTED, "%s:%d: batchnorm (statistics over the global batch) does not go with %s",
                    name, l->line, why);
}

int clt__dp_check_batch_stats(const clt__dp *dp, const clt__job *job, const clt__dp_how *how) {
  /* the whole model's layers: a pipeline stage's part may hold none, and
   * every rank must reach the same collective */
  const clt_model_spec *spec = job->model->spec;
  int first = clt__spec_has_sync_stats(spec), rc = CLT_OK;
  if (!first) return CLT_OK;
  rc = refuse(dp, how, spec->name, &spec->layers[first]);
  return clt__all_ok(job->comm, rc, "checking batchnorm's options");
}
