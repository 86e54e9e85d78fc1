#!/bin/sh
# ckpt_dp.sh: checkpoints of data-parallel runs (tests/train/test_checkpoint_dp) on 1
# and 2 ranks of this machine (CKPT_DP_RANKS="1 2 3" for more).
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
export CLT_TIMEOUT
status=77
for np in ${CKPT_DP_RANKS:-1 2}; do
  echo "== tests/train/test_checkpoint_dp on $np rank(s)"
  CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300} sh "$srcdir/tests/lib/mpi_run.sh" "$np" ./tests/train/test_checkpoint_dp
  rc=$?
  case $rc in
    0) [ $status -eq 77 ] && status=0 ;;
    77) ;;
    *) echo "FAIL: tests/train/test_checkpoint_dp on $np rank(s) exited $rc"; status=1 ;;
  esac
done
exit $status
