#!/bin/sh
# cli.sh: the cltrain tool as a user meets it: the device table and JSON, a
# spec that matches nothing, bad flags and commands, and the GEMM self-check.
# Exits 77 (skipped) when no OpenCL device exists.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

. "$srcdir/tests/cli_lib.sh"

"$CLTRAIN" devices >"$out" 2>"$err"
case $? in
  3) echo "SKIP: no OpenCL device: $(cat "$err")"; exit 77 ;;
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
bad=$(mktemp)
printf 'input 784\nlinear 10 bais=false\n' >"$bad"
expect 1 "a model spec with a typo" -- summary "$bad"
has "$err" "$bad:2:11: unknown option 'bais'" "the typo is located"
rm -f "$bad"
expect 1 "a missing model spec" -- summary /nonexistent.model
has "$err" "/nonexistent.model" "the missing file is named"

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
  expect 2 "an unknown precision" -- train "$srcdir/examples/fashion_mlp.model" --precision fp8
  has "$err" "--precision must be fp32 or fp16, not 'fp8'" "the bad precision is named"
  expect 2 "a loss scale below 1" -- train "$srcdir/examples/fashion_mlp.model" --precision fp16 --loss-scale 0.5
  has "$err" "--loss-scale" "the bad option is named"
fi

exit $fail
