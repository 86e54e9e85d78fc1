/*
 * gemm_tune.c: a small tuner for CLBlast's SGEMM kernels on one OpenCL
 * device, measured on the GEMM shapes that training the Fashion-MNIST
 * models (examples/fashion_cnn.model, fashion_mlp.model) runs at batch 64.
 *
 * CLBlast ships tuned parameters for many GPUs but none for PoCL's CPU
 * device, where it falls back to GPU-style defaults (16x16 work-groups that
 * stage tiles in local memory, which PoCL emulates in global memory). This
 * program tries candidate parameter sets through CLBlastOverrideParameters,
 * checks each against a plain-C GEMM (all four transpose cases, odd shapes),
 * times every shape, and prints the best set in the form src/core/blas.c's table
 * takes. It is a benchmark, not a test: the numbers move with machine load,
 * so rerun the winners (--only) before trusting a ranking.
 *
 *   bench/gemm_tune [--device SUBSTR] [--kernel xgemm|direct|both]
 *                   [--candidates N] [--seed S] [--reps R] [--shapes I,J,...]
 *                   [--only "NAME=V NAME=V ..." [--climb]]
 *
 * --shapes times only the listed shapes (indices into the table below):
 * CLBlast sends small GEMMs to its direct kernel and large ones to the
 * indirect one, so each is best tuned on the shapes it will serve.
 * --climb starts from --only and changes one parameter at a time, keeping
 * what lowers the total, until a whole round finds nothing better.
 *
 * Candidates are random draws (seeded) from the parameter space below that
 * satisfy the kernels' divisibility constraints; xgemm candidates are timed
 * with CLBlast forced onto its indirect path, direct candidates on the
 * direct path. The default parameters (no override) are timed first on both
 * paths, so every line can be compared with what CLBlast does untuned.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <clblast_c.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ref/ref.h"

typedef struct shape {
  const char *what;
  int ta, tb;
  size_t m, n, k;
} shape;

/* The row-major calls src/nn/conv.c and linear.c make per training step
 * at batch 64 (conv1's dx is never computed: it is the first layer). */
static const shape shapes[] = {
    {"conv1 fwd", 0, 0, 32, 50176, 9},       {"conv1 dw", 0, 1, 32, 9, 50176},
    {"conv2 fwd", 0, 0, 64, 12544, 288},     {"conv2 dw", 0, 1, 64, 288, 12544},
    {"conv2 dx", 1, 0, 288, 12544, 64},      {"fc3136 fwd", 0, 1, 64, 128, 3136},
    {"fc3136 dw", 1, 0, 128, 3136, 64},      {"fc3136 dx", 0, 0, 64, 3136, 128},
    {"mlp784 fwd", 0, 1, 64, 256, 784},      {"mlp784 dw", 1, 0, 256, 784, 64},
    {"mlp256 fwd", 0, 1, 64, 128, 256},      {"mlp256 dw", 1, 0, 128, 256, 64},
    {"mlp256 dx", 0, 0, 64, 256, 128},
    /* other layouts conv2 could use (not in the default set, see --shapes) */
    {"conv2 dw as NN", 0, 0, 64, 288, 12544}, {"conv2 dx as colT TN", 1, 0, 12544, 288, 64},
    {"conv2 fwd as yT NT", 0, 1, 12544, 64, 288},  {"conv2 dwT as NN", 0, 0, 288, 64, 12544},
    {"conv2 dx as colT NN", 0, 0, 12544, 288, 64},
};
#define NDEFAULT 13 /* the shapes timed without --shapes */
#define NSHAPES (sizeof shapes / sizeof shapes[0])
static int use_shape[NSHAPES]; /* --shapes: which ones are timed (default all) */

#define MAXP 16
typedef struct params {
  const char *kernel; /* "Xgemm" or "XgemmDirect"; NULL: CLBlast's own */
  int n;
  const char *names[MAXP];
  size_t values[MAXP];
} params;

static const char *xgemm_names[] = {"GEMMK", "KREG", "KWG",   "KWI", "MDIMA", "MDIMC", "MWG", "NDIMB",
                                    "NDIMC", "NWG",  "SA",    "SB",  "STRM",  "STRN",  "VWM", "VWN"};


