/*
 * cmd_bench.c: `cltrain bench gemm`: on every selected device, check SGEMM
 * (all four transpose cases, offsets, odd shapes) and the elementwise and
 * reduction kernels against plain C, then time square SGEMMs and report
 * GFLOP/s. A wrong result is exit code 4.
 */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cltrain/opencl.h>

#include "cli.h"
#include "ref/ref.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One GEMM case against the reference; returns the largest relative error,
 * or a negative status. Tolerance reasoning: float32 accumulation over k
 * terms of size ~1 errs by about k * 2^-24 relative to the sum of |terms|. */
static int check_gemm_case(clt_context *ctx, int ta, int tb, size_t m, size_t n, size_t k, size_t off,
                           double *maxerr) {
  int rc = CLT_OK;
  size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
  size_t na = off + (ta ? k : m) * lda, nb = off + (tb ? n : k) * ldb, nc = off + m * ldc;
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *r = malloc(nc * 4);
  cl_mem da = NULL, db = NULL, dc = NULL;
  unsigned seed = (unsigned)(m * 131 + n * 17 + k);
  if (!a || !b || !c || !r) { rc = CLT_ENOMEM; goto done; }
  ref_random(a, na, seed);
  ref_random(b, nb, seed + 1);
  ref_random(c, nc, seed + 2);
  memcpy(r, c, nc * 4);
  if ((rc = clt_buffer_create(ctx, na * 4, &da)) < 0 || (rc = clt_buffer_create(ctx, nb * 4, &db)) < 0 ||
      (rc = clt_buffer_create(ctx, nc * 4, &dc)) < 0)
    goto done;
  cl_command_queue q = clt_context_queue(ctx);
  cl_int e = clEnqueueWriteBuffer(q, da, CL_TRUE, 0, na * 4, a, 0, NULL, NULL);
  if (e == CL_SUCCESS) e = clEnqueueWriteBuffer(q, db, CL_TRUE, 0, nb * 4, b, 0, NULL, NULL);
  if (e == CL_SUCCESS) e = clEnqueueWriteBuffer(q, dc, CL_TRUE, 0, nc * 4, c, 0, NULL, NULL);
  if (e != CL_SUCCESS) {
    fprintf(stderr, "cltrain: bench: copying the operands of a %zux%zux%zu GEMM to the device failed (OpenCL error "
                    "%d)\n", m, n, k, (int)e);
    rc = CLT_ECL;
    goto done;
  }
  clt_matrix ma = {da, off, lda}, mb = {db, off, ldb}, mc = {dc, off, ldc};
  if ((rc = clt_sgemm(ctx, ta, tb, m, n, k, 0.75f, ma, mb, 0.5f, mc)) < 0) goto done;
  if (clEnqueueReadBuffer(q, dc, CL_TRUE, 0, nc * 4, c, 0, NULL, NULL) != CL_SUCCESS) { rc = CLT_ECL; goto done; }
  ref_sgemm(ta, tb, m, n, k, 0.75f, a + off, lda, b + off, ldb, 0.5f, r + off, ldc);
  *maxerr = ref_max_rel_error(c, r, nc);
done:
  clt_buffer_release(da);
  clt_buffer_release(db);
  clt_buffer_release(dc);
  free(a), free(b), free(c), free(r);
  return rc;
}

