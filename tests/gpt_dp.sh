#!/bin/sh
# gpt_dp.sh: a GPT trained data-parallel (tests/test_gpt_dp) on 1 and 2
# ranks of this machine (GPT_DP_RANKS="1 2 3" for more): against one
# device, and its checkpoints.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
export CLT_TIMEOUT CLT_TEST_LIMIT
exec sh "$srcdir/tests/mpi_run.sh" --each "${GPT_DP_RANKS:-1 2}" ./tests/test_gpt_dp