/* The values a hill climb (--climb) tries for each parameter. */
typedef struct choices {
  const char *name;
  size_t v[8];
} choices;
static const choices climb_space[] = {
    {"KWG", {8, 16, 32, 64}},  {"KWI", {1, 2, 4, 8}},       {"MDIMA", {2, 4, 8, 16, 32}},
    {"MDIMC", {2, 4, 8, 16, 32}}, {"MWG", {16, 32, 64, 128}}, {"NDIMB", {2, 4, 8, 16, 32}},
    {"NDIMC", {2, 4, 8, 16, 32}}, {"NWG", {16, 32, 64, 128}}, {"SA", {0, 1}},
    {"SB", {0, 1}},            {"STRM", {0, 1}},           {"STRN", {0, 1}},
    {"VWM", {1, 2, 4, 8, 16}}, {"VWN", {1, 2, 4, 8, 16}},  {"WGD", {8, 16, 32, 64, 128}},
    {"MDIMCD", {2, 4, 8, 16, 32}}, {"NDIMCD", {2, 4, 8, 16, 32}}, {"MDIMAD", {2, 4, 8, 16, 32}},
    {"NDIMBD", {2, 4, 8, 16, 32}}, {"KWID", {1, 2, 4, 8}},  {"VWMD", {1, 2, 4, 8, 16}},
    {"VWND", {1, 2, 4, 8, 16}},  {"PADA", {0, 1}},          {"PADB", {0, 1}},
};

