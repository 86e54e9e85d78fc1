/*
 * allreduce_device.c: all-reduce of device buffers, staged through pinned
 * host memory, one or several devices per process.
 *
 * Every chunk is read with a non-blocking read, in the order the ring needs
 * them (its own segment first, then the segments as they are reduced), each
 * with an event. The ring polls those events: it works on the chunks that
 * have arrived while later ones are still being copied. With several
 * replicas, a chunk is ready when every replica's copy has arrived; they
 * are then summed into replica 0's staging in the order given, so every run
 * adds them the same way (fp16 ones in float, rounded once). As chunks
 * become final (the segment this rank finishes, then every segment the
 * allgather brings) they are written back to every replica while the ring
 * goes on.
 */
#include "comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLT__MAX_LOCAL_REPLICAS 64

struct clt__dev_staging {
  int n;                      /* replicas */
  cl_command_queue *queues;   /* retained: the reads go here */
  const cl_command_queue *write_queues; /* this run's: the results go here */
  clt_pinned **pinned;        /* count x esize per replica; pinned[0] is where the ring runs */
  size_t nstage;
  cl_event *events;           /* n x nstage reads of the current run */
  unsigned char *ready;       /* nstage: chunk read (and replicas summed) */
  /* the current run */
  const clt_allreduce_plan *plan;
  const cl_mem *bufs;
  const size_t *offs;
  /* Where the result goes when not back in place (NULL: in place):
   * element e of this rank's result at wbufs[q] + woffs[q] + (e - wfirst) x esize. */
  const cl_mem *wbufs;
  const size_t *woffs;
  size_t wfirst;
};

static void release_events(struct clt__dev_staging *dev) {
  for (size_t i = 0; dev->events && i < (size_t)dev->n * dev->nstage; i++)
    if (dev->events[i]) {
      clReleaseEvent(dev->events[i]);
      dev->events[i] = NULL;
    }
}

void clt__dev_staging_free(struct clt__dev_staging *dev) {
  if (!dev) return;
  release_events(dev);
  for (int q = 0; q < dev->n; q++) {
    if (dev->pinned) clt_pinned_destroy(dev->pinned[q]);
    if (dev->queues && dev->queues[q]) clReleaseCommandQueue(dev->queues[q]);
  }
  free(dev->pinned);
  free(dev->queues);
  free(dev->events);
  free(dev->ready);
  free(dev);
}

