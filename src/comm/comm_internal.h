/*
 * comm_internal.h: what the communicator's sources share: the clt_comm
 * layout, the message transport (MPI, or nothing for one rank), operations
 * with deadlines, the ring engine and the cross-rank fingerprint check.
 *
 * Only transport_mpi.c sees mpi.h; everything else talks to the transport
 * through clt__tp_*, so the one-rank build needs no MPI at all.
 */
#ifndef CLT_COMM_INTERNAL_H
#define CLT_COMM_INTERNAL_H

#include "comm/comm.h"

#include <stdint.h>

/* ---- the communicator ---------------------------------------------------- */

/* Tags: (operation number mod tag_ops) * CLT__TAG_PHASES + phase, so each
 * collective's messages are told apart from the previous and next ones. */
enum { CLT__TAG_DATA = 0, CLT__TAG_CHECK = 1, CLT__TAG_SCATTER = 2, CLT__TAG_PHASES = 4 };

/* Where the ranks are (nodes.c): made once when the communicator is, from
 * MPI_COMM_TYPE_SHARED or CLT_NODE_SIZE. Nodes are numbered in the order of
 * their lowest rank; a node's ranks in rank order are its local ranks. The
 * two-level all-reduce cuts its buffer into lmax segments; on a node of L
 * ranks local rank l carries segments [l lmax / L, (l + 1) lmax / L) (every
 * segment has exactly one carrier per node, and on a node of lmax ranks
 * local rank l carries segment l). Its "sub-communicators" are rank lists
 * on this communicator, so messages, tags, deadlines and diagnoses stay
 * the parent's and every error names world ranks. */
typedef struct clt__layout {
  int nnodes, node;        /* node count; this rank's node */
  int lmin, lmax;          /* the smallest and largest node */
  int *node_of;            /* size: every rank's node */
  int *node_size;          /* nnodes */
  int *local;              /* local_size: this node's ranks, in local-rank order */
  int *carrier;            /* nnodes x lmax: the rank of node n carrying segment j */
} clt__layout;

/* The first segment local rank l of a node of L ranks carries (l = L: the end). */
static inline int clt__layout_first_seg(int lmax, int L, int l) { return (int)(((long long)l * lmax) / L); }

/* An algorithm's own terms, fitted by --fit to its times on one node
 * (model.c): seconds per wait, per byte a rank moves, and per byte moved
 * of a buffer's bytes past far_bytes (the caches' reach; beta_far 0 when
 * the file has no such pair). */
typedef struct clt__fitted_terms {
  double alpha, beta, beta_far, far_bytes;
  int set;                 /* the file had alpha and beta */
} clt__fitted_terms;

/* The α-β-γ cost model (model.c): seconds per message, per byte on the
 * wire, inside a node [0] and between nodes [1], and per byte reduced;
 * and, when the model file has them (--fit timed them on one node), shm's
 * and the ring's own terms. */
typedef struct clt__cost_model {
  double alpha[2], beta[2], gamma;
  clt__fitted_terms shm, ring;
  char source[256];        /* "defaults" or the file it came from */
} clt__cost_model;

