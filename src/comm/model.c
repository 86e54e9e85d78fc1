/*
 * model.c: the all-reduce algorithms as a table, their α-β-γ cost model,
 * and the choice a plan makes from it.
 *
 * A message of n bytes between two ranks costs α + n β (α and β inside a
 * node, index 0, or between nodes, index 1); reducing n bytes costs n γ.
 * For N ranks on M nodes of at most L (at least l) ranks, x = 1 when M > 1:
 *
 *   ring                2 (N-1) α_x + 2 (N-1)/N n β_x + (N-1)/N n γ
 *                       (every step waits for its slowest link, which
 *                       crosses nodes when there are several)
 *   recursive-doubling  s (α_x + n β_x + n γ), s = log2 P (+ 2 when N is
 *                       not a power of two P)
 *   gather              2 α_x + 2 (N-1) n β_x + (N-1) n γ (rank 0's link
 *                       carries every message; 2 to 8 ranks)
 *   twolevel            intra-node reduce-scatter (L-1)(α_0 + n/L (β_0 + γ)),
 *                       a ring between nodes of the n/l bytes the busiest
 *                       rank carries, in ceil(L/l) rings:
 *                       2 (M-1) ceil(L/l) α_1 + 2 (M-1)/M n/l β_1 + (M-1)/M n/l γ,
 *                       and the intra-node allgather (L-1)(α_0 + n/L β_0)
 *   shm                 one node: 2 k α_0 + (2N-1)/(2N) n β_0 + (N-1)/N n γ,
 *                       (up to 8 KiB: α_0 + n β_0/2 + (N-1) n γ, one
 *                       handshake), k = the rounds of the bounded window,
 *                       each waiting twice for every rank; a byte is
 *                       copied once into the window and once out, (2N-1)/N
 *                       of the buffer in all, where a message through MPI's
 *                       shared memory is copied twice, into a queue and out
 *                       of it: so a copy costs β_0 / 2
 *   shm, fitted         with alpha_shm and beta_shm in the file (--fit timed
 *                       shm itself on one node):
 *                       2 k α_s + (5N-2)/N n β_s (up to 8 KiB: α_s + (N+3) n β_s)
 *                       α_s: one wait for every rank (two a round); β_s: a
 *                       byte a rank loads or stores. Per byte of the buffer
 *                       a rank stores 2 whatever N (into the window (N-1)/N,
 *                       its piece's sum into its buffer and its slot 2/N,
 *                       the others' sums out (N-1)/N) and loads (3N-2)/N
 *                       (what it copies in, every rank's addends of its
 *                       piece, the sums it copies out); the adds ride on
 *                       the loads. Small ones: n in, N n summed, n back.
 *                       The ping-pong's β_0 and the 1 MiB local sum's γ
 *                       made shm 35-55% faster than measured here: the
 *                       window's copies read another core's cache lines.
 *
 * The defaults are a node with shared memory and a 25-100 Gb/s network;
 * `cltrain bench allreduce --fit FILE` measures this machine and writes
 * FILE, which CLT_COMM_MODEL=FILE loads. Without a file the small-message
 * algorithms are chosen by CLT_ALLREDUCE_SMALL's measured threshold (as
 * before the model) and the model chooses between the ring and two-level;
 * with one, the model chooses among all of them unless CLT_ALLREDUCE_SMALL
 * is set too.
 */
#include "comm_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int cross(const clt_comm *c) { return c->layout.nnodes > 1; }

static double ring_cost(const clt_comm *c, double n) {
  const clt__cost_model *m = &c->model;
  int x = cross(c);
  double N = c->size;
  return 2 * (N - 1) * m->alpha[x] + 2 * (N - 1) / N * n * m->beta[x] + (N - 1) / N * n * m->gamma;
}

static double recdouble_cost(const clt_comm *c, double n) {
  const clt__cost_model *m = &c->model;
  int x = cross(c);
  return clt__small_steps(c->size, CLT__RECDOUBLE) * (m->alpha[x] + n * m->beta[x] + n * m->gamma);
}

static double gather_cost(const clt_comm *c, double n) {
  const clt__cost_model *m = &c->model;
  int x = cross(c);
  if (c->size > 8) return INFINITY; /* small.c sends to at most 7 peers at once */
  double N = c->size;
  return 2 * m->alpha[x] + 2 * (N - 1) * n * m->beta[x] + (N - 1) * n * m->gamma;
}

static double twolevel_cost(const clt_comm *c, double n) {
  const clt__cost_model *m = &c->model;
  double L = c->layout.lmax, l = c->layout.lmin, M = c->layout.nnodes;
  double intra = (L - 1) * (2 * m->alpha[0] + n / L * (2 * m->beta[0] + m->gamma));
  double rings = ceil(L / l);
  double inter = 2 * (M - 1) * rings * m->alpha[1] + 2 * (M - 1) / M * n / l * m->beta[1] + (M - 1) / M * n / l * m->gamma;
  return intra + inter;
}

