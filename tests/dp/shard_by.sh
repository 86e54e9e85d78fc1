#!/bin/sh
# shard_by.sh: ZeRO shards sized per rank (--shard-weights, --shard-by
# memory) on a small synthetic IDX set:
#  - refusals naming the options: --shard-weights all 0 or junk, with
#    --shard-by memory, of a count other than the ranks' (1 and 2 ranks),
#    either at --zero 0; --shard-by junk;
#  - on 2 ranks (PoCL and rusticl where both exist) --zero 2
#    --shard-weights 3,1 (and 1,3 in fp16) and --zero 2 --shard-by memory with each rank
#    capped apart (24M and 8M) and --offload optimizer give --zero 0's
#    weights byte for byte; the shares are logged;
#  - a checkpoint written at --zero 1 --shard-weights 3,1 (whose weights are
#    --zero 0's) resumes at 1,3 into the uninterrupted run's weights;
#  - two PoCL devices capped 3:1 (15M and 5M): a deep MLP whose --zero 0
#    need (15.3 MiB) fits neither, and whose equal shards at --zero 2 do not
#    fit the small one (both refused, naming the need), trains with
#    --shard-by memory (and --balance auto sizing the batch's shares).
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

refuse "--shard-by junk" "--shard-by must be memory or equal, not 'speed'" -- $train -d 0 --shard-by speed
refuse "--shard-weights all 0" "gives every rank 0" -- $train -d 0 --zero 1 --shard-weights 0,0
refuse "--shard-weights junk" "--shard-weights must be weights like 3,1" -- $train -d 0 --zero 1 --shard-weights 3,x
refuse "--shard-weights and --shard-by memory" "both size the ZeRO shards; give one" -- \
  $train -d 0 --zero 1 --shard-by memory --shard-weights 3,1
refuse "--shard-weights of 2 on 1 rank" "--shard-weights gives 2 weights, and the job has 1 rank" -- \
  $train -d 0 --zero 1 --shard-weights 3,1
refuse "--shard-by memory at --zero 0" "--shard-by memory sizes the ZeRO shards .* --zero is 0" -- \
  $train -d 0 --shard-by memory

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
mpi_refuse "--shard-weights of 3 on 2 ranks" "--shard-weights gives 3 weights, and the job has 2 ranks" -- \
  $train --zero 2 --shard-weights 3,1,1
mpi_refuse "--shard-weights at --zero 0 on 2 ranks" "--shard-weights sizes the ZeRO shards .* --zero is 0" -- \
  $train --shard-weights 3,1

mpi 2 "2 ranks, --zero 0" -- $train --save "$tmp/w0"
CLT_LOG_LEVEL=info mpi 2 "--zero 2 --shard-weights 3,1" -- $train --zero 2 --shard-weights 3,1 --save "$tmp/ws" &&
  has "$err" "shard-weights: the ZeRO shards of ranks 0 to 1 are 0.75:0.25 of the parameters" "the shares logged" &&
  same "$tmp/w0" "$tmp/ws" "--zero 2 --shard-weights 3,1: --zero 0's weights"
mpi 2 "2 ranks, --zero 0, fp16" -- $train --precision fp16 --save "$tmp/w0h" &&
  mpi 2 "--zero 2 --shard-weights 1,3, fp16" -- $train --zero 2 --shard-weights 1,3 --precision fp16 \
    --save "$tmp/wsh" &&
  same "$tmp/w0h" "$tmp/wsh" "--zero 2 --shard-weights 1,3 in fp16 (f16 on the wire): --zero 0's weights"
# --shard-by memory, each rank its own cap (3:1), with --offload too.
if CLT_LOG_LEVEL=info sh "$srcdir/tests/lib/mpi_run.sh" 1 "$CLTRAIN" $train --zero 2 --shard-by memory \
     --max-device-memory 24M --offload optimizer --save "$tmp/wm" : -np 1 "$CLTRAIN" $train --zero 2 \
     --shard-by memory --max-device-memory 8M --offload optimizer --save "$tmp/wm" >"$out" 2>"$err" &&
   grep -q "shard-by memory: the ZeRO shards of ranks 0 to 1 are" "$err"; then
  same "$tmp/w0" "$tmp/wm" "--zero 2 --shard-by memory --offload optimizer (caps 24M, 8M): --zero 0's weights"
else
  echo "FAIL: --shard-by memory on 2 ranks:"; sed 's/^/  /' "$err"; fail=1
fi

# A checkpoint at 3,1 resumed at 1,3: the uninterrupted run's weights.
ck="--checkpoint-every 2 --checkpoint-dir"
mpi 2 "--zero 1 --shard-weights 3,1 with checkpoints" -- $train --zero 1 --shard-weights 3,1 $ck "$tmp/a" \
  --save "$tmp/wa" && same "$tmp/w0" "$tmp/wa" "--zero 1 --shard-weights 3,1: --zero 0's weights"
mkdir "$tmp/b" && cp "$tmp"/a/ckpt-0000000002.* "$tmp/b/" # the index and its shards
mpi 2 "resumed at --shard-weights 1,3" -- $train --zero 1 --shard-weights 1,3 $ck "$tmp/b" --resume latest \
  --save "$tmp/wb" &&
  same "$tmp/wa" "$tmp/wb" "a checkpoint at shard weights 3,1 resumed at 1,3: the uninterrupted run's weights"

# Two devices capped 3:1 and a model that fits neither alone nor with equal
# shards: 994,186 parameters, 61 layers (cltrain summary: 15.3 MiB at
# --zero 0 for batches of 2; 9.7 MiB a rank with equal shards at --zero 2).
"$CLTRAIN" devices --devices pocl >/dev/null 2>&1 || { echo "SKIP: no PoCL for the 3:1 devices"; exit $fail; }
printf 'input 1 4 4\nflatten\nlinear 128\nrelu\nblock repeat=60\n  linear 128\n  relu\nend\nlinear 10\n' >"$tmp/deep.model"
big="train $tmp/deep.model --data $tmp --normalize scale -e 1 -b 2 -q --max-steps 2 -o adamw --bucket-mb 0.0625"
big="$big --zero 2 --devices pocl"
bal="--balance auto --balance-every 1"
refuse "the deep MLP on one device of 15M" "a replica for batches of 2 needs 15.3 MiB" -- $big --max-device-memory 15M
sh "$srcdir/tests/lib/mpi_run.sh" 1 "$CLTRAIN" $big --max-device-memory 15M : -np 1 "$CLTRAIN" $big \
  --max-device-memory 5M >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && grep -q "rank 1: .*--max-device-memory 5.0 MiB: a replica for batches of 2 needs 9.7 MiB" "$err"; then
  echo "ok: equal shards on devices of 15M and 5M refused: $(grep -m1 "needs" "$err")"
else
  echo "FAIL: equal shards on 15M and 5M: exit $rc:"; sed 's/^/  /' "$err"; fail=1
fi
if CLT_LOG_LEVEL=info sh "$srcdir/tests/lib/mpi_run.sh" 1 "$CLTRAIN" $big --shard-by memory $bal \
     --max-device-memory 15M : -np 1 "$CLTRAIN" $big --shard-by memory $bal --max-device-memory 5M \
     >"$out" 2>"$err"; then
  echo "ok: --shard-by memory (--balance auto sizing the batch) trains it on devices of 15M and 5M:" \
    "$(grep -m1 "ZeRO shards of ranks" "$err")"
  grep "counted before allocating" "$err" | sed 's/^/  /'
else
  echo "FAIL: --shard-by memory on 15M and 5M:"; sed 's/^/  /' "$err"; fail=1
fi
exit $fail
