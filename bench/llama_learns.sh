#!/bin/sh
# llama_learns.sh: does the tiny Llama learn? Run from the build directory.
#
#   sh ../bench/llama_learns.sh [SECONDS]
#
# Tokenizes the fortunes corpus (scripts/make-fortunes-data.sh's split: the first 90% of every file
# to train on, the last 10% to validate on) with a byte-level BPE tokenizer.json (TOKENIZER, default
# the fixture tests/text/bytelevel: 3,006 ids trained on this corpus), fits bench/ngram's
# interpolated order-3 n-gram on the same training token ids, trains examples/llama_tiny.model with
# its vocabulary set to the tokenizer's for about SECONDS (1200) with AdamW (cosine schedule), prints
# the validation curve beside the n-gram's validation loss, a "met" / "not met" line (the Llama's
# final validation loss below the n-gram's), and text that `cltrain generate --tokenizer` samples.
#
# THREADS (2) PoCL threads; RANKS (1) MPI ranks (each with THREADS threads); BATCH (16) sequences
# per step (per rank); LR (0.01) the peak learning rate.
set -e
here=$(dirname "$0")
src=$(cd "$here/.." && pwd)
. "$here/lib.sh"
secs=${1:-1200}
THREADS=${THREADS:-2}
RANKS=${RANKS:-1}
BATCH=${BATCH:-16}
LR=${LR:-0.01}
TOKENIZER=${TOKENIZER:-$src/tests/text/bytelevel}
out=${OUT:-$(mktemp -d)}
export POCL_MAX_PTHREAD_COUNT=$THREADS

CLTRAIN=./cltrain OUT_DIR=$out NAME=bpe TOKENIZER=$TOKENIZER sh "$src/scripts/make-fortunes-data.sh" >/dev/null
train=$out/bpe_train.bin
val=$out/bpe_val.bin
tokjson=$TOKENIZER
[ -d "$tokjson" ] && tokjson=$tokjson/tokenizer.json
# The vocabulary: one past the largest id of the model's vocab and the added tokens.
V=$(/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(1 + max(list(d["model"]["vocab"].values()) + [t["id"] for t in d.get("added_tokens", [])]))' "$tokjson")
sed "s/vocab=2048/vocab=$V/; s/^linear 2048 /linear $V /; s/BPE vocabulary of 2048/BPE vocabulary of $V/" \
  "$src/examples/llama_tiny.model" > "$out/llama_bpe.model"
MODEL=$out/llama_bpe.model
T=$(./cltrain summary "$MODEL" | sed -n 's/.*(\([0-9]*\) tokens).*/\1/p')

./bench/ngram "$train" "$val" "$V" > "$out/ngram.json"

run() { # run ARGS...: cltrain train on RANKS ranks
  if [ "$RANKS" -gt 1 ]; then
    mpirun -np "$RANKS" --oversubscribe --allow-run-as-root -x POCL_MAX_PTHREAD_COUNT ./cltrain train "$@"
  else
    ./cltrain train "$@"
  fi
}
train_args="-o adamw --lr $LR --betas 0.9,0.95 --weight-decay 0.1 --clip 1 -b $BATCH --data $train --val $val -q"

# How many steps fit: measure 20, then aim at the time left.
run "$MODEL" $train_args --max-steps 20 --log-every 5 -d pocl --val none --metrics "$out/probe.jsonl" \
  > /dev/null 2>&1 || true
steps=$(/usr/bin/python3 -c "print(max(40, int($secs * 0.85 * $(rate "$out/probe.jsonl") / $BATCH)))")
every=$((steps / 6))
start=$(date +%s)
run "$MODEL" $train_args --schedule cosine --warmup $((steps / 20)) --min-lr "$(/usr/bin/python3 -c "print($LR / 10)")" \
  --max-steps "$steps" --eval-every "$every" --log-every 50 -d pocl --metrics "$out/curve.jsonl" \
  -s "$out/llama.safetensors"
wall=$(( $(date +%s) - start ))

/usr/bin/python3 - "$out/curve.jsonl" "$out/ngram.json" "$T" "$BATCH" "$RANKS" "$THREADS" "$wall" "$V" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ng = json.load(open(sys.argv[2]))
T, B, ranks, threads, wall, V = (int(a) for a in sys.argv[3:9])
print("validation loss of the tiny Llama over %d BPE ids (nats per token) against the %s: %.4f"
      % (V, ng["model"], ng["val_loss"]))
print("%8s %10s %10s" % ("step", "seconds", "val loss"))
last = None
for r in recs:
    if r.get("test_loss") is not None:
        last = r["test_loss"]
        print("%8d %10.1f %10.4f" % (r["step"], r["elapsed_s"], last))
steps = [r for r in recs if r.get("event") == "step"]
rate = [r["samples_per_s"] for r in steps[1:]]
tok_s = sum(rate) / len(rate) * T if rate else 0
n = max(r["step"] for r in steps) if steps else 0
print("%d steps of %d x %d tokens on %d rank(s) x %d PoCL thread(s) in %d s (with evaluations), %.0f tokens/s"
      % (n, ranks * B, T, ranks, threads, wall, tok_s))
met = last is not None and last < ng["val_loss"]
print(json.dumps({"llama_val_loss": last, "ngram_val_loss": ng["val_loss"], "steps": n, "wall_s": wall,
                  "tokens_per_s": round(tok_s), "ranks": ranks, "threads": threads}))
print("It learns: %s (validation loss %s %s the order-3 n-gram's %.4f)"
      % ("met" if met else "not met", "n/a" if last is None else "%.4f" % last, "<" if met else "not <",
         ng["val_loss"]))
EOF
echo "--- cltrain generate --tokenizer (temperature 0.8, top-k 40):"
./cltrain generate "$MODEL" -w "$out/llama.safetensors" --tokenizer "$TOKENIZER" -p "The " -n 80 -t 0.8 -k 40 -d pocl
echo
echo "(files in $out)"
