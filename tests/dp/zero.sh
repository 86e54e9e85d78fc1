#!/bin/sh
# zero.sh: ZeRO stages 1 and 2 (tests/dp/test_zero) on 1, 2, 3 and 4 ranks of this
# machine (PoCL and rusticl alternating), against --zero 0 bit for bit.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-600}
export CLT_TIMEOUT CLT_TEST_LIMIT
exec sh "$srcdir/tests/lib/mpi_run.sh" --each "1 2 3 4" ./tests/dp/test_zero
