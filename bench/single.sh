#!/bin/sh
# single.sh: one device against PyTorch on the same model, batch, optimizer
# and thread count, in the same run; then where cltrain's step time goes
# (CLT_PROFILE=1). Run from the build directory:
#
#   sh ../bench/single.sh [mlp|cnn] [STEPS] [THREADS]
set -e
model=${1:-mlp}
steps=${2:-200}
threads=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
POCL_MAX_PTHREAD_COUNT=$threads ./cltrain train "$here/../examples/fashion_$model.model" --devices pocl --epochs 100 \
  --max-steps "$steps" --log-every 20 --quiet --metrics "$tmp/m.jsonl" >/dev/null
c=$(rate "$tmp/m.jsonl")
p=$(peer --model "$model" --max-steps "$steps" --threads "$threads")
echo "$model, batch 64, SGD, $threads thread(s): cltrain $c samples/s, PyTorch $p samples/s, cltrain/PyTorch $(ratio "$c" "$p")"
CLT_PROFILE=1 POCL_MAX_PTHREAD_COUNT=$threads ./cltrain train "$here/../examples/fashion_$model.model" --devices pocl \
  --epochs 100 --max-steps 30 --quiet 2>&1 >/dev/null | sed 's/^cltrain: warn: //'
