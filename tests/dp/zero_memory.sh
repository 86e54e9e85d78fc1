#!/bin/sh
# zero_memory.sh: issue 15's target from the command line: a GPT whose
# training state does not fit under --max-device-memory at --zero 0 trains
# at --zero 2 on 4 ranks. A byte-level GPT of 117,504 parameters (T = 16,
# width 64, two blocks, the output tied to the embedding) with AdamW and
# batches of 4 needs 2.7 MiB per replica at --zero 0 (its largest part the
# optimizer state, 918 KiB), 2.1 MiB at --zero 1 and 1.9 MiB at --zero 2
# over 4 ranks (`cltrain summary`). Under a cap of 2 MiB, --zero 0 and
# --zero 1 are refused naming the part and the stage that would fit;
# --zero 2 trains 3 steps, and every replica's measured memory (the
# metrics' start records) is within the cap. On PoCL, whose backward is
# enqueued ahead so the buckets share their buffers. Exits 77 without
# PoCL, MPI or python3.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
export CLT_TIMEOUT CLT_TEST_LIMIT
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$CLTRAIN" devices --devices pocl >/dev/null 2>&1 || { echo "SKIP: no PoCL device"; exit 77; }
command -v "${MPIEXEC:-mpiexec}" >/dev/null 2>&1 || { echo "SKIP: no MPI launcher"; exit 77; }
. "$srcdir/tests/lib/cli_lib.sh" # need_python
need_python "the metrics"

cat >"$tmp/gpt.model" <<'SPEC'
input tokens 16 vocab=256
embedding 64 name=wte
posembedding
block repeat=2
  layernorm
  attention heads=2
  residual
  layernorm
  linear 256 init=normal
  gelu
  linear 64 init=normal
  residual
end
layernorm
linear 256 tie=wte bias=false
SPEC
i=0
while [ $i -lt 100 ]; do
  printf 'a kernel %d on a device, a rank %d in a ring.\n' $i $((i * 7 % 13))
  i=$((i + 1))
done >"$tmp/text.txt"
"$CLTRAIN" tokenize "$tmp/text.txt" -o "$tmp/train.bin" >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: tokenize:"; sed 's/^/  /' "$tmp/err"; exit 1; }

# Buckets of 0.02 MiB: a layer each, so the shard and the bucket buffers
# are a fraction of the whole gradient.
train="train $tmp/gpt.model --data $tmp/train.bin --max-steps 3 --batch 4 -o adamw --lr 1e-3 --bucket-mb 0.02
  --devices pocl -q --max-device-memory 2M"

# The largest part: at --zero 0 the optimizer state; at --zero 1, with
# three quarters of it sharded away, the activations.
for z in 0 1; do
  part="the optimizer state (918.0 KiB)"
  [ $z -eq 1 ] && part="the activations"
  sh "$srcdir/tests/lib/mpi_run.sh" 4 "$CLTRAIN" $train --zero $z >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 0 ] && grep -q "the total does not fit; the largest part of it is $part" "$tmp/err" &&
     grep -q -- "--zero 2 on these 4 ranks would fit" "$tmp/err"; then
    echo "ok: --zero $z is refused: $(grep -o -- "a replica for batches of 4 needs [^ ]* [^ ]*" "$tmp/err" | head -1), $part the largest part; $(grep -o -- "--zero 2 on these 4 ranks would fit.*" "$tmp/err" | head -1)"
  else
    echo "FAIL: --zero $z under the cap: exit $rc, stderr:"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
done

if sh "$srcdir/tests/lib/mpi_run.sh" 4 "$CLTRAIN" $train --zero 2 --metrics "$tmp/m.jsonl" >"$tmp/out" 2>"$tmp/err" &&
   grep -q "stopped at step 3" "$tmp/out"; then
  echo "ok: --zero 2 on 4 ranks trains under the cap"
else
  echo "FAIL: --zero 2 under the cap:"; sed 's/^/  /' "$tmp/out" "$tmp/err"; fail=1
fi
if "$py" - "$tmp/m.jsonl" >"$tmp/check" 2>&1 <<'EOF'; then
import json, sys
start = [r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "start"]
assert len(start) == 4, "%d start records" % len(start)
cap = 2 << 20
for r in start:
    m = r["measured"]
    assert r["zero"] == 2 and r["shard_params"] < r["params"], r
    assert m["total"] <= cap, "replica %d holds %d bytes, over the cap of %d" % (r["replica"], m["total"], cap)
    assert m["gradients"] < 4 * r["params"], "replica %d keeps a whole gradient (%d bytes)" % (r["replica"], m["gradients"])
print(", ".join("replica %d %.2f MiB" % (r["replica"], r["measured"]["total"] / 2**20) for r in start))
EOF
  echo "ok: every replica's measured memory is within 2 MiB: $(cat "$tmp/check")"
else
  echo "FAIL: the replicas' memory:"; sed 's/^/  /' "$tmp/check"; fail=1
fi
exit $fail
