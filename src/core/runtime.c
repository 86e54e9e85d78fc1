/*
 * runtime.c: one OpenCL context and in-order queue per device; programs
 * built from the embedded cl/ sources (or CLT_KERNEL_DIR) with -D
 * tunables and cached per (context, source, options); kernel launches with
 * work-group sizes clamped to what the kernel and device allow; device
 * buffers and pinned host staging memory.
 */
#include "core/internal.h"

#include <pthread.h>
#include <stdatomic.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Contexts alive in this process, and what runs when the last one goes
 * (clt__on_last_context): process-wide caches of OpenCL objects must be
 * emptied while the driver is still there (CLBlast's: blas.c). */
static _Atomic int live_contexts;
#define MAX_LAST_CONTEXT_FNS 4
static pthread_mutex_t last_context_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*last_context_fns[MAX_LAST_CONTEXT_FNS])(void);
static int last_context_nfns;

void clt__on_last_context(void (*fn)(void)) {
  pthread_mutex_lock(&last_context_lock);
  int i = 0;
  while (i < last_context_nfns && last_context_fns[i] != fn) i++;
  if (i == last_context_nfns && i < MAX_LAST_CONTEXT_FNS) last_context_fns[last_context_nfns++] = fn;
  else if (i == MAX_LAST_CONTEXT_FNS)
    clt__log(CLT_LOG_ERROR, "internal: more than %d functions to call when the last context goes; one is left out",
             MAX_LAST_CONTEXT_FNS);
  pthread_mutex_unlock(&last_context_lock);
}

static void last_context_gone(void) {
  void (*fns[MAX_LAST_CONTEXT_FNS])(void);
  pthread_mutex_lock(&last_context_lock);
  int n = last_context_nfns;
  memcpy(fns, last_context_fns, sizeof fns);
  pthread_mutex_unlock(&last_context_lock);
  for (int i = 0; i < n; i++) fns[i]();
}

int clt_context_create(const clt_devices *devs, int i, clt_context **out) {
  int rc = CLT_OK;
  cl_int err = CL_SUCCESS;
  clt_context *ctx = NULL;

  CLT_ARG(out);
  *out = NULL;
  CLT_HANDLE(devs, "device list");
  if (i < 0 || i >= devs->count)
    return clt__error(CLT_EINVAL, "clt_context_create: device %d does not exist (the list has %d)", i, devs->count);
  if ((rc = clt__env_check()) < 0) return rc;
  ctx = clt__calloc(1, sizeof *ctx);
  if (!ctx) return CLT_ENOMEM;
  ctx->info = devs->entries[i].info;
  ctx->platform = devs->entries[i].platform;
  ctx->device = devs->entries[i].device;

  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
  ctx->context = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
  CLT_CL_TRY(err);
  /* Profiling costs next to nothing and gives each replica's device time,
   * which the load balancer needs. */
  ctx->queue = clCreateCommandQueue(ctx->context, ctx->device, CL_QUEUE_PROFILING_ENABLE, &err);
  CLT_CL_TRY(err);
  /* A second in-order queue for copies that must overtake queued compute:
   * gradient buckets leave while the backward pass goes on. */
  ctx->xfer_queue = clCreateCommandQueue(ctx->context, ctx->device, 0, &err);
  CLT_CL_TRY(err);
  ctx->shared_buffers = clt__shared_buffers_on(ctx->device, &ctx->info);
  ctx->counted = 1;
  atomic_fetch_add(&live_contexts, 1);
  *out = ctx;
  return CLT_OK;

fail:
  clt__error_prefix(rc, "creating a context on %s (%s)", ctx->info.name, ctx->info.platform_name);
  clt_context_destroy(ctx);
  return rc;
}