/* The staging of these queues: reused when the plan last ran on them. */
static int get_staging(clt_allreduce_plan *plan, int n, const cl_command_queue *queues,
                       struct clt__dev_staging **out) {
  int rc = CLT_OK;
  struct clt__dev_staging *dev = plan->dev;
  if (dev && dev->n == n && memcmp(dev->queues, queues, (size_t)n * sizeof *queues) == 0) {
    *out = dev;
    return CLT_OK;
  }
  clt__dev_staging_free(dev);
  plan->dev = NULL;
  if (!(dev = clt__calloc(1, sizeof *dev))) return CLT_ENOMEM;
  dev->nstage = clt__plan_nstage(plan);
  if (!(dev->queues = clt__calloc((size_t)n, sizeof *dev->queues)) ||
      !(dev->pinned = clt__calloc((size_t)n, sizeof *dev->pinned)) ||
      !(dev->events = clt__calloc((size_t)n * dev->nstage + 1, sizeof *dev->events)) ||
      !(dev->ready = clt__calloc(dev->nstage + 1, 1))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  for (int q = 0; q < n; q++, dev->n = q) {
    cl_context context = NULL;
    CLT_CL_TRY(clGetCommandQueueInfo(queues[q], CL_QUEUE_CONTEXT, sizeof context, &context, NULL));
    CLT_CL_TRY(clRetainCommandQueue(queues[q]));
    dev->queues[q] = queues[q];
    rc = clt__pinned_create_cl(context, queues[q], plan->count * plan->ops->esize, &dev->pinned[q]);
    if (rc < 0) {
      clt__error_prefix(rc, "allocating %zu bytes of pinned staging for replica %d", plan->count * plan->ops->esize,
                        q);
      goto fail;
    }
  }
  dev->n = n;
  plan->dev = dev;
  *out = dev;
  return CLT_OK;
fail:
  clt__dev_staging_free(dev);
  return rc;
}

int clt__plan_prepare_devices(clt_allreduce_plan *plan, int n, const cl_command_queue *queues) {
  struct clt__dev_staging *dev;
  if (!plan) return clt__error(CLT_EINVAL, "preparing a device run: no plan");
  if (plan->count == 0 || n < 1) return CLT_OK;
  return get_staging(plan, n, queues, &dev);
}

size_t clt__plan_staged_bytes(const clt_allreduce_plan *plan, int q) {
  if (!plan || !plan->dev || q < 0 || q >= plan->dev->n) return 0;
  return clt_pinned_size(plan->dev->pinned[q]);
}

void *clt__plan_staging(const clt_allreduce_plan *plan, int q) {
  if (!plan || !plan->dev || q < 0 || q >= plan->dev->n) return NULL;
  return clt_pinned_ptr(plan->dev->pinned[q]);
}

static unsigned char *staged(const struct clt__dev_staging *dev, int q, size_t elem) {
  return (unsigned char *)clt_pinned_ptr(dev->pinned[q]) + elem * dev->plan->ops->esize;
}

/* The replicas whose data goes in: every one for a reduction, the first
 * for an allgather (every replica holds the same part). */
static int readers(const struct clt__dev_staging *dev) { return dev->plan->kind->reduces ? dev->n : 1; }

/* Chunk id has arrived from every replica (summed when there are several)? */
static int chunk_ready(struct clt__dev_staging *dev, size_t id, int *ok) {
  *ok = 0;
  if (dev->ready[id]) return *ok = 1;
  for (int q = 0; q < readers(dev); q++) {
    cl_int status = CL_QUEUED;
    cl_int e = clGetEventInfo(dev->events[(size_t)q * dev->nstage + id], CL_EVENT_COMMAND_EXECUTION_STATUS,
                              sizeof status, &status, NULL);
    if (e != CL_SUCCESS || status < 0)
      return clt__error(CLT_ECL, "reading chunk %zu of replica %d from its device failed: %s", id, q,
                        clt__cl_error_name(e != CL_SUCCESS ? e : status));
    if (status != CL_COMPLETE) return CLT_OK;
  }
  size_t off, n;
  const void *others[CLT__MAX_LOCAL_REPLICAS];
  clt__plan_stage_chunk(dev->plan, id, &off, &n);
  for (int q = 1; q < dev->n; q++) others[q - 1] = staged(dev, q, off);
  /* One rounding for all of them: fp16 replicas are summed in float. */
  if (readers(dev) > 1) dev->plan->ops->sum(staged(dev, 0, off), others, dev->n - 1, n);
  dev->ready[id] = 1;
  return *ok = 1;
}

/* Wait for n events of replica q's queue, at most CLT_TIMEOUT in all
 * (core/device_wait.c): a device that never completes ends the wait with
 * CLT_ETIMEDOUT naming it and the operation, instead of blocking in
 * clWaitForEvents or clFinish for ever. */
static int wait_device(const clt_allreduce_plan *plan, cl_command_queue queue, int q, const cl_event *evs, size_t n,
                       const char *what) {
  char full[160];
  snprintf(full, sizeof full, "rank %d: %s for replica %d", plan->comm->rank, what, q);
  return clt__wait_queue(queue, evs, n, plan->comm->timeout_s, full);
}

/* clFinish with the deadline of wait_device. */
static int finish_device(const clt_allreduce_plan *plan, cl_command_queue queue, int q, const char *what) {
  char full[160];
  snprintf(full, sizeof full, "rank %d: %s for replica %d", plan->comm->rank, what, q);
  return clt__finish_queue(queue, plan->comm->timeout_s, full);
}

static int ring_ready(void *user, const clt__ring_chunk *c, int *ok) {
  int rc = chunk_ready(user, c->id, ok);
  return rc < 0 ? rc : CLT_OK;
}

/* Write elements [off, off + n) of the result back to replicas first ..
 * n - 1. */
static int write_back_from(struct clt__dev_staging *dev, int first, size_t off, size_t n) {
  size_t esize = dev->plan->ops->esize;
  if (n == 0) return CLT_OK;
  for (int q = first; q < dev->n; q++) {
    cl_mem buf = dev->wbufs ? dev->wbufs[q] : dev->bufs[q];
    size_t at = dev->wbufs ? dev->woffs[q] + (off - dev->wfirst) * esize : dev->offs[q] + off * esize;
    cl_int e = clEnqueueWriteBuffer(dev->write_queues[q], buf, CL_FALSE, at, n * esize, staged(dev, 0, off), 0, NULL,
                                    NULL);
    if (e == CL_SUCCESS) e = clFlush(dev->write_queues[q]);
    if (e != CL_SUCCESS)
      return clt__error(clt__cl_status(e), "writing the result back to replica %d (elements %zu to %zu) failed: %s",
                        q, off, off + n, clt__cl_error_name(e));
  }
  return CLT_OK;
}

static int write_back(struct clt__dev_staging *dev, size_t off, size_t n) { return write_back_from(dev, 0, off, n); }

static int ring_final(void *user, const clt__ring_chunk *c) { return write_back(user, c->off, c->n); }

static int check_buffer(const clt_allreduce_plan *plan, int q, cl_mem buf, size_t offset) {
  size_t need = plan->count * plan->ops->esize, size = clt_buffer_size(buf);
  if (!buf) return clt__error(CLT_EINVAL, "rank %d: %s: replica %d has no buffer", plan->comm->rank,
                              plan->kind->run_devices_fn, q);
  if (offset > size || size - offset < need)
    return clt__error(CLT_ESHAPE, "rank %d: %s: replica %d: %zu bytes from offset %zu do not fit in its buffer of %zu "
                                  "bytes", plan->comm->rank, plan->kind->run_devices_fn, q, need, offset, size);
  return CLT_OK;
}

/* ---- a host-shared buffer, in place -----------------------------------------
 * A buffer from clt_buffer_create on a device whose memory is the host's
 * and that has fine-grained buffer SVM (src/core/shared_buffers.c: PoCL), one
 * replica, the result wanted on its queue: once the queue has finished,
 * its bytes are reduced in place as a host buffer's are (the same ring,
 * the same bits), and commands enqueued afterwards see them. The wait is
 * clFinish, which costs nothing on a queue that has finished; a marker
 * polled until done is a round trip to the device's own thread (24-28 us
 * above host buffers at 2 ranks on PoCL on a 2-core VM, a map and an unmap
 * 55). Unlike the polled waits it has no deadline: a device that never
 * finishes its queue holds this rank there, and the other ranks' deadlines
 * name it. */
static int run_shared(clt_allreduce_plan *plan, clt__op *op, cl_command_queue q, unsigned char *p) {
  cl_int e = clFinish(q);
  if (e != CL_SUCCESS)
    return clt__error(clt__cl_status(e), "rank %d: %s: finishing the work queued on the buffer: %s",
                      plan->comm->rank, plan->kind->run_devices_fn, clt__cl_error_name(e));
  return clt__allreduce_exec(plan, op, p, NULL, NULL, NULL);
}

/* ---- a buffer in host memory, mapped ----------------------------------------
 * Any other buffer of a device whose buffers are host memory
 * (CL_DEVICE_HOST_UNIFIED_MEMORY: PoCL, rusticl's llvmpipe), one replica,
 * the result wanted on the queue it is read on (the public calls): the
 * buffer's bytes are mapped, reduced in place as a host buffer is (the
 * same ring, the same bits), and unmapped: for the all-reduce and the
 * allgather, which write the whole buffer (a reduce-scatter's ring works
 * in the other parts too, which its device run must not write). No
 * copies, and a small message pays one map and one unmap: 33 us for 4
 * bytes on PoCL at 2 ranks on a Xeon, where the staging's reads,
 * write-back and their waits took 47 (host buffers: 0.6 us). The
 * trainer's exchange reads on a transfer queue while the backward goes on
 * on the compute queue, where a map would be used alongside kernels: it
 * keeps the staging. */
static int unified(cl_command_queue q) {
  cl_device_id d = NULL;
  cl_bool u = CL_FALSE;
  if (clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof d, &d, NULL) != CL_SUCCESS ||
      clGetDeviceInfo(d, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof u, &u, NULL) != CL_SUCCESS)
    return 0;
  return u == CL_TRUE;
}

