/*
 * cmd_bench_allreduce.c: `cltrain bench allreduce`, run under mpirun. For
 * float32 (or, with --dtype f16, fp16) sums of sizes doubling from
 * --min-bytes to --max-bytes it times
 * cltrain's all-reduce on host buffers, on device buffers (staging
 * included) and MPI_Allreduce, in the same run on the same data, and prints
 * the p50 time, algbw = bytes / time and busbw = algbw * 2 (N - 1) / N (the
 * nccl-tests definitions: busbw is what each link carries, comparable
 * across rank counts), and cltrain's speed relative to MPI_Allreduce
 * (MPI's time / cltrain's: above 1 means cltrain is faster). MPI has no
 * fp16 type: with --dtype f16 the MPI column is MPI_Allreduce of float32
 * data of the same element count, which is what fp16 gradients replace.
 *
 * Each iteration starts from the same input after a barrier; its time is
 * the slowest rank's. Host and MPI runs alternate; device runs are timed
 * in a pass of their own (see run_methods). The inputs are small integers, so every sum is exact
 * and every iteration's result is compared bit for bit with the expected
 * one: a wrong result is exit code 4. --fit (the cost model measured) is
 * cmd_bench_fit.c.
 */
#include "config.h"

#include <getopt.h>
#include <stdint.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain/opencl.h>
#ifdef HAVE_MPI
#  include <cltrain/mpi.h>
#endif

#include "cli.h"

enum { M_HOST, M_DEVICE, M_MPI, M_COUNT };
static const char *const method_keys[M_COUNT] = {"host", "device", "mpi"};

typedef struct bench_opts {
  size_t min_bytes, max_bytes, chunk_bytes;
  clt_dtype dtype;
  long warmup, iters;
  int json, no_device;
  const char *devices;
  const char *algorithms; /* comma-separated, as CLT_ALLREDUCE */
  const char *fit;        /* --fit FILE */
} bench_opts;

typedef struct result {
  int ran, wrong;
  double p50; /* seconds */
} result;

/* What one plan did besides its times. */
typedef struct plan_info {
  char algorithm[32];
  double model_s;             /* the cost model's prediction */
  uint64_t sent_intra, sent_inter; /* bytes the busiest rank sent in one run */
} plan_info;

static void help(FILE *to) {
  char algorithms[512], text[256];
  snprintf(text, sizeof text, "all-reduce algorithms to time, comma-separated: %s (auto: the cost model's "
           "choice; default: auto, or CLT_ALLREDUCE)", clt_allreduce_algorithms());
  fprintf(to,
          "usage: mpirun -np N cltrain bench allreduce [OPTIONS]\n"
          "\n"
          "Times cltrain's all-reduce (sum) on host buffers and on device buffers (staging\n"
          "included) against MPI_Allreduce, for sizes doubling from --min-bytes to\n"
          "--max-bytes. Every result is checked; a wrong one is exit code 4.\n"
          "\n"
          "  -d, --devices SPEC     devices for the device buffers; each rank takes the one\n"
          "                         matching its local rank (default: CLT_DEVICES, else all)\n"
          "      --no-device        skip the device-buffer measurement\n"
          "      --min-bytes N      smallest message (default 4; K, M, G suffixes allowed)\n"
          "      --max-bytes N      largest message (default 256M)\n"
          "      --warmup K         untimed runs per size and method (default 3)\n"
          "  -i, --iters K          timed runs per size and method (default 20)\n"
          "  -t, --dtype f32|f16    element type (default f32); sizes are bytes of it. MPI has\n"
          "                         no fp16 type: with f16 the MPI column sums float32 data\n"
          "                         of the same element count (twice the bytes)\n"
          "      --chunk N          bytes per pipelined message (default: CLT_ALLREDUCE_CHUNK,\n"
          "                         else 256K, or 1M with 2 ranks)\n"
          "%s"
          "      --fit FILE         measure the cost model instead (ping-pong inside and\n"
          "                         between nodes, the reduction's speed; on one node shm's\n"
          "                         all-reduce from 64K to 64M, in pieces of --chunk),\n"
          "                         write it to FILE for CLT_COMM_MODEL=FILE, and print it\n"
          "      --json             one JSON document on stdout instead of the table\n"
          "  -h, --help             this text\n"
          "\n"
          "busbw = algbw * 2(N-1)/N as in nccl-tests; x MPI = MPI's time / cltrain's;\n"
          "model us = the cost model's time; intra, inter = bytes the busiest rank sent\n"
          "inside its node and to other nodes in one host all-reduce. Nodes are the ranks\n"
          "sharing memory, or CLT_NODE_SIZE's pretend ones.\n",
          cli_help_entry(algorithms, sizeof algorithms, "  -a, --algorithm LIST   ", text, 83));
}

