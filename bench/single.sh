#!/bin/sh
# single.sh: one device against PyTorch on the same model, batch, optimizer
# and thread count, in the same run, alternating REPS (2) runs of each side
# and comparing medians; then where cltrain's step time goes
# (CLT_PROFILE=1). Each side says what it ran its GEMMs on and with how many
# threads: PyTorch the BLAS library it loaded (the peer refuses the netlib
# reference BLAS: install libopenblas0-pthread), cltrain the GEMM backend
# of its device. Run from the build directory:
#
#   sh ../bench/single.sh [mlp|cnn] [STEPS] [THREADS] [REPS]
set -e
model=${1:-mlp}
steps=${2:-200}
threads=${3:-1}
reps=${4:-2}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
fair_blas
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
spec=$here/../examples/fashion_$model.model
: > "$tmp/ours"; : > "$tmp/theirs"
for r in $(seq "$reps"); do
  CLT_LOG_LEVEL=info ./cltrain train "$spec" --devices pocl --threads "$threads" --epochs 100 \
    --max-steps "$steps" --log-every 20 --quiet --metrics "$tmp/m$r.jsonl" >/dev/null 2>"$tmp/log$r"
  rate "$tmp/m$r.jsonl" >> "$tmp/ours"
  /usr/bin/python3 "$here/pytorch_fashion.py" --model "$model" --max-steps "$steps" --threads "$threads" > "$tmp/p$r.json"
  /usr/bin/python3 -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["samples_per_s"])' \
    "$tmp/p$r.json" >> "$tmp/theirs"
done
c=$(median "$tmp/ours") p=$(median "$tmp/theirs")
echo "$model, batch 64, SGD, $threads thread(s), $reps runs each"
echo "  cltrain samples/s: $(tr '\n' ' ' < "$tmp/ours")(median $c); $(sed -n 's/^cltrain: info: \(GEMMs on .*\)/\1/p' "$tmp/log1" | head -1)"
echo "  PyTorch samples/s: $(tr '\n' ' ' < "$tmp/theirs")(median $p); $(peer_says "$tmp/p1.json")"
echo "  cltrain/PyTorch $(ratio "$c" "$p")"
CLT_PROFILE=1 ./cltrain train "$spec" --devices pocl --threads "$threads" \
  --epochs 100 --max-steps 30 --quiet 2>&1 >/dev/null | sed 's/^cltrain: warn: //'
