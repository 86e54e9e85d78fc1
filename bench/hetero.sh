#!/bin/sh
# hetero.sh: --balance auto on devices that can add up, against each
# device alone on the same cores, in one run. Run from the build directory:
#
#   sh ../bench/hetero.sh [mlp|cnn] [STEPS] [REPS]      (B=N: batch, default 64;
#                                                       RIGS="a b c": which rigs)
#
# Rigs (each device has cores of its own, so the sum of the solo rates is
# reachable; README "Giving each device its own cores"):
#  (a) two PoCL ranks, one core each (taskset), rank 1's core shared with
#      a busy loop pinned to it, which slows that rank to about half speed;
#  (b) a PoCL rank on core 0 and a rusticl rank on core 1;
#  (c) --devices pocl,rusticl in one process, unpinned (both on both cores).
# For each rig: each device alone on ITS OWN core assignment (the loop
# running in (a)); in (a) and (b) both alone at the same time, as two jobs
# that never communicate (what the machine gives two independent processes
# on its cores: on this 2-core VM 0.84-0.90 of the sum of the solo rates,
# the cores are not independent); then the two together with --balance
# equal and auto;
# REPS repetitions alternate the configurations, and medians are printed,
# with auto / (sum of solo rates), auto / (fastest alone), the fitted
# fixed and per-sample cost of each replica and the step from which auto's
# shares stayed put. Rates are the mean samples/s of the step records of
# the last two thirds of a run (the first third: kernel builds, the first
# splits). A slow device alone, and equal beside it, run STEPS/SLOW steps.
#
# Targets (issue 14): (a) auto >= 0.9 of the sum of the solo rates; (b) and
# (c) auto >= 0.95 of the fastest device alone. With two ranks every step
# all-reduces the gradients (the MLP's 0.9 MiB took ~1 ms here, next to
# its 1.4 ms step at batch 64), which a device alone never pays: at small
# batches the MLP's rigs (a) and (b) read that cost; B=512 shows them
# without most of it.
set -e
model=${1:-mlp}
steps=${2:-$([ "$model" = cnn ] && echo 120 || echo 600)}
reps=${3:-3}
slow=${SLOW:-$([ "$model" = cnn ] && echo 6 || echo 4)}
here=$(cd "$(dirname "$0")" && pwd)
spec=$here/../examples/fashion_$model.model
B=${B:-64}
tmp=$(mktemp -d)
busy=
trap '[ -n "$busy" ] && kill "$busy" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export RUSTICL_ENABLE=llvmpipe
. "$here/lib.sh"
[ "$(nproc)" -ge 2 ] || { echo "hetero.sh needs 2 cores (has $(nproc))"; exit 77; }

# run NAME STEPS -- [CORE:DEVICES ...]: one job, a rank per CORE:DEVICES
# (CORE "-": unpinned), --threads 1 each unless unpinned.
run() {
  name=$1 n=$2
  shift 3
  mpmd= sep=
  for r in "$@"; do
    core=${r%%:*} devs=${r#*:}
    pin= threads="--threads 1"
    [ "$core" = - ] && threads= || pin="taskset -c $core"
    mpmd="$mpmd $sep -np 1 $pin ./cltrain train $spec --devices $devs $threads --batch $B --epochs 100 \
      --max-steps $n --log-every 10 --quiet --metrics $tmp/$name.jsonl $extra"
    sep=:
  done
  rm -f "$tmp/$name.jsonl"
  # shellcheck disable=SC2086
  CLT_LOG_LEVEL=info mpirun --oversubscribe --bind-to none -x RUSTICL_ENABLE -x CLT_LOG_LEVEL $mpmd \
    >/dev/null 2>"$tmp/$name.err" || { cat "$tmp/$name.err"; exit 1; }
}

# model_of FILE: the last step record's shares, fitted costs, and the step
# from which the shares stayed within one sample of the last ones.
model_of() {
  /usr/bin/python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in r if x["event"] == "step"]
last = r[-1]["shares"]
settled = r[0]["step"]
for x in r:
    if any(abs(a - b) > 1 for a, b in zip(x["shares"], last)):
        settled = None
    elif settled is None:
        settled = x["step"]
f, p = r[-1].get("fixed_s") or [], r[-1].get("per_sample_s") or []
costs = ", ".join("replica %d %.2f ms + %.3f ms/sample" % (i, a * 1e3, b * 1e3) for i, (a, b) in enumerate(zip(f, p)))
print("shares %s (settled by step %s); %s" % (":".join(map(str, last)), settled, costs))' "$1"
}

