#!/bin/sh
# comm_app.sh: an application that initialises MPI itself, splits
# MPI_COMM_WORLD in two and all-reduces its own OpenCL buffers through
# cltrain on each half (tests/comm/app_split), on 4 ranks.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-30}
export CLT_TIMEOUT
exec sh "$srcdir/tests/lib/mpi_run.sh" 4 ./tests/comm/app_split
