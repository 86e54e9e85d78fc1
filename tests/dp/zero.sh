#!/bin/sh
# zero.sh: ZeRO stages 1, 2 and 3 (tests/dp/test_zero) on 1, 2 and 3 ranks of this
# machine (PoCL and rusticl alternating), against --zero 0 bit for bit.
# RANKS="1 2 3 4" adds 4 oversubscribed ranks (bench/bits.sh covers 4 at 30
# steps); make check keeps to 3 for time.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-600}
export CLT_TIMEOUT CLT_TEST_LIMIT
exec sh "$srcdir/tests/lib/mpi_run.sh" --each "${RANKS:-1 2 3}" ./tests/dp/test_zero