/* Elementwise and reduction kernels on n floats against plain C. */
static int check_kernels(clt_context *ctx, size_t n, double *maxerr) {
  int rc = CLT_OK;
  float *x = malloc(n * 4), *y = malloc(n * 4), *got = malloc(n * 4);
  cl_mem dx = NULL, dy = NULL;
  clt_tensor tx, ty;
  int64_t shape[1] = {(int64_t)n};
  if (!x || !y || !got) { rc = CLT_ENOMEM; goto done; }
  ref_random(x, n, 7);
  ref_random(y, n, 8);
  if ((rc = clt_buffer_create(ctx, n * 4, &dx)) < 0 || (rc = clt_buffer_create(ctx, n * 4, &dy)) < 0) goto done;
  if ((rc = clt_tensor_view(dx, 0, CLT_F32, 1, shape, &tx)) < 0 || (rc = clt_tensor_view(dy, 0, CLT_F32, 1, shape, &ty)) < 0)
    goto done;
  if ((rc = clt_tensor_upload(ctx, &tx, x, n * 4)) < 0 || (rc = clt_tensor_upload(ctx, &ty, y, n * 4)) < 0) goto done;
  if ((rc = clt_axpy(ctx, 2.5f, &tx, &ty)) < 0 || (rc = clt_mul(ctx, &tx, &ty, &ty)) < 0) goto done;
  if ((rc = clt_tensor_download(ctx, &ty, got, n * 4)) < 0) goto done;
  double want_sum = 0;
  float sum = 0;
  *maxerr = 0;
  for (size_t i = 0; i < n; i++) {
    float want = x[i] * (y[i] + 2.5f * x[i]);
    double e = fabs((double)got[i] - want) / (1.0 + fabs(want));
    if (e > *maxerr || e != e) *maxerr = e != e ? INFINITY : e;
    want_sum += got[i];
  }
  if ((rc = clt_sum(ctx, &ty, &sum)) < 0) goto done;
  double e = fabs(sum - want_sum) / (1.0 + fabs(want_sum)) / sqrt((double)n); /* relative to sqrt(n) growth */
  if (e > *maxerr || e != e) *maxerr = e != e ? INFINITY : e;
done:
  clt_buffer_release(dx);
  clt_buffer_release(dy);
  free(x), free(y), free(got);
  return rc;
}

static void help(FILE *to) {
  fprintf(to, "usage: cltrain bench gemm [OPTIONS]\n"
              "\n"
              "Checks SGEMM and the elementwise kernels against plain C on each selected\n"
              "device, then times square SGEMMs. Each device's rate is cached as its peak\n"
              "FLOP/s, the divisor of the MFU that training reports (in $CLT_PEAK_CACHE, else\n"
              "$XDG_CACHE_HOME/cltrain/peak-flops, else ~/.cache/cltrain/peak-flops).\n"
              "\n"
              "  -d, --devices SPEC   devices to run on (default: all; CLT_DEVICES when set)\n"
              "  -n, --size N         matrix size for the timing (default 512)\n"
              "  -i, --iters K        timed repetitions (default 10, after 2 warm-up runs)\n"
              "      --check-only     run the checks, skip the timing\n"
              "  -h, --help           this text\n");
}

