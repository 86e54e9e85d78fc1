#!/bin/sh
# bits.sh: the bits of trained weights, for refactorings that must change
# none (issue 35). Trains every configuration below for 30 steps and saves
# its weights; run it on two commits and compare:
#
#   sh ../bench/bits.sh OUT              (from a build directory: ./cltrain)
#   sh ../bench/bits.sh --compare OUT_A OUT_B
#
# OUT gets one NAME.safetensors per configuration and SHA256SUMS; --compare
# says which files differ (exit 1) or that every one is byte-identical.
# ONLY="pattern": the configurations whose name matches (grep -E).
#
# Configurations (PoCL, one thread a rank; rusticl where named):
#  - MLP (SGD, momentum), CNN (Adam, dropout) and tiny GPT (AdamW, clipping,
#    tied weights) x {1, 2, 3 ranks} x {--zero 0, 1, 2} x {fp32, fp16};
#  - the pipeline at 2 stages (1F1B and GPipe) and 2 stages x 2 replicas,
#    for the MLP and the GPT (whose tied weight crosses stages);
#  - PoCL + rusticl in one process and as two ranks;
#  - shares that leave a replica out (a rank that sits out, and a local
#    replica that does), given weights 3,1, and --accumulate 2 at --zero 2;
#  - a run saved at step 15 and resumed to 30 (2 ranks, --zero 1, fp16),
#    which must also equal the same run uninterrupted;
#  - --offload optimizer (CNN fp32, GPT fp16) x {1, 2 ranks} x {--zero 0,
#    1, 2} and --shard-weights 3,1 on PoCL + rusticl ranks, each equal to
#    the same run without it;
#  - --recompute blocks for the GPT at 1, 2 and 3 ranks (--zero 0, 1, 2; fp32
#    and fp16) and on the pipeline (2 stages x 2 replicas), and the tiny
#    Llama at 1 rank (fp16) and 2 (--zero 2), each of which must also equal
#    the same run without it.
#  - --zero 3 (parameters sharded, each layer put on the device before its
#    forward and backward) for the three models x {2, 3, 4 ranks} x {fp32,
#    fp16}, with --zero 0 at 4 ranks beside it, PoCL + rusticl as two ranks,
#    --accumulate 2 and the balancer's weights 3,1: each must also equal its
#    --zero 0 run bit for bit;
#  - --zero 1, 2 and 3 inside the pipeline (2 stages x 2 replicas; the MLP
#    and the GPT, 1F1B, and the GPT under GPipe at --zero 3), each equal to
#    --zero 0 with the same pipeline.
set -e
here=$(cd "$(dirname "$0")" && pwd)
if [ "$1" = --compare ]; then
  a=$2 b=$3 bad=0 n=0
  for f in "$a"/*.safetensors; do
    name=$(basename "$f")
    n=$((n + 1))
    if [ ! -f "$b/$name" ]; then echo "missing in $b: $name"; bad=1
    elif ! cmp -s "$f" "$b/$name"; then echo "differs: $name"; bad=1; fi
  done
  for f in "$b"/*.safetensors; do [ -f "$a/$(basename "$f")" ] || { echo "missing in $a: $(basename "$f")"; bad=1; }; done
  [ $bad = 0 ] && echo "all $n weight files byte-identical"
  exit $bad
fi
out=${1:?usage: sh bench/bits.sh OUT | --compare OUT_A OUT_B}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export RUSTICL_ENABLE=${RUSTICL_ENABLE-llvmpipe} POCL_MAX_PTHREAD_COUNT=1
mpi="mpirun --oversubscribe --bind-to none -x POCL_MAX_PTHREAD_COUNT -x RUSTICL_ENABLE"
examples=$here/../examples
tokens=${TOKENS:-data/fortunes_train.bin}
[ -f "$tokens" ] || { echo "bits.sh: no $tokens (make fortunes-data, or TOKENS=FILE)" >&2; exit 1; }
log=$out/log
: >"$log"

args() { # MODEL: its spec, data and optimizer
  case $1 in
  mlp) echo "$examples/fashion_mlp.model -o sgd --lr 0.05 --batch 64" ;;
  cnn) echo "$examples/fashion_cnn.model -o adam --lr 0.001 --batch 48" ;;
  gpt) echo "$examples/gpt_tiny.model --data $tokens --val none -o adamw --lr 0.003 --clip 1 --batch 12" ;;
  llama) echo "$examples/llama_tiny.model --data $tokens --val none -o adamw --lr 0.003 --clip 1 --batch 12" ;;
  esac
}

# run NAME NP MODEL [OPTIONS...]: train 30 steps on NP ranks, save OUT/NAME.
run() {
  name=$1 np=$2 model=$3
  shift 3
  if [ -n "$ONLY" ] && ! echo "$name" | grep -qE "$ONLY"; then return; fi
  echo "== $name" >>"$log"
  t0=$(date +%s)
  # shellcheck disable=SC2046
  if ! $mpi -np "$np" ./cltrain train $(args "$model") ${DEVICES---devices pocl} --epochs 1 --max-steps 30 --bucket-mb 0.05 \
    --check-every 10 --quiet --save "$out/$name.safetensors" "$@" >>"$log" 2>&1; then
    echo "FAIL: $name (see $log)"
    exit 1
  fi
  echo "$name: $(($(date +%s) - t0)) s"
}

for model in mlp cnn gpt; do
  for np in 1 2 3; do
    for z in 0 1 2; do
      for p in fp32 fp16; do
        run "$model-np$np-zero$z-$p" "$np" "$model" --zero "$z" --precision "$p"
      done
    done
  done
  [ $model = cnn ] && continue
  run "$model-pp2-1f1b" 2 "$model" --pipeline 2
  run "$model-pp2-gpipe" 2 "$model" --pipeline 2 --schedule-pipeline gpipe --micro-batches 4
  run "$model-pp2x2" 4 "$model" --pipeline 2
done

# PoCL and rusticl: in one process, and as two ranks (without --devices,
# rank r takes device r).
run "mlp-pocl+rusticl" 1 mlp --devices pocl,rusticl
run "gpt-pocl+rusticl-fp16" 1 gpt --devices pocl,rusticl --precision fp16
DEVICES= run "mlp-pocl-rusticl-ranks" 2 mlp --zero 1
DEVICES= run "gpt-pocl-rusticl-ranks" 2 gpt --zero 2
unset DEVICES
# Shares: a rank that sits out (its replica at 0), a local replica that does,
# uneven weights, and accumulation at --zero 2.
run "mlp-np2-sit-out" 2 mlp --balance 1,0
run "mlp-local-sit-out" 1 mlp --devices pocl,rusticl --balance 1,0
run "cnn-np2-weights31-fp16" 2 cnn --balance 3,1 --precision fp16
run "mlp-np2-zero2-accumulate2" 2 mlp --zero 2 --accumulate 2
# Issue 37: the optimizer state in host memory (--offload optimizer) at
# --zero 0, 1, 2 on 1 and 2 ranks, fp32 (CNN, Adam) and fp16 (GPT, AdamW);
# uneven shards (--shard-weights) on PoCL + rusticl ranks. Each must equal
# the same run without it (checked below).
for np in 1 2; do
  for z in 0 1 2; do
    run "cnn-np$np-zero$z-fp32-offload" "$np" cnn --zero "$z" --offload optimizer
    run "gpt-np$np-zero$z-fp16-offload" "$np" gpt --zero "$z" --precision fp16 --offload optimizer
  done
done
DEVICES= run "mlp-pocl-rusticl-ranks-shard31" 2 mlp --zero 1 --shard-weights 3,1
# The GPT without clipping: with --clip the norm adds uneven parts' sums of
# squares, so the clipping scale is --zero 0's to rounding only.
DEVICES= run "gpt-pocl-rusticl-ranks-noclip" 2 gpt --clip 0
DEVICES= run "gpt-pocl-rusticl-ranks-noclip-shard31" 2 gpt --zero 2 --shard-weights 3,1 --clip 0
unset DEVICES
for f in "$out"/*-offload.safetensors "$out"/*-shard31.safetensors; do
  [ -f "$f" ] || continue
  base=$(basename "$f" .safetensors)
  case $base in *-offload) ref=${base%-offload} ;; *) ref=${base%-shard31} ;; esac
  [ -f "$out/$ref.safetensors" ] || continue
  if cmp -s "$f" "$out/$ref.safetensors"; then echo "$base: the bits of $ref"
  else echo "FAIL: $base: not the bits of $ref"; exit 1; fi
done
# Saved at step 15 and resumed: the same bits as the run straight through.
if [ -z "$ONLY" ] || echo "gpt-np2-resume" | grep -qE "$ONLY"; then
  ck=$(mktemp -d)
  run "gpt-np2-first15" 2 gpt --zero 1 --precision fp16 --max-steps 15 --checkpoint-dir "$ck" --checkpoint-every 15
  rm -f "$out/gpt-np2-first15.safetensors"
  run "gpt-np2-resume" 2 gpt --zero 1 --precision fp16 --checkpoint-dir "$ck" --checkpoint-every 15 --resume latest
  rm -rf "$ck"
  if cmp -s "$out/gpt-np2-resume.safetensors" "$out/gpt-np2-zero1-fp16.safetensors" 2>/dev/null; then
    echo "resumed at step 15: the same bits as straight through"
  elif [ -f "$out/gpt-np2-zero1-fp16.safetensors" ]; then
    echo "FAIL: resumed at step 15: not the bits of the run straight through"; exit 1
  fi
fi
# --recompute blocks: the bits of the same run without it (the Llama's
# counterparts are made here).
run "llama-np1-zero0-fp16" 1 llama --precision fp16
run "llama-np2-zero2-fp32" 2 llama --zero 2
for c in "gpt-np1-zero0-fp32 1 gpt" "gpt-np2-zero1-fp16 2 gpt --zero 1 --precision fp16" \
         "gpt-np3-zero2-fp32 3 gpt --zero 2" "gpt-np2-zero2-fp16 2 gpt --zero 2 --precision fp16" \
         "gpt-pp2x2 4 gpt --pipeline 2" "llama-np1-zero0-fp16 1 llama --precision fp16" \
         "llama-np2-zero2-fp32 2 llama --zero 2"; do
  # shellcheck disable=SC2086
  set -- $c
  base=$1
  shift
  run "$base-recompute" "$@" --recompute blocks
  if [ ! -f "$out/$base-recompute.safetensors" ] || [ ! -f "$out/$base.safetensors" ]; then continue; fi
  if cmp -s "$out/$base-recompute.safetensors" "$out/$base.safetensors"; then
    echo "$base --recompute blocks: the same bits as without"
  else
    echo "FAIL: $base --recompute blocks: not the bits of the same run without it"; exit 1
  fi
done
# --zero 3: the same bits as --zero 0 with the same options.
for model in mlp cnn gpt; do
  for np in 2 3 4; do
    for p in fp32 fp16; do
      [ $np = 4 ] && run "$model-np4-zero0-$p" 4 "$model" --zero 0 --precision "$p"
      run "$model-np$np-zero3-$p" "$np" "$model" --zero 3 --precision "$p"
    done
  done
done
DEVICES= run "gpt-pocl-rusticl-ranks-zero0" 2 gpt --zero 0
DEVICES= run "gpt-pocl-rusticl-ranks-zero3" 2 gpt --zero 3
DEVICES= run "cnn-pocl-rusticl-ranks-zero0" 2 cnn --zero 0
DEVICES= run "cnn-pocl-rusticl-ranks-zero3" 2 cnn --zero 3
unset DEVICES
run "gpt-np2-zero0-accumulate2" 2 gpt --zero 0 --accumulate 2
run "gpt-np2-zero3-accumulate2" 2 gpt --zero 3 --accumulate 2
run "cnn-np2-weights31-zero3-fp16" 2 cnn --balance 3,1 --precision fp16 --zero 3
run "gpt-np2-zero3-fp32-recompute" 2 gpt --zero 3 --recompute blocks
run "gpt-np2-zero3-fp32-offload" 2 gpt --zero 3 --offload optimizer
for f in "$out"/*zero3*.safetensors; do
  [ -f "$f" ] || continue
  z0=$(echo "$f" | sed 's/-zero3/-zero0/; s/-weights31-zero0/-weights31/; s/-recompute//; s/-offload//')
  [ -f "$z0" ] || continue
  if cmp -s "$f" "$z0"; then echo "$(basename "$f"): the bits of --zero 0"
  else echo "FAIL: $(basename "$f") differs from $(basename "$z0")"; exit 1; fi
done
# ZeRO inside the pipeline's stages (2 stages x 2 replicas): --zero 1, 2
# and 3 the bits of --zero 0 with the same pipeline (1F1B; GPipe with 4
# micro-batches for the GPT).
for model in mlp gpt; do
  for z in 1 2 3; do run "$model-pp2x2-zero$z" 4 "$model" --pipeline 2 --zero "$z"; done
done
run "gpt-pp2x2-gpipe" 4 gpt --pipeline 2 --schedule-pipeline gpipe --micro-batches 4
run "gpt-pp2x2-gpipe-zero3" 4 gpt --pipeline 2 --schedule-pipeline gpipe --micro-batches 4 --zero 3
for f in "$out"/*-pp2x2*-zero[123].safetensors; do
  [ -f "$f" ] || continue
  z0=$(echo "$f" | sed 's/-zero[123]\.safetensors$/.safetensors/')
  [ -f "$z0" ] || continue
  if cmp -s "$f" "$z0"; then echo "$(basename "$f"): the bits of --zero 0 with the same pipeline"
  else echo "FAIL: $(basename "$f") differs from $(basename "$z0")"; exit 1; fi
done
(cd "$out" && sha256sum ./*.safetensors >SHA256SUMS)
echo "$(ls "$out"/*.safetensors | wc -l) weight files in $out"
