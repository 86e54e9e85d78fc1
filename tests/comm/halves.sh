#!/bin/sh
# halves.sh: the all-reduce's two halves as collectives of their own
# (tests/comm/test_halves: reduce-scatter and allgather plans) on 1 to 5 ranks of
# this machine, host buffers and device buffers on every OpenCL device.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-30}
# Small plans on recursive doubling or the gather, as in tests/comm/comm.sh.
CLT_ALLREDUCE_SMALL=${CLT_ALLREDUCE_SMALL:-32K}
export CLT_TIMEOUT CLT_ALLREDUCE_SMALL
exec sh "$srcdir/tests/lib/mpi_run.sh" --each "1 2 3 4 5" ./tests/comm/test_halves
