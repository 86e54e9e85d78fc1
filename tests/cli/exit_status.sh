#!/bin/sh
# exit_status.sh: the exit statuses cltrain(1) lists, one failure of each
# kind through each command that can meet it:
#   3: no OpenCL driver (OCL_ICD_VENDORS naming an empty directory) for
#      every command that needs a device, generate included, each with one
#      message; a device spec that matches nothing;
#   2: a bad command line or a combination the run refuses: the pipeline's
#      refusals of --zero, --balance auto, --balance weights and fp16 among
#      them, as its other refusals; two of a run's files that are one;
#   1: an operation that failed: an output that is not a regular file, a
#      missing model file.
# Exits 77 (skipped) when no OpenCL device exists.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err

"$CLTRAIN" devices >"$out" 2>"$err"
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device: $(cat "$err")"; exit 77; fi
. "$srcdir/tests/lib/cli_lib.sh" # mkidx, tiny_gpt_spec

# status WANT DESCRIPTION -- ARGS: cltrain ARGS exits WANT; with 3, saying
# why in one line (a second message would be a second failure reported, as
# generate's "clt_trainer_create: no devices" after the missing driver was).
status() {
  want=$1 what=$2
  shift 3
  timeout -k 5 60 "$CLTRAIN" "$@" >"$out" 2>"$err"
  got=$?
  lines=$(grep -c . "$err")
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: 'cltrain $*' exited $got, expected $want"; sed 's/^/  stderr: /' "$err"; fail=1
  elif [ "$want" -eq 3 ] && [ "$lines" -ne 1 ]; then
    echo "FAIL: $what: $lines lines on stderr, expected one:"; sed 's/^/  /' "$err"; fail=1
  else
    echo "ok: $what: exit $got: $(cat "$err")"
  fi
}

mkidx "$tmp" train 64
mkidx "$tmp" t10k 32
model=$tmp/m.model
printf 'input 1 4 4\nflatten\nlinear 10\n' >"$model"
tiny_gpt_spec >"$tmp/g.model"
"$CLTRAIN" train "$model" --data "$tmp" -e 1 -b 16 -d 0 -q --save "$tmp/w.safetensors" >/dev/null 2>&1 ||
  { echo "FAIL: no weights to evaluate"; fail=1; }
i=0; while [ $i -lt 40 ]; do echo "line $i of text"; i=$((i + 1)); done >"$tmp/g.txt"
"$CLTRAIN" tokenize -q "$tmp/g.txt" -o "$tmp/g_train.bin"
"$CLTRAIN" train "$tmp/g.model" --data "$tmp/g_train.bin" --val none -b 4 --max-steps 1 -d 0 -q \
  --save "$tmp/g.safetensors" >/dev/null 2>&1 || { echo "FAIL: no GPT weights for generate"; fail=1; }

# ---- 3: no driver, no device ------------------------------------------------
mkdir "$tmp/vendors" # an ICD loader that reads this finds no driver
OCL_ICD_VENDORS=$tmp/vendors
export OCL_ICD_VENDORS
status 3 "devices without a driver" -- devices
status 3 "generate without a driver" -- generate "$tmp/g.model" --weights "$tmp/g.safetensors" -n 2
status 3 "train without a driver" -- train "$model" --data "$tmp" -e 1 -q
status 3 "eval without a driver" -- eval "$model" --weights "$tmp/w.safetensors" --data "$tmp"
status 3 "summary -d without a driver" -- summary "$model" -d 0
status 3 "bench gemm without a driver" -- bench gemm
unset OCL_ICD_VENDORS
status 3 "generate on a device that is not there" -- generate "$tmp/g.model" --weights "$tmp/g.safetensors" -d 99
status 3 "train on a device that is not there" -- train "$model" --data "$tmp" -e 1 -q -d 99

# ---- 2: what the command line asks for, refused ------------------------------
status 2 "--pipeline 2 --shard-by memory" -- train "$model" --data "$tmp" -e 1 -b 16 -d 0 -q --pipeline 2 --zero 2 --shard-by memory
status 2 "--pipeline 2 --balance auto" -- train "$model" --data "$tmp" -e 1 -b 16 -d 0 -q --pipeline 2 --balance auto
status 2 "--pipeline 2 --balance 1" -- train "$model" --data "$tmp" -e 1 -b 16 -d 0 -q --pipeline 2 --balance 1
status 2 "--pipeline 2 --precision fp16" -- train "$model" --data "$tmp" -e 1 -b 16 -d 0 -q --pipeline 2 --precision fp16
status 2 "--pipeline 2 on one rank" -- train "$model" --data "$tmp" -e 1 -b 16 -d 0 -q --pipeline 2
status 2 "--micro-batches without a pipeline" -- train "$model" --data "$tmp" -e 1 -b 16 -d 0 -q --micro-batches 2
status 2 "--resume C --save C" -- train "$model" --data "$tmp" -e 1 -b 16 -d 0 -q --resume "$tmp/w.safetensors" \
  --save "$tmp/w.safetensors"
status 2 "an unknown option" -- train "$model" --frobnicate

# ---- 1: an operation that failed ----------------------------------------------
mkfifo "$tmp/fifo"
status 1 "--save onto a FIFO" -- train "$model" --data "$tmp" -e 1 -b 16 -d 0 -q --save "$tmp/fifo"
status 1 "a missing model" -- train "$tmp/none.model" --data "$tmp" -e 1 -d 0 -q
exit $fail
