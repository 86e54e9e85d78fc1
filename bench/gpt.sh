#!/bin/sh
# gpt.sh: the tiny GPT's benchmarks, run from the build directory.
#
#   sh ../bench/gpt.sh curve [SECONDS]   train examples/gpt_tiny.model on the fortunes corpus for
#                                        about SECONDS (600), printing the validation curve beside
#                                        the interpolated order-3 byte n-gram (bench/ngram) fitted
#                                        on the same training split
#   sh ../bench/gpt.sh speed [REPS]      tokens/s against PyTorch (bench/pytorch_gpt.py) on the same
#                                        GPT, batch, context and threads, alternating REPS (2) runs
#                                        each; medians and their ratio
#   sh ../bench/gpt.sh dp [STEPS]        the same training over 2 ranks, and over PoCL + rusticl in
#                                        one process (STEPS, 200), with the validation loss
#
# THREADS (2) CPU threads for each side (PoCL's POCL_MAX_PTHREAD_COUNT, torch.set_num_threads);
# BATCH (16) sequences per step; LR (0.003). PyTorch must run on an optimised BLAS: the peer prints
# the library it loaded (install libopenblas0-pthread).
set -e
here=$(dirname "$0")
. "$here/lib.sh"
fair_blas
src=$(cd "$here/.." && pwd)
what=${1:-curve}
THREADS=${THREADS:-2}
BATCH=${BATCH:-16}
LR=${LR:-0.003}
MODEL=$src/examples/gpt_tiny.model
train=data/fortunes_train.bin
val=data/fortunes_val.bin
[ -f "$train" ] || CLTRAIN=./cltrain OUT_DIR=data sh "$src/scripts/make-fortunes-data.sh" >/dev/null
out=${OUT:-$(mktemp -d)}
export POCL_MAX_PTHREAD_COUNT=$THREADS
T=$(./cltrain summary "$MODEL" | sed -n 's/.*(\([0-9]*\) tokens).*/\1/p')

# tokens/s of a cltrain metrics file: the mean of its step records after the first.
tokens_per_s() { /usr/bin/python3 -c "print('%.0f' % ($(rate "$1") * $T))"; }

train_args="-o adamw --lr $LR --weight-decay 0.1 --clip 1 -b $BATCH --data $train --val $val -q"

case $what in
curve)
  secs=${2:-600}
  ./bench/ngram "$train" "$val" > "$out/ngram.json"
  # How many steps fit: measure 20, then aim at the time left.
  ./cltrain train "$MODEL" $train_args --max-steps 20 --log-every 5 -d pocl --val none --metrics "$out/probe.jsonl" \
    > /dev/null 2>&1 || true
  rate_tok=$(tokens_per_s "$out/probe.jsonl")
  steps=$(/usr/bin/python3 -c "print(int($secs * 0.8 * $rate_tok / ($BATCH * $T)))")
  every=$((steps / 8))
  ./cltrain train "$MODEL" $train_args --schedule cosine --warmup $((steps / 20)) --min-lr 0.0003 \
    --max-steps "$steps" --eval-every "$every" --log-every 50 -d pocl --metrics "$out/curve.jsonl" -s "$out/gpt.safetensors"
  /usr/bin/python3 - "$out/curve.jsonl" "$out/ngram.json" <<'EOF'
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ng = json.load(open(sys.argv[2]))
print("validation curve of the tiny GPT (bits per byte), against the %s: %.4f" % (ng["model"], ng["val_bits_per_byte"]))
print("%8s %10s %10s %10s" % ("step", "seconds", "val loss", "bits/byte"))
last = None
for r in recs:
    if r.get("test_loss") is not None:
        last = r["test_loss"] / math.log(2)
        print("%8d %10.1f %10.4f %10.4f" % (r["step"], r["elapsed_s"], r["test_loss"], last))
print(json.dumps({"gpt_val_bits_per_byte": last, "ngram_val_bits_per_byte": ng["val_bits_per_byte"],
                  "gpt_below_ngram": last is not None and last < ng["val_bits_per_byte"]}))
EOF
  ;;
speed)
  reps=${2:-2}
  : > "$out/ours" ; : > "$out/theirs"
  for r in $(seq "$reps"); do
    ./cltrain train "$MODEL" $train_args --max-steps 30 --log-every 5 -d pocl --val none \
      --metrics "$out/s$r.jsonl" > /dev/null 2>&1 || true
    tokens_per_s "$out/s$r.jsonl" >> "$out/ours"
    /usr/bin/python3 "$here/pytorch_gpt.py" --data "$train" --batch "$BATCH" --context "$T" --width 128 --heads 4 \
      --layers 2 --vocab 256 --lr "$LR" --steps 25 --threads "$THREADS" > "$out/p$r.json"
    /usr/bin/python3 -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["tokens_per_s"])' \
      "$out/p$r.json" >> "$out/theirs"
  done
  med() { sort -n "$1" | /usr/bin/python3 -c 'import sys; v=[float(l) for l in sys.stdin]; print(v[len(v)//2] if len(v)%2 else (v[len(v)//2-1]+v[len(v)//2])/2)'; }
  ours=$(med "$out/ours"); theirs=$(med "$out/theirs")
  echo "cltrain tokens/s: $(tr '\n' ' ' < "$out/ours")(median $ours), PoCL threads $THREADS"
  echo "PyTorch tokens/s: $(tr '\n' ' ' < "$out/theirs")(median $theirs), $(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("torch", d["torch"], "threads", d["threads"], "BLAS", d["blas"])' "$out/p1.json")"
  echo "ratio cltrain / PyTorch: $(ratio "$ours" "$theirs")"
  ;;
dp)
  steps=${2:-200}
  POCL_MAX_PTHREAD_COUNT=1 mpirun -np 2 --oversubscribe --allow-run-as-root -x POCL_MAX_PTHREAD_COUNT \
    ./cltrain train "$MODEL" $train_args --max-steps "$steps" --log-every 20 -d pocl --metrics "$out/dp2.jsonl"
  echo "2 ranks x 1 PoCL thread: $(tokens_per_s "$out/dp2.jsonl") tokens/s"
  RUSTICL_ENABLE=llvmpipe ./cltrain train "$MODEL" $train_args --max-steps "$steps" --log-every 20 -d pocl,rusticl \
    --balance auto --metrics "$out/mixed.jsonl"
  echo "PoCL + rusticl in one process: $(tokens_per_s "$out/mixed.jsonl") tokens/s"
  ;;
*)
  echo "usage: sh bench/gpt.sh curve [SECONDS] | speed [REPS] | dp [STEPS]" >&2
  exit 2
  ;;
esac
echo "(files in $out)"