struct clt_comm {
  int rank, size;
  int local_rank, local_size;
  clt__layout layout;
  clt__cost_model model;
  int algorithm;           /* CLT_ALLREDUCE: -1 auto, else a forced enum clt__algorithm */
  int small_set;           /* a threshold decides small vs large (no model file, or CLT_ALLREDUCE_SMALL) */
  int small_given;         /* CLT_ALLREDUCE_SMALL was given */
  uint64_t sent[2];        /* bytes this rank sent inside its node [0] and to other nodes [1] */
  double timeout_s;        /* seconds without progress before a wait fails */
  size_t chunk_bytes;      /* default bytes per pipelined message */
  int chunk_set;           /* CLT_ALLREDUCE_CHUNK gave it (else the default for the ring) */
  size_t small_bytes;      /* all-reduces up to this size use a small-message algorithm */
  uint64_t ops;            /* collectives started so far: the next is ops + 1 */
  int tag_ops;             /* operation numbers wrap at this in tags */
  int diag_tag;            /* the tag of timeout diagnoses (outside the op tags) */
  int broken;              /* status of a failure that left messages in flight, else 0 */
  char *broken_detail;     /* its clt_last_error() */
  struct clt__diag *diag_out; /* what we told the others at our last timeout (sends may be in flight) */
  /* Shared memory inside the node (shm.c): whether every node's ranks can
   * share memory (pretend nodes within one machine can; the same on every
   * rank), and the window, made by the first plan that needs it. */
  int shm_capable;
  int own_cores;           /* every rank has a core of its own (transport_mpi.c; the same on every rank) */
  unsigned char *const *shm_segs; /* local_size: each local rank's segment of the window */
  size_t shm_bytes;        /* bytes of each segment (0: no window yet) */
  uint64_t shm_round;      /* rounds run through the window so far (shm.c) */
  struct clt__arena *arena; /* device buffers' bytes in shared memory (shm_arena.c), or NULL */
  void *mpi;               /* transport state; NULL for a one-rank communicator */
};

/* Fill the fields every communicator shares from the environment, once
 * size is set
 * (CLT_TIMEOUT, CLT_ALLREDUCE_CHUNK, CLT_ALLREDUCE_SMALL); junk there is
 * CLT_EINVAL. */
int clt__comm_init_env(clt_comm *comm);
/* The layout (nodes.c): node_of gives every rank's node, numbered in order
 * of first appearance. CLT_NODE_SIZE ("k" or "a,b,c") overrides node_of
 * when set: *pretend is then 1. */
int clt__layout_env(int size, int *node_of, int *pretend);
int clt__layout_make(clt_comm *comm, const int *node_of);
void clt__layout_free(clt__layout *l);
/* The cost model: defaults, or CLT_COMM_MODEL's file (model.c). */
int clt__model_init(clt__cost_model *m);
/* Parse "1048576", "256K", "1M" into bytes (1 <= bytes <= max); -1 on junk. */
int clt__parse_bytes(const char *text, size_t max, size_t *out);

/* ---- transport ------------------------------------------------------------ */

typedef struct clt__req {
  union {
    void *p;
    int64_t i;
    unsigned char raw[16];
  } h;            /* an MPI_Request */
  int kind;       /* 0 idle, 1 send, 2 receive */
  int peer;
} clt__req;

/* Non-blocking point-to-point messages of at most INT_MAX bytes. */
int clt__tp_isend(clt_comm *comm, const void *buf, size_t bytes, int peer, int tag, clt__req *req);
int clt__tp_irecv(clt_comm *comm, void *buf, size_t bytes, int peer, int tag, clt__req *req);
/* 1 when req finished (*got: bytes received, for receives), 0 while it is
 * pending, a negative status on failure (a message longer than the receive
 * is CLT_EMISMATCH). */
int clt__tp_test(clt_comm *comm, clt__req *req, size_t *got);
/* Give up on a request after a failure: a receive is cancelled, a send is
 * left to finish on its own. */
void clt__tp_abandon(clt_comm *comm, clt__req *req);
/* Let the transport move messages in flight on (MPI progresses only
 * inside MPI calls): a probe for a message that never comes. */
void clt__tp_progress(clt_comm *comm);
/* Release the transport's state (the duplicated MPI communicator, the
 * node's shared memory) with local calls only: no rank waits for another,
 * whatever failed before. */
void clt__tp_destroy(clt_comm *comm);
/* A shared-memory window over this node's ranks with a segment of `bytes`
 * (zeroed) for each, replacing a smaller one: comm->shm_segs and
 * comm->shm_bytes. Collective over the communicator (the first call splits
 * it into nodes) and blocking: call it only where every rank is known to
 * be (after a plan's fingerprint check). */
int clt__tp_shm_window(clt_comm *comm, size_t bytes);
/* A shared-memory window of its own over this node's ranks, a zeroed
 * segment of `bytes` for each (*segs: local_size addresses), never
 * replaced: memory that device commands may still read after a collective
 * returned (shm_gather.c) cannot move under them when a later plan grows
 * the node's window. Collective over the communicator like
 * clt__tp_shm_window; it lives until the communicator is destroyed, so
 * a plan's destroy need not wait for device commands still reading it. */
