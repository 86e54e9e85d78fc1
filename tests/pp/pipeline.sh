#!/bin/sh
# pipeline.sh: pipeline parallelism (tests/pp/test_pipeline) on 2 and 3
# ranks of this machine (P = 2 and 3 stages), stages alternating PoCL and
# rusticl, against one device; with CLT_LONG=1 (make check-long) on 4 and 6
# ranks instead, P = 2 x D = 2 and 3 x 2 replicas (pipeline_zero.sh trains 2 x 2 in
# make check). RANKS="..." picks the counts.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-600}
export CLT_TIMEOUT CLT_TEST_LIMIT
exec sh "$srcdir/tests/lib/mpi_run.sh" --each "${RANKS:-$(if [ "${CLT_LONG:-0}" = 1 ]; then echo 4 6; else echo 2 3; fi)}" ./tests/pp/test_pipeline
