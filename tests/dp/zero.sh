#!/bin/sh
# zero.sh: ZeRO stages 1, 2 and 3 (tests/dp/test_zero) on 3 ranks of this
# machine (uneven shards; PoCL and rusticl alternating), against --zero 0 bit
# for bit; with CLT_LONG=1 (make check-long) on 1, 2 and 4, the 4 adding
# test_zero's resume of a 3-rank checkpoint on 2 and 4 ranks. RANKS="..."
# picks the counts. The CLI's ZeRO scripts (zero_cli.sh, zero3.sh,
# ckpt_shards.sh, offload.sh, shard_by.sh) train on 2 ranks.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-600}
export CLT_TIMEOUT CLT_TEST_LIMIT
exec sh "$srcdir/tests/lib/mpi_run.sh" --each "${RANKS:-$(if [ "${CLT_LONG:-0}" = 1 ]; then echo 1 2 4; else echo 3; fi)}" ./tests/dp/test_zero
