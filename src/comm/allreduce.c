/*
 * allreduce.c: all-reduce plans: the cross-rank check when a plan is made,
 * the choice of algorithm (model.c's table: the pipelined ring in ring.c,
 * the small-message ones of small.c, Rabenseifner's in halving.c,
 * two-level in twolevel.c, shared memory in shm_plan.c), whose row then
 * makes, runs and frees the plan's own state; the element types'
 * reductions, and runs on host buffers. Device buffers are staged in
 * allreduce_device.c.
 */
#include "comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLT__MAX_REPLICAS 1024

/* ---- element types ------------------------------------------------------- */

/* The reduction runs at memory speed only when vectorised, which -O2 does
 * not do for these loops; GCC and Clang vector types do it portably
 * (memcpy makes the unaligned loads legal). Each element is one addition
 * either way, so the bits do not depend on it. */
#if defined(__GNUC__)
typedef float clt__v4f __attribute__((vector_size(16)));
#  define CLT__VEC_LOOP(n, i, body4)                                                                        \
    for (; i + 8 <= n; i += 8) {                                                                         \
      body4(i);                                                                                          \
      body4(i + 4);                                                                                      \
    }
#else
#  define CLT__VEC_LOOP(n, i, body4)
#endif

static void add_f32(void *dst, const void *src, size_t n) {
  float *restrict d = dst;
  const float *restrict s = src;
  size_t i = 0;
#define ADD4(j)                                                                                            \
  do {                                                                                                     \
    clt__v4f a, b;                                                                                         \
    memcpy(&a, d + (j), sizeof a);                                                                         \
    memcpy(&b, s + (j), sizeof b);                                                                         \
    a += b;                                                                                                \
    memcpy(d + (j), &a, sizeof a);                                                                         \
  } while (0)
  CLT__VEC_LOOP(n, i, ADD4)
#undef ADD4
  for (; i < n; i++) d[i] += s[i];
}

static void divide_f32(void *x, size_t n, double by) {
  float *restrict v = x;
  const float b = (float)by;
  size_t i = 0;
#define DIV4(j)                                                                                            \
  do {                                                                                                     \
    clt__v4f a;                                                                                            \
    memcpy(&a, v + (j), sizeof a);                                                                         \
    a /= b;                                                                                                \
    memcpy(v + (j), &a, sizeof a);                                                                         \
  } while (0)
  CLT__VEC_LOOP(n, i, DIV4)
#undef DIV4
  for (; i < n; i++) v[i] /= b;
}

/* Several buffers in a fixed order: float addition rounds once per add
 * whatever the grouping, so this is the pairwise add repeated. */
static void sum_f32(void *dst, const void *const *src, int nsrc, size_t n) {
  for (int k = 0; k < nsrc; k++) add_f32(dst, src[k], n);
}

/* The same sums in one pass, each element's addends loaded once and the
 * result stored to dst and dst2 (unless NULL), divided when by > 1: what
 * a copy, sum_f32, divide_f32 and two copies give, bit for bit. dst may be
 * one of the sources (the same elements are read before they are
 * written). */
static void sum_to_f32(void *dst, void *dst2, const void *const *src, int nsrc, size_t n, double by) {
  float *d = dst, *d2 = dst2;
  const float *const *s = (const float *const *)src;
  const float b = (float)by;
  const int divide = by > 1;
  size_t i = 0;
#define SUM4(j)                                                                                            \
  do {                                                                                                     \
    clt__v4f a, x;                                                                                         \
    memcpy(&a, s[0] + (j), sizeof a);                                                                      \
    for (int k = 1; k < nsrc; k++) {                                                                       \
      memcpy(&x, s[k] + (j), sizeof x);                                                                    \
      a += x;                                                                                              \
    }                                                                                                      \
    if (divide) a /= b;                                                                                    \
    memcpy(d + (j), &a, sizeof a);                                                                         \
    if (d2) memcpy(d2 + (j), &a, sizeof a);                                                                \
  } while (0)
  CLT__VEC_LOOP(n, i, SUM4)
#undef SUM4
  for (; i < n; i++) {
    float a = s[0][i];
    for (int k = 1; k < nsrc; k++) a += s[k][i];
    if (divide) a /= b;
    d[i] = a;
    if (d2) d2[i] = a;
  }
}