/* The window's rounds: N pieces (shm.c). */
static double shm_cost(const clt_comm *c, double n) {
  const clt__cost_model *m = &c->model;
  double N = c->size, round = N * (double)clt__shm_piece_bytes(c, 0);
  double rounds = n > 0 ? ceil(n / round) : 0;
  if (m->shm_fitted) {
    if (n <= (double)CLT__SHM_WHOLE_BYTES) return m->alpha_shm + (N + 3) * n * m->beta_shm;
    return 2 * rounds * m->alpha_shm + (5 * N - 2) / N * n * m->beta_shm;
  }
  /* Small ones: one handshake, every rank copies all in and sums all. */
  if (n <= (double)CLT__SHM_WHOLE_BYTES) return m->alpha[0] + n * m->beta[0] / 2 + (N - 1) * n * m->gamma;
  return 2 * rounds * m->alpha[0] + (2 * N - 1) / (2 * N) * n * m->beta[0] + (N - 1) / N * n * m->gamma;
}

static int always(const clt_comm *c, int forced) { return (void)c, (void)forced, 1; }
/* small.c sends to at most 7 peers at once. */
static int gather_usable(const clt_comm *c, int forced) { return (void)forced, c->size <= 8; }
/* Two-level on one node, or on nodes of one rank each, is the ring with
 * extra steps: only when forced. */
static int twolevel_usable(const clt_comm *c, int forced) {
  return forced || (c->layout.nnodes > 1 && c->layout.lmax > 1);
}
/* One node whose ranks share memory. */
static int shm_usable(const clt_comm *c, int forced) {
  return (void)forced, c->shm_capable && c->layout.nnodes == 1;
}

/* name, cost, usable, instead (when forced but not usable), small, all-reduce only, staged */
static const clt__algorithm_desc algorithms[CLT__NALGORITHMS] = {
    {CLT__RING, "ring", ring_cost, always, CLT__RING, 0, 0, 1},
    {CLT__RECDOUBLE, "recursive-doubling", recdouble_cost, always, CLT__RECDOUBLE, 1, 0, 0},
    {CLT__GATHER, "gather", gather_cost, gather_usable, CLT__RECDOUBLE, 1, 0, 0},
    {CLT__TWOLEVEL, "twolevel", twolevel_cost, twolevel_usable, CLT__RING, 0, 1, 1},
    {CLT__SHM, "shm", shm_cost, shm_usable, CLT__TWOLEVEL, 0, 0, 1},
};

const clt__algorithm_desc *clt__algorithm_find(enum clt__algorithm a) {
  for (int i = 0; i < CLT__NALGORITHMS; i++)
    if (algorithms[i].algorithm == a) return &algorithms[i];
  return NULL;
}

int clt__algorithm_parse(const char *name) {
  if (strcmp(name, "auto") == 0) return -1;
  for (int i = 0; i < CLT__NALGORITHMS; i++)
    if (strcmp(algorithms[i].name, name) == 0) return (int)algorithms[i].algorithm;
  return -2;
}

enum clt__algorithm clt__algorithm_choose(const clt_comm *comm, size_t bytes) {
  if (comm->algorithm >= 0) {
    /* Forced: shm on several nodes is two-level (whose node steps go
     * through the window where the ranks share memory); gather beyond 8
     * ranks is recursive doubling. */
    const clt__algorithm_desc *a = clt__algorithm_find((enum clt__algorithm)comm->algorithm);
    for (int i = 0; i < CLT__NALGORITHMS && !a->usable(comm, 1); i++) a = clt__algorithm_find(a->instead);
    return a->algorithm;
  }
  /* Without a model file the measured threshold sends small messages to
   * the small-message algorithms, but on one node whose ranks share memory
   * (unless CLT_ALLREDUCE_SMALL is set): there shm beat them at every size
   * from 4 bytes to 64 KiB (bench/allreduce.sh, 2 to 4 ranks: 1.3-3.8x
   * MPI_Allreduce, where they ran 1.0-2.4x). */
  if (comm->small_set && (comm->small_given || !shm_usable(comm, 0))) {
    /* Gathering to rank 0 beats the ring on 3 to 8 ranks up to 4 times
     * further than recursive doubling does (bench/allreduce.sh, 3 ranks). */
    enum clt__algorithm small = clt__small_algorithm(comm->size);
    size_t limit = small == CLT__GATHER && comm->small_bytes <= SIZE_MAX / 4 ? 4 * comm->small_bytes
                                                                             : comm->small_bytes;
    if (bytes <= limit) return small;
  }
  /* The cheapest of those usable here; ties go to the earlier entry (the
   * ring first). */
  enum clt__algorithm best = CLT__RING;
  double best_t = ring_cost(comm, (double)bytes);
  for (int i = 1; i < CLT__NALGORITHMS; i++) {
    const clt__algorithm_desc *a = &algorithms[i];
    if ((a->small && comm->small_set) || !a->usable(comm, 0)) continue;
    double t = a->cost(comm, (double)bytes);
    if (t < best_t) best = a->algorithm, best_t = t;
  }
  return best;
}

