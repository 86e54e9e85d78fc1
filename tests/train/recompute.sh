#!/bin/sh
# recompute.sh: `cltrain train --recompute blocks` (activation
# checkpointing) ends N AdamW steps with the same weights, bit for bit, as
# the same run without it: the tiny GPT (examples/gpt_tiny.model) and the
# tiny Llama (examples/llama_tiny.model) on one rank, in fp32 and fp16 (the
# GPT under a --max-device-memory it fits only with recomputation, which
# refuses it without), and on 2 ranks, the GPT under --zero 2 in fp16 and
# the Llama as a 2-stage pipeline. The memory record of --metrics counts less activation memory
# with it than without, measures what it counted part by part, and `cltrain
# summary --recompute blocks` prints the same figure and what it saves. A
# spec without a block (the example CNN) is refused before training (by
# every rank, on its own), naming the spec; so is an unknown --recompute. Exits 77
# without an OpenCL device or an MPI launcher.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
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

gpt=$srcdir/examples/gpt_tiny.model llama=$srcdir/examples/llama_tiny.model
# bytes of a text of its own (both models read byte ids: the Llama's
# vocabulary of 2048 holds them)
i=0
while [ $i -lt 300 ]; do
  printf 'line %d: the backward runs block %d again from its input, %d floats kept of %d.\n' $i $((i % 7)) \
    $((i * 31 % 97)) $((i * 17 % 89))
  i=$((i + 1))
done >"$tmp/text"
expect 0 "tokenize" -- tokenize "$tmp/text" -o "$tmp/train.bin"
[ $fail -eq 0 ] || exit 1
steps="--data $tmp/train.bin --val none -o adamw --lr 3e-3 --clip 1 -b 4 --max-steps 4 -q -d 0"

# pair NAME RANKS MODEL ARGS...: the steps without and with --recompute
# blocks (and $with) on RANKS ranks; the two weights files must be the
# same bytes.
pair() {
  name=$1 np=$2 model=$3
  shift 3
  for r in none blocks; do
    more=
    [ $r = blocks ] && more=$with
    if ! sh "$srcdir/tests/lib/mpi_run.sh" "$np" "$CLTRAIN" train "$model" $steps "$@" --recompute $r $more \
         --metrics "$tmp/$name-$r.jsonl" -s "$tmp/$name-$r.safetensors" >"$out" 2>"$err"; then
      echo "FAIL: $name, --recompute $r: exited non-zero:"; sed 's/^/  /' "$err"; fail=1; return
    fi
  done
  same "$tmp/$name-none.safetensors" "$tmp/$name-blocks.safetensors" \
    "$name: the weights after 4 AdamW steps are the same bits with --recompute blocks"
}
# The GPT's replica takes 21.4 MiB for batches of 4 with AdamW, 17.1 MiB
# with --recompute blocks (cltrain summary): a cap between the two refuses
# it without, before anything is allocated, and trains it with.
expect 1 "a cap the GPT does not fit without --recompute" -- train "$gpt" $steps --max-device-memory 19M &&
  has "$err" "max-device-memory 19.0 MiB: a replica for batches of 4 needs 21.4 MiB" "the refusal says what it needs"
with="--max-device-memory 19M"
pair "GPT, 1 rank, fp32" 1 "$gpt"
with=
pair "Llama, 1 rank, fp16" 1 "$llama" --precision fp16
pair "GPT, 2 ranks, --zero 2, fp16" 2 "$gpt" --zero 2 --precision fp16
pair "Llama, 2 ranks, --pipeline 2" 2 "$llama" --pipeline 2

# The memory record: less activation memory, measured as counted, and the
# summary's figure for the same batch.
if [ -s "$tmp/GPT, 1 rank, fp32-blocks.jsonl" ] && need_python "the metrics" &&
   expect 0 "summary --recompute blocks" -- summary "$gpt" -b 4 -o adamw --recompute blocks; then
  cp "$out" "$tmp/summary"
  if "$py" - "$tmp/GPT, 1 rank, fp32-none.jsonl" "$tmp/GPT, 1 rank, fp32-blocks.jsonl" "$tmp/summary" \
       >"$tmp/check" 2>&1 <<'EOF'; then
import json, re, sys
def start(path):
    recs = [json.loads(l) for l in open(path) if '"event":"start"' in l]
    assert len(recs) == 1, "%d start records in %s" % (len(recs), path)
    return recs[0]
none, blocks, summary = start(sys.argv[1]), start(sys.argv[2]), open(sys.argv[3]).read()
for k in blocks["counted"]:
    assert blocks["measured"][k] == blocks["counted"][k], "%s measured %d, counted %d" % (
        k, blocks["measured"][k], blocks["counted"][k])
assert blocks.get("recompute") == "blocks" and "recompute" not in none, "the records' recompute: %s, %s" % (
    blocks.get("recompute"), none.get("recompute"))
a, b = none["counted"]["activations"], blocks["counted"]["activations"]
assert b < a, "activations %d with --recompute blocks, %d without" % (b, a)
for k in ("parameters", "gradients", "optimizer_state", "activation_grads", "workspace"):
    assert none["counted"][k] == blocks["counted"][k], "%s changed: %d, %d" % (k, none["counted"][k], blocks["counted"][k])
def fmt(b):  # as cltrain's cli_bytes
    for u, unit in enumerate(["bytes", "KiB", "MiB", "GiB"]):
        if b < 1024 or unit == "GiB":
            return "%.0f bytes" % b if u == 0 else "%.1f %s" % (b, unit)
        b /= 1024.0
m = re.search(r"^  activations +(\S+ \S+)", summary, re.M)
assert m and m.group(1) == fmt(b), "the summary's activations row: %s; the record: %s" % (m and m.group(1), fmt(b))
line = "--recompute blocks: activations %s instead of %s, %s less" % (fmt(b), fmt(a), fmt(a - b))
assert line in summary, "no '%s' in the summary" % line
print("activations %s with --recompute blocks, %s without" % (fmt(b), fmt(a)))
EOF
    echo "ok: the memory record and the summary: $(cat "$tmp/check")"
  else
    echo "FAIL: the memory record and the summary:"; sed 's/^/  /' "$tmp/check"; sed 's/^/  summary: /' "$tmp/summary"
    fail=1
  fi
fi

# A spec without a block: refused before training, naming it.
cnn=$srcdir/examples/fashion_cnn.model
mkidx "$tmp" train 16
if sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" train "$cnn" --data "$tmp" --max-steps 1 -b 4 -q -d 0 \
     --recompute blocks >"$out" 2>"$err"; then
  echo "FAIL: --recompute blocks on a spec without blocks: exited 0"; fail=1
else
  # (each rank refuses on its own, before any collective; the first to
  # fail ends the job, so the other may not get to print)
  n=$(grep -c "recompute blocks: $cnn has no block" "$err")
  if [ "$n" -ge 1 ]; then echo "ok: a spec without blocks is refused, naming it"; else
    echo "FAIL: no rank refused a spec without blocks naming it:"; sed 's/^/  /' "$err"; fail=1; fi
  if grep -q "step 1\|epoch 1" "$out" "$err"; then echo "FAIL: it trained before refusing"; fail=1; fi
fi
expect 2 "summary --recompute blocks of a spec without blocks" -- summary "$cnn" --recompute blocks &&
  has "$err" "$cnn has no block" "the summary's refusal names the spec"
expect 2 "an unknown --recompute" -- train "$gpt" --data "$tmp/train.bin" --recompute layers &&
  has "$err" "--recompute must be blocks or none, not 'layers'" "the refusal names the option and the value"
exit $fail
