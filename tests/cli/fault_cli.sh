#!/bin/sh
# fault_cli.sh: every mistake a user can make on the `cltrain train` and
# `cltrain eval` command lines, each made with the bad input itself: broken
# IDX files in --data DIR, model spec errors, options out of range, a model
# too large for the device, and weights files that are truncated, corrupted
# or from another model. Each must end non-zero, quickly, with a message
# that names the file or option at fault. Every run is under a time limit.
# Exits 77 (skipped) when no OpenCL device exists.
CLTRAIN=${CLTRAIN:-./cltrain}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err

"$CLTRAIN" devices >"$out" 2>"$err"
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device: $(cat "$err")"; exit 77; fi

# run WANT DESCRIPTION -- ARGS: WANT is an exit code or "nonzero".
run() {
  want=$1 what=$2
  shift 3
  timeout -k 5 60 "$CLTRAIN" "$@" >"$out" 2>"$err"
  got=$?
  if [ "$got" -eq 124 ] || [ "$got" -eq 137 ]; then
    echo "FAIL: $what: 'cltrain $*' timed out"; fail=1; return 1
  fi
  if { [ "$want" = nonzero ] && [ "$got" -eq 0 ]; } || { [ "$want" != nonzero ] && [ "$got" -ne "$want" ]; }; then
    echo "FAIL: $what: 'cltrain $*' exited $got, expected $want"
    sed 's/^/  stdout: /' "$out"; sed 's/^/  stderr: /' "$err"
    fail=1; return 1
  fi
  echo "ok: $what: $(head -n1 "$err")"
}
# has PATTERN DESCRIPTION: the last run's stderr holds PATTERN (fixed string).
has() {
  if ! grep -qF -- "$1" "$err"; then
    echo "FAIL: $2: no '$1' in stderr:"; sed 's/^/  /' "$err"; fail=1
  fi
}

# ---- a small valid dataset: (N, 4, 4) images, labels 0..9 ------------------
byte() { printf "\\$(printf %03o "$1")"; }
be32() { byte $(($1 >> 24 & 255)); byte $(($1 >> 16 & 255)); byte $(($1 >> 8 & 255)); byte $(($1 & 255)); }
# mkidx DIR PREFIX N
mkidx() {
  mkdir -p "$1"
  { printf '\000\000\010\003'; be32 "$3"; be32 4; be32 4; head -c $(($3 * 16)) /dev/urandom; } \
    >"$1/$2-images-idx3-ubyte"
  { printf '\000\000\010\001'; be32 "$3"; tr -dc '\000-\011' </dev/urandom | head -c "$3"; } \
    >"$1/$2-labels-idx1-ubyte"
}
good=$tmp/good
mkidx "$good" train 64
mkidx "$good" t10k 32

model=$tmp/m.model
printf 'input 1 4 4\nflatten\nlinear 10\n' >"$model"
run 0 "the valid dataset and model train" -- train "$model" --data "$good" -e 1 -b 16 -d 0 -q --save "$tmp/w.safetensors"

# ---- broken IDX files through --data DIR ------------------------------------
d=$tmp/trunc; mkidx "$d" train 64
head -c 500 "$good/train-images-idx3-ubyte" >"$d/train-images-idx3-ubyte"
run 1 "truncated image file" -- train "$model" --data "$d" -e 1 -d 0
has "$d/train-images-idx3-ubyte" "the truncated file is named"; has "truncated" "truncation is said"

d=$tmp/hdr; mkidx "$d" train 64
head -c 10 "$good/train-images-idx3-ubyte" >"$d/train-images-idx3-ubyte"
run 1 "image file cut inside its header" -- train "$model" --data "$d" -e 1 -d 0
has "$d/train-images-idx3-ubyte" "the file cut in its header is named"

d=$tmp/empty; mkidx "$d" train 64
: >"$d/train-labels-idx1-ubyte"
run 1 "empty label file" -- train "$model" --data "$d" -e 1 -d 0
has "$d/train-labels-idx1-ubyte" "the empty file is named"

