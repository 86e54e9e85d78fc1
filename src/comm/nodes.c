/*
 * nodes.c: which ranks share a node. A communicator learns it once, when it
 * is made: from MPI_COMM_TYPE_SHARED (transport_mpi.c), or from
 * CLT_NODE_SIZE, which pretends nodes so that the two-level all-reduce can
 * be tested and measured on one machine:
 *
 *   CLT_NODE_SIZE=k       consecutive groups of k ranks (5 ranks, k = 2:
 *                         nodes of 2, 2 and 1)
 *   CLT_NODE_SIZE=3,1,2   consecutive groups of these sizes, which must add
 *                         up to the number of ranks (nodes of different
 *                         sizes, as when a scheduler does not pack ranks)
 *
 * From that, the tables the two-level all-reduce runs on (comm_internal.h:
 * clt__layout): every rank's node, this node's ranks, and which rank of
 * each node carries each of the lmax segments between nodes.
 */
#include "comm_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int clt__layout_env(int size, int *node_of, int *pretend) {
  const char *v = getenv("CLT_NODE_SIZE");
  *pretend = 0;
  if (!v || !*v) return CLT_OK;
  long nsizes = 0, first = 0, total = 0;
  int at = 0;
  for (const char *p = v;;) {
    char *end;
    errno = 0;
    long k = strtol(p, &end, 10);
    if (end == p || errno || *p == '-' || *p == '+' || k < 1 || k > 1 << 20 || (*end && *end != ','))
      return clt__error(CLT_EINVAL, "CLT_NODE_SIZE='%s' is not a number of ranks per node: give k (consecutive "
                                    "groups of k ranks, e.g. 4) or the sizes of the nodes in rank order (e.g. 3,2)",
                        v);
    if (nsizes == 0) first = k;
    for (long i = 0; i < k && at < size; i++) node_of[at++] = (int)nsizes;
    nsizes++, total += k;
    if (!*end) break;
    p = end + 1;
  }
  if (nsizes == 1) {
    /* One number: groups of that many, the last one smaller if need be. */
    for (int r = 0; r < size; r++) node_of[r] = (int)(r / first);
  } else if (total != size) {
    return clt__error(CLT_EINVAL, "CLT_NODE_SIZE='%s': the node sizes add up to %ld ranks, but the job has %d: give "
                                  "one size per node, adding up to %d (or one k for groups of k)",
                      v, total, size, size);
  }
  *pretend = 1;
  return CLT_OK;
}

void clt__layout_free(clt__layout *l) {
  free(l->node_of);
  free(l->node_size);
  free(l->local);
  free(l->carrier);
  memset(l, 0, sizeof *l);
}

int clt__layout_make(clt_comm *comm, const int *node_of) {
  clt__layout *l = &comm->layout;
  int n = comm->size;
  clt__layout_free(l);
  int *rename = clt__calloc((size_t)n, sizeof *rename);
  l->node_of = clt__calloc((size_t)n, sizeof *l->node_of);
  l->node_size = clt__calloc((size_t)n, sizeof *l->node_size);
  if (!rename || !l->node_of || !l->node_size) goto nomem;
  /* Nodes numbered in the order of their lowest rank. */
  for (int r = 0; r < n; r++) rename[r] = -1;
  for (int r = 0; r < n; r++) {
    int id = node_of ? node_of[r] : 0;
    if (id < 0 || id >= n) {
      free(rename);
      clt__layout_free(l);
      return clt__error(CLT_EINTERNAL, "rank %d: node %d of rank %d is out of range", comm->rank, id, r);
    }
    if (rename[id] < 0) rename[id] = l->nnodes++;
    l->node_of[r] = rename[id];
    l->node_size[l->node_of[r]]++;
  }
  free(rename);
  rename = NULL;
  l->node = l->node_of[comm->rank];
  l->lmin = n, l->lmax = 0;
  for (int k = 0; k < l->nnodes; k++) {
    if (l->node_size[k] < l->lmin) l->lmin = l->node_size[k];
    if (l->node_size[k] > l->lmax) l->lmax = l->node_size[k];
  }
  comm->local_size = l->node_size[l->node];
  if (!(l->local = clt__calloc((size_t)comm->local_size, sizeof *l->local)) ||
      !(l->carrier = clt__calloc((size_t)l->nnodes * (size_t)l->lmax, sizeof *l->carrier)))
    goto nomem;
  /* Local ranks in rank order, and the carriers of each node's segments. */
  int *seen = clt__calloc((size_t)l->nnodes, sizeof *seen);
  if (!seen) goto nomem;
  for (int r = 0; r < n; r++) {
    int k = l->node_of[r], lr = seen[k]++, L = l->node_size[k];
    if (k == l->node) {
      l->local[lr] = r;
      if (r == comm->rank) comm->local_rank = lr;
    }
    for (int j = clt__layout_first_seg(l->lmax, L, lr); j < clt__layout_first_seg(l->lmax, L, lr + 1); j++)
      l->carrier[(size_t)k * (size_t)l->lmax + (size_t)j] = r;
  }
  free(seen);
  return CLT_OK;
nomem:
  free(rename);
  clt__layout_free(l);
  return CLT_ENOMEM;
}
