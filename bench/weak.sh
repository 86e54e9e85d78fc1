#!/bin/sh
# weak.sh: weak scaling of data parallelism on this machine, against the
# ceiling the machine itself sets (issue 13). Run from the build directory:
#
#   sh ../bench/weak.sh [mlp|cnn] [STEPS] [REPS]     (B=N: batch per rank, 64)
#
# Each configuration runs one PoCL thread per rank, each rank pinned to a
# core of its own (taskset), REPS times alternating, medians:
#  1. one rank alone on core 0, batch B;
#  2. the ceiling: two independent one-rank trainings at the same time,
#     on cores 0 and 1, the sum of their rates: what two ranks could do if
#     they never talked to each other, with the memory system, caches and
#     clock the two cores share (2x the first figure overstates it);
#  3. two ranks of one job on cores 0 and 1, global batch 2B, gradients
#     all-reduced every step.
# It prints 3 against 2 x 1 (plain weak scaling) and 3 against 2 (the
# target: at least 0.9). Rates are the mean samples/s of the step records
# of the last two thirds of a run (the first third: kernel builds).
set -e
model=${1:-mlp}
steps=${2:-$([ "$model" = cnn ] && echo 120 || echo 600)}
reps=${3:-3}
B=${B:-64}
here=$(cd "$(dirname "$0")" && pwd)
spec=$here/../examples/fashion_$model.model
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$here/lib.sh"
[ "$(nproc)" -ge 2 ] || { echo "weak.sh needs 2 cores (has $(nproc))"; exit 77; }

train() { # CORE BATCH METRICS: cltrain train pinned to CORE
  echo "taskset -c $1 ./cltrain train $spec --devices pocl --threads 1 --batch $2 --epochs 100 --max-steps $steps \
--log-every 10 --quiet --metrics $3"
}

echo "model $model, batch $B per rank, $steps steps a run, $reps repetitions, one PoCL thread per rank"
for rep in $(seq "$reps"); do
  rm -f "$tmp"/*.jsonl
  # shellcheck disable=SC2046
  mpirun --bind-to none -np 1 $(train 0 "$B" "$tmp/one.jsonl") >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  tail_rate "$tmp/one.jsonl" >>"$tmp/one.txt"
  # shellcheck disable=SC2046
  { mpirun --bind-to none -np 1 $(train 0 "$B" "$tmp/a.jsonl") >/dev/null 2>"$tmp/err.a" & pa=$!
    mpirun --bind-to none -np 1 $(train 1 "$B" "$tmp/b.jsonl") >/dev/null 2>"$tmp/err.b"; rb=$?
    wait "$pa"; ra=$?; }
  [ "$ra" = 0 ] && [ "$rb" = 0 ] || { cat "$tmp/err.a" "$tmp/err.b"; exit 1; }
  /usr/bin/python3 -c "print('%.1f' % ($(tail_rate "$tmp/a.jsonl") + $(tail_rate "$tmp/b.jsonl")))" >>"$tmp/ceiling.txt"
  # shellcheck disable=SC2046
  mpirun --bind-to none -np 1 $(train 0 $((2 * B)) "$tmp/two.jsonl") : -np 1 $(train 1 $((2 * B)) "$tmp/two.jsonl") \
    >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  tail_rate "$tmp/two.jsonl" >>"$tmp/two.txt"
done
one=$(median "$tmp/one.txt") ceiling=$(median "$tmp/ceiling.txt") two=$(median "$tmp/two.txt")
printf '  1 rank alone          %10s samples/s   (runs: %s)\n' "$one" "$(tr '\n' ' ' <"$tmp/one.txt")"
printf '  2 independent 1-rank  %10s samples/s   (runs: %s) = %s x 1 rank: the ceiling\n' "$ceiling" \
  "$(tr '\n' ' ' <"$tmp/ceiling.txt")" "$(ratio "$ceiling" "$one")"
printf '  2 ranks, one job      %10s samples/s   (runs: %s)\n' "$two" "$(tr '\n' ' ' <"$tmp/two.txt")"
printf '  2 ranks / (2 x 1 rank) %s;  2 ranks / ceiling %s (target >= 0.9)\n' \
  "$(ratio "$two" "$(/usr/bin/python3 -c "print(2 * $one)")")" "$(ratio "$two" "$ceiling")"