d=$tmp/magic; mkidx "$d" train 64
printf 'XXXX' | dd of="$d/train-images-idx3-ubyte" conv=notrunc 2>/dev/null
run 1 "wrong magic" -- train "$model" --data "$d" -e 1 -d 0
has "$d/train-images-idx3-ubyte" "the file with a wrong magic is named"; has "not an IDX file" "the fault is said"

d=$tmp/type; mkidx "$d" train 64
printf '\000\000\015\003' | dd of="$d/train-images-idx3-ubyte" conv=notrunc 2>/dev/null  # 0x0d: float32
run 1 "images of a type other than unsigned bytes" -- train "$model" --data "$d" -e 1 -d 0
has "$d/train-images-idx3-ubyte" "the file with the wrong type is named"

d=$tmp/count; mkidx "$d" train 64; mkidx "$d" other 60
mv "$d/other-labels-idx1-ubyte" "$d/train-labels-idx1-ubyte"
run 1 "60 labels for 64 images" -- train "$model" --data "$d" -e 1 -d 0
has "60 labels" "the label count is said"; has "64 images" "the image count is said"

d=$tmp/range; mkidx "$d" train 64
{ printf '\000\000\010\001'; be32 64; head -c 64 /dev/zero | tr '\000' '\077'; } >"$d/train-labels-idx1-ubyte"
run 1 "labels out of the class range" -- train "$model" --data "$d" -e 1 -d 0
has "$d/train-labels-idx1-ubyte" "the file with bad labels is named"; has "label 63" "the bad label is said"

d=$tmp/gz; mkidx "$d" train 64
gzip -c "$good/train-images-idx3-ubyte" | head -c 100 >"$d/train-images-idx3-ubyte.gz"
rm -f "$d/train-images-idx3-ubyte"
run 1 "truncated gzip" -- train "$model" --data "$d" -e 1 -d 0
has "$d/train-images-idx3-ubyte.gz" "the truncated .gz is named"; has "truncated" "truncation is said"
if grep -q "magic number" "$err"; then echo "FAIL: a cut gzip is blamed on the magic number, which arrived whole"; fail=1; fi

d=$tmp/nolabels; mkidx "$d" train 64; rm -f "$d/train-labels-idx1-ubyte"
run 1 "missing label file" -- train "$model" --data "$d" -e 1 -d 0
has "train-labels-idx1-ubyte" "the missing file is named"

run 1 "missing data directory" -- train "$model" --data "$tmp/nonexistent" -e 1 -d 0
has "$tmp/nonexistent" "the missing directory is named"

d=$tmp/testbad; mkidx "$d" train 64; mkidx "$d" t10k 32
head -c 100 "$good/t10k-images-idx3-ubyte" >"$d/t10k-images-idx3-ubyte"
run 1 "truncated test split" -- train "$model" --data "$d" -e 1 -d 0
has "$d/t10k-images-idx3-ubyte" "the truncated test file is named"

m5=$tmp/m5.model; printf 'input 1 5 5\nflatten\nlinear 10\n' >"$m5"
run 1 "samples of another size than the model's input" -- train "$m5" --data "$good" -e 1 -d 0 -q
has "16 values" "the sample size is said"; has "25" "the model's input size is said"

