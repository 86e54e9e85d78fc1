/*
 * blas.c: the only caller of CLBlast. Row-major SGEMM and strided batched
 * SGEMM on (cl_mem, offset, ld) operands, with shapes and buffer bounds
 * checked before CLBlast sees them, and CLBlast failures turned into errors
 * that name the routine and the shapes; tuned kernel parameters applied to
 * devices CLBlast's own database does not know. CPU devices run their
 * GEMMs on our own tiles (src/core/blas_cpu.c), and, where their buffers are
 * host memory, the shapes the tiles leave (B transposed with a C of few
 * rows) on the host's CBLAS (src/core/blas_host.c), behind the same checks.
 */
#include "core/internal.h"

#include <clblast_c.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *clblast_status_name(CLBlastStatusCode s) {
  switch (s) {
  case CLBlastNotImplemented: return "not implemented";
  case CLBlastInvalidDimension: return "invalid dimension";
  case CLBlastInvalidLeadDimA: return "leading dimension of A too small";
  case CLBlastInvalidLeadDimB: return "leading dimension of B too small";
  case CLBlastInvalidLeadDimC: return "leading dimension of C too small";
  case CLBlastInsufficientMemoryA: return "buffer of A too small";
  case CLBlastInsufficientMemoryB: return "buffer of B too small";
  case CLBlastInsufficientMemoryC: return "buffer of C too small";
  case CLBlastInsufficientMemoryTemp: return "temporary buffer too small";
  case CLBlastInvalidBatchCount: return "invalid batch count";
  case CLBlastInvalidLocalMemUsage: return "not enough local memory on this device";
  case CLBlastDatabaseError: return "no tuning database entry for this device";
  case CLBlastUnknownError: return "unknown error";
  case CLBlastUnexpectedError: return "unexpected error";
  default: break;
  }
  if ((int)s > -1000) return clt__cl_error_name((cl_int)s); /* codes shared with OpenCL */
  return "CLBlast error";
}

static int blas_error(clt_context *ctx, CLBlastStatusCode s, const char *routine, size_t m, size_t n, size_t k,
                      size_t batch) {
  int status = (s == CLBlastTempBufferAllocFailure || s == CLBlastOpenCLOutOfResources) ? CLT_EDEVMEM : CLT_EBLAS;
  return clt__error(status, "%s(m=%zu, n=%zu, k=%zu, batch=%zu) on %s (%s) failed: %s (CLBlast status %d)", routine,
                    m, n, k, batch, ctx->info.name, ctx->info.platform_name, clblast_status_name(s), (int)s);
}

/* Is operand X, `rows` x `cols` as stored (after deciding transposition),
 * with `batch` copies `stride` floats apart, inside its buffer? */
static int check_operand(const char *routine, char name, clt_matrix x, size_t rows, size_t cols, size_t stride,
                         size_t batch, size_t m, size_t n, size_t k) {
  if (!x.buf) return clt__error(CLT_EINVAL, "%s: matrix %c has no buffer", routine, name);
  if (rows == 0 || cols == 0) return CLT_OK; /* an empty operand is never read */
  if (x.ld < cols)
    return clt__error(CLT_ESHAPE, "%s(m=%zu, n=%zu, k=%zu): matrix %c is stored %zu x %zu, so its leading dimension "
                      "must be at least %zu, not %zu", routine, m, n, k, name, rows, cols, cols, x.ld);
  size_t last = x.offset + (batch - 1) * stride + (rows - 1) * x.ld + cols; /* one past the last float */
  size_t have = clt_buffer_size(x.buf) / sizeof(float);
  if (last > have)
    return clt__error(CLT_ESHAPE, "%s(m=%zu, n=%zu, k=%zu, batch=%zu): matrix %c (%zu x %zu, offset %zu, ld %zu) "
                      "reaches float %zu but its buffer holds %zu floats", routine, m, n, k, batch, name, rows, cols,
                      x.offset, x.ld, last, have);
  return CLT_OK;
}

/* The public function fn's arguments: a context, transpositions that are
 * one of the two, an operand buffer each (named as cltrain/opencl.h does). */
