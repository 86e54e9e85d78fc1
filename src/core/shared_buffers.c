/*
 * shared_buffers.c: device buffers whose bytes the host reads and writes in
 * place, on devices whose memory is the host's.
 *
 * On a device with CL_DEVICE_HOST_UNIFIED_MEMORY and fine-grained buffer
 * SVM (PoCL's CPU devices; integrated GPUs of OpenCL 2.0 and later),
 * clt_buffer_create takes a buffer's bytes from clSVMAlloc with
 * CL_MEM_SVM_FINE_GRAIN_BUFFER and wraps them in a cl_mem
 * (CL_MEM_USE_HOST_PTR). Kernels see an ordinary buffer. The host may read
 * and write its bytes between commands without mapping it: fine-grained
 * SVM is coherent at synchronisation points (a command's completion, an
 * enqueue). So an all-reduce of such a buffer runs in place once the
 * queue has finished (comm/allreduce_device.c), with no map, unmap or
 * copy, each of which is a round trip to the device's own thread: 20 to
 * 45 us on PoCL on a 2-core virtual machine, where the host all-reduce of
 * a small message takes under 1 us.
 *
 * Which buffers are shared is known here alone: a process-wide list of
 * the buffers made so, each taken off (and its SVM bytes freed) by the
 * buffer's destructor callback, once OpenCL is done with the buffer. A
 * user's own SVM-backed buffer is not on it (coarse-grained SVM needs
 * maps), and is mapped as before. CLT_SHARED_BUFFERS=0 turns this off.
 *
 * A buffer may also wrap host bytes that are not SVM's: the trainer's
 * gradient arena in node-shared memory (comm/shm_arena.c), which every
 * rank of the node reads in place. It is listed the same way; its bytes
 * stay the caller's.
 */
#undef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 200 /* clSVMAlloc, CL_DEVICE_SVM_CAPABILITIES */

#include "core/internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct shared_entry {
  cl_mem buf;
  cl_context context; /* retained until the bytes are freed */
  void *bytes;
} shared_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static shared_entry *entries;
static size_t nentries, capacity;

int clt__shared_buffers_on(cl_device_id device, const clt_device_info *info) {
  if (!info->unified_memory || clt__env_switch("CLT_SHARED_BUFFERS") == 0) return 0;
  /* A device before OpenCL 2.0 does not know the query: no SVM. */
  cl_device_svm_capabilities svm = 0;
  if (clGetDeviceInfo(device, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, NULL) != CL_SUCCESS) return 0;
  return (svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) != 0;
}

static void CL_CALLBACK free_shared(cl_mem buf, void *user) {
  (void)user;
  shared_entry gone = {0};
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nentries; i++)
    if (entries[i].buf == buf) {
      gone = entries[i];
      entries[i] = entries[--nentries];
      break;
    }
  pthread_mutex_unlock(&lock);
  if (!gone.bytes) return; /* bytes of the caller's (clt__shared_buffer_wrap) */
  clSVMFree(gone.context, gone.bytes);
  clReleaseContext(gone.context);
}

/* A buffer over host bytes p, listed as shared; SVM bytes (svm) are freed
 * with it, others are the caller's. */
static cl_mem track(cl_context context, void *p, size_t bytes, int svm, cl_int *err) {
  pthread_mutex_lock(&lock);
  if (nentries == capacity) {
    size_t n = capacity ? 2 * capacity : 64;
    shared_entry *grown = realloc(entries, n * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&lock);
      *err = CL_OUT_OF_HOST_MEMORY;
      return NULL;
    }
    entries = grown, capacity = n;
  }
  cl_mem buf = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, p, err);
  if (*err == CL_SUCCESS) *err = clSetMemObjectDestructorCallback(buf, free_shared, NULL);
  if (*err != CL_SUCCESS) {
    pthread_mutex_unlock(&lock);
    if (buf) clReleaseMemObject(buf); /* no callback set: the caller frees the bytes */
    return NULL;
  }
  if (svm) clRetainContext(context);
  entries[nentries++] = (shared_entry){buf, svm ? context : NULL, svm ? p : NULL};
  pthread_mutex_unlock(&lock);
  return buf;
}

cl_mem clt__shared_buffer_create(cl_context context, size_t bytes, cl_int *err) {
  void *p = clSVMAlloc(context, CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER, bytes, 0);
  if (!p) {
    *err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    return NULL;
  }
  cl_mem buf = track(context, p, bytes, 1, err);
  if (!buf) clSVMFree(context, p);
  return buf;
}

/* The device's memory is the host's, and its SVM buffers wrap host bytes
 * in place (clt__shared_buffers_on): so do its buffers over other host
 * bytes, given CL_MEM_USE_HOST_PTR and page alignment. */
int clt__shared_buffer_wrap(clt_context *ctx, void *host, size_t bytes, cl_mem *out) {
  cl_int e = CL_SUCCESS;
  *out = NULL;
  if (!ctx->shared_buffers || !host || ((uintptr_t)host & 4095) || bytes == 0)
    return clt__error(CLT_EINTERNAL, "a buffer in place over host memory on %s, which does not share it",
                      ctx->info.name);
  if (!(*out = track(ctx->context, host, bytes, 0, &e)))
    return clt__error(clt__cl_status(e), "a buffer of %zu bytes over shared host memory on %s: %s", bytes,
                      ctx->info.name, clt__cl_error_name(e));
  return CLT_OK;
}

void *clt__shared_buffer_host(cl_mem buf) {
  cl_mem parent = NULL;
  void *host = NULL;
  int found = 0;
  if (!buf) return NULL;
  /* A sub-buffer of a shared buffer shares too, from its origin (its
   * CL_MEM_HOST_PTR is the parent's plus the origin). */
  if (clGetMemObjectInfo(buf, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) != CL_SUCCESS) return NULL;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nentries && !found; i++) found = entries[i].buf == (parent ? parent : buf);
  pthread_mutex_unlock(&lock);
  if (!found || clGetMemObjectInfo(buf, CL_MEM_HOST_PTR, sizeof host, &host, NULL) != CL_SUCCESS) return NULL;
  return host;
}
