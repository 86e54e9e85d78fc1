#!/bin/sh
# gpt_dp.sh: a GPT trained data-parallel (tests/dp/test_gpt_dp) on 1 and 2
# ranks of this machine (GPT_DP_RANKS="1 2 3" for more): against one
# device, and its checkpoints. Then the tool on 2 ranks (PoCL and rusticl
# when both exist): a tiny byte-level GPT trained with checkpoints and
# resumed from one gives the very bytes of the weights of the run that
# was not interrupted, and the same as one rank on one device evaluates
# to the same validation loss; --zero 2 gives --zero 0's weights.
srcdir=${srcdir:-.}
CLTRAIN=${CLTRAIN:-./cltrain}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
export CLT_TIMEOUT CLT_TEST_LIMIT
sh "$srcdir/tests/lib/mpi_run.sh" --each "${GPT_DP_RANKS:-1 2}" ./tests/dp/test_gpt_dp
status=$?
[ $status -eq 1 ] && exit 1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err
fail=0
. "$srcdir/tests/lib/cli_lib.sh"

"$CLTRAIN" devices >/dev/null 2>&1
[ $? -eq 3 ] && { echo "SKIP: no OpenCL device"; exit $status; }
command -v "${MPIEXEC:-mpiexec}" >/dev/null 2>&1 || { echo "SKIP: no MPI launcher"; exit $status; }

i=0
while [ $i -lt 100 ]; do
  printf 'a kernel %d on a device, a rank %d in a ring.\n' $i $((i * 7 % 13))
  i=$((i + 1))
done >"$tmp/text.txt"
tiny_gpt_spec >"$tmp/gpt.model"
expect 0 "tokenize" -- tokenize "$tmp/text.txt" -o "$tmp/train.bin" --val-fraction 0.2 --val-output "$tmp/val.bin"
# Rank r takes device r: PoCL and rusticl when both are there.
train="train $tmp/gpt.model --data $tmp/train.bin --val $tmp/val.bin --max-steps 8 --batch 8 --optimizer adamw
  --lr 1e-2 --warmup 2 --schedule cosine --clip 1 --check-every 1 --quiet"
mpi_expect 2 0 "a GPT on 2 ranks with checkpoints" -- $train --checkpoint-every 4 --checkpoint-dir "$tmp/a" \
  --save "$tmp/w-a"
has "$out" "on 2 replica(s) over 2 rank(s)" "two ranks train"
mkdir "$tmp/b" && cp "$tmp/a/ckpt-0000000004.safetensors" "$tmp/b/"
mpi_expect 2 0 "resumed on 2 ranks" -- $train --checkpoint-every 4 --checkpoint-dir "$tmp/b" --resume latest \
  --save "$tmp/w-b"
has "$out" "resumed from $tmp/b/ckpt-0000000004.safetensors: step 4" "the checkpoint resumed is named"
same "$tmp/w-a" "$tmp/w-b" "the resumed run's weights are the uninterrupted run's, byte for byte"
same_data "$tmp/a/ckpt-0000000008.safetensors" "$tmp/b/ckpt-0000000008.safetensors" \
  "the resumed run's last checkpoint holds the uninterrupted run's tensors"
# ZeRO stage 2 with the output tied to the embedding: the tied bucket stays
# open from the output layer down to the embedding while the others share
# the bucket buffers; small buckets, clipping (the norm from both ranks'
# shards), PoCL and rusticl, and PoCL alone (whose backward is enqueued
# ahead, so the buffers are reused): the weights of --zero 0, byte for byte.
for devs in "" "--devices pocl"; do
  for z in 0 2; do
    mpi_expect 2 0 "a GPT at --zero $z ${devs:-(PoCL and rusticl)}" -- $train --bucket-mb 0.0005 --zero $z $devs \
      --save "$tmp/w-z$z"
  done
  same "$tmp/w-z0" "$tmp/w-z2" "--zero 2 with tied weights gives --zero 0's weights ${devs:-(PoCL and rusticl)}"
done
# One rank on one device: the same training to float tolerance, so the
# same validation loss to the 4 decimals printed.
expect 0 "the same on one device" -- $train --devices 0 --save "$tmp/w-1"
expect 0 "eval the 2-rank weights" -- eval "$tmp/gpt.model" --weights "$tmp/w-a" --val "$tmp/val.bin" --devices 0
cp "$out" "$tmp/eval-a"
expect 0 "eval the 1-rank weights" -- eval "$tmp/gpt.model" --weights "$tmp/w-1" --val "$tmp/val.bin" --devices 0
same "$tmp/eval-a" "$out" "2 ranks and 1 device evaluate alike"
mpi_expect 2 0 "eval on 2 ranks" -- eval "$tmp/gpt.model" --weights "$tmp/w-a" --val "$tmp/val.bin"
same "$tmp/eval-a" "$out" "evaluation split over 2 ranks gives one device's result"
# generate reads a checkpoint as it reads weights: the same text.
expect 0 "generate from the weights" -- generate "$tmp/gpt.model" --weights "$tmp/w-a" --prompt "a rank" --tokens 30 \
  --seed 3 --devices 0
cp "$out" "$tmp/gen-w"
expect 0 "generate from the checkpoint" -- generate "$tmp/gpt.model" --weights "$tmp/a/ckpt-0000000008.safetensors" \
  --prompt "a rank" --tokens 30 --seed 3 --devices 0
same "$tmp/gen-w" "$out" "a checkpoint and its weights generate the same text"
[ $fail -eq 0 ] || exit 1
exit $status