static int check_gemm_args(const char *fn, const clt_context *ctx, clt_transpose ta, clt_transpose tb,
                           clt_matrix a, clt_matrix b, clt_matrix c) {
  if (!ctx) return clt__null_arg(fn, "ctx", "context");
  if (ta != CLT_NO_TRANS && ta != CLT_TRANS)
    return clt__error(CLT_EINVAL, "%s: ta is %d: give CLT_NO_TRANS (0) or CLT_TRANS (1)", fn, (int)ta);
  if (tb != CLT_NO_TRANS && tb != CLT_TRANS)
    return clt__error(CLT_EINVAL, "%s: tb is %d: give CLT_NO_TRANS (0) or CLT_TRANS (1)", fn, (int)tb);
  if (!a.buf) return clt__null_arg(fn, "a.buf", NULL);
  if (!b.buf) return clt__null_arg(fn, "b.buf", NULL);
  if (!c.buf) return clt__null_arg(fn, "c.buf", NULL);
  return CLT_OK;
}

static int check_gemm(const char *routine, clt_transpose ta, clt_transpose tb, size_t m, size_t n, size_t k,
                      clt_matrix a, size_t as, clt_matrix b, size_t bs, clt_matrix c, size_t cs, size_t batch) {
  int rc;
  if ((rc = check_operand(routine, 'A', a, ta ? k : m, ta ? m : k, as, batch, m, n, k)) < 0) return rc;
  if ((rc = check_operand(routine, 'B', b, tb ? n : k, tb ? k : n, bs, batch, m, n, k)) < 0) return rc;
  return check_operand(routine, 'C', c, m, n, cs, batch, m, n, k);
}

static CLBlastTranspose trans(clt_transpose t) { return t == CLT_TRANS ? CLBlastTransposeYes : CLBlastTransposeNo; }

/* C = beta C when k == 0 or alpha == 0 (CLBlast rejects k == 0). */
static int scale_only(clt_context *ctx, size_t m, size_t n, float beta, clt_matrix c, size_t stride, size_t batch) {
  int rc = CLT_OK;
  for (size_t i = 0; i < batch; i++)
    for (size_t r = 0; r < m; r++) {
      clt_tensor row;
      int64_t len = (int64_t)n;
      CLT_TRY(clt_tensor_view(c.buf, (c.offset + i * stride + r * c.ld) * sizeof(float), CLT_F32, 1, &len, &row));
      CLT_TRY(beta == 0.0f ? clt_fill(ctx, &row, 0.0f) : clt_scale(ctx, &row, beta));
    }
fail:
  return rc;
}

/* ---- tuned parameters -------------------------------------------------------
 *
 * CLBlast's database holds tuned kernel parameters for many GPUs, but none
 * for a CPU through PoCL, which then gets defaults made for GPUs: 16x16
 * work-groups staging tiles in local memory, which PoCL keeps in ordinary
 * memory, so the staging is pure overhead. The table below holds parameter
 * sets measured with bench/gemm_tune (see there for how) and is applied,
 * once per device, through CLBlastOverrideParameters before the device's
 * first GEMM. A device no entry matches keeps CLBlast's own choice.
 * CLT_BLAS_TUNED=0 in the environment skips the table (to compare, or to
 * rule it out).
 *
 * Entries match on the platform name and device type, and optionally a
 * device name substring; every matching entry is applied in order, so a
 * later, more specific entry overrides an earlier, general one.
 * Each entry must list every parameter of its kernel, as CLBlast requires:
 *   GemmRoutine   XGEMM_MIN_INDIRECT_SIZE: GEMMs with m*n*k below its cube
 *                 run the direct kernel, larger ones the indirect one
 *   Xgemm         the indirect kernel (operands copied to padded tiles)
 *   XgemmDirect   the direct kernel (any shape, no copies) */
#define MAX_TUNED_PARAMS 16
typedef struct tuned_params {
  const char *platform;  /* CL_PLATFORM_NAME contains this */
  clt_device_type type;  /* and the device is of this type */
  const char *device;    /* and its name contains this (NULL: any) */
  const char *kernel;
  const char *names[MAX_TUNED_PARAMS];
  size_t values[MAX_TUNED_PARAMS];
} tuned_params;

