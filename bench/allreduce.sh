#!/bin/sh
# allreduce.sh [BUILDDIR] [-- extra flags for cltrain bench allreduce]:
# cltrain's all-reduce against MPI_Allreduce (Open MPI defaults) at 2, 3 and
# 4 ranks on this machine, host and device buffers, 4 B to 256 MiB.
#
#   sh bench/allreduce.sh /path/to/build -- --iters 10 --max-bytes 64M
#
# fp16 against float32 at the same element counts (sizes are bytes of the
# element type; with f16 the MPI column is float32 of the same count):
#
#   RANKS=2 sh bench/allreduce.sh BUILD -- --min-bytes 4M --max-bytes 64M
#   RANKS=2 sh bench/allreduce.sh BUILD -- --dtype f16 --min-bytes 2M --max-bytes 32M
#
# Pretend nodes (CLT_NODE_SIZE) with TCP between them, every algorithm of
# several nodes against the flat ring (doc/scaling.md):
#
#   NODE_SIZE=4 TCP=1 RANKS=16 sh bench/allreduce.sh BUILD -- --no-device \
#     -a ring,twolevel,twolevel-rabenseifner,rabenseifner,auto --min-bytes 64K --max-bytes 64M -i 5
#
# With more ranks than cores the numbers are noisy: compare the ratio
# columns (MPI's time / cltrain's, measured in the same run) rather than
# absolute bandwidths. PoCL is limited to one thread per rank.
builddir=${1:-.}
[ $# -gt 0 ] && shift
[ "$1" = "--" ] && shift
MPIEXEC=${MPIEXEC:-mpiexec}
RUSTICL_ENABLE=${RUSTICL_ENABLE-llvmpipe}
POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-1}
export RUSTICL_ENABLE POCL_MAX_PTHREAD_COUNT
ompi=
if "$MPIEXEC" --version 2>&1 | grep -qi -e "Open MPI" -e "OpenRTE"; then
  ompi="--oversubscribe --bind-to none"
  [ "$(id -u)" = 0 ] && ompi="$ompi --allow-run-as-root"
  [ "${TCP:-0}" = 1 ] && ompi="$ompi --mca btl tcp,self"
fi
if [ -n "$NODE_SIZE" ]; then
  CLT_NODE_SIZE=$NODE_SIZE
  export CLT_NODE_SIZE
fi
for np in ${RANKS:-2 3 4}; do
  echo "## $np ranks: $MPIEXEC -np $np $ompi $builddir/cltrain bench allreduce $*"
  # shellcheck disable=SC2086
  "$MPIEXEC" -np "$np" $ompi "$builddir/cltrain" bench allreduce "$@" || exit $?
  echo
done
