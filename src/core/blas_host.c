/*
 * blas_host.c: GEMMs of CPU devices whose buffers live in host memory
 * (CL_DEVICE_HOST_UNIFIED_MEMORY: PoCL, rusticl's llvmpipe), handed to the
 * host's CBLAS (OpenBLAS when configure found it) on mapped buffers.
 *
 * Why: on such a device an OpenCL GEMM and a host GEMM run on the same
 * cores over the same memory, and a maintained host BLAS is faster than
 * CLBlast's generic kernels compiled by PoCL (bench/nn_bench: the CNN's
 * conv2 weight gradient 64x288x12544 ran 11.5 ms there, see NEWS).
 *
 * Ordering with the device queue: every operand's bytes are mapped on the
 * compute queue (non-blocking, one mapping per distinct buffer covering
 * every range the GEMM touches), the GEMM runs once the maps have, and
 * the unmaps are enqueued behind it, which every later command waits
 * behind. Where the device runs native kernels (PoCL), the GEMM is one,
 * enqueued between the maps and the unmaps, and the calling thread never
 * waits; elsewhere (rusticl) the calling thread waits for the last map's
 * event and runs it. On PoCL and rusticl these maps are the buffer's own
 * memory, no copies.
 *
 * Threads: a GEMM gets the device's thread budget, its compute units
 * (PoCL: POCL_MAX_PTHREAD_COUNT or cltrain --threads), bounded by the
 * cores: bands of C over this thread and sleeping helpers, each band a
 * single-threaded BLAS call (see "the GEMM's threads" below).
 *
 * Results: the GEMM is the host BLAS's, deterministic for a given thread
 * count, shape and library, so replicas on such devices agree bit for bit
 * and a resumed run repeats the uninterrupted one; each is checked against
 * the plain-C references as CLBlast's are (tests/core/test_blas). CLT_HOST_BLAS=0
 * in the environment sends every GEMM to CLBlast instead.
 */
#include "core/internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if HAVE_CBLAS
#include <cblas.h>
#endif

int clt__host_blas_available(void) { return HAVE_CBLAS; }

const char *clt__host_blas_name(void) {
#if HAVE_CBLAS
  return CLT_CBLAS_NAME;
#else
  return "none";
#endif
}

int clt__host_blas_threads(const clt_context *ctx) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int n = ctx->info.compute_units > 0 ? (int)ctx->info.compute_units : 1;
  if (cores > 0 && n > cores) n = (int)cores;
  return n;
}

int clt__host_blas_use(const clt_context *ctx) {
  if (!HAVE_CBLAS) return 0;
  if (ctx->info.type != CLT_DEVICE_CPU || !ctx->info.unified_memory) return 0;
  return clt__env_switch("CLT_HOST_BLAS") != 0;
}

#if HAVE_CBLAS

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
#endif

/* One mapping: a buffer and the float range [lo, hi) of it the GEMM uses. */
typedef struct host_map {
  cl_mem buf;
  size_t lo, hi;
  int write;
  void *ptr;
} host_map;

/* Add operand x's range (rows x cols stored, `batch` copies `stride`
 * apart) to the mappings, merging with one of the same buffer. */
static int add_range(host_map *maps, int n, clt_matrix x, size_t rows, size_t cols, size_t stride, size_t batch,
                     int write) {
  size_t lo = x.offset, hi = x.offset + (batch - 1) * stride + (rows - 1) * x.ld + cols;
  for (int i = 0; i < n; i++)
    if (maps[i].buf == x.buf) {
      if (lo < maps[i].lo) maps[i].lo = lo;
      if (hi > maps[i].hi) maps[i].hi = hi;
      maps[i].write |= write;
      return n;
    }
  maps[n] = (host_map){x.buf, lo, hi, write, NULL};
  return n + 1;
}

/* ---- the GEMM's threads ----------------------------------------------------
 *
 * OpenBLAS's own pool spins (sched_yield) for about 0.1 s after every call
 * before its threads sleep, and a host GEMM is followed at once by the
 * device's kernels: at 2 threads the spinning thread took a core from
 * PoCL's two (perf: a quarter of the CNN's time in sched_yield). Its
 * timeout is read only when the library loads, so instead OpenBLAS runs
 * single-threaded and a GEMM is cut here into `threads` bands of C's rows
 * (or columns, whichever is longer), run by the calling thread and helpers
 * that sleep on a condition variable between GEMMs. Each band is the same
 * single-threaded OpenBLAS call every time, so a given thread count gives
 * the same bits on every run. One GEMM at a time uses the helpers. */
typedef struct gemm_job {
  clt_transpose ta, tb;
  size_t m, n, k, batch, as, bs, cs;
  float alpha, beta;
  const float *a, *b;
  float *c;
  size_t lda, ldb, ldc;
  int parts;
} gemm_job;

#define MAX_HELPERS 63
static pthread_mutex_t pool_use = PTHREAD_MUTEX_INITIALIZER; /* one GEMM at a time */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_go = PTHREAD_COND_INITIALIZER, pool_done = PTHREAD_COND_INITIALIZER;
static int pool_helpers;           /* started so far */
static unsigned long pool_gen;     /* bumped for every job */
static int pool_pending;           /* helpers' parts not yet done */
static const gemm_job *pool_job;

