#!/bin/sh
# eval_every.sh: --eval-every evaluates each step it names once. The run's
# last step under --max-steps, in mid-epoch, is evaluated by the epoch's
# line that follows it; it was evaluated a second time as a step of
# --eval-every (issue 39). So is an epoch's last step (it always was).
# A 64-sample IDX set (random) at batch 8: 8 steps an epoch.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
. "$srcdir/tests/lib/cli_lib.sh" # expect, mkidx
mkidx "$tmp" train 64
mkidx "$tmp" t10k 16
printf 'input 1 4 4\nflatten\nlinear 16\nrelu\nlinear 10\n' >"$tmp/m.model"

# evaluations RUN: the lines of stdout with a test loss, and the metrics'
# records with one.
evaluations() {
  n=$(grep -c "test loss" "$out")
  m=$(grep -c '"test_loss"' "$tmp/metrics.jsonl")
  if [ "$n" -eq "$2" ] && [ "$m" -eq "$2" ]; then
    echo "ok: $1: $n evaluations"
  else
    echo "FAIL: $1: $n evaluations printed, $m in the metrics, expected $2:"; sed 's/^/  /' "$out"
    sed 's/^/  metrics: /' "$tmp/metrics.jsonl"; fail=1
  fi
}

# --max-steps 4 --eval-every 2: step 2, then step 4 with the epoch's line.
rm -f "$tmp/metrics.jsonl"
expect 0 "--max-steps 4 --eval-every 2" -- train "$tmp/m.model" --data "$tmp" -b 8 -d 0 -q --max-steps 4 \
  --eval-every 2 --metrics "$tmp/metrics.jsonl" &&
  evaluations "the run's last step in mid-epoch" 2
grep -q "^step 2/4: .*test loss" "$out" || { echo "FAIL: step 2 is not evaluated:"; sed 's/^/  /' "$out"; fail=1; }
grep -q "^epoch 1/[0-9]* (stopped at step 4 of 8, --max-steps): .*test loss" "$out" ||
  { echo "FAIL: the epoch's line has no evaluation:"; sed 's/^/  /' "$out"; fail=1; }

# One epoch, --eval-every 4: step 4, then step 8 with the epoch's line.
rm -f "$tmp/metrics.jsonl"
expect 0 "-e 1 --eval-every 4" -- train "$tmp/m.model" --data "$tmp" -b 8 -d 0 -q -e 1 --eval-every 4 \
  --metrics "$tmp/metrics.jsonl" &&
  evaluations "the epoch's last step" 2

exit $fail