static int run_mapped(clt_allreduce_plan *plan, clt__op *op, cl_command_queue q, cl_mem buf, size_t offset) {
  int rc = CLT_OK;
  cl_int e = CL_SUCCESS;
  cl_event ev = NULL;
  void *p = clEnqueueMapBuffer(q, buf, CL_FALSE, CL_MAP_READ | CL_MAP_WRITE, offset, plan->count * plan->ops->esize,
                               0, NULL, &ev, &e);
  if (e == CL_SUCCESS) e = clFlush(q);
  if (e != CL_SUCCESS) {
    if (ev) clReleaseEvent(ev);
    return clt__error(clt__cl_status(e), "rank %d: mapping the buffer of %s: %s", plan->comm->rank,
                      plan->kind->run_devices_fn, clt__cl_error_name(e));
  }
  rc = wait_device(plan, q, 0, &ev, 1, "mapping the buffer to the host");
  clReleaseEvent(ev);
  if (rc == CLT_ETIMEDOUT) return clt__op_break(op, rc); /* a device that hangs keeps the mapping */
  if (rc == CLT_OK) rc = clt__allreduce_exec(plan, op, p, NULL, NULL, NULL);
  ev = NULL;
  e = clEnqueueUnmapMemObject(q, buf, p, 0, NULL, &ev);
  if (e == CL_SUCCESS) e = clFlush(q);
  if (rc == CLT_OK && e != CL_SUCCESS)
    rc = clt__error(clt__cl_status(e), "rank %d: unmapping the buffer of %s: %s", plan->comm->rank,
                    plan->kind->run_devices_fn, clt__cl_error_name(e));
  if (rc == CLT_OK) rc = wait_device(plan, q, 0, &ev, 1, "writing the result back");
  if (ev) clReleaseEvent(ev);
  return rc;
}