static cl_context ctx;
static cl_command_queue queue;
static cl_device_id device;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of the process, all OpenCL worker threads together: on a
 * loaded machine it moves far less than wall-clock time, so candidates are
 * ranked by it (a candidate that left cores idle would hide here; compare
 * the winners' wall-clock times with the machine to itself). */
static double cpu(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static unsigned long long rng_state = 88172645463325252ULL;
static size_t pick(const size_t *v, size_t n) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return v[rng_state % n];
}
#define PICK(a) pick((a), sizeof(a) / sizeof((a)[0]))

static size_t get(const params *p, const char *name) {
  for (int i = 0; i < p->n; i++)
    if (strcmp(p->names[i], name) == 0) return p->values[i];
  return 0;
}

static void set(params *p, const char *name, size_t v) {
  for (int i = 0; i < p->n; i++)
    if (strcmp(p->names[i], name) == 0) { p->values[i] = v; return; }
  p->names[p->n] = name;
  p->values[p->n++] = v;
}

/* A random Xgemm (indirect) candidate within the kernel's constraints. */
static params random_xgemm(void) {
  static const size_t mwg[] = {16, 32, 64, 128}, nwg[] = {16, 32, 64, 128}, kwg[] = {8, 16, 32},
                      dim[] = {2, 4, 8, 16}, kwi[] = {1, 2, 8}, vw[] = {1, 2, 4, 8}, bit[] = {0, 1};
  for (;;) {
    params p = {"Xgemm", 0, {0}, {0}};
    for (int i = 0; i < 16; i++) set(&p, xgemm_names[i], 0);
    size_t MWG = PICK(mwg), NWG = PICK(nwg), KWG = PICK(kwg), MDIMC = PICK(dim), NDIMC = PICK(dim);
    size_t MDIMA = PICK(dim), NDIMB = PICK(dim), KWI = PICK(kwi), VWM = PICK(vw), VWN = PICK(vw);
    size_t SA = PICK(bit), SB = PICK(bit);
    if (!SA) MDIMA = MDIMC; /* unused without local memory: keep the space small */
    if (!SB) NDIMB = NDIMC;
    if (MWG % (MDIMC * VWM) || NWG % (NDIMC * VWN) || MWG % (MDIMA * VWM) || NWG % (NDIMB * VWN)) continue;
    if (KWG % KWI || (MDIMC * NDIMC) % MDIMA || (MDIMC * NDIMC) % NDIMB) continue;
    if (KWG % ((MDIMC * NDIMC) / MDIMA) || KWG % ((MDIMC * NDIMC) / NDIMB)) continue;
    if (MDIMC * NDIMC > 256 || (MWG / MDIMC) * (NWG / NDIMC) > 128) continue; /* registers per item */
    set(&p, "KREG", 1), set(&p, "KWG", KWG), set(&p, "KWI", KWI), set(&p, "MDIMA", MDIMA);
    set(&p, "MDIMC", MDIMC), set(&p, "MWG", MWG), set(&p, "NDIMB", NDIMB), set(&p, "NDIMC", NDIMC);
    set(&p, "NWG", NWG), set(&p, "SA", SA), set(&p, "SB", SB), set(&p, "STRM", PICK(bit));
    set(&p, "STRN", PICK(bit)), set(&p, "VWM", VWM), set(&p, "VWN", VWN);
    return p;
  }
}

/* A random XgemmDirect candidate within the kernel's constraints. */
static params random_direct(void) {
  static const size_t wgd[] = {8, 16, 32, 64}, dim[] = {2, 4, 8, 16, 32}, kwid[] = {1, 2, 8},
                      vw[] = {1, 2, 4, 8}, bit[] = {0, 1};
  for (;;) {
    params p = {"XgemmDirect", 0, {0}, {0}};
    size_t WGD = PICK(wgd), MDIMCD = PICK(dim), NDIMCD = PICK(dim), MDIMAD = PICK(dim), NDIMBD = PICK(dim);
    size_t KWID = PICK(kwid), VWMD = PICK(vw), VWND = PICK(vw);
    if (WGD % KWID || WGD % (MDIMCD * VWMD) || WGD % (NDIMCD * VWND) || WGD % (MDIMAD * VWMD) ||
        WGD % (NDIMBD * VWND))
      continue;
    if ((MDIMCD * NDIMCD) % MDIMAD || (MDIMCD * NDIMCD) % NDIMBD) continue;
    if (WGD % ((MDIMCD * NDIMCD) / MDIMAD) || WGD % ((MDIMCD * NDIMCD) / NDIMBD)) continue;
    if (MDIMCD * NDIMCD > 256 || (WGD / MDIMCD) * (WGD / NDIMCD) > 128) continue;
    set(&p, "KWID", KWID), set(&p, "MDIMAD", MDIMAD), set(&p, "MDIMCD", MDIMCD), set(&p, "NDIMBD", NDIMBD);
    set(&p, "NDIMCD", NDIMCD), set(&p, "PADA", PICK(bit)), set(&p, "PADB", PICK(bit)), set(&p, "VWMD", VWMD);
    set(&p, "VWND", VWND), set(&p, "WGD", WGD);
    return p;
  }
}

static void print_params(FILE *f, const params *p) {
  if (!p->kernel) { fprintf(f, "(CLBlast defaults)"); return; }
  fprintf(f, "%s", p->kernel);
  for (int i = 0; i < p->n; i++) fprintf(f, " %s=%zu", p->names[i], p->values[i]);
}

static int override(const char *kernel, int n, const char *const *names, const size_t *values) {
  CLBlastStatusCode s = CLBlastOverrideParameters(device, kernel, CLBlastPrecisionSingle, (size_t)n, (const char **)names, values);
  if (s != CLBlastSuccess) fprintf(stderr, "gemm_tune: overriding %s failed: CLBlast status %d\n", kernel, (int)s);
  return s == CLBlastSuccess ? 0 : -1;
}

/* Force CLBlast's choice between the direct and the indirect kernel. */
static int force_path(int direct) {
  const char *name = "XGEMM_MIN_INDIRECT_SIZE";
  size_t v = direct ? 100000 : 1;
  return override("GemmRoutine", 1, &name, &v);
}

static int sgemm(int ta, int tb, size_t m, size_t n, size_t k, cl_mem a, size_t lda, cl_mem b, size_t ldb, cl_mem c,
                 size_t ldc, size_t off) {
  CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor, ta ? CLBlastTransposeYes : CLBlastTransposeNo,
                                     tb ? CLBlastTransposeYes : CLBlastTransposeNo, m, n, k, 0.75f, a, off, lda, b,
                                     off, ldb, 0.5f, c, off, ldc, &queue, NULL);
  return s == CLBlastSuccess && clFinish(queue) == CL_SUCCESS ? 0 : (int)s ? (int)s : -1;
}