void clt_context_destroy(clt_context *ctx) {
  if (!ctx) return;
  if (ctx->queue) clFinish(ctx->queue);
  for (struct clt_program_entry *p = ctx->programs, *pn; p; p = pn) {
    pn = p->next;
    for (struct clt_kernel_entry *k = p->kernels, *kn; k; k = kn) {
      kn = k->next;
      clReleaseKernel(k->kernel);
      free(k->name);
      free(k);
    }
    clReleaseProgram(p->program);
    free(p->source_name);
    free(p->options);
    free(p);
  }
  if (ctx->reduce_scratch) clReleaseMemObject(ctx->reduce_scratch);
  if (ctx->scratch) clReleaseMemObject(ctx->scratch);
  if (ctx->gemm_scratch) clReleaseMemObject(ctx->gemm_scratch);
  if (ctx->xfer_queue) {
    clFinish(ctx->xfer_queue);
    clReleaseCommandQueue(ctx->xfer_queue);
  }
  if (ctx->queue) clReleaseCommandQueue(ctx->queue);
  if (ctx->counted && atomic_fetch_sub(&live_contexts, 1) == 1) last_context_gone();
  if (ctx->context) clReleaseContext(ctx->context);
  free(ctx);
}

const clt_device_info *clt_context_device(const clt_context *ctx) { return ctx ? &ctx->info : NULL; }
cl_context clt_context_cl(const clt_context *ctx) { return ctx ? ctx->context : NULL; }
cl_command_queue clt_context_queue(const clt_context *ctx) { return ctx ? ctx->queue : NULL; }
cl_command_queue clt_context_transfer_queue(const clt_context *ctx) { return ctx ? ctx->xfer_queue : NULL; }
cl_device_id clt_context_cl_device(const clt_context *ctx) { return ctx ? ctx->device : NULL; }

int clt_context_finish(clt_context *ctx) {
  int rc = CLT_OK;
  CLT_HANDLE(ctx, "context");
  CLT_CL_TRY(clFinish(ctx->queue));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "on %s", ctx->info.name);
}

int clt__context_buffer(clt_context *ctx, cl_mem *slot, size_t bytes, const char *what, cl_mem *out) {
  if (!*slot || clt_buffer_size(*slot) < bytes) {
    cl_mem grown;
    int rc = clt_buffer_create(ctx, bytes ? bytes : 1, &grown);
    if (rc < 0) return clt__error_prefix(rc, "%s of %zu bytes", what, bytes);
    if (*slot) clReleaseMemObject(*slot);
    *slot = grown;
  }
  *out = *slot;
  return CLT_OK;
}

int clt__context_scratch(clt_context *ctx, size_t bytes, cl_mem *out) {
  return clt__context_buffer(ctx, &ctx->scratch, bytes, "scratch space", out);
}

/* ---- programs ------------------------------------------------------------- */

const char *const *clt_kernel_sources(void) { return clt__kernel_source_names; }

/* The text of the source built into the library as NAME. */
static int embedded_source_text(const char *name, const char **text) {
  for (const struct clt_kernel_source *s = clt__kernel_sources; s->name; s++) {
    if (strcmp(s->name, name) == 0) {
      *text = s->text;
      return CLT_OK;
    }
  }
  return clt__error(CLT_ENOTFOUND, "no kernel source named '%s' is built into cltrain", name);
}

/* The text of an embedded source, or of $CLT_KERNEL_DIR/NAME.cl (malloc'd
 * into *owned) while developing kernels. */
