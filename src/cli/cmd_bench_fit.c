/*
 * cmd_bench_fit.c: `cltrain bench allreduce --fit FILE`, run under mpirun:
 * the cost model's values (src/comm/model.c) measured on this job's ranks
 * and written to FILE for CLT_COMM_MODEL=FILE: α, β and γ, and on one node
 * shm's and the ring's own terms, fitted to their all-reduces timed.
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

/* ---- shm's and the ring's own terms ---------------------------------------
 *
 * With α, β and γ from the ping-pong and the local sum, the model put shm
 * 35-55% below its measured time here, and the ring 11-67% below its own
 * (so auto chose the ring, which ran 1.04-2.2x shm's time): the window's
 * copies and sums, and MPI's, read lines another core has just written,
 * which neither of those does. So on one node --fit times both, as
 * `cltrain bench allreduce` times them (the buffer refilled from the input
 * before a barrier, alternating with MPI_Allreduce, the slowest rank's time
 * of each run, the median of two sweeps' runs after warm-up), at the
 * bench's sizes, from one round in the cores' caches to many beyond them
 * (64 KiB to 64 MiB), and fits model.c's forms
 *
 *   shm   2 k α_s + (5N-2)/N (n β_s + (n - F_s)+ β_s,far),  k = ceil(n / (N piece))
 *   ring  2 (N-1) c α_r + 2 (N-1)/N (n β_r + (n - F_r)+ β_r,far),  c = ceil(n / (N chunk))
 *
 * by least squares on the relative error: every size weighs alike, where a
 * fit of the times themselves would follow the largest one alone. The far
 * term follows the caches: per byte, shm cost 37-44 ps up to 512 KiB and
 * 69-74 ps at 32-64 MiB here, which one β put 20-30% off at both ends. F is
 * the knee that fits best, searched over half-octave steps, rather than the
 * cache sizes sysconf reports: which cache the copies outgrow depends on
 * where the other rank runs and what else the machine does (here sysconf
 * gives 2 MiB of L2 and the host's 260 MiB of L3; the knee came out at
 * 6-16 MiB). */

#define FIT_WARMUP 3
#define FIT_MAX_ITERS 40
#define FIT_MIN_BYTES ((size_t)64 << 10)
#define FIT_SIZES 11 /* 64 KiB to 64 MiB */
/* Fewer runs of the large ones: they take milliseconds each. */
static int fit_iters(size_t bytes) {
  static const struct {
    size_t upto;
    int iters;
  } steps[] = {{(size_t)256 << 10, FIT_MAX_ITERS}, {(size_t)1 << 20, 30}, {(size_t)4 << 20, 20}, {(size_t)16 << 20, 12}};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
    if (bytes <= steps[i].upto) return steps[i].iters;
  return 10;
}

enum { FIT_SHM, FIT_RING, FIT_ALGOS };
static const char *const fit_names[FIT_ALGOS] = {"shm", "ring"};

typedef struct algo_fit {
  int fitted;
  const char *why;   /* when not fitted */
  size_t chunk;      /* bytes per rank per round (shm), per message (ring) */
  double alpha, beta, beta_far, far_bytes;
  double waits[FIT_SIZES], moved[FIT_SIZES]; /* the form's factors at each size */
  double measured[FIT_SIZES], model[FIT_SIZES]; /* seconds */
} algo_fit;

static size_t fit_bytes(size_t s) { return FIT_MIN_BYTES << s; }

/* model.c's fitted forms, their factors for n bytes (above 8 KiB) on N
 * ranks: waits, and bytes a rank moves per byte of the buffer. */
static void fit_factors(int algo, double n, double N, double chunk, double *waits, double *moved) {
  if (algo == FIT_SHM) {
    *waits = 2 * ceil(n / (N * chunk));
    *moved = (5 * N - 2) / N;
  } else {
    *waits = 2 * (N - 1) * fmax(1, ceil(n / N / chunk));
    *moved = 2 * (N - 1) / N;
  }
}

