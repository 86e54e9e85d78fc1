#!/bin/sh
# watch.sh: a run one can watch (issue 39). Under mpirun on 2 ranks, with
# standard error to a pipe and a file, and under script(1)'s terminal:
#   - rank 0 alone prints "progress:" lines with the step of the whole run,
#     the epoch, the loss, samples/s and the ETA (--progress 0.05: a tiny
#     run must show lines without the test waiting; the default is checked
#     in the run record: 10 s where standard error is not a terminal);
#   - --metrics begins with a "run" record: version, command line, every
#     option, seed, ranks, each replica's device, host and peak FLOP/s (the
#     peak measured by `bench gemm` and cached in CLT_PEAK_CACHE), hosts;
#   - every record has a UTC "time", and numbers are their shortest text
#     ("lr":0.01, not 0.0099999997764825821);
#   - step records give flops, peak_flops and mfu per replica (flops =
#     throughput x flops_per_sample, the model's 3 x 2 x (16x32 + 32x10)),
#     and the prefetch thread's wait per step; the epoch line its GFLOP/s;
#   - the last, short batch of an epoch (19 samples, batch 8: 3) reports
#     the shares that ran ([2,1]), not the full batch's ([4,4]);
#   - under --pipeline 2 the step records' throughput is measured, not 0;
#   - a language model's lines and records give tokens/s, and the line the
#     steps of the whole run (--max-steps 4 of 50 epochs).
# Exits 77 without an OpenCL device, MPI or python3.
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
. "$srcdir/tests/lib/cli_lib.sh" # need_python, mkidx
need_python "the metrics"
mpi="sh $srcdir/tests/lib/mpi_run.sh"

mkidx "$tmp" train 19
printf 'input 1 4 4\nflatten\nlinear 32\nrelu\nlinear 10\n' >"$tmp/m.model"
train="train $tmp/m.model --data $tmp --normalize scale -b 8 --lr 0.01 --log-every 1 --devices pocl"

# The measured peak, cached where the test says.
CLT_PEAK_CACHE=$tmp/cache/peak-flops
export CLT_PEAK_CACHE
if ! "$CLTRAIN" bench gemm --devices pocl -n 32 -i 1 >"$out" 2>"$err" || [ ! -s "$CLT_PEAK_CACHE" ]; then
  echo "FAIL: bench gemm cached no peak in $CLT_PEAK_CACHE"; sed 's/^/  /' "$out" "$err"; fail=1
fi

# 1. Two ranks, standard error to a file through mpirun's pipes: progress.
$mpi 2 "$CLTRAIN" $train -e 2 --progress 0.05 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 77 ]; then echo "SKIP: no MPI launcher"; exit 77; fi
if [ $rc -ne 0 ]; then echo "FAIL: the 2-rank run with --progress exited $rc"; sed 's/^/  /' "$out" "$err"; fail=1; fi
has "$err" '^progress: step [0-9]*/6  epoch [12]/2  loss [0-9.]*  [0-9]* samples/s  ETA [0-9]*:[0-9][0-9]:[0-9][0-9]$' \
  "progress lines under mpirun, standard error to a file"
n=$(grep -c '^progress:' "$err")
if [ "$n" -gt 6 ]; then echo "FAIL: $n progress lines for 6 steps: not rank 0's alone"; fail=1; fi

# 2. The same run's metrics, without --progress (so that each check below
#    fails on its own where its feature is missing).
$mpi 2 "$CLTRAIN" $train -e 2 --metrics "$tmp/m.jsonl" >"$out" 2>"$err" ||
  { echo "FAIL: the 2-rank run exited $?"; sed 's/^/  /' "$out" "$err"; fail=1; }
has "$out" '^epoch 1/2: .* | replica 0 [0-9.e+-]* GFLOP/s MFU [0-9.]*%, replica 1 ' "the epoch line's FLOP/s and MFU"
version=$("$CLTRAIN" version | head -n 1)