# ---- model spec errors ------------------------------------------------------
bad=$tmp/bad.model
printf 'input 1 4 4\nflatten\nlinaer 10\n' >"$bad"
run 1 "unknown layer" -- train "$bad" --data "$good" -e 1 -d 0
has "$bad:3:1" "the unknown layer is located"
printf 'input 1 4 4\nflatten\nlinear ten\n' >"$bad"
run 1 "a word for a number" -- train "$bad" --data "$good" -e 1 -d 0
has "$bad:3:8" "the bad number is located"
printf 'input 1 4 4\nconv2d 3 kernel=9\n' >"$bad"
run 1 "a window larger than its input" -- train "$bad" --data "$good" -e 1 -d 0
has "$bad:2" "the conv line is named"
printf '# nothing\n' >"$bad"
run 1 "a spec without layers" -- train "$bad" --data "$good" -e 1 -d 0
has "$bad" "the empty spec is named"
printf 'input 1 4 4\nflatten\nlinear 10\n' | head -c 5 | tr 'p' '\000' >"$bad"
printf 'input 1 65536 65536\nflatten\nlinear 10\n' >"$bad"
run 1 "a sample of 2^32 values (flatten would wrap to 0)" -- train "$bad" --data "$good" -e 1 -d 0
has "$bad:1:1" "the input is located"; has "4294967296 values" "the size is said"
printf 'input 1000000 1000000 3\nflatten\nlinear 10\n' >"$bad"
run 1 "an input too large" -- train "$bad" --data "$good" -e 1 -d 0
has "$bad:1:1" "the input line is located"
printf 'input 1 4 4\nflatten\nlinear 10 bias=false\n' | head -c 5 | tr 'p' '\000' >"$bad"
run 1 "a spec with a NUL byte" -- train "$bad" --data "$good" -e 1 -d 0
has "$bad" "the spec with a NUL is named"
printf 'input 1 4 4\nflatten\nlinear 10 bias=false bias=true\n' >"$bad"
run 1 "an option given twice" -- train "$bad" --data "$good" -e 1 -d 0
has "$bad:3:" "the repeated option is located"; has "option 'bias' is given twice" "the repetition is said"
mkdir "$tmp/specdir"
run 1 "a model path that is a directory" -- train "$tmp/specdir" --data "$good" -e 1 -d 0
has "$tmp/specdir is a directory" "the directory is said"
run 1 "a missing spec" -- train "$tmp/none.model" --data "$good" -e 1 -d 0
has "$tmp/none.model" "the missing spec is named"
run 1 "eval with a bad spec" -- eval "$tmp/none.model" --weights "$tmp/w.safetensors" --data "$good" -d 0
has "$tmp/none.model" "eval names the missing spec"

# ---- options out of range ---------------------------------------------------
run 2 "--lr -1" -- train "$model" --data "$good" --lr -1 -d 0
has "--lr" "--lr is named"; has "'-1'" "the bad value is quoted"
run 2 "--batch 0" -- train "$model" --data "$good" --batch 0 -d 0
has "--batch" "--batch is named"
run 2 "--epochs x" -- train "$model" --data "$good" --epochs x -d 0
has "--epochs" "--epochs is named"; has "'x'" "the bad value is quoted"
run 2 "--epochs 3x" -- train "$model" --data "$good" --epochs 3x -d 0
has "--epochs" "--epochs is named"
run 2 "--momentum 1" -- train "$model" --data "$good" --momentum 1 -d 0
has "--momentum" "--momentum is named"
run 2 "--lr nan" -- train "$model" --data "$good" --lr nan -d 0
has "--lr" "--lr nan is refused by name"
run 2 "--balance with two weights for one replica" -- train "$model" --data "$good" --balance 1,2 -d 0 -e 1
has "--balance" "--balance is named"; has "2 weights" "the count given is said"
run 2 "--balance with a zero weight" -- train "$model" --data "$good" --balance 0 -d 0 -e 1
has "--balance" "--balance is named"
run 2 "--balance with every weight 0" -- train "$model" --data "$good" --balance 0,0 -d 0 -e 1
has "--balance 0,0" "--balance is named"; has "at least one" "what is needed is said"
run 2 "--balance-min-share -1" -- train "$model" --data "$good" --balance auto --balance-min-share -1 -d 0 -e 1
has "--balance-min-share" "--balance-min-share is named"; has "'-1'" "the bad value is quoted"
run 2 "--balance-min-share 2x" -- train "$model" --data "$good" --balance auto --balance-min-share 2x -d 0 -e 1
has "--balance-min-share" "--balance-min-share is named"
run 2 "--balance-min-share above the micro-batch" -- train "$model" --data "$good" --balance auto --balance-min-share 9 -b 8 -d 0 -e 1
has "--balance-min-share 9" "the floor is named"; has "at most 8" "the most it can be is said"
run 2 "--balance-min-share without auto" -- train "$model" --data "$good" --balance-min-share 1 -d 0 -e 1
has "--balance auto" "auto is named"
run 2 "--balance with a trailing comma" -- train "$model" --data "$good" --balance 1, -d 0 -e 1
has "--balance" "--balance is named"; has "'1,'" "the bad value is quoted"
run 2 "--gamma 0" -- train "$model" --data "$good" --gamma 0 -d 0 -e 1
has "--gamma" "--gamma is named"
run 2 "--min-lr above --lr" -- train "$model" --data "$good" --schedule cosine --lr 0.1 --min-lr 1 -d 0 -e 1
has "--min-lr 1 is above --lr 0.1" "both rates are said"
run 2 "--accumulate not dividing --batch" -- train "$model" --data "$good" --batch 10 --accumulate 3 -d 0 -e 1
has "--accumulate 3" "--accumulate is named"; has "10" "the batch is said"
run 2 "--optimizer nonsense" -- train "$model" --data "$good" --optimizer nonsense -d 0
has "nonsense" "the bad optimizer is named"
run 2 "eval --batch 0" -- eval "$model" --weights "$tmp/w.safetensors" --data "$good" --batch 0 -d 0
has "--batch" "eval names --batch"
run 2 "eval without --weights" -- eval "$model" --data "$good" -d 0
has "--weights" "eval asks for --weights"

