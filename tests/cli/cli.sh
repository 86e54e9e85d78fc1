#!/bin/sh
# cli.sh: the cltrain tool as a user meets it: tokenizing text, the device
# table and JSON, a spec that matches nothing, bad flags and commands, the
# GEMM self-check, and a tiny GPT tokenized, trained, evaluated and
# sampled. Exits 77 (skipped) when no OpenCL device exists and the
# tokenizer's checks passed.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

. "$srcdir/tests/lib/cli_lib.sh"

# Tokenizing needs no device, so it comes before the check for one: a text
# file becomes an llm.c shard (1024 header bytes, then one uint16 per byte).
tok=$(mktemp -d)
printf 'Hello, tokens!\n' >"$tok/a.txt"           # 15 bytes
printf 'abcdefghij' >"$tok/b.txt"                  # 10 bytes
expect 0 "tokenize a text file" -- tokenize "$tok/a.txt" -o "$tok/a.bin"
has "$out" "wrote 15 tokens" "the token count is reported"
[ "$(wc -c <"$tok/a.bin")" -eq $((1024 + 2 * 15)) ] && echo "ok: the shard's size" ||
  { echo "FAIL: $tok/a.bin is $(wc -c <"$tok/a.bin") bytes, not 1054"; fail=1; }
# magic 20240520 = 0x0134d888, version 1, 15 tokens; then 'H' = 0x48 as uint16
[ "$(od -A n -t x1 -N 12 "$tok/a.bin" | tr -d ' \n')" = "88d83401010000000f000000" ] && echo "ok: the header bytes" ||
  { echo "FAIL: header of $tok/a.bin: $(od -A n -t x1 -N 12 "$tok/a.bin")"; fail=1; }
[ "$(od -A n -t x1 -j 1024 -N 4 "$tok/a.bin" | tr -d ' \n')" = "48006500" ] && echo "ok: bytes are tokens" ||
  { echo "FAIL: first tokens of $tok/a.bin: $(od -A n -t x1 -j 1024 -N 4 "$tok/a.bin")"; fail=1; }
expect 0 "tokenize two files and stdin, split 80/20" -- tokenize "$tok/a.txt" - "$tok/b.txt" -o "$tok/t.bin" \
  --val-fraction 0.2 --val-output "$tok/v.bin" <"$tok/b.txt"
has "$out" "wrote 28 training tokens" "the training count is reported"
has "$out" "wrote 7 validation tokens" "the validation count is reported"
[ "$(wc -c <"$tok/v.bin")" -eq $((1024 + 2 * 7)) ] && [ "$(od -A n -c -j 1024 -N 14 "$tok/v.bin" | tr -d ' \n\\0')" = "defghij" ] &&
  echo "ok: the validation shard holds the last 7 bytes" || { echo "FAIL: $tok/v.bin is not 'defghij'"; fail=1; }
expect 0 "tokenize --help" -- tokenize --help
has "$out" "--val-fraction" "the help shows the options"
expect 1 "tokenize a missing file" -- tokenize "$tok/missing.txt" -o "$tok/m.bin"
has "$err" "$tok/missing.txt: cannot open" "the missing file is named"
: >"$tok/empty.txt"
expect 1 "tokenize an empty file" -- tokenize "$tok/empty.txt" -o "$tok/e.bin"
has "$err" "no text" "empty input is named"
expect 1 "tokenize to an unwritable place" -- tokenize "$tok/a.txt" -o "$tok/no/such/dir/a.bin"
has "$err" "$tok/no/such/dir/a.bin cannot be written: the directory $tok/no/such/dir does not exist" "the output and its missing directory are named"
expect 2 "tokenize without -o" -- tokenize "$tok/a.txt"
has "$err" "no output shard" "the missing option is named"
expect 2 "tokenize without text" -- tokenize -o "$tok/a.bin"
expect 2 "a validation fraction out of range" -- tokenize "$tok/a.txt" -o "$tok/a.bin" --val-fraction 1 \
  --val-output "$tok/v.bin"
has "$err" "--val-fraction" "the bad option is named"
expect 2 "a validation fraction without its file" -- tokenize "$tok/a.txt" -o "$tok/a.bin" --val-fraction 0.1
has "$err" "--val-output" "the missing option is named"
expect 1 "too little text to split" -- tokenize "$tok/a.txt" -o "$tok/a.bin" --val-fraction 0.01 \
  --val-output "$tok/v.bin"
has "$err" "too few" "the reason is given"
rm -rf "$tok"