"$py" - "$tmp/m.jsonl" "$CLT_PEAK_CACHE" "$version" "$tmp" >"$tmp/check" 2>&1 <<'EOF'
import json, re, struct, sys, traceback
path, cache, version, tmp = sys.argv[1:]
text = open(path).read()
recs = [json.loads(l) for l in text.splitlines()]
steps = [r for r in recs if r["event"] == "step"]
fps = 3 * 2 * (16 * 32 + 32 * 10)  # forward and backward of linear 16->32 and 32->10
bad = 0

def check(what, f):
    global bad
    try:
        f()
        print("ok: %s" % what)
    except Exception:
        print("FAIL: %s:" % what)
        traceback.print_exc(limit=-1, file=sys.stdout)
        bad = 1

def peak_cached():
    return float(open(cache).read().split("\t")[0])

def run_record():
    run = recs[0]
    assert run["event"] == "run", "the first record is %s" % run["event"]
    assert run["version"] in version, "version %s, cltrain version says %s" % (run["version"], version)
    assert run["command"][:3] == ["cltrain", "train", tmp + "/m.model"], run["command"]
    assert "--metrics" in run["command"], run["command"]
    o = run["options"]
    assert o["batch"] == 8 and o["epochs"] == 2 and o["log_every"] == 1 and o["seed"] == 42, o
    assert o["schedule"]["lr"] == 0.01 and o["optimizer"]["kind"] == "sgd", o
    assert o["progress_s"] == 10, "standard error to a file: progress every %s s, not 10" % o["progress_s"]
    assert run["cli"]["data"] == tmp and run["cli"]["normalize"] == "scale" and run["cli"]["devices"] == "pocl", run["cli"]
    assert run["seed"] == 42 and run["ranks"] == 2 and run["replicas"] == 2, run
    assert sorted(d["rank"] for d in run["devices"]) == [0, 1], run["devices"]
    for d in run["devices"]:
        assert d["device"] and d["host"] and d["host"] in run["hosts"], d
        assert d["peak_source"] == "measured" and d["peak_flops"] == peak_cached(), d
    assert run["flops_per_sample"] == fps, "flops_per_sample %s, want %d" % (run["flops_per_sample"], fps)

def times():
    ts = [r.get("time") for r in recs]
    for t in ts:
        assert t and re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", t), "time %r" % t
    assert ts == sorted(ts), "times out of order"

def f32(v):
    return struct.unpack("f", struct.pack("f", v))[0] if abs(v) < 3.4e38 else None

def numbers():
    assert '"lr":0.01,' in text, "lr is not written as 0.01"
    for tok in re.findall(r'(?<=[:,\[])-?\d[\d.eE+-]*(?=[,\]}])', text):
        v = float(tok)
        if "." not in tok and "e" not in tok.lower():
            continue  # an integer
        digits = len(re.sub(r"[^\d]", "", tok.lower().split("e")[0]).strip("0")) or 1
        if f32(v) == v:  # a float's value: as few digits as read back as that float
            best = next(p for p in range(1, 10) if f32(float("%.*g" % (p, v))) == f32(v))
        else:
            best = next(p for p in range(1, 18) if float("%.*g" % (p, v)) == v)
        assert digits <= best, "%s: %d digits where %d read back" % (tok, digits, best)

def mfu():
    assert [r["step"] for r in steps] == list(range(1, 7)), [r["step"] for r in steps]
    for r in steps:
        assert r["flops_per_sample"] == fps, r
        assert len(r["flops"]) == len(r["peak_flops"]) == len(r["mfu"]) == 2, r
        for k in range(2):
            assert r["peak_flops"][k] == peak_cached(), r
            want = r["throughput"][k] * fps
            assert abs(r["flops"][k] - want) <= 1e-6 * want, (r["flops"], r["throughput"])
            if r["flops"][k] > 0:
                assert abs(r["mfu"][k] - r["flops"][k] / peak_cached()) <= 1e-6 * r["mfu"][k], r
    epochs = [r for r in recs if r["event"] == "epoch"]
    assert len(epochs) == 2 and all(len(r["mfu"]) == 2 for r in epochs), epochs

