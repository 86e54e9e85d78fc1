#!/bin/sh
# dp_twolevel.sh: data-parallel training (tests/test_dp) on 4 ranks in two
# pretend nodes of 2 (CLT_NODE_SIZE=2) with every bucket all-reduced
# node-then-network (CLT_ALLREDUCE=twolevel): the parameters stay within
# tolerance of single-device training (as the flat ring's do), and every
# replica on every rank has the same bits after every step.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
CLT_NODE_SIZE=2
CLT_ALLREDUCE=twolevel
export CLT_TIMEOUT CLT_TEST_LIMIT CLT_NODE_SIZE CLT_ALLREDUCE
exec sh "$srcdir/tests/mpi_run.sh" 4 ./tests/test_dp
