/*
 * comm.h: what the layers above the collectives (src/dp, src/pp) use of
 * them beyond the public API (cltrain.h, cltrain/mpi.h): device runs into
 * other buffers and from copies on the caller's queues, the gradients'
 * arena in the node's shared memory, plans' staging, segment cuts and the
 * parameters' allgather in a window. The communicator's own layout is
 * comm_internal.h's, which nothing outside src/comm includes.
 */
#ifndef CLT_COMM_COMM_H
#define CLT_COMM_COMM_H

#include "core/internal.h"

/* clt_allreduce_run_devices with the copies back on other queues than the
 * reads: the trainer reads finished gradient buckets on a transfer queue
 * while the backward pass goes on, and writes the sums back on the compute
 * queue, behind everything that touches the buffer (rusticl lost results
 * written from another queue while kernels still ran on the buffer). It
 * returns once the writes are enqueued, not done: what the caller enqueues
 * next on write_queues comes after them, and waiting would wait for the
 * rest of the backward pass queued before them, so the next bucket could
 * not overlap it. The staging is not touched again until the plan's next
 * run, whose reads follow the writes on those queues. */
int clt__allreduce_run_devices_split(clt_allreduce_plan *plan, int n, const cl_command_queue *queues,
                                     const cl_command_queue *write_queues, const cl_mem *bufs, const size_t *offsets);
/* A device run in full: n replicas' buffers, each read on queues[q] (the
 * staging is that queue's) and summed; the result written on
 * write_queues[q], to out_bufs[q] from byte out_offsets[q] instead of back
 * in place (out_bufs NULL: in place): the elements this rank ends with,
 * packed (a reduce-scatter's part from out_offsets[q]). ZeRO stage 2 reads
 * a bucket from a reusable buffer and keeps its part in the shard's
 * gradient (src/dp/zero.c). copied[q] (copied NULL, or copied[q] NULL:
 * none): replica q's bytes are already on their way into its staging
 * (clt__plan_staging), copied there by that event on a queue of the
 * caller's, and the run reads nothing of replica q itself. */
typedef struct clt__device_run {
  int n;
  const cl_command_queue *queues, *write_queues;
  const cl_mem *bufs;
  const size_t *offsets;
  const cl_mem *out_bufs;
  const size_t *out_offsets;
  const cl_event *copied;
} clt__device_run;
int clt__allreduce_run_devices_into(clt_allreduce_plan *plan, const clt__device_run *run);
/* An arena (src/comm/shm_arena.c): `bytes` of this rank's in the node's
 * shared memory, page-aligned, that every rank of the node reads in place,
 * for a device buffer over it (clt__shared_buffer_wrap). Available when
 * the communicator's ranks (two or more) are all on one node, no arena of
 * it is held, and /dev/shm has room; acquire is collective (call it on
 * every rank after they agreed that it is available everywhere). The
 * memory lives until the communicator is destroyed; release says the
 * holder's device buffers are gone, and a later acquire may reuse it. */
int clt__comm_arena_available(const clt_comm *comm, size_t bytes);
int clt__comm_arena_acquire(clt_comm *comm, size_t bytes, unsigned char **mine);
void clt__comm_arena_release(clt_comm *comm);
unsigned char *clt__arena_mine(const clt_comm *comm);
/* [p, p + bytes) lies in this rank's held arena. */
int clt__arena_holds(const clt_comm *comm, const void *p, size_t bytes);
/* clt_allreduce_run on host memory; where buf lies in the held arena and
 * the plan runs shm.c's all-reduce, summed in place from every rank's
 * arena (the same bits, no copy into the window): every rank's buf must
 * then lie in its arena, at the same offset. */
int clt__allreduce_run_arena(clt_allreduce_plan *plan, void *buf);
/* The pinned staging of a device run on these queues (one per replica,
 * count x element size each), made now rather than at the first run, so
 * that a memory report made before training sees it; and its bytes for
 * replica q (0 while there is none). */
int clt__plan_prepare_devices(clt_allreduce_plan *plan, int n, const cl_command_queue *queues);
size_t clt__plan_staged_bytes(const clt_allreduce_plan *plan, int q);
/* Where replica q's bytes go in that staging (count x element size), or
 * NULL while there is none. It stays until the plan is destroyed or run on
 * other queues. */
void *clt__plan_staging(const clt_allreduce_plan *plan, int q);
/* Segment offsets for `count` elements over `size` ranks (size + 1): the
 * first count % size segments get one element more (src/comm/ring.c). */
void clt__segments(size_t count, int size, size_t *seg_off);
/* A reduce-scatter plan as the plan behind it, for
 * clt__allreduce_run_devices_into (src/comm/halves.c). */
clt_allreduce_plan *clt__reduce_scatter_base(clt_reduce_scatter_plan *plan);
/* An allgather plan (as clt_allgather_plan_create's, host buffers, one per
 * rank) whose blocks may stay in shared memory (src/comm/shm_gather.c):
 * on one node whose ranks share memory, unless CLT_ALLREDUCE forces
 * another algorithm than shm, every rank's block lies in a window of the
 * plan's own, and clt__allgather_window_block gives its address; elsewhere
 * it gives NULL and the plan is an ordinary one (the ring). Collective. */
int clt__allgather_plan_create_window(clt_comm *comm, size_t count, const size_t *counts, clt_dtype dtype,
                                      clt_allgather_plan **out);
/* Rank rank's block in the window (its part, at clt_allgather_plan_part's
 * count): with next = 1, of the next run (this rank fills its own there,
 * then calls clt__allgather_run_filled); with next = 0, of the last run
 * (the other ranks' parts, readable until this rank's next run but one).
 * NULL when the plan has no window. */
void *clt__allgather_window_block(const clt_allgather_plan *plan, int rank, int next);
/* Bytes of this rank's segment of the window (0: none). */
size_t clt__allgather_window_bytes(const clt_allgather_plan *plan);
/* Run with this rank's block of the next run filled already; afterwards
 * every rank's block of this run is readable in place. Before filling its
 * block a rank must have finished reading the blocks of the run before:
 * host copies done, and device commands that read them complete (not just
 * queued): the run's flag says so to the others (shm_gather.c). */
int clt__allgather_run_filled(clt_allgather_plan *plan);

#endif