int clt__tp_shm_region(clt_comm *comm, size_t bytes, unsigned char *const **segs);

/* ---- operations with deadlines ------------------------------------------- */

/* One collective in progress: its number, name and the deadline clock. */
typedef struct clt__op {
  clt_comm *comm;
  const char *name;        /* "allreduce", "broadcast", ... */
  uint64_t number;         /* 1, 2, ... on this communicator */
  int nsteps;              /* for messages: "step 3/6" */
  double last_progress;    /* monotonic seconds */
} clt__op;

/* Start operation `name`: refuse on a broken communicator, number it. */
int clt__op_begin(clt_comm *comm, const char *name, int nsteps, clt__op *op);
int clt__op_tag(const clt__op *op, int phase);
static inline void clt__op_progress(clt__op *op) { op->last_progress = clt__now(); }
/* A poll made no progress while waiting for `peer` at 0-based `step`. Gives
 * the core away when oversubscribed; after the deadline, asks the other
 * ranks what they are waiting for and returns CLT_ETIMEDOUT naming the
 * peer, the step and the ranks that did not answer. */
int clt__op_idle(clt__op *op, int peer, int step);
/* Put "rank R: NAME #N step S/T: " in front of the current error detail. */
int clt__op_error(clt__op *op, int step, int rc);
/* After a failure with messages in flight: remember it on the
 * communicator, which refuses further collectives. Returns rc. */
int clt__op_break(clt__op *op, int rc);
/* Wait (polling, with the deadline) until every request in reqs is done;
 * peers[i] names whom request i waits for. got[i] receives the byte count
 * when got is not NULL. On failure every request is abandoned. */
int clt__op_wait(clt__op *op, clt__req *reqs, const int *peers, size_t *got, int n, int step);

/* ---- fingerprints: checking that every rank asks the same ------------------ */

typedef struct clt__fingerprint {
  int32_t kind;            /* a clt__fp_kind */
  int32_t dtype, op, root;
  uint64_t count;          /* elements or bytes */
  uint64_t chunk;
  int32_t replicas;
  int32_t small;           /* the small-message threshold: it picks the algorithm */
  uint64_t parts;          /* a hash of per-rank counts; 0: the all-reduce's segments */
  int32_t algorithm;       /* the algorithm this rank chose (enum clt__algorithm) */
  int32_t pad;
} clt__fingerprint;

enum clt__fp_kind {
  CLT__FP_ALLREDUCE_PLAN = 1,
  CLT__FP_BCAST = 2,
  CLT__FP_ALLGATHER = 3,
  CLT__FP_REDUCE_SCATTER_PLAN = 4,
  CLT__FP_ALLGATHER_PLAN = 5
};

/* Exchange fingerprints with every rank (the check phase of op) and compare:
 * a difference is CLT_EMISMATCH on every rank, naming the ranks and values.
 * all, when not NULL, receives every rank's fingerprint (size entries). */
int clt__fingerprint_check(clt__op *op, const clt__fingerprint *mine, clt__fingerprint *all);

/* ---- element types -------------------------------------------------------- */

/* What the collectives need to know of an element type. Every operation
 * computes in float and rounds to the type once per element (fp16: see
 * src/core/half.c). */
typedef struct clt__dtype_ops {
  clt_dtype dtype;
  size_t esize;
  void (*add)(void *dst, const void *src, size_t n);   /* dst[i] = dst[i] + src[i] */
  /* dst[i] = dst[i] + src[0][i] + ... + src[nsrc-1][i], added in that order
   * and rounded once: the local replicas of one process. */
  void (*sum)(void *dst, const void *const *src, int nsrc, size_t n);
  void (*divide)(void *x, size_t n, double by);       /* x[i] = x[i] / by */
  /* Or NULL: dst[i] (and dst2[i] unless NULL) = (src[0][i] + ... +
   * src[nsrc-1][i]) / by (by > 1), the bits of a copy of src[0], sum and
   * divide, in one pass; dst may be a source. */
  void (*sum_to)(void *dst, void *dst2, const void *const *src, int nsrc, size_t n, double by);
} clt__dtype_ops;

