#!/bin/sh
# memory_report.sh: `cltrain train --metrics FILE` begins with a "start"
# record per replica of the job giving its memory, part by part, as the
# trainer counted it before allocating and as its buffers measure. Read
# back with python3's json: the counted parts are what `cltrain summary`
# prints for the same configuration (one rank at --zero 0; 2 ranks at
# --zero 2, where the rank with the larger shard is the summary's), every
# part measured is the part counted, byte for byte, and so is the host
# staging of the exchange; a metrics file that cannot be written fails the
# run naming it. Exits 77 without an OpenCL device or python3.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-30}
export CLT_TIMEOUT
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
. "$srcdir/tests/lib/cli_lib.sh" # need_python, mkidx
need_python "the metrics"

mkidx "$tmp" train 96
# 138,506 parameters: buckets of 0.25 MiB hold one 256 x 256 layer each,
# so that the shards of --zero 2 are smaller than the model.
printf 'input 1 4 4\nflatten\nlinear 256\nrelu\nlinear 256\nrelu\nlinear 256\nrelu\nlinear 10\n' >"$tmp/m.model"
train="train $tmp/m.model --data $tmp --normalize scale -e 1 -b 12 -q --max-steps 2 -o adamw --bucket-mb 0.25"
summary="summary $tmp/m.model -b 12 -o adamw --bucket-mb 0.25"

# check NAME RANKS METRICS SUMMARY: the records against the summary.
check() {
  if "$py" - "$2" "$3" "$4" >"$tmp/check" 2>&1 <<'EOF'; then
import json, re, sys
ranks, metrics, summary = int(sys.argv[1]), sys.argv[2], open(sys.argv[3]).read()
recs = [json.loads(l) for l in open(metrics)]
assert recs[0]["event"] == "run", "the run record is not the first"
recs = recs[1:]
start = [r for r in recs if r["event"] == "start"]
assert recs[:len(start)] == start, "the start records are not the first after the run record"
assert len(start) == ranks, "%d start records for %d replicas" % (len(start), ranks)
assert sorted(r["replica"] for r in start) == list(range(ranks)), "replicas %s" % [r["replica"] for r in start]

def fmt(b):  # as cltrain's cli_bytes
    u = 0
    for unit in ["bytes", "KiB", "MiB", "GiB"]:
        if b < 1024 or unit == "GiB":
            return "%.0f bytes" % b if u == 0 else "%.1f %s" % (b, unit)
        b /= 1024.0
        u += 1

rows = {"parameters": "parameters", "gradients": "gradients", "optimizer_state": "optimizer state",
        "activations": "activations", "activation_grads": "activation gradients", "workspace": "workspace",
        "total": "total"}
parts = list(rows) + ["staging"]
for r in start:
    for k in parts:
        assert r["measured"][k] == r["counted"][k], "replica %d: %s measured %d, counted %d" % (
            r["replica"], k, r["measured"][k], r["counted"][k])
    dev = sum(r["counted"][k] for k in parts if k not in ("total", "staging"))
    assert r["counted"]["total"] == dev, "replica %d: the total %d is not the sum of the parts %d" % (
        r["replica"], r["counted"]["total"], dev)
    assert r["counted"]["staging"] > 0 if ranks > 1 else r["counted"]["staging"] == 0, "staging %d" % r["counted"]["staging"]
# The summary counts the rank with the largest shard.
big = max(start, key=lambda r: r["shard_params"])
for k, row in rows.items():
    m = re.search(r"^  %s +(\S+ \S+)" % re.escape(row), summary, re.M)
    assert m, "no '%s' row in the summary" % row
    assert m.group(1) == fmt(big["counted"][k]), "%s: the summary says %s, the record %d bytes (%s)" % (
        row, m.group(1), big["counted"][k], fmt(big["counted"][k]))
print("%d replica(s), the largest shard %d of %d parameters: %s in all, host staging %s" % (
    len(start), big["shard_params"], big["params"], fmt(big["counted"]["total"]), fmt(big["counted"]["staging"])))
EOF
    echo "ok: $1: $(cat "$tmp/check")"
  else
    echo "FAIL: $1:"; sed 's/^/  /' "$tmp/check"; sed 's/^/  metrics: /' "$3"; sed 's/^/  summary: /' "$4"; fail=1
  fi
}

if "$CLTRAIN" $train -d 0 --metrics "$tmp/one.jsonl" >"$tmp/out" 2>"$tmp/err" &&
   "$CLTRAIN" $summary >"$tmp/one.txt" 2>>"$tmp/err"; then
  check "one rank at --zero 0" 1 "$tmp/one.jsonl" "$tmp/one.txt"
else
  echo "FAIL: training or summary on one rank:"; sed 's/^/  /' "$tmp/err"; fail=1
fi

# A metrics file that cannot grow (a file-size limit it has reached, as a
# full disk would; SIGXFSZ ignored so the write fails with EFBIG) fails
# the run at its first record, naming the file and the reason. The file
# is 8 MiB and the limit 8192 blocks, which is 4 or 8 MiB (512- or
# 1024-byte blocks, by shell): far above what the run's other writes
# (PoCL's kernel cache) need.
if truncate -s 8M "$tmp/full.jsonl" 2>/dev/null; then
  out=$tmp/out err=$tmp/err
  if (trap '' XFSZ && ulimit -f 8192 && exec "$CLTRAIN" $train -d 0 --metrics "$tmp/full.jsonl") >"$out" 2>"$err"; then
    echo "FAIL: a metrics file that cannot grow: the run exited 0"; fail=1
  else
    has "$err" "writing metrics to $tmp/full.jsonl failed: File too large" "the message names the metrics file and why"
  fi
fi

MPIEXEC=${MPIEXEC:-mpiexec}
if command -v "$MPIEXEC" >/dev/null 2>&1; then
  if CLT_LOG_LEVEL=info sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" $train -d 0 --zero 2 --metrics "$tmp/two.jsonl" >"$tmp/out" 2>"$tmp/err" &&
     "$CLTRAIN" $summary --zero 2 --ranks 2 >"$tmp/two.txt" 2>>"$tmp/err"; then
    check "2 ranks at --zero 2" 2 "$tmp/two.jsonl" "$tmp/two.txt"
    # The log says the same, each rank of its replica.
    n=$(grep -c "replica 0 holds .*(counted before allocating" "$tmp/err")
    if [ "$n" -eq 2 ]; then echo "ok: both ranks log what their replica holds"; else
      echo "FAIL: $n rank(s) logged what their replica holds:"; sed 's/^/  /' "$tmp/err"; fail=1; fi
  else
    echo "FAIL: training or summary on 2 ranks:"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
fi
exit $fail
