#!/bin/sh
# batchnorm.sh: batchnorm's statistics over the global batch (PyTorch's
# SyncBatchNorm) through `cltrain train` on a small synthetic IDX set:
#  - a small conv net with batchnorm after a conv2d (over channels and
#    positions) and after a linear (over features), SGD with momentum:
#    2 ranks (rank r on device r: PoCL and rusticl where both exist) end
#    within 1e-5 (relative, per tensor element: float rounding of the sums'
#    different order) of 1 rank on the same global batch, the running
#    statistics included, and they moved from their start (0 and 1);
#  - at --zero 1 and 2 the same bits as at --zero 0;
#  - a last batch of 1 sample on 2 ranks: rank 1 runs none, and still adds
#    its zeros to the statistics' sums (else rank 0 would wait for it);
#  - 2 replicas on one rank (-d 0,1: PoCL and rusticl), run side by side
#    (src/dp/batch_stats.c), within 1e-5 of 1, also with one of them empty;
#  - eval uses the running statistics: the same loss whatever its batch
#    (batch statistics would make a batch of 1 sample degenerate);
#  - a checkpoint resume is bit-exact, running statistics included;
#  - refused, naming file:line: a micro-batch of one sample of one value
#    per channel (at the first step: eval may take batches of one), and
#    before the first step --pipeline, --zero 3, --offload optimizer,
#    --recompute blocks, --balance auto, --balance weights with a 0.
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

. "$srcdir/tests/lib/cli_lib.sh" # mkidx, expect, refuse, same_data, has, need_python
need_python "safetensors files"
mkidx "$tmp" train 49 # 3 batches of 16 and a last one of 1
mkidx "$tmp" t10k 20  # what eval reads
printf 'input 1 4 4\nconv2d 4 kernel=3 pad=1\nbatchnorm\nrelu\nflatten\nlinear 12\nbatchnorm momentum=0.2\nrelu\nlinear 10\n' \
  >"$tmp/m.model"
printf 'input 1 4 4\nconv2d 4 kernel=3 pad=1\nbatchnorm eps=1e-3\nrelu\nflatten\nlinear 10\n' >"$tmp/conv.model"
train="--data $tmp --normalize scale -b 16 -q -o sgd --lr 0.1 --momentum 0.9"

