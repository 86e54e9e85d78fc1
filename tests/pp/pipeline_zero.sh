#!/bin/sh
# pipeline_zero.sh: ZeRO inside a pipeline's stages (issue 37): `--pipeline
# 2` on 4 ranks (2 stages x 2 replicas, each stage's optimizer state, at
# --zero 2 its summed gradient and at --zero 3 its parameters too, sharded
# over its 2 replicas), the tiny GPT (its output tied to the embedding
# across the stages: the tied gradient put together from the shards, the
# later stage's copy written into its layer's unit at stage 3), AdamW with
# clipping, 4 steps:
#  - --zero 1, 2 and 3 end with the weights of --zero 0 with the same
#    pipeline, byte for byte (cmp of the --save files), and so does --zero 3
#    under GPipe with 4 micro-batches;
#  - a checkpoint saved at --pipeline 2 --zero 2 after 2 steps resumes on
#    one rank at --zero 0 without the pipeline and ends within 1e-6 of the
#    uninterrupted pipeline's weights;
#  - --shard-by memory with --pipeline is refused at once, naming the
#    options.
# Exits 77 without PoCL or an MPI launcher.
srcdir=${srcdir:-.}
CLTRAIN=${CLTRAIN:-./cltrain}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
export CLT_TIMEOUT CLT_TEST_LIMIT
close=./tests/train/weights_close
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err
fail=0
. "$srcdir/tests/lib/cli_lib.sh"

"$CLTRAIN" devices >/dev/null 2>&1
[ $? -eq 3 ] && { echo "SKIP: no OpenCL device"; exit 77; }
"$CLTRAIN" devices --devices pocl >/dev/null 2>&1 || { echo "SKIP: no PoCL device"; exit 77; }
command -v "${MPIEXEC:-mpiexec}" >/dev/null 2>&1 || { echo "SKIP: no MPI launcher"; exit 77; }

i=0
while [ $i -lt 60 ]; do
  printf 'a kernel %d on a device, a rank %d in a ring.\n' $i $((i * 7 % 13))
  i=$((i + 1))
done >"$tmp/text.txt"
tiny_gpt_spec >"$tmp/gpt.model"
expect 0 "tokenize" -- tokenize "$tmp/text.txt" -o "$tmp/train.bin"
# small buckets: a stage's shard is several ranges, the tied weight split
# over both replicas' parts
gpt="train $tmp/gpt.model --data $tmp/train.bin --batch 8 --optimizer adamw --lr 1e-2 --clip 0.5 --bucket-mb 0.002
  --check-every 1 --quiet --devices pocl --pipeline 2"

for z in 0 1 2 3; do
  mpi_expect 4 0 "the tiny GPT, --pipeline 2 x 2 replicas at --zero $z" -- $gpt --max-steps 4 --zero $z \
    --save "$tmp/g$z.safetensors"
done
same "$tmp/g0.safetensors" "$tmp/g1.safetensors" "--pipeline 2 --zero 1 gives --zero 0's weights"
same "$tmp/g0.safetensors" "$tmp/g2.safetensors" "--pipeline 2 --zero 2 gives --zero 0's weights"
same "$tmp/g0.safetensors" "$tmp/g3.safetensors" "--pipeline 2 --zero 3 gives --zero 0's weights"
for z in 0 3; do
  mpi_expect 4 0 "the tiny GPT, --pipeline 2 x 2, GPipe, 4 micro-batches at --zero $z" -- $gpt --max-steps 3 \
    --zero $z --micro-batches 4 --schedule-pipeline gpipe --save "$tmp/p$z.safetensors"
done
same "$tmp/p0.safetensors" "$tmp/p3.safetensors" "--pipeline 2 --zero 3 under GPipe gives --zero 0's weights"

# A checkpoint of the pipeline at --zero 2, resumed on one rank without it.
mpi_expect 4 0 "--pipeline 2 --zero 2 with a checkpoint" -- $gpt --max-steps 2 --zero 2 --checkpoint-every 2 \
  --checkpoint-dir "$tmp/k"
mpi_expect 1 0 "resumed on one rank at --zero 0 without the pipeline" -- \
  train "$tmp/gpt.model" --data "$tmp/train.bin" --batch 8 --optimizer adamw --lr 1e-2 --clip 0.5 --quiet --devices pocl \
  --max-steps 4 --resume latest --checkpoint-dir "$tmp/k" --save "$tmp/r.safetensors"
if "$close" "$tmp/g2.safetensors" "$tmp/r.safetensors" 1e-6 >"$tmp/close" 2>&1; then
  echo "ok: the resumed run ends within 1e-6 of the pipeline's: $(cat "$tmp/close")"
else
  echo "FAIL: the resumed run is not within 1e-6 of the pipeline's:"; sed 's/^/  /' "$tmp/close"; fail=1
fi

mpi_expect 4 2 "--shard-by memory with --pipeline is refused" -- $gpt --max-steps 1 --zero 2 --shard-by memory &&
  has "$err" "--shard-by memory with --pipeline 2 is not supported" "--shard-by's refusal names the options"
exit $fail