/* fp16 (IEEE binary16 in uint16_t): every step converts to float, adds
 * (or divides) in float and rounds to half once, to nearest even; inf and
 * NaN carry through, so one rank's overflow reaches every rank (src/core/half.c). */
static void add_f16(void *dst, const void *src, size_t n) {
  const uint16_t *one[1] = {src};
  clt__halves_sum(dst, one, 1, n);
}

static void sum_f16(void *dst, const void *const *src, int nsrc, size_t n) {
  clt__halves_sum(dst, (const uint16_t *const *)src, nsrc, n);
}

static void divide_f16(void *x, size_t n, double by) { clt__halves_divide(x, n, (float)by); }

static const clt__dtype_ops dtype_ops[] = {
    {CLT_F32, 4, add_f32, sum_f32, divide_f32, sum_to_f32},
    {CLT_F16, 2, add_f16, sum_f16, divide_f16, NULL},
};

const clt__dtype_ops *clt__dtype_ops_find(clt_dtype dtype) {
  for (size_t i = 0; i < sizeof dtype_ops / sizeof dtype_ops[0]; i++)
    if (dtype_ops[i].dtype == dtype) return &dtype_ops[i];
  return NULL;
}

/* ---- plans ------------------------------------------------------------------ */

const clt__coll_kind clt__kind_allreduce = {"allreduce", "clt_allreduce_plan_create", "clt_allreduce_run",
                                            "clt_allreduce_run_devices", CLT__FP_ALLREDUCE_PLAN, 1, 1, 0};
const clt__coll_kind clt__kind_reduce_scatter = {"reduce-scatter", "clt_reduce_scatter_plan_create",
                                                 "clt_reduce_scatter_run", "clt_reduce_scatter_run_devices",
                                                 CLT__FP_REDUCE_SCATTER_PLAN, 1, 0, 0};
const clt__coll_kind clt__kind_allgather = {"allgather", "clt_allgather_plan_create", "clt_allgather_run",
                                            "clt_allgather_run_devices", CLT__FP_ALLGATHER_PLAN, 0, 1, 0};
/* The library's own allgathers whose callers read and write the blocks in
 * place (halves.c: clt__allgather_plan_create_window). */
const clt__coll_kind clt__kind_allgather_window = {"allgather", "clt__allgather_plan_create_window",
                                                   "clt_allgather_run", "clt_allgather_run_devices",
                                                   CLT__FP_ALLGATHER_PLAN, 0, 1, 1};

static int plan_steps(const clt_allreduce_plan *plan) {
  if (plan->comm->size == 1 || plan->count == 0) return 0;
  return plan->alg->steps(plan);
}

/* FNV-1a of the per-rank counts: what the ranks compare (0 is kept for
 * "none given"). */