static int kernel_source_text(const char *name, const char **text, char **owned) {
  const char *dir = getenv("CLT_KERNEL_DIR");
  *owned = NULL;
  if (dir && *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.cl", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
      return clt__error(CLT_ENOTFOUND, "kernel source %s (CLT_KERNEL_DIR=%s): %s", path, dir, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    do {
      if (len + 4096 + 1 > cap) {
        char *grown = realloc(buf, cap = 2 * cap + 8192);
        if (!grown) { free(buf); fclose(f); return clt__error(CLT_ENOMEM, "reading %s: out of memory", path); }
        buf = grown;
      }
      n = fread(buf + len, 1, 4096, f);
      len += n;
    } while (n > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return clt__error(CLT_EIO, "reading kernel source %s failed", path); }
    buf[len] = '\0';
    *text = *owned = buf;
    return CLT_OK;
  }
  return embedded_source_text(name, text);
}

static struct clt_program_entry *find_program(clt_context *ctx, const char *name, const char *options) {
  for (struct clt_program_entry *p = ctx->programs; p; p = p->next)
    if (strcmp(p->source_name, name) == 0 && strcmp(p->options, options) == 0) return p;
  return NULL;
}

/* Compile source for ctx's device; on failure, the message carries the log. */
static int build_program(clt_context *ctx, const char *name, const char *source, const char *options,
                         struct clt_program_entry **out) {
  int rc = CLT_OK;
  cl_int err;
  char *log = NULL;
  struct clt_program_entry *entry = NULL;
  cl_program prog = NULL;
  /* Every source is compiled after cl/prelude.cl (the storage type of
   * activations); compiler messages count lines from the prelude's first. */
  const char *prelude = "", *texts[2];
  char *owned = NULL;
  if (kernel_source_text("prelude", &prelude, &owned) < 0) /* CLT_KERNEL_DIR without one: the built-in */
    CLT_TRY(embedded_source_text("prelude", &prelude));
  texts[0] = prelude, texts[1] = source;
  prog = clCreateProgramWithSource(ctx->context, 2, texts, NULL, &err);
  free(owned);
  CLT_CL_TRY(err);

  /* -cl-std=CL1.2: every vendor we target speaks it; kernels use nothing newer. */
  char opts[2048];
  snprintf(opts, sizeof opts, "-cl-std=CL1.2 %s", options);
  err = clBuildProgram(prog, 1, &ctx->device, opts, NULL, NULL);
  if (err != CL_SUCCESS) {
    size_t len = 0;
    clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &len);
    log = calloc(1, len + 1);
    if (log) clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, len, log, NULL);
    rc = clt__error(CLT_EBUILD, "building kernel source '%s' with options '%s' on %s (%s) failed with %s:\n%s",
                    name, opts, ctx->info.name, ctx->info.platform_name, clt__cl_error_name(err),
                    log && *log ? log : "(the compiler left no log)");
    free(log);
    goto fail;
  }
  entry = clt__calloc(1, sizeof *entry);
  if (!entry || !(entry->source_name = clt__strdup(name)) || !(entry->options = clt__strdup(options))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  entry->program = prog;
  entry->next = ctx->programs;
  ctx->programs = entry;
  clt__log(CLT_LOG_DEBUG, "built kernel source '%s' (%s) on %s", name, opts, ctx->info.name);
  *out = entry;
  return CLT_OK;

fail:
  if (entry) {
    free(entry->source_name);
    free(entry->options);
    free(entry);
  }
  if (prog) clReleaseProgram(prog);
  return rc;
}

int clt_context_build(clt_context *ctx, const char *name, const char *source, const char *options,
                      cl_program *out) {
  struct clt_program_entry *p;
  CLT_ARG(out);
  *out = NULL;
  CLT_HANDLE(ctx, "context");
  CLT_ARG(name);
  CLT_ARG(source);
  if (!options) options = "";
  if ((p = find_program(ctx, name, options))) {
    *out = p->program;
    return CLT_OK;
  }
  int rc = build_program(ctx, name, source, options, &p);
  if (rc == CLT_OK) *out = p->program;
  return rc;
}

