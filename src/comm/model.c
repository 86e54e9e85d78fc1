/*
 * model.c: the all-reduce algorithms as a table, their α-β-γ cost model,
 * and the choice a plan makes from it. Each row also names its plans'
 * functions, which live in the algorithm's file (ring.c, small.c,
 * halving.c, twolevel.c, shm_plan.c).
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
 *   rabenseifner        w α_x + m n β_x + r n γ: w = 2 log2 P waits, m =
 *                       2 (P-1)/P bytes moved and r = (P-1)/P reduced per
 *                       byte, + 2, 2 and 1 when N is not a power of two P
 *                       (the fold: halving.c)
 *   twolevel            intra-node reduce-scatter (L-1)(α_0 + n/L (β_0 + γ)),
 *                       a ring between nodes of the n/l bytes the busiest
 *                       rank carries, in ceil(L/l) rings:
 *                       2 (M-1) ceil(L/l) α_1 + 2 (M-1)/M n/l β_1 + (M-1)/M n/l γ,
 *                       and the intra-node allgather (L-1)(α_0 + n/L β_0)
 *   twolevel-rabenseifner  the same, with Rabenseifner's w, m, r over M
 *                       nodes in place of the network ring's
 *   shm                 one node: 2 k α_0 + (2N-1)/(2N) n β_0 + (N-1)/N n γ,
 *                       (up to 8 KiB: α_0 + n β_0/2 + (N-1) n γ, one
 *                       handshake), k = the rounds of the bounded window,
 *                       each waiting twice for every rank; a byte is
 *                       copied once into the window and once out, (2N-1)/N
 *                       of the buffer in all, where a message through MPI's
 *                       shared memory is copied twice, into a queue and out
 *                       of it: so a copy costs β_0 / 2
 *   shm, fitted         with alpha_shm and beta_shm in the file (--fit timed
 *                       shm itself on one node; used on one node only):
 *                       2 k α_s + (5N-2)/N (n β_s + (n - F_s)+ β_s,far)
 *                       (up to 8 KiB: α_s + (N+3) n β_s)
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
 *                       β_s,far (beta_shm_far, past shm_far_bytes F_s,
 *                       0 without the pair): what a byte costs more once
 *                       the buffer outgrows the caches (per byte, 37-44 ps
 *                       up to 512 KiB, 69-74 ps at 32-64 MiB here).
 *   ring, fitted        with alpha_ring and beta_ring (one node only):
 *                       2 (N-1) c α_r + 2 (N-1)/N (n β_r + (n - F_r)+ β_r,far)
 *                       c = ceil(n / (N chunk)): every step waits for each
 *                       chunk of a segment; a rank sends 2 (N-1)/N n bytes
 *                       and receives as many (MPI copies each in and out of
 *                       its queue; the adds ride on the receive). The
 *                       α-β-γ form put the ring at 0.33-0.89 of its time
 *                       here, below shm's, where it ran 1.04-2.2x shm's.
 *
 * The defaults are a node with shared memory and a 25-100 Gb/s network;
 * `cltrain bench allreduce --fit FILE` measures this machine and writes
 * FILE, which CLT_COMM_MODEL=FILE loads. Without a file the small-message
 * algorithms are chosen by CLT_ALLREDUCE_SMALL's measured threshold (as
 * before the model) and the model chooses between the ring and two-level;
 * with one, the model chooses among all of them unless CLT_ALLREDUCE_SMALL
 * is set too; where the file has fitted terms for this layout (one node),
 * among the fitted ones alone.
 */
#include "comm_internal.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static int cross(const clt_comm *c) { return c->layout.nnodes > 1; }

/* A fitted form: waits α + moved (n β + (n - F)+ β_far), where moved is
 * the bytes a rank moves per byte of the buffer. `cltrain bench allreduce
 * --fit` fits these forms with their factors of its own
 * (src/cli/cmd_bench_fit.c, fit_factors): change both together. */
static double fitted_cost(const clt__fitted_terms *f, double waits, double moved, double n) {
  return waits * f->alpha + moved * (n * f->beta + fmax(0, n - f->far_bytes) * f->beta_far);
}

