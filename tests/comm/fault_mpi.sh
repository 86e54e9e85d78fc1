#!/bin/sh
# fault_mpi.sh: process faults in a data-parallel `cltrain train` job on 2
# and 3 ranks, with CLT_TIMEOUT=5:
#   - a rank killed (SIGKILL) after a few steps: the job must end non-zero
#     within the timeout (plus start-up and teardown slack), and its stderr
#     must name the lost rank — from a survivor's timeout error or from
#     Open MPI tearing the job down, whichever comes first;
#   - a rank stalled (SIGSTOP): Open MPI cannot see it, so the survivors'
#     timeout must fire, name the stalled rank, and end the job.
#   - one rank alone given a bad input (data of zero variance, a device
#     spec that matches nothing there, an unwritable --save): the job must
#     end within seconds, not after CLT_TIMEOUT (here 60 s), with that
#     rank's message naming it and the input.
# Every job runs under tests/lib/mpi_run.sh's time limit, and the stalled rank is
# killed on exit whatever happens. Exits 77 without MPI or an OpenCL device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=5
export CLT_TIMEOUT
fail=0
tmp=$(mktemp -d)
cleanup() {
  for f in "$tmp"/pid.*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi

. "$srcdir/tests/lib/cli_lib.sh" # mkidx
mkidx "$tmp" train 96
printf 'input 1 4 4\nflatten\nlinear 32\nrelu\nlinear 10\n' >"$tmp/m.model"

# Each rank records its pid under its rank number, then becomes cltrain.
cat >"$tmp/rank.sh" <<'RANK'
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}
echo $$ >"$FAULT_DIR/pid.$r"
exec "$@"
RANK
FAULT_DIR=$tmp
export FAULT_DIR

now() { date +%s; }

# fault NP RANK SIGNAL [ARGS]: train on NP ranks (with ARGS), send SIGNAL to
# RANK after steps are under way, and check how the job ends.
fault() {
  np=$1 victim=$2 sig=$3
  shift 3
  rm -f "$tmp"/pid.* "$tmp/metrics"
  echo "== $np ranks${*:+ $*}, SIG$sig to rank $victim"
  CLT_TEST_LIMIT=60 sh "$srcdir/tests/lib/mpi_run.sh" "$np" sh "$tmp/rank.sh" "$CLTRAIN" train "$tmp/m.model" \
    --data "$tmp" --normalize scale -e 1000000 -b 12 -d 0 -q --log-every 1 --metrics "$tmp/metrics" \
    "$@" >"$tmp/out" 2>"$tmp/err" &
  job=$!
  # wait (at most 40 s) for a few logged steps
  i=0
  while [ "$(cat "$tmp/metrics" 2>/dev/null | wc -l)" -lt 3 ] && [ $i -lt 400 ] && kill -0 $job 2>/dev/null; do
    sleep 0.1; i=$((i + 1))
  done
  if [ ! -f "$tmp/pid.$victim" ] || [ "$(wc -l <"$tmp/metrics" 2>/dev/null || echo 0)" -lt 3 ]; then
    wait $job
    echo "FAIL: the job did not get going (exit $?):"; sed 's/^/  /' "$tmp/err" "$tmp/out"; fail=1
    return
  fi
  start=$(now)
  kill -"$sig" "$(cat "$tmp/pid.$victim")"
  wait $job
  rc=$?
  took=$(($(now) - start))
  [ "$sig" = STOP ] && kill -9 "$(cat "$tmp/pid.$victim")" 2>/dev/null
  if [ $rc -eq 0 ]; then
    echo "FAIL: the job exited 0 after rank $victim got SIG$sig"; fail=1
  elif [ $rc -eq 124 ]; then  # (137 is mpiexec passing on the SIGKILL)
    echo "FAIL: the job hung after rank $victim got SIG$sig (killed by the time limit)"; fail=1
  elif [ $took -gt $((CLT_TIMEOUT + 15)) ]; then
    echo "FAIL: the job took $took s to end after SIG$sig (CLT_TIMEOUT=$CLT_TIMEOUT)"; fail=1
  fi
  # a message naming the lost rank, from cltrain or from Open MPI
  if ! grep -q "rank $victim\b" "$tmp/err"; then
    echo "FAIL: nothing names rank $victim:"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
  # where a survivor reports ("cltrain: train: ..." or "cltrain: rank R: train: ..."), it names the lost rank
  survivor='^cltrain: \(rank [0-9]*: \)\{0,1\}train:'
  if grep -q "$survivor" "$tmp/err" && ! grep "$survivor" "$tmp/err" | grep -q "rank $victim\b"; then
    echo "FAIL: a survivor's error does not name rank $victim:"; grep "$survivor" "$tmp/err"; fail=1
  fi
  if [ "$sig" = STOP ] && ! grep "$survivor" "$tmp/err" | grep -q "is rank $victim alive"; then
    echo "FAIL: no survivor's timeout asks after the stalled rank $victim:"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
  echo "   exit $rc after $took s; $(grep -m1 -e "$survivor" -e "rank $victim" "$tmp/err")"
}

sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
case $? in 77) echo "SKIP: no MPI launcher"; exit 77 ;; esac

fault 2 1 KILL
fault 3 2 KILL
fault 2 1 STOP
fault 3 1 STOP
# Under ZeRO a rank waits for its peers in the reduce-scatter of each
# bucket and in the parameters' allgather, through a window of its own
# (comm/shm_gather.c); a stalled peer is named there too.
fault 3 1 STOP --zero 2

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
