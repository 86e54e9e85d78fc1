#!/bin/sh
# mpi_run.sh NP PROGRAM [ARGS...]: run PROGRAM on NP ranks of this machine,
# under a time limit (CLT_TEST_LIMIT seconds, default 120) so a hang is a
# failure, not a stuck `make check`. Exits 77 (skipped) when there is no MPI
# launcher. Open MPI gets what a container and a small machine need: more
# ranks than cores, root, no core binding, and no cross-memory-attach
# single-copy (often forbidden in containers). PoCL gets one thread per rank.
#
# mpi_run.sh --each "1 2 4" PROGRAM [ARGS...]: the same for each number of
# ranks in turn; fails if any fails, skips (77) if all skip.
if [ "$1" = "--each" ]; then
  counts=$2
  shift 2
  status=77
  for np in $counts; do
    echo "== $* on $np rank(s)"
    sh "$0" "$np" "$@"
    rc=$?
    case $rc in
      0) [ $status -eq 77 ] && status=0 ;;
      77) ;;
      *) echo "FAIL: $* on $np rank(s) exited $rc"; status=1 ;;
    esac
  done
  exit $status
fi
np=$1
shift
MPIEXEC=${MPIEXEC:-mpiexec}
if ! command -v "$MPIEXEC" >/dev/null 2>&1; then
  echo "SKIP: no MPI launcher ('$MPIEXEC')"
  exit 77
fi
POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-1}
export POCL_MAX_PTHREAD_COUNT
set -- -np "$np" "$@"
if "$MPIEXEC" --version 2>&1 | grep -qi -e "Open MPI" -e "OpenRTE" -e "open-mpi"; then
  OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
  export OMPI_MCA_btl_vader_single_copy_mechanism
  set -- --oversubscribe --allow-run-as-root --bind-to none "$@"
fi
exec timeout -k 10 "${CLT_TEST_LIMIT:-120}" "$MPIEXEC" "$@"
