# lib.sh: helpers the benchmark scripts share (sourced, not run).

# rate FILE: mean samples/s of a metrics file's step records after the first
# (the first includes kernel builds).
rate() {
  /usr/bin/python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in r if x["event"] == "step"][1:]
print("%.1f" % (sum(x["samples_per_s"] for x in r) / len(r)))' "$1"
}

# tail_rate FILE: mean samples/s of the step records of the last two thirds (the
# first third: kernel builds, the first re-splits).
tail_rate() {
  /usr/bin/python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in r if x["event"] == "step"]
r = r[len(r) // 3:]
print("%.1f" % (sum(x["samples_per_s"] for x in r) / len(r)))' "$1"
}

# hidden FILE: the share of all-reduce time that overlapped the backward pass.
hidden() {
  /usr/bin/python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in r if x["event"] == "step" and x.get("comm_s")][1:]
c = sum(x["comm_s"] for x in r); h = sum(x["comm_s"] * (x["comm_hidden"] or 0) for x in r)
print("%.1f%% of %.3f s" % (100 * h / c if c else 0, c))' "$1"
}

# ratio A B: A / B to three decimals.
ratio() { /usr/bin/python3 -c 'import sys; print("%.3f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }

# peer ARGS...: samples/s of bench/pytorch_fashion.py with ARGS.
peer() {
  /usr/bin/python3 "$(dirname "$0")/pytorch_fashion.py" "$@" |
    /usr/bin/python3 -c 'import json, sys; print("%.1f" % json.load(sys.stdin)["samples_per_s"])'
}

# median FILE: the median of the numbers in FILE, one a line.
median() {
  sort -n "$1" | /usr/bin/python3 -c '
import sys
v = [float(l) for l in sys.stdin if l.strip()]
print(v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2)'
}

# peer_says FILE: torch version, threads and BLAS of a peer's JSON line.
peer_says() {
  /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("torch %s, %s thread(s) (OpenBLAS %s), BLAS %s" % (d["torch"], d.get("threads", d.get("threads_per_rank")),
      d.get("openblas_threads"), d.get("blas")))' "$1"
}

# fair_blas: where OpenBLAS would run kernels older than the CPU can (it
# picks SSE3 "Prescott" kernels on CPUs newer than itself), export the
# CPU's best as OPENBLAS_CORETYPE, so both sides (PyTorch's linear layers,
# cltrain's host GEMMs) run fast kernels; say so on stderr. Each side prints
# the kernels it ran.
fair_blas() {
  _core=$(/usr/bin/python3 "$(dirname "$0")/peer_env.py" --fair-coretype)
  if [ -n "$_core" ]; then
    export OPENBLAS_CORETYPE="$_core"
    echo "note: OpenBLAS would pick kernels older than this CPU's; both sides run OPENBLAS_CORETYPE=$_core" >&2
  fi
}