int clt_allreduce_run_devices(clt_allreduce_plan *plan, int n, const cl_command_queue *queues, const cl_mem *bufs,
                              const size_t *offsets) {
  CLT_HANDLE(plan, "plan");
  return clt__allreduce_run_devices_split(plan, n, queues, queues, bufs, offsets);
}

int clt__allreduce_run_devices_split(clt_allreduce_plan *plan, int n, const cl_command_queue *queues,
                                     const cl_command_queue *write_queues, const cl_mem *bufs, const size_t *offsets) {
  clt__device_run run = {n, queues, write_queues, bufs, offsets, NULL, NULL, NULL};
  return clt__allreduce_run_devices_into(plan, &run);
}

/* A device run's arguments: a buffer for each of the plan's replicas,
 * large enough, and copies already made into the staging this run uses. */
static int check_device_run(const clt_allreduce_plan *plan, const clt__device_run *run) {
  const char *fn = plan->kind->run_devices_fn;
  int n = run->n, rc;
  if (!run->queues) return clt__null_arg(fn, "queues", NULL);
  if (!run->bufs) return clt__null_arg(fn, "bufs", NULL);
  if (n != plan->replicas)
    return clt__error(CLT_EINVAL, "%s: %d buffers given, the plan was made for %d replicas", fn, n, plan->replicas);
  for (int q = 0; q < n; q++)
    if (!run->queues[q] || (run->write_queues && !run->write_queues[q]))
      return clt__error(CLT_EINVAL, "%s: queues[%d] is NULL: give the queue replica %d's buffer is used on", fn, q, q);
  if (n > CLT__MAX_LOCAL_REPLICAS)
    return clt__error(CLT_EINVAL, "%s: %d replicas (at most %d per process)", fn, n, CLT__MAX_LOCAL_REPLICAS);
  for (int q = 0; q < n; q++)
    if ((rc = check_buffer(plan, q, run->bufs[q], run->offsets ? run->offsets[q] : 0)) < 0) return rc;
  /* Copies already made go into the staging they were given: it must be
   * the one this run uses. */
  for (int q = 0; run->copied && q < n; q++)
    if (run->copied[q] && (!plan->dev || plan->dev->n != n || plan->dev->queues[q] != run->queues[q]))
      return clt__error(CLT_EINVAL, "internal: %s: replica %d's bytes were copied to a staging this run does not use",
                        fn, q);
  return CLT_OK;
}

