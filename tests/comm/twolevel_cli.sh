#!/bin/sh
# twolevel_cli.sh: `cltrain bench allreduce` on pretend nodes: --fit writes
# a cost model that CLT_COMM_MODEL loads (shm's own terms only where every
# rank is on one node); --algorithm times ring and
# twolevel, whose busiest rank sends a third of the ring's bytes across
# nodes here (4 ranks, nodes of 2); bad --algorithm, CLT_ALLREDUCE,
# CLT_NODE_SIZE and CLT_COMM_MODEL values end every rank at once with a
# message naming the value. Exits 77 without MPI.
CLTRAIN=${CLTRAIN:-./cltrain}
# A long sweep: make check-long runs it (CLT_LONG=1); make check skips it.
[ "${CLT_LONG:-0}" = 1 ] || { echo "SKIP: a long sweep (make check-long runs it)"; exit 77; }
srcdir=${srcdir:-.}
CLT_TIMEOUT=20
CLT_TEST_LIMIT=60
export CLT_TIMEOUT CLT_TEST_LIMIT
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
run() { # NP ARGS...: cltrain on NP ranks, output in $tmp/out
  np=$1
  shift
  sh "$srcdir/tests/lib/mpi_run.sh" "$np" "$CLTRAIN" "$@" >"$tmp/out" 2>&1
}
bad() { # WHAT MUST_SAY NP ARGS...
  what=$1 say=$2
  shift 2
  start=$(date +%s)
  run "$@"
  rc=$?
  if [ $rc -eq 77 ]; then exit 77; fi
  if [ $rc -eq 0 ] || ! grep -q -- "$say" "$tmp/out" || [ $(($(date +%s) - start)) -ge $CLT_TIMEOUT ]; then
    echo "FAIL: $what: exit $rc after $(($(date +%s) - start)) s, expected a message with '$say':"
    cat "$tmp/out"
    fail=1
  else
    echo "ok: $what: $(grep -m1 -- "$say" "$tmp/out")"
  fi
}

CLT_NODE_SIZE=2
export CLT_NODE_SIZE
# The fits time every algorithm at several sizes: seconds on an idle
# machine, minutes on a loaded one, so they get longer than the refusals.
CLT_TEST_LIMIT=300 run 4 bench allreduce --fit "$tmp/model.json"
rc=$?
[ $rc -eq 77 ] && exit 77
for key in alpha_intra beta_intra alpha_inter beta_inter gamma; do
  grep -q "\"$key\"" "$tmp/model.json" 2>/dev/null || { echo "FAIL: --fit wrote no $key (exit $rc)"; cat "$tmp/out"; fail=1; }
done
for key in alpha_shm alpha_ring; do
  grep -q "\"$key\"" "$tmp/model.json" && { echo "FAIL: --fit on 2 pretend nodes wrote $key"; fail=1; }
done
# One node: shm and the ring timed, their terms written, and the file loads
# (on every rank). The far pairs are written only where they fit better.
CLT_NODE_SIZE= CLT_TEST_LIMIT=300 run 2 bench allreduce --fit "$tmp/shm.json"
CLT_TEST_LIMIT=60 # (a shell may keep an assignment made before a function)
for key in alpha_shm beta_shm alpha_ring beta_ring; do
  grep -q "\"$key\"" "$tmp/shm.json" 2>/dev/null ||
    { echo "FAIL: --fit on one node wrote no $key"; cat "$tmp/out"; fail=1; }
done
# The fit times shm in the plans' own pieces: 256 KiB when each rank has a
# core (mpi_run.sh binds none: every rank has this shell's cores), else 1 MiB.
want=1048576
[ "$(nproc)" -ge 2 ] && want=262144
if grep -q "\"shm_piece_bytes\": *$want" "$tmp/shm.json" 2>/dev/null; then
  echo "ok: --fit timed shm in pieces of $want bytes, the plans' own"
else
  echo "FAIL: --fit's shm pieces are not the plans' $want:"; grep shm_piece "$tmp/shm.json"; fail=1
fi
CLT_NODE_SIZE= CLT_COMM_MODEL=$tmp/shm.json run 2 bench allreduce --no-device --min-bytes 64K --max-bytes 128K \
  --iters 2 --warmup 1 -a shm,ring,auto ||
  { echo "FAIL: bench with the fitted terms:"; cat "$tmp/out"; fail=1; }

CLT_COMM_MODEL=$tmp/model.json run 4 bench allreduce --no-device --min-bytes 4K --max-bytes 64K --iters 2 --warmup 1 \
  -a ring,twolevel,auto,rabenseifner,twolevel-rabenseifner --json
rc=$?
grep -q '"algorithm": "twolevel"' "$tmp/out" && grep -q '"algorithm": "ring"' "$tmp/out" ||
  { echo "FAIL: bench --algorithm ring,twolevel (exit $rc):"; cat "$tmp/out"; fail=1; }
# 64 KiB: the ring's busiest rank (1 or 3, whose right neighbour is on the
# other node) sends 2 (N-1)/N = 3/2 of it across nodes, two-level's each
# rank half of its half: 98304 and 32768 bytes (with Rabenseifner's between
# the 2 nodes too); flat Rabenseifner's sends half of it to its partner on
# the other node when halving and half when doubling: 65536.
if command -v python3 >/dev/null; then
python3 - "$tmp/out" <<'PY' || fail=1
import json, sys
doc = json.load(open(sys.argv[1]))
rows = {(r["bytes"], r["algorithm"]): r for r in doc["results"]}
ring, two = rows[(65536, "ring")], rows[(65536, "twolevel")]
rab, two_rab = rows[(65536, "rabenseifner")], rows[(65536, "twolevel-rabenseifner")]
ok = doc["nodes"] == 2 and ring["sent_inter_bytes"] == 98304 and two["sent_inter_bytes"] == 32768 \
    and rab["sent_inter_bytes"] == 65536 and two_rab["sent_inter_bytes"] == 32768 \
    and all(r["host"]["correct"] for r in doc["results"])
print("ok: bytes across nodes, ring %d, twolevel %d" % (ring["sent_inter_bytes"], two["sent_inter_bytes"]) if ok
      else "FAIL: bytes across nodes: %s" % json.dumps(doc))
sys.exit(0 if ok else 1)
PY
fi

bad "--algorithm tree" "'tree' is not one of auto, ring, recursive-doubling" 2 bench allreduce --algorithm tree
CLT_ALLREDUCE=tree bad "CLT_ALLREDUCE=tree" "CLT_ALLREDUCE='tree'" 2 bench allreduce --no-device --max-bytes 4K
echo '{"alpha_intra": 1e-6}' >"$tmp/half.json"
CLT_COMM_MODEL=$tmp/half.json bad "a model without beta_intra" 'no "beta_intra"' 2 bench allreduce --no-device
CLT_NODE_SIZE=2,x bad "CLT_NODE_SIZE=2,x" "CLT_NODE_SIZE='2,x'" 3 bench allreduce --no-device
CLT_NODE_SIZE=2,2 bad "CLT_NODE_SIZE=2,2 on 3 ranks" "add up to 4 ranks, but the job has 3" 3 bench allreduce --no-device
bad "train --allreduce tree" "--allreduce must be one of auto, ring, recursive-doubling" 2 train m.model --allreduce tree
exit $fail