/* Least squares of Σ ((α a_i + β b_i + β_far c_i - t_i) / t_i)² over the
 * terms in mask, by the normal equations; 0 when a term came out negative. */
static int fit_subset(int mask, double x[][3], double *p, double *sse) {
  double A[3][4] = {{0}};
  int idx[3], k = 0;
  for (int j = 0; j < 3; j++)
    if (mask >> j & 1) idx[k++] = j;
  for (int i = 0; i < FIT_SIZES; i++)
    for (int r = 0; r < k; r++) {
      for (int c = 0; c < k; c++) A[r][c] += x[i][idx[r]] * x[i][idx[c]];
      A[r][k] += x[i][idx[r]];
    }
  for (int c = 0; c < k; c++) { /* Gauss-Jordan: k <= 3, well conditioned after the 1/t_i scaling */
    int piv = c;
    for (int r = c + 1; r < k; r++)
      if (fabs(A[r][c]) > fabs(A[piv][c])) piv = r;
    if (fabs(A[piv][c]) < 1e-300) return 0;
    for (int j = 0; j <= k; j++) {
      double t = A[c][j];
      A[c][j] = A[piv][j], A[piv][j] = t;
    }
    for (int r = 0; r < k; r++) {
      if (r == c) continue;
      double f = A[r][c] / A[c][c];
      for (int j = c; j <= k; j++) A[r][j] -= f * A[c][j];
    }
  }
  p[0] = p[1] = p[2] = 0;
  for (int r = 0; r < k; r++) {
    p[idx[r]] = A[r][k] / A[r][r];
    if (p[idx[r]] < 0) return 0;
  }
  *sse = 0;
  for (int i = 0; i < FIT_SIZES; i++) {
    double e = p[0] * x[i][0] + p[1] * x[i][1] + p[2] * x[i][2] - 1;
    *sse += e * e;
  }
  return 1;
}

/* α, β, β_far at least 0 (the best of the term subsets that stay so), and
 * the knee F with the least error. */
static void fit_least_squares(algo_fit *f) {
  double best = INFINITY;
  for (int j = 0; j < 2 * (FIT_SIZES - 1); j++) {
    double F = (double)FIT_MIN_BYTES * pow(2, j / 2.0), x[FIT_SIZES][3];
    for (int i = 0; i < FIT_SIZES; i++) {
      double n = (double)fit_bytes((size_t)i), t = f->measured[i];
      x[i][0] = f->waits[i] / t;
      x[i][1] = f->moved[i] * n / t;
      x[i][2] = f->moved[i] * fmax(0, n - F) / t;
    }
    for (int mask = 1; mask < 8; mask++) {
      double p[3], sse;
      if (!fit_subset(mask, x, p, &sse) || sse >= best) continue;
      best = sse;
      f->alpha = p[0], f->beta = p[1], f->beta_far = p[2], f->far_bytes = p[2] > 0 ? F : 0;
    }
  }
  for (int i = 0; i < FIT_SIZES; i++) {
    double n = (double)fit_bytes((size_t)i);
    f->model[i] = f->waits[i] * f->alpha + f->moved[i] * (n * f->beta + fmax(0, n - f->far_bytes) * f->beta_far);
  }
}

/* Every rank calls: plans and runs are collective. The chunk is --chunk,
 * else the plan's own (CLT_ALLREDUCE_CHUNK or the default), as the bench's
 * and the model's plans take. */