/* PoCL on CPUs. Measured on "pthread-skylake-avx512-AMD EPYC" (PoCL 3.1,
 * 2 cores) with bench/gemm_tune --climb over the CNN's conv2 and linear
 * and the MLP's first-layer shapes, CPU time per call:
 *   conv2 forward NN 64x12544x288      58 -> 6.6 ms
 *   conv2 dw      NT 64x288x12544      63 -> 11.7 ms
 *   conv2 dx      TN 288x12544x64      58 -> 14.7 ms
 *   linear        64x128x3136 (3)     6.6 -> 1.1-1.5 ms
 *   linear        64x256x784 (2)      3.5 -> 0.6-0.7 ms
 * (before: CLBlast's defaults, which ran all of these on the direct kernel).
 * The winner gives each work-item a 16x16 block of C in float16 vectors
 * and stages nothing in local memory (SA = SB = 0). Applied to every PoCL
 * CPU device: the GPU-style defaults lose on any of them, for the local
 * memory reason above; other CPUs may have better sets, which gemm_tune
 * finds. Tuned, the indirect kernel beat the direct one on every shape of
 * both models down to 64x128x256, so only m*n*k < 64^3 (the 10-way output
 * layers) stays direct. One kind of shape loses: a tiny C with a huge k, as
 * 32x9x50176 (3.6 -> 7.2 ms), which the models no longer run (their first
 * convolution is direct, src/nn/conv.c). */
#define POCL "Portable Computing Language"
static const tuned_params tuned[] = {
    {POCL, CLT_DEVICE_CPU, NULL, "GemmRoutine", {"XGEMM_MIN_INDIRECT_SIZE"}, {64}},
    {POCL, CLT_DEVICE_CPU, NULL, "Xgemm",
     {"GEMMK", "KREG", "KWG", "KWI", "MDIMA", "MDIMC", "MWG", "NDIMB", "NDIMC", "NWG", "SA", "SB", "STRM", "STRN", "VWM",
      "VWN"},
     {0, 1, 8, 8, 8, 2, 32, 32, 4, 64, 0, 0, 0, 0, 16, 4}},
};

/* The devices the table has been applied to (or found not to match), and
 * whether an Xgemm entry was applied to each. */
static pthread_mutex_t tuned_lock = PTHREAD_MUTEX_INITIALIZER;
static cl_device_id tuned_done[64];
static int tuned_xgemm[64];
static int tuned_ndone;

static int tuned_disabled(void) {
  return clt__env_switch("CLT_BLAS_TUNED") == 0;
}

/* CLBlast keeps the programs it compiles in a process-wide cache that it
 * frees only when the library is unloaded at exit, after the OpenCL driver
 * may be gone: NVIDIA's then crashed (SIGSEGV in CLBlast's cache
 * destructor). So the cache is emptied when the last context goes: the
 * runtime calls back, once CLBlast has been asked anything (apply_tuned
 * comes first on every path to it). */
static void cache_clear(void) { CLBlastClearCache(); }
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static void cache_register(void) { clt__on_last_context(cache_clear); }

/* Apply every matching entry of the table to ctx's device, once. A failed
 * override is reported and leaves CLBlast's defaults: slower, never wrong.
 * Returns whether the device runs tuned Xgemm parameters. */