/* NULL when the type has no reduction yet. */
const clt__dtype_ops *clt__dtype_ops_find(clt_dtype dtype);

/* ---- the ring engine -------------------------------------------------------- */

/* One chunk of one step: the bytes [off, off + n) elements of segment seg. */
typedef struct clt__ring_chunk {
  int step, seg;
  size_t off, n;           /* elements */
  size_t id;               /* position in the staging order (see ring.c) */
  long dep_send;           /* a receive into place waits for this send to finish; -1: none */
} clt__ring_chunk;

/* The schedule of one rank, made once per plan. */
typedef struct clt__ring_sched {
  int size, rank;
  int reduce_steps, total_steps;
  size_t nown;             /* chunks of this rank's step-0 segment */
  clt__ring_chunk *own;
  size_t nrecv;            /* every receive, in order */
  clt__ring_chunk *recv;
  size_t nsend;            /* own chunks, then the receives that are passed on */
} clt__ring_sched;

/* Segment j is elements [lo[j], hi[j]) (for consecutive segments from one
 * array of offsets: lo = off, hi = off + 1). reduce_steps = size - 1 and
 * total_steps = 2 (size - 1) for an all-reduce; both size - 1 for a
 * reduce-scatter (rank r finishes segment (r + 1) mod size); 0 and
 * size - 1 for an allgather of blocks (rank r starts with block r). */
int clt__ring_sched_create(int rank, int size, const size_t *lo, const size_t *hi, size_t chunk_elems,
                           int reduce_steps, int total_steps, clt__ring_sched *out);
void clt__ring_sched_free(clt__ring_sched *s);

/* Where the data is and what to do with it. */
typedef struct clt__ring_io {
  unsigned char *base;     /* the buffer, reduced in place */
  const clt__dtype_ops *ops;
  double divisor;          /* > 1: divide each finished segment by it (average) */
  unsigned char *staging;  /* nslots x slot_bytes for receives that are reduced */
  int nslots;
  size_t slot_bytes;
  /* Optional (device staging): is the local data of chunk c in place yet?
   * and: chunk c holds its final value. */
  int (*ready)(void *user, const clt__ring_chunk *c, int *is_ready);
  int (*final)(void *user, const clt__ring_chunk *c);
  void *user;
  int tag_phase;           /* CLT__TAG_DATA unless this is a fingerprint check */
  const int *peers;        /* ring position -> rank on the communicator; NULL: the same */
  int step0;               /* steps of the operation before this ring (for messages) */
} clt__ring_io;

/* Run the schedule; messages carry op's data tag. */
int clt__ring_exec(clt__op *op, const clt__ring_sched *s, const clt__ring_io *io);

/* Segment offsets for `count` elements over `size` ranks: the first
 * count % size segments get one element more. */
void clt__segments(size_t count, int size, size_t *seg_off);

/* ---- algorithms (model.c): one descriptor each ------------------------------ */

enum clt__algorithm {
  CLT__RING = 0,
  CLT__RECDOUBLE = 1,
  CLT__GATHER = 2,
  CLT__TWOLEVEL = 3,
  CLT__SHM = 4,
  CLT__RABENSEIFNER = 5,
  CLT__TWOLEVEL_RABENSEIFNER = 6, /* two-level, Rabenseifner between nodes */
  CLT__NALGORITHMS = 7
};

/* The device hooks of a run (allreduce_device.c): is the local data of
 * chunk c in place yet? and: chunk c holds its final value. */
typedef int clt__ready_fn(void *user, const clt__ring_chunk *c, int *is_ready);
typedef int clt__final_fn(void *user, const clt__ring_chunk *c);

/* An algorithm: how it is chosen (its cost and where it can run: model.c)
 * and how a plan runs it (its file). Adding one is a row of model.c's
 * table, its cost there, and its file with the plan's members. */