static int fit_algorithms(clt_comm *comm, size_t chunk_bytes, algo_fit *f) {
  int N = clt_comm_size(comm), rank = clt_comm_rank(comm), rc = CLT_OK;
  f[FIT_SHM].chunk = chunk_bytes ? chunk_bytes : clt_comm_shm_piece_bytes(comm);
  f[FIT_RING].chunk = chunk_bytes ? chunk_bytes : clt_comm_chunk_bytes(comm);
  const char *why = N < 2 ? "one rank" : clt_comm_node_count(comm) > 1 ? "the ranks are on several nodes" : NULL;
  if (why) return f[FIT_SHM].why = f[FIT_RING].why = why, CLT_OK;
  size_t max = fit_bytes(FIT_SIZES - 1), count = max / sizeof(float);
  float *in = malloc(max), *buf = malloc(max);
  /* Both sweeps' runs of every algorithm and size. */
  double *runs = malloc((size_t)FIT_ALGOS * FIT_SIZES * 2 * FIT_MAX_ITERS * sizeof *runs);
  clt_allreduce_plan *plan = NULL;
  int timed[FIT_ALGOS] = {1, 1};
  if (!in || !buf || !runs) {
    rc = CLT_ENOMEM;
    goto done;
  }
  /* The bench's inputs: small integers, every sum exact. */
  for (size_t i = 0; i < count; i++) in[i] = (float)((int)((i * 7 + (size_t)rank * 13) % 31) - 15);
  /* The bench's order: every size, shm then the ring; then again from the
   * largest size down, and the median of both sweeps' runs kept. A job that
   * started beside the fit for a few seconds had put shm's medians from 2
   * to 16 MiB 1.6-1.8x above the bench's minutes later, and the fit with
   * them; a second sweep meets such a burst at other sizes. (The lower of
   * the two sweeps' medians put the model 6-24% below the bench's.) */
  for (size_t sweep = 0; sweep < 2 * FIT_SIZES; sweep++) {
    size_t s = sweep < FIT_SIZES ? sweep : 2 * FIT_SIZES - 1 - sweep;
    size_t bytes = fit_bytes(s);
    int iters = fit_iters(bytes), second = sweep >= FIT_SIZES;
    for (int g = 0; g < FIT_ALGOS; g++) {
      double *t = runs + ((size_t)g * FIT_SIZES + s) * 2 * FIT_MAX_ITERS + (size_t)second * (size_t)iters;
      if (!timed[g]) continue;
      clt_allreduce_opts opts = {.chunk_bytes = chunk_bytes};
      if ((rc = clt_comm_set_allreduce(comm, fit_names[g])) < 0) goto done;
      if ((rc = clt_allreduce_plan_create(comm, bytes / sizeof(float), CLT_F32, CLT_SUM, &opts, &plan)) < 0)
        goto done;
      /* Forced shm where the ranks do not share memory runs something else. */
      if (strcmp(clt_allreduce_plan_algorithm(plan), fit_names[g]) != 0) {
        f[g].why = "the ranks do not share memory";
        timed[g] = 0;
        clt_allreduce_plan_destroy(plan);
        plan = NULL;
        continue;
      }
      for (int it = 0; it < FIT_WARMUP + iters; it++) {
        /* The bench's order: MPI_Allreduce after ours, then before it, so
         * half the runs find the buffers' lines evicted, as they are after
         * a training step's compute. Run back to back, shm took 15-30%
         * less time here than in the bench. */
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
          if (it >= FIT_WARMUP) t[it - FIT_WARMUP] = cli_now() - t0;
        }
      }
      if (second) f[g].measured[s] = cli_p50_over_ranks(t - iters, 2 * iters);
      fit_factors(g, (double)bytes, N, (double)f[g].chunk, &f[g].waits[s], &f[g].moved[s]);
      clt_allreduce_plan_destroy(plan);
      plan = NULL;
    }
  }
  for (int g = 0; g < FIT_ALGOS; g++)
    if (timed[g]) fit_least_squares(&f[g]), f[g].fitted = 1;
done:
  clt_allreduce_plan_destroy(plan);
  free(in), free(buf), free(runs);
  return rc;
}

