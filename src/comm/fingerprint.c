/*
 * fingerprint.c: before a collective whose shape the ranks must agree on
 * (a plan, a broadcast, an allgather), every rank sends every other rank
 * what it is about to do (kind, count, type, op, root, chunk, per-rank counts)
 * over the ring. Every rank then sees every fingerprint, so a mismatch is
 * the same error on every rank, naming the ranks and values, instead of a
 * hang or a buffer of garbage. Nothing is left in flight, so the
 * communicator stays usable after a mismatch.
 */
#include "comm_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NFIELDS = 9 };

static const char *kind_name(int32_t kind) {
  switch (kind) {
  case CLT__FP_ALLREDUCE_PLAN: return "making an allreduce plan";
  case CLT__FP_BCAST: return "broadcasting";
  case CLT__FP_ALLGATHER: return "gathering (allgather)";
  case CLT__FP_REDUCE_SCATTER_PLAN: return "making a reduce-scatter plan";
  case CLT__FP_ALLGATHER_PLAN: return "making an allgather plan";
  }
  return "doing something unknown";
}

/* The value of field f of fingerprint p, as text. */
static void field_text(int f, const clt__fingerprint *p, char *buf, size_t len) {
  switch (f) {
  case 0: snprintf(buf, len, "%s", kind_name(p->kind)); break;
  case 1: snprintf(buf, len, "%" PRIu64, p->count); break;
  case 2: snprintf(buf, len, "%s", clt_dtype_name((clt_dtype)p->dtype)); break;
  case 3: snprintf(buf, len, "%s", clt_reduce_op_name((clt_reduce_op)p->op)); break;
  case 4: snprintf(buf, len, "%d", (int)p->root); break;
  case 5: snprintf(buf, len, "%" PRIu64, p->chunk); break;
  case 6: snprintf(buf, len, "%d", (int)p->small); break;
  case 7:
    if (p->parts) snprintf(buf, len, "counts given (hash %016" PRIx64 ")", p->parts);
    else snprintf(buf, len, "none (the all-reduce's segments)");
    break;
  case 8: {
    const clt__algorithm_desc *a = clt__algorithm_find((enum clt__algorithm)p->algorithm);
    snprintf(buf, len, "%s", a ? a->name : "?");
    break;
  }
  default: buf[0] = '\0';
  }
}

static int field_differs(int f, const clt__fingerprint *a, const clt__fingerprint *b) {
  switch (f) {
  case 0: return a->kind != b->kind;
  case 1: return a->count != b->count;
  case 2: return a->dtype != b->dtype;
  case 3: return a->op != b->op;
  case 4: return a->root != b->root;
  case 5: return a->chunk != b->chunk;
  case 6: return a->small != b->small;
  case 7: return a->parts != b->parts;
  case 8: return a->algorithm != b->algorithm;
  }
  return 0;
}

static const char *field_name(int f, int32_t kind) {
  static const char *names[] = {"what they are doing", "count",       "dtype",
                                "op",                  "root",        "chunk bytes",
                                "CLT_ALLREDUCE_SMALL", "per-rank counts",
                                "algorithm (CLT_ALLREDUCE, CLT_COMM_MODEL, CLT_NODE_SIZE)"};
  if (f == 1 && (kind == CLT__FP_BCAST || kind == CLT__FP_ALLGATHER)) return "bytes";
  return names[f];
}

/* "count: 1000 on rank 0 but 1001 on rank 2, 999 on rank 3" for each field
 * that differs from rank 0's. */
static int mismatch_error(clt__op *op, const clt__fingerprint *all) {
  clt_comm *comm = op->comm;
  char msg[3072];
  size_t used = (size_t)snprintf(msg, sizeof msg, "rank %d: %s #%llu: the ranks disagree", comm->rank, op->name,
                                 (unsigned long long)op->number);
  /* A different kind makes the other fields meaningless: report it alone. */
  int last_field = NFIELDS - 1;
  for (int r = 1; r < comm->size; r++)
    if (field_differs(0, &all[0], &all[r])) last_field = 0;
  for (int f = 0; f <= last_field && used < sizeof msg; f++) {
    int shown = 0;
    char v0[96], v[96];
    field_text(f, &all[0], v0, sizeof v0);
    for (int r = 1; r < comm->size && used < sizeof msg; r++) {
      if (!field_differs(f, &all[0], &all[r])) continue;
      field_text(f, &all[r], v, sizeof v);
      if (shown == 0)
        used += (size_t)snprintf(msg + used, sizeof msg - used, "; %s: %s on rank 0 but %s on rank %d",
                                 field_name(f, all[0].kind), v0, v, r);
      else if (shown < 8)
        used += (size_t)snprintf(msg + used, sizeof msg - used, ", %s on rank %d", v, r);
      else if (shown == 8)
        used += (size_t)snprintf(msg + used, sizeof msg - used, ", ...");
      shown++;
    }
  }
  if (used < sizeof msg)
    snprintf(msg + used, sizeof msg - used, "; every rank must make the same call with the same arguments");
  return clt__error(CLT_EMISMATCH, "%s", msg);
}

int clt__fingerprint_check(clt__op *op, const clt__fingerprint *mine, clt__fingerprint *all_out) {
  int rc = CLT_OK;
  clt_comm *comm = op->comm;
  const size_t fp = sizeof(clt__fingerprint);
  clt__fingerprint *all = all_out ? all_out : clt__calloc((size_t)comm->size, fp);
  size_t *seg_off = clt__calloc((size_t)comm->size + 1, sizeof *seg_off);
  clt__ring_sched sched = {0};
  if (!all || !seg_off) {
    rc = CLT_ENOMEM;
    goto done;
  }
  all[comm->rank] = *mine;
  for (int j = 0; j <= comm->size; j++) seg_off[j] = (size_t)j * fp;
  CLT_TRY(clt__ring_sched_create(comm->rank, comm->size, seg_off, seg_off + 1, fp, 0, comm->size - 1, &sched));
  clt__ring_io io = {.base = (unsigned char *)all, .tag_phase = CLT__TAG_CHECK};
  CLT_TRY(clt__ring_exec(op, &sched, &io));
  /* replicas may differ (ranks drive different numbers of devices). */
  for (int r = 1; r < comm->size; r++)
    for (int f = 0; f < NFIELDS; f++)
      if (field_differs(f, &all[0], &all[r])) {
        rc = mismatch_error(op, all);
        goto done;
      }
done:
fail:
  clt__ring_sched_free(&sched);
  free(seg_off);
  if (all != all_out) free(all);
  return rc;
}
