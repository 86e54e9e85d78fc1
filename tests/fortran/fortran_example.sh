#!/bin/sh
# fortran_example.sh: examples/train_fashion.f90, the Fortran program that
# drives clt_trainer_step on Fashion-MNIST batches itself, for a few steps
# on 1 and 2 ranks: it must run to its test accuracy and clt_trainer_evaluate's
# loss and accuracy on the whole test set, and learn (the loss
# of its last step printed below the first). Skipped (77) without the
# example (no Fortran, or no MPI Fortran module), without an OpenCL device,
# or without dataset-fashion-mnist.
srcdir=${srcdir:-.}
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ ! -x ./examples/train_fashion_f ]; then
  echo "SKIP: the Fortran example is not built (no Fortran compiler or no MPI Fortran module)"
  exit 77
fi
if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ ! -f "$data/train-images-idx3-ubyte" ]; then
  echo "SKIP: no Fashion-MNIST in $data (install dataset-fashion-mnist)"
  exit 77
fi
if [ -x "${CLTRAIN:-./cltrain}" ] && ! "${CLTRAIN:-./cltrain}" devices >/dev/null 2>&1; then
  echo "SKIP: no OpenCL device"
  exit 77
fi
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
export CLT_TIMEOUT
out=fortran_example.out
status=0
for np in 1 2; do
  echo "== train_fashion_f on $np rank(s)"
  sh "$srcdir/tests/lib/mpi_run.sh" "$np" ./examples/train_fashion_f "$srcdir/examples/fashion_mlp.model" "$data" 50 >"$out" 2>&1
  rc=$?
  cat "$out"
  if [ $rc -eq 77 ]; then
    [ $np -eq 1 ] || continue
    ./examples/train_fashion_f "$srcdir/examples/fashion_mlp.model" "$data" 50 >"$out" 2>&1
    rc=$?
    cat "$out"
  fi
  if [ $rc -ne 0 ]; then echo "FAIL: exit $rc on $np rank(s)"; status=1; continue; fi
  first=`sed -n 's/^step *1: loss *\([0-9.]*\).*/\1/p' "$out"`
  last=`sed -n 's/^step *50: loss *\([0-9.]*\).*/\1/p' "$out"`
  grep -q '^test accuracy on ' "$out" || { echo "FAIL: no test accuracy on $np rank(s)"; status=1; }
  grep -q '^evaluate on all 10000 test samples: loss ' "$out" || { echo "FAIL: no clt_trainer_evaluate on $np rank(s)"; status=1; }
  if [ -z "$first" ] || [ -z "$last" ] || ! awk "BEGIN { exit !($last < $first) }"; then
    echo "FAIL: the loss did not fall on $np rank(s) (step 1: '$first', step 50: '$last')"
    status=1
  fi
done
rm -f "$out"
exit $status
