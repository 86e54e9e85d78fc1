/*
 * device_wait.c: waits on a device with a deadline. A device or driver that
 * hangs, or a queue held by an event that never completes (the caller's
 * own queue, handed to clt_trainer_step_buffers or
 * clt_allreduce_run_device), ends the wait with CLT_ETIMEDOUT naming the
 * device and what was waited for, instead of a blocking read, clFinish or
 * clWaitForEvents that never returns. Commands that time out stay
 * enqueued: memory they read or write must outlive them (their callers
 * leak it).
 */
#include "core/internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* A wait on an event's completion callback: the waiting thread sleeps on a
 * condition variable instead of polling clGetEventInfo, which on PoCL cost
 * more than the work waited for (a host GEMM's maps: 130-160 us of CPU a
 * wait polling, 15 us sleeping) and took a core from the device's own
 * threads. Shared by the waiter and the callback, freed by the last of
 * them: a waiter that times out leaves, the callback may still come.
 * Used for CPU devices (see clt__wait_event). */
typedef struct event_waiter {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done, refs;
} event_waiter;

static void waiter_unref(event_waiter *w) {
  pthread_mutex_lock(&w->lock);
  int last = --w->refs == 0;
  pthread_mutex_unlock(&w->lock);
  if (last) {
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w);
  }
}

static void CL_CALLBACK event_done(cl_event ev, cl_int status, void *user) {
  event_waiter *w = user;
  (void)ev, (void)status;
  pthread_mutex_lock(&w->lock);
  w->done = 1;
  pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->lock);
  waiter_unref(w);
}

/* Sleep until ev's callback or the deadline (timeout_s <= 0: none).
 * Returns 1 when the callback came, 0 at the deadline, -1 when no
 * callback could be set (the caller polls instead). */
static int sleep_on_event(clt_context *ctx, cl_event ev, double timeout_s) {
  event_waiter *w = malloc(sizeof *w);
  if (!w) return -1;
  pthread_mutex_init(&w->lock, NULL);
  pthread_cond_init(&w->cond, NULL);
  w->done = 0, w->refs = 2;
  if (clSetEventCallback(ev, CL_COMPLETE, event_done, w) != CL_SUCCESS) {
    w->refs = 1;
    waiter_unref(w);
    return -1;
  }
  /* Without a flush some drivers (rusticl) never start what was queued. */
  clFlush(ctx->queue);
  if (ctx->xfer_queue) clFlush(ctx->xfer_queue);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  double secs = timeout_s > 0 ? timeout_s : 1e9;
  until.tv_sec += (time_t)secs;
  until.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&w->lock);
  int err = 0;
  while (!w->done && err != ETIMEDOUT) err = pthread_cond_timedwait(&w->cond, &w->lock, &until);
  int done = w->done;
  pthread_mutex_unlock(&w->lock);
  waiter_unref(w);
  return done;
}

int clt__wait_event(clt_context *ctx, cl_event ev, double timeout_s, const char *what) {
  double start = clt__now();
  int slept = 0;
  for (;;) {
    cl_int st = CL_COMPLETE;
    cl_int err = clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
    if (err != CL_SUCCESS)
      return clt__error(clt__cl_status(err), "waiting for %s on %s: clGetEventInfo failed with %s", what,
                        ctx->info.name, clt__cl_error_name(err));
    if (st == CL_COMPLETE) return CLT_OK;
    if (st < 0)
      return clt__error(clt__cl_status(st), "%s on %s failed with %s", what, ctx->info.name, clt__cl_error_name(st));
    double waited = clt__now() - start;
    if (timeout_s > 0 && waited > timeout_s)
      return clt__error(CLT_ETIMEDOUT, "%s on %s has not finished after %.0f s (CLT_TIMEOUT): the device or its "
                        "driver hangs", what, ctx->info.name, waited);
    /* CPU devices only: the device's threads need the cores a poll takes;
     * GPU drivers may deliver callbacks late (NVIDIA: 10x slower steps
     * waiting for them, NEWS), and polling takes them no core. */
    if (ctx->progress) { /* a pipeline's messages: poll them and the device every 20 us */
      ctx->progress(ctx->progress_user);
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
      continue;
    }
    if (!slept && ctx->info.type == CLT_DEVICE_CPU) { /* once: the callback, then the status once more */
      slept = 1;
      if (sleep_on_event(ctx, ev, timeout_s > 0 ? timeout_s - waited : 0) >= 0) continue;
    }
    if (waited < 0.002) {
      sched_yield();
    } else {
      struct timespec ts = {0, waited < 0.1 ? 50000 : 1000000}; /* 50 us, later 1 ms */
      nanosleep(&ts, NULL);
    }
  }
}

