#!/bin/sh
# ckpt_shards.sh: rank 0's peak host memory while saving a checkpoint under
# --zero 2, sharded (the default) against --checkpoint-one-file (the whole
# state gathered to every rank, written by rank 0), at 2 and 4 ranks of
# this machine. An MLP of 16-1024-1024-1024-10 (2,127,882 parameters,
# AdamW: 3 floats a parameter with the state, 25.5 MB), 4 steps on random
# data, one checkpoint at the end; the peak resident set of each rank
# (/usr/bin/time's %M) of a run that saves, less that of the same run that
# does not: what the save adds on top of training. On PoCL the devices'
# buffers are host memory too, so training's own peak is large; the
# difference is the point. What to expect, Psi parameters and N ranks: one
# file, the whole (1 + 2) 4 Psi on every rank; sharded, a rank's shard,
# (1 + 2) 4 Psi / N.
#
# Run from the build directory: sh ../bench/ckpt_shards.sh [RANKS...]
set -e
here=$(cd "$(dirname "$0")" && pwd)
CLTRAIN=${CLTRAIN:-./cltrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
. "$here/../tests/lib/cli_lib.sh" # mkidx
mkidx "$tmp" train 64
printf 'input 16\nlinear 1024\nrelu\nlinear 1024\nrelu\nlinear 1024\nrelu\nlinear 10\n' >"$tmp/m.model"
train="train $tmp/m.model --data $tmp --normalize scale -e 1 -b 16 -d 0 -q -o adamw --zero 2 --max-steps 4"

# peak NP WHAT ARGS...: rank 0's peak resident set in KiB
peak() {
  np=$1; shift
  rm -rf "$tmp/ck" "$tmp"/rss.*
  mpirun --oversubscribe --bind-to none -x POCL_MAX_PTHREAD_COUNT=1 -np "$np" sh -c \
    '/usr/bin/time -f %M -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$tmp/rss" "$CLTRAIN" $train "$@" >/dev/null 2>&1
  cat "$tmp/rss.0"
}

echo "ranks  no save (KiB)  sharded: adds (KiB)  one file: adds (KiB)"
for np in ${*:-2 4}; do
  base=$(peak "$np")
  sh=$(peak "$np" --checkpoint-every 4 --checkpoint-dir "$tmp/ck")
  one=$(peak "$np" --checkpoint-every 4 --checkpoint-dir "$tmp/ck" --checkpoint-one-file)
  label=""
  [ "$np" -gt 2 ] && label="  (oversubscribed: more ranks than cores)"
  printf '%5d  %13d  %19d  %20d%s\n' "$np" "$base" $((sh - base)) $((one - base)) "$label"
done
