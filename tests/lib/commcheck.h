/*
 * commcheck.h: the checks that the tests of one all-reduce algorithm each
 * run on it (test_shm, test_twolevel, under mpirun): exact sums on host
 * buffers, fp16 on host or device buffers, device buffers with guards
 * around them, two replicas per process; every result also identical in
 * bits on every rank of MPI_COMM_WORLD. Each call fails the running Check
 * test with what it names. comm is the communicator of the algorithm.
 */
#ifndef CLT_COMMCHECK_H
#define CLT_COMMCHECK_H

#include <stddef.h>

#include <cltrain.h>

/* buf's bytes hash the same on every rank of MPI_COMM_WORLD. */
void cc_identical_across_ranks(const void *buf, size_t bytes, const char *what);

/* An f32 all-reduce of n exact inputs (commtest.h's small integers),
 * chunk bytes per message (0: the default), twice on one plan: rank 0's
 * result equal to ct_expect bit for bit, the plan's algorithm `algorithm`. */
void cc_check_host(clt_comm *comm, size_t n, size_t chunk, clt_reduce_op op, int salt, const char *algorithm,
                   const char *what);

/* An fp16 all-reduce of ct_half_input on the host (ctx NULL) or in a
 * device buffer of ctx: bit for bit ct_expect_f16 in the order `order`
 * (clt_allreduce_plan_algorithm's names); with order NULL, a sum only
 * within the rounding of every step of the exact sum. */
void cc_check_f16(clt_comm *comm, size_t n, size_t chunk, clt_reduce_op op, clt_context *ctx, int salt,
                  const char *order, const char *what);

/* f32 all-reduces of a device buffer of ctx at an offset, between guard
 * elements it must not touch: sizes[t] elements in chunks[t] bytes, the
 * third an average. */
void cc_check_device(clt_comm *comm, clt_context *ctx, const size_t *sizes, const size_t *chunks, size_t nsizes,
                     const char *what);

/* Two replicas per process, on ctx[0] and ctx[1]: n elements, chunk
 * bytes, an average or a sum; every replica ends with the expected sum. */
void cc_check_two_replicas(clt_comm *comm, clt_context *const ctx[2], size_t n, size_t chunk, int avg);

#endif