/* "4", "64K", "256M", "1G" (binary multiples) into bytes; 0 on junk. */
static size_t parse_size(const char *text) {
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  unsigned long long mult = 1;
  if (end == text || text[0] == '-') return 0;
  if (*end == 'K' || *end == 'k') mult = 1ull << 10, end++;
  else if (*end == 'M' || *end == 'm') mult = 1ull << 20, end++;
  else if (*end == 'G' || *end == 'g') mult = 1ull << 30, end++;
  if (*end == 'i' && mult > 1) end++;
  if (*end == 'B' && end[1] == '\0') end++;
  if (*end || v > (1ull << 40) / mult) return 0;
  return (size_t)(v * mult);
}

static int parse_opts(int argc, char **argv, bench_opts *o) {
  static const struct option opts[] = {
      {"devices", required_argument, 0, 'd'}, {"no-device", no_argument, 0, 'D'},
      {"min-bytes", required_argument, 0, 'm'}, {"max-bytes", required_argument, 0, 'M'},
      {"warmup", required_argument, 0, 'w'},  {"iters", required_argument, 0, 'i'},
      {"chunk", required_argument, 0, 'c'},   {"json", no_argument, 0, 'j'},
      {"dtype", required_argument, 0, 't'},   {"help", no_argument, 0, 'h'},
      {"algorithm", required_argument, 0, 'a'}, {"fit", required_argument, 0, 'F'},
      {0}};
  int c;
  char *end;
  *o = (bench_opts){.min_bytes = 4, .max_bytes = (size_t)256 << 20, .warmup = 3, .iters = 20, .dtype = CLT_F32};
  while ((c = cli_getopt(argc, argv, "a:d:i:t:h", opts, "bench allreduce")) != -1) {
    switch (c) {
    case 'd': o->devices = optarg; break;
    case 'a': {
      char list[256];
      snprintf(list, sizeof list, "%s", optarg);
      for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save))
        if (!cli_allreduce_known(a)) {
          fprintf(stderr, "cltrain: bench allreduce: --algorithm: '%s' is not one of %s\n", a,
                  clt_allreduce_algorithms());
          return CLI_EXIT_USAGE;
        }
      if (!*optarg || strlen(optarg) >= sizeof list) {
        fprintf(stderr, "cltrain: bench allreduce: --algorithm needs a list such as ring,twolevel\n");
        return CLI_EXIT_USAGE;
      }
      o->algorithms = optarg;
      break;
    }
    case 'F':
      if (!*optarg) {
        fprintf(stderr, "cltrain: bench allreduce: --fit needs a file name\n");
        return CLI_EXIT_USAGE;
      }
      o->fit = optarg;
      break;
    case 't':
      if (strcmp(optarg, "f32") != 0 && strcmp(optarg, "f16") != 0) {
        fprintf(stderr, "cltrain: bench allreduce: --dtype must be f32 or f16, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      o->dtype = optarg[1] == '1' ? CLT_F16 : CLT_F32;
      break;
    case 'D': o->no_device = 1; break;
    case 'm':
    case 'M':
    case 'c': {
      size_t v = parse_size(optarg);
      const char *name = c == 'm' ? "--min-bytes" : c == 'M' ? "--max-bytes" : "--chunk";
      if (v == 0 || (c != 'c' && (v % 2 || v > ((size_t)4 << 30)))) {
        fprintf(stderr, "cltrain: bench allreduce: %s must be %s, not '%s'\n", name,
                c == 'c' ? "a positive size such as 256K or 1M" : "a multiple of the element size up to 4G", optarg);
        return CLI_EXIT_USAGE;
      }
      *(c == 'm' ? &o->min_bytes : c == 'M' ? &o->max_bytes : &o->chunk_bytes) = v;
      break;
    }
    case 'w':
    case 'i': {
      long v = strtol(optarg, &end, 10);
      if (*end || v < (c == 'w' ? 0 : 1) || v > 100000) {
        fprintf(stderr, "cltrain: bench allreduce: --%s must be a whole number from %d to 100000, not '%s'\n",
                c == 'w' ? "warmup" : "iters", c == 'w' ? 0 : 1, optarg);
        return CLI_EXIT_USAGE;
      }
      *(c == 'w' ? &o->warmup : &o->iters) = v;
      break;
    }
    case 'j': o->json = 1; break;
    case 'h': help(stdout); return -1;
    default: return CLI_EXIT_USAGE;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "cltrain: bench allreduce: unexpected argument '%s'\n", argv[optind]);
    return CLI_EXIT_USAGE;
  }
  size_t esize = clt_dtype_size(o->dtype);
  if (o->min_bytes % esize || o->max_bytes % esize) {
    fprintf(stderr, "cltrain: bench allreduce: --min-bytes and --max-bytes must be multiples of %zu bytes (%s)\n", esize,
            clt_dtype_name(o->dtype));
    return CLI_EXIT_USAGE;
  }
  if (o->min_bytes > o->max_bytes) {
    fprintf(stderr, "cltrain: bench allreduce: --min-bytes is larger than --max-bytes\n");
    return CLI_EXIT_USAGE;
  }
  return CLI_EXIT_OK;
}