static int bench_gemm(int argc, char **argv) {
  static const struct option opts[] = {{"devices", required_argument, 0, 'd'}, {"size", required_argument, 0, 'n'},
                                       {"iters", required_argument, 0, 'i'},   {"check-only", no_argument, 0, 'c'},
                                       {"help", no_argument, 0, 'h'},          {0}};
  const char *spec = NULL;
  long size = 512, iters = 10;
  int check_only = 0, c;
  char *end;
  while ((c = getopt_long(argc, argv, "d:n:i:h", opts, NULL)) != -1) {
    switch (c) {
    case 'd': spec = optarg; break;
    case 'n':
      size = strtol(optarg, &end, 10);
      if (*end || size < 1 || size > 65536) {
        fprintf(stderr, "cltrain bench gemm: --size must be a whole number from 1 to 65536, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      break;
    case 'i':
      iters = strtol(optarg, &end, 10);
      if (*end || iters < 1 || iters > 100000) {
        fprintf(stderr, "cltrain bench gemm: --iters must be a whole number from 1 to 100000, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      break;
    case 'c': check_only = 1; break;
    case 'h': help(stdout); return CLI_EXIT_OK;
    default: help(stderr); return CLI_EXIT_USAGE;
    }
  }
  clt_devices *all = NULL, *sel = NULL;
  int ec = cli_select_devices(spec, &all, &sel);
  if (ec != CLI_EXIT_OK) goto out;

  static const size_t shapes[][4] = {{1, 1, 1, 0}, {17, 33, 9, 5}, {64, 48, 80, 0}, {129, 65, 257, 11}};
  printf("%-32s %-8s %-10s %10s %12s\n", "device", "check", "max-error", "size", "GFLOP/s");
  for (int d = 0; d < clt_devices_count(sel) && ec == CLI_EXIT_OK; d++) {
    const clt_device_info *info = clt_devices_info(sel, d);
    clt_context *ctx = NULL;
    int rc = clt_context_create(sel, d, &ctx);
    double worst = 0, err = 0;
    for (size_t s = 0; rc == CLT_OK && s < sizeof shapes / sizeof shapes[0]; s++)
      for (int t = 0; rc == CLT_OK && t < 4; t++) {
        rc = check_gemm_case(ctx, t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], &err);
        if (err > worst) worst = err;
      }
    if (rc == CLT_OK) rc = check_kernels(ctx, 100003, &err);
    if (err > worst) worst = err;
    if (rc < 0) {
      ec = cli_fail(rc, info->name);
      clt_context_destroy(ctx);
      break;
    }
    /* 1e-4: float32 sums over k <= 257 terms of size <= 1 stay far below it;
     * an indexing bug gives errors of order 1. */
    int ok = worst < 1e-4;
    printf("%-32.32s %-8s %-10.2e", info->name, ok ? "ok" : "WRONG", worst);
    if (!ok) ec = CLI_EXIT_CHECK;
    if (ok && !check_only) {
      size_t n = (size_t)size, bytes = n * n * 4;
      cl_mem a = NULL, b = NULL, cm = NULL;
      if ((rc = clt_buffer_create(ctx, bytes, &a)) == 0 && (rc = clt_buffer_create(ctx, bytes, &b)) == 0 &&
          (rc = clt_buffer_create(ctx, bytes, &cm)) == 0) {
        clt_matrix ma = {a, 0, n}, mb = {b, 0, n}, mc = {cm, 0, n};
        double t0 = 0;
        for (long it = 0; rc == 0 && it < iters + 2; it++) {
          if (it == 2) {
            clt_context_finish(ctx);
            t0 = now();
          }
          rc = clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, n, n, n, 1.0f, ma, mb, 0.0f, mc);
        }
        if (rc == 0) rc = clt_context_finish(ctx);
        double dt = now() - t0;
        double rate = 2.0 * n * n * n * iters / dt;
        if (rc == 0) printf(" %10zu %12.1f", n, rate / 1e9);
        /* MFU's divisor from now on (a cache that cannot be written only loses that) */
        if (rc == 0 && clt_device_peak_flops_save(info, rate) < 0)
          fprintf(stderr, "\ncltrain bench gemm: the rate is not cached: %s\n", clt_last_error());
      }
      clt_buffer_release(a);
      clt_buffer_release(b);
      clt_buffer_release(cm);
      if (rc < 0) {
        printf("\n");
        ec = cli_fail(rc, info->name);
      }
    }
    printf("\n");
    clt_context_destroy(ctx);
  }
out:
  clt_devices_destroy(sel);
  clt_devices_destroy(all);
  return ec;
}

int cmd_bench(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "gemm") == 0) return bench_gemm(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "allreduce") == 0) return cmd_bench_allreduce(argc - 1, argv + 1);
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: cltrain bench gemm|allreduce [OPTIONS]   (see 'cltrain bench gemm --help')\n");
    return CLI_EXIT_OK;
  }
  fprintf(stderr, "usage: cltrain bench gemm|allreduce [OPTIONS]%s%s%s\n",
          argc >= 2 ? "\ncltrain bench: unknown benchmark '" : "", argc >= 2 ? argv[1] : "", argc >= 2 ? "'" : "");
  return CLI_EXIT_USAGE;
}