static int apply_tuned(clt_context *ctx) {
  pthread_once(&cache_once, cache_register);
  pthread_mutex_lock(&tuned_lock);
  for (int i = 0; i < tuned_ndone; i++)
    if (tuned_done[i] == ctx->device) {
      int x = tuned_xgemm[i];
      pthread_mutex_unlock(&tuned_lock);
      return x;
    }
  /* Past 64 devices the rest keep the defaults: an override on every call
   * would make CLBlast recompile every time. */
  int skip = tuned_ndone == (int)(sizeof tuned_done / sizeof tuned_done[0]) || tuned_disabled();
  int *xgemm = NULL;
  if (tuned_ndone < (int)(sizeof tuned_done / sizeof tuned_done[0])) {
    tuned_done[tuned_ndone] = ctx->device;
    xgemm = &tuned_xgemm[tuned_ndone++];
    *xgemm = 0;
  }
  for (size_t i = 0; !skip && i < sizeof tuned / sizeof tuned[0]; i++) {
    const tuned_params *t = &tuned[i];
    if (!strstr(ctx->info.platform_name, t->platform) || ctx->info.type != t->type ||
        (t->device && !strstr(ctx->info.name, t->device)))
      continue;
    size_t n = 0;
    while (n < MAX_TUNED_PARAMS && t->names[n]) n++;
    CLBlastStatusCode s = CLBlastOverrideParameters(ctx->device, t->kernel, CLBlastPrecisionSingle, n,
                                                    (const char **)t->names, t->values);
    if (s != CLBlastSuccess)
      clt__log(CLT_LOG_WARN, "CLBlast refused the tuned %s parameters for %s (%s): %s (status %d); keeping its defaults",
               t->kernel, ctx->info.name, ctx->info.platform_name, clblast_status_name(s), (int)s);
    else {
      clt__log(CLT_LOG_DEBUG, "applied tuned %s parameters to %s", t->kernel, ctx->info.name);
      if (xgemm && strcmp(t->kernel, "Xgemm") == 0) *xgemm = 1;
    }
  }
  int x = xgemm ? *xgemm : 0;
  pthread_mutex_unlock(&tuned_lock);
  return x;
}


/* Which backend runs ctx's GEMMs, logged (info) at its first GEMM. */
static int host_blas(clt_context *ctx) {
  int host = clt__host_blas_use(ctx);
  if (!ctx->blas_said) {
    ctx->blas_said = 1;
    const char *core = host ? clt__host_blas_core() : NULL;
    const char *tiles = clt__cpu_gemm_on(ctx) ? "cltrain's CPU tiles (CLT_CPU_GEMM=0: off) but where B is transposed "
                                                "and C has under 16 rows, there "
                                              : "";
    if (host)
      clt__log(CLT_LOG_INFO, "GEMMs on %s: %shost %s%s%s%s, %d thread(s) (CLT_HOST_BLAS=0: CLBlast)", ctx->info.name,
               tiles, clt__host_blas_name(), core ? " (" : "", core ? core : "", core ? " kernels)" : "",
               clt__host_blas_threads(ctx));
    else
      clt__log(CLT_LOG_INFO, "GEMMs on %s: %sCLBlast%s, %u compute unit(s)", ctx->info.name, tiles,
               apply_tuned(ctx) ? " (tuned parameters)" : "", ctx->info.compute_units);
  }
  return host;
}

/* ---- row-major through CLBlast's column-major entry ------------------------
 *
 * CLBlast's indirect GEMM kernel takes A as stored column-major, B
 * transposed and C column-major; any operand stored otherwise is first
 * copied (transposed, padded) into a temporary, and C is copied back. A
 * row-major call has C rotated, so every row-major GEMM paid a transpose of
 * C there and back, on PoCL the bulk of the time for a tall C: 2048 x 384
 * x 128 (the tiny GPT's QKV projection at batch 16) ran 3.6 ms where the
 * same flops as a dw (C of 384 x 128) ran 1.1. The row-major C = op(A)
 * op(B) is the column-major C^T = op(B)^T op(A)^T on the same memory, so it
 * is asked for that way, and C is never copied; the operands' copies are
 * what they were or fewer. */
static CLBlastStatusCode sgemm_one(clt_context *ctx, clt_transpose ta, clt_transpose tb, size_t m, size_t n,
                                   size_t k, float alpha, clt_matrix a, size_t a_off, clt_matrix b, size_t b_off,
                                   float beta, clt_matrix c, size_t c_off) {
  return CLBlastSgemm(CLBlastLayoutColMajor, trans(tb), trans(ta), n, m, k, alpha, b.buf, b.offset + b_off, b.ld,
                      a.buf, a.offset + a_off, a.ld, beta, c.buf, c.offset + c_off, c.ld, &ctx->queue, NULL);
}