/* ---- the pieces of one measurement -------------------------------------- */

/* Small integers: every sum of them is exact in float32, in any order,
 * and in fp16 up to 2048 (136 ranks). */
static int input_value(size_t i, int rank) { return (int)((i * 7 + (size_t)rank * 13) % 31) - 15; }

/* An integer of magnitude below 2048 as IEEE binary16 (exact). */
static uint16_t half_of_int(int v) {
  uint16_t sign = v < 0 ? 0x8000 : 0;
  unsigned a = (unsigned)(v < 0 ? -v : v), e = 0;
  if (a == 0) return sign;
  while (a >> (e + 1)) e++;
  return (uint16_t)(sign | (e + 15) << 10 | ((a << (10 - e)) & 0x3ff));
}

/* Element i of an all-reduce buffer of dtype. */
static void store_int(void *x, clt_dtype dtype, size_t i, int v) {
  if (dtype == CLT_F16)
    ((uint16_t *)x)[i] = half_of_int(v);
  else
    ((float *)x)[i] = (float)v;
}

static void barrier(void) {
#ifdef HAVE_MPI
  MPI_Barrier(MPI_COMM_WORLD);
#endif
}

int cli_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double cli_p50_over_ranks(double *times, long n) {
#ifdef HAVE_MPI
  MPI_Allreduce(MPI_IN_PLACE, times, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#endif
  qsort(times, (size_t)n, sizeof *times, cli_cmp_double);
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

/* Everything one size needs. */
typedef struct bench_ctx {
  clt_comm *comm;
  clt_context *ctx; /* NULL: no device measurement */
  const bench_opts *o;
  size_t count, bytes; /* bytes of the dtype */
  unsigned char *in, *buf, *expected;
  float *mpi_in, *mpi_buf, *mpi_expected; /* float32 for MPI: the same arrays as in, buf, expected for f32 */
  cl_mem dbuf;
  double *times;
} bench_ctx;

/* Bytes a method moves per all-reduce. */
static size_t method_bytes(const bench_ctx *b, int method) {
  return method == M_MPI ? b->count * sizeof(float) : b->bytes;
}

/* One run of one method from the input, checked. Returns a library status
 * (< 0) or 0; *dt gets the time of the operation alone. */
static int run_once(bench_ctx *b, int method, clt_allreduce_plan *plan, double *dt, int *wrong) {
  int rc = CLT_OK;
  cl_command_queue q = b->ctx ? clt_context_queue(b->ctx) : NULL;
  if (method == M_DEVICE) {
    if (b->bytes && clEnqueueWriteBuffer(q, b->dbuf, CL_TRUE, 0, b->bytes, b->in, 0, NULL, NULL) != CL_SUCCESS)
      return CLT_ECL;
  } else if (method == M_MPI) {
    memcpy(b->mpi_buf, b->mpi_in, method_bytes(b, M_MPI));
  } else {
    memcpy(b->buf, b->in, b->bytes);
  }
  barrier();
  double t0 = cli_now();
  if (method == M_HOST) {
    rc = clt_allreduce_run(plan, b->buf);
  } else if (method == M_DEVICE) {
    rc = clt_allreduce_run_device(plan, q, b->dbuf, 0);
  } else {
#ifdef HAVE_MPI
    if (MPI_Allreduce(MPI_IN_PLACE, b->mpi_buf, (int)b->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
      rc = CLT_EMPI;
#endif
  }
  *dt = cli_now() - t0;
  if (rc < 0) return rc;
  if (method == M_DEVICE && b->bytes &&
      clEnqueueReadBuffer(q, b->dbuf, CL_TRUE, 0, b->bytes, b->buf, 0, NULL, NULL) != CL_SUCCESS)
    return CLT_ECL;
  if (method == M_MPI ? memcmp(b->mpi_buf, b->mpi_expected, method_bytes(b, M_MPI)) != 0
                      : memcmp(b->buf, b->expected, b->bytes) != 0)
    (*wrong)++;
  return CLT_OK;
}

/* The methods of one pass, in the order of iteration it. */
static int pass_method(int pass, long it, int k) {
  if (pass == 1) return M_DEVICE;
  return (it + k) % 2 ? M_MPI : M_HOST;
}

/* Warm-up and timed runs. Host and MPI runs alternate, each going first
 * every other iteration, so whatever else the machine does hits both
 * alike. Device runs come in a pass of their own: the OpenCL runtime's
 * threads, woken by the copies, were seen to slow whichever collective ran
 * two places after a device run, by 2 to 3 times at small sizes.
 * On failure *failed is the method. */
static int run_methods(bench_ctx *b, clt_allreduce_plan *plan, result *res, int *failed) {
  long total = b->o->warmup + b->o->iters;
  int rc;
  res[M_HOST].ran = 1;
  res[M_DEVICE].ran = b->ctx != NULL;
#ifdef HAVE_MPI
  res[M_MPI].ran = 1;
#endif
  for (int pass = 0; pass < 2; pass++)
    for (long it = 0; it < total; it++)
      for (int k = 0; k < (pass == 0 ? 2 : 1); k++) {
        int m = pass_method(pass, it, k);
        double dt = 0;
        if (!res[m].ran) continue;
        if ((rc = run_once(b, m, plan, &dt, &res[m].wrong)) < 0) {
          *failed = m;
          return rc;
        }
        if (it >= b->o->warmup) b->times[(size_t)m * (size_t)b->o->iters + (size_t)(it - b->o->warmup)] = dt;
      }
  for (int m = 0; m < M_COUNT; m++) {
    if (!res[m].ran) continue;
    res[m].p50 = cli_p50_over_ranks(b->times + (size_t)m * (size_t)b->o->iters, b->o->iters);
#ifdef HAVE_MPI
    MPI_Allreduce(MPI_IN_PLACE, &res[m].wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
#endif
  }
  return CLT_OK;
}

static double busbw_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 1.0; }

static void print_header(const bench_opts *o, int n, const char *device, size_t chunk) {
  printf("# cltrain bench allreduce: %d rank%s, %s sum, p50 of %ld iterations after %ld warm-up, chunk %zu B\n",
         n, n == 1 ? "" : "s", o->dtype == CLT_F16 ? "fp16" : "float32", o->iters, o->warmup, chunk);
  if (o->dtype == CLT_F16)
    printf("# bytes are fp16 bytes; MPI_Allreduce sums float32 data of the same element count (twice the bytes)\n");
  printf("# device buffers: %s; times in us, bandwidths in GB/s; x MPI = MPI time / cltrain time\n",
         device ? device : "skipped");
  printf("%10s %-21s | %9s %8s %8s | %9s %8s %8s | %9s %8s %8s | %6s %6s | %9s %11s %11s\n", "bytes", "algorithm",
         "host us", "algbw", "busbw", "device us", "algbw", "busbw", "MPI us", "algbw", "busbw", "host", "device",
         "model us", "intra B", "inter B");
  printf("%10s %-21s | %9s %8s %8s | %9s %8s %8s | %9s %8s %8s | %6s %6s | %9s %11s %11s\n", "", "", "", "", "", "", "",
         "", "", "", "", "x MPI", "x MPI", "", "", "");
}

static void print_row(const bench_ctx *b, int n, const result *r, const plan_info *pi) {
  printf("%10zu %-21s |", b->bytes, pi->algorithm);
  for (int m = 0; m < M_COUNT; m++) {
    size_t bytes = method_bytes(b, m);
    if (!r[m].ran)
      printf(" %9s %8s %8s |", "-", "-", "-");
    else if (r[m].wrong)
      printf(" %9s %8s %8s |", "WRONG", "", "");
    else {
      double algbw = r[m].p50 > 0 ? bytes / r[m].p50 / 1e9 : 0;
      printf(" %9.1f %8.3f %8.3f |", r[m].p50 * 1e6, algbw, algbw * busbw_factor(n));
    }
  }
  for (int m = M_HOST; m <= M_DEVICE; m++) {
    if (r[m].ran && r[M_MPI].ran && r[m].p50 > 0)
      printf(" %6.2f", r[M_MPI].p50 / r[m].p50);
    else
      printf(" %6s", "-");
  }
  printf(" | %9.1f %11llu %11llu\n", pi->model_s * 1e6, (unsigned long long)pi->sent_intra,
         (unsigned long long)pi->sent_inter);
  fflush(stdout);
}

static json_t *json_row(const bench_ctx *b, int n, const result *r, const plan_info *pi) {
  json_t *row = json_pack("{s:I, s:I, s:s, s:f, s:I, s:I}", "bytes", (json_int_t)b->bytes, "count",
                          (json_int_t)b->count, "algorithm", pi->algorithm, "model_us", pi->model_s * 1e6,
                          "sent_intra_bytes", (json_int_t)pi->sent_intra, "sent_inter_bytes",
                          (json_int_t)pi->sent_inter);
  for (int m = 0; m < M_COUNT; m++) {
    if (!r[m].ran) continue;
    size_t bytes = method_bytes(b, m);
    double algbw = r[m].p50 > 0 ? bytes / r[m].p50 / 1e9 : 0;
    json_object_set_new(row, method_keys[m],
                        json_pack("{s:f, s:f, s:f, s:b}", "p50_us", r[m].p50 * 1e6, "algbw_GBps", algbw,
                                  "busbw_GBps", algbw * busbw_factor(n), "correct", !r[m].wrong));
  }
  if (r[M_MPI].ran) {
    if (r[M_HOST].p50 > 0) json_object_set_new(row, "host_x_mpi", json_real(r[M_MPI].p50 / r[M_HOST].p50));
    if (r[M_DEVICE].ran && r[M_DEVICE].p50 > 0)
      json_object_set_new(row, "device_x_mpi", json_real(r[M_MPI].p50 / r[M_DEVICE].p50));
  }
  return row;
}

/* The device this rank uses, or NULL (with *ctx NULL) when none exists. */
static int open_device(clt_comm *comm, const bench_opts *o, clt_devices **all, clt_devices **sel,
                       clt_context **ctx) {
  int rc = clt_devices_discover(all);
  *ctx = NULL;
  if (rc == CLT_ENOICD || (rc == CLT_OK && clt_devices_count(*all) == 0)) return CLT_OK;
  if (rc < 0) return rc;
  if ((rc = clt_devices_select(*all, o->devices, sel)) < 0) return rc;
  int d = clt_comm_default_device(comm, *sel);
  if (d < 0) return d;
  return clt_context_create(*sel, d, ctx);
}

/* The host buffers of the largest size, and the times of every method;
 * MPI's float32 arrays are the dtype's own for f32. */
static int alloc_buffers(bench_ctx *b) {
  const bench_opts *o = b->o;
  size_t max_count = o->max_bytes / clt_dtype_size(o->dtype);
  b->in = malloc(o->max_bytes);
  b->buf = malloc(o->max_bytes);
  b->expected = malloc(o->max_bytes);
  b->times = calloc((size_t)M_COUNT * (size_t)o->iters, sizeof *b->times);
  if (o->dtype == CLT_F32) {
    b->mpi_in = (float *)b->in, b->mpi_buf = (float *)b->buf, b->mpi_expected = (float *)b->expected;
  } else {
    b->mpi_in = malloc(max_count * sizeof(float));
    b->mpi_buf = malloc(max_count * sizeof(float));
    b->mpi_expected = malloc(max_count * sizeof(float));
  }
  if (!b->in || !b->buf || !b->expected || !b->times || !b->mpi_in || !b->mpi_buf || !b->mpi_expected)
    return CLT_ENOMEM;
  return CLT_OK;
}

static void free_buffers(bench_ctx *b) {
  if (b->o->dtype != CLT_F32) free(b->mpi_in), free(b->mpi_buf), free(b->mpi_expected);
  free(b->in), free(b->buf), free(b->expected), free(b->times);
}

/* This rank's input of one size and the sum every rank expects. */
static void set_size(bench_ctx *b, size_t bytes, int n, int rank) {
  b->bytes = bytes;
  b->count = bytes / clt_dtype_size(b->o->dtype);
  for (size_t i = 0; i < b->count; i++) {
    int sum = 0;
    for (int k = 0; k < n; k++) sum += input_value(i, k);
    store_int(b->in, b->o->dtype, i, input_value(i, rank));
    store_int(b->expected, b->o->dtype, i, sum);
    store_int(b->mpi_in, CLT_F32, i, input_value(i, rank));
    store_int(b->mpi_expected, CLT_F32, i, sum);
  }
}

/* One more host run, counting what this rank sends inside its node and
 * to other nodes; the busiest rank's bytes into pi. */
static int count_bytes_sent(bench_ctx *b, clt_allreduce_plan *plan, result *r, plan_info *pi) {
  uint64_t s0[2], s1[2];
  double dt;
  int rc;
  clt_comm_bytes_sent(b->comm, &s0[0], &s0[1]);
  if ((rc = run_once(b, M_HOST, plan, &dt, &r[M_HOST].wrong)) < 0) return rc;
  clt_comm_bytes_sent(b->comm, &s1[0], &s1[1]);
  uint64_t sent[2] = {s1[0] - s0[0], s1[1] - s0[1]};
#ifdef HAVE_MPI
  MPI_Allreduce(MPI_IN_PLACE, sent, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
#endif
  pi->sent_intra = sent[0], pi->sent_inter = sent[1];
  return CLT_OK;
}

/* One size with one algorithm: its plan, every method's times, the bytes
 * sent and the cost model's prediction, as a row of the table or the JSON
 * (rank 0). Returns an exit code; a wrong result only sets *wrong. */
static int bench_algorithm(bench_ctx *b, const char *a, int n, int rank, json_t *rows, int *wrong) {
  clt_comm *comm = b->comm;
  clt_allreduce_plan *plan = NULL;
  result r[M_COUNT] = {{0}};
  plan_info pi;
  int rc;
  memset(&pi, 0, sizeof pi);
  clt_allreduce_opts popts = {.chunk_bytes = b->o->chunk_bytes};
  if ((rc = clt_comm_set_allreduce(comm, a)) < 0) return cli_comm_fail(comm, rc, "choosing the algorithm");
  if ((rc = clt_allreduce_plan_create(comm, b->count, b->o->dtype, CLT_SUM, &popts, &plan)) < 0)
    return cli_comm_fail(comm, rc, "making the all-reduce plan");
  int failed = 0;
  if ((rc = run_methods(b, plan, r, &failed)) < 0) {
    static const char *const what[M_COUNT] = {"all-reduce (host)", "all-reduce (device)", "MPI_Allreduce"};
    return cli_comm_fail(comm, rc, what[failed]);
  }
  if ((rc = count_bytes_sent(b, plan, r, &pi)) < 0) return cli_comm_fail(comm, rc, "all-reduce (host)");
  snprintf(pi.algorithm, sizeof pi.algorithm, "%s", clt_allreduce_plan_algorithm(plan));
  if (clt_comm_model_predict(comm, strcmp(pi.algorithm, "local") ? pi.algorithm : "ring", b->bytes, &pi.model_s) < 0)
    pi.model_s = 0;
  clt_allreduce_plan_destroy(plan);
  for (int m = 0; m < M_COUNT; m++) *wrong |= r[m].wrong != 0;
  if (rank == 0 && rows) json_array_append_new(rows, json_row(b, n, r, &pi));
  if (rank == 0 && !rows) print_row(b, n, r, &pi);
  return CLI_EXIT_OK;
}

/* The JSON document of every row (rank 0), or the rows let go. */
static void print_json(const bench_ctx *b, int n, int rank, size_t chunk, json_t *rows) {
  const bench_opts *o = b->o;
  if (rank == 0 && rows) {
    json_t *doc = json_pack("{s:i, s:i, s:s, s:s, s:I, s:i, s:i, s:s?, s:o}", "ranks", n, "nodes",
                            clt_comm_node_count(b->comm), "dtype", clt_dtype_name(o->dtype), "op", "sum",
                            "chunk_bytes", (json_int_t)chunk, "warmup", (int)o->warmup, "iters", (int)o->iters,
                            "device", b->ctx ? clt_context_device(b->ctx)->name : NULL, "results", rows);
    json_dumpf(doc, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(doc);
  } else if (rows) {
    json_decref(rows);
  }
}

static int bench_allreduce(const bench_opts *o) {
  clt_comm *comm = NULL;
  clt_devices *all = NULL, *sel = NULL;
  bench_ctx b = {.o = o};
  json_t *rows = o->json ? json_array() : NULL;
  int rc, ec = CLI_EXIT_OK, wrong = 0;

  if ((rc = cli_comm_create(&comm)) < 0) return cli_comm_fail(NULL, rc, "making the communicator");
  int n = clt_comm_size(comm), rank = clt_comm_rank(comm);
  if (!o->no_device && (rc = open_device(comm, o, &all, &sel, &b.ctx)) < 0)
    return cli_comm_fail(comm, rc, "choosing the device");
  b.comm = comm;
  size_t chunk = o->chunk_bytes ? o->chunk_bytes : clt_comm_chunk_bytes(comm);
  if (alloc_buffers(&b) < 0) return cli_comm_fail(comm, CLT_ENOMEM, "allocating buffers");
  if (b.ctx && (rc = clt_buffer_create(b.ctx, o->max_bytes, &b.dbuf)) < 0)
    return cli_comm_fail(comm, rc, "allocating the device buffer");
  if (rank == 0 && !o->json) {
    print_header(o, n, b.ctx ? clt_context_device(b.ctx)->name : NULL, chunk);
    printf("# %d node%s, %d rank%s on rank 0's\n", clt_comm_node_count(comm), clt_comm_node_count(comm) == 1 ? "" : "s",
           clt_comm_local_size(comm), clt_comm_local_size(comm) == 1 ? "" : "s");
  }

  const char *algorithms = o->algorithms ? o->algorithms : getenv("CLT_ALLREDUCE") && *getenv("CLT_ALLREDUCE")
                                                              ? getenv("CLT_ALLREDUCE") : "auto";
  for (size_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 2) {
    set_size(&b, bytes, n, rank);
    char list[256];
    snprintf(list, sizeof list, "%s", algorithms);
    for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save))
      if ((ec = bench_algorithm(&b, a, n, rank, rows, &wrong)) != CLI_EXIT_OK) return ec;
    if (bytes > o->max_bytes / 2) break;
  }

  print_json(&b, n, rank, chunk, rows);
  if (wrong) {
    if (rank == 0) fprintf(stderr, "cltrain: bench allreduce: WRONG results (see the table)\n");
    ec = CLI_EXIT_CHECK;
  }
  clt_buffer_release(b.dbuf);
  clt_context_destroy(b.ctx);
  clt_devices_destroy(sel);
  clt_devices_destroy(all);
  clt_comm_destroy(comm);
  free_buffers(&b);
  return ec;
}

int cmd_bench_allreduce(int argc, char **argv) {
  bench_opts o;
  int ec = parse_opts(argc, argv, &o);
  if (ec != CLI_EXIT_OK) return ec < 0 ? CLI_EXIT_OK : ec;
  if ((ec = cli_mpi_init(&argc, &argv)) != CLI_EXIT_OK) return ec;
  ec = o.fit ? cli_bench_fit(o.fit, o.chunk_bytes) : bench_allreduce(&o);
  cli_mpi_finalize();
  return ec;
}