"$CLTRAIN" devices >"$out" 2>"$err"
case $? in
  3) echo "SKIP: no OpenCL device: $(cat "$err")"; [ $fail -eq 0 ] || exit 1; exit 77 ;;
esac

expect 0 "devices table" -- devices
has "$out" "P:D" "devices table header"
if [ -f /etc/OpenCL/vendors/pocl.icd ]; then has "$out" "Portable Computing" "PoCL is listed"; fi
if [ -f /etc/OpenCL/vendors/rusticl.icd ] && [ -n "$RUSTICL_ENABLE" ]; then has "$out" "rusticl" "rusticl is listed"; fi
expect 0 "devices --json" -- devices --json
has "$out" '"devices"' "JSON devices key"
has "$out" '"max_work_group_size"' "JSON properties"
expect 0 "devices --devices 0:0" -- devices --devices 0:0
expect 3 "a spec that matches nothing" -- devices --devices no-such-vendor
has "$err" "no-such-vendor" "the bad term is named"
has "$err" "devices that exist" "what exists is listed"
CLT_DEVICES=no-such-vendor "$CLTRAIN" devices >"$out" 2>"$err"
[ $? -eq 3 ] && echo "ok: CLT_DEVICES is read" || { echo "FAIL: CLT_DEVICES=no-such-vendor did not exit 3"; fail=1; }
expect 2 "a malformed spec" -- devices --devices pocl:x
has "$err" "pocl:x" "the malformed term is named"
expect 2 "an unknown option" -- devices --frobnicate
expect 2 "an unknown command" -- frobnicate
has "$err" "unknown command 'frobnicate'" "unknown command named"
expect 2 "no command" --
expect 0 "help" -- --help
expect 0 "version" -- version
expect 2 "bad --size" -- bench gemm --size 0
has "$err" "--size" "the bad option is named"
expect 2 "unknown benchmark" -- bench frobnicate
expect 0 "GEMM self-check on the first device" -- bench gemm --devices 0 --check-only
has "$out" " ok " "self-check passes"

# Model specs: the summary, and a mistake located as file:line:col.
expect 0 "summary of the CNN example" -- summary "$srcdir/examples/fashion_cnn.model"
has "$out" "(64, 7, 7)" "summary shows shapes"
has "$out" "total parameters: 421642" "summary counts parameters"
# The memory a replica needs at a batch size (the layout training
# allocates: test_model holds the two equal), and how it compares with a
# device: the CNN at the default batch fits device 0; at 100000 its
# activations (32 GiB in one buffer) fit no device here.
has "$out" "memory of one replica for batches of 64 (sgd, fp32)" "summary shows the replica's memory"
has "$out" "activations  *23.3 MiB" "summary shows the activations at batch 64"
expect 0 "summary against device 0" -- summary "$srcdir/examples/fashion_cnn.model" -d 0
has "$out" "^device 0 (.*): .* in one buffer: fits$" "the CNN fits device 0"
expect 0 "summary with Adam in fp16 at batch 128 over 2 micro-batches" -- summary "$srcdir/examples/fashion_cnn.model" -o adam --precision fp16 -b 128 --accumulate 2
has "$out" "optimizer state  *3.2 MiB" "Adam's two moments are counted"
has "$out" "activations  *13.0 MiB" "fp16 halves the stored activations of a 64-sample run (the f32 input stays)"
expect 1 "summary at a batch no device here holds" -- summary "$srcdir/examples/fashion_cnn.model" -b 100000 -d 0
has "$out" "does not fit" "summary says it does not fit"
has "$err" "32.0 GiB in its largest buffer (the activations)" "and what does not"
expect 2 "summary --accumulate that does not divide the batch" -- summary "$srcdir/examples/fashion_cnn.model" --accumulate 3
bad=$(mktemp)
printf 'input 784\nlinear 10 bais=false\n' >"$bad"
expect 1 "a model spec with a typo" -- summary "$bad"
has "$err" "$bad:2:11: unknown option 'bais'" "the typo is located"
rm -f "$bad"
expect 1 "a missing model spec" -- summary /nonexistent.model
has "$err" "/nonexistent.model" "the missing file is named"

# A GPT end to end: tokenize text, train a tiny byte-level GPT on it, save,
# evaluate on the validation tokens, and generate from the weights.
gpt=$(mktemp -d)
i=0
while [ $i -lt 120 ]; do
  printf 'the quick brown fox %d jumps over the lazy dog.\n' $i
  i=$((i + 1))
