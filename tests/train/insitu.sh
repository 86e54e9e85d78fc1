#!/bin/sh
# insitu.sh: examples/insitu_heat on 2 ranks (1 without MPI) for a few
# seconds: the surrogate trained in situ through clt_trainer_step_targets
# forecasts the solver's next state better as it trains (its error at the
# end under half its first) and better than persistence (no change).
srcdir=${srcdir:-.}
HEAT=${HEAT:-./examples/insitu_heat}
export POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-1}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if [ -n "${MPIEXEC:-}" ] || command -v mpirun >/dev/null 2>&1; then
  ${MPIEXEC:-mpirun} -np 2 --oversubscribe --allow-run-as-root "$HEAT" --cycles 160 >"$out" 2>&1
else
  "$HEAT" --cycles 160 >"$out" 2>&1
fi
rc=$?
cat "$out"
[ $rc -eq 0 ] || { echo "FAIL: insitu_heat exited $rc"; exit 1; }
line=$(grep "^surrogate forecast rmse:" "$out") || { echo "FAIL: no summary line"; exit 1; }
set -- $(echo "$line" | sed 's/[^0-9. ]//g')
first=$1 last=$2 persist=$3
if awk -v f="$first" -v l="$last" -v p="$persist" 'BEGIN { exit !(l < f / 2 && l < p) }'; then
  echo "ok: the forecast error fell from $first to $last (persistence $persist)"
else
  echo "FAIL: the forecast error went from $first to $last (persistence $persist)"
  exit 1
fi