run 2 "--resume naming a directory" -- train "$model" --data "$good" -e 1 -d 0 -q --resume "$tmp/specdir"
has "$tmp/specdir is a directory" "the directory is said"; has "--resume latest --checkpoint-dir" "the way is said"
CLT_ALLREDUCE_CHUNK=1 run 2 "CLT_ALLREDUCE_CHUNK=1" -- train "$model" --data "$good" -e 1 -d 0 -q
has "CLT_ALLREDUCE_CHUNK='1'" "the variable is named"; has "from 4" "the plan's limit is the variable's"

# ---- a model too large for the device ---------------------------------------
# The activations of `linear 1000000` for a batch of B samples take 4e6*B
# bytes in one buffer: pick B just above what device 0 allows in one buffer.
# Refused before anything is allocated (the run takes no memory to speak
# of), saying what the replica needs, broken down, and what the device has.
max=$("$CLTRAIN" devices --json --devices 0 | sed -n 's/.*"max_alloc_bytes": *\([0-9]*\).*/\1/p' | head -n1)
if [ -n "$max" ] && [ "$max" -gt 0 ]; then
  batch=$((max / 4000000 + 2))
  [ "$batch" -lt 64 ] && batch=64
  huge=$tmp/huge.model
  printf 'input 1 4 4\nflatten\nlinear 1000000\n' >"$huge"
  mkidx "$tmp/many" train "$batch"  # a batch must fit in the training set
  run 1 "activations larger than the device allows ($batch x 4 MB)" -- train "$huge" --data "$tmp/many" -e 1 -b "$batch" -d 0
  has "a replica for batches of $batch needs" "the batch and the need are said"
  has "in its largest buffer (the activations)" "the buffer too large is named"
  has "CL_DEVICE_MAX_MEM_ALLOC_SIZE" "what the device allows is said"
  if grep -q "could not allocate" "$err"; then echo "FAIL: it was refused only when allocating"; fail=1; fi
  # The same through `cltrain summary`, which compares with the device.
  run 1 "summary of the same against device 0" -- summary "$huge" -b "$batch" -d 0
  has "a replica for batches of $batch needs" "summary says what is needed"
  grep -q "does not fit" "$out" && echo "ok: summary says it does not fit" || { echo "FAIL: summary: no 'does not fit'"; fail=1; }
