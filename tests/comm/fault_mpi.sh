#!/bin/sh
# fault_mpi.sh: process faults in a data-parallel `cltrain train` job on 2
# and 3 ranks, with CLT_TIMEOUT=5:
#   - a rank killed (SIGKILL) after a few steps: the job must end non-zero
#     within the timeout (plus start-up and teardown slack), and its stderr
#     must name the lost rank — from a survivor's timeout error or from
#     Open MPI tearing the job down, whichever comes first;
#   - a rank stalled (SIGSTOP): Open MPI cannot see it, so the survivors'
#     timeout must fire, name the stalled rank, and end the job (also
#     under --zero 2 and --zero 3, killed and stalled).
#   - one rank alone given a bad input (data of zero variance, a device
#     spec that matches nothing there, an unwritable --save): the job must
#     end within seconds, not after CLT_TIMEOUT (here 60 s), with that
#     rank's message naming it and the input.
# Every job runs under tests/lib/mpi_run.sh's time limit, and the stalled rank is
# killed on exit whatever happens (tests/lib/fault_lib.sh; bench/fault_inject.sh
# repeats these faults and more, with checkpoints resumed after each). Exits
# 77 without MPI or an OpenCL device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=5
export CLT_TIMEOUT
fail=0
tmp=$(mktemp -d)
. "$srcdir/tests/lib/fault_lib.sh" # fault
trap 'fault_cleanup; rm -rf "$tmp"' EXIT

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi

. "$srcdir/tests/lib/cli_lib.sh" # mkidx
mkidx "$tmp" train 96
printf 'input 1 4 4\nflatten\nlinear 32\nrelu\nlinear 10\n' >"$tmp/m.model"
fault_setup
train="$tmp/m.model --data $tmp --normalize scale -e 1000000 -b 12 -d 0"

sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
case $? in 77) echo "SKIP: no MPI launcher"; exit 77 ;; esac

fault 2 1 KILL $train
fault 3 2 KILL $train
fault 2 1 STOP $train
fault 3 1 STOP $train
# Under ZeRO a rank waits for its peers in the reduce-scatter of each
# bucket and in the parameters' allgather, through a window of its own
# (comm/shm_gather.c); a stalled peer is named there too.
fault 3 1 STOP $train --zero 2
# Under ZeRO stage 3 the same collectives, the parameters' allgather into
# the host's whole copy each step (the layers are written from there): a
# rank killed or stalled mid-run ends every rank, named.
fault 2 1 KILL $train --zero 3
fault 3 2 STOP $train --zero 3

# ---- one rank's bad input ---------------------------------------------------
# Rank ONE_RANK gets ONE_ARGS after the others' (later options win); the
# other ranks would wait in a collective for it until CLT_TIMEOUT.
cat >"$tmp/one.sh" <<'ONE'
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}
if [ "$r" = "$ONE_RANK" ]; then eval "exec \"\$@\" $ONE_ARGS"; fi
exec "$@"
ONE
mkdir "$tmp/flat"
{ printf '\000\000\010\003'; be32 96; be32 4; be32 4; head -c $((96 * 16)) /dev/zero; } >"$tmp/flat/train-images-idx3-ubyte"
cp "$tmp/train-labels-idx1-ubyte" "$tmp/flat/"
mkdir "$tmp/adir"
# one NP RANK WANT DESCRIPTION ARGS: WANT is what the failing rank's message holds.
one() {
  np=$1 ONE_RANK=$2 want=$3 what=$4 ONE_ARGS=$5
  export ONE_RANK ONE_ARGS
  echo "== $np ranks, only rank $ONE_RANK: $what"
  start=$(now)
  CLT_TIMEOUT=60 CLT_TEST_LIMIT=90 sh "$srcdir/tests/lib/mpi_run.sh" "$np" sh "$tmp/one.sh" "$CLTRAIN" train \
    "$tmp/m.model" --data "$tmp" -e 1 -b 12 -d 0 -q >"$tmp/out" 2>"$tmp/err"
  rc=$?
  took=$(($(now) - start))
  if [ $rc -eq 0 ]; then
    echo "FAIL: the job exited 0"; fail=1
  elif [ $took -gt 20 ]; then
    echo "FAIL: the job took $took s to end (CLT_TIMEOUT=60): the other ranks waited for rank $ONE_RANK"; fail=1
  fi
  if ! grep "rank $ONE_RANK:" "$tmp/err" | grep -qF -- "$want"; then
    echo "FAIL: no message of rank $ONE_RANK with '$want':"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
  echo "   exit $rc after $took s; $(grep -m1 "rank $ONE_RANK:" "$tmp/err")"
}
one 2 1 "$tmp/flat" "data of zero variance" "--data $tmp/flat"
one 3 2 "99" "a device spec matching nothing" "-d 99"
one 2 0 "$tmp/adir" "--save naming a directory" "--save $tmp/adir"
exit $fail
