/*
 * comm.c: the communicator object: the one-rank communicator, the settings
 * every communicator reads from the environment (CLT_TIMEOUT,
 * CLT_ALLREDUCE_CHUNK), accessors, and the default device of a rank.
 * MPI communicators are made in transport_mpi.c.
 */
#include "comm_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CLT__DEFAULT_TIMEOUT_S 300.0
/* Chunks: with 3 or more ranks the ring has 4 or more steps and a chunk is
 * passed on while the next arrives, so smaller chunks pipeline better
 * (256 KiB stays in L2 while it is reduced and sent on); with 2 ranks there
 * are only 2 steps and fewer, larger messages win. bench/allreduce.sh. */
#define CLT__DEFAULT_CHUNK_BYTES ((size_t)256 << 10)
#define CLT__DEFAULT_CHUNK_BYTES_2 ((size_t)1 << 20)
/* Up to this many bytes the number of steps matters more than bandwidth:
 * the small-message algorithms take 1 to log2 N + 2 steps where the ring
 * takes 2 (N - 1). Measured with bench/allreduce.sh. */
#define CLT__DEFAULT_SMALL_BYTES ((size_t)32 << 10)
/* Messages stay well below INT_MAX bytes (MPI counts are int). */
#define CLT__MAX_CHUNK_BYTES ((size_t)1 << 30)

int clt__parse_bytes(const char *text, size_t max, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text || errno || text[0] == '-') return -1;
  unsigned long long mult = 1;
  if (*end == 'k' || *end == 'K') mult = 1ull << 10, end++;
  else if (*end == 'm' || *end == 'M') mult = 1ull << 20, end++;
  else if (*end == 'g' || *end == 'G') mult = 1ull << 30, end++;
  if (*end == 'i' && mult > 1) end++;
  if ((*end == 'b' || *end == 'B') && end[1] == '\0') end++;
  if (*end || v == 0 || v > max / mult) return -1;
  *out = (size_t)(v * mult);
  return 0;
}

int clt__comm_init_env(clt_comm *comm) {
  int rc = clt__env_check(); /* the on/off switches, which every rank reads alike */
  if (rc < 0) return rc;
  comm->timeout_s = CLT__DEFAULT_TIMEOUT_S;
  comm->chunk_bytes = comm->size == 2 ? CLT__DEFAULT_CHUNK_BYTES_2 : CLT__DEFAULT_CHUNK_BYTES;
  comm->small_bytes = CLT__DEFAULT_SMALL_BYTES;
  const char *t = getenv("CLT_TIMEOUT");
  if (t && *t) {
    char *end;
    errno = 0;
    double v = strtod(t, &end);
    if (end != t && *end == 's') end++;
    if (end == t || *end || errno || !isfinite(v) || v <= 0 || v > 1e9)
      return clt__error(CLT_EINVAL,
                        "CLT_TIMEOUT='%s' is not a number of seconds: give a positive number such as 300 or 2.5",
                        t);
    comm->timeout_s = v;
  }
  const char *c = getenv("CLT_ALLREDUCE_CHUNK");
  /* The plan's own limits: at least one element of the largest type. */
  comm->chunk_set = c && *c;
  if (c && *c && (clt__parse_bytes(c, CLT__MAX_CHUNK_BYTES, &comm->chunk_bytes) < 0 || comm->chunk_bytes < 4))
    return clt__error(CLT_EINVAL,
                      "CLT_ALLREDUCE_CHUNK='%s' is not a size in bytes from 4 (one float) to 1G: give e.g. 262144, "
                      "256K or 1M", c);
  const char *a = getenv("CLT_ALLREDUCE");
  comm->algorithm = -1;
  if (a && *a && (comm->algorithm = clt__algorithm_parse(a)) < -1)
    return clt__error(CLT_EINVAL, "CLT_ALLREDUCE='%s' is not an all-reduce algorithm: give one of %s", a,
                      clt_allreduce_algorithms());
  rc = clt__model_init(&comm->model);
  if (rc < 0) return rc;
  /* Without a fitted model the measured threshold decides small messages. */
  comm->small_set = strcmp(comm->model.source, "defaults") == 0;
  const char *m = getenv("CLT_ALLREDUCE_SMALL");
  if (m && *m) {
    comm->small_set = comm->small_given = 1;
    if (strcmp(m, "0") == 0)
      comm->small_bytes = 0; /* always the ring */
    else if (clt__parse_bytes(m, (size_t)1 << 30, &comm->small_bytes) < 0)
      return clt__error(CLT_EINVAL,
                        "CLT_ALLREDUCE_SMALL='%s' is not a size in bytes from 0 to 1G: give e.g. 0, 32768 or 32K", m);
  }
  return CLT_OK;
}

