#!/bin/sh
# unet_ranks.sh: a U-Net-shaped model (tests/train/unet_small.model: three
# nested save/concat skips, max pooling, groupnorm) trains alike however it
# is spread. 10 SGD steps (momentum 0.9, batch 8) on tests/data/make_data's
# blobs (8 values a sample, read as 2 x 2 x 2 images) on one rank are the
# reference; each of
#   - 2 ranks, plain data parallelism,
#   - 2 ranks with --zero 2,
#   - 2 ranks as a 2-stage pipeline (the even cut, which falls outside every
#     save's branch),
# gives every step's loss within 1e-5 of it and every weight after the
# steps within 1e-5 (tests/train/weights_close): the same float32 numbers
# added in other orders; and with activations stored as half (--precision
# fp16, a first loss scale of 256 so that no step is skipped) on one rank
# and on 2 with --zero 2, within 1e-3 (measured: losses 6.4e-4 apart, weights
# 1.7e-4). A pipeline cut by hand between a save and its concat is refused
# before training, naming both lines. Exits 77 without an
# OpenCL device or an MPI launcher.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLOSE=${WEIGHTS_CLOSE:-$(dirname "$CLTRAIN")/tests/train/weights_close}
MAKE_DATA=${MAKE_DATA:-$(dirname "$CLTRAIN")/tests/data/make_data}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
export CLT_TIMEOUT
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err fail=0
. "$srcdir/tests/lib/cli_lib.sh"

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
case $? in 77) echo "SKIP: no MPI launcher"; exit 77 ;; esac
[ -x "$CLOSE" ] || { echo "FAIL: $CLOSE is not built (make tests/train/weights_close)"; exit 1; }
[ -x "$MAKE_DATA" ] || { echo "FAIL: $MAKE_DATA is not built (make tests/data/make_data)"; exit 1; }
"$MAKE_DATA" "$tmp" 400 >/dev/null || { echo "FAIL: make_data"; exit 1; }

model=$srcdir/tests/train/unet_small.model
train="train $model --data $tmp/x.npy --labels $tmp/y.npy --val none -o sgd --lr 0.05 --momentum 0.9 -b 8
  --max-steps 10 --log-every 1 -q"
# losses FILE: each step's loss in the metrics file, one a line
losses() { grep '"event":"step"' "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }

expect 0 "10 SGD steps on one rank" -- $train -d 0 --metrics "$tmp/one.jsonl" -s "$tmp/one.safetensors"
losses "$tmp/one.jsonl" >"$tmp/one.losses"
[ "$(wc -l <"$tmp/one.losses")" -eq 10 ] || { echo "FAIL: one rank: not 10 steps' losses"; fail=1; }
[ $fail -eq 0 ] || exit 1

# compare NAME WHAT TOL: NAME's losses and weights against one rank's
compare() {
  losses "$tmp/$1.jsonl" >"$tmp/$1.losses"
  if [ "$(wc -l <"$tmp/$1.losses")" -eq 10 ] &&
     worst=$(paste "$tmp/one.losses" "$tmp/$1.losses" | awk -v tol="$3" '
       { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
       END { printf "%.3g", m; exit (m <= tol ? 0 : 1) }'); then
    echo "ok: $2: 10 steps' losses within $3 of one rank's (largest difference $worst)"
  else
    echo "FAIL: $2: the losses differ from one rank's by ${worst:-?}:"; paste "$tmp/one.losses" "$tmp/$1.losses"
    fail=1
  fi
  if "$CLOSE" "$tmp/one.safetensors" "$tmp/$1.safetensors" "$3" >"$tmp/close"; then
    echo "ok: $2: the weights after them within $3 of one rank's ($(cat "$tmp/close"))"
  else
    echo "FAIL: $2: the weights after them: $(cat "$tmp/close")"; fail=1
  fi
}

# mpi NAME WHAT TOL ARGS...: the steps on 2 ranks, then compare
mpi() {
  name=$1 what=$2 tol=$3
  shift 3
  if sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" $train "$@" --metrics "$tmp/$name.jsonl" \
       -s "$tmp/$name.safetensors" >"$out" 2>"$err"; then
    compare "$name" "$what" "$tol"
  else
    echo "FAIL: $what: exited non-zero:"; sed 's/^/  /' "$err"; fail=1
  fi
}
mpi dp "2 ranks, data parallel" 1e-5
mpi zero "2 ranks, --zero 2" 1e-5 --zero 2
mpi pipe "2 ranks, --pipeline 2" 1e-5 --pipeline 2
half="--precision fp16 --loss-scale 256"
expect 0 "one rank, fp16 activations" -- $train -d 0 $half --metrics "$tmp/half.jsonl" \
  -s "$tmp/half.safetensors" && compare half "one rank, fp16 activations" 1e-3
mpi half2 "2 ranks, --zero 2, fp16 activations" 1e-3 --zero 2 $half

# layers 1-4 | 5-23: `save e1` (line 8) is in the first stage, its concat
# (line 20) in the second
mpi_expect 2 2 "a pipeline cut between a save and its concat" -- $train --pipeline 2 --stages 4,19
has "$err" "cuts the skip branch from line 8 to the concat at line 20" "the refusal names the save and the concat"
exit $fail
