#!/bin/sh
# dp.sh: data-parallel training (tests/dp/test_dp) on 1 and 2 ranks of this
# machine, against single-device training (3 ranks: dp_ring.sh); with
# CLT_LONG=1 (make check-long) on 3 and 4. RANKS="..." picks the counts.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
export CLT_TIMEOUT CLT_TEST_LIMIT
exec sh "$srcdir/tests/lib/mpi_run.sh" --each "${RANKS:-$(if [ "${CLT_LONG:-0}" = 1 ]; then echo 3 4; else echo 1 2; fi)}" ./tests/dp/test_dp