typedef struct clt__algorithm_desc {
  enum clt__algorithm algorithm;
  const char *name;        /* clt_allreduce_plan_algorithm, CLT_ALLREDUCE */
  /* Predicted seconds of an all-reduce of `bytes` on comm (model.c). */
  double (*cost)(const clt_comm *comm, double bytes);
  /* Whether it can run on comm when chosen by the model (forced = 0) or by
   * CLT_ALLREDUCE (forced = 1); a forced one that cannot runs `instead`. */
  int (*usable)(const clt_comm *comm, int forced);
  enum clt__algorithm instead;
  /* Its own terms fitted on comm's layout (--fit timed it there), or NULL;
   * the member NULL for those --fit does not time. */
  const clt__fitted_terms *(*fitted)(const clt_comm *comm);
  int small;               /* a small-message one: CLT_ALLREDUCE_SMALL's threshold decides it */
  int allreduce_only;      /* reduce-scatter plans keep the ring (their parts are the ring's bits) */

  /* The plan's own state (plan->state: schedules, slots, windows), made
   * once the ranks agreed on the plan and it is laid out (segments,
   * parts); collective where it makes a window. A plan of one rank is the
   * ring's (its device runs take the ring's staging order); steps and run
   * are asked only with two ranks or more and count > 0. */
  int (*create)(clt_allreduce_plan *plan);
  /* Free it; keep_buffers: a failure left messages in flight, which may
   * still land in receive buffers: leave those allocated. */
  void (*destroy)(clt_allreduce_plan *plan, int keep_buffers);
  /* Steps of a run, for messages ("step 3/6"). */
  int (*steps)(const clt_allreduce_plan *plan);
  /* Run on host data at base; divisor > 1: an average's. The
   * hooks are NULL on host data; on device data (staged plans only) ready
   * is asked before a chunk of the staging order is used and final told
   * when one holds its result. */
  int (*run)(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor, clt__ready_fn *ready,
             clt__final_fn *final, void *user);
  /* Device staging (optional: NULL where all of it is copied first):
   * whether this plan's device data comes and goes chunk by chunk, and its
   * staging order, chunk i of nstage being elements [off, off + n). */
  int (*staged)(const clt_allreduce_plan *plan);
  size_t (*nstage)(const clt_allreduce_plan *plan);
  void (*stage_chunk)(const clt_allreduce_plan *plan, size_t i, size_t *off, size_t *n);
} clt__algorithm_desc;

const clt__algorithm_desc *clt__algorithm_find(enum clt__algorithm a);
/* Parse CLT_ALLREDUCE's values: "auto" is -1; unknown is -2. */
int clt__algorithm_parse(const char *name);
/* The algorithm of an all-reduce of `bytes`: forced by comm->algorithm, or
 * the cheapest by the model (small messages by CLT_ALLREDUCE_SMALL when it
 * is set). A pure function of values every rank holds the same (checked by
 * the plan's fingerprint). */
enum clt__algorithm clt__algorithm_choose(const clt_comm *comm, size_t bytes);

/* Each algorithm's plan members, in its file. */
int clt__ring_plan_create(clt_allreduce_plan *plan);
void clt__ring_plan_destroy(clt_allreduce_plan *plan, int keep_buffers);
int clt__ring_plan_steps(const clt_allreduce_plan *plan);
int clt__ring_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                       clt__ready_fn *ready, clt__final_fn *final, void *user);
int clt__ring_plan_staged(const clt_allreduce_plan *plan);
size_t clt__ring_plan_nstage(const clt_allreduce_plan *plan);
void clt__ring_plan_stage_chunk(const clt_allreduce_plan *plan, size_t i, size_t *off, size_t *n);

int clt__recdouble_plan_create(clt_allreduce_plan *plan);
int clt__recdouble_plan_steps(const clt_allreduce_plan *plan);
int clt__recdouble_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                            clt__ready_fn *ready, clt__final_fn *final, void *user);
int clt__gather_plan_create(clt_allreduce_plan *plan);
int clt__gather_plan_steps(const clt_allreduce_plan *plan);
int clt__gather_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                         clt__ready_fn *ready, clt__final_fn *final, void *user);