# close A B TOL DESCRIPTION: every tensor of two safetensors files within
# TOL relative (|a - b| <= TOL (1 + |b|)), the same names.
close() {
  if "$py" - "$1" "$2" "$3" >"$tmp/close" 2>&1 <<'PY'
import json, struct, sys
def read(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    d = b[8 + n:]
    return {k: struct.unpack('<%df' % ((v['data_offsets'][1] - v['data_offsets'][0]) // 4),
                             d[v['data_offsets'][0]:v['data_offsets'][1]]) for k, v in h.items() if v['dtype'] == 'F32'}
a, b, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
worst = max((abs(x - y) / (1 + abs(y)), k) for k in a for x, y in zip(a[k], b[k]))
print('largest difference %.3g in %s' % worst)
sys.exit(0 if worst[0] <= tol else 1)
PY
  then echo "ok: $4: $(cat "$tmp/close")"; else echo "FAIL: $4:"; sed 's/^/  /' "$tmp/close"; fail=1; fi
}

# moved FILE TENSOR START: TENSOR of FILE is no longer START everywhere.
moved() {
  if "$py" - "$1" "$2" "$3" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
o = h[sys.argv[2]]['data_offsets']; v = struct.unpack('<%df' % ((o[1] - o[0]) // 4), b[8 + n + o[0]:8 + n + o[1]])
sys.exit(0 if any(abs(x - float(sys.argv[3])) > 1e-3 for x in v) else 1)
PY
  then echo "ok: $2 moved from $3"; else echo "FAIL: $2 of $1 is still $3"; fail=1; fi
}

expect 0 "1 rank, 3 steps" -- train "$tmp/m.model" $train -d 0 --max-steps 3 --save "$tmp/w1.safetensors"
mpi_expect 2 0 "2 ranks, 3 steps" -- train "$tmp/m.model" $train --max-steps 3 --save "$tmp/w2.safetensors" &&
  close "$tmp/w2.safetensors" "$tmp/w1.safetensors" 1e-5 "2 ranks within 1e-5 of 1 rank (running statistics too)"
for z in 1 2; do # ZeRO's allgather brings the owners' running statistics: the same as everyone's
  mpi_expect 2 0 "2 ranks, --zero $z" -- train "$tmp/m.model" $train --max-steps 3 --zero $z \
    --save "$tmp/wz.safetensors" && same "$tmp/w2.safetensors" "$tmp/wz.safetensors" "--zero $z: --zero 0's weights"
done
for t in 1 5; do # the batchnorm layers' names: counted after the input
  moved "$tmp/w1.safetensors" "$t.running_mean" 0
  moved "$tmp/w1.safetensors" "$t.running_var" 1
done

# One epoch: the last batch of 1 sample leaves rank 1 none.
expect 0 "1 rank, a last batch of 1" -- train "$tmp/conv.model" $train -d 0 -e 1 --save "$tmp/c1.safetensors"
mpi_expect 2 0 "2 ranks, a last batch of 1 (rank 1 at 0 samples)" -- \
  train "$tmp/conv.model" $train -e 1 --save "$tmp/c2.safetensors" &&
  close "$tmp/c2.safetensors" "$tmp/c1.safetensors" 1e-5 "2 ranks with an empty replica within 1e-5 of 1 rank"

# Two replicas on one rank (PoCL and rusticl, where both exist) run side by
# side and meet at each sum: the same, and with one of them empty.
if "$CLTRAIN" devices -d 0,1 >/dev/null 2>&1; then
  expect 0 "2 replicas on 1 rank, 3 steps" -- train "$tmp/m.model" $train -d 0,1 --max-steps 3 \
    --save "$tmp/wr.safetensors" &&
    close "$tmp/wr.safetensors" "$tmp/w1.safetensors" 1e-5 "2 replicas on 1 rank within 1e-5 of 1 replica"
  expect 0 "2 replicas on 1 rank, a last batch of 1" -- train "$tmp/conv.model" $train -d 0,1 -e 1 \
    --save "$tmp/cr.safetensors" &&
    close "$tmp/cr.safetensors" "$tmp/c1.safetensors" 1e-5 "2 replicas, one empty, within 1e-5 of 1 replica"
else
  echo "skip: one device only: no 2 replicas on one rank"
fi

# Eval: the running statistics, whatever the batch.
expect 0 "eval, batch 20" -- eval "$tmp/m.model" --weights "$tmp/w1.safetensors" --data "$tmp" -d 0 -b 20
grep -o 'loss [0-9.]*' "$out" >"$tmp/eval20"
expect 0 "eval, batch 1" -- eval "$tmp/m.model" --weights "$tmp/w1.safetensors" --data "$tmp" -d 0 -b 1
grep -o 'loss [0-9.]*' "$out" >"$tmp/eval1"
if [ -s "$tmp/eval1" ] && cmp -s "$tmp/eval1" "$tmp/eval20"; then echo "ok: eval's loss does not depend on its batch"
else echo "FAIL: eval at batch 1 ($(cat "$tmp/eval1")) and 20 ($(cat "$tmp/eval20"))"; fail=1; fi

# Resume: 3 steps in one go, and 1 + 2 from the checkpoint at step 1.
ck="--checkpoint-every 1 --checkpoint-dir"
expect 0 "3 steps with checkpoints" -- train "$tmp/m.model" $train -d 0 --max-steps 3 $ck "$tmp/a" \
  --save "$tmp/wa.safetensors"
mkdir "$tmp/b" && cp "$tmp"/a/ckpt-0000000001.* "$tmp/b/"
expect 0 "resumed at step 1" -- train "$tmp/m.model" $train -d 0 --max-steps 3 $ck "$tmp/b" --resume latest \
  --save "$tmp/wb.safetensors" && same_data "$tmp/wa.safetensors" "$tmp/wb.safetensors" "resumed: the same bits"

# The summary counts the running statistics apart, as PyTorch's buffers.
expect 0 "summary" -- summary "$tmp/m.model"
has "$out" "buffers: 32 of the 1014 (batchnorm's running statistics" "summary: the running statistics are buffers"
has "$out" "3  *batchnorm 4  *(4, 4, 4)  *16" "summary: batchnorm's line"

# Refusals, before the first step, naming the layer.
refuse "a batch of one value per channel" "m.model:7: batchnorm on a batch of 1 sample of 1 value per channel" -- \
  train "$tmp/m.model" $train -d 0 -b 1 --max-steps 1
for o in "--zero 3" "--offload optimizer" "--balance auto"; do
  refuse "with $o" "m.model:3: batchnorm (statistics over the global batch) does not go with ${o%% *}" -- \
    train "$tmp/m.model" $train -d 0 --max-steps 1 $o
done
printf 'input 1 4 4\nblock repeat=2\nconv2d 1 kernel=3 pad=1\nbatchnorm\nend\nflatten\nlinear 10\n' >"$tmp/block.model"
refuse "with --recompute blocks" "block.model:4: batchnorm (statistics over the global batch) does not go with --recompute" -- \
  train "$tmp/block.model" $train -d 0 --max-steps 1 --recompute blocks
mpi_expect 2 1 "--balance weights with a 0 refused" -- train "$tmp/m.model" $train --max-steps 1 --balance 1,0
has "$err" "m.model:3: batchnorm (statistics over the global batch) does not go with --balance weights with a weight of 0" \
  "--balance 1,0: the reason"
# (batchnorm in the first stage only: the second stage's rank must not wait)
printf 'input 1 4 4\nconv2d 4 kernel=3 pad=1\nbatchnorm\nrelu\nflatten\nlinear 16\nrelu\nlinear 16\nrelu\nlinear 10\n' \
  >"$tmp/pipe.model"
mpi_expect 2 1 "--pipeline 2 refused" -- train "$tmp/pipe.model" $train --max-steps 1 --pipeline 2
has "$err" "pipe.model:3: batchnorm (statistics over the global batch) does not go with --pipeline" "--pipeline: the reason"
exit $fail
