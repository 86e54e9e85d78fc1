#!/bin/sh
# dp_ring.sh: data-parallel training (tests/dp/test_dp) on 3 ranks with every
# bucket all-reduced by the ring (CLT_ALLREDUCE=ring: the device staging's
# copies, chunk by chunk): the parameters stay within tolerance of
# single-device training, and every replica on every rank has the same bits
# after every step. On one node `auto` takes the shared-memory all-reduce
# at every size (src/comm/model.c), which tests/dp/dp.sh trains with on 1 to 4
# ranks; this keeps the ring trained with too (3 ranks: uneven segments).
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
CLT_ALLREDUCE=ring
export CLT_TIMEOUT CLT_TEST_LIMIT CLT_ALLREDUCE
exec sh "$srcdir/tests/lib/mpi_run.sh" 3 ./tests/dp/test_dp