int clt__halving_plan_create(clt_allreduce_plan *plan);
int clt__halving_plan_steps(const clt_allreduce_plan *plan);
int clt__halving_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                          clt__ready_fn *ready, clt__final_fn *final, void *user);

/* Two-level with rings, or with Rabenseifner's, between nodes. */
int clt__twolevel_plan_create(clt_allreduce_plan *plan);
int clt__twolevel_halving_plan_create(clt_allreduce_plan *plan);
void clt__twolevel_plan_destroy(clt_allreduce_plan *plan, int keep_buffers);
int clt__twolevel_plan_steps(const clt_allreduce_plan *plan);
int clt__twolevel_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                           clt__ready_fn *ready, clt__final_fn *final, void *user);
int clt__twolevel_plan_staged(const clt_allreduce_plan *plan);
size_t clt__twolevel_plan_nstage(const clt_allreduce_plan *plan);
void clt__twolevel_plan_stage_chunk(const clt_allreduce_plan *plan, size_t i, size_t *off, size_t *n);

int clt__shm_plan_create(clt_allreduce_plan *plan);
void clt__shm_plan_destroy(clt_allreduce_plan *plan, int keep_buffers);
int clt__shm_plan_steps(const clt_allreduce_plan *plan);
int clt__shm_plan_run(clt_allreduce_plan *plan, clt__op *op, unsigned char *base, double divisor,
                      clt__ready_fn *ready, clt__final_fn *final, void *user);
int clt__shm_plan_staged(const clt_allreduce_plan *plan);
size_t clt__shm_plan_nstage(const clt_allreduce_plan *plan);
void clt__shm_plan_stage_chunk(const clt_allreduce_plan *plan, size_t i, size_t *off, size_t *n);

/* A state that is only scratch (small.c, halving.c): nbuf zeroed buffers
 * of the plan's bytes, at (unsigned char *)plan->state; none for count 0. */
int clt__plan_scratch_create(clt_allreduce_plan *plan, size_t nbuf);
void clt__plan_scratch_destroy(clt_allreduce_plan *plan, int keep_buffers);

/* ---- the ring's staging order (ring.c) ---------------------------------------- */

/* The chunks a ring needs in order: its own segment's, then those of the
 * segments as they are reduced (the reduce-scatter's receives). */
size_t clt__ring_nstage(const clt__ring_sched *s);
void clt__ring_stage_chunk(const clt__ring_sched *s, size_t i, size_t *off, size_t *n);

/* ---- small messages (small.c) ------------------------------------------------- */

/* The small-message algorithm for this many ranks (CLT__GATHER or
 * CLT__RECDOUBLE), and recursive doubling's steps. */
enum clt__algorithm clt__small_algorithm(int size);
int clt__recdouble_steps(int size);

/* ---- Rabenseifner's all-reduce (halving.c) ---------------------------------- */

/* Post messages (recv[i]: receive bytes[i] into bufs[i] from peers[i],
 * else send them), all in flight at once, wait for all (tag phase
 * tag_phase of op, `step` in messages), and check every receive got all
 * of its bytes. */
int clt__messages(clt__op *op, int step, int tag_phase, int n, const int *peers, const int *recv,
                  void *const *bufs, const size_t *bytes);

/* One all-reduce of elements [lo, hi) of base among n ranks: peers[i] is
 * position i's rank on the communicator (NULL: rank i), me this rank's
 * position. tmp holds hi - lo elements. */
typedef struct clt__halving {
  const int *peers;
  int n, me;
  unsigned char *base;
  size_t lo, hi;
  unsigned char *tmp;
  const clt__dtype_ops *ops;
  double divisor;          /* > 1: the average's */
  int tag_phase;           /* CLT__TAG_DATA, or two-level's network phase */
  int step0;               /* steps of the operation before this one (for messages) */
} clt__halving;

/* Steps of n ranks: 2 log2 P, + 2 when n is not a power of two P. */
int clt__halving_steps(int n);
int clt__halving_exec(clt__op *op, const clt__halving *h);

/* ---- the shared-memory all-reduce inside a node (shm.c) --------------------- */

