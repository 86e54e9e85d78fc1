/*
 * run_time.c: a replica's runs in time: the markers a recorded run puts on
 * the queue (its device time, for the balancer), the trace's markers after
 * every layer (clt_trainer_trace_start), the profile (CLT_PROFILE=1), and
 * every wait for the device, each with the replica's timeout so that a
 * device that hangs cannot hang its caller.
 */
#include "model/replica.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int is_regression(const clt_model_spec *s) { return s->loss != CLT_LOSS_CROSSENTROPY; }

int clt__replica_marker(clt__replica *r, cl_event *ev) {
  int rc = CLT_OK;
  if (*ev) clReleaseEvent(*ev), *ev = NULL;
  CLT_CL_TRY(clEnqueueMarkerWithWaitList(r->ctx->queue, 0, NULL, ev));
fail:
  return rc;
}

int clt__replica_busy(const clt__replica *r) {
  cl_int st = CL_COMPLETE;
  if (!r->end_ev) return 0;
  clGetEventInfo(r->end_ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
  return st != CL_COMPLETE;
}

static int64_t now_ns(void) { return (int64_t)(clt__now() * 1e9); }

static void CL_CALLBACK run_done(cl_event ev, cl_int status, void *user) {
  clt__replica *r = user;
  (void)ev;
  atomic_store(&r->run_end_ns, status == CL_COMPLETE ? now_ns() : -1);
  atomic_fetch_sub(&r->callbacks_pending, 1); /* the last touch of r: it may be freed from here on */
}

/* Mark the start of a recorded run and arrange to learn when it ends. */
int clt__replica_time_run_end(clt__replica *r) {
  int rc = CLT_OK;
  atomic_fetch_add(&r->callbacks_pending, 1);
  cl_int err = clSetEventCallback(r->end_ev, CL_COMPLETE, run_done, r);
  if (err != CL_SUCCESS) atomic_fetch_sub(&r->callbacks_pending, 1);
  CLT_CL_TRY(err);
fail:
  return rc;
}

double clt__replica_run_time(clt__replica *r) {
  if (!r->end_ev || clt__wait_event(r->ctx, r->end_ev, r->timeout_s, "the training step") < 0) return 0;
  /* The device's own clock between the run's two markers, when it has one
   * that is plausible (within the host's view of the run): the host's
   * view can include a wait for other ranks (below). */
  int64_t now = now_ns();
  cl_ulong s = 0, e = 0;
  if (r->start_ev && clGetEventProfilingInfo(r->start_ev, CL_PROFILING_COMMAND_END, sizeof s, &s, NULL) == CL_SUCCESS &&
      clGetEventProfilingInfo(r->end_ev, CL_PROFILING_COMMAND_END, sizeof e, &e, NULL) == CL_SUCCESS && e > s &&
      (double)(e - s) <= (double)(now - r->run_start_ns))
    return (double)(e - s) * 1e-9;
  /* The callback runs on a driver thread, when the driver gets to it:
   * NVIDIA's was seen 20 ms late, and waiting for it cut a training step's
   * speed by 10. Without it yet, the run ended before now (which, read
   * after the gradient exchange, includes waiting for the other ranks). */
  int64_t end = atomic_load(&r->run_end_ns);
  if (end == 0) end = now;
  return end > r->run_start_ns ? (double)(end - r->run_start_ns) * 1e-9 : 0;
}

/* ---- the trace's markers ---------------------------------------------------- */

void clt__replica_trace_clear(clt__replica *r) {
  for (int k = 0; r->trace_ev && k <= 2 * r->spec->nlayers; k++)
    if (r->trace_ev[k]) clReleaseEvent(r->trace_ev[k]), r->trace_ev[k] = NULL;
}

int clt__replica_trace(clt__replica *r, int on) {
  clt__replica_trace_clear(r);
  free(r->trace_ev);
  r->trace_ev = NULL;
  if (on && !(r->trace_ev = clt__calloc((size_t)(2 * r->spec->nlayers + 1), sizeof *r->trace_ev))) return CLT_ENOMEM;
  return CLT_OK;
}

int clt__replica_trace_mark(clt__replica *r, int slot) {
  return r->trace_ev ? clt__replica_marker(r, &r->trace_ev[slot]) : CLT_OK;
}

void clt__replica_trace_spans(clt__replica *r, clt__trace *tr, int lane, int64_t end_ns) {
  const clt_model_spec *s = r->spec;
  int L = s->nlayers;
  if (!tr || !r->trace_ev || !r->trace_ev[0]) return;
  cl_ulong *at = clt__calloc((size_t)(2 * L + 1), sizeof *at), last = 0;
  if (!at) return;
  for (int k = 0; k <= 2 * L; k++)
    if (r->trace_ev[k] && clGetEventProfilingInfo(r->trace_ev[k], CL_PROFILING_COMMAND_END, sizeof at[k], &at[k],
                                                  NULL) == CL_SUCCESS && at[k] > last)
      last = at[k];
  /* The device's clock, shifted so that its last marker is end_ns. Each
   * span runs from the marker before it, in the run's order: the forward
   * of layers 1 to L-1, the loss, the backward from L-1 down. */
  int64_t shift = end_ns - (int64_t)last;
  cl_ulong prev = at[0];
  for (int k = 1; prev && k < 2 * L; k++) {
    int slot = k <= L ? k : 3 * L - k, i = slot < L ? slot : slot - L; /* k = L + 1 is layer L - 1's backward */
    if (!r->trace_ev[slot] || at[slot] < prev) continue;
    int64_t t0 = (int64_t)prev + shift, t1 = (int64_t)at[slot] + shift;
    if (slot == L) clt__trace_span(tr, lane, "forward", t0, t1, "loss");
    else
      clt__trace_span(tr, lane, slot < L ? "forward" : "backward", t0, t1, "%s %s (line %d)",
                      clt__layer_kind_name(&s->layers[i]), slot < L ? "forward" : "backward", s->layers[i].line);
    prev = at[slot];
  }
  free(at);
  clt__replica_trace_clear(r);
}


void clt__replica_report_profile(const clt__replica *r) {
  const clt_model_spec *s = r->spec;
  double total = r->prof_loss;
  for (int i = 0; i < s->nlayers; i++) total += r->prof_fwd[i] + r->prof_bwd[i];
  if (r->prof_runs == 0 || total <= 0) return;
  clt__log(CLT_LOG_WARN, "profile of %lld runs on %s (ms per run; forward, backward, share of the total):",
           (long long)r->prof_runs, r->ctx->info.name);
  for (int i = 1; i < s->nlayers; i++) {
    const clt_layer_spec *l = &s->layers[i];
    double f = r->prof_fwd[i] / r->prof_runs * 1e3, b = r->prof_bwd[i] / r->prof_runs * 1e3;
    clt__log(CLT_LOG_WARN, "  %s:%d %-14s %8.3f %8.3f  %5.1f%%", s->name, l->line, clt__layer_kind_name(l), f,
             b, 100 * (r->prof_fwd[i] + r->prof_bwd[i]) / total);
  }
  clt__log(CLT_LOG_WARN, "  upload + loss      %8.3f           %5.1f%%", r->prof_loss / r->prof_runs * 1e3,
           100 * r->prof_loss / total);
}

/* With profiling on, wait for the queue and charge the time since the
 * last charge (or the run's start) to *slot. */
void clt__replica_charge(clt__replica *r, double *slot) {
  if (!r->prof_fwd) return;
  clFinish(r->ctx->queue);
  double t = clt__now();
  *slot += t - r->prof_t0;
  r->prof_t0 = t;
}

/* The context's too: a host GEMM (src/core/blas_host.c) inside the replica's
 * run waits for the queue as long as the replica's own waits do. */
void clt__replica_set_timeout(clt__replica *r, double timeout_s) {
  r->timeout_s = timeout_s;
  r->ctx->wait_timeout_s = timeout_s;
}

/* Wait, within the timeout, for everything queued so far. */
int clt__replica_finish(clt__replica *r, const char *what) {
  int rc = CLT_OK;
  cl_event ev = NULL;
  CLT_CL_TRY(clEnqueueMarkerWithWaitList(r->ctx->queue, 0, NULL, &ev));
  CLT_CL_TRY(clFlush(r->ctx->queue));
  rc = clt__wait_event(r->ctx, ev, r->timeout_s, what);
fail:
  if (ev) clReleaseEvent(ev);
  return rc;
}

/* Wait until the device is done with the replica (within the timeout) and
 * then (up to 10 s) until no completion callback can still come: the
 * driver calls them on its own thread, NVIDIA's tens of ms late, and one
 * landing after free(r) corrupted the heap (a crash in clReleaseContext). */
int clt__replica_wait_done(clt__replica *r) {
  if (r->ctx && r->ctx->queue && clt__replica_finish(r, "the replica's last work") < 0) return 0;
  for (int i = 0; i < 10000 && atomic_load(&r->callbacks_pending) > 0; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return atomic_load(&r->callbacks_pending) == 0;
}

static void unpack_loss(const clt__replica *r, float *loss, double *metric) {
  memcpy(loss, r->loss_host, 4);
  if (is_regression(r->spec)) {
    float sq;
    memcpy(&sq, r->loss_host + 4, 4);
    *metric = sq;
  } else {
    int32_t correct;
    memcpy(&correct, r->loss_host + 4, 4);
    *metric = correct;
  }
}

int clt__replica_poll_loss(clt__replica *r, int *ready, float *loss, double *metric) {
  int rc = CLT_OK;
  *ready = 0;
  if (!r->loss_ev) {
    CLT_CL_TRY(clEnqueueReadBuffer(r->ctx->queue, r->scalars, CL_FALSE, 0, 8, r->loss_host, 0, NULL, &r->loss_ev));
    CLT_CL_TRY(clFlush(r->ctx->queue));
  }
  cl_int st = CL_COMPLETE;
  CLT_CL_TRY(clGetEventInfo(r->loss_ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  if (st < 0) {
    rc = clt__error(clt__cl_status(st), "the forward pass on %s failed with %s", r->ctx->info.name,
                    clt__cl_error_name(st));
    goto fail;
  }
  if (st != CL_COMPLETE) return CLT_OK;
  clReleaseEvent(r->loss_ev), r->loss_ev = NULL;
  unpack_loss(r, loss, metric);
  *ready = 1;
  return CLT_OK;
fail:
  if (r->loss_ev) clReleaseEvent(r->loss_ev), r->loss_ev = NULL;
  return clt__error_prefix(rc, "reading the loss from %s", r->ctx->info.name);
}

void clt__replica_poll_cancel(clt__replica *r) {
  if (!r->loss_ev) return;
  clWaitForEvents(1, &r->loss_ev); /* it writes into r */
  clReleaseEvent(r->loss_ev), r->loss_ev = NULL;
}

int clt__replica_read_loss(clt__replica *r, float *loss, double *metric) {
  int rc = CLT_OK;
  cl_event ev = NULL;
  CLT_CL_TRY(clEnqueueReadBuffer(r->ctx->queue, r->scalars, CL_FALSE, 0, 8, r->loss_host, 0, NULL, &ev));
  CLT_CL_TRY(clFlush(r->ctx->queue));
  CLT_TRY(clt__wait_event(r->ctx, ev, r->timeout_s, "the forward and backward pass and its loss"));
  clReleaseEvent(ev);
  unpack_loss(r, loss, metric);
  return CLT_OK;
fail:
  if (ev) clReleaseEvent(ev);
  return clt__error_prefix(rc, "reading the loss from %s", r->ctx->info.name);
}
