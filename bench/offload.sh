#!/bin/sh
# offload.sh: what --offload optimizer costs a step (issue 37), against the
# same run with the state on the device, interleaved: for each rank count
# and ZeRO stage, ROUNDS rounds of (device, offload), each a training run
# of STEPS AdamW steps of a deep MLP (61 linear layers, 994,186
# parameters), timed by the epoch line's seconds; prints the medians and
# their ratio. On PoCL the device's memory is the host's, so the offload
# saves nothing and this measures its overhead: the gradient read, the
# host's step (the kernel's arithmetic on one thread) and the writes back.
#
#   sh ../bench/offload.sh            (from a build directory: ./cltrain)
#   ROUNDS=5 STEPS=40 RANKS="1 2" sh ../bench/offload.sh
set -e
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export POCL_MAX_PTHREAD_COUNT=1
mpi="mpirun --oversubscribe --bind-to none -x POCL_MAX_PTHREAD_COUNT"
rounds=${ROUNDS:-3} steps=${STEPS:-30}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/lib/cli_lib.sh" # mkidx
mkidx "$tmp" train 1024
printf 'input 1 4 4\nflatten\nlinear 128\nrelu\nblock repeat=60\n  linear 128\n  relu\nend\nlinear 10\n' >"$tmp/deep.model"
train="train $tmp/deep.model --data $tmp --normalize scale -e 1 -b 16 -q --max-steps $steps -o adamw
  --bucket-mb 0.25 --devices pocl"
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
seconds() { sed -n 's/.*| \([0-9.]*\) s$/\1/p' | tail -n 1; }
for np in ${RANKS:-1 2}; do
  for z in 0 1 2; do
    [ "$np" = 1 ] && [ "$z" != 0 ] && continue
    : >"$tmp/dev" && : >"$tmp/off"
    r=0
    while [ $r -lt "$rounds" ]; do
      # shellcheck disable=SC2086
      $mpi -np "$np" ./cltrain $train --zero "$z" 2>/dev/null | seconds >>"$tmp/dev"
      # shellcheck disable=SC2086
      $mpi -np "$np" ./cltrain $train --zero "$z" --offload optimizer 2>/dev/null | seconds >>"$tmp/off"
      r=$((r + 1))
    done
    d=$(median <"$tmp/dev") o=$(median <"$tmp/off")
    echo "ranks $np --zero $z: $steps steps, median of $rounds: device state $d s, --offload optimizer $o s" \
      "(x$(echo "$o $d" | awk '{ printf "%.2f", $1 / $2 }'))"
  done
done