struct clt__shm;
/* All-reduces up to this size go through the window in one round with one
 * handshake, every rank summing all of it. */
#define CLT__SHM_WHOLE_BYTES ((size_t)8 << 10)
/* Bytes of a rank's piece of a round: the chunk when one was given, else
 * the window's own default (larger than the ring's: every round waits for
 * every rank of the node twice, which costs most when they are more than
 * the cores). */
size_t clt__shm_piece_bytes(const clt_comm *comm, size_t given);
/* The plan's rounds, and the window big enough for them (collective). */
int clt__shm_create(clt_allreduce_plan *plan, struct clt__shm **out);
void clt__shm_free(struct clt__shm *s);
int clt__shm_steps(const struct clt__shm *s);
/* Rounds, and round i's elements [off, off + n): the device staging order. */
size_t clt__shm_nrounds(const struct clt__shm *s);
/* Whether rounds are consecutive ranges of the buffer (an all-reduce's;
 * a reduce-scatter's walk through every rank's part at once). */
int clt__shm_contiguous(const struct clt__shm *s);
void clt__shm_round(const struct clt__shm *s, size_t i, size_t *off, size_t *n);
/* The node's halves over fixed parts (local rank l's: elements
 * [part_lo[l], part_hi[l]), the arrays kept by the caller), for two-level:
 * the reduce-scatter leaves this rank's part summed over the node in its
 * buffer, the allgather copies every part into every buffer. Steps step0
 * onwards, 2 per round (clt__shm_steps) each. */
int clt__shm_create_parts(clt_allreduce_plan *plan, const size_t *part_lo, const size_t *part_hi,
                          struct clt__shm **out);
int clt__shm_reduce_scatter(struct clt__shm *s, clt__op *op, unsigned char *base, const clt__dtype_ops *ops,
                            int step0);
int clt__shm_allgather(struct clt__shm *s, clt__op *op, unsigned char *base, int step0);
/* Run plan's rounds s on host data at base (a reduce-scatter plan: this
 * rank's part); ready(round) before a round's data is used, final(round)
 * once all of it holds the result (chunk ids are rounds; contiguous rounds
 * only). */
int clt__shm_exec(clt_allreduce_plan *plan, struct clt__shm *s, clt__op *op, unsigned char *base, double divisor,
                  clt__ready_fn *ready, clt__final_fn *final, void *user);

/* ---- an all-reduce of bytes already in shared memory (shm_arena.c) ----------- */

/* Sum elements [0, seg_off[size]) at byte `at` of every rank's arena in
 * place (clt__comm_arena_acquire), rank l summing segment l: the same bits
 * as shm.c's all-reduce. Every rank of the communicator is on one node and
 * calls it alike. */
int clt__arena_allreduce(clt__op *op, size_t at, const size_t *seg_off, const clt__dtype_ops *ops, double divisor);
/* At comm's destroy: the arena's bookkeeping (its region is the transport's). */
void clt__comm_arena_free(clt_comm *comm);

/* ---- an allgather whose blocks stay in a window of its own (shm_gather.c) ----- */

struct clt__shm_gather;
/* The plan's region (collective, after its fingerprint check). */
int clt__shm_gather_create(clt_allreduce_plan *plan, struct clt__shm_gather **out);
void clt__shm_gather_free(struct clt__shm_gather *g);
/* Bytes of this rank's segment of the region. */
size_t clt__shm_gather_bytes(const struct clt__shm_gather *g);
/* Rank rank's block (its part, part_hi - part_lo elements): of the next run
 * (next = 1: the one this rank fills before it), or of the last one. */
unsigned char *clt__shm_gather_block(const struct clt__shm_gather *g, int rank, int next);
/* One run: base's own part copied into the block first and the others'
 * copied out after, or, base NULL, this rank's block already filled and
 * the others' left to the caller to read where they are. One step. */
int clt__shm_gather_exec(struct clt__shm_gather *g, clt__op *op, unsigned char *base);

/* The plan's window allgather, or NULL where it has none (shm_plan.c). */
struct clt__shm_gather *clt__shm_plan_gather(const clt_allreduce_plan *plan);

