#!/bin/sh
# pipeline.sh: pipeline parallelism (tests/pp/test_pipeline) on 2, 3 and 4
# ranks of this machine: P = 2 and 3 stages and P = 2 x D = 2 replicas,
# stages alternating PoCL and rusticl, against one device. RANKS="2 3 4 6"
# adds 3 stages x 2 replicas (6 ranks, oversubscribed: too slow for make check).
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-600}
export CLT_TIMEOUT CLT_TEST_LIMIT
exec sh "$srcdir/tests/lib/mpi_run.sh" --each "${RANKS:-2 3 4}" ./tests/pp/test_pipeline
