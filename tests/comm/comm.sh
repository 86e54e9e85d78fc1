#!/bin/sh
# comm.sh: the collectives (tests/comm/test_collectives) on 1, 2, 3 and 4 ranks of this
# machine, host buffers and device buffers on every OpenCL device.
srcdir=${srcdir:-.}
# A failing rank leaves the others waiting: make that an error in seconds.
CLT_TIMEOUT=${CLT_TIMEOUT:-30}
# The threshold given, small messages take recursive doubling or the gather
# (on one node the model would take shm for them, which tests/comm/shm.sh runs).
CLT_ALLREDUCE_SMALL=${CLT_ALLREDUCE_SMALL:-32K}
export CLT_TIMEOUT CLT_ALLREDUCE_SMALL
sh "$srcdir/tests/lib/mpi_run.sh" --each "1 2 3 4" ./tests/comm/test_collectives
status=$?
# Rabenseifner's (halving.c) at every size, with a power of two and with
# the fold of the rank beyond them (3), against its own order of fp16
# roundings (tests/lib/commtest.c); CLT_LONG=1 (make check-long) adds 5.
CLT_ALLREDUCE=rabenseifner sh "$srcdir/tests/lib/mpi_run.sh" --each "${RABENSEIFNER_RANKS:-$(if [ "${CLT_LONG:-0}" = 1 ]; then echo 3 4 5; else echo 3 4; fi)}" ./tests/comm/test_collectives
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 77 ] && exit $rc
exit $status
