#!/bin/sh
# arena_shm.sh: the gradients' arena in the node's shared memory
# (src/comm/shm_arena.c) is taken only where /dev/shm has room for it.
# Open MPI backs its shared windows with files there, and a tmpfs that
# runs out ends the job with SIGBUS at the first touch of a page, not with
# an error. In a mount namespace of its own with a 24 MiB /dev/shm (a
# container's is 64), a 2-rank job on PoCL whose arena fits takes it (the
# info log says so); one whose arena does not (34 MB a rank) trains
# without it, summing in place through the window, and both end with
# status 0 and no host staging. Needs root, unshare(1) and PoCL (else 77).
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-30}
export CLT_TIMEOUT
[ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 &&
  unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>/dev/null ||
  { echo "SKIP: needs root, a mount namespace (unshare -m) and a tmpfs mounted in it"; exit 77; }
"$CLTRAIN" devices -d pocl >/dev/null 2>&1 || { echo "SKIP: no PoCL device"; exit 77; }
command -v "${MPIEXEC:-mpiexec}" >/dev/null 2>&1 || { echo "SKIP: no MPI launcher"; exit 77; }
. "$srcdir/tests/lib/cli_lib.sh" # mkidx
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkidx "$tmp" train 64
mkidx "$tmp" t10k 16
printf 'input 1 4 4\nflatten\nlinear 256\nrelu\nlinear 10\n' >"$tmp/small.model"  # 6,922 parameters
printf 'input 1 4 4\nflatten\nlinear 2048\nrelu\nlinear 2048\nrelu\nlinear 2048\nrelu\nlinear 10\n' \
  >"$tmp/big.model"                                                              # 8,448,010 parameters

# run NAME MODEL WANT: train in the namespace; WANT is 1 when the arena must be taken.
run() {
  unshare -m sh -c 'mount -t tmpfs -o size=24m tmpfs /dev/shm && exec "$@"' sh \
    env CLT_LOG_LEVEL=info sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" train "$2" --data "$tmp" --devices pocl \
    --batch 16 --epochs 1 --max-steps 3 --quiet >"$tmp/out" 2>"$tmp/err"
  rc=$?
  took=$(grep -c "the gradients lie in the node's shared memory" "$tmp/err")
  staged=$(grep -c "host staging 0 B" "$tmp/err")
  if [ $rc -ne 0 ]; then
    echo "FAIL: $1: exit $rc"; sed 's/^/  /' "$tmp/err" | tail -20; fail=1
  elif [ "$took" -ne $((2 * $3)) ] || [ "$staged" -ne 2 ]; then
    echo "FAIL: $1: $took rank(s) took the arena (want $((2 * $3))), $staged without staging (want 2)"
    sed 's/^/  /' "$tmp/err" | tail -20; fail=1
  else
    echo "ok: $1"
  fi
}
run "an arena that fits a 24 MiB /dev/shm is taken" "$tmp/small.model" 1
run "one that does not is not, and the job trains" "$tmp/big.model" 0
exit $fail