/* ---- the plan ------------------------------------------------------------------ */

struct clt__dev_staging;

/* What a plan does: the whole ring, or one of its halves. One descriptor
 * per kind (allreduce.c), so the plan code asks it instead of switching. */
typedef struct clt__coll_kind {
  const char *op_name;       /* the operation in messages: "allreduce" */
  const char *create_fn;     /* the public functions, for messages */
  const char *run_fn, *run_devices_fn;
  int32_t fp_kind;           /* its fingerprint */
  int reduces;               /* has the reduce-scatter half */
  int gathers;               /* has the allgather half */
  int window;                /* an allgather that may keep its blocks in shared memory (shm_gather.c) */
} clt__coll_kind;

extern const clt__coll_kind clt__kind_allreduce, clt__kind_reduce_scatter, clt__kind_allgather,
    clt__kind_allgather_window;

/* One plan type behind clt_allreduce_plan, clt_reduce_scatter_plan and
 * clt_allgather_plan (the latter two wrap it: allreduce.c). */
struct clt_allreduce_plan {
  const clt__coll_kind *kind;
  clt_comm *comm;
  size_t count;
  clt_dtype dtype;
  clt_reduce_op op;
  const clt__dtype_ops *ops;
  size_t chunk_bytes, chunk_elems;
  int chunk_given;         /* by the caller's options or CLT_ALLREDUCE_CHUNK (else a default) */
  int replicas;            /* buffers this rank gives each run */
  int total_replicas;      /* over every rank: the divisor of an average */
  const clt__algorithm_desc *alg; /* its algorithm (model.c's table) */
  size_t *seg_off;         /* size + 1: the all-reduce's segments */
  size_t *seg_lo, *seg_hi; /* size each: the ring's segment table */
  size_t *part_lo, *part_hi; /* size each: rank r's part (reduce-scatter result, allgather input) */
  int natural;             /* parts are the all-reduce's segments (no per-rank counts given) */
  void *state;             /* the algorithm's own: made by alg->create, freed by alg->destroy */
  struct clt__dev_staging *dev; /* pinned staging of device runs, made on first use */
};

struct clt_reduce_scatter_plan {
  struct clt_allreduce_plan p;
};
struct clt_allgather_plan {
  struct clt_allreduce_plan p;
};

/* Make a plan of any kind; counts (size entries) or NULL for the
 * all-reduce's segments. */
int clt__plan_create(const clt__coll_kind *kind, clt_comm *comm, size_t count, const size_t *counts, clt_dtype dtype,
                     clt_reduce_op op, const clt_allreduce_opts *opts, clt_allreduce_plan **out);
void clt__plan_destroy(clt_allreduce_plan *plan);
/* Run a plan of any kind on host memory at buf. */
int clt__plan_run(clt_allreduce_plan *plan, void *buf);

/* Start one run of the plan (numbers it, refuses on a broken communicator). */
int clt__allreduce_begin(clt_allreduce_plan *plan, clt__op *op);
/* Run the plan's algorithm on plan-shaped data at base (host memory), with
 * optional device hooks (staged algorithms only, clt__plan_staged; the
 * small-message algorithms need everything in place first). */
int clt__allreduce_exec(clt_allreduce_plan *plan, clt__op *op, unsigned char *base,
                        int (*ready)(void *, const clt__ring_chunk *, int *),
                        int (*final)(void *, const clt__ring_chunk *), void *user);
/* Whether the plan's device data is staged chunk by chunk through the
 * hooks of clt__allreduce_exec (else all of it is copied first). */
int clt__plan_staged(const clt_allreduce_plan *plan);
/* The staging order: chunk i of it is the i-th to be needed by the ring
 * (its own segment first, then the segments as they are reduced; shm: its
 * rounds). */
size_t clt__plan_nstage(const clt_allreduce_plan *plan);
void clt__plan_stage_chunk(const clt_allreduce_plan *plan, size_t i, size_t *off, size_t *n);
void clt__dev_staging_free(struct clt__dev_staging *dev);

#endif /* CLT_COMM_INTERNAL_H */
