/*
 * cmd_bench_fit.c: `cltrain bench allreduce --fit FILE`, run under mpirun:
 * the cost model's values (src/comm/model.c) measured on this job's ranks
 * and written to FILE for CLT_COMM_MODEL=FILE: α, β and γ, and on one node
 * shm's own terms, fitted to shm's all-reduce timed.
 */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_MPI
#  include <cltrain/mpi.h>
#endif

#include "cli.h"

/* ---- --fit: the cost model's values, measured ----------------------------
 *
 * α and β of a level: half the round trip of a ping-pong between rank 0 and
 * a rank on its own node (intra) or on the next node (inter), fitted by
 * least squares to α + n β over sizes from 8 B to 4 MiB (medians of the
 * repetitions). γ: the time per byte of adding float32 buffers of 1 MiB
 * (L2-sized, as the ring's chunks), vectorised as the library's own loop
 * is. A level this job cannot see (one node; nodes of one rank) takes the
 * other level's values, and the file says so. */

#ifdef HAVE_MPI
static double pingpong(int peer, int rank, size_t bytes, unsigned char *buf, int reps) {
  double *t = calloc((size_t)reps, sizeof *t), med;
  for (int k = 0; k < reps; k++) {
    double t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
      MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
    }
    t[k] = (MPI_Wtime() - t0) / 2;
  }
  qsort(t, (size_t)reps, sizeof *t, cli_cmp_double);
  med = t[reps / 2];
  free(t);
  return med;
}

/* α, β between rank 0 and peer (every rank calls; the others wait): α the
 * one-way time of 8 bytes, β the slope from 256 KiB to 4 MiB (a least
 * squares fit over all sizes lets the large ones' noise swamp α). */