/* The staging takes this run's buffers, where its result goes, and no
 * chunk read yet. */
static void bind_run(struct clt__dev_staging *dev, const clt_allreduce_plan *plan, const clt__device_run *run) {
  static const size_t zeros[CLT__MAX_LOCAL_REPLICAS];
  dev->plan = plan;
  dev->write_queues = run->write_queues;
  dev->bufs = run->bufs;
  dev->offs = run->offsets ? run->offsets : zeros;
  dev->wbufs = run->out_bufs;
  dev->woffs = run->out_offsets ? run->out_offsets : zeros;
  dev->wfirst = plan->kind->gathers ? 0 : plan->part_lo[plan->comm->rank];
  memset(dev->ready, 0, dev->nstage);
}

/* Every read at once, in the order the ring needs them; or every chunk
 * waits for the copy already made. */
static int enqueue_reads(struct clt__dev_staging *dev, const clt__device_run *run) {
  int rc = CLT_OK;
  const clt_allreduce_plan *plan = dev->plan;
  size_t esize = plan->ops->esize;
  for (int q = 0; q < readers(dev); q++) {
    if (run->copied && run->copied[q]) {
      for (size_t i = 0; i < dev->nstage; i++) {
        CLT_CL_TRY(clRetainEvent(run->copied[q]));
        dev->events[(size_t)q * dev->nstage + i] = run->copied[q];
      }
      continue;
    }
    for (size_t i = 0; i < dev->nstage; i++) {
      size_t off, cnt;
      clt__plan_stage_chunk(plan, i, &off, &cnt);
      CLT_CL_TRY(clEnqueueReadBuffer(run->queues[q], run->bufs[q], CL_FALSE, dev->offs[q] + off * esize, cnt * esize,
                                     staged(dev, q, off), 0, NULL, &dev->events[(size_t)q * dev->nstage + i]));
    }
    CLT_CL_TRY(clFlush(run->queues[q]));
  }
fail:
  return rc;
}

/* The pipelined algorithms take each chunk as its read arrives (ring_ready)
 * and write each back as it becomes final (ring_final). */
static int reduce_pipelined(clt_allreduce_plan *plan, clt__op *op, struct clt__dev_staging *dev,
                            const cl_command_queue *queues) {
  int rc = CLT_OK;
  CLT_TRY(clt__allreduce_exec(plan, op, staged(dev, 0, 0), ring_ready, ring_final, dev));
  /* An allgather's own part is on the first replica only. */
  if (!plan->kind->reduces) {
    size_t plo = plan->part_lo[plan->comm->rank], phi = plan->part_hi[plan->comm->rank];
    CLT_TRY(wait_device(plan, queues[0], 0, dev->events, dev->nstage, "copying the buffer to the host"));
    CLT_TRY(write_back_from(dev, 1, plo, phi - plo));
  }
fail:
  return rc;
}