double clt__context_timeout(const clt_context *ctx) {
  if (ctx && ctx->wait_timeout_s > 0) return ctx->wait_timeout_s;
  const char *t = getenv("CLT_TIMEOUT");
  double v = t && *t ? strtod(t, NULL) : 0;
  return v > 0 && v <= 1e9 ? v : 300.0;
}

/* The name of the device of queue, or "?". */
static void queue_device_name(cl_command_queue queue, char *name, size_t size) {
  cl_device_id d = NULL;
  snprintf(name, size, "?");
  if (clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof d, &d, NULL) == CL_SUCCESS && d)
    clGetDeviceInfo(d, CL_DEVICE_NAME, size, name, NULL);
  name[size - 1] = '\0';
}

int clt__wait_queue(cl_command_queue queue, const cl_event *evs, size_t n, double timeout_s, const char *what) {
  double start = clt__now();
  char name[128];
  for (size_t i = 0; i < n; i++) {
    for (;;) {
      cl_int st = CL_QUEUED, e = clGetEventInfo(evs[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
      if (e != CL_SUCCESS || st < 0) {
        queue_device_name(queue, name, sizeof name);
        return clt__error(clt__cl_status(e != CL_SUCCESS ? e : st), "%s on %s failed: %s", what, name,
                          clt__cl_error_name(e != CL_SUCCESS ? e : st));
      }
      if (st == CL_COMPLETE) break;
      double waited = clt__now() - start;
      if (timeout_s > 0 && waited > timeout_s) {
        queue_device_name(queue, name, sizeof name);
        return clt__error(CLT_ETIMEDOUT, "%s on %s has not finished after %.0f s (CLT_TIMEOUT): the device or its "
                          "driver hangs, or the queue waits for an event that never completes", what, name, waited);
      }
      /* A copy of a small buffer takes microseconds: yield the core meanwhile
       * (on a CPU device it is the device's own worker that needs it) and
       * poll again, for 2 ms, then sleep between polls. Sleeping from the
       * first poll (a nanosleep is 50 us or more) made a 4-byte all-reduce
       * of device buffers take 250 us on PoCL, against 0.3 us on host ones. */
      if (waited < 0.002) {
        sched_yield();
        continue;
      }
      struct timespec ts = {0, waited < 0.1 ? 50000 : 1000000}; /* 50 us, later 1 ms */
      nanosleep(&ts, NULL);
    }
  }
  return CLT_OK;
}

int clt__finish_queue(cl_command_queue queue, double timeout_s, const char *what) {
  cl_event ev = NULL;
  cl_int e = clEnqueueMarkerWithWaitList(queue, 0, NULL, &ev);
  if (e == CL_SUCCESS) e = clFlush(queue);
  if (e != CL_SUCCESS) {
    if (ev) clReleaseEvent(ev);
    char name[128];
    queue_device_name(queue, name, sizeof name);
    return clt__error(clt__cl_status(e), "%s on %s: %s", what, name, clt__cl_error_name(e));
  }
  int rc = clt__wait_queue(queue, &ev, 1, timeout_s, what);
  clReleaseEvent(ev);
  return rc;
}
