#!/bin/sh
# fortran.sh: the Fortran module (tests/fortran/test_fortran) on 1 and 2 ranks of
# this machine when it was built with MPI's Fortran module
# (CLT_FORTRAN_MPI=yes, from make check), else in this process alone.
# Skipped (77) in a build without Fortran (configure --disable-fortran, or
# no compiler).
srcdir=${srcdir:-.}
if [ ! -x ./tests/fortran/test_fortran ]; then
  echo "SKIP: no Fortran module in this build (no Fortran compiler, or --disable-fortran)"
  exit 77
fi
POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-1}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
export POCL_MAX_PTHREAD_COUNT CLT_TIMEOUT CLT_TEST_LIMIT
if [ "$CLT_FORTRAN_MPI" = yes ]; then
  sh "$srcdir/tests/lib/mpi_run.sh" --each "1 2" ./tests/fortran/test_fortran
  rc=$?
  # no launcher: Open MPI starts a singleton of one rank by itself
  [ $rc -eq 77 ] || exit $rc
fi
exec timeout -k 10 "$CLT_TEST_LIMIT" ./tests/fortran/test_fortran