int clt_context_kernel(clt_context *ctx, const char *source_name, const char *kernel_name,
                       const char *options, cl_kernel *out) {
  int rc = CLT_OK;
  struct clt_program_entry *p;
  char *owned = NULL;

  CLT_ARG(out);
  *out = NULL;
  CLT_HANDLE(ctx, "context");
  CLT_ARG(source_name);
  CLT_ARG(kernel_name);
  if (!options) options = "";
  if (!(p = find_program(ctx, source_name, options))) {
    const char *text;
    CLT_TRY(kernel_source_text(source_name, &text, &owned));
    CLT_TRY(build_program(ctx, source_name, text, options, &p));
    free(owned);
    owned = NULL;
  }
  for (struct clt_kernel_entry *k = p->kernels; k; k = k->next) {
    if (strcmp(k->name, kernel_name) == 0) {
      *out = k->kernel;
      return CLT_OK;
    }
  }
  cl_int err;
  cl_kernel kernel = clCreateKernel(p->program, kernel_name, &err);
  if (err != CL_SUCCESS)
    return clt__error(clt__cl_status(err), "kernel '%s' in source '%s' on %s: clCreateKernel failed with %s",
                      kernel_name, source_name, ctx->info.name, clt__cl_error_name(err));
  struct clt_kernel_entry *k = clt__calloc(1, sizeof *k);
  if (!k || !(k->name = clt__strdup(kernel_name))) {
    free(k);
    clReleaseKernel(kernel);
    return CLT_ENOMEM;
  }
  k->kernel = kernel;
  k->next = p->kernels;
  p->kernels = k;
  *out = kernel;
  return CLT_OK;

fail:
  free(owned);
  return rc;
}

/* The largest work-group size this kernel can run with on ctx's device. */
static size_t kernel_max_wgs(clt_context *ctx, cl_kernel k) {
  size_t wgs = 0;
  if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wgs, &wgs, NULL) != CL_SUCCESS ||
      wgs == 0)
    wgs = ctx->info.max_work_group_size ? ctx->info.max_work_group_size : 1;
  return wgs;
}

int clt__items_run_as_loops(const clt_context *ctx) {
  return ctx->info.type == CLT_DEVICE_CPU && strstr(ctx->info.platform_name, "Portable Computing Language") != NULL;
}

size_t clt__clamp_wgs(clt_context *ctx, cl_kernel k, size_t want) {
  size_t max = kernel_max_wgs(ctx, k);
  size_t wgs = 1;
  if (want == 0) want = 256;
  while (wgs * 2 <= want && wgs * 2 <= max) wgs *= 2; /* powers of two: tree reductions need them */
  return wgs;
}

int clt_launch_1d(clt_context *ctx, cl_kernel k, size_t n, size_t wgs) {
  int rc = CLT_OK;
  CLT_HANDLE(ctx, "context");
  CLT_ARG(k);
  if (n == 0) return CLT_OK;
  size_t local = clt__clamp_wgs(ctx, k, wgs);
  size_t global = (n + local - 1) / local * local;
  CLT_CL_TRY(clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &local, 0, NULL, NULL));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "launching a kernel over %zu items on %s", n, ctx->info.name);
}

int clt__launch_exact_1d(clt_context *ctx, cl_kernel k, size_t n) {
  int rc = CLT_OK;
  size_t local = clt__clamp_wgs(ctx, k, 0), body = n / local * local, rest = n - body;
  if (body) CLT_CL_TRY(clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &body, &local, 0, NULL, NULL));
  if (rest) CLT_CL_TRY(clEnqueueNDRangeKernel(ctx->queue, k, 1, &body, &rest, &rest, 0, NULL, NULL));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "launching a kernel over exactly %zu items on %s", n, ctx->info.name);
}

/* ---- buffers --------------------------------------------------------------- */

static int device_memory_error(clt_context *ctx, size_t bytes, cl_int err) {
  char want[32], max[32], total[32];
  return clt__error(CLT_EDEVMEM,
                    "could not allocate %s on %s (%s): %s; the device allows %s in one buffer and has %s in all",
                    clt__fmt_bytes(bytes, want, sizeof want), ctx->info.name, ctx->info.platform_name,
                    clt__cl_error_name(err), clt__fmt_bytes(ctx->info.max_alloc_bytes, max, sizeof max),
                    clt__fmt_bytes(ctx->info.global_mem_bytes, total, sizeof total));
}

