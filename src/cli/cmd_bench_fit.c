/*
 * cmd_bench_fit.c: `cltrain bench allreduce --fit FILE`, run under mpirun:
 * the cost model's values (src/comm/model.c) measured on this job's ranks
 * and written to FILE for CLT_COMM_MODEL=FILE.
 */
#include "config.h"

#include <jansson.h>
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

int cli_bench_fit(const char *path) {
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
    if (json_dump_file(doc, path, JSON_INDENT(2)) != 0) {
      fprintf(stderr, "cltrain bench allreduce: --fit: cannot write '%s'\n", path);
      ec = CLI_EXIT_ERROR;
    } else {
      printf("# cost model written to %s (%s): load it with CLT_COMM_MODEL=%s\n", path, note, path);
      printf("alpha_intra %.3g s  beta_intra %.3g s/B (%.2f GB/s)\n", alpha[0], beta[0], beta[0] > 0 ? 1e-9 / beta[0] : 0);
      printf("alpha_inter %.3g s  beta_inter %.3g s/B (%.2f GB/s)\n", alpha[1], beta[1], beta[1] > 0 ? 1e-9 / beta[1] : 0);
      printf("gamma       %.3g s/B (%.2f GB/s)\n", gamma, gamma > 0 ? 1e-9 / gamma : 0);
    }
    json_decref(doc);
  }
#ifdef HAVE_MPI
  MPI_Bcast(&ec, 1, MPI_INT, 0, MPI_COMM_WORLD);
#endif
  clt_comm_destroy(comm);
  return ec;
}

