#!/bin/sh
# llama.sh: the tiny Llama's speed against transformers' LlamaForCausalLM, run from the build
# directory.
#
#   sh ../bench/llama.sh [REPS]   training tokens/s of examples/llama_tiny.model (width 128, 2
#                                 layers, 4 heads sharing 2 key/value heads, SwiGLU 384, RMSNorm,
#                                 rotary positions, an untied head over 2048 tokens, context 128)
#                                 and of bench/pytorch_llama.py's LlamaForCausalLM of the same
#                                 shape, batch, AdamW settings and threads, at 1 and at 2 threads,
#                                 alternating REPS (3) runs each; medians and their ratios
#
# BATCH (16) sequences per step. The tokens are the fortunes corpus' bytes (ids below 256 of the
# 2048: the work is the shape's, whatever the ids). PyTorch must run on an optimised BLAS: the
# peer prints the library it loaded (install libopenblas0-pthread).
set -e
here=$(dirname "$0")
. "$here/lib.sh"
fair_blas
src=$(cd "$here/.." && pwd)
reps=${1:-3}
BATCH=${BATCH:-16}
MODEL=$src/examples/llama_tiny.model
train=data/fortunes_train.bin
[ -f "$train" ] || CLTRAIN=./cltrain OUT_DIR=data sh "$src/scripts/make-fortunes-data.sh" >/dev/null
out=${OUT:-$(mktemp -d)}
T=$(./cltrain summary "$MODEL" | sed -n 's/.*(\([0-9]*\) tokens).*/\1/p')
tokens_per_s() { /usr/bin/python3 -c "print('%.0f' % ($(rate "$1") * $T))"; }
args="-o adamw --lr 1e-3 --betas 0.9,0.95 --weight-decay 0.1 -b $BATCH --data $train --val none -q"

for threads in 1 2; do
  : > "$out/ours$threads"; : > "$out/theirs$threads"
  for r in $(seq "$reps"); do
    POCL_MAX_PTHREAD_COUNT=$threads ./cltrain train "$MODEL" $args --max-steps 30 --log-every 5 -d pocl \
      --metrics "$out/s$threads-$r.jsonl" > /dev/null 2>&1 || true
    tokens_per_s "$out/s$threads-$r.jsonl" >> "$out/ours$threads"
    /usr/bin/python3 "$here/pytorch_llama.py" --data "$train" --batch "$BATCH" --context "$T" --steps 25 \
      --threads "$threads" > "$out/p$threads-$r.json"
    /usr/bin/python3 -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["tokens_per_s"])' \
      "$out/p$threads-$r.json" >> "$out/theirs$threads"
  done
  ours=$(median "$out/ours$threads"); theirs=$(median "$out/theirs$threads")
  echo "$threads thread(s): cltrain $(tr '\n' ' ' < "$out/ours$threads")tokens/s (median $ours), transformers" \
       "$(tr '\n' ' ' < "$out/theirs$threads")(median $theirs): ratio $(ratio "$ours" "$theirs")"
done
echo "peer: $(peer_says "$out/p1-1.json"), attention $(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["attention"])' "$out/p1-1.json")"
echo "(files in $out)"
