#!/bin/sh
# zero3.sh: `cltrain train --zero 3` (parameters sharded too, each layer's
# put on the device before its forward and backward) on 2 and 3 ranks
# (PoCL and rusticl alternating), against --zero 0 byte for byte:
#  - the tiny GPT (the output tied to the embedding: the tied weight is
#    copied into both layers' units) and a small CNN (conv2d, pooling,
#    linear), AdamW with clipping, small buckets, 4 steps; the GPT in fp16
#    too (loss scaling, the wire in half) and with --accumulate 2 (the
#    whole local gradient kept);
#  - the memory report (the metrics' start record, measured from the
#    buffers) holds the parameters, gradients and state of the shard, the
#    ring (the two largest neighbouring layers' parameters) and the bucket
#    buffers: within 5% of 16 Psi / N + ring + buckets, and fewer
#    parameter bytes than the whole model's;
#  - the communicator moves at most 1.5x the bytes of --zero 0 per step
#    (the metrics' comm_bytes, summed over the steps after the first,
#    under --allreduce ring);
#  - `cltrain summary --zero 3 --ranks N` says what is sharded, and a
#    --max-device-memory that --zero 2 exceeds is refused on every rank
#    naming the cap and --zero 3, while --zero 3 trains under it;
#  - a checkpoint saved at --zero 3 on 2 ranks resumes on 3 ranks at --zero
#    3 with the weights of the uninterrupted run at 3 ranks ... from that
#    checkpoint at --zero 0 (the same state, gathered and scattered).
# Exits 77 without PoCL or an MPI launcher.
srcdir=${srcdir:-.}
CLTRAIN=${CLTRAIN:-./cltrain}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
export CLT_TIMEOUT CLT_TEST_LIMIT
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
gpt="train $tmp/gpt.model --data $tmp/train.bin --max-steps 4 --batch 12 --optimizer adamw --lr 1e-2 --clip 0.5
  --bucket-mb 0.002 --check-every 1 --quiet"
mkidx "$tmp" train 96
printf 'input 1 4 4\nconv2d 4 kernel=3 pad=1\nrelu\nmaxpool 2\nflatten\nlinear 16\nrelu\nlinear 10\n' >"$tmp/cnn.model"
cnn="train $tmp/cnn.model --data $tmp --normalize scale -e 1 -b 12 --optimizer adamw --lr 1e-2 --clip 0.5
  --bucket-mb 0.0005 --max-steps 4 --check-every 1 --quiet"

for np in 2 3; do
  # On 2 ranks PoCL alone (its backward is enqueued ahead, so the buckets
  # share their buffers: the memory formula's), with the log that names
  # the ring and the buckets; on 3, PoCL and rusticl.
  on=
  [ $np -eq 2 ] && export CLT_LOG_LEVEL=info && on="--devices pocl"
  for z in 0 3; do
    # the ring all-reduce: every byte through MPI's messages (on one node,
    # stage 0's default sums the gradients in place in shared memory, which
    # no ZeRO stage can, and sends half of it)
    mpi_expect $np 0 "the tiny GPT at --zero $z on $np ranks" -- $gpt --zero $z --allreduce ring --log-every 1 \
      --metrics "$tmp/g$z.jsonl" --save "$tmp/g$z" $on
    cp "$err" "$tmp/g$z.log"
    mpi_expect $np 0 "the CNN at --zero $z on $np ranks" -- $cnn --zero $z --save "$tmp/c$z"
  done
  unset CLT_LOG_LEVEL
  same "$tmp/g0" "$tmp/g3" "the tiny GPT: --zero 3 gives --zero 0's weights on $np ranks"
  same "$tmp/c0" "$tmp/c3" "the CNN: --zero 3 gives --zero 0's weights on $np ranks"
  # bytes per step: every step after the first (whose plans warm up)
  if /usr/bin/python3 - "$tmp/g0.jsonl" "$tmp/g3.jsonl" >"$tmp/ratio" 2>&1 <<'EOF'
import json, sys
def sent(p):
    r = [json.loads(l) for l in open(p)]
    return sum(x["comm_bytes"] for x in r if x["event"] == "step" and x["step"] > 1)
a, b = sent(sys.argv[1]), sent(sys.argv[2])
print("%.3f" % (b / a))
sys.exit(0 if a > 0 and b <= 1.5 * a else 1)
EOF
  then echo "ok: --zero 3 sends $(cat "$tmp/ratio")x --zero 0's bytes per step on $np ranks (at most 1.5x)"
  else echo "FAIL: --zero 3's bytes per step against --zero 0's on $np ranks: $(cat "$tmp/ratio")"; fail=1
  fi
  [ $np -eq 2 ] || continue
  # Memory: the measured parameters, gradients and state of the largest
  # rank against 16 Psi / N plus the ring and the bucket buffers the log
  # names, and fewer parameter bytes than the whole model's.
  if /usr/bin/python3 - "$tmp/g3.jsonl" "$tmp/g3.log" >"$tmp/mem" 2>&1 <<'EOF'