static CBLAS_TRANSPOSE cblas_trans(clt_transpose t) { return t == CLT_TRANS ? CblasTrans : CblasNoTrans; }

/* Part p of parts: a band of C's rows when m >= n, else of its columns. */
static void run_part(const gemm_job *j, int p) {
  int by_rows = j->m >= j->n;
  size_t len = by_rows ? j->m : j->n, lo = len * (size_t)p / (size_t)j->parts,
         hi = len * (size_t)(p + 1) / (size_t)j->parts;
  if (hi <= lo) return;
  size_t m = by_rows ? hi - lo : j->m, n = by_rows ? j->n : hi - lo;
  /* op(A) rows lo.. (A stored k x m when transposed), op(B) columns lo.. */
  size_t aoff = by_rows ? (j->ta ? lo : lo * j->lda) : 0, boff = by_rows ? 0 : (j->tb ? lo * j->ldb : lo);
  size_t coff = by_rows ? lo * j->ldc : lo;
  for (size_t i = 0; i < j->batch; i++)
    cblas_sgemm(CblasRowMajor, cblas_trans(j->ta), cblas_trans(j->tb), (int)m, (int)n, (int)j->k, j->alpha,
                j->a + i * j->as + aoff, (int)j->lda, j->b + i * j->bs + boff, (int)j->ldb, j->beta,
                j->c + i * j->cs + coff, (int)j->ldc);
}

static void *helper_main(void *arg) {
  int id = (int)(intptr_t)arg; /* 1.. */
  unsigned long seen = 0;
  pthread_mutex_lock(&pool_lock);
  for (;;) {
    while (pool_gen == seen) pthread_cond_wait(&pool_go, &pool_lock);
    seen = pool_gen;
    const gemm_job *j = pool_job;
    if (id >= j->parts) continue;
    pthread_mutex_unlock(&pool_lock);
    run_part(j, id);
    pthread_mutex_lock(&pool_lock);
    if (--pool_pending == 0) pthread_cond_signal(&pool_done);
  }
  return NULL;
}

/* Run j over j->parts threads: this one and parts - 1 helpers (started
 * on first need; where one cannot start, fewer parts). */
static void run_job(gemm_job *j) {
  if (j->parts > MAX_HELPERS + 1) j->parts = MAX_HELPERS + 1;
  if (j->parts <= 1) {
    j->parts = 1;
    run_part(j, 0);
    return;
  }
  pthread_mutex_lock(&pool_use);
  pthread_mutex_lock(&pool_lock);
  while (pool_helpers < j->parts - 1) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &attr, helper_main, (void *)(intptr_t)(pool_helpers + 1));
    pthread_attr_destroy(&attr);
    if (err) break;
    pool_helpers++;
  }
  if (j->parts > pool_helpers + 1) j->parts = pool_helpers + 1;
  pool_job = j;
  pool_pending = j->parts - 1;
  pool_gen++;
  pthread_cond_broadcast(&pool_go);
  pthread_mutex_unlock(&pool_lock);
  run_part(j, 0);
  pthread_mutex_lock(&pool_lock);
  while (pool_pending > 0) pthread_cond_wait(&pool_done, &pool_lock);
  pthread_mutex_unlock(&pool_lock);
  pthread_mutex_unlock(&pool_use);
}

/* Bands of at least 32 rows or columns, and enough work to share: a
 * thread's wake-up costs more than a small GEMM. */
static int job_parts(const clt_context *ctx, size_t m, size_t n, size_t k, size_t batch) {
  size_t len = m >= n ? m : n, work = m * n * k * batch;
  int parts = clt__host_blas_threads(ctx);
  if ((size_t)parts > len / 32) parts = (int)(len / 32);
  if (work < (size_t)1 << 18) parts = 1;
  return parts < 1 ? 1 : parts;
}

/* The kernels OpenBLAS chose for this CPU when it loaded (its core name;
 * OPENBLAS_CORETYPE chooses), for the log. Weak: another CBLAS lacks it. */
char *openblas_get_corename(void) __attribute__((weak));

const char *clt__host_blas_core(void) { return openblas_get_corename ? openblas_get_corename() : NULL; }

static void single_threaded_blas(void) {
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1); /* the bands are the threads */
#endif
}

/* ---- a GEMM as a native kernel on the queue ---------------------------------
 *
 * Where the device runs native kernels (PoCL's CPU device does; rusticl
 * does not), the GEMM between its maps and unmaps is enqueued as one: the
 * queue runs it in order on its own worker thread, on the mapped pointers
 * (which a non-blocking map gives at once, valid from when the map has
 * run, which the in-order queue ensures), and the calling thread goes on
 * enqueueing: the step never waits for the queue between kernels and host
 * GEMMs (perf: a fifth of the MLP's time went to the two threads waking
 * each other at every GEMM). The same bands, the same bits as when the
 * host waits. The buffers go through maps rather than the native kernel's
 * own mem_list, whose relocation PoCL 3.1 scrambles when it sorts the
 * list in place. */