static uint64_t counts_hash(const size_t *counts, int n) {
  uint64_t h = 1469598103934665603ull;
  if (!counts) return 0;
  for (int r = 0; r < n; r++) {
    uint64_t v = counts[r];
    for (int b = 0; b < 8; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
  }
  return h ? h : 1;
}

/* Parts and the ring's segment table. Rank r's part is the segment the
 * reduce-scatter finishes there, ring segment (r + 1) mod N: with the
 * all-reduce's segments that is segment (r + 1) mod N of the buffer; with
 * counts given, rank r's part is the r-th block of the buffer, and ring
 * segment j is rank (j - 1) mod N's block. */
static void lay_out(clt_allreduce_plan *plan, const size_t *counts) {
  int n = plan->comm->size;
  clt__segments(plan->count, n, plan->seg_off);
  size_t at = 0;
  for (int r = 0; r < n; r++) {
    if (counts) {
      plan->part_lo[r] = at;
      plan->part_hi[r] = at += counts[r];
    } else {
      plan->part_lo[r] = plan->seg_off[(r + 1) % n];
      plan->part_hi[r] = plan->seg_off[(r + 1) % n + 1];
    }
  }
  for (int j = 0; j < n; j++) {
    plan->seg_lo[j] = plan->part_lo[(j + n - 1) % n];
    plan->seg_hi[j] = plan->part_hi[(j + n - 1) % n];
  }
}

/* The algorithm: a function of what every rank should hold the same
 * (count, type, the layout, the model, CLT_ALLREDUCE), checked with the
 * rest. A reduce-scatter takes the all-reduce's algorithm, so that a part
 * has the bits of the all-reduce of the same size; the two-level one is
 * an all-reduce only (a reduce-scatter keeps the ring there). An
 * allgather only copies: the ring. */
static enum clt__algorithm choose_algorithm(const clt__coll_kind *kind, const clt_comm *comm, size_t count,
                                            const clt__dtype_ops *ops) {
  enum clt__algorithm algorithm = CLT__RING;
  if (comm->size > 1 && kind->reduces && ops && count <= SIZE_MAX / ops->esize) {
    algorithm = clt__algorithm_choose(comm, count * ops->esize);
    if (clt__algorithm_find(algorithm)->allreduce_only && kind != &clt__kind_allreduce) algorithm = CLT__RING;
  }
  /* An allgather in place: a window of its own where the node's ranks share
   * memory, unless CLT_ALLREDUCE forces an algorithm that is not shm (ring:
   * the copies through MPI, as a public allgather plan). */
  if (comm->size > 1 && kind->window && clt__algorithm_find(CLT__SHM)->usable(comm, 0) &&
      (comm->algorithm < 0 || clt__algorithm_choose(comm, 0) == CLT__SHM))
    algorithm = CLT__SHM;
  return algorithm;
}

/* The element type, the op, the chunk and the count, once every rank has
 * the same ones (so every rank fails alike). */
static int check_request(const char *fn, const clt__coll_kind *kind, clt_dtype dtype, clt_reduce_op op,
                         size_t count, size_t chunk_bytes, const clt__dtype_ops *ops) {
  if (!ops)
    return clt__error(CLT_EUNSUPPORTED, "%s: %s %s is not implemented (f32 and f16 are)", fn, clt_dtype_name(dtype),
                      kind->op_name);
  if (op != CLT_SUM && op != CLT_AVG)
    return clt__error(CLT_EINVAL, "%s: unknown op %d (CLT_SUM or CLT_AVG)", fn, (int)op);
  if (chunk_bytes < ops->esize || chunk_bytes > ((size_t)1 << 30))
    return clt__error(CLT_EINVAL, "%s: chunk of %zu bytes (from %zu to 1 GiB)", fn, chunk_bytes, ops->esize);
  if (count > SIZE_MAX / ops->esize)
    return clt__error(CLT_EINVAL, "%s: %zu elements do not fit in memory", fn, count);
  return CLT_OK;
}

/* The per-rank counts, when given, add up to count exactly. */
static int check_counts(const char *fn, int size, size_t count, const size_t *counts) {
  size_t sum = 0;
  if (!counts) return CLT_OK;
  for (int r = 0; r < size; r++) {
    if (counts[r] > count - sum)
      return clt__error(CLT_EINVAL, "%s: the per-rank counts add up to more than count %zu (by rank %d's %zu)", fn,
                        count, r, counts[r]);
    sum += counts[r];
  }
  if (sum != count)
    return clt__error(CLT_EINVAL, "%s: the per-rank counts add up to %zu, not count %zu", fn, sum, count);
  return CLT_OK;
}

/* Every rank's replicas (from the fingerprints), within bounds. */
static int check_replicas(const char *fn, int size, const clt__fingerprint *all) {
  for (int r = 0; r < size; r++)
    if (all[r].replicas < 1 || all[r].replicas > CLT__MAX_REPLICAS)
      return clt__error(CLT_EINVAL, "%s: rank %d gives %d replicas (1 to %d)", fn, r, (int)all[r].replicas,
                        CLT__MAX_REPLICAS);
  return CLT_OK;
}

/* The segment table and the parts (lay_out), in one allocation after the
 * offsets. */
static int alloc_layout(clt_allreduce_plan *plan, const size_t *counts) {
  size_t n = (size_t)plan->comm->size;
  if (!(plan->seg_off = clt__calloc(n + 1, sizeof *plan->seg_off)) ||
      !(plan->seg_lo = clt__calloc(4 * n, sizeof *plan->seg_lo)))
    return CLT_ENOMEM;
  plan->seg_hi = plan->seg_lo + n;
  plan->part_lo = plan->seg_lo + 2 * n;
  plan->part_hi = plan->seg_lo + 3 * n;
  lay_out(plan, counts);
  return CLT_OK;
}

int clt__plan_create(const clt__coll_kind *kind, clt_comm *comm, size_t count, const size_t *counts, clt_dtype dtype,
                     clt_reduce_op op, const clt_allreduce_opts *opts, clt_allreduce_plan **out) {
  int rc = CLT_OK;
  clt_allreduce_plan *plan = NULL;
  clt__fingerprint *all = NULL;
  clt__op o;
  const char *fn = kind->create_fn;

  if (!out) return clt__null_arg(fn, "out", NULL);
  *out = NULL;
  if (!comm) return clt__null_arg(fn, "comm", "communicator");
  size_t chunk_bytes = opts && opts->chunk_bytes ? opts->chunk_bytes : comm->chunk_bytes;
  int replicas = opts && opts->replicas ? opts->replicas : 1;
  if (!kind->reduces) op = CLT_SUM; /* nothing is reduced: the op is not part of an allgather */

  /* Compare first, complain later: a rank that returned early on a local
   * error would leave the others waiting. After the check every rank holds
   * the same values and fails the same checks below. */
  char what[48];
  snprintf(what, sizeof what, "%s plan", kind->op_name);
  CLT_TRY(clt__op_begin(comm, what, comm->size - 1, &o));
  const clt__dtype_ops *ops = clt__dtype_ops_find(dtype);
  enum clt__algorithm algorithm = choose_algorithm(kind, comm, count, ops);
  clt__fingerprint mine = {.kind = kind->fp_kind, .dtype = (int32_t)dtype, .op = (int32_t)op,
                           .count = count, .chunk = chunk_bytes, .replicas = replicas,
                           .small = (int32_t)comm->small_bytes, .parts = counts_hash(counts, comm->size),
                           .algorithm = (int32_t)algorithm};
  if (!(all = clt__calloc((size_t)comm->size, sizeof *all))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  CLT_TRY(clt__fingerprint_check(&o, &mine, all));
  CLT_TRY(check_request(fn, kind, dtype, op, count, chunk_bytes, ops));
  CLT_TRY(check_counts(fn, comm->size, count, counts));
  CLT_TRY(check_replicas(fn, comm->size, all));

  if (!(plan = clt__calloc(1, sizeof(struct clt_reduce_scatter_plan)))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  plan->kind = kind;
  plan->comm = comm;
  plan->count = count;
  plan->dtype = dtype;
  plan->op = op;
  plan->ops = ops;
  plan->chunk_bytes = chunk_bytes;
  plan->chunk_elems = chunk_bytes / ops->esize;
  plan->chunk_given = (opts && opts->chunk_bytes) || comm->chunk_set;
  plan->replicas = replicas;
  plan->natural = !counts;
  for (int r = 0; r < comm->size; r++) plan->total_replicas += all[r].replicas;
  plan->alg = clt__algorithm_find(algorithm);
  CLT_TRY(alloc_layout(plan, counts));
  CLT_TRY(plan->alg->create(plan)); /* its schedules, slots and windows */
  clt__log(CLT_LOG_DEBUG, "rank %d: %s #%llu: %zu x %s %s, %s, chunk %zu bytes, %d of %d replicas%s", comm->rank,
           what, (unsigned long long)o.number, count, clt_dtype_name(dtype), clt_reduce_op_name(op),
           clt_allreduce_plan_algorithm(plan), chunk_bytes, replicas, plan->total_replicas,
           counts ? ", per-rank counts" : "");
  free(all);
  *out = plan;
  return CLT_OK;

fail:
  free(all);
  clt__plan_destroy(plan);
  return rc;
}

void clt__plan_destroy(clt_allreduce_plan *plan) {
  if (!plan) return;
  /* After a failure that left messages in flight (a timeout, an MPI
   * error), receives abandoned then may still be matched, and MPI write
   * into the plan's staging buffers, at any time until MPI_Finalize: those
   * buffers are kept (left allocated) rather than freed under it. */
  int broken = plan->comm && plan->comm->broken;
  if (broken)
    clt__log(CLT_LOG_DEBUG, "%s plan of %zu elements destroyed after a failure: its staging buffers are kept, since "
             "abandoned messages may still arrive in them", plan->kind->op_name, plan->count);
  if (plan->alg) plan->alg->destroy(plan, broken);
  if (!broken) clt__dev_staging_free(plan->dev);
  free(plan->seg_off);
  free(plan->seg_lo);
  free(plan);
}

int clt__plan_scratch_create(clt_allreduce_plan *plan, size_t nbuf) {
  size_t bytes = plan->count * plan->ops->esize;
  if (bytes && !(plan->state = clt__calloc(nbuf, bytes))) return CLT_ENOMEM;
  return CLT_OK;
}

void clt__plan_scratch_destroy(clt_allreduce_plan *plan, int keep_buffers) {
  if (!keep_buffers) free(plan->state); /* abandoned receives may still land there */
  plan->state = NULL;
}

int clt_allreduce_plan_create(clt_comm *comm, size_t count, clt_dtype dtype, clt_reduce_op op,
                              const clt_allreduce_opts *opts, clt_allreduce_plan **out) {
  return clt__plan_create(&clt__kind_allreduce, comm, count, NULL, dtype, op, opts, out);
}

void clt_allreduce_plan_destroy(clt_allreduce_plan *plan) { clt__plan_destroy(plan); }

size_t clt_allreduce_plan_count(const clt_allreduce_plan *plan) { return plan ? plan->count : 0; }

const char *clt_allreduce_plan_algorithm(const clt_allreduce_plan *plan) {
  if (!plan) return "?";
  if (plan->comm->size == 1) return "local";
  return plan->alg->name;
}

int clt__plan_staged(const clt_allreduce_plan *plan) { return plan->alg->staged && plan->alg->staged(plan); }

size_t clt__plan_nstage(const clt_allreduce_plan *plan) {
  if (plan->count == 0) return 0;
  if (!clt__plan_staged(plan)) return 1;
  return plan->alg->nstage(plan);
}

void clt__plan_stage_chunk(const clt_allreduce_plan *plan, size_t i, size_t *off, size_t *n) {
  if (!clt__plan_staged(plan)) {
    *off = 0;
    *n = plan->count;
    return;
  }
  plan->alg->stage_chunk(plan, i, off, n);
}

/* ---- runs ---------------------------------------------------------------------- */

int clt__allreduce_exec(clt_allreduce_plan *plan, clt__op *op, unsigned char *base,
                        int (*ready)(void *, const clt__ring_chunk *, int *),
                        int (*final)(void *, const clt__ring_chunk *), void *user) {
  double divisor = plan->op == CLT_AVG ? (double)plan->total_replicas : 1.0;
  if (plan->count == 0) return CLT_OK;
  if (plan->comm->size == 1) {
    if (divisor > 1) plan->ops->divide(base, plan->count, divisor);
    return CLT_OK;
  }
  return plan->alg->run(plan, op, base, divisor, ready, final, user);
}

int clt__allreduce_begin(clt_allreduce_plan *plan, clt__op *op) {
  return clt__op_begin(plan->comm, plan->kind->op_name, plan_steps(plan), op);
}

int clt__plan_run(clt_allreduce_plan *plan, void *buf) {
  clt__op op;
  int rc;
  if (!plan) return clt__null_arg("a host run", "plan", "plan");
  const char *fn = plan->kind->run_fn;
  if (!buf && plan->count)
    return clt__error(CLT_EINVAL, "%s: no buffer (buf is NULL) on rank %d for the plan's %zu elements", fn,
                      plan->comm->rank, plan->count);
  if (plan->replicas != 1)
    return clt__error(CLT_EINVAL, "%s: the plan was made for %d replicas per rank; a host run gives one buffer (use "
                                  "%s)", fn, plan->replicas, plan->kind->run_devices_fn);
  if ((rc = clt__allreduce_begin(plan, &op)) < 0) return rc;
  return clt__allreduce_exec(plan, &op, buf, NULL, NULL, NULL);
}

int clt_allreduce_run(clt_allreduce_plan *plan, void *buf) {
  CLT_HANDLE(plan, "plan");
  return clt__plan_run(plan, buf);
}
