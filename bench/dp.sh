#!/bin/sh
# dp.sh: data-parallel training benchmarks, each against a peer in the same
# run (absolute numbers on a shared 2-core machine are noise; ratios are
# what to read). Run from the build directory:
#
#   sh ../bench/dp.sh [mlp|cnn] [STEPS]
#
#  1. weak scaling: 2 ranks x 1 thread with global batch 2B against 1 rank
#     x 1 thread with batch B (target: >= 90% of twice the 1-rank rate);
#  2. PyTorch DDP (gloo, 1 thread per rank, OpenBLAS too) on the same model
#     and batch, with the BLAS and threads each side used;
#  3. the fraction of all-reduce time hidden behind the backward pass;
#  4. PoCL + rusticl in one job, --balance auto and equal, against the sum
#     of their solo rates.
set -e
model=${1:-mlp}
steps=${2:-200}
here=$(cd "$(dirname "$0")" && pwd)
spec=$here/../examples/fashion_$model.model
B=64
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi="mpirun --oversubscribe --bind-to none -x POCL_MAX_PTHREAD_COUNT=1 -x RUSTICL_ENABLE"

. "$here/lib.sh"
fair_blas

train() { # NAME NP ARGS...
  name=$1 np=$2
  shift 2
  CLT_LOG_LEVEL=info RUSTICL_ENABLE=${RUSTICL_ENABLE-} $mpi -np "$np" -x CLT_LOG_LEVEL ./cltrain train "$spec" --epochs 100 --max-steps "$steps" \
    --log-every 20 --quiet --metrics "$tmp/$name.jsonl" "$@" >/dev/null 2>"$tmp/$name.err" || {
    cat "$tmp/$name.err"; exit 1; }
}

echo "model $model, $steps steps"
train one 1 --devices pocl --batch $B
train two 2 --devices pocl --batch $((2 * B))
r1=$(rate "$tmp/one.jsonl") r2=$(rate "$tmp/two.jsonl")
echo "1 rank, batch $B:            $r1 samples/s"
echo "2 ranks, batch $((2 * B)):          $r2 samples/s   weak scaling $(ratio "$r2" "$(ratio "$r1" 0.5)") of 2x"
/usr/bin/python3 "$here/pytorch_ddp.py" --model "$model" --ranks 2 --batch $((2 * B)) --steps "$steps" > "$tmp/ddp.json"
ddp=$(/usr/bin/python3 -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["samples_per_s"])' "$tmp/ddp.json")
echo "PyTorch DDP gloo, 2 ranks:   $ddp samples/s   cltrain/DDP $(ratio "$r2" "$ddp")"
echo "  cltrain: $(sed -n 's/^cltrain: info: \(GEMMs on .*\)/\1/p' "$tmp/two.err" | head -1) per rank"
echo "  PyTorch: $(peer_says "$tmp/ddp.json") per rank"
echo "all-reduce hidden behind backward (2 ranks): $(hidden "$tmp/two.jsonl")"

if [ -n "$(RUSTICL_ENABLE=llvmpipe ./cltrain devices --devices rusticl 2>/dev/null | grep rusticl)" ]; then
  export RUSTICL_ENABLE=llvmpipe
  train pocl 1 --devices pocl --batch $B
  train rusticl 1 --devices rusticl --batch $B
  train equal 1 --devices pocl,rusticl --batch $B --balance equal
  train auto 1 --devices pocl,rusticl --batch $B --balance auto
  rp=$(rate "$tmp/pocl.jsonl") rr=$(rate "$tmp/rusticl.jsonl") re=$(rate "$tmp/equal.jsonl") ra=$(rate "$tmp/auto.jsonl")
  sum=$(/usr/bin/python3 -c "print($rp + $rr)")
  echo "PoCL alone $rp, rusticl alone $rr samples/s (sum $sum)"
  echo "PoCL + rusticl, equal split: $re samples/s = $(ratio "$re" "$sum") of the sum"
  echo "PoCL + rusticl, auto:        $ra samples/s = $(ratio "$ra" "$sum") of the sum"
fi