static cl_mem upload(const float *x, size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * 4, (void *)x, &err);
  return err == CL_SUCCESS ? m : NULL;
}

/* All four transpose cases on odd shapes with offsets and padded leading
 * dimensions against ref_sgemm. Tolerance: float32 accumulation over k
 * terms of size ~1 errs by about k * 2^-24 relative; 1e-4 leaves room. */
static int check(void) {
  static const size_t dims[][3] = {{37, 53, 29}, {70, 9, 131}};
  for (int d = 0; d < 2; d++)
    for (int t = 0; t < 4; t++) {
      int ta = t >> 1, tb = t & 1;
      size_t m = dims[d][0], n = dims[d][1], k = dims[d][2], off = 5;
      size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
      size_t na = off + (ta ? k : m) * lda, nb = off + (tb ? n : k) * ldb, nc = off + m * ldc;
      float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *r = malloc(nc * 4);
      ref_random(a, na, 1), ref_random(b, nb, 2), ref_random(c, nc, 3);
      memcpy(r, c, nc * 4);
      cl_mem da = upload(a, na), db = upload(b, nb), dc = upload(c, nc);
      int rc = sgemm(ta, tb, m, n, k, da, lda, db, ldb, dc, ldc, off);
      if (rc == 0) rc = clEnqueueReadBuffer(queue, dc, CL_TRUE, 0, nc * 4, c, 0, NULL, NULL);
      ref_sgemm(ta, tb, m, n, k, 0.75f, a + off, lda, b + off, ldb, 0.5f, r + off, ldc);
      double err = rc ? 1e30 : ref_max_rel_error(c, r, nc);
      clReleaseMemObject(da), clReleaseMemObject(db), clReleaseMemObject(dc);
      free(a), free(b), free(c), free(r);
      if (err > 1e-4) {
        fprintf(stderr, "  wrong: %c%c %zux%zux%zu: %s %g\n", ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k,
                rc ? "status" : "relative error", rc ? (double)rc : err);
        return -1;
      }
    }
  return 0;
}

static cl_mem bufs[NSHAPES][3];

/* Mean CPU milliseconds per call of every shape into ms[] (over reps
 * calls after one that compiles and warms up); the total. *wall gets the
 * sum of the best wall-clock times. */
static double wall_total;
static double time_shapes(int reps, double *ms) {
  double total = 0;
  wall_total = 0;
  for (size_t s = 0; s < NSHAPES; s++) {
    const shape *x = &shapes[s];
    size_t lda = x->ta ? x->m : x->k, ldb = x->tb ? x->k : x->n;
    double best = 1e30, c0 = 0;
    ms[s] = 0;
    if (!use_shape[s]) continue;
    for (int r = 0; r <= reps; r++) {
      if (r == 1) c0 = cpu();
      double t0 = now();
      if (sgemm(x->ta, x->tb, x->m, x->n, x->k, bufs[s][0], lda, bufs[s][1], ldb, bufs[s][2], x->n, 0)) return -1;
      double t = now() - t0;
      if (r && t < best) best = t;
    }
    ms[s] = (cpu() - c0) / reps * 1e3;
    total += ms[s];
    wall_total += best * 1e3;
  }
  return total;
}

static int make_buffers(void) {
  for (size_t s = 0; s < NSHAPES; s++) {
    const shape *x = &shapes[s];
    size_t n[3] = {x->m * x->k, x->k * x->n, x->m * x->n};
    for (int i = 0; i < 3; i++) {
      float *h = malloc(n[i] * 4);
      ref_random(h, n[i], (unsigned)(s * 3 + i));
      for (size_t j = 0; j < n[i]; j++) h[j] *= 0.01f; /* beta = 0.5 keeps C bounded over reps */
      bufs[s][i] = upload(h, n[i]);
      free(h);
      if (!bufs[s][i]) return -1;
    }
  }
  return 0;
}