/* The small-message algorithms and one rank need the whole buffer at once. */
static int reduce_whole(clt_allreduce_plan *plan, clt__op *op, struct clt__dev_staging *dev,
                        const cl_command_queue *queues) {
  int rc = CLT_OK;
  /* What this rank ends with: everything, or its part alone. */
  size_t lo = 0, hi = plan->count;
  if (!plan->kind->gathers) lo = plan->part_lo[plan->comm->rank], hi = plan->part_hi[plan->comm->rank];
  for (int q = 0; q < readers(dev); q++)
    CLT_TRY(wait_device(plan, queues[q], q, dev->events + (size_t)q * dev->nstage, dev->nstage,
                        "copying the buffer to the host"));
  for (size_t i = 0; i < dev->nstage; i++) {
    int ok;
    CLT_TRY(chunk_ready(dev, i, &ok));
  }
  CLT_TRY(clt__allreduce_exec(plan, op, staged(dev, 0, 0), NULL, NULL, NULL));
  /* One rank's allgather has nothing new for the first replica. */
  CLT_TRY(write_back_from(dev, plan->kind->reduces ? 0 : 1, lo, hi - lo));
fail:
  return rc;
}

int clt__allreduce_run_devices_into(clt_allreduce_plan *plan, const clt__device_run *run) {
  int rc = CLT_OK;
  struct clt__dev_staging *dev = NULL;
  clt__op op;

  if (!plan) return clt__null_arg("a device run", "plan", "plan");
  int n = run->n;
  const cl_command_queue *queues = run->queues, *write_queues = run->write_queues;
  CLT_TRY(check_device_run(plan, run));
  CLT_TRY(clt__allreduce_begin(plan, &op));
  if (plan->count == 0) return CLT_OK;
  if (n == 1 && write_queues[0] == queues[0] && !run->out_bufs && !run->copied && plan->kind->gathers) {
    size_t at = run->offsets ? run->offsets[0] : 0;
    unsigned char *host = clt__shared_buffer_host(run->bufs[0]);
    if (host) return run_shared(plan, &op, queues[0], host + at);
    if (unified(queues[0])) return run_mapped(plan, &op, queues[0], run->bufs[0], at);
  }
  CLT_TRY(get_staging(plan, n, queues, &dev));
  bind_run(dev, plan, run);
  CLT_TRY(enqueue_reads(dev, run));
  if (plan->comm->size > 1 && clt__plan_staged(plan))
    CLT_TRY(reduce_pipelined(plan, &op, dev, queues));
  else
    CLT_TRY(reduce_whole(plan, &op, dev, queues));
  /* Writes on the reads' queue are waited for (the public calls return
   * with the result in place); on other queues they are the caller's to
   * order (internal.h), and the reads' queue has nothing left: every read
   * was waited for chunk by chunk. */
  for (int q = 0; q < n; q++)
    if (write_queues[q] == queues[q]) CLT_TRY(finish_device(plan, queues[q], q, "writing the result back"));
  release_events(dev);
  return CLT_OK;

fail:
  if (dev && rc == CLT_ETIMEDOUT) {
    /* A device that hangs may still copy into or out of the staging, and
     * waiting for it would hang here: the staging is left to it (never
     * freed or reused), and the communicator refuses further work. */
    plan->dev = NULL;
    release_events(dev);
    return clt__op_break(&op, rc);
  }
  if (dev) {
    /* Nothing may still be copying into or out of the staging. */
    for (int q = 0; q < dev->n; q++) {
      clFinish(dev->queues[q]);
      if (dev->write_queues) clFinish(dev->write_queues[q]);
    }
    release_events(dev);
  }
  return rc;
}

int clt_allreduce_run_device(clt_allreduce_plan *plan, cl_command_queue queue, cl_mem buf, size_t offset) {
  CLT_HANDLE(plan, "plan");
  CLT_ARG(queue);
  CLT_ARG(buf);
  return clt_allreduce_run_devices(plan, 1, &queue, &buf, &offset);
}
