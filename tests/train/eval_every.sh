#!/bin/sh
# eval_every.sh: --eval-every evaluates each step once (issue 39). The
# run's last step under --max-steps, in mid-epoch, was evaluated twice: as
# a step of --eval-every and again for the epoch's line that follows it.
# Now the epoch's line reuses the step's evaluation: the timeline (--trace)
# holds one evaluation span for each evaluated step, the step's metrics
# record and the epoch's give the same test loss, and stdout says it once,
# in the epoch's line. An epoch's last step is evaluated once too (it
# always was). A 64-sample IDX set (random) at batch 8: 8 steps an epoch.
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

# evaluations WHAT N: N evaluation spans in the timeline, and N lines of
# stdout with a test loss.
evaluations() {
  e=$(grep -c '"cat":"eval"' "$tmp/trace.json")
  n=$(grep -c "test loss" "$out")
  if [ "$e" -eq "$2" ] && [ "$n" -eq "$2" ]; then
    echo "ok: $1: $e evaluations"
  else
    echo "FAIL: $1: $e evaluations in the timeline, $n printed, expected $2:"; sed 's/^/  /' "$out"; fail=1
  fi
}

# --max-steps 4 --eval-every 2: step 2, then step 4, once, for its step
# record and the epoch's line.
expect 0 "--max-steps 4 --eval-every 2" -- train "$tmp/m.model" --data "$tmp" -b 8 -d 0 -q --max-steps 4 \
  --eval-every 2 --metrics "$tmp/metrics.jsonl" --trace "$tmp/trace.json" &&
  evaluations "the run's last step in mid-epoch" 2
grep -q "^step 2/4: .*test loss" "$out" || { echo "FAIL: step 2 is not evaluated:"; sed 's/^/  /' "$out"; fail=1; }
grep -q "^epoch 1/[0-9]* (stopped at step 4 of 8, --max-steps): .*test loss" "$out" ||
  { echo "FAIL: the epoch's line has no evaluation:"; sed 's/^/  /' "$out"; fail=1; }
grep '"step":4,' "$tmp/metrics.jsonl" | grep -o '"test_loss":[^,}]*' >"$tmp/losses"
grep '"event":"epoch"' "$tmp/metrics.jsonl" | grep -o '"test_loss":[^,}]*' >>"$tmp/losses"
if [ "$(wc -l <"$tmp/losses")" -eq 3 ] && [ "$(tail -n 2 "$tmp/losses" | uniq | wc -l)" -eq 1 ]; then
  echo "ok: step 4's record and the epoch's give one test loss: $(tail -n 1 "$tmp/losses")"
else
  echo "FAIL: step 4's record and the epoch's test loss:"; sed 's/^/  /' "$tmp/losses" "$tmp/metrics.jsonl"; fail=1
fi

# One epoch, --eval-every 4: step 4, then step 8 for the epoch's line.
rm -f "$tmp/metrics.jsonl" "$tmp/trace.json"
expect 0 "-e 1 --eval-every 4" -- train "$tmp/m.model" --data "$tmp" -b 8 -d 0 -q -e 1 --eval-every 4 \
  --trace "$tmp/trace.json" &&
  evaluations "the epoch's last step" 2

exit $fail
