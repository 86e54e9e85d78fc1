# fault_lib.sh: process faults in a `cltrain train` job under mpirun, for
# tests/comm/fault_mpi.sh and bench/fault_inject.sh (sourced, not run).
#
# The caller sets CLTRAIN, srcdir, tmp (a directory of its own), CLT_TIMEOUT
# (exported) and fail=0, calls fault_setup, and may set before each fault:
#   FAULT_SLACK  seconds past CLT_TIMEOUT the job may take to end after the
#                fault (15: make check shares a loaded machine);
#   FAULT_STEPS  logged steps to wait for before the fault (3);
#   FAULT_WHEN   a command that returns 0 when the moment has come (run in a
#                loop once the steps are there; default: at once);
#   FAULT_LIMIT  the job's time limit (60 s);
#   FAULT_ACTION the fault when SIGNAL is - (a command: a file system made
#                read-only, say; the caller checks the messages).
# Every job runs under tests/lib/mpi_run.sh's time limit, and a stalled rank
# is killed when the script exits whatever happens.

fault_cleanup() {
  for f in "$tmp"/pid.*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
}

# fault_setup: $tmp/rank.sh, which records each rank's pid under its rank
# number and then becomes the command it is given.
fault_setup() {
  cat >"$tmp/rank.sh" <<'RANK'
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}
echo $$ >"$FAULT_DIR/pid.$r"
exec "$@"
RANK
  FAULT_DIR=$tmp
  export FAULT_DIR
}

now() { date +%s; }
# now_ms: milliseconds since the epoch
now_ms() { date +%s%N | cut -c1-13; }

# fault NP RANK SIGNAL TRAIN-ARGS...: `cltrain train TRAIN-ARGS` on NP ranks
# (with --log-every 1 --metrics, -q), SIGNAL sent to RANK (or FAULT_ACTION
# run) once FAULT_STEPS steps are logged and FAULT_WHEN holds; then the job must end non-zero
# within CLT_TIMEOUT + FAULT_SLACK seconds, its stderr naming the rank (from
# a survivor's error or from Open MPI tearing the job down, whichever comes
# first); after SIGSTOP a survivor's timeout must ask after it. Sets
# fault_took (seconds from the signal to the end of the job, to the
# millisecond) and fault_rc; stdout and stderr are left in $tmp/out and
# $tmp/err.
fault() {
  np=$1 victim=$2 sig=$3
  shift 3
  rm -f "$tmp"/pid.* "$tmp/metrics"
  if [ "$sig" = - ]; then
    echo "== $np ranks: $*; once '$FAULT_WHEN' holds: '$FAULT_ACTION'"
  else
    echo "== $np ranks: $*; SIG$sig to rank $victim${FAULT_WHEN:+ once '$FAULT_WHEN' holds}"
  fi
  CLT_TEST_LIMIT=${FAULT_LIMIT:-60} sh "$srcdir/tests/lib/mpi_run.sh" "$np" sh "$tmp/rank.sh" "$CLTRAIN" train "$@" \
    -q --log-every 1 --metrics "$tmp/metrics" >"$tmp/out" 2>"$tmp/err" &
  job=$!
  # wait (at most 40 s) for the logged steps, then for the moment
  i=0 want=${FAULT_STEPS:-3}
  while [ "$(cat "$tmp/metrics" 2>/dev/null | wc -l)" -lt "$want" ] && [ $i -lt 400 ] && kill -0 $job 2>/dev/null; do
    sleep 0.1; i=$((i + 1))
  done
  j=0 until=$(($(now) + 60)) missed=0
  while [ -n "$FAULT_WHEN" ] && ! $FAULT_WHEN && kill -0 $job 2>/dev/null; do # polled without a pause
    j=$((j + 1))
    [ $((j % 200)) -eq 0 ] && [ "$(now)" -ge $until ] && missed=1 && break
  done
  fault_rc=-1 fault_took=-1
  if [ ! -f "$tmp/pid.$victim" ] || [ "$(wc -l <"$tmp/metrics" 2>/dev/null || echo 0)" -lt "$want" ] ||
     [ $missed -ne 0 ] || ! kill -0 $job 2>/dev/null; then
    wait $job
    echo "FAIL: the job did not get going, ended before the fault, or '$FAULT_WHEN' never held (exit $?):"
    sed 's/^/  /' "$tmp/err" "$tmp/out"
    fail=1
    return 1
  fi
  read -r vpid <"$tmp/pid.$victim"
  if [ "$sig" = - ]; then start=$(now_ms); $FAULT_ACTION; else kill -"$sig" "$vpid"; start=$(now_ms); fi
  wait $job
  fault_rc=$?
  end=$(now_ms)
  fault_took=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
  [ "$sig" = STOP ] && kill -9 "$(cat "$tmp/pid.$victim")" 2>/dev/null
  limit=$((CLT_TIMEOUT + ${FAULT_SLACK:-15}))
  what="rank $victim got SIG$sig"
  [ "$sig" = - ] && what="'$FAULT_ACTION'"
  if [ $fault_rc -eq 0 ]; then
    echo "FAIL: the job exited 0 after $what"; fail=1
  elif [ $fault_rc -eq 124 ]; then  # (137 is mpiexec passing on the SIGKILL)
    echo "FAIL: the job hung after $what (killed by the time limit)"; fail=1
  elif [ $((end - start)) -gt $((limit * 1000)) ]; then
    echo "FAIL: the job took $fault_took s to end after $what (CLT_TIMEOUT=$CLT_TIMEOUT, at most $limit)"; fail=1
  fi
  if [ "$sig" = - ]; then
    echo "   exit $fault_rc after $fault_took s; $(grep -m1 "^cltrain: rank $victim:" "$tmp/err")"
    return 0
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
  echo "   exit $fault_rc after $fault_took s; $(grep -m1 -e "$survivor" -e "rank $victim" "$tmp/err")"
}
