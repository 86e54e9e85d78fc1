#!/bin/sh
# data_torch_check.sh: cltrain trained from the command line on users' own
# data reaches what PyTorch reaches with the same model on the same data
# (tests/train/data_torch_check.py): a linear regression (loss mse) on a
# CSV table, --target y, --val 0.2, within 1% of PyTorch's held-out RMSE;
# softmax regression on .npy with --labels, --val 0.25, within 1% of its
# accuracy; and where cltrain has HDF5 and MPI, the regression from an
# HDF5 dataset on 2 ranks, within 1% of PyTorch's on the same values. Data
# generated here (tests/data/make_data). Exits 77 without a python3 that
# imports torch and numpy, or without a device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
MAKE_DATA=${MAKE_DATA:-$(dirname "$CLTRAIN")/tests/data/make_data}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c "import torch, numpy" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then echo "SKIP: no python3 here imports torch and numpy"; exit 77; fi
"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
"$MAKE_DATA" "$tmp" 600 || { echo "FAIL: make_data"; exit 1; }
printf 'input 8\nlinear 1\nloss mse\n' >"$tmp/reg.model"
printf 'input 8\nlinear 3\n' >"$tmp/cls.model"

# last_metric FILE KEY: KEY of the last epoch record of the metrics
last_metric() { grep '"event":"epoch"' "$1" | tail -1 | sed "s/.*\"$2\":\([0-9.e+-]*\).*/\1/"; }
# within A B WHAT: |A - B| <= 1% of B
within() {
  if awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01 * b) }'; then
    echo "ok: $3: cltrain $1, PyTorch $2 (within 1%)"
  else
    echo "FAIL: $3: cltrain $1, PyTorch $2 (more than 1% apart)"; fail=1
  fi
}
train() {
  name=$1
  shift
  if ! "$@" -e 60 -b 32 --lr 0.05 --schedule cosine -q --metrics "$tmp/$name.jsonl" >"$tmp/out" 2>&1; then
    echo "FAIL: $name: cltrain train failed"; sed 's/^/  /' "$tmp/out"; fail=1; return 1
  fi
}

train reg "$CLTRAIN" train "$tmp/reg.model" --data "$tmp/table.csv" --target y --val 0.2 -d 0 &&
  within "$(last_metric "$tmp/reg.jsonl" test_rmse)" "$("$py" "$srcdir/tests/train/data_torch_check.py" "$tmp" reg)" \
    "CSV regression, held-out RMSE"
train cls "$CLTRAIN" train "$tmp/cls.model" --data "$tmp/x.npy" --labels "$tmp/y.npy" --val 0.25 -d 0 &&
  within "$(last_metric "$tmp/cls.jsonl" test_accuracy)" "$("$py" "$srcdir/tests/train/data_torch_check.py" "$tmp" cls)" \
    ".npy classification, held-out accuracy"
if [ -f "$tmp/sim.h5" ]; then
  sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
  if [ $? -eq 77 ]; then
    echo "skip: HDF5 on 2 ranks (no MPI launcher)"
  else
    train h5 sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" train "$tmp/reg.model" --data "$tmp/sim.h5:/fields/u" \
      --val 0.2 -d 0 &&
      within "$(last_metric "$tmp/h5.jsonl" test_rmse)" \
        "$("$py" "$srcdir/tests/train/data_torch_check.py" "$tmp" reg sim.csv)" "HDF5 regression on 2 ranks, held-out RMSE"
  fi
fi
exit $fail
