#!/bin/sh
# dp.sh: data-parallel training (tests/test_dp) on 1, 2, 3 and 4 ranks of
# this machine, against single-device training.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
export CLT_TIMEOUT
status=77
for np in 1 2 3 4; do
  echo "== tests/test_dp on $np rank(s)"
  CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300} sh "$srcdir/tests/mpi_run.sh" "$np" ./tests/test_dp
  rc=$?
  case $rc in
    0) [ $status -eq 77 ] && status=0 ;;
    77) ;;
    *) echo "FAIL: tests/test_dp on $np rank(s) exited $rc"; status=1 ;;
  esac
done
exit $status