/* The file's terms were fitted on one node (--fit times them only there). */
static const clt__fitted_terms *ring_fitted(const clt_comm *c) {
  return c->model.ring.set && !cross(c) ? &c->model.ring : NULL;
}
static const clt__fitted_terms *shm_fitted(const clt_comm *c) {
  return c->model.shm.set && !cross(c) ? &c->model.shm : NULL;
}

/* The ring's chunks: every step waits for one message per chunk of a
 * segment (ring.c). */
static double ring_cost(const clt_comm *c, double n) {
  const clt__cost_model *m = &c->model;
  int x = cross(c);
  double N = c->size;
  if (ring_fitted(c)) {
    double chunks = fmax(1, ceil(n / N / (double)c->chunk_bytes));
    return fitted_cost(&m->ring, 2 * (N - 1) * chunks, 2 * (N - 1) / N, n);
  }
  return 2 * (N - 1) * m->alpha[x] + 2 * (N - 1) / N * n * m->beta[x] + (N - 1) / N * n * m->gamma;
}

static double recdouble_cost(const clt_comm *c, double n) {
  const clt__cost_model *m = &c->model;
  int x = cross(c);
  return clt__recdouble_steps(c->size) * (m->alpha[x] + n * m->beta[x] + n * m->gamma);
}

static double gather_cost(const clt_comm *c, double n) {
  const clt__cost_model *m = &c->model;
  int x = cross(c);
  if (c->size > 8) return INFINITY; /* small.c sends to at most 7 peers at once */
  double N = c->size;
  return 2 * m->alpha[x] + 2 * (N - 1) * n * m->beta[x] + (N - 1) * n * m->gamma;
}

/* Rabenseifner's over N ranks (halving.c), per all-reduce: messages
 * waited for, bytes a rank moves and reduces per byte of the buffer. */
static void halving_terms(int N, double *waits, double *moved, double *reduced) {
  double P = 1;
  while (P * 2 <= N) P *= 2;
  int fold = N > P;
  *waits = clt__halving_steps(N);
  *moved = 2 * (P - 1) / P + (fold ? 2 : 0);
  *reduced = (P - 1) / P + (fold ? 1 : 0);
}

static double rabenseifner_cost(const clt_comm *c, double n) {
  const clt__cost_model *m = &c->model;
  int x = cross(c);
  double waits, moved, reduced;
  halving_terms(c->size, &waits, &moved, &reduced);
  return waits * m->alpha[x] + moved * n * m->beta[x] + reduced * n * m->gamma;
}

/* Inside the node a ring reduce-scatter and allgather; between nodes the
 * n/l bytes the busiest rank carries, in ceil(L/l) rings or Rabenseifners. */
static double twolevel_form(const clt_comm *c, double n, int halving) {
  const clt__cost_model *m = &c->model;
  double L = c->layout.lmax, l = c->layout.lmin, M = c->layout.nnodes;
  double intra = (L - 1) * (2 * m->alpha[0] + n / L * (2 * m->beta[0] + m->gamma));
  double rings = ceil(L / l), waits = 2 * (M - 1), moved = 2 * (M - 1) / M, reduced = (M - 1) / M;
  if (halving) halving_terms(c->layout.nnodes, &waits, &moved, &reduced);
  return intra + waits * rings * m->alpha[1] + moved * n / l * m->beta[1] + reduced * n / l * m->gamma;
}
static double twolevel_cost(const clt_comm *c, double n) { return twolevel_form(c, n, 0); }
static double twolevel_rabenseifner_cost(const clt_comm *c, double n) { return twolevel_form(c, n, 1); }

