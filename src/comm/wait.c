/*
 * wait.c: operations with deadlines. Every collective is numbered; every
 * wait polls its requests from the calling thread and, after CLT_TIMEOUT
 * seconds without progress, fails naming the waiting rank, the peer, the
 * operation and the step. Before failing, the rank tells every other rank
 * what it waits for and listens briefly for theirs, so the error names the
 * rank that never joined even on ranks that only wait for a waiting
 * neighbour.
 */
#include "comm_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int clt__op_begin(clt_comm *comm, const char *name, int nsteps, clt__op *op) {
  memset(op, 0, sizeof *op);
  if (!comm) return clt__error(CLT_EINVAL, "%s: no communicator given", name);
  if (comm->broken)
    return clt__error(comm->broken, "rank %d: %s refused: the communicator failed earlier, with messages still in "
                                    "flight, and cannot be used again: %s",
                      comm->rank, name, comm->broken_detail ? comm->broken_detail : clt_strerror(comm->broken));
  op->comm = comm;
  op->name = name;
  op->number = ++comm->ops;
  op->nsteps = nsteps;
  op->last_progress = clt__now();
  return CLT_OK;
}

int clt__op_tag(const clt__op *op, int phase) {
  return (int)(op->number % (uint64_t)op->comm->tag_ops) * CLT__TAG_PHASES + phase;
}

int clt__op_error(clt__op *op, int step, int rc) {
  if (op->nsteps > 0)
    return clt__error_prefix(rc, "rank %d: %s #%llu (step %d/%d)", op->comm->rank, op->name,
                             (unsigned long long)op->number, step + 1, op->nsteps);
  return clt__error_prefix(rc, "rank %d: %s #%llu", op->comm->rank, op->name, (unsigned long long)op->number);
}

int clt__op_break(clt__op *op, int rc) {
  clt_comm *comm = op->comm;
  if (!comm->broken) {
    comm->broken = rc;
    comm->broken_detail = clt__strdup(clt_last_error());
  }
  return rc;
}

/* What a rank that timed out tells the others. */
struct clt__diag {
  uint64_t op;
  int32_t rank, peer, step, nsteps;
  char name[24];
};

/* Tell every rank what we wait for and listen for grace seconds for what
 * they wait for. heard[k] = 1 and in[k] filled for ranks that answered. */
static void exchange_diagnoses(clt__op *op, int peer, int step, struct clt__diag *in, char *heard) {
  clt_comm *comm = op->comm;
  int n = comm->size;
  clt__req *sreq = calloc((size_t)n, sizeof *sreq), *rreq = calloc((size_t)n, sizeof *rreq);
  free(comm->diag_out); /* an earlier diagnosis's sends were eager and are long gone */
  struct clt__diag *out = comm->diag_out = calloc(1, sizeof *out);
  if (!sreq || !rreq || !out) goto done;
  out->op = op->number;
  out->rank = comm->rank;
  out->peer = peer;
  out->step = step;
  out->nsteps = op->nsteps;
  clt__strlcpy(out->name, op->name, sizeof out->name);
  for (int k = 0; k < n; k++) {
    if (k == comm->rank) continue;
    clt__tp_irecv(comm, &in[k], sizeof in[k], k, comm->diag_tag, &rreq[k]);
    clt__tp_isend(comm, out, sizeof *out, k, comm->diag_tag, &sreq[k]);
  }
  /* Ranks that time out on the same operation do so within about the
   * skew of their start, far below this grace (a second at least, for
   * oversubscribed machines). */
  double grace = comm->timeout_s / 10;
  grace = grace < 1 ? 1 : grace > 10 ? 10 : grace;
  double until = clt__now() + grace;
  int pending;
  do {
    pending = 0;
    for (int k = 0; k < n; k++) {
      size_t got = 0;
      if (rreq[k].kind && clt__tp_test(comm, &rreq[k], &got) == 1 && got == sizeof in[k]) heard[k] = 1;
      if (sreq[k].kind) clt__tp_test(comm, &sreq[k], &got);
      pending += rreq[k].kind != 0;
    }
    if (pending) sched_yield();
  } while (pending && clt__now() < until);
done:
  for (int k = 0; sreq && rreq && k < n; k++) {
    clt__tp_abandon(comm, &rreq[k]);
    clt__tp_abandon(comm, &sreq[k]);
  }
  free(sreq);
  free(rreq);
}

/* The timeout error: what we waited for, who else waits for whom, and who
 * said nothing (the likely culprit). */
