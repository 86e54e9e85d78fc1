#!/bin/sh
# dp_twolevel.sh: data-parallel training (tests/dp/test_dp) on 4 ranks in two
# pretend nodes of 2 (CLT_NODE_SIZE=2) with every bucket all-reduced
# node-then-network (CLT_ALLREDUCE=twolevel): the parameters stay within
# tolerance of single-device training (as the flat ring's do), and every
# replica on every rank has the same bits after every step. Then the same on
# 3 ranks in nodes of 1 with Rabenseifner's between them
# (CLT_ALLREDUCE=twolevel-rabenseifner: its fold of 3 into 2).
# A long sweep: make check-long runs it (CLT_LONG=1); make check skips it.
[ "${CLT_LONG:-0}" = 1 ] || { echo "SKIP: a long sweep (make check-long runs it)"; exit 77; }
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
CLT_NODE_SIZE=2
CLT_ALLREDUCE=twolevel
export CLT_TIMEOUT CLT_TEST_LIMIT CLT_NODE_SIZE CLT_ALLREDUCE
sh "$srcdir/tests/lib/mpi_run.sh" 4 ./tests/dp/test_dp || exit $?
CLT_NODE_SIZE=1 CLT_ALLREDUCE=twolevel-rabenseifner exec sh "$srcdir/tests/lib/mpi_run.sh" 3 ./tests/dp/test_dp