/* The window's rounds: N pieces (shm.c). */
static double shm_cost(const clt_comm *c, double n) {
  const clt__cost_model *m = &c->model;
  double N = c->size, round = N * (double)clt__shm_piece_bytes(c, 0);
  double rounds = n > 0 ? ceil(n / round) : 0;
  if (shm_fitted(c)) {
    if (n <= (double)CLT__SHM_WHOLE_BYTES) return fitted_cost(&m->shm, 1, N + 3, n);
    return fitted_cost(&m->shm, 2 * rounds, (5 * N - 2) / N, n);
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

/* The table, in the order of clt_allreduce_algorithms() and of ties (the
 * earlier wins). Choosing a row: its cost, where it is usable, what runs
 * instead when it is forced but not usable, its fitted terms, whether it
 * is a small-message one and an all-reduce only one. Running it: its
 * plans' create, destroy, steps and run, and their device staging order
 * (none: device data is copied whole first). */
static const clt__algorithm_desc algorithms[CLT__NALGORITHMS] = {
    {.algorithm = CLT__RING, .name = "ring",
     .cost = ring_cost, .usable = always, .instead = CLT__RING, .fitted = ring_fitted,
     .create = clt__ring_plan_create, .destroy = clt__ring_plan_destroy, .steps = clt__ring_plan_steps,
     .run = clt__ring_plan_run, .staged = clt__ring_plan_staged, .nstage = clt__ring_plan_nstage,
     .stage_chunk = clt__ring_plan_stage_chunk},
    {.algorithm = CLT__RECDOUBLE, .name = "recursive-doubling",
     .cost = recdouble_cost, .usable = always, .instead = CLT__RECDOUBLE, .small = 1,
     .create = clt__recdouble_plan_create, .destroy = clt__plan_scratch_destroy,
     .steps = clt__recdouble_plan_steps, .run = clt__recdouble_plan_run},
    {.algorithm = CLT__GATHER, .name = "gather",
     .cost = gather_cost, .usable = gather_usable, .instead = CLT__RECDOUBLE, .small = 1,
     .create = clt__gather_plan_create, .destroy = clt__plan_scratch_destroy, .steps = clt__gather_plan_steps,
     .run = clt__gather_plan_run},
    {.algorithm = CLT__TWOLEVEL, .name = "twolevel",
     .cost = twolevel_cost, .usable = twolevel_usable, .instead = CLT__RING, .allreduce_only = 1,
     .create = clt__twolevel_plan_create, .destroy = clt__twolevel_plan_destroy,
     .steps = clt__twolevel_plan_steps, .run = clt__twolevel_plan_run, .staged = clt__twolevel_plan_staged,
     .nstage = clt__twolevel_plan_nstage, .stage_chunk = clt__twolevel_plan_stage_chunk},
    {.algorithm = CLT__SHM, .name = "shm",
     .cost = shm_cost, .usable = shm_usable, .instead = CLT__TWOLEVEL, .fitted = shm_fitted,
     .create = clt__shm_plan_create, .destroy = clt__shm_plan_destroy, .steps = clt__shm_plan_steps,
     .run = clt__shm_plan_run, .staged = clt__shm_plan_staged, .nstage = clt__shm_plan_nstage,
     .stage_chunk = clt__shm_plan_stage_chunk},
    {.algorithm = CLT__RABENSEIFNER, .name = "rabenseifner",
     .cost = rabenseifner_cost, .usable = always, .instead = CLT__RABENSEIFNER, .allreduce_only = 1,
     .create = clt__halving_plan_create, .destroy = clt__plan_scratch_destroy, .steps = clt__halving_plan_steps,
     .run = clt__halving_plan_run},
    {.algorithm = CLT__TWOLEVEL_RABENSEIFNER, .name = "twolevel-rabenseifner",
     .cost = twolevel_rabenseifner_cost, .usable = twolevel_usable, .instead = CLT__RABENSEIFNER,
     .allreduce_only = 1,
     .create = clt__twolevel_halving_plan_create, .destroy = clt__twolevel_plan_destroy,
     .steps = clt__twolevel_plan_steps, .run = clt__twolevel_plan_run, .staged = clt__twolevel_plan_staged,
     .nstage = clt__twolevel_plan_nstage, .stage_chunk = clt__twolevel_plan_stage_chunk},
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
  /* Where the file has terms fitted to this layout's own times, only the
   * algorithms fitted compete: the α-β-γ forms of the others came out up
   * to 90% below their measured times on one node (the ping-pong and the
   * local sum read no lines another core has just written), and chose the
   * ring, then recursive doubling, which ran 1.1-5.8x shm's time at 2 ranks. */
  int fitted_only = 0;
  for (int i = 0; i < CLT__NALGORITHMS; i++)
    fitted_only |= algorithms[i].fitted && algorithms[i].fitted(comm) && algorithms[i].usable(comm, 0);
  /* The cheapest of those usable here; ties go to the earlier entry (the
   * ring first). */
  enum clt__algorithm best = CLT__RING;
  double best_t = INFINITY;
  for (int i = 0; i < CLT__NALGORITHMS; i++) {
    const clt__algorithm_desc *a = &algorithms[i];
    if ((a->small && comm->small_set) || !a->usable(comm, 0)) continue;
    if (fitted_only && !(a->fitted && a->fitted(comm))) continue;
    /* Equal forms computed apart (two-level's network ring and halving
     * on 2 nodes) may differ in the last bits: a tie stays a tie. */
    double t = a->cost(comm, (double)bytes);
    if (t < best_t * (1 - 1e-9)) best = a->algorithm, best_t = t;
  }
  return best;
}

/* ---- the model's values ---------------------------------------------------- */

/* Beyond the five α-β-γ values, groups of keys that come together or not
 * at all: files written before --fit timed shm and the ring, or on several
 * nodes, have none, and those algorithms keep the α-β-γ formula; a far
 * pair needs its algorithm's pair. */
enum { G_ALWAYS, G_SHM, G_SHM_FAR, G_RING, G_RING_FAR, NGROUPS };
static const int group_needs[NGROUPS] = {G_ALWAYS, G_ALWAYS, G_SHM, G_ALWAYS, G_RING};
static const struct {
  const char *key;
  size_t at; /* offset in clt__cost_model */
  double value;
  int group;
  int bytes; /* a size in bytes, not seconds */
} fields[] = {
    {"alpha_intra", offsetof(clt__cost_model, alpha), 1e-6, G_ALWAYS, 0},              /* 1 us: shared memory */
    {"beta_intra", offsetof(clt__cost_model, beta), 1e-10, G_ALWAYS, 0},               /* 10 GB/s */
    {"alpha_inter", offsetof(clt__cost_model, alpha) + sizeof(double), 1e-5, G_ALWAYS, 0}, /* 10 us */
    {"beta_inter", offsetof(clt__cost_model, beta) + sizeof(double), 4e-10, G_ALWAYS, 0},  /* 2.5 GB/s: 25 GbE */
    {"gamma", offsetof(clt__cost_model, gamma), 1e-10, G_ALWAYS, 0},                   /* 10 GB/s of float adds */
    {"alpha_shm", offsetof(clt__cost_model, shm.alpha), 0, G_SHM, 0},
    {"beta_shm", offsetof(clt__cost_model, shm.beta), 0, G_SHM, 0},
    {"beta_shm_far", offsetof(clt__cost_model, shm.beta_far), 0, G_SHM_FAR, 0},
    {"shm_far_bytes", offsetof(clt__cost_model, shm.far_bytes), 0, G_SHM_FAR, 1},
    {"alpha_ring", offsetof(clt__cost_model, ring.alpha), 0, G_RING, 0},
    {"beta_ring", offsetof(clt__cost_model, ring.beta), 0, G_RING, 0},
    {"beta_ring_far", offsetof(clt__cost_model, ring.beta_far), 0, G_RING_FAR, 0},
    {"ring_far_bytes", offsetof(clt__cost_model, ring.far_bytes), 0, G_RING_FAR, 1},
};
#define NFIELDS_MODEL (sizeof fields / sizeof fields[0])

static double *field(clt__cost_model *m, size_t i) { return (double *)(void *)((char *)m + fields[i].at); }

/* "alpha_shm and beta_shm": a group's keys, for messages. */
static void group_keys(int g, char *out, size_t len) {
  const char *k[2] = {NULL, NULL};
  for (size_t i = 0, n = 0; i < NFIELDS_MODEL && n < 2; i++)
    if (fields[i].group == g) k[n++] = fields[i].key;
  snprintf(out, len, "%s and %s", k[0], k[1]);
}

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
  char keys[64], needs[64];
  if (!json_is_object(root)) {
    rc = clt__error(CLT_EINVAL, "CLT_COMM_MODEL='%s': not a JSON object of the model's values", path);
    goto done;
  }
  int found[NGROUPS] = {0}, count[NGROUPS] = {0};
  const char *missing[NGROUPS] = {NULL};
  for (size_t i = 0; i < NFIELDS_MODEL; i++) {
    int g = fields[i].group;
    json_t *v = json_object_get(root, fields[i].key);
    count[g]++;
    if (!v && g != G_ALWAYS) {
      missing[g] = fields[i].key;
      continue;
    }
    found[g]++;
    if (!v) {
      rc = clt__error(CLT_EINVAL, "CLT_COMM_MODEL='%s': no \"%s\" (seconds%s): the file needs alpha_intra, "
                                  "beta_intra, alpha_inter, beta_inter and gamma", path, fields[i].key,
                      fields[i].key[0] == 'a' ? " per message" : " per byte");
      goto done;
    }
    double x = json_number_value(v), max = fields[i].bytes ? 0x1p50 : 1;
    if (!json_is_number(v) || !isfinite(x) || x < 0 || x > max) {
      rc = clt__error(CLT_EINVAL, "CLT_COMM_MODEL='%s': \"%s\" must be a number %s", path, fields[i].key,
                      fields[i].bytes ? "of bytes from 0 to 2^50" : "of seconds from 0 to 1");
      goto done;
    }
    *field(m, i) = x;
  }
  /* One without the other would leave half of a form at 0. */
  for (int g = 1; g < NGROUPS; g++) {
    group_keys(g, keys, sizeof keys);
    if (found[g] && found[g] < count[g]) {
      rc = clt__error(CLT_EINVAL, "CLT_COMM_MODEL='%s': no \"%s\": %s come together (written by `cltrain bench "
                                  "allreduce --fit` on one node), or neither", path, missing[g], keys);
      goto done;
    }
    if (found[g] && group_needs[g] != G_ALWAYS && !found[group_needs[g]]) {
      group_keys(group_needs[g], needs, sizeof needs);
      rc = clt__error(CLT_EINVAL, "CLT_COMM_MODEL='%s': %s without %s (the far bytes' cost adds to those)", path,
                      keys, needs);
      goto done;
    }
  }
  m->shm.set = found[G_SHM] > 0;
  m->ring.set = found[G_RING] > 0;
  clt__strlcpy(m->source, path, sizeof m->source);
done:
  json_decref(root);
  return rc;
}

/* "auto, ring, ...": the table's names, written once. */
static char names[CLT__NALGORITHMS * 32];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_write(void) {
  size_t at = (size_t)snprintf(names, sizeof names, "auto");
  for (int i = 0; i < CLT__NALGORITHMS && at < sizeof names; i++)
    at += (size_t)snprintf(names + at, sizeof names - at, ", %s", algorithms[i].name);
}

const char *clt_allreduce_algorithms(void) {
  pthread_once(&names_once, names_write);
  return names;
}

int clt_comm_model_predict(const clt_comm *comm, const char *algorithm, size_t bytes, double *seconds) {
  CLT_HANDLE(comm, "communicator");
  CLT_ARG(algorithm);
  CLT_ARG(seconds);
  int a = clt__algorithm_parse(algorithm);
  if (a < 0)
    return clt__error(CLT_EINVAL, "clt_comm_model_predict: unknown algorithm '%s' (%s)", algorithm,
                      clt_allreduce_algorithms() + strlen("auto, "));
  *seconds = comm->size == 1 ? 0 : clt__algorithm_find((enum clt__algorithm)a)->cost(comm, (double)bytes);
  return CLT_OK;
}
