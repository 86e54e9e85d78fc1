#!/bin/sh
# pipeline.sh: pipeline parallelism (tests/pp/test_pipeline) on 2, 3, 4 and 6
# ranks of this machine: P = 2 and 3 stages, P = 2 x D = 2 and 3 x 2 replicas,
# stages alternating PoCL and rusticl, against one device.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-600}
export CLT_TIMEOUT CLT_TEST_LIMIT
exec sh "$srcdir/tests/lib/mpi_run.sh" --each "2 3 4 6" ./tests/pp/test_pipeline