/* Apply p (and the path it belongs to), check it and time it. */
static double evaluate(const params *p, int direct, int reps, double *ms) {
  if (force_path(direct)) return -1;
  if (p->kernel && override(p->kernel, p->n, p->names, p->values)) return -1;
  if (check()) return -1;
  return time_shapes(reps, ms);
}

static void report(const char *tag, const params *p, double total, const double *ms);

/* Hill climbing from p: change one parameter at a time to each of its
 * other values, keep any change that lowers the total, until a whole round
 * finds nothing better. Invalid and wrong candidates are skipped. */
static void climb(params *p, int direct, int reps, double *best_total, double *best_ms) {
  double ms[NSHAPES];
  for (int improved = 1; improved;) {
    improved = 0;
    for (int i = 0; i < p->n; i++) {
      const choices *c = NULL;
      for (size_t j = 0; j < sizeof climb_space / sizeof climb_space[0]; j++)
        if (strcmp(climb_space[j].name, p->names[i]) == 0) c = &climb_space[j];
      if (!c) continue;
      for (int j = 0; j < 8 && c->v[j]; j++) {
        if (c->v[j] == p->values[i] || (j && c->v[j] < c->v[j - 1])) continue;
        params q = *p;
        q.values[i] = c->v[j];
        double t = evaluate(&q, direct, reps, ms);
        if (t < 0) continue;
        report(t < *best_total ? "better" : "worse", &q, t, ms);
        if (t < *best_total) {
          *p = q, *best_total = t, improved = 1;
          memcpy(best_ms, ms, sizeof ms);
        }
      }
    }
  }
}

static void report(const char *tag, const params *p, double total, const double *ms) {
  if (wall_total >= 0) printf("%-7s %8.2f cpu-ms %8.2f wall-ms |", tag, total, wall_total);
  else printf("%-7s %8.2f cpu-ms %8s wall-ms |", tag, total, "-");
  for (size_t s = 0; s < NSHAPES; s++) printf(" %.2f", ms[s]);
  printf(" | ");
  print_params(stdout, p);
  printf("\n");
  fflush(stdout);
}

/* Parse "NAME=V NAME=V ..." into p; the kernel is told by the names. */
static int parse_only(char *text, params *p) {
  memset(p, 0, sizeof *p);
  for (char *tok = strtok(text, " ,"); tok; tok = strtok(NULL, " ,")) {
    char *eq = strchr(tok, '=');
    if (!eq || p->n == MAXP) return -1;
    *eq = '\0';
    set(p, tok, strtoul(eq + 1, NULL, 10));
  }
  p->kernel = get(p, "WGD") ? "XgemmDirect" : "Xgemm";
  return p->n ? 0 : -1;
}