done >"$gpt/text.txt"                                # 5770 bytes
tiny_gpt_spec >"$gpt/gpt.model"
sed 's/vocab=256/vocab=37/; s/linear 256/linear 37/' "$gpt/gpt.model" >"$gpt/small_vocab.model"
expect 0 "tokenize the GPT's text" -- tokenize "$gpt/text.txt" -o "$gpt/train.bin" --val-fraction 0.2 \
  --val-output "$gpt/val.bin"
expect 0 "train a GPT for a few steps" -- train "$gpt/gpt.model" --data "$gpt/train.bin" --val "$gpt/val.bin" \
  --devices 0 --max-steps 8 --batch 8 --optimizer adamw --lr 1e-2 --save "$gpt/w.safetensors" --quiet
has "$out" "val loss [0-9.]* bits per byte [0-9.]*" "training reports the validation loss in bits per byte"
has "$out" "saved the weights to $gpt/w.safetensors" "the weights are saved"
expect 0 "train a GPT with --eval-every" -- train "$gpt/gpt.model" --data "$gpt/train.bin" --val "$gpt/val.bin" \
  --devices 0 --max-steps 8 --batch 8 --optimizer adamw --lr 1e-2 --eval-every 4 --quiet
has "$out" "^step 4/8: train loss [0-9.]* | val loss [0-9.]* bits per byte" "--eval-every reports the validation loss"
expect 0 "evaluate the GPT on its validation tokens" -- eval "$gpt/gpt.model" --weights "$gpt/w.safetensors" \
  --val "$gpt/val.bin" --devices 0
has "$out" "^val loss [0-9.]* bits per byte [0-9.]* accuracy [0-9.]* (72 samples)" "eval reports bits per byte"
# bits per byte is the loss per byte in bits: loss / ln 2
awk '{ if ($3 / log(2) - $7 > 1e-3 || $7 - $3 / log(2) > 1e-3) exit 1 }' "$out" && echo "ok: bits per byte = loss / ln 2" ||
  { echo "FAIL: bits per byte is not loss / ln 2: $(cat "$out")"; fail=1; }
expect 0 "generate from the GPT" -- generate "$gpt/gpt.model" --weights "$gpt/w.safetensors" --prompt abc \
  --tokens 20 --seed 1 --devices 0
cp "$out" "$gpt/gen1"
[ "$(head -c 3 "$gpt/gen1")" = "abc" ] && [ "$(wc -c <"$gpt/gen1")" -eq 24 ] &&
  echo "ok: the prompt, 20 bytes and a newline" ||
  { echo "FAIL: generate printed $(wc -c <"$gpt/gen1") bytes: $(od -c "$gpt/gen1" | head -3)"; fail=1; }
expect 0 "generate again with the same seed" -- generate "$gpt/gpt.model" --weights "$gpt/w.safetensors" \
  --prompt abc --tokens 20 --seed 1 --devices 0
cmp -s "$out" "$gpt/gen1" && echo "ok: the same seed gives the same text" ||
  { echo "FAIL: two runs with seed 1 differ: $(od -c "$gpt/gen1" | head -2) / $(od -c "$out" | head -2)"; fail=1; }
expect 0 "generate greedily" -- generate "$gpt/gpt.model" --weights "$gpt/w.safetensors" --prompt abc --tokens 20 \
  --temperature 0 --devices 0
expect 1 "a token file with tokens beyond the model's vocabulary" -- train "$gpt/small_vocab.model" \
  --data "$gpt/train.bin" --devices 0 --max-steps 1 --quiet
has "$err" "$gpt/train.bin: the token at index 0 is 116, not below the vocabulary size 37" \
  "the file, the token and the vocabulary are named"
expect 1 "a prompt for a model that is not byte-level" -- generate "$gpt/small_vocab.model" \
  --weights "$gpt/w.safetensors" --prompt abc --devices 0
has "$err" "needs a byte-level model" "the reason is given"
sed 's/embedding 16/embedding 24/; s/linear 16 init/linear 24 init/' "$gpt/gpt.model" >"$gpt/wide.model"
expect 1 "weights of a narrower GPT" -- eval "$gpt/wide.model" --weights "$gpt/w.safetensors" --val "$gpt/val.bin" \
  --devices 0
has "$err" "tensor '0.weight' has shape (256, 16) but the model's is (256, 24)" "the tensor and both shapes are named"
# A 3-block GPT's weights hold every tensor of the 2-block GPT with its
# shape, and more: refused wherever weights are read, naming the file, the
# first tensor the model lacks and where the specs part.
sed 's/block repeat=2/block repeat=3/' "$gpt/gpt.model" >"$gpt/deep.model"
expect 0 "train a 3-block GPT for a step" -- train "$gpt/deep.model" --data "$gpt/train.bin" --val none --devices 0 \
  --max-steps 1 --batch 8 --save "$gpt/deep.safetensors" --quiet
