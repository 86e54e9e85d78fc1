#!/bin/sh
# pipeline.sh: pipeline parallelism (issue 17) on this machine. Run from the
# build directory:
#
#   sh bench/pipeline.sh [STEPS]          (default 30 steps per run)
#
#  1. the bubble: a model of equal layers (6 x linear 784 + relu, then the
#     output), cut into stages of equal layers, at P = 2 and 3, M = 4, 8
#     and 16, 1F1B; each stage's share of its schedule's time spent waiting
#     for its neighbours (logged when the trainer ends; the first step, which
#     builds the kernels, left out) against (P - 1) / (M + P - 1). The
#     formula is for stages of equal time; ours are not quite (the first
#     stage has no input gradient to compute, the last the loss), so a
#     faster stage also waits for a slower one: the busiest stage, which
#     sets the step's time, is the one to set beside it;
#  2. activation memory per stage, 1F1B against GPipe at P = 3, M = 8 (the
#     trainer's log of each stage's activation sets);
#  3. throughput of P = 2 against D = 2 on 2 ranks, for the CNN and the
#     tiny GPT on the fortunes corpus (samples/s of the last step records).
# Ranks share this machine's cores (and whatever else runs on it): the
# bubble of a stage waiting for a neighbour that waits for a core is
# larger than the schedule's, and P = 3 on 2 cores cannot overlap all
# three stages at all. Say so when quoting the numbers.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
steps=${1:-30}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
RUSTICL_ENABLE=${RUSTICL_ENABLE-llvmpipe}
export RUSTICL_ENABLE
run() { # NP ARGS...: cltrain train on NP ranks, log at info
  np=$1
  shift
  CLT_LOG_LEVEL=info CLT_TEST_LIMIT=900 sh "$srcdir/tests/lib/mpi_run.sh" "$np" "$CLTRAIN" train "$@" -d pocl \
    --epochs 1 --max-steps "$steps" --log-every 5 --metrics "$tmp/metrics" >"$tmp/out" 2>"$tmp/err"
}
{
  echo "input 784"
  for i in 1 2 3 4 5 6; do echo "linear 784"; echo "relu"; done
  echo "linear 10"
} >"$tmp/even.model"

echo "== 1. bubble, batch 512, 1F1B: the busiest stage's (the one that waited least: it sets the step's"
echo "   time; a faster stage also waits for the slower one), every stage's, against (P-1)/(M+P-1)"
printf '%3s %3s %9s %9s %7s  %s\n' P M busiest ideal diff "each stage (computed ms a micro-batch)"
for P in ${PIPE_PS:-2 3}; do
  for M in 4 8 16; do
    rm -f "$tmp/metrics"
    if ! run "$P" "$tmp/even.model" -b 512 --pipeline "$P" --micro-batches "$M" --stages "$(
        if [ "$P" = 2 ]; then echo 6,7; else echo 4,4,5; fi)"; then
      echo "P=$P M=$M failed:"; cat "$tmp/err"; continue
    fi
    grep "bubble" "$tmp/err" | sed 's/.*pipeline stage \([0-9]*\) of.*bubble \([0-9.]*\)%.*computed \([0-9.]*\) ms.*/\1 \2 \3/' |
      sort -n >"$tmp/b"
    awk -v P="$P" -v M="$M" '{ if (n == 0 || $2 < min) min = $2; each = each sprintf(" %s%% (%s)", $2, $3); n++ }
      END { ideal = 100 * (P - 1) / (M + P - 1);
      printf "%3d %3d %8.1f%% %8.1f%% %+6.1f %s\n", P, M, min, ideal, min - ideal, each }' "$tmp/b"
  done
done

echo "== 2. activation memory per stage, P=3, M=8, batch 512"
for sched in 1f1b gpipe; do
  run 3 "$tmp/even.model" -b 512 --pipeline 3 --micro-batches 8 --schedule-pipeline "$sched" --stages 4,4,5 || {
    cat "$tmp/err"; continue; }
  echo "$sched:"
  grep "activation set" "$tmp/err" | sed 's/.*\(pipeline stage [0-9]* of [0-9]*\) (rank [0-9]*): /  \1: /' | sort
done

echo "== 3. throughput on 2 ranks: P=2 (M=4) against D=2 (samples/s, mean of the last step records)"
rate() { awk -F'"samples_per_s":' 'NF > 1 { split($2, a, /[,}]/); v[n++] = a[1] } END {
  s = 0; k = 0; for (i = int(n / 3); i < n; i++) { s += v[i]; k++ } if (k) printf "%.0f", s / k; else printf "?" }' "$1"; }
for model in "$srcdir/examples/fashion_cnn.model"; do
  rm -f "$tmp/metrics"; run 2 "$model" -b 64 --pipeline 2 --micro-batches 4 && pp=$(rate "$tmp/metrics") || pp=failed
  rm -f "$tmp/metrics"; run 2 "$model" -b 64 && dp=$(rate "$tmp/metrics") || dp=failed
  echo "$(basename "$model"): P=2 $pp, D=2 $dp"
done
# The tiny GPT on the fortunes corpus (scripts/make-fortunes-data.sh makes
# it with cltrain tokenize when missing), in tokens of 32 sequences a step.
gpt_train=data/fortunes_train.bin
[ -f "$gpt_train" ] || CLTRAIN="$CLTRAIN" OUT_DIR=data sh "$srcdir/scripts/make-fortunes-data.sh" >/dev/null 2>&1 || :
if [ -f "$gpt_train" ]; then
  g="$srcdir/examples/gpt_tiny.model"
  a="-o adamw --lr 0.001 --data $gpt_train --val none"
  rm -f "$tmp/metrics"; run 2 "$g" $a -b 32 --pipeline 2 --micro-batches 4 && pp=$(rate "$tmp/metrics") || pp=failed
  rm -f "$tmp/metrics"; run 2 "$g" $a -b 32 && dp=$(rate "$tmp/metrics") || dp=failed
  echo "gpt_tiny.model (samples are sequences): P=2 $pp, D=2 $dp"
else
  echo "gpt_tiny.model: skipped (no $gpt_train, and scripts/make-fortunes-data.sh could not make it)"
fi

echo "== 4. a mixed pipeline, stage 0 on rusticl and stage 1 on PoCL, P=2 M=4: --stages auto against the even cut"
cat >"$tmp/mixed.sh" <<'MIXED'
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}
if [ "$r" = 0 ]; then CLT_DEVICES=rusticl; else CLT_DEVICES=pocl; fi
export CLT_DEVICES
exec "$@"
MIXED
for model in "$srcdir/examples/fashion_mlp.model" "$srcdir/examples/fashion_cnn.model"; do
  for cut in even auto; do
    rm -f "$tmp/metrics"
    CLT_LOG_LEVEL=info CLT_TEST_LIMIT=900 sh "$srcdir/tests/lib/mpi_run.sh" 2 sh "$tmp/mixed.sh" "$CLTRAIN" train "$model" \
      -b 64 --pipeline 2 --micro-batches 4 $( [ $cut = auto ] && echo --stages auto ) --epochs 1 \
      --max-steps "$steps" --log-every 5 --metrics "$tmp/metrics" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; continue; }
    echo "$(basename "$model") $cut: $(rate "$tmp/metrics") samples/s; $(sed -n 's/.*cut: //p' "$tmp/err" | head -1)"
    grep "computed" "$tmp/err" | sed 's/.*\(pipeline stage [0-9]* of [0-9]*\).*computed \(.*\)/  \1: \2/' | sort
  done
done