static int timeout_error(clt__op *op, int peer, int step, double waited) {
  clt_comm *comm = op->comm;
  int n = comm->size;
  struct clt__diag *in = calloc((size_t)n, sizeof *in);
  char *heard = calloc((size_t)n, 1);
  char msg[3072], silent[512] = "", others[1536] = "";
  size_t ls = 0, lo = 0;
  int nsilent = 0, first_silent = -1;

  if (in && heard && comm->mpi) exchange_diagnoses(op, peer, step, in, heard);
  for (int k = 0; in && heard && k < n; k++) {
    if (k == comm->rank) continue;
    if (!heard[k]) {
      if (first_silent < 0) first_silent = k;
      if (nsilent++ < 16 && ls < sizeof silent)
        ls += (size_t)snprintf(silent + ls, sizeof silent - ls, "%s%d", nsilent > 1 ? ", " : "", k);
      continue;
    }
    if (lo >= sizeof others) continue;
    in[k].name[sizeof in[k].name - 1] = '\0';
    if (in[k].op != op->number || strcmp(in[k].name, op->name) != 0)
      lo += (size_t)snprintf(others + lo, sizeof others - lo, "; rank %d is in %s #%llu, waiting for rank %d",
                             k, in[k].name, (unsigned long long)in[k].op, in[k].peer);
    else
      lo += (size_t)snprintf(others + lo, sizeof others - lo, "; rank %d waits for rank %d (step %d/%d)", k,
                             in[k].peer, in[k].step + 1, in[k].nsteps);
  }
  if (nsilent > 16 && ls < sizeof silent) snprintf(silent + ls, sizeof silent - ls, " and %d more", nsilent - 16);
  char whom[64], question[64] = "";
  int suspect = first_silent >= 0 ? first_silent : peer;
  if (peer >= 0)
    snprintf(whom, sizeof whom, "rank %d", peer);
  else
    snprintf(whom, sizeof whom, "its own device's copies");
  if (suspect >= 0) snprintf(question, sizeof question, "; is rank %d alive?", suspect);
  snprintf(msg, sizeof msg, "rank %d: %s #%llu waited %.1f s for %s (step %d/%d)%s%s%s%s%s", comm->rank, op->name,
           (unsigned long long)op->number, waited, whom, step + 1, op->nsteps, nsilent ? "; no word from rank" : "",
           nsilent > 1 ? "s " : nsilent ? " " : "", silent, others, question);
  free(in);
  free(heard);
  return clt__error(CLT_ETIMEDOUT, "%s", msg);
}

int clt__op_idle(clt__op *op, int peer, int step) {
  double idle = clt__now() - op->last_progress;
  if (idle > op->comm->timeout_s) return clt__op_break(op, timeout_error(op, peer, step, idle));
  if (idle > 0.5) {
    /* A long wait: a peer is slow or gone. Stop burning a core on it. */
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  } else if (idle > 0.002) {
    /* A peer still computing (ranks reach a gradient all-reduce some ms
     * apart): spinning here took half the CPU from the devices' worker
     * threads on a shared machine and halved training throughput. */
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  } else if (idle > (op->comm->own_cores ? 200e-6 : 20e-6)) {
    /* Past a small message's time, give the core away between polls. With
     * more ranks than cores, after 20 us: a peer that waits for the core
     * is what we wait for (3 ranks of the MLP on 2 cores: 80,000 samples/s
     * yielding, 66,000 spinning). Yielding from the first poll doubled a
     * 512-byte all-reduce (0.7 to 1.6 us). With a core per rank, only
     * after 200 us: a yield hands the core to whatever else is runnable on
     * it for a scheduler slice (a process beside the rank), while a thread
     * that wakes up (a CPU device's worker given work) takes the core from
     * a spinner anyway. 2 ranks of the MLP, each pinned to its core: 0.75
     * of the weak-scaling ceiling, against 0.65 yielding after 20 us; a
     * rank sharing its core with a busy process (bench/hetero.sh rig a):
     * 2.6x the throughput. Past 200 us a peer is still computing, and two
     * jobs on the same cores share them. */
    sched_yield();
  }
  return CLT_OK;
}

int clt__op_wait(clt__op *op, clt__req *reqs, const int *peers, size_t *got, int n, int step) {
  int rc = CLT_OK;
  for (;;) {
    int pending = -1, progressed = 0;
    for (int i = 0; i < n; i++) {
      if (!reqs[i].kind) continue;
      size_t g = 0;
      if ((rc = clt__tp_test(op->comm, &reqs[i], &g)) < 0) goto fail;
      if (rc == 1) {
        progressed = 1;
        if (got) got[i] = g;
      } else if (pending < 0) {
        pending = i;
      }
    }
    if (pending < 0) return CLT_OK;
    if (progressed)
      clt__op_progress(op);
    else if ((rc = clt__op_idle(op, peers[pending], step)) < 0)
      goto fail;
  }
fail:
  for (int i = 0; i < n; i++) clt__tp_abandon(op->comm, &reqs[i]);
  if (rc == CLT_ETIMEDOUT) return rc; /* the message already says who, what and where */
  return clt__op_break(op, clt__op_error(op, step, rc));
}
