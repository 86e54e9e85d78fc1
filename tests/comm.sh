#!/bin/sh
# comm.sh: the collectives (tests/test_comm) on 1, 2, 3 and 4 ranks of this
# machine, host buffers and device buffers on every OpenCL device.
srcdir=${srcdir:-.}
# A failing rank leaves the others waiting: make that an error in seconds.
CLT_TIMEOUT=${CLT_TIMEOUT:-30}
export CLT_TIMEOUT
status=77
for np in 1 2 3 4; do
  echo "== tests/test_comm on $np rank(s)"
  sh "$srcdir/tests/mpi_run.sh" "$np" ./tests/test_comm
  rc=$?
  case $rc in
    0) [ $status -eq 77 ] && status=0 ;;
    77) ;;
    *) echo "FAIL: tests/test_comm on $np rank(s) exited $rc"; status=1 ;;
  esac
done
exit $status