int clt_comm_create_local(clt_comm **out) {
  int rc;
  CLT_ARG(out);
  *out = NULL;
  clt_comm *comm = clt__calloc(1, sizeof *comm);
  if (!comm) return CLT_ENOMEM;
  comm->size = comm->local_size = 1;
  comm->own_cores = 1; /* one rank: a core of its own */
  comm->tag_ops = 1;
  if ((rc = clt__comm_init_env(comm)) < 0 || (rc = clt__layout_make(comm, NULL)) < 0) {
    clt__layout_free(&comm->layout);
    free(comm);
    return rc;
  }
  *out = comm;
  return CLT_OK;
}

void clt_comm_destroy(clt_comm *comm) {
  if (!comm) return;
  if (comm->mpi) clt__tp_destroy(comm);
  clt__comm_arena_free(comm);
  clt__layout_free(&comm->layout);
  free(comm->broken_detail);
  free(comm->diag_out);
  free(comm);
}

int clt_comm_rank(const clt_comm *comm) { return comm ? comm->rank : 0; }
int clt_comm_size(const clt_comm *comm) { return comm ? comm->size : 0; }
int clt_comm_local_rank(const clt_comm *comm) { return comm ? comm->local_rank : 0; }
int clt_comm_local_size(const clt_comm *comm) { return comm ? comm->local_size : 0; }
int clt_comm_node(const clt_comm *comm) { return comm ? comm->layout.node : 0; }
int clt_comm_node_count(const clt_comm *comm) { return comm ? comm->layout.nnodes : 0; }

int clt_comm_set_allreduce(clt_comm *comm, const char *algorithm) {
  CLT_HANDLE(comm, "communicator");
  CLT_ARG(algorithm);
  int a = clt__algorithm_parse(algorithm);
  if (a < -1)
    return clt__error(CLT_EINVAL, "clt_comm_set_allreduce: %s: give one of %s", algorithm, clt_allreduce_algorithms());
  comm->algorithm = a;
  return CLT_OK;
}

void clt_comm_bytes_sent(const clt_comm *comm, uint64_t *intra, uint64_t *inter) {
  if (intra) *intra = comm ? comm->sent[0] : 0;
  if (inter) *inter = comm ? comm->sent[1] : 0;
}

double clt_comm_timeout(const clt_comm *comm) { return comm ? comm->timeout_s : 0; }
size_t clt_comm_chunk_bytes(const clt_comm *comm) { return comm ? comm->chunk_bytes : 0; }

size_t clt_comm_shm_piece_bytes(const clt_comm *comm) { return comm ? clt__shm_piece_bytes(comm, 0) : 0; }

int clt_comm_set_timeout(clt_comm *comm, double seconds) {
  CLT_HANDLE(comm, "communicator");
  if (!isfinite(seconds) || seconds <= 0 || seconds > 1e9)
    return clt__error(CLT_EINVAL, "clt_comm_set_timeout: %g is not a positive number of seconds", seconds);
  comm->timeout_s = seconds;
  return CLT_OK;
}

int clt_comm_default_device(const clt_comm *comm, const clt_devices *devs) {
  CLT_HANDLE(comm, "communicator");
  CLT_HANDLE(devs, "device list");
  int n = clt_devices_count(devs);
  if (n <= 0) return clt__error(CLT_ENODEV, "rank %d has no device to choose from", comm->rank);
  /* Ranks on one node take devices round-robin by local rank, so one rank
   * per GPU is what `mpirun -np <GPUs per node>` gives without any flag. */
  return comm->local_rank % n;
}

const char *clt_reduce_op_name(clt_reduce_op op) {
  switch (op) {
  case CLT_SUM: return "sum";
  case CLT_AVG: return "avg";
  }
  return "?";
}
