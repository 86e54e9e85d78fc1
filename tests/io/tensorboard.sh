#!/bin/sh
# tensorboard.sh: `cltrain train --tensorboard DIR` on 2 replicas, read
# back by TensorBoard's own reader (tests/io/tensorboard_check.py): every
# scalar of the --metrics JSON Lines at the same step, each replica's share
# and its FLOP/s and MFU (of steps and epochs) and the prefetch wait among
# them. A directory that cannot be made is refused before training,
# naming it. Exits 77 (skipped) when no Python here imports tensorboard
# (.ci/run installs it from PyPI).
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
. "$srcdir/tests/lib/cli_lib.sh"
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c "import tensorboard.backend.event_processing.event_accumulator" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 here imports tensorboard (pip install tensorboard, as .ci/run does)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err fail=0
export POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-1}

# Two replicas: PoCL and rusticl.
RUSTICL_ENABLE=${RUSTICL_ENABLE:-llvmpipe}
export RUSTICL_ENABLE
expect 0 "training writes TensorBoard events" -- train "$srcdir/examples/fashion_mlp.model" --devices pocl,rusticl \
  --max-steps 60 --log-every 10 --eval-every 30 --tensorboard "$tmp/tb/run" --metrics "$tmp/m.jsonl" --quiet
ls "$tmp/tb/run"/events.out.tfevents.* >/dev/null 2>&1 || { echo "FAIL: no events file in $tmp/tb/run"; fail=1; }
if "$py" "$srcdir/tests/io/tensorboard_check.py" "$tmp/tb/run" "$tmp/m.jsonl" >"$out" 2>&1; then
  echo "ok: TensorBoard reads what --metrics holds"; tail -1 "$out"
else
  echo "FAIL: tensorboard_check.py:"; sed 's/^/  /' "$out"; fail=1
fi
has "$out" "replica1/share" "both replicas' shares"

: >"$tmp/file"
expect 1 "an unmakeable --tensorboard directory" -- train "$srcdir/examples/fashion_mlp.model" --max-steps 5 \
  --tensorboard "$tmp/file/tb"
has "$err" "--tensorboard" "the message names the option"
has "$err" "$tmp/file" "the message names the path"
if grep -q "epoch 1/" "$out"; then echo "FAIL: it trained first"; fail=1; fi
exit $fail