else
  echo "FAIL: no max_alloc_bytes in 'cltrain devices --json'"; fail=1
fi

# ---- output paths that cannot be written: refused before the first step -----
# (not after the run, with its work lost)
notrained() {
  if grep -q "epoch 1/" "$out"; then echo "FAIL: $1: it trained first"; fail=1; fi
}
tr1="train $model --data $good -e 1 -b 16 -d 0 -q"
run 1 "--save naming a directory" -- $tr1 --save "$tmp"
has "--save" "the option is named"; has "$tmp is a directory" "the fault is said"; notrained "--save DIR"
run 1 "--save in a missing directory" -- $tr1 --save "$tmp/nodir/w.safetensors"
has "$tmp/nodir does not exist" "the missing directory is named"; notrained "--save in a missing directory"
run 1 "--save under a file" -- $tr1 --save "$model/w.safetensors"
has "$model is not a directory" "the file in the way is named"
run 1 "--save where files cannot be made (/sys)" -- $tr1 --save /sys/w.safetensors
has "/sys/w.safetensors cannot be written" "the path is named"; notrained "--save in /sys"
run 1 "--metrics naming a directory" -- $tr1 --metrics "$tmp"
has "--metrics" "the option is named"; has "is a directory" "the fault is said"; notrained "--metrics DIR"
run 1 "--checkpoint-dir under a file" -- $tr1 --checkpoint-dir "$model/ckpt" --checkpoint-every 1
has "--checkpoint-dir" "the option is named"; has "$model is not a directory" "the file in the way is named"
notrained "--checkpoint-dir under a file"
n255=$(printf '%0255d' 0); n250=$(printf '%0238d' 0).safetensors
run 1 "--save with a name longer than NAME_MAX" -- $tr1 --save "$tmp/x$n255"
has "limited to 255" "the limit is said"; notrained "--save with a long name"
# A valid 250-byte name, whose temporary name (+ .tmp.PID) would be too long.
run 0 "--save with a 250-byte name" -- $tr1 --save "$tmp/$n250"
[ -f "$tmp/$n250" ] && echo "ok: the 250-byte name is written" || { echo "FAIL: no $tmp/$n250"; fail=1; }
rm -f "$tmp/$n250"
# Checkpoints in a directory whose path is over 1024 bytes (Linux allows 4096).
deep=$tmp; for i in 1 2 3 4 5 6; do deep=$deep/$(printf '%0200d' "$i"); done
run 0 "checkpoints under a 1.2 KB path" -- $tr1 --checkpoint-dir "$deep" --checkpoint-every 2 --max-steps 2
run 0 "--resume latest from there" -- $tr1 --checkpoint-dir "$deep" --checkpoint-every 2 --max-steps 4 --resume latest
grep -qF "resumed from $deep/ckpt-0000000002.safetensors" "$out" && echo "ok: resumed under the long path" ||
  { echo "FAIL: not resumed under the long path:"; cat "$out" "$err"; fail=1; }
rm -rf "$tmp/$(printf '%0200d' 1)"

