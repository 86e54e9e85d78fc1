#!/bin/sh
# interop.sh: examples/interop.c, the program README shows for calling
# OpenCL and MPI beside cltrain, on 2 ranks: each rank says it is one of 2
# (it said "4 rank(s)": it summed the communicator's size over the ranks),
# and its own count of MPI_COMM_WORLD agrees with cltrain's communicator.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-30}
export CLT_TIMEOUT
out=$(mktemp)
trap 'rm -f "$out"' EXIT
sh "$srcdir/tests/lib/mpi_run.sh" 2 ./examples/interop >"$out" 2>&1
rc=$?
[ $rc -eq 77 ] && exit 77
cat "$out"
if [ $rc -ne 0 ]; then echo "FAIL: examples/interop on 2 ranks exited $rc"; exit 1; fi
fail=0
for r in 0 1; do
  if grep -q "; rank $r of 2 rank(s)\$" "$out"; then echo "ok: rank $r says it is one of 2"
  else echo "FAIL: no line of rank $r saying '; rank $r of 2 rank(s)'"; fail=1; fi
done
if grep "rank(s)" "$out" | grep -qv " of 2 rank(s)\$"; then echo "FAIL: a rank counts other than 2 ranks"; fail=1; fi
exit $fail