import json, re, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
got = [r["measured"] for r in recs if r["event"] == "start"]
log = open(sys.argv[2]).read()
ring = max(int(x) for x in re.findall(r"a ring of (\d+) floats for the layers' parameters", log))
pool = max(int(x) for x in re.findall(r"into \d+ bucket buffers of (\d+) floats in all", log))
psi = int(re.search(r"for \d+ of (\d+) parameters", log).group(1))
r = max(got, key=lambda r: r["parameters"] + r["gradients"] + r["optimizer_state"])
have = r["parameters"] + r["gradients"] + r["optimizer_state"]
formula = 16 * psi / 2 + 4 * ring + 4 * pool
print("measured %d bytes, formula 16 Psi / N + ring + buckets %d: %.3fx" % (have, formula, have / formula))
sys.exit(0 if abs(have / formula - 1) <= 0.05 and r["parameters"] < 4 * psi else 1)
EOF
  then echo "ok: --zero 3's memory on 2 ranks: $(cat "$tmp/mem")"
  else echo "FAIL: --zero 3's memory on 2 ranks: $(cat "$tmp/mem")"; fail=1
  fi
  for z in 0 3; do
    mpi_expect 2 0 "the tiny GPT in fp16 at --zero $z" -- $gpt --zero $z --precision fp16 --save "$tmp/h$z"
    mpi_expect 2 0 "the tiny GPT with --accumulate 2 at --zero $z" -- $gpt --zero $z --accumulate 2 --save "$tmp/a$z"
  done
  same "$tmp/h0" "$tmp/h3" "fp16: --zero 3 gives --zero 0's weights"
  same "$tmp/a0" "$tmp/a3" "--accumulate 2: --zero 3 gives --zero 0's weights"
done

# A model that fits no device at --zero 2 under a cap trains at --zero 3:
# the refusal comes before anything is allocated, on every rank, naming the
# cap and the stage that would fit.
{ printf 'input tokens 16 vocab=256\nembedding 256 name=wte\nposembedding\nblock repeat=4\n  layernorm\n'
  printf '  attention heads=4\n  residual\n  layernorm\n  linear 1024 init=normal act=gelu\n  linear 256 init=normal\n'
  printf '  residual\nend\nlayernorm\nlinear 256 tie=wte bias=false\n'; } >"$tmp/wide.model"
wide="train $tmp/wide.model --data $tmp/train.bin --batch 2 -o adamw --bucket-mb 0.25 --max-device-memory 34M
  --max-steps 2 --quiet --devices pocl"
mpi_expect 2 1 "a wide GPT at --zero 2 under --max-device-memory 34M is refused" -- $wide --zero 2
has "$err" "--zero 3 on these 2 ranks would fit" "the refusal names --zero 3"
has "$err" "--max-device-memory 34.0 MiB" "the refusal names the cap"
mpi_expect 2 0 "the wide GPT at --zero 3 under the same cap trains" -- $wide --zero 3

expect 0 "summary --zero 3 --ranks 4" -- summary "$tmp/gpt.model" -o adamw --zero 3 --ranks 4
has "$out" "--zero 3 over 4 ranks: parameters, optimizer state and gradients" "the summary says what stage 3 shards"

# A checkpoint of --zero 3 on 2 ranks, resumed on 3 at --zero 3 and at --zero 0.
mpi_expect 2 0 "--zero 3 on 2 ranks with a checkpoint" -- $gpt --zero 3 --max-steps 2 --checkpoint-every 2 \
  --checkpoint-dir "$tmp/k"
for z in 0 3; do
  rm -rf "$tmp/k$z" && mkdir "$tmp/k$z" && cp "$tmp"/k/ckpt-0000000002.* "$tmp/k$z/"
  mpi_expect 3 0 "resumed on 3 ranks at --zero $z" -- $gpt --zero $z --checkpoint-every 4 --checkpoint-dir "$tmp/k$z" \
    --resume latest --save "$tmp/r$z"
done
same "$tmp/r0" "$tmp/r3" "a --zero 3 checkpoint resumed on 3 ranks: --zero 3 gives --zero 0's weights"

[ $fail -eq 0 ] || exit 1
exit 0
