#!/bin/sh
# offload.sh: --offload optimizer (the optimizer state in host memory, its
# step on the host), on a small synthetic IDX set:
#  - refused, naming the options, with an optimizer that keeps no state
#    (plain SGD), with --pipeline, and for a word other than optimizer/none;
#  - the weights of the run without it, byte for byte, after 4 AdamW steps:
#    1 rank (fp32 and fp16) and 2 ranks (PoCL and rusticl where both exist)
#    at --zero 1 and 2, and at --zero 2 in fp16 (each against --zero 0);
#  - on PoCL, whose memory is the host's, accepted, saying it saves nothing;
#  - `cltrain summary --offload optimizer` counts no state on the device;
#  - a checkpoint written under --offload at --zero 1 resumes without it at
#    --zero 2 into the uninterrupted run's weights.
# Exits 77 without an OpenCL device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-120}
export CLT_TIMEOUT CLT_TEST_LIMIT
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi

. "$srcdir/tests/lib/cli_lib.sh" # mkidx, expect, refuse, same, has
mkidx "$tmp" train 96
printf 'input 1 4 4\nflatten\nlinear 32\nrelu\nlinear 32\nrelu\nlinear 10\n' >"$tmp/m.model"
train="train $tmp/m.model --data $tmp --normalize scale -e 1 -b 12 -q --max-steps 4 -o adamw --bucket-mb 0.001"

refuse "--offload with plain SGD" "--offload optimizer with --optimizer sgd (no --momentum): that optimizer keeps no state" -- \
  $train -d 0 -o sgd --momentum 0 --offload optimizer
refuse "--offload with --pipeline" "--offload optimizer with --pipeline 2 is not supported" -- \
  $train -d 0 --offload optimizer --pipeline 2
refuse "--offload junk" "--offload must be optimizer or none, not 'gpu'" -- $train -d 0 --offload gpu

# The memory report: no optimizer state on the device (1,930 parameters,
# the shard of 2 ranks 965: 7.5 KiB of AdamW state at --zero 1 without).
expect 0 "summary --zero 1 --ranks 2" -- summary "$tmp/m.model" -o adamw --zero 1 --ranks 2
has "$out" "optimizer state  *7.5 KiB" "summary: the shard's state on the device without --offload"
expect 0 "summary --offload optimizer" -- summary "$tmp/m.model" -o adamw --zero 1 --ranks 2 --offload optimizer
has "$out" "optimizer state  *0 bytes" "summary --offload optimizer: no optimizer state on the device"
has "$out" "the optimizer state in host memory (--offload optimizer)" "summary --offload optimizer says where it is"

for prec in fp32 fp16; do
  expect 0 "1 rank, $prec" -- $train -d 0 --precision $prec --save "$tmp/w1-$prec" &&
    expect 0 "1 rank, $prec, --offload optimizer" -- $train -d 0 --precision $prec --offload optimizer \
      --save "$tmp/w1o-$prec" &&
    same "$tmp/w1-$prec" "$tmp/w1o-$prec" "--offload optimizer on 1 rank ($prec): the same weights"
done
if "$CLTRAIN" devices --devices pocl >/dev/null 2>&1; then
  expect 0 "--offload on PoCL" -- $train --devices pocl --offload optimizer
  has "$err" "whose memory is the host's: accepted, and it saves nothing" "--offload on PoCL says it saves nothing"
fi

MPIEXEC=${MPIEXEC:-mpiexec}
command -v "$MPIEXEC" >/dev/null 2>&1 || { echo "SKIP: no MPI launcher for the 2-rank parts"; exit $fail; }
# mpi NP WHAT -- ARGS: cltrain on NP ranks (rank r on device r: PoCL and
# rusticl where both exist) exits 0.
mpi() {
  np=$1 what=$2
  shift 3
  if sh "$srcdir/tests/lib/mpi_run.sh" "$np" "$CLTRAIN" "$@" >"$out" 2>"$err"; then
    echo "ok: $what"
  else
    echo "FAIL: $what:"; sed 's/^/  /' "$err"; fail=1; return 1
  fi
}
# mpi_refuse WHAT TEXT -- ARGS: refused on 2 ranks, TEXT said (each rank
# checks the options itself, before any collective; the first to end the
# job may cut the other's message short).
mpi_refuse() {
  what=$1 text=$2
  shift 3
  sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" "$@" >"$out" 2>"$err"
  rc=$? n=$(grep -c -- "$text" "$err")
  if [ $rc -ne 0 ] && [ "$n" -ge "${want_n:-1}" ]; then
    echo "ok: $what: $(grep -m1 -- "$text" "$err")"
  else
    echo "FAIL: $what: exit $rc, '$text' said $n time(s):"; sed 's/^/  /' "$err"; fail=1
  fi
}
for prec in fp32 fp16; do
  mpi 2 "2 ranks, --zero 0, $prec" -- $train --precision $prec --save "$tmp/w2-$prec" || continue
  zs="1 2"
  [ $prec = fp16 ] && zs=2
  for z in $zs; do
    mpi 2 "2 ranks, --zero $z --offload optimizer, $prec" -- $train --precision $prec --zero $z \
      --offload optimizer --save "$tmp/w2o" &&
      same "$tmp/w2-$prec" "$tmp/w2o" "--offload optimizer at --zero $z on 2 ranks ($prec): --zero 0's weights"
  done
done
# A checkpoint written under --offload (the host's state gathered) resumed
# without it at --zero 2 (scattered to the devices): the uninterrupted run.
ck="--checkpoint-every 2 --checkpoint-dir"
mpi 2 "--zero 1 --offload optimizer with checkpoints" -- $train --zero 1 --offload optimizer $ck "$tmp/a" \
  --save "$tmp/wa"
mkdir "$tmp/b" && cp "$tmp"/a/ckpt-0000000002.* "$tmp/b/" # the index and its shards
mpi 2 "resumed at --zero 2 without --offload" -- $train --zero 2 $ck "$tmp/b" --resume latest --save "$tmp/wb" &&
  same "$tmp/wa" "$tmp/wb" "an --offload checkpoint resumed without it: the uninterrupted run's weights"
exit $fail
