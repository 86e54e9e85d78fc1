/*
 * schedule.c: one step's micro-batches through a pipeline's stages.
 *
 * Stage s of P runs, for micro-batches 0 .. m-1 (those of its pipeline
 * with samples; the same on every stage, since all see the same data):
 *
 *   1F1B   warm = min(P - s - 1, m) forwards, then one forward and one
 *          backward in turn, then the backwards left: at most warm + 1
 *          micro-batches' activations are held (Narayanan et al. 2019,
 *          PipeDream-Flush). Their sets are reused round robin: when
 *          forward j starts, backward j - (warm + 1) is done.
 *   GPipe  every forward, then every backward: m sets.
 *
 * The last stage runs each backward right after its forward (the loss
 * gradient is there at once), so its "backward" turns are empty and it
 * holds one set under either schedule.
 *
 * Activations go forward and their gradients backward through host memory:
 * the device output is read to a host buffer and sent with MPI_Isend; every
 * receive of the step is posted at its start, into a buffer of its own, so
 * messages travel while the stages compute, and no send waits for a
 * receive to be posted. Waits poll with the communicator's deadline
 * (comm/p2p.h) from this thread only (MPI_THREAD_FUNNELED).
 */
#include "pp/pp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Host buffers and messages of one step. */
typedef struct step_bufs {
  float *act_in, *act_out, *grad_in, *grad_out; /* per micro-batch at off_in / off_out */
  int64_t *off_in, *off_out;                    /* floats from each buffer's start */
  clt__p2p_msg *recv_act, *recv_grad, *send_act, *send_grad;
} step_bufs;

static void free_bufs(step_bufs *b) {
  free(b->act_in), free(b->act_out), free(b->grad_in), free(b->grad_out);
  free(b->off_in), free(b->off_out);
  free(b->recv_act), free(b->recv_grad), free(b->send_act), free(b->send_grad);
}

static void abandon_all(clt__pp *pp, step_bufs *b, int m) {
  for (int k = 0; k < m; k++) {
    if (b->recv_act) clt__p2p_abandon(pp->pipe_comm, &b->recv_act[k]);
    if (b->recv_grad) clt__p2p_abandon(pp->pipe_comm, &b->recv_grad[k]);
    if (b->send_act) clt__p2p_abandon(pp->pipe_comm, &b->send_act[k]);
    if (b->send_grad) clt__p2p_abandon(pp->pipe_comm, &b->send_grad[k]);
  }
}

static int alloc_bufs(clt__pp *pp, int m, const clt__pp_micro *mb, int64_t in_numel, int64_t out_numel,
                      step_bufs *b) {
  int first = pp->stage == 0, last = pp->stage == pp->P - 1;
  int64_t total = 0;
  memset(b, 0, sizeof *b);
  b->off_in = clt__calloc((size_t)m + 1, sizeof *b->off_in);
  b->off_out = clt__calloc((size_t)m + 1, sizeof *b->off_out);
  b->recv_act = clt__calloc((size_t)m, sizeof *b->recv_act);
  b->recv_grad = clt__calloc((size_t)m, sizeof *b->recv_grad);
  b->send_act = clt__calloc((size_t)m, sizeof *b->send_act);
  b->send_grad = clt__calloc((size_t)m, sizeof *b->send_grad);
  if (!b->off_in || !b->off_out || !b->recv_act || !b->recv_grad || !b->send_act || !b->send_grad) return CLT_ENOMEM;
  for (int k = 0; k < m; k++) {
    b->off_in[k + 1] = b->off_in[k] + mb[k].n * in_numel;
    b->off_out[k + 1] = b->off_out[k] + mb[k].n * out_numel;
    total += mb[k].n;
  }
  (void)total;
  if (!first && (!(b->act_in = clt__calloc((size_t)b->off_in[m] + 1, sizeof(float))) ||
                 !(b->grad_out = clt__calloc((size_t)b->off_in[m] + 1, sizeof(float)))))
    return CLT_ENOMEM;
  if (!last && (!(b->act_out = clt__calloc((size_t)b->off_out[m] + 1, sizeof(float))) ||
                !(b->grad_in = clt__calloc((size_t)b->off_out[m] + 1, sizeof(float)))))
    return CLT_ENOMEM;
  return CLT_OK;
}

/* The device context's progress hook while a step runs (runtime.c). */
static void progress(void *user) { clt__p2p_progress(user); }

/* A wait, timed as the pipeline's bubble. */
static int wait_msg(clt__pp *pp, clt__p2p_msg *msg, const char *what) {
  double t0 = clt__now();
  int64_t s0 = clt__trace_ns();
  int rc = clt__p2p_wait(pp->pipe_comm, msg, what);
  pp->wait_s += clt__now() - t0;
  int64_t s1 = clt__trace_ns();
  if (s1 - s0 > 1000) clt__trace_span(pp->trace, pp->trace_lane, "wait", s0, s1, "waiting for %s", what);
  return rc;
}

void clt__pp_set_trace(clt__pp *pp, clt__trace *tr, int lane) {
  if (!pp) return;
  pp->trace = tr;
  pp->trace_lane = lane;
}

