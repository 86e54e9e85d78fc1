#!/bin/sh
# llama_ranks.sh: fine-tuning an imported Llama-family model trains alike
# however it is spread. A Qwen2-shaped model (grouped-query attention, q, k
# and v biases, the output tied to the embedding) is trained 3 steps,
# exported (`cltrain hf export`, Qwen2ForCausalLM) and imported back (`cltrain
# hf import`): from those imported weights, 20 AdamW steps on bytes of a
# text (lr 3e-3, betas 0.9,0.95, eps 1e-5 as Llama's recipe has it, weight
# decay 0.1) on one device are the reference, and each of
#   - 2 ranks, plain data parallelism,
#   - 2 ranks with --zero 2,
#   - 2 ranks with --pipeline 2 (the tied embedding and head on two stages),
#   - one rank on PoCL and rusticl (--devices pocl,rusticl, when rusticl is
#     there: RUSTICL_ENABLE=llvmpipe)
# gives every step's loss within 1e-5 of it and every weight after the
# steps within 1e-5 (tests/train/weights_close). They add the same float32
# numbers in other orders (the all-reduce, the stage boundary, another
# compiler's kernels): measured, the losses differ by at most 9.5e-7 and the
# weights by 2.5e-7. AdamW divides a gradient by its own size, so where a
# gradient is rounding (a key bias's, which the softmax almost cancels) an
# eps of 1e-8 lets a step move by up to lr whatever the rounding (6.5e-6 of
# the 1e-5, measured); eps 1e-5 bounds that. Exits 77 without an OpenCL
# device or an MPI launcher.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLOSE=${WEIGHTS_CLOSE:-$(dirname "$CLTRAIN")/tests/train/weights_close}
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

cat >"$tmp/qwen2.model" <<'SPEC'
input tokens 16 vocab=256
embedding 32 name=embed_tokens
block repeat=2
  rmsnorm eps=1e-6
  attention heads=4 kv_heads=2 rope_theta=10000 bias=qkv
  residual
  rmsnorm eps=1e-6
  swiglu 64
  residual
end
rmsnorm eps=1e-6
linear 256 tie=embed_tokens bias=false
SPEC
# text of its own (the same bytes whatever else changes), 24 kB
i=0
while [ $i -lt 400 ]; do
  printf 'step %d: rank %d sends %d floats to rank %d, which adds them to its %d.\n' $i $((i * 7 % 13)) \
    $((i * 31 % 97)) $(((i * 7 + 1) % 13)) $((i * 17 % 89))
  i=$((i + 1))
done >"$tmp/text"
expect 0 "tokenize" -- tokenize "$tmp/text" -o "$tmp/train.bin"
# every parameter off its start (norms at 1 and biases at 0 would hide a
# tensor in the wrong place), then through Hugging Face's format and back
expect 0 "3 steps from the seed" -- train "$tmp/qwen2.model" --data "$tmp/train.bin" --val none -o adamw --lr 1e-2 \
  -b 8 --max-steps 3 -d 0 -q -s "$tmp/start.safetensors"
expect 0 "hf export" -- hf export "$tmp/qwen2.model" --weights "$tmp/start.safetensors" -o "$tmp/hf"
has "$out" "as Qwen2ForCausalLM" "the spec's q, k and v biases make it Qwen2ForCausalLM"
expect 0 "hf import" -- hf import "$tmp/hf" -o "$tmp/imported"
has "$out" "(Qwen2ForCausalLM)" "the import reads it as Qwen2ForCausalLM"
[ $fail -eq 0 ] || exit 1

train="train $tmp/imported.model --weights $tmp/imported.safetensors --data $tmp/train.bin --val none -o adamw
  --lr 3e-3 --betas 0.9,0.95 --eps 1e-5 --weight-decay 0.1 -b 8 --max-steps 20 --log-every 1 -q"
# losses FILE: each step's loss in the metrics file, one a line
losses() { grep '"event":"step"' "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }

expect 0 "20 AdamW steps on one device" -- $train -d 0 --metrics "$tmp/one.jsonl" -s "$tmp/one.safetensors"
losses "$tmp/one.jsonl" >"$tmp/one.losses"
[ "$(wc -l <"$tmp/one.losses")" -eq 20 ] || { echo "FAIL: one device: not 20 steps' losses"; fail=1; }

# compare NAME: NAME's losses and weights against one device's
compare() {
  losses "$tmp/$1.jsonl" >"$tmp/$1.losses"
  if [ "$(wc -l <"$tmp/$1.losses")" -eq 20 ] &&
     worst=$(paste "$tmp/one.losses" "$tmp/$1.losses" | awk '
       { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
       END { printf "%.3g", m; exit (m <= 1e-5 ? 0 : 1) }'); then
    echo "ok: $2: 20 steps' losses within 1e-5 of one device's (largest difference $worst)"
  else
    echo "FAIL: $2: the losses differ from one device's by ${worst:-?}:"; paste "$tmp/one.losses" "$tmp/$1.losses"
    fail=1
  fi
  if "$CLOSE" "$tmp/one.safetensors" "$tmp/$1.safetensors" 1e-5 >"$tmp/close"; then
    echo "ok: $2: the weights after them within 1e-5 of one device's ($(cat "$tmp/close"))"
  else
    echo "FAIL: $2: the weights after them: $(cat "$tmp/close")"; fail=1
  fi
}

# mpi NAME WHAT ARGS...: the steps on 2 ranks, then compare
mpi() {
  name=$1 what=$2
  shift 2
  if sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" $train "$@" --metrics "$tmp/$name.jsonl" \
       -s "$tmp/$name.safetensors" >"$out" 2>"$err"; then
    compare "$name" "$what"
  else
    echo "FAIL: $what: exited non-zero:"; sed 's/^/  /' "$err"; fail=1
  fi
}
mpi dp "2 ranks, data parallel"
mpi zero "2 ranks, --zero 2" --zero 2
mpi pipe "2 ranks, --pipeline 2" --pipeline 2
if RUSTICL_ENABLE=${RUSTICL_ENABLE:-llvmpipe} "$CLTRAIN" devices --devices rusticl >/dev/null 2>&1; then
  if RUSTICL_ENABLE=${RUSTICL_ENABLE:-llvmpipe} "$CLTRAIN" $train --devices pocl,rusticl \
       --metrics "$tmp/two.jsonl" -s "$tmp/two.safetensors" >"$out" 2>"$err"; then
    compare two "PoCL and rusticl"
  else
    echo "FAIL: PoCL and rusticl: exited non-zero:"; sed 's/^/  /' "$err"; fail=1
  fi
else
  echo "(no rusticl device here: PoCL and rusticl not compared)"
fi
exit $fail
