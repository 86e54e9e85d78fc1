#!/bin/sh
# pipeline_cli.sh: `cltrain train --pipeline` from the command line:
#   - bad pipeline flags and combinations end the job at once, non-zero,
#     with a message naming the flag (on one rank and on 2);
#   - a 2- and a 3-stage pipeline train and evaluate, the split printed;
#   - a stage stalled (SIGSTOP) or killed mid-run ends every rank within
#     CLT_TIMEOUT (5 s here, plus start-up slack), the survivors naming it.
# Exits 77 without MPI or an OpenCL device.
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
sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
case $? in 77) echo "SKIP: no MPI launcher"; exit 77 ;; esac

. "$srcdir/tests/lib/cli_lib.sh" # mkidx
mkidx "$tmp" train 96
mkidx "$tmp" t10k 48
printf 'input 1 4 4\nflatten\nlinear 32\nrelu\nlinear 16\nrelu\nlinear 10\n' >"$tmp/m.model"
printf 'input 1 4 4\nflatten\nlinear 10\n' >"$tmp/one.model"

# bad NP WANT ARGS...: the job fails at once with WANT in its errors.
bad() {
  np=$1 want=$2
  shift 2
  start=$(date +%s)
  CLT_TEST_LIMIT=60 sh "$srcdir/tests/lib/mpi_run.sh" "$np" "$CLTRAIN" train "$@" --data "$tmp" -e 1 -b 12 -q \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  took=$(($(date +%s) - start))
  if [ $rc -eq 0 ]; then
    echo "FAIL: $np rank(s), $*: exited 0"; fail=1
  elif [ $took -gt 20 ]; then
    echo "FAIL: $np rank(s), $*: took $took s to fail"; fail=1
  elif ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL: $np rank(s), $*: no '$want' in:"; sed 's/^/  /' "$tmp/err"; fail=1
  else
    echo "ok: $np rank(s), $*: $(grep -m1 -F -- "$want" "$tmp/err")"
  fi
}
bad 1 "--pipeline" "$tmp/m.model" --pipeline 0
bad 1 "--micro-batches" "$tmp/m.model" --pipeline 2 --micro-batches 0
bad 1 "--schedule-pipeline must be 1f1b or gpipe, not 'zigzag'" "$tmp/m.model" --schedule-pipeline zigzag
bad 1 "--micro-batches is for a pipeline" "$tmp/m.model" --micro-batches 4
bad 1 "--pipeline 2 on 1 rank: the ranks must be the stages times the replicas" "$tmp/m.model" --pipeline 2 -d 0
if [ -n "$RUSTICL_ENABLE" ] && "$CLTRAIN" devices --devices rusticl >/dev/null 2>&1; then
  bad 1 "--pipeline 2 runs one device per rank, but rank 0 was given 2" "$tmp/m.model" --pipeline 2 -d pocl,rusticl
fi
bad 2 "--pipeline 3 on 2 ranks" "$tmp/m.model" --pipeline 3
bad 2 "can be cut into at most 1 stage" "$tmp/one.model" --pipeline 2
bad 2 "--stages 2,x: 'x' is not a layer count" "$tmp/m.model" --pipeline 2 --stages 2,x
bad 2 "--stages 2,2 adds up to 4 layers, but" "$tmp/m.model" --pipeline 2 --stages 2,2
bad 2 "--micro-batches 5 must divide the batch size 12" "$tmp/m.model" --pipeline 2 --micro-batches 5
bad 2 "--shard-by memory with --pipeline 2 is not supported" "$tmp/m.model" --pipeline 2 --zero 2 --shard-by memory
bad 2 "--precision fp16 with --pipeline 2 is not supported" "$tmp/m.model" --pipeline 2 --precision fp16

# good NP ARGS...: trains and prints the split.
good() {
  np=$1
  shift
  CLT_TEST_LIMIT=120 sh "$srcdir/tests/lib/mpi_run.sh" "$np" "$CLTRAIN" train "$tmp/m.model" --data "$tmp" \
    --normalize scale -e 2 -b 12 "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "cltrain: pipeline of" "$tmp/out" || ! grep -q "test loss" "$tmp/out"; then
    echo "FAIL: $np ranks, $*: exit $rc:"; sed 's/^/  /' "$tmp/out" "$tmp/err"; fail=1
  else
    echo "ok: $np ranks, $*: $(grep "cltrain: pipeline of" "$tmp/out")"
  fi
}
good 2 --pipeline 2 --micro-batches 3
good 3 --pipeline 3 --micro-batches 4 --schedule-pipeline gpipe
good 2 --pipeline 2 --stages 4,2
CLT_LOG_LEVEL=info
export CLT_LOG_LEVEL
good 2 --pipeline 2 --stages auto
unset CLT_LOG_LEVEL
if ! grep -q "predicted .* ms a micro-batch" "$tmp/err"; then
  echo "FAIL: --stages auto logged no predicted stage times:"; sed 's/^/  /' "$tmp/err"; fail=1