for cmd in eval generate "hf export" "train --weights"; do
  case $cmd in
    eval) expect 1 "eval with a deeper GPT's weights" -- eval "$gpt/gpt.model" --weights "$gpt/deep.safetensors" \
      --val "$gpt/val.bin" --devices 0 ;;
    generate) expect 1 "generate with a deeper GPT's weights" -- generate "$gpt/gpt.model" \
      --weights "$gpt/deep.safetensors" --prompt abc --tokens 5 --devices 0 ;;
    "hf export") expect 1 "hf export with a deeper GPT's weights" -- hf export "$gpt/gpt.model" \
      --weights "$gpt/deep.safetensors" -o "$gpt/hf" ;;
    *) expect 1 "train from a deeper GPT's weights" -- train "$gpt/gpt.model" --weights "$gpt/deep.safetensors" \
      --data "$gpt/train.bin" --val none --devices 0 --max-steps 1 --batch 8 --quiet ;;
  esac
  has "$err" "$gpt/deep.safetensors holds a tensor '19.proj.bias' (and 11 more) that the model $gpt/gpt.model does not have" \
    "$cmd: the file and the first extra tensor are named"
  has "$err" "line 4 of the file's ('block repeat=3')" "$cmd: where the specs part is named"
done
[ ! -e "$gpt/hf" ] && echo "ok: hf export wrote nothing" || { echo "FAIL: a refused hf export wrote $gpt/hf"; fail=1; }
rm -rf "$gpt"

# Training: a run that diverges stops at once, naming the step and the layer.
if [ -d /usr/share/datasets/fashion-mnist ]; then
  expect 1 "a diverging run" -- train "$srcdir/examples/fashion_mlp.model" --devices 0 --max-steps 30 --lr 1e6 \
    --momentum 0.99 --quiet
  has "$err" "optimizer step [0-9]*: the gradient of .*fashion_mlp.model:[0-9]* (linear) is not finite" \
    "the step and layer are named"
  expect 2 "a learning rate out of range" -- train "$srcdir/examples/fashion_mlp.model" --lr -1
  has "$err" "--lr" "the bad option is named"
  expect 2 "--accumulate that does not divide --batch" -- train "$srcdir/examples/fashion_mlp.model" --batch 64 \
    --accumulate 3 --devices 0
  has "$err" "accumulate 3" "the accumulation is named"
  # Mixed precision: a short fp16 run logs its loss scale; bad values are named.
  metrics=$(mktemp)
  expect 0 "an fp16 run" -- train "$srcdir/examples/fashion_mlp.model" --devices 0 --max-steps 20 --log-every 5 \
    --precision fp16 --metrics "$metrics" --quiet
  has "$metrics" '"loss_scale":' "the loss scale is in the metrics"
  has "$metrics" '"skipped":' "the skipped steps are in the metrics"
  rm -f "$metrics"
  # The balancer says which replicas get 0 samples, and auto its cost models.
  if [ -n "$RUSTICL_ENABLE" ] && "$CLTRAIN" devices --devices rusticl >/dev/null 2>&1; then
    metrics=$(mktemp)
    expect 0 "a replica left out by a weight of 0" -- train "$srcdir/examples/fashion_mlp.model" \
      --devices pocl,rusticl --balance 1,0 --max-steps 10 --log-every 5 --metrics "$metrics" --quiet
    has "$metrics" '"shares":\[64,0\]' "its share of 0 is in the metrics"
    has "$metrics" '"idle_replicas":\[1\]' "and it is named idle"
    : >"$metrics"
    expect 0 "--balance auto" -- train "$srcdir/examples/fashion_mlp.model" --devices pocl,rusticl --balance auto \
      --balance-every 2 --max-steps 12 --log-every 4 --metrics "$metrics" --quiet
    has "$metrics" '"fixed_s":\[' "the fitted fixed costs are in the metrics"
    has "$metrics" '"per_sample_s":\[' "and the costs per sample"
    rm -f "$metrics"
  fi
  expect 2 "an unknown precision" -- train "$srcdir/examples/fashion_mlp.model" --precision fp8
  has "$err" "--precision must be fp32 or fp16, not 'fp8'" "the bad precision is named"
  expect 2 "a loss scale below 1" -- train "$srcdir/examples/fashion_mlp.model" --precision fp16 --loss-scale 0.5
  has "$err" "--loss-scale" "the bad option is named"
fi

exit $fail