# What cannot fit is refused before anything is allocated, saying what it
# needs and what there is: a batch larger than the training set, and 10^12
# parameters (which `cltrain summary` shows, and which fit no device).
run 2 "--batch larger than the training set" -- train "$model" --data "$good" -e 1 -b 100000 -d 0
has "--batch 100000 is larger than the 64 samples" "the batch and the samples are said"
huge2=$tmp/huge2.model; printf 'input 1 4 4\nflatten\nlinear 1000000\nlinear 1000000\n' >"$huge2"
run 1 "10^12 parameters" -- train "$huge2" --data "$good" -e 1 -d 0
has "needs 10.9 TiB (parameters 3.6 TiB, gradients 3.6 TiB, optimizer state 3.6 TiB" "what the model needs is said"
has "3.6 TiB in its largest buffer (the parameters)" "the largest buffer is said"
has "CL_DEVICE_GLOBAL_MEM_SIZE" "what the device has is said"
run 1 "summary of 10^12 parameters against device 0" -- summary "$huge2" -d 0
has "neither the total nor the largest buffer fits" "summary says why"
run 0 "summary of 10^12 parameters without a device" -- summary "$huge2"
grep -q "total  *10.9 TiB" "$out" && echo "ok: summary shows the need" || { echo "FAIL: summary shows no 10.9 TiB:"; cat "$out"; fail=1; }
# eval runs batches of at most the test set: a --batch far larger (whose
# replica would not fit in one buffer) is clamped to its 32 samples.
wide=$tmp/wide.model; printf 'input 1 4 4\nflatten\nlinear 2000\nlinear 10\n' >"$wide"
run 0 "weights of a wider model" -- train "$wide" --data "$good" -e 1 -b 16 -d 0 -q --save "$tmp/wide.safetensors"
run 0 "eval --batch 1048576 on 32 samples" -- eval "$wide" --weights "$tmp/wide.safetensors" --data "$good" -b 1048576 -d 0

# ---- weights files ----------------------------------------------------------
w=$tmp/w.safetensors
other=$tmp/other.model
printf 'input 1 4 4\nflatten\nlinear 10\nrelu\nlinear 5\n' >"$other"
run 0 "eval of the saved weights" -- eval "$model" --weights "$w" --data "$good" -d 0
run 1 "train --weights from another model" -- train "$other" --data "$good" -e 1 -d 0 --weights "$w"
has "$w" "the weights file is named"; has "another model" "the cause is suggested"
run 1 "eval --weights from another model" -- eval "$other" --data "$good" -d 0 --weights "$w"
has "$w" "eval names the weights file"
wide=$tmp/wide.model
printf 'input 1 4 4\nflatten\nlinear 12\n' >"$wide"
run 1 "weights of another shape" -- eval "$wide" --data "$good" -d 0 --weights "$w"
has "'1.weight'" "the mismatched tensor is named"; has "(10, 16)" "the file's shape is said"; has "(12, 16)" "the model's shape is said"
size=$(wc -c <"$w")
for cut in 0 4 8 20 $((size / 2)) $((size - 4)); do
  head -c "$cut" "$w" >"$tmp/cut.safetensors"
  run 1 "weights truncated to $cut of $size bytes" -- eval "$model" --data "$good" -d 0 --weights "$tmp/cut.safetensors"
  has "$tmp/cut.safetensors" "the truncated weights are named"
