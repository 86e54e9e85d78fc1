#!/bin/sh
# insitu_unet.sh: examples/insitu_unet (C) and examples/insitu_unet_f (its
# Fortran twin through the cltrain module) on 2 ranks with a small grid and
# training budget: the U-Net trained in situ through the step API must
# forecast fresh states of the simulation at least 3 times better than
# persistence (RMSE of the current field as the forecast, over the RMSE of
# the surrogate's), and each must print the solver's step time alone and
# with training (printed, never compared: tests do not assert on time).
# Then the example specs examples/unet2d.model, unet3d.model and
# conv1d.model must parse (cltrain summary).
# The Fortran half is skipped where the example is not built (no Fortran
# compiler or no MPI Fortran module); the whole without an MPI launcher.
srcdir=${srcdir:-.}
ARGS=${INSITU_UNET_ARGS:---nx 40 --ny 40 --cycles 300 --eval 20}
# Batch norm refuses rusticl's llvmpipe (loose divide and sqrt), which make
# check enables beside PoCL: every rank takes a PoCL device where there is one.
if [ -z "${CLT_DEVICES:-}" ] && "${CLTRAIN:-./cltrain}" devices 2>/dev/null | grep -qi pocl; then
  CLT_DEVICES=pocl
  export CLT_DEVICES
fi
out=insitu_unet.out
trap 'rm -f "$out"' EXIT
status=0
ran=0
for prog in ./examples/insitu_unet ./examples/insitu_unet_f; do
  if [ ! -x "$prog" ]; then
    case $prog in
      *_f) echo "SKIP: $prog is not built (no Fortran compiler or no MPI Fortran module)"; continue ;;
      *) echo "FAIL: $prog is not built"; status=1; continue ;;
    esac
  fi
  echo "== $prog $ARGS on 2 ranks"
  # shellcheck disable=SC2086
  sh "$srcdir/tests/lib/mpi_run.sh" 2 "$prog" $ARGS >"$out" 2>&1
  rc=$?
  cat "$out"
  [ $rc -eq 77 ] && exit 77
  if [ $rc -ne 0 ]; then echo "FAIL: $prog exited $rc"; status=1; continue; fi
  ran=1
  ratio=$(sed -n 's/^surrogate forecast rmse on fresh states:.* ratio *\([0-9.]*\).*/\1/p' "$out")
  if [ -z "$ratio" ]; then
    echo "FAIL: $prog printed no forecast rmse line"
    status=1
  elif awk -v r="$ratio" 'BEGIN { exit !(r >= 3) }'; then
    echo "ok: $prog's surrogate beats persistence by ${ratio}x"
  else
    echo "FAIL: $prog's surrogate beats persistence by ${ratio}x only (3x wanted)"
    status=1
  fi
  if grep -q '^solver: *[0-9.]* ms a step alone, *[0-9.]* ms a step with training every [0-9]* steps' "$out"; then
    echo "ok: $prog printed the solver's step time alone and with training"
  else
    echo "FAIL: $prog printed no step times (solver: ... ms a step alone, ... ms a step with training ...)"
    status=1
  fi
done
# The example specs of surrogates (issue 40's layers) parse and build.
for spec in unet2d unet3d conv1d; do
  if "${CLTRAIN:-./cltrain}" summary "$srcdir/examples/$spec.model" >"$out" 2>&1; then
    echo "ok: examples/$spec.model: $(grep '^total parameters' "$out")"
  else
    cat "$out"
    echo "FAIL: cltrain summary examples/$spec.model"
    status=1
  fi
done
[ $ran -eq 1 ] || [ $status -ne 0 ] || exit 77
exit $status