int clt_sgemm(clt_context *ctx, clt_transpose ta, clt_transpose tb, size_t m, size_t n, size_t k, float alpha,
              clt_matrix a, clt_matrix b, float beta, clt_matrix c) {
  int rc = check_gemm_args(__func__, ctx, ta, tb, a, b, c);
  if (rc < 0 || (rc = check_gemm("sgemm", ta, tb, m, n, k, a, 0, b, 0, c, 0, 1)) < 0) return rc;
  if (m == 0 || n == 0) return CLT_OK;
  if (k == 0) return scale_only(ctx, m, n, beta, c, 0, 1);
  int host = host_blas(ctx);
  if (clt__cpu_gemm_use(ctx, tb, m, n, k, a, b, c)) return clt__cpu_sgemm(ctx, ta, tb, m, n, k, alpha, a, 0, b, 0, beta, c, 0, 1);
  if (host) return clt__host_sgemm(ctx, ta, tb, m, n, k, alpha, a, 0, b, 0, beta, c, 0, 1);
  apply_tuned(ctx);
  CLBlastStatusCode s = sgemm_one(ctx, ta, tb, m, n, k, alpha, a, 0, b, 0, beta, c, 0);
  if (s != CLBlastSuccess) return blas_error(ctx, s, "CLBlastSgemm", m, n, k, 1);
  return CLT_OK;
}

int clt_sgemm_batched(clt_context *ctx, clt_transpose ta, clt_transpose tb, size_t m, size_t n, size_t k,
                      float alpha, clt_matrix a, size_t a_stride, clt_matrix b, size_t b_stride, float beta,
                      clt_matrix c, size_t c_stride, size_t batch) {
  int rc = check_gemm_args(__func__, ctx, ta, tb, a, b, c);
  if (rc < 0) return rc;
  if (batch == 0) return CLT_OK;
  if ((rc = check_gemm("sgemm_batched", ta, tb, m, n, k, a, a_stride, b, b_stride, c, c_stride, batch)) < 0) return rc;
  if (m == 0 || n == 0) return CLT_OK;
  if (k == 0) return scale_only(ctx, m, n, beta, c, c_stride, batch);
  int host = host_blas(ctx);
  if (clt__cpu_gemm_use(ctx, tb, m, n, k, a, b, c))
    return clt__cpu_sgemm(ctx, ta, tb, m, n, k, alpha, a, a_stride, b, b_stride, beta, c, c_stride, batch);
  if (host) return clt__host_sgemm(ctx, ta, tb, m, n, k, alpha, a, a_stride, b, b_stride, beta, c, c_stride, batch);
  /* CLBlast 1.5's strided batched indirect kernel gives wrong results with
   * the tuned PoCL Xgemm parameters above whenever it has to pad (for
   * example 300 x 300 x 8, or 100 x 100 x 100): on such devices the batch
   * runs as single GEMMs, which are right, and cost little more on a CPU. */
  if (apply_tuned(ctx)) {
    for (size_t i = 0; i < batch; i++) {
      CLBlastStatusCode s =
          sgemm_one(ctx, ta, tb, m, n, k, alpha, a, i * a_stride, b, i * b_stride, beta, c, i * c_stride);
      if (s != CLBlastSuccess) return blas_error(ctx, s, "CLBlastSgemm (one of a batch)", m, n, k, batch);
    }
    return CLT_OK;
  }
  /* column-major with the operands swapped, as sgemm_one */
  CLBlastStatusCode s = CLBlastSgemmStridedBatched(CLBlastLayoutColMajor, trans(tb), trans(ta), n, m, k, alpha, b.buf,
                                                   b.offset, b.ld, b_stride, a.buf, a.offset, a.ld, a_stride, beta,
                                                   c.buf, c.offset, c.ld, c_stride, batch, &ctx->queue, NULL);
  if (s != CLBlastSuccess) return blas_error(ctx, s, "CLBlastSgemmStridedBatched", m, n, k, batch);
  return CLT_OK;
}