static const char *ACT = "pipeline activations", *GRAD = "pipeline gradients";

/* Forward of micro-batch k (the j-th with samples) in set `set`. */
static int forward(clt__pp *pp, const clt__pp_micro *mb, int k, int set, int record, const clt__pass *base,
                   step_bufs *b, double *loss, double *metric) {
  clt__replica *r = pp->r;
  int rc = CLT_OK, first = pp->stage == 0, last = pp->stage == pp->P - 1;
  int64_t n = mb[k].n;
  size_t in_bytes = (size_t)(b->off_in[k + 1] - b->off_in[k]) * sizeof(float);
  size_t out_bytes = (size_t)(b->off_out[k + 1] - b->off_out[k]) * sizeof(float);
  clt__pass pass = *base;
  pass.step = mb[k].dropout_step, pass.global_first = mb[k].global_first, pass.targets = mb[k].targets;
  pass.record = record;
  const float *x = mb[k].x;
  if (!first) {
    CLT_TRY(wait_msg(pp, &b->recv_act[k], ACT));
    x = b->act_in + b->off_in[k];
  }
  int64_t s0 = clt__trace_ns();
  if (last) {
    float l;
    double c;
    CLT_TRY(clt__pp_stage_forward(r, pp->set[set], x, mb[k].y, n, &pass, 1, NULL,
                                       first || !pass.train ? NULL : b->grad_out + b->off_in[k]));
    CLT_TRY(clt__replica_read_loss(r, &l, &c));
    clt__trace_span(pp->trace, pp->trace_lane, "compute", s0, clt__trace_ns(), "micro-batch %d: forward%s", k,
                    pass.train ? " and backward" : "");
    *loss += l, *metric += c;
    if (!first && pass.train)
      CLT_TRY(clt__p2p_isend(pp->pipe_comm, b->grad_out + b->off_in[k], in_bytes, pp->stage - 1, CLT__PP_TAG_GRAD,
                             (uint64_t)k + 1, &b->send_grad[k]));
  } else {
    CLT_TRY(clt__pp_stage_forward(r, pp->set[set], x, NULL, n, &pass, 0, b->act_out + b->off_out[k], NULL));
    clt__trace_span(pp->trace, pp->trace_lane, "compute", s0, clt__trace_ns(), "micro-batch %d: forward", k);
    CLT_TRY(clt__p2p_isend(pp->pipe_comm, b->act_out + b->off_out[k], out_bytes, pp->stage + 1, CLT__PP_TAG_ACT,
                           (uint64_t)k + 1, &b->send_act[k]));
  }
fail:
  return rc;
}

static int backward(clt__pp *pp, const clt__pp_micro *mb, int k, int set, int record, const clt__pass *base,
                    step_bufs *b) {
  clt__replica *r = pp->r;
  int rc = CLT_OK, first = pp->stage == 0;
  if (pp->stage == pp->P - 1) return CLT_OK; /* done with its forward */
  size_t in_bytes = (size_t)(b->off_in[k + 1] - b->off_in[k]) * sizeof(float);
  clt__pass pass = *base;
  pass.step = mb[k].dropout_step, pass.global_first = mb[k].global_first, pass.targets = mb[k].targets;
  pass.record = record;
  CLT_TRY(wait_msg(pp, &b->recv_grad[k], GRAD));
  int64_t s0 = clt__trace_ns();
  CLT_TRY(clt__pp_stage_backward(r, pp->set[set], b->grad_in + b->off_out[k], mb[k].n, &pass,
                                      first ? NULL : b->grad_out + b->off_in[k]));
  clt__trace_span(pp->trace, pp->trace_lane, "compute", s0, clt__trace_ns(), "micro-batch %d: backward", k);
  if (!first)
    CLT_TRY(clt__p2p_isend(pp->pipe_comm, b->grad_out + b->off_in[k], in_bytes, pp->stage - 1, CLT__PP_TAG_GRAD,
                           (uint64_t)k + 1, &b->send_grad[k]));
fail:
  return rc;
}

