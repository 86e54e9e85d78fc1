"""trace_check.py TRACE METRICS RANKS STEPS: what tests/train/trace.sh checks of a
`cltrain train --trace` timeline (Trace Event Format JSON): one process per
rank with a host lane and a lane per replica; STEPS "step N" spans on each
host lane, every other host span inside one (or inside an evaluation or a
checkpoint; a pipeline's micro-batches are on the host lane too; the exchange's
buckets inside "gradient exchange"); each device lane's layer spans one after
another, never overlapping; and the all-reduce spans of rank 0 (under ZeRO
the reduce-scatters and the parameters' allgather) adding up to the comm_s
of its --metrics records (the same clock readings)."""
import collections
import json
import sys

trace, metrics, ranks, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
events = json.load(open(trace))["traceEvents"]
fails = []
spans = collections.defaultdict(list)
lanes = {}
for e in events:
    if e["ph"] == "M" and e["name"] == "thread_name":
        lanes[(e["pid"], e["tid"])] = e["args"]["name"]
    elif e["ph"] == "X":
        if e["dur"] < 0:
            fails.append("negative duration: %s" % e)
        spans[(e["pid"], e["tid"])].append(e)
pids = sorted({p for p, _ in lanes})
if pids != list(range(ranks)):
    fails.append("processes %s, expected ranks 0..%d" % (pids, ranks - 1))
EPS = 0.002  # microseconds: ts and dur are printed to the nanosecond
for pid in pids:
    names = {t: n for (p, t), n in lanes.items() if p == pid}
    host = [t for t, n in names.items() if n == "host"]
    devs = [t for t, n in names.items() if n.startswith("replica ")]
    if len(host) != 1 or not devs:
        fails.append("rank %d: lanes %s, expected host and replicas" % (pid, sorted(names.values())))
        continue
    hs = spans[(pid, host[0])]
    step = sorted((e for e in hs if e["cat"] == "step"), key=lambda e: e["ts"])
    if [e["name"] for e in step] != ["step %d" % (k + 1) for k in range(steps)]:
        fails.append("rank %d: steps %s" % (pid, [e["name"] for e in step]))
    inside = lambda e, p: e["ts"] >= p["ts"] - EPS and e["ts"] + e["dur"] <= p["ts"] + p["dur"] + EPS
    outer = step + [e for e in hs if e["cat"] in ("eval", "checkpoint")]
    piped = any(e["cat"] == "compute" for e in hs)  # a pipeline stage's micro-batches (pp/schedule.c)
    for e in hs:
        if e["cat"] in ("step", "eval", "checkpoint"):
            continue
        if not any(inside(e, s) for s in outer):
            fails.append("rank %d: %s at %.1f us lies in no step" % (pid, e["name"], e["ts"]))
        if e["name"].startswith("bucket ") and not any(
                inside(e, x) for x in hs if x["name"] == "gradient exchange"):
            fails.append("rank %d: %s lies in no gradient exchange" % (pid, e["name"]))
    for t in devs:
        ds = sorted(spans[(pid, t)], key=lambda e: e["ts"])
        if not ds and not piped:  # a pipeline stage's work is on the host lane, micro-batch by micro-batch
            fails.append("rank %d: nothing on %s" % (pid, names[t]))
        for a, b in zip(ds, ds[1:]):
            if b["ts"] < a["ts"] + a["dur"] - EPS:
                fails.append("rank %d: %s and %s overlap on %s" % (pid, a["name"], b["name"], names[t]))
        if any(e["cat"] not in ("forward", "backward") for e in ds):
            fails.append("rank %d: device spans of another category" % pid)
    print("rank %d: %d steps, %d host spans, %d device spans" % (pid, len(step), len(hs),
          sum(len(spans[(pid, t)]) for t in devs)))
records = [json.loads(l) for l in open(metrics) if l.strip()]
comm = sum(r.get("comm_s", 0) for r in records if r.get("event") == "step")
# The exchange's buckets, and under ZeRO the parameters' allgather.
traced = sum(e["dur"] for e in spans[(0, 0)]
             if e["cat"] == "comm" and e["name"].startswith(("bucket ", "allgather "))) / 1e6
print("rank 0: all-reduce spans %.6f s, metrics comm_s %.6f s" % (traced, comm))
if abs(traced - comm) > 0.02 * comm + 1e-5:
    fails.append("the all-reduce spans add up to %.6f s, the metrics' comm_s to %.6f s" % (traced, comm))
for f in fails[:20]:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