int cli_bench_fit(const char *path, size_t chunk_bytes) {
  clt_comm *comm = NULL;
  int rc;
  if ((rc = cli_comm_create(&comm)) < 0) return cli_comm_fail(NULL, rc, "making the communicator");
  int n = clt_comm_size(comm), rank = clt_comm_rank(comm), ec = CLI_EXIT_OK;
  /* Rank 0 writes FILE: find out before measuring whether it can. */
  if (rank == 0 && (rc = clt_check_output(path, CLT_OUTPUT_FILE)) < 0) return cli_comm_fail(comm, rc, "--fit");
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
  algo_fit fits[FIT_ALGOS] = {{0}};
  if ((rc = fit_algorithms(comm, chunk_bytes, fits)) < 0)
    return cli_comm_fail(comm, rc, "timing the shm and ring all-reduces");
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
    /* shm's and the ring's own terms, and what they were fitted to
     * (model.c reads only alpha_, beta_, beta_*_far and *_far_bytes). */
    for (int g = 0; g < FIT_ALGOS; g++) {
      const algo_fit *f = &fits[g];
      const char *name = fit_names[g];
      char key[64];
      if (!f->fitted) continue;
      json_t *sizes = json_array();
      for (size_t s = 0; s < FIT_SIZES; s++)
        json_array_append_new(sizes, json_pack("{s:I, s:f, s:f}", "bytes", (json_int_t)fit_bytes(s), "measured_us",
                                               f->measured[s] * 1e6, "model_us", f->model[s] * 1e6));
      snprintf(key, sizeof key, "alpha_%s", name), json_object_set_new(doc, key, json_real(f->alpha));
      snprintf(key, sizeof key, "beta_%s", name), json_object_set_new(doc, key, json_real(f->beta));
      if (f->beta_far > 0) {
        snprintf(key, sizeof key, "beta_%s_far", name), json_object_set_new(doc, key, json_real(f->beta_far));
        snprintf(key, sizeof key, "%s_far_bytes", name);
        json_object_set_new(doc, key, json_integer((json_int_t)f->far_bytes));
      }
      snprintf(key, sizeof key, "%s_%s_bytes", name, g == FIT_SHM ? "piece" : "chunk");
      json_object_set_new(doc, key, json_integer((json_int_t)f->chunk));
      snprintf(key, sizeof key, "%s_fit", name), json_object_set_new(doc, key, sizes);
    }
    char *text = json_dumps(doc, JSON_INDENT(2));
    ec = text ? cli_write_whole(path, text) : CLI_EXIT_ERROR;
    if (!text) fprintf(stderr, "cltrain: bench allreduce: --fit: out of memory writing '%s'\n", path);
    free(text);
    if (ec == CLI_EXIT_OK) {
      printf("# cost model written to %s (%s): load it with CLT_COMM_MODEL=%s\n", path, note, path);
      printf("alpha_intra %.3g s  beta_intra %.3g s/B (%.2f GB/s)\n", alpha[0], beta[0], beta[0] > 0 ? 1e-9 / beta[0] : 0);
      printf("alpha_inter %.3g s  beta_inter %.3g s/B (%.2f GB/s)\n", alpha[1], beta[1], beta[1] > 0 ? 1e-9 / beta[1] : 0);
      printf("gamma       %.3g s/B (%.2f GB/s)\n", gamma, gamma > 0 ? 1e-9 / gamma : 0);
      for (int g = 0; g < FIT_ALGOS; g++) {
        const algo_fit *f = &fits[g];
        if (!f->fitted) {
          printf("%s: not timed (%s): the model file has no alpha_%s, beta_%s\n", fit_names[g], f->why, fit_names[g],
                 fit_names[g]);
          continue;
        }
        printf("alpha_%-4s %.3g s a wait  beta_%s %.3g s/B moved (%.2f GB/s)", fit_names[g], f->alpha, fit_names[g],
               f->beta, f->beta > 0 ? 1e-9 / f->beta : 0);
        if (f->beta_far > 0) printf("  beta_%s_far %.3g s/B past %.0f B", fit_names[g], f->beta_far, f->far_bytes);
        printf(", %s of %zu B\n", g == FIT_SHM ? "pieces" : "chunks", f->chunk);
        for (size_t s = 0; s < FIT_SIZES; s++)
          printf("%-4s %9zu B: %10.1f us measured, %10.1f us fitted, %.2f\n", fit_names[g], fit_bytes(s),
                 f->measured[s] * 1e6, f->model[s] * 1e6, f->model[s] / f->measured[s]);
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