int clt_buffer_create(clt_context *ctx, size_t bytes, cl_mem *out) {
  cl_int err = CL_SUCCESS;
  CLT_ARG(out);
  *out = NULL;
  CLT_HANDLE(ctx, "context");
  if (bytes == 0) return clt__error(CLT_EINVAL, "clt_buffer_create: a buffer of 0 bytes on %s", ctx->info.name);
  if (ctx->info.max_alloc_bytes && bytes > ctx->info.max_alloc_bytes)
    return device_memory_error(ctx, bytes, CL_INVALID_BUFFER_SIZE);
  /* Host-shared where the device's memory is the host's: an all-reduce
   * then works on the bytes in place (src/core/shared_buffers.c). */
  cl_mem buf = ctx->shared_buffers ? clt__shared_buffer_create(ctx->context, bytes, &err)
                                   : clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) return device_memory_error(ctx, bytes, err);
  /* Drivers allocate lazily; touching the buffer makes running out show here,
   * where we can say how much was asked, rather than at some later kernel. */
  static const unsigned char zero = 0;
  err = clEnqueueFillBuffer(ctx->queue, buf, &zero, 1, 0, bytes, 0, NULL, NULL);
  if (err == CL_SUCCESS) err = clFinish(ctx->queue);
  if (err != CL_SUCCESS) {
    clReleaseMemObject(buf);
    return device_memory_error(ctx, bytes, err);
  }
  *out = buf;
  return CLT_OK;
}

void clt_buffer_release(cl_mem buf) {
  if (buf) clReleaseMemObject(buf);
}

size_t clt_buffer_size(cl_mem buf) {
  size_t size = 0;
  if (!buf || clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS) return 0;
  return size;
}

struct clt_pinned {
  cl_command_queue queue; /* not retained: the owner keeps it alive */
  cl_mem buf;
  void *ptr;
  size_t bytes;
};

int clt__pinned_create_cl(cl_context context, cl_command_queue queue, size_t bytes, clt_pinned **out) {
  int rc = CLT_OK;
  cl_int err = CL_SUCCESS;
  clt_pinned *p = clt__calloc(1, sizeof *p);
  *out = NULL;
  if (!p) return CLT_ENOMEM;
  p->queue = queue;
  p->bytes = bytes ? bytes : 1;
  /* ALLOC_HOST_PTR + a persistent map is the portable way to get memory the
   * driver can DMA from directly (pinned on NVIDIA and AMD). */
  p->buf = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, p->bytes, NULL, &err);
  CLT_CL_TRY(err);
  p->ptr = clEnqueueMapBuffer(queue, p->buf, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, p->bytes, 0, NULL,
                              NULL, &err);
  CLT_CL_TRY(err);
  *out = p;
  return CLT_OK;
fail:
  clt_pinned_destroy(p);
  return rc;
}

int clt_pinned_create(clt_context *ctx, size_t bytes, clt_pinned **out) {
  CLT_ARG(out);
  *out = NULL;
  CLT_HANDLE(ctx, "context");
  int rc = clt__pinned_create_cl(ctx->context, ctx->queue, bytes, out);
  if (rc < 0) clt__error_prefix(rc, "allocating %zu bytes of pinned host memory for %s", bytes, ctx->info.name);
  return rc;
}

void clt_pinned_destroy(clt_pinned *p) {
  if (!p) return;
  if (p->ptr) {
    clEnqueueUnmapMemObject(p->queue, p->buf, p->ptr, 0, NULL, NULL);
    clFinish(p->queue);
  }
  if (p->buf) clReleaseMemObject(p->buf);
  free(p);
}

void *clt_pinned_ptr(const clt_pinned *p) { return p ? p->ptr : NULL; }
size_t clt_pinned_size(const clt_pinned *p) { return p ? p->bytes : 0; }