static int choose_device(const char *want) {
  cl_platform_id plats[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS) return -1;
  for (cl_uint i = 0; i < np; i++) {
    cl_device_id devs[16];
    cl_uint nd = 0;
    char pname[256] = "", dname[256] = "";
    if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS) continue;
    clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
    for (cl_uint j = 0; j < nd; j++) {
      clGetDeviceInfo(devs[j], CL_DEVICE_NAME, sizeof dname, dname, NULL);
      if (!want || strstr(dname, want) || strstr(pname, want)) {
        device = devs[j];
        printf("# device: %s (%s)\n", dname, pname);
        return 0;
      }
    }
  }
  return -1;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"device", required_argument, 0, 'd'},
                                       {"kernel", required_argument, 0, 'k'},
                                       {"candidates", required_argument, 0, 'c'},
                                       {"seed", required_argument, 0, 's'},
                                       {"reps", required_argument, 0, 'r'},
                                       {"only", required_argument, 0, 'o'},
                                       {"climb", no_argument, 0, 'C'},
                                       {"shapes", required_argument, 0, 'S'},
                                       {"help", no_argument, 0, 'h'},
                                       {0}};
  const char *want = NULL, *kernel = "both";
  char *only = NULL;
  long candidates = 20, reps = 3;
  int c, do_climb = 0, shapes_given = 0;
  while ((c = getopt_long(argc, argv, "d:k:c:s:r:o:h", opts, NULL)) != -1) {
    switch (c) {
    case 'd': want = optarg; break;
    case 'k': kernel = optarg; break;
    case 'c': candidates = strtol(optarg, NULL, 10); break;
    case 's': rng_state += strtoull(optarg, NULL, 10) * 0x9E3779B97F4A7C15ULL; break;
    case 'r': reps = strtol(optarg, NULL, 10); break;
    case 'o': only = optarg; break;
    case 'C': do_climb = 1; break;
    case 'S':
      memset(use_shape, 0, sizeof use_shape);
      for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ","))
        if ((size_t)atoi(tok) < NSHAPES) use_shape[atoi(tok)] = 1;
      shapes_given = 1;
      break;
    default:
      fprintf(c == 'h' ? stdout : stderr,
              "usage: gemm_tune [--device SUBSTR] [--kernel xgemm|direct|both] [--candidates N]\n"
              "                 [--seed S] [--reps R] [--shapes I,J,...] [--only \"NAME=V ...\" [--climb]]\n");
      return c == 'h' ? 0 : 2;
    }
  }
  if (!shapes_given)
    for (size_t s = 0; s < NDEFAULT; s++) use_shape[s] = 1;
  if (choose_device(want)) {
    fprintf(stderr, "gemm_tune: no OpenCL device matches '%s'\n", want ? want : "(any)");
    return 77;
  }
  cl_int err;
  ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  if (err == CL_SUCCESS) queue = clCreateCommandQueue(ctx, device, 0, &err);
  if (err != CL_SUCCESS || make_buffers()) {
    fprintf(stderr, "gemm_tune: OpenCL setup failed (%d)\n", (int)err);
    return 1;
  }
  printf("# CPU ms per call (mean of %ld) per shape:", reps);
  for (size_t s = 0; s < NSHAPES; s++) printf(" [%s %c%c %zux%zux%zu]", shapes[s].what, shapes[s].ta ? 'T' : 'N',
                                              shapes[s].tb ? 'T' : 'N', shapes[s].m, shapes[s].n, shapes[s].k);
  printf("\n");

  int do_x = strcmp(kernel, "direct") != 0, do_d = strcmp(kernel, "xgemm") != 0;
  double ms[NSHAPES], best_ms[2][NSHAPES], best_total[2] = {1e30, 1e30};
  params best[2], none = {NULL, 0, {0}, {0}};
  if (only) {
    params p;
    if (parse_only(only, &p)) { fprintf(stderr, "gemm_tune: --only wants NAME=VALUE pairs\n"); return 2; }
    int direct = p.kernel[6] == 'D';
    double t = evaluate(&p, direct, (int)reps, ms);
    if (t < 0) { printf("invalid or wrong: "); print_params(stdout, &p); printf("\n"); return 1; }
    report(direct ? "direct" : "xgemm", &p, t, ms);
    if (do_climb) {
      climb(&p, direct, (int)reps, &t, ms);
      wall_total = -1;
      report(direct ? "BEST-D" : "BEST-X", &p, t, ms);
    }
    return 0;
  }
  for (int path = 0; path < 2; path++) { /* 0: indirect, 1: direct */
    if (!(path ? do_d : do_x)) continue;
    double t = evaluate(&none, path, (int)reps, ms);
    if (t >= 0) report(path ? "direct" : "xgemm", &none, t, ms);
    if (t >= 0) best_total[path] = t, best[path] = none, memcpy(best_ms[path], ms, sizeof ms);
    for (long i = 0; i < candidates; i++) {
      params p = path ? random_direct() : random_xgemm();
      t = evaluate(&p, path, (int)reps, ms);
      if (t < 0) { printf("skip    (invalid or wrong) "); print_params(stdout, &p); printf("\n"); continue; }
      report(path ? "direct" : "xgemm", &p, t, ms);
      if (t < best_total[path]) best_total[path] = t, best[path] = p, memcpy(best_ms[path], ms, sizeof ms);
    }
  }
  wall_total = -1;
  for (int path = 0; path < 2; path++)
    if (best_total[path] < 1e30) report(path ? "BEST-D" : "BEST-X", &best[path], best_total[path], best_ms[path]);
  return 0;
}