busy_on() { taskset -c "$1" sh -c 'while :; do :; done' & busy=$!; }
busy_off() { [ -n "$busy" ] && kill "$busy" 2>/dev/null; wait "$busy" 2>/dev/null || true; busy=; }

# rig NAME SOLO0 SOLO1 TOGETHER...: alternate REPS times; medians.
rig() {
  label=$1 s0=$2 s1=$3
  shift 3
  for rep in $(seq "$reps"); do
    [ "$label" = a ] && busy_on 1
    run "$label-solo0" "$steps" -- $s0; tail_rate "$tmp/$label-solo0.jsonl" >>"$tmp/$label-solo0.txt"
    n1=$steps
    [ "$label" != a ] && n1=$((steps / slow))
    run "$label-solo1" "$n1" -- $s1; tail_rate "$tmp/$label-solo1.jsonl" >>"$tmp/$label-solo1.txt"
    if [ "$label" != c ]; then # both alone at once: two jobs, no communication
      (run "$label-pair0" "$steps" -- $s0) & pair=$!
      run "$label-pair1" "$n1" -- $s1
      wait "$pair"
      /usr/bin/python3 -c "print($(tail_rate "$tmp/$label-pair0.jsonl") + $(tail_rate "$tmp/$label-pair1.jsonl"))" \
        >>"$tmp/$label-pair.txt"
    fi
    extra="--balance equal"
    run "$label-equal" "$n1" -- "$@" # at the slow device's pace
    tail_rate "$tmp/$label-equal.jsonl" >>"$tmp/$label-equal.txt"
    extra="--balance auto"
    run "$label-auto" "$steps" -- "$@"
    extra=
    tail_rate "$tmp/$label-auto.jsonl" >>"$tmp/$label-auto.txt"
    model_of "$tmp/$label-auto.jsonl" >>"$tmp/$label-model.txt"
    busy_off
  done
  a=$(median "$tmp/$label-solo0.txt") b=$(median "$tmp/$label-solo1.txt")
  e=$(median "$tmp/$label-equal.txt") u=$(median "$tmp/$label-auto.txt")
  sum=$(/usr/bin/python3 -c "print($a + $b)") best=$(/usr/bin/python3 -c "print(max($a, $b))")
  printf '  device 0 alone %10s   device 1 alone %10s   sum %10s samples/s\n' "$a" "$b" "$sum"
  if [ -s "$tmp/$label-pair.txt" ]; then
    pr=$(median "$tmp/$label-pair.txt")
    printf '  both alone at once (two jobs, no communication) %10s = %s of the sum\n' "$pr" "$(ratio "$pr" "$sum")"
  fi
  printf '  equal          %10s   %s of the sum, %s of the fastest\n' "$e" "$(ratio "$e" "$sum")" "$(ratio "$e" "$best")"
  printf '  auto           %10s   %s of the sum, %s of the fastest\n' "$u" "$(ratio "$u" "$sum")" "$(ratio "$u" "$best")"
  printf '  auto, last repetition: %s\n' "$(tail -n1 "$tmp/$label-model.txt")"
}

extra=
echo "model $model, batch $B, $steps steps a run ($((steps / slow)) for a slow device alone), $reps repetitions"
for r in ${RIGS:-a b c}; do
  case $r in
  a) echo "(a) two PoCL ranks on cores 0 and 1, a busy loop on core 1 (target: auto >= 0.9 of the sum)"
     rig a "0:pocl" "1:pocl" "0:pocl" "1:pocl" ;;
  b) echo "(b) PoCL rank on core 0, rusticl rank on core 1 (target: auto >= 0.95 of the fastest)"
     rig b "0:pocl" "1:rusticl" "0:pocl" "1:rusticl" ;;
  c) echo "(c) one process, --devices pocl,rusticl, unpinned (target: auto >= 0.95 of the fastest)"
     rig c "-:pocl" "-:rusticl" "-:pocl,rusticl" ;;
  *) echo "hetero.sh: RIGS: no rig \"$r\" (a, b, c)"; exit 2 ;;
  esac
done
