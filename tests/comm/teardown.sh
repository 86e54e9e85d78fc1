#!/bin/sh
# teardown.sh: an application of the library (tests/comm/app_teardown) that
# initialises and finalises MPI itself tears cltrain down, on 2 ranks with
# CLT_TIMEOUT=3, under a time limit:
#   - timeout: rank 1 sleeps past CLT_TIMEOUT before a step (both steps
#     return CLT_ETIMEDOUT);
#   - mismatch: the ranks call different collectives, seconds apart;
#   - late: no failure, but rank 1 tears down 5 s after rank 0.
# Every rank's call must return the status expected, and
# clt_trainer_destroy, clt_comm_destroy and the application's own
# MPI_Finalize must return on every rank. A collective MPI call in the
# teardown (MPI_Win_free on one rank against a peer's MPI_Finalize, the
# peer's abandoned barrier having let it through) hangs the job until the
# limit.
srcdir=${srcdir:-.}
CLT_TIMEOUT=3
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-60}
export CLT_TIMEOUT CLT_TEST_LIMIT
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for mode in timeout mismatch late; do
  echo "== $mode"
  sh "$srcdir/tests/lib/mpi_run.sh" 2 ./tests/comm/app_teardown "$mode" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  sed 's/^/   /' "$tmp/out"
  case $rc in
    77) echo "SKIP: $(cat "$tmp/err")"; exit 77 ;;
    0) ;;
    124 | 137) echo "FAIL: $mode: the job hung (killed after $CLT_TEST_LIMIT s):"; sed 's/^/  /' "$tmp/err"; fail=1 ;;
    *) echo "FAIL: $mode: the job exited $rc:"; sed 's/^/  /' "$tmp/err"; fail=1 ;;
  esac
  for r in 0 1; do
    case $mode in
      timeout) want="rank $r: step: CLT_ETIMEDOUT: " ;;
      mismatch) want="rank $r: step: CLT_E\(TIMEDOUT\|MISMATCH\): " ;;
      late) want="rank $r: step\$" ;;
    esac
    for line in "$want" "rank $r: destroyed\$" "rank $r: finalized\$"; do
      grep -q "^$line" "$tmp/out" || { echo "FAIL: $mode: no line '$line'"; fail=1; }
    done
  done
  # a timeout's message names the rank that did not come
  if [ "$mode" = timeout ] && ! grep "^rank 0: step:" "$tmp/out" | grep -q "is rank 1 alive"; then
    echo "FAIL: rank 0's timeout does not name rank 1"; fail=1
  fi
done
exit $fail
