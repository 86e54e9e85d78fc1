#!/bin/sh
# comm_fail.sh: mismatches and an absent rank (tests/test_comm_fail) on 2,
# 3 and 4 ranks, with a 2-second CLT_TIMEOUT so the absent-rank cases end
# in seconds.
srcdir=${srcdir:-.}
CLT_TIMEOUT=2
export CLT_TIMEOUT
status=77
for np in 2 3 4; do
  echo "== tests/test_comm_fail on $np ranks"
  sh "$srcdir/tests/mpi_run.sh" "$np" ./tests/test_comm_fail
  rc=$?
  case $rc in
    0) [ $status -eq 77 ] && status=0 ;;
    77) ;;
    *) echo "FAIL: tests/test_comm_fail on $np ranks exited $rc"; status=1 ;;
  esac
done
exit $status
