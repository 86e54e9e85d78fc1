#!/bin/sh
# dp.sh: data-parallel training (tests/dp/test_dp) on 1, 2 and 3 ranks of
# this machine, against single-device training (4 ranks: dp_twolevel.sh;
# RANKS="1 2 3 4" runs them here too).
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
export CLT_TIMEOUT CLT_TEST_LIMIT
exec sh "$srcdir/tests/lib/mpi_run.sh" --each "${RANKS:-1 2 3}" ./tests/dp/test_dp