done
cp "$w" "$tmp/json.safetensors"
printf '#' | dd of="$tmp/json.safetensors" bs=1 seek=8 conv=notrunc 2>/dev/null
run 1 "weights with a corrupted JSON header" -- train "$model" --data "$good" -e 1 -d 0 --weights "$tmp/json.safetensors"
has "$tmp/json.safetensors" "the corrupted weights are named"; has "JSON" "the broken header is said"
cp "$w" "$tmp/len.safetensors"
printf '\377\377\377\377' | dd of="$tmp/len.safetensors" bs=1 seek=0 conv=notrunc 2>/dev/null
run 1 "weights with a huge header length" -- eval "$model" --data "$good" -d 0 --weights "$tmp/len.safetensors"
has "header length" "the bad header length is said"
# The header carries a CRC32 of itself, so an edited dtype is caught as damage.
sed 's/"F32"/"F16"/' "$w" >"$tmp/f16.safetensors"
run 1 "weights of another dtype" -- eval "$model" --data "$good" -d 0 --weights "$tmp/f16.safetensors"
has "CRC32" "the edited header is refused as damaged"
# A shape whose product overflows 64 bits (2^40 * 2^40 * 2^24 wraps to 0,
# matching an empty byte range) must be refused, not read as empty.
hdr='{"1.weight":{"dtype":"F32","shape":[1099511627776,1099511627776,16777216],"data_offsets":[0,0]}}'
{ byte ${#hdr}; printf '\000\000\000\000\000\000\000'; printf '%s' "$hdr"; } >"$tmp/big.safetensors"
run 1 "weights with a shape that overflows" -- eval "$model" --data "$good" -d 0 --weights "$tmp/big.safetensors"
has "$tmp/big.safetensors" "the file is named"; has "too large" "the overflow is said"
# A file from elsewhere (no CRCs) holding a NaN: refused, naming the tensor
# and where in it (1.weight is (10, 16): element 53 is [3, 5]).
le64() { byte $(($1 & 255)); byte $(($1 >> 8 & 255)); printf '\000\000\000\000\000\000'; }
hdr='{"1.weight":{"dtype":"F32","shape":[10,16],"data_offsets":[0,640]},"1.bias":{"dtype":"F32","shape":[10],"data_offsets":[640,680]}}'
{ le64 ${#hdr}; printf '%s' "$hdr"; head -c 212 /dev/zero; printf '\000\000\300\177'; head -c 464 /dev/zero; } >"$tmp/nan.safetensors"
run 1 "weights holding a NaN" -- eval "$model" --data "$good" -d 0 --weights "$tmp/nan.safetensors"
has "$tmp/nan.safetensors" "the file is named"; has "'1.weight' holds NaN at index [3, 5]" "the tensor and index are said"
# A key given twice: refused, not read as whichever the parser keeps.
hdr='{"1.weight":{"dtype":"F32","shape":[10,16],"data_offsets":[0,640]},"1.weight":{"dtype":"F32","shape":[10,16],"data_offsets":[0,640]},"1.bias":{"dtype":"F32","shape":[10],"data_offsets":[640,680]}}'
{ le64 ${#hdr}; printf '%s' "$hdr"; head -c 680 /dev/zero; } >"$tmp/dup.safetensors"
run 1 "weights with a tensor named twice" -- eval "$model" --data "$good" -d 0 --weights "$tmp/dup.safetensors"
has "$tmp/dup.safetensors" "the file is named"; has "duplicate" "the duplicate key is said"
hdr='{"1.weight":{"dtype":"F32","shape":[10,16],"data_offsets":[0,640]},"1.bias":{"dtype":"F32","shape":[10],"data_offsets":[600,640]}}'
{ le64 ${#hdr}; printf '%s' "$hdr"; head -c 640 /dev/zero; } >"$tmp/overlap.safetensors"
run 1 "weights whose tensors overlap" -- eval "$model" --data "$good" -d 0 --weights "$tmp/overlap.safetensors"
has "overlap" "the overlap is said"; has "'1.bias'" "the tensors are named"
# eval of a model with fewer outputs than the data's classes (as train
# refuses), from zero weights of its shape: (5, 16) and (5)
m5out=$tmp/m5out.model
printf 'input 1 4 4\nflatten\nlinear 5\n' >"$m5out"
hdr='{"1.weight":{"dtype":"F32","shape":[5,16],"data_offsets":[0,320]},"1.bias":{"dtype":"F32","shape":[5],"data_offsets":[320,340]}}'
{ le64 ${#hdr}; printf '%s' "$hdr"; head -c 340 /dev/zero; } >"$tmp/w5.safetensors"
run 1 "eval of a 5-output model on 10-class data" -- eval "$m5out" --data "$good" -d 0 --weights "$tmp/w5.safetensors"
has "10 classes" "the data's classes are said"; has "gives 5 scores" "the model's outputs are said"
head -c 4096 /dev/urandom >"$tmp/noise.safetensors"
run 1 "random bytes as weights" -- eval "$model" --data "$good" -d 0 --weights "$tmp/noise.safetensors"
has "$tmp/noise.safetensors" "the noise file is named"
run 1 "missing weights" -- eval "$model" --data "$good" -d 0 --weights "$tmp/none.safetensors"
has "$tmp/none.safetensors" "the missing weights are named"

exit $fail