fi

# --stages auto on a mixed pipeline: stage 0 on rusticl (llvmpipe, many
# times slower per layer here), stage 1 on PoCL; the faster stage takes
# more of the 6 layers than the even cut's 3.
if [ -n "$RUSTICL_ENABLE" ] && "$CLTRAIN" devices --devices rusticl >/dev/null 2>&1; then
  cat >"$tmp/mixed.sh" <<'MIXED'
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}
if [ "$r" = 0 ]; then CLT_DEVICES=rusticl; else CLT_DEVICES=pocl; fi
export CLT_DEVICES
exec "$@"
MIXED
  CLT_TEST_LIMIT=120 CLT_LOG_LEVEL=info sh "$srcdir/tests/lib/mpi_run.sh" 2 sh "$tmp/mixed.sh" "$CLTRAIN" train "$tmp/m.model" \
    --data "$tmp" --normalize scale -e 1 -b 12 --pipeline 2 --stages auto >"$tmp/out" 2>"$tmp/err"
  rc=$?
  split=$(sed -n 's/.*cut: stage 0: \([0-9]*\) layers\{0,1\}, .* stage 1: \([0-9]*\) layers\{0,1\}, .*/\1 \2/p' "$tmp/err" | head -1)
  set -- $split
  if [ $rc -ne 0 ] || [ -z "$split" ] || [ "$1" -ge "$2" ]; then
    echo "FAIL: --stages auto, rusticl then PoCL: exit $rc, layers '$split'"; sed 's/^/  /' "$tmp/out" "$tmp/err"; fail=1
  else
    echo "ok: --stages auto, rusticl then PoCL: $1 and $2 layers"
  fi
fi

# Each rank records its pid under its rank number, then becomes cltrain.
cat >"$tmp/rank.sh" <<'RANK'
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}
echo $$ >"$FAULT_DIR/pid.$r"
exec "$@"
RANK
FAULT_DIR=$tmp
export FAULT_DIR

# fault NP VICTIM SIGNAL: a pipeline of NP stages, SIGNAL to stage VICTIM
# once steps are under way.
fault() {
  np=$1 victim=$2 sig=$3
  rm -f "$tmp"/pid.* "$tmp/metrics"
  CLT_TEST_LIMIT=60 sh "$srcdir/tests/lib/mpi_run.sh" "$np" sh "$tmp/rank.sh" "$CLTRAIN" train "$tmp/m.model" \
    --data "$tmp" --normalize scale -e 1000000 -b 12 -q --log-every 1 --metrics "$tmp/metrics" \
    --pipeline "$np" --micro-batches 4 >"$tmp/out" 2>"$tmp/err" &
  job=$!
  i=0
  while [ "$(cat "$tmp/metrics" 2>/dev/null | wc -l)" -lt 3 ] && [ $i -lt 400 ] && kill -0 $job 2>/dev/null; do
    sleep 0.1; i=$((i + 1))
  done
  if [ ! -f "$tmp/pid.$victim" ] || [ "$(wc -l <"$tmp/metrics" 2>/dev/null || echo 0)" -lt 3 ]; then
    wait $job
    echo "FAIL: the pipeline did not get going (exit $?):"; sed 's/^/  /' "$tmp/err" "$tmp/out"; fail=1
    return
  fi
  start=$(date +%s)
  kill -"$sig" "$(cat "$tmp/pid.$victim")"
  wait $job
  rc=$?
  took=$(($(date +%s) - start))
  [ "$sig" = STOP ] && kill -9 "$(cat "$tmp/pid.$victim")" 2>/dev/null
  if [ $rc -eq 0 ]; then
    echo "FAIL: the pipeline exited 0 after stage $victim got SIG$sig"; fail=1
  elif [ $rc -eq 124 ]; then
    echo "FAIL: the pipeline hung after stage $victim got SIG$sig"; fail=1
  elif [ $took -gt $((CLT_TIMEOUT + 15)) ]; then
    echo "FAIL: the pipeline took $took s to end after SIG$sig (CLT_TIMEOUT=$CLT_TIMEOUT)"; fail=1
  elif ! grep -q "rank $victim\b" "$tmp/err"; then
    echo "FAIL: nothing names rank $victim:"; sed 's/^/  /' "$tmp/err"; fail=1
  else
    echo "ok: $np stages, SIG$sig to stage $victim: exit $rc after $took s; $(grep -m1 "rank $victim\b" "$tmp/err")"
  fi
}
fault 2 1 STOP
[ "${CLT_LONG:-0}" = 1 ] && fault 3 1 STOP # make check-long: the middle stage of 3 stopped too
fault 3 2 KILL
exit $fail