def prefetch():
    assert steps
    for r in steps:
        assert r["prefetch_wait_s"] is not None and r["prefetch_wait_s"] >= 0, r

def short_batch():
    # 19 samples in batches of 8: each epoch's third step has 3, split 2 + 1
    assert [r["shares"] for r in steps] == [[4, 4], [4, 4], [2, 1]] * 2, [r["shares"] for r in steps]

check("the run record first: version, command, options, seed, ranks, devices, hosts, peaks", run_record)
check("every record's UTC time", times)
check("numbers as their shortest text", numbers)
check("flops, peak_flops and mfu per replica", mfu)
check("the prefetch wait per step", prefetch)
check("the short batch's shares", short_batch)
sys.exit(bad)
EOF
st=$?
sed 's/^/  /' "$tmp/check"
[ $st -eq 0 ] || fail=1

# 3. -q: no progress lines.
"$CLTRAIN" $train --max-steps 2 -e 1 -q --metrics "$tmp/q.jsonl" >"$out" 2>"$err" || { echo "FAIL: the -q run"; fail=1; }
has "$tmp/q.jsonl" '"progress_s":0.0' "-q: no progress lines"

# 3b. A language model: tokens/s in the line and the records, and the steps
#     and ETA of the whole run (--max-steps), not of the epoch.
tiny_gpt_spec >"$tmp/gpt.model"
head -c 3000 "$srcdir/README.md" >"$tmp/text"
"$CLTRAIN" tokenize "$tmp/text" -o "$tmp/tok.bin" >"$out" 2>"$err" || { echo "FAIL: tokenize"; fail=1; }
"$CLTRAIN" train "$tmp/gpt.model" --data "$tmp/tok.bin" --val none --devices pocl -b 4 -e 50 --max-steps 4 \
  --log-every 2 --progress 0.001 --metrics "$tmp/g.jsonl" >"$out" 2>"$err" ||
  { echo "FAIL: the language model's run"; sed 's/^/  /' "$out" "$err"; fail=1; }
has "$err" '^progress: step [1-4]/4  epoch 1/50  loss [0-9.]*  [0-9]* samples/s  [0-9]* tokens/s  ETA ' \
  "tokens/s and the steps to --max-steps in the progress line"
has "$tmp/g.jsonl" '"event":"step".*"tokens_per_s":[0-9]' "tokens/s in the step records"
# 3 x the forward's: per block attention 2TC(3C + C) + 4T^2C, linears 2T(C32 + 32C);
# the tied output 2TC256; T = C = 16, two blocks.
has "$tmp/g.jsonl" '"flops_per_sample":884736.0,' "the GPT's FLOPs per sample from the layer table"

# 4. Under a terminal (script): mpirun's ranks still write to pipes.
if script -q -c true /dev/null >/dev/null 2>&1; then
  script -q -c "$mpi 2 $CLTRAIN $train -e 1 --progress 0.05 --metrics $tmp/t.jsonl" "$tmp/typescript" >/dev/null 2>&1
  has "$tmp/typescript" 'progress: step [0-9]*/3  epoch 1/1' "progress lines under script -c mpirun"
  has "$tmp/t.jsonl" '"progress_s":0.05' "the progress asked for"
else
  echo "skip: no script(1) terminal here"
fi

# 5. A pipeline's steps measure their throughput.
$mpi 2 "$CLTRAIN" $train --pipeline 2 --max-steps 3 -e 1 -q --metrics "$tmp/p.jsonl" >"$out" 2>"$err" ||
  { echo "FAIL: the pipeline run"; sed 's/^/  /' "$out" "$err"; fail=1; }
"$py" - "$tmp/p.jsonl" >"$tmp/check" 2>&1 <<'EOF'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "step"]
assert len(steps) == 3, steps
for r in steps:
    assert r["throughput"] and all(v > 0 for v in r["throughput"]), "step %d: throughput %s" % (r["step"], r["throughput"])
EOF
if [ $? -eq 0 ]; then echo "ok: --pipeline measures its throughput"
else echo "FAIL: --pipeline:"; sed 's/^/  /' "$tmp/check"; fail=1; fi
exit $fail
