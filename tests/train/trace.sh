#!/bin/sh
# trace.sh: `cltrain train --trace FILE` writes a Chrome / Perfetto
# timeline, checked by tests/train/trace_check.py: on one rank and (when mpiexec
# exists) on 2 ranks with checkpoints, every rank's steps nest their spans,
# the devices' layer spans follow one another, and rank 0's all-reduce spans
# add up to the comm_s of its metrics; a 2-stage pipeline's micro-batches
# are on its stages' host lanes. A trace path that cannot be written
# is refused before training, naming --trace. Exits 77 without an OpenCL
# device or a python3.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
export CLT_TIMEOUT POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-1}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
. "$srcdir/tests/lib/cli_lib.sh" # need_python, mkidx
need_python "the trace"

mkidx "$tmp" train 96
printf 'input 1 4 4\nflatten\nlinear 32\nrelu\nlinear 10\n' >"$tmp/m.model"
train="train $tmp/m.model --data $tmp --normalize scale -e 1 -b 12 -d 0 -q --max-steps 6 --log-every 2 --bucket-mb 0.001"

check() { # WHAT RANKS: the trace and metrics of the run just made
  if "$py" "$srcdir/tests/train/trace_check.py" "$tmp/t.json" "$tmp/m.jsonl" "$2" 6 >"$tmp/check" 2>&1; then
    echo "ok: $1"; sed 's/^/  /' "$tmp/check"
  else
    echo "FAIL: $1:"; sed 's/^/  /' "$tmp/check"; fail=1
  fi
}

if $CLTRAIN $train --trace "$tmp/t.json" --metrics "$tmp/m.jsonl" >"$tmp/out" 2>"$tmp/err"; then
  check "one rank's timeline" 1
else
  echo "FAIL: --trace on one rank:"; sed 's/^/  /' "$tmp/err"; fail=1
fi
grep -q "wrote the timeline to $tmp/t.json" "$tmp/out" || { echo "FAIL: no word of the timeline"; fail=1; }

if $CLTRAIN $train --trace "$tmp/no/such/dir/t.json" >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL: a trace that cannot be written was taken"; fail=1
elif grep -q -- "--trace" "$tmp/err" && ! grep -q "step 1" "$tmp/out"; then
  echo "ok: refused before training: $(head -1 "$tmp/err")"
else
  echo "FAIL: an unwritable trace:"; sed 's/^/  /' "$tmp/err"; fail=1
fi

MPIEXEC=${MPIEXEC:-mpiexec}
if command -v "$MPIEXEC" >/dev/null 2>&1; then
  rm -f "$tmp/m.jsonl"
  if sh "$srcdir/tests/lib/mpi_run.sh" 2 $CLTRAIN $train --trace "$tmp/t.json" --metrics "$tmp/m.jsonl" \
       --checkpoint-dir "$tmp/ck" --checkpoint-every 3 >"$tmp/out" 2>"$tmp/err"; then
    check "two ranks' timeline, with checkpoints" 2
    grep -q '"cat":"checkpoint"' "$tmp/t.json" && echo "ok: the checkpoints are on it" ||
      { echo "FAIL: no checkpoint on the timeline"; fail=1; }
  else
    echo "FAIL: --trace on 2 ranks:"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
  # ZeRO stage 2: the reduce-scatters and the parameters' allgather after
  # the step, with the wait for the step's end outside it.
  rm -f "$tmp/m.jsonl"
  if sh "$srcdir/tests/lib/mpi_run.sh" 2 $CLTRAIN $train --trace "$tmp/t.json" --metrics "$tmp/m.jsonl" \
       --zero 2 >"$tmp/out" 2>"$tmp/err"; then
    check "two ranks' timeline at --zero 2" 2
    grep -q '"name":"allgather [0-9]* KiB","cat":"comm"' "$tmp/t.json" &&
      grep -q '"name":"the optimizer step","cat":"wait"' "$tmp/t.json" &&
      echo "ok: the parameters' allgather and the wait for the step are on it" ||
      { echo "FAIL: no allgather or wait for the optimizer step on the timeline at --zero 2"; fail=1; }
  else
    echo "FAIL: --trace at --zero 2:"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
  rm -f "$tmp/m.jsonl"
  if sh "$srcdir/tests/lib/mpi_run.sh" 2 $CLTRAIN $train --trace "$tmp/t.json" --metrics "$tmp/m.jsonl" \
       --pipeline 2 --micro-batches 2 >"$tmp/out" 2>"$tmp/err"; then
    check "a pipeline's timeline" 2
    grep -q '"name":"micro-batch 1: backward","cat":"compute"' "$tmp/t.json" &&
      grep -q '"name":"micro-batch 1: forward","cat":"compute"' "$tmp/t.json" &&
      echo "ok: each stage's forwards and backwards are on it" ||
      { echo "FAIL: no micro-batch's forward and backward on the pipeline's timeline"; fail=1; }
  else
    echo "FAIL: --trace of a pipeline:"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
fi
exit $fail
