#!/bin/sh
# ckpt_cli.sh: checkpoints as a user of the cltrain tool meets them, on a
# slice of Fashion-MNIST with the example MLP: --checkpoint-every/--keep, --resume
# latest giving the very bytes of the run that was not interrupted, a cut
# newest checkpoint skipped, --keep among damaged files, the newest run
# continued rather than a higher step of an abandoned one, a missing one named, an empty directory as a
# fresh start, a full disk (ulimit -f) leaving the previous checkpoint, and
# `cltrain export`. Exits 77 without a device or the dataset.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
MODEL=$srcdir/examples/fashion_mlp.model
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err

if [ ! -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST is not installed"; exit 77
fi
"$CLTRAIN" devices >/dev/null 2>&1
[ $? -eq 3 ] && { echo "SKIP: no OpenCL device"; exit 77; }

. "$srcdir/tests/lib/cli_lib.sh"

# A slice of Fashion-MNIST as IDX files (1024 training, 256 test images):
# the header with the new count, then the first images and labels.
F=/usr/share/datasets/fashion-mnist
mkdir "$tmp/data"
slice() { # SPLIT COUNT COUNT-AS-4-OCTAL-ESCAPED-BYTES
  { printf '\0\0\10\3'"$3"'\0\0\0\34\0\0\0\34'; gzip -dc "$F/$1-images-idx3-ubyte.gz" | tail -c +17 | head -c $(($2 * 784)); } \
    >"$tmp/data/$1-images-idx3-ubyte"
  { printf '\0\0\10\1'"$3"; gzip -dc "$F/$1-labels-idx1-ubyte.gz" | tail -c +9 | head -c "$2"; } >"$tmp/data/$1-labels-idx1-ubyte"
}
slice train 1024 '\0\0\4\0'
slice t10k 256 '\0\0\1\0'

train="train $MODEL -D $tmp/data -d 0 -q --max-steps 6"
c4=ckpt-0000000004.safetensors c6=ckpt-0000000006.safetensors

# The run not interrupted: checkpoints at 2, 4, 6; --keep 2 leaves 4 and 6.
expect 0 "train with checkpoints" -- $train --checkpoint-every 2 --keep 2 --checkpoint-dir "$tmp/a" --save "$tmp/w-a"
[ "$(ls "$tmp/a" | tr '\n' ' ')" = "$c4 $c6 " ] && echo "ok: --keep 2" || { echo "FAIL: --keep 2 left: $(ls "$tmp/a")"; fail=1; }

# Resumed from step 4: the same weights, byte for byte (and the same last checkpoint).
mkdir "$tmp/b" && cp "$tmp/a/$c4" "$tmp/b/"
expect 0 "--resume latest" -- $train --checkpoint-dir "$tmp/b" --checkpoint-every 2 --resume latest --save "$tmp/w-b"
has "$out" "resumed from $tmp/b/$c4: step 4" "the checkpoint resumed is named"
same "$tmp/w-a" "$tmp/w-b" "resumed weights are the uninterrupted run's"
same_data "$tmp/a/$c6" "$tmp/b/$c6" "resumed checkpoints hold the uninterrupted run's tensors"

# Good steps 2 and 4, damaged 12 and 14 (cut short), a weights file named 13,
# then --resume latest --keep 2: it resumes from 4, and rotation keeps the
# newest whole ones (6 and 4), never a damaged one in place of a whole one;
# the damaged go, and the weights file (whole, not a checkpoint) stays.
expect 0 "checkpoints 2 and 4" -- $train --max-steps 4 --checkpoint-dir "$tmp/k" --checkpoint-every 2
head -c 100000 "$tmp/a/$c6" >"$tmp/k/ckpt-0000000012.safetensors"
head -c 100000 "$tmp/a/$c6" >"$tmp/k/ckpt-0000000014.safetensors"
cp "$tmp/w-a" "$tmp/k/ckpt-0000000013.safetensors"  # whole, but weights only: not ours to delete
expect 0 "--resume latest --keep 2 among damaged files" -- $train --checkpoint-dir "$tmp/k" --checkpoint-every 2 --keep 2 --resume latest
has "$out" "resumed from $tmp/k/$c4" "the newest whole one is resumed"
[ "$(ls "$tmp/k" | tr '\n' ' ')" = "$c4 $c6 ckpt-0000000013.safetensors " ] && echo "ok: the damaged files went, the newest whole ones stayed" ||
  { echo "FAIL: --keep 2 among damaged files left: $(ls "$tmp/k")"; fail=1; }

# A run resumed from step 4 of an earlier run that went on to 6: the new
# run's step 5 is the newest, not the abandoned run's higher step 6.
mkdir "$tmp/r" && cp "$tmp/a/$c4" "$tmp/a/$c6" "$tmp/r/"
expect 0 "a branch resumed from step 4" -- train $MODEL -D $tmp/data -d 0 -q --max-steps 5 --lr 0.02 --checkpoint-dir "$tmp/r" --checkpoint-every 5 --resume "$tmp/r/$c4"
expect 0 "--resume latest after the branch" -- train $MODEL -D $tmp/data -d 0 -q --max-steps 6 --checkpoint-dir "$tmp/r" --checkpoint-every 2 --resume latest
has "$out" "resumed from $tmp/r/ckpt-0000000005.safetensors: step 5" "the newest run is continued, not the abandoned step 6"
has "$err" "$tmp/r/$c6 has a higher step" "the abandoned branch is named"

# A newest checkpoint cut short, and a killed save's temporary file: skipped.
mkdir "$tmp/c" && cp "$tmp/a/$c4" "$tmp/c/"
head -c 100000 "$tmp/a/$c6" >"$tmp/c/$c6"
head -c 100000 "$tmp/a/$c6" >"$tmp/c/ckpt-0000000008.safetensors.tmp.123"
expect 0 "--resume latest past a cut checkpoint" -- $train --resume latest --checkpoint-dir "$tmp/c" --save "$tmp/w-c"
has "$err" "skipping a damaged checkpoint: $tmp/c/$c6: truncated" "the cut file is named"
same "$tmp/w-a" "$tmp/w-c" "weights after skipping the cut file"

expect 1 "--resume of a missing file" -- $train --resume "$tmp/nothing.safetensors"
has "$err" "$tmp/nothing.safetensors" "the missing checkpoint is named"
head -c 100000 "$tmp/a/$c6" >"$tmp/cut"
expect 1 "--resume of a cut file" -- $train --resume "$tmp/cut"
has "$err" "$tmp/cut: truncated" "the cut file is called truncated"
mkdir "$tmp/empty"
expect 0 "--resume latest with no checkpoint" -- $train --resume latest --checkpoint-dir "$tmp/empty"
has "$out" "starting from the beginning" "a fresh start is announced"
expect 2 "--resume with --weights" -- $train --resume latest --weights "$tmp/w-a"
expect 2 "--checkpoint-every 0" -- $train --checkpoint-every 0

# A disk that fills: files may not grow past 4 MB (ulimit -f counts 512-byte
# blocks in sh), and the signal that would kill the process is ignored, so
# write fails as on a full disk. A wider MLP's checkpoint is 6.5 MB; the
# OpenCL compilers' files, which must still fit, are below 1 MB. Open MPI's
# PMIx keeps its store in bigger files unless told to use a hash table.
printf 'input 784\nlinear 1024\nrelu\nlinear 10\n' >"$tmp/wide.model"
wide="train $tmp/wide.model -D $tmp/data -d 0 -q --checkpoint-dir $tmp/d --checkpoint-every 2"
expect 0 "a checkpoint of a wider MLP" -- $wide --max-steps 2
(trap '' XFSZ; ulimit -f 8000 && PMIX_MCA_gds=hash exec "$CLTRAIN" $wide --max-steps 4 --resume latest) >"$out" 2>"$err"
rc=$?
c2=ckpt-0000000002.safetensors
if [ $rc -ne 1 ] && grep -q "MPI_Init" "$err"; then
  echo "skip: MPI does not start under ulimit -f here (the library's test covers a full disk)"
else
  if [ $rc -eq 1 ]; then echo "ok: a full disk fails the run"; else echo "FAIL: a full disk: exit $rc"; cat "$err"; fail=1; fi
  has "$err" "$c4.tmp.*: File too large" "the write error and the file are named"
  has "$out" "resumed from $tmp/d/$c2" "the checkpoint resumed from"
  [ "$(ls "$tmp/d")" = "$c2" ] && echo "ok: the previous checkpoint stays, no temporary file" ||
    { echo "FAIL: left: $(ls "$tmp/d")"; fail=1; }
  expect 0 "the previous checkpoint loads" -- $wide --max-steps 2 --resume "$tmp/d/$c2"
fi

# export: the weights alone, the very file --save writes.
expect 0 "export" -- export "$tmp/a/$c6" "$tmp/w-x"
same "$tmp/w-a" "$tmp/w-x" "exported weights are the saved weights"
expect 1 "export of a weights file" -- export "$tmp/w-a" "$tmp/w-y"
has "$err" "weights only" "a weights file is not a checkpoint"
expect 1 "export of a cut checkpoint" -- export "$tmp/cut" "$tmp/w-y"
[ ! -e "$tmp/w-y" ] && echo "ok: nothing written" || { echo "FAIL: export wrote $tmp/w-y"; fail=1; }
expect 2 "export without an output" -- export "$tmp/a/$c6"
exit $fail
