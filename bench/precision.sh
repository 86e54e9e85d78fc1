#!/bin/sh
# precision.sh: fp16 (--precision fp16: half activations and gradients,
# f16 gradient all-reduce) against fp32 on the same device, model and steps,
# alternating runs in one script so both see the same machine; then the
# activation memory each needs (the replica's log line) and, with 2 ranks,
# the all-reduce time. Run from the build directory:
#
#   sh ../bench/precision.sh [mlp|cnn] [STEPS] [DEVICES] [ROUNDS]
set -e
model=${1:-cnn}
steps=${2:-100}
devices=${3:-pocl}
rounds=${4:-2}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # run PRECISION OUT [mpirun prefix...]
  p=$1 out=$2
  shift 2
  "$@" ./cltrain train "$here/../examples/fashion_$model.model" --devices "$devices" --epochs 100 --max-steps "$steps" \
    --log-every 10 --quiet --precision "$p" --metrics "$out" >/dev/null 2>"$tmp/log"
}
for r in $(seq "$rounds"); do
  for p in fp32 fp16; do
    run $p "$tmp/$p-$r.jsonl"
    echo "$model on $devices, $p, round $r: $(rate "$tmp/$p-$r.jsonl") samples/s"
  done
done
best() { for f in "$tmp"/"$1"-*.jsonl; do rate "$f"; done | sort -g | tail -1; }
a=$(best fp32) b=$(best fp16)
echo "$model: fp32 $a samples/s, fp16 $b samples/s (best of $rounds), fp16/fp32 $(ratio "$b" "$a")"
for p in fp32 fp16; do
  CLT_LOG_LEVEL=info ./cltrain train "$here/../examples/fashion_$model.model" --devices "$devices" --max-steps 1 \
    --quiet --precision $p 2>&1 >/dev/null | grep -m1 "activations" | sed "s/^/$p: /"
done
if command -v mpirun >/dev/null; then
  mpi="mpirun -np 2 --oversubscribe -x POCL_MAX_PTHREAD_COUNT=1"
  [ "$(id -u)" -eq 0 ] && mpi="$mpi --allow-run-as-root"
  for p in fp32 fp16; do
    OMPI_MCA_btl_vader_single_copy_mechanism=none run $p "$tmp/dp-$p.jsonl" $mpi
    echo "2 ranks, $p: $(rate "$tmp/dp-$p.jsonl") samples/s, all-reduce $(hidden "$tmp/dp-$p.jsonl") hidden"
  done
fi