int clt__pp_run(clt__pp *pp, int m, const clt__pp_micro *mb, const clt__pass *base, int64_t step, double *loss,
                double *metric) {
  clt__replica *r = pp->r;
  int rc = CLT_OK, first = pp->stage == 0, last = pp->stage == pp->P - 1;
  const clt_model_spec *s = pp->stage_model.spec;
  int64_t in_numel = clt__shape_numel(&s->layers[0].out_shape);
  int64_t out_numel = clt__shape_numel(&s->layers[s->nlayers - 1].out_shape);
  int *idx = NULL, nsets = pp->nsets;
  step_bufs b;
  clt_context *ctx = clt__replica_context(r);
  double t0 = clt__now();
  *loss = *metric = 0;
  pp->wait_s = 0;
  memset(&b, 0, sizeof b);
  if (m > pp->M) {
    rc = clt__error(CLT_EINTERNAL, "a pipeline step of %d micro-batches, more than the %d it was made for", m, pp->M);
    goto fail;
  }
  if (!(idx = clt__calloc((size_t)m + 1, sizeof *idx))) { rc = CLT_ENOMEM; goto fail; }
  CLT_TRY(alloc_bufs(pp, m, mb, in_numel, out_numel, &b));
  /* While this stage's device computes, its messages move on: a sent
   * activation needs the sender in MPI to reach the next stage, which
   * otherwise waits until this stage waits too. */
  ctx->progress = progress, ctx->progress_user = pp->pipe_comm;
  int mm = 0; /* the micro-batches with samples, in order */
  for (int k = 0; k < m; k++)
    if (mb[k].n > 0) idx[mm++] = k;
  for (int j = 0; j < mm; j++) {
    int k = idx[j];
    size_t in_bytes = (size_t)(b.off_in[k + 1] - b.off_in[k]) * sizeof(float);
    size_t out_bytes = (size_t)(b.off_out[k + 1] - b.off_out[k]) * sizeof(float);
    if (!first)
      CLT_TRY(clt__p2p_irecv(pp->pipe_comm, b.act_in + b.off_in[k], in_bytes, pp->stage - 1, CLT__PP_TAG_ACT,
                             (uint64_t)k + 1, &b.recv_act[k]));
    if (!last && base->train)
      CLT_TRY(clt__p2p_irecv(pp->pipe_comm, b.grad_in + b.off_out[k], out_bytes, pp->stage + 1, CLT__PP_TAG_GRAD,
                             (uint64_t)k + 1, &b.recv_grad[k]));
  }
  if (!base->train) { /* evaluation: forwards only */
    for (int j = 0; j < mm; j++) CLT_TRY(forward(pp, mb, idx[j], 0, 0, base, &b, loss, metric));
  } else if (mm == 0) {
    clt__pass empty = *base;
    empty.record = 1;
    CLT_TRY(clt__replica_run_empty(r, &empty)); /* the exchange still waits on its markers */
  } else if (pp->schedule == CLT_PIPELINE_GPIPE) {
    for (int j = 0; j < mm; j++)
      CLT_TRY(forward(pp, mb, idx[j], j % nsets, last && j == mm - 1, base, &b, loss, metric));
    for (int j = 0; j < mm; j++) CLT_TRY(backward(pp, mb, idx[j], j % nsets, j == mm - 1, base, &b));
  } else {
    int warm = pp->P - pp->stage - 1 < mm ? pp->P - pp->stage - 1 : mm;
    if (warm + 1 > nsets && warm < mm) {
      rc = clt__error(CLT_EINTERNAL, "1F1B on stage %d holds %d micro-batches but has %d activation sets",
                      pp->stage, warm + 1, nsets);
      goto fail;
    }
    for (int j = 0; j < warm; j++) CLT_TRY(forward(pp, mb, idx[j], j % nsets, 0, base, &b, loss, metric));
    for (int j = 0; j < mm - warm; j++) {
      int f = warm + j;
      CLT_TRY(forward(pp, mb, idx[f], f % nsets, last && f == mm - 1, base, &b, loss, metric));
      CLT_TRY(backward(pp, mb, idx[j], j % nsets, j == mm - 1, base, &b));
    }
    for (int j = mm - warm; j < mm; j++) CLT_TRY(backward(pp, mb, idx[j], j % nsets, j == mm - 1, base, &b));
  }
  for (int k = 0; k < m; k++) { /* the sends' buffers are freed next */
    CLT_TRY(wait_msg(pp, &b.send_act[k], ACT));
    CLT_TRY(wait_msg(pp, &b.send_grad[k], GRAD));
  }
  pp->total_s = clt__now() - t0;
  /* The bubble leaves out the first training run: its kernels are built
   * then, each stage's at its own time, and the others wait for that. */
  if (base->train && pp->warm) pp->sum_wait_s += pp->wait_s, pp->sum_total_s += pp->total_s, pp->runs++;
  if (base->train) pp->warm = 1;
  ctx->progress = NULL;
  free_bufs(&b);
  free(idx);
  return CLT_OK;
fail:
  ctx->progress = NULL;
  abandon_all(pp, &b, m);
  free_bufs(&b);
  free(idx);
  char near[96];
  int r0 = pp->d * pp->P; /* the job's rank of this pipeline's stage 0: rank k of its communicator is r0 + k */
  if (first) snprintf(near, sizeof near, "stage 1 is rank %d", r0 + 1);
  else if (last) snprintf(near, sizeof near, "stage %d is rank %d", pp->stage - 1, r0 + pp->stage - 1);
  else snprintf(near, sizeof near, "stages %d and %d are ranks %d and %d", pp->stage - 1, pp->stage + 1,
                r0 + pp->stage - 1, r0 + pp->stage + 1);
  return clt__error_prefix(rc, "pipeline stage %d of %d (of pipeline %d, whose rank k is stage k; %s), step %lld",
                           pp->stage, pp->P, pp->d, near, (long long)step);
}

void clt__pp_last_times(const clt__pp *pp, double *wait_s, double *total_s) {
  *wait_s = pp->wait_s;
  *total_s = pp->total_s;
}