/* ---- the model's values ---------------------------------------------------- */

/* The shm pair is optional: files written before --fit timed shm, or on
 * several nodes, have neither, and shm keeps the α-β-γ formula. */
static const struct {
  const char *key;
  size_t at; /* offset in clt__cost_model */
  double value;
  int optional;
} fields[] = {
    {"alpha_intra", offsetof(clt__cost_model, alpha), 1e-6, 0},              /* 1 us: shared memory */
    {"beta_intra", offsetof(clt__cost_model, beta), 1e-10, 0},               /* 10 GB/s */
    {"alpha_inter", offsetof(clt__cost_model, alpha) + sizeof(double), 1e-5, 0}, /* 10 us */
    {"beta_inter", offsetof(clt__cost_model, beta) + sizeof(double), 4e-10, 0},  /* 2.5 GB/s: 25 GbE */
    {"gamma", offsetof(clt__cost_model, gamma), 1e-10, 0},                   /* 10 GB/s of float adds */
    {"alpha_shm", offsetof(clt__cost_model, alpha_shm), 0, 1},
    {"beta_shm", offsetof(clt__cost_model, beta_shm), 0, 1},
};
#define NFIELDS_MODEL (sizeof fields / sizeof fields[0])

static double *field(clt__cost_model *m, size_t i) { return (double *)(void *)((char *)m + fields[i].at); }

int clt__model_init(clt__cost_model *m) {
  memset(m, 0, sizeof *m);
  for (size_t i = 0; i < NFIELDS_MODEL; i++) *field(m, i) = fields[i].value;
  clt__strlcpy(m->source, "defaults", sizeof m->source);
  const char *path = getenv("CLT_COMM_MODEL");
  if (!path || !*path) return CLT_OK;
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root)
    return clt__error(CLT_EINVAL, "CLT_COMM_MODEL='%s': %s:%d:%d: %s (write one with `cltrain bench allreduce "
                                  "--fit FILE`)", path, path, err.line, err.column, err.text);
  int rc = CLT_OK;
  if (!json_is_object(root)) {
    rc = clt__error(CLT_EINVAL, "CLT_COMM_MODEL='%s': not a JSON object of the model's values", path);
    goto done;
  }
  int optional_found = 0, optional_count = 0;
  const char *optional_missing = NULL;
  for (size_t i = 0; i < NFIELDS_MODEL; i++) {
    json_t *v = json_object_get(root, fields[i].key);
    optional_count += fields[i].optional;
    if (!v && fields[i].optional) {
      optional_missing = fields[i].key;
      continue;
    }
    optional_found += fields[i].optional;
    if (!v) {
      rc = clt__error(CLT_EINVAL, "CLT_COMM_MODEL='%s': no \"%s\" (seconds%s): the file needs alpha_intra, "
                                  "beta_intra, alpha_inter, beta_inter and gamma", path, fields[i].key,
                      fields[i].key[0] == 'a' ? " per message" : " per byte");
      goto done;
    }
    double x = json_number_value(v);
    if (!json_is_number(v) || !isfinite(x) || x < 0 || x > 1) {
      rc = clt__error(CLT_EINVAL, "CLT_COMM_MODEL='%s': \"%s\" must be a number of seconds from 0 to 1", path,
                      fields[i].key);
      goto done;
    }
    *field(m, i) = x;
  }
  /* One without the other would leave half of shm's model at 0. */
  if (optional_found && optional_found < optional_count) {
    rc = clt__error(CLT_EINVAL, "CLT_COMM_MODEL='%s': no \"%s\": alpha_shm and beta_shm come together (shm's own "
                                "terms, written by `cltrain bench allreduce --fit` on one node), or neither",
                    path, optional_missing);
    goto done;
  }
  m->shm_fitted = optional_found == optional_count;
  clt__strlcpy(m->source, path, sizeof m->source);
done:
  json_decref(root);
  return rc;
}

int clt_comm_model_predict(const clt_comm *comm, const char *algorithm, size_t bytes, double *seconds) {
  if (!comm || !algorithm || !seconds) return clt__error(CLT_EINVAL, "clt_comm_model_predict: no %s",
                                                       !comm ? "communicator" : !algorithm ? "algorithm" : "result");
  int a = clt__algorithm_parse(algorithm);
  if (a < 0)
    return clt__error(CLT_EINVAL, "clt_comm_model_predict: unknown algorithm '%s' (ring, recursive-doubling, "
                                  "gather, twolevel or shm)", algorithm);
  *seconds = comm->size == 1 ? 0 : clt__algorithm_find((enum clt__algorithm)a)->cost(comm, (double)bytes);
  return CLT_OK;
}
