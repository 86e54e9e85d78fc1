#!/bin/sh
# comm_fail.sh: mismatches and an absent rank (tests/comm/test_collectives_fail) on 2
# and 3 ranks (CLT_LONG=1, make check-long, adds 4), with a 2-second CLT_TIMEOUT so the absent-rank cases end
# in seconds.
srcdir=${srcdir:-.}
CLT_TIMEOUT=2
export CLT_TIMEOUT
sh "$srcdir/tests/lib/mpi_run.sh" --each "${RANKS:-$(if [ "${CLT_LONG:-0}" = 1 ]; then echo 2 3 4; else echo 2 3; fi)}" ./tests/comm/test_collectives_fail
status=$?
# The tool, not the library, ends the job: ranks that ask for different
# sizes get the mismatch on stderr and MPI_Abort, and mpirun fails.
if [ $status -ne 77 ] && [ -n "$CLTRAIN" ]; then
  echo "== cltrain bench allreduce with ranks that disagree"
  err=$(mktemp)
  sh "$srcdir/tests/lib/mpi_run.sh" 1 "$CLTRAIN" bench allreduce --no-device --min-bytes 4 --max-bytes 4 : \
    -np 1 "$CLTRAIN" bench allreduce --no-device --min-bytes 8 --max-bytes 8 >/dev/null 2>"$err"
  rc=$?
  if [ $rc -eq 0 ] || ! grep -q "ranks disagree" "$err" || ! grep -q "MPI_Abort" "$err"; then
    echo "FAIL: expected a mismatch message and MPI_Abort, got exit $rc and:"; sed 's/^/  /' "$err"; status=1
  else
    echo "ok: $(grep -m1 'ranks disagree' "$err")"
  fi
  rm -f "$err"
fi
exit $status