static void native_gemm_run(void *args) {
  single_threaded_blas();
  run_job(args);
}

int clt__host_blas_native(clt_context *ctx) {
  if (ctx->native_gemm == 0) {
    cl_device_exec_capabilities caps = 0;
    int off = clt__env_switch("CLT_HOST_BLAS_NATIVE") == 0;
    ctx->native_gemm = !off && clGetDeviceInfo(ctx->device, CL_DEVICE_EXECUTION_CAPABILITIES, sizeof caps, &caps,
                                               NULL) == CL_SUCCESS && (caps & CL_EXEC_NATIVE_KERNEL) ? 1 : -1;
  }
  return ctx->native_gemm > 0;
}

int clt__host_sgemm(clt_context *ctx, clt_transpose ta, clt_transpose tb, size_t m, size_t n, size_t k, float alpha,
                    clt_matrix a, size_t as, clt_matrix b, size_t bs, float beta, clt_matrix c, size_t cs,
                    size_t batch) {
  int rc = CLT_OK, nmaps = 0, mapped = 0, native = clt__host_blas_native(ctx);
  host_map maps[3];
  cl_event ev = NULL;
  nmaps = add_range(maps, nmaps, a, ta ? k : m, ta ? m : k, as, batch, 0);
  nmaps = add_range(maps, nmaps, b, tb ? n : k, tb ? k : n, bs, batch, 0);
  nmaps = add_range(maps, nmaps, c, m, n, cs, batch, 1);
  for (int i = 0; i < nmaps; i++) {
    cl_int err;
    cl_event *last = i == nmaps - 1 && !native ? &ev : NULL;
    maps[i].ptr = clEnqueueMapBuffer(ctx->queue, maps[i].buf, CL_FALSE,
                                     maps[i].write ? CL_MAP_READ | CL_MAP_WRITE : CL_MAP_READ,
                                     maps[i].lo * sizeof(float), (maps[i].hi - maps[i].lo) * sizeof(float), 0, NULL,
                                     last, &err);
    CLT_CL_TRY(err);
    mapped = i + 1;
  }
  gemm_job job = {ta, tb, m, n, k, batch, as, bs, cs, alpha, beta, NULL, NULL, NULL, a.ld, b.ld, c.ld,
                  job_parts(ctx, m, n, k, batch)};
  for (int i = 0; i < nmaps; i++) {
    if (maps[i].buf == a.buf) job.a = (const float *)maps[i].ptr + (a.offset - maps[i].lo);
    if (maps[i].buf == b.buf) job.b = (const float *)maps[i].ptr + (b.offset - maps[i].lo);
    if (maps[i].buf == c.buf) job.c = (float *)maps[i].ptr + (c.offset - maps[i].lo);
  }
  if (native) {
    cl_int err = clEnqueueNativeKernel(ctx->queue, native_gemm_run, &job, sizeof job, 0, NULL, NULL, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
      rc = clt__error(clt__cl_status(err), "enqueueing a host GEMM as a native kernel on %s: %s "
                      "(CLT_HOST_BLAS_NATIVE=0 runs it on the calling thread instead)", ctx->info.name,
                      clt__cl_error_name(err));
      goto fail;
    }
  } else {
    CLT_CL_TRY(clFlush(ctx->queue)); /* polling an event makes no progress on every driver (rusticl) without it */
    CLT_TRY(clt__wait_event(ctx, ev, clt__context_timeout(ctx), "the work queued before a host GEMM"));
    single_threaded_blas();
    run_job(&job);
  }

fail:
  for (int i = 0; i < mapped; i++) {
    cl_int err = clEnqueueUnmapMemObject(ctx->queue, maps[i].buf, maps[i].ptr, 0, NULL, NULL);
    if (err != CL_SUCCESS && rc == CLT_OK)
      rc = clt__error(clt__cl_status(err), "unmapping a host GEMM's operand on %s: %s", ctx->info.name,
                      clt__cl_error_name(err));
  }
  if (ev) clReleaseEvent(ev);
  if (rc < 0)
    return clt__error_prefix(rc, "host sgemm(m=%zu, n=%zu, k=%zu, batch=%zu) on %s", m, n, k, batch, ctx->info.name);
  return CLT_OK;
}

#else

int clt__host_blas_native(clt_context *ctx) {
  (void)ctx;
  return 0;
}

const char *clt__host_blas_core(void) { return NULL; }

int clt__host_sgemm(clt_context *ctx, clt_transpose ta, clt_transpose tb, size_t m, size_t n, size_t k, float alpha,
                    clt_matrix a, size_t as, clt_matrix b, size_t bs, float beta, clt_matrix c, size_t cs,
                    size_t batch) {
  return clt__error(CLT_EINVAL, "this cltrain was built without a host BLAS (configure --with-cblas)");
}

#endif

int clt__context_enqueues_ahead(clt_context *ctx) { return !clt__host_blas_use(ctx) || clt__host_blas_native(ctx); }