static void fit_level(int peer, int rank, unsigned char *buf, double *alpha, double *beta) {
  const size_t lo = (size_t)256 << 10, hi = (size_t)4 << 20;
  double t[3] = {0, 0, 0};
  if (rank == 0 || rank == peer) {
    pingpong(peer, rank, hi, buf, 3); /* warm-up: connections, pages */
    t[0] = pingpong(peer, rank, 8, buf, 200);
    t[1] = pingpong(peer, rank, lo, buf, 20);
    t[2] = pingpong(peer, rank, hi, buf, 10);
  }
  MPI_Bcast(t, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  *alpha = t[0];
  *beta = (t[2] - t[1]) / (double)(hi - lo);
  if (*beta < 0) *beta = 0;
}
#endif

#if defined(__GNUC__)
typedef float fit_v4f __attribute__((vector_size(16)));
#endif

static double fit_gamma(void) {
  size_t n = (size_t)1 << 18; /* floats: 1 MiB */
  float *a = calloc(n, sizeof *a), *b = malloc(n * sizeof *b);
  for (size_t i = 0; i < n; i++) b[i] = (float)(i % 7);
  double best = 1e30;
  for (int rep = 0; rep < 30; rep++) {
    double t0 = cli_now();
    size_t i = 0;
#if defined(__GNUC__)
    for (; i + 4 <= n; i += 4) {
      fit_v4f x, y;
      memcpy(&x, a + i, sizeof x);
      memcpy(&y, b + i, sizeof y);
      x += y;
      memcpy(a + i, &x, sizeof x);
    }
#endif
    for (; i < n; i++) a[i] += b[i];
    double t = cli_now() - t0;
    if (t < best) best = t;
  }
  volatile float sink = a[n / 2];
  (void)sink;
  free(a), free(b);
  return best / (double)(n * sizeof(float));
}

/* ---- shm's own terms ------------------------------------------------------
 *
 * With α, β and γ from the ping-pong and the local sum, the model put shm
 * 35-55% below its measured time here: the window's copies and sums read
 * lines another core has just written, which neither of those does. So on
 * one node --fit times shm itself, as `cltrain bench allreduce` times it
 * (the buffer refilled from the input before a barrier, alternating with
 * MPI_Allreduce, the slowest rank's time of each run, the median after
 * warm-up), at sizes from one round in the cores' caches to many beyond
 * them (64 KiB to 64 MiB, the bench's), and fits model.c's form
 *
 *   t = 2 k α_s + (5N-2)/N n β_s,   k = ceil(n / (N piece)) rounds
 *
 * by least squares on the relative error: every size weighs alike, where
 * a fit of the times themselves would follow the largest one alone. */

#define SHM_PIECE ((size_t)1 << 20) /* shm.c's piece without CLT_ALLREDUCE_CHUNK */
#define SHM_WARMUP 3
#define SHM_MAX_ITERS 40
/* Fewer runs of the large ones: they take milliseconds each. */
static const struct {
  size_t bytes;
  int iters;
} shm_sizes[] = {{(size_t)64 << 10, SHM_MAX_ITERS}, {(size_t)256 << 10, SHM_MAX_ITERS}, {(size_t)1 << 20, 30},
                 {(size_t)4 << 20, 20},          {(size_t)16 << 20, 12},          {(size_t)64 << 20, 10}};
#define NSHM_SIZES (sizeof shm_sizes / sizeof shm_sizes[0])

typedef struct shm_fit {
  int fitted;
  const char *why; /* when not fitted */
  size_t piece;    /* bytes per rank per round */
  double alpha, beta;
  double measured[NSHM_SIZES], model[NSHM_SIZES]; /* seconds */
} shm_fit;

/* model.c's fitted form, its two terms' factors for n bytes (above 8 KiB)
 * on N ranks: waits, and bytes a rank loads or stores. */
static void shm_factors(double n, double N, double piece, double *waits, double *bytes) {
  *waits = 2 * ceil(n / (N * piece));
  *bytes = (5 * N - 2) / N * n;
}

/* Least squares of Σ ((α a_i + β b_i - t_i) / t_i)², α and β at least 0
 * (a negative one is 0 and the other fitted alone). */
static void shm_least_squares(shm_fit *f, const double *a, const double *b) {
  double aa = 0, ab = 0, bb = 0, a1 = 0, b1 = 0;
  for (size_t i = 0; i < NSHM_SIZES; i++) {
    double x = a[i] / f->measured[i], y = b[i] / f->measured[i];
    aa += x * x, ab += x * y, bb += y * y, a1 += x, b1 += y;
  }
  double det = aa * bb - ab * ab;
  f->alpha = det > 0 ? (a1 * bb - b1 * ab) / det : -1;
  f->beta = det > 0 ? (b1 * aa - a1 * ab) / det : -1;
  if (f->alpha < 0) f->alpha = 0, f->beta = b1 / bb;
  else if (f->beta < 0) f->beta = 0, f->alpha = a1 / aa;
  for (size_t i = 0; i < NSHM_SIZES; i++) f->model[i] = f->alpha * a[i] + f->beta * b[i];
}

/* Every rank calls: plans and runs are collective. The piece is --chunk,
 * else CLT_ALLREDUCE_CHUNK, else shm's own, as a plan of the model's
 * would take. */
static int fit_shm(clt_comm *comm, size_t chunk_bytes, shm_fit *f) {
  int N = clt_comm_size(comm), rank = clt_comm_rank(comm), rc = CLT_OK;
  const char *env = getenv("CLT_ALLREDUCE_CHUNK");
  f->piece = chunk_bytes ? chunk_bytes : env && *env ? clt_comm_chunk_bytes(comm) : SHM_PIECE;
  if (N < 2) return f->why = "one rank", CLT_OK;
  if (clt_comm_node_count(comm) > 1) return f->why = "the ranks are on several nodes", CLT_OK;
  size_t max = shm_sizes[NSHM_SIZES - 1].bytes, count = max / sizeof(float);
  float *in = malloc(max), *buf = malloc(max);
  double *t = malloc(SHM_MAX_ITERS * sizeof *t), a[NSHM_SIZES], b[NSHM_SIZES];
  clt_allreduce_plan *plan = NULL;
  if (!in || !buf || !t) {
    rc = CLT_ENOMEM;
    goto done;
  }
  /* The bench's inputs: small integers, every sum exact. */
  for (size_t i = 0; i < count; i++) in[i] = (float)((int)((i * 7 + (size_t)rank * 13) % 31) - 15);
  if ((rc = clt_comm_set_allreduce(comm, "shm")) < 0) goto done;
  for (size_t s = 0; s < NSHM_SIZES; s++) {
    size_t bytes = shm_sizes[s].bytes;
    int iters = shm_sizes[s].iters;
    clt_allreduce_opts opts = {.chunk_bytes = f->piece};
    if ((rc = clt_allreduce_plan_create(comm, bytes / sizeof(float), CLT_F32, CLT_SUM, &opts, &plan)) < 0) goto done;
    /* Forced shm where the ranks do not share memory runs something else. */
    if (strcmp(clt_allreduce_plan_algorithm(plan), "shm") != 0) {
      f->why = "the ranks do not share memory";
      goto done;
    }
    for (int it = 0; it < SHM_WARMUP + iters; it++) {
      /* The bench's order: MPI_Allreduce after shm, then before it, so
       * half the runs find the window's lines evicted, as they are after
       * a training step's compute. Run back to back, shm took 15-30% less
       * time here than in the bench. */
      for (int k = 0; k < 2; k++) {
        memcpy(buf, in, bytes);
#ifdef HAVE_MPI
        MPI_Barrier(MPI_COMM_WORLD);
        if ((it + k) % 2) {
          if (MPI_Allreduce(MPI_IN_PLACE, buf, (int)(bytes / sizeof(float)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
              MPI_SUCCESS) {
            rc = CLT_EMPI;
            goto done;
          }
          continue;
        }
#endif
        double t0 = cli_now();
        if ((rc = clt_allreduce_run(plan, buf)) < 0) goto done;
        if (it >= SHM_WARMUP) t[it - SHM_WARMUP] = cli_now() - t0;
      }
    }
    f->measured[s] = cli_p50_over_ranks(t, iters);
    shm_factors((double)bytes, N, (double)f->piece, &a[s], &b[s]);
    clt_allreduce_plan_destroy(plan);
    plan = NULL;
  }
  shm_least_squares(f, a, b);
  f->fitted = 1;
done:
  clt_allreduce_plan_destroy(plan);
  free(in), free(buf), free(t);
  return rc;
}

int cli_bench_fit(const char *path, size_t chunk_bytes) {
  clt_comm *comm = NULL;
  int rc;
  if ((rc = cli_comm_create(&comm)) < 0) return cli_comm_fail(NULL, rc, "making the communicator");
  int n = clt_comm_size(comm), rank = clt_comm_rank(comm), ec = CLI_EXIT_OK;
  double alpha[2] = {0, 0}, beta[2] = {0, 0}, gamma = fit_gamma();
  int peer[2] = {-1, -1};
#ifdef HAVE_MPI
  /* The first rank on rank 0's node, and on another node. */
  int *node = calloc((size_t)n, sizeof *node), mine = clt_comm_node(comm);
  MPI_Allgather(&mine, 1, MPI_INT, node, 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 1; r < n; r++) {
    if (node[r] == node[0] && peer[0] < 0) peer[0] = r;
    if (node[r] != node[0] && peer[1] < 0) peer[1] = r;
  }
  free(node);
  unsigned char *buf = calloc((size_t)4 << 20, 1);
  for (int x = 0; x < 2; x++)
    if (peer[x] > 0) fit_level(peer[x], rank, buf, &alpha[x], &beta[x]);
  free(buf);
  MPI_Allreduce(MPI_IN_PLACE, &gamma, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#endif
  shm_fit shm = {0};
  if ((rc = fit_shm(comm, chunk_bytes, &shm)) < 0) return cli_comm_fail(comm, rc, "timing the shm all-reduce");
  const char *note = "measured";
  if (peer[0] < 0 && peer[1] < 0)
    note = "one rank: nothing to measure between ranks, the library's defaults for alpha and beta";
  else if (peer[0] < 0)
    note = "nodes of one rank: the intra-node values are the inter-node ones";
  else if (peer[1] < 0)
    note = "one node: the inter-node values are the intra-node ones";
  for (int x = 0; x < 2; x++)
    if (peer[x] < 0 && peer[1 - x] > 0) alpha[x] = alpha[1 - x], beta[x] = beta[1 - x];
  if (peer[0] < 0 && peer[1] < 0) alpha[0] = 1e-6, beta[0] = 1e-10, alpha[1] = 1e-5, beta[1] = 4e-10;
  if (rank == 0) {
    json_t *doc = json_pack("{s:f, s:f, s:f, s:f, s:f, s:s, s:i, s:i}", "alpha_intra", alpha[0], "beta_intra", beta[0],
                            "alpha_inter", alpha[1], "beta_inter", beta[1], "gamma", gamma, "note", note, "ranks", n,
                            "nodes", clt_comm_node_count(comm));
    /* shm's own terms, and what they were fitted to (model.c reads only
     * alpha_shm and beta_shm). */
    json_t *sizes = json_array();
    for (size_t s = 0; shm.fitted && s < NSHM_SIZES; s++)
      json_array_append_new(sizes, json_pack("{s:I, s:f, s:f}", "bytes", (json_int_t)shm_sizes[s].bytes,
                                             "measured_us", shm.measured[s] * 1e6, "model_us", shm.model[s] * 1e6));
    if (shm.fitted) {
      json_object_set_new(doc, "alpha_shm", json_real(shm.alpha));
      json_object_set_new(doc, "beta_shm", json_real(shm.beta));
      json_object_set_new(doc, "shm_piece_bytes", json_integer((json_int_t)shm.piece));
      json_object_set_new(doc, "shm_fit", sizes);
    } else {
      json_decref(sizes);
    }
    if (json_dump_file(doc, path, JSON_INDENT(2)) != 0) {
      fprintf(stderr, "cltrain bench allreduce: --fit: cannot write '%s'\n", path);
      ec = CLI_EXIT_ERROR;
    } else {
      printf("# cost model written to %s (%s): load it with CLT_COMM_MODEL=%s\n", path, note, path);
      printf("alpha_intra %.3g s  beta_intra %.3g s/B (%.2f GB/s)\n", alpha[0], beta[0], beta[0] > 0 ? 1e-9 / beta[0] : 0);
      printf("alpha_inter %.3g s  beta_inter %.3g s/B (%.2f GB/s)\n", alpha[1], beta[1], beta[1] > 0 ? 1e-9 / beta[1] : 0);
      printf("gamma       %.3g s/B (%.2f GB/s)\n", gamma, gamma > 0 ? 1e-9 / gamma : 0);
      if (!shm.fitted)
        printf("shm: not timed (%s): the model file has no alpha_shm, beta_shm\n", shm.why);
      else {
        printf("alpha_shm   %.3g s a wait  beta_shm %.3g s/B loaded or stored (%.2f GB/s), pieces of %zu B\n",
               shm.alpha, shm.beta, shm.beta > 0 ? 1e-9 / shm.beta : 0, shm.piece);
        for (size_t s = 0; s < NSHM_SIZES; s++)
          printf("shm %9zu B: %10.1f us measured, %10.1f us fitted, %.2f\n", shm_sizes[s].bytes,
                 shm.measured[s] * 1e6, shm.model[s] * 1e6, shm.model[s] / shm.measured[s]);
      }
    }
    json_decref(doc);
  }
#ifdef HAVE_MPI
  MPI_Bcast(&ec, 1, MPI_INT, 0, MPI_COMM_WORLD);
#endif
  clt_comm_destroy(comm);
  return ec;
}

