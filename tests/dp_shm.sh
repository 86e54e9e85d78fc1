#!/bin/sh
# dp_shm.sh: data-parallel training (tests/test_dp) on 2, 3 and 4 ranks
# with every bucket all-reduced through the node's shared memory
# (CLT_ALLREDUCE=shm): the parameters stay within tolerance of
# single-device training, and every replica on every rank has the same bits
# after every step.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
CLT_ALLREDUCE=shm
export CLT_TIMEOUT CLT_TEST_LIMIT CLT_ALLREDUCE
exec sh "$srcdir/tests/mpi_run.sh" --each "2 3 4" ./tests/test_dp
