#!/bin/sh
# data_cli.sh: users' own data from the command line (doc/data.md), on
# small files tests/data/make_data generates: a CSV table trains a
# regression spec (loss mse, --target y, --val 0.2) whose weights carry the
# normalisation (cltrain summary --weights shows it; eval applies it); .npy
# with --labels, .npz stored and deflated, and a raw file train
# classifiers; an HDF5 dataset trains on 2 ranks where cltrain has HDF5
# (and is refused naming the build where not); broken files, a regression
# spec on IDX data and options that do not fit are refused, naming the
# file, line and column. Exits 77 without an OpenCL device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
MAKE_DATA=${MAKE_DATA:-$(dirname "$CLTRAIN")/tests/data/make_data}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
. "$srcdir/tests/lib/cli_lib.sh"
if [ ! -x "$MAKE_DATA" ]; then echo "FAIL: $MAKE_DATA is not built (make tests/data/make_data)"; exit 1; fi
"$MAKE_DATA" "$tmp" 400 || { echo "FAIL: make_data"; exit 1; }
printf 'input 8\nlinear 16\nrelu\nlinear 1\nloss mse\n' >"$tmp/reg.model"
printf 'input 8\nlinear 16\nrelu\nlinear 3\n' >"$tmp/cls.model"
common="-d 0 -b 32 --lr 0.02"

# regression from CSV, its weights' normalisation, eval on the same split
expect 0 "CSV regression (loss mse, --target y, --val 0.2)" -- train "$tmp/reg.model" --data "$tmp/table.csv" \
  --target y --val 0.2 -e 3 $common --save "$tmp/reg.safetensors" --metrics "$tmp/m.jsonl"
has "$out" "epoch 3/3: train loss [0-9.]* rmse [0-9.]* | test loss [0-9.]* rmse" "the epoch line gives the RMSE"
has "$tmp/m.jsonl" '"rmse":' "the metrics say rmse"
expect 0 "summary --weights shows the normalisation" -- summary "$tmp/reg.model" --weights "$tmp/reg.safetensors"
has "$out" "normalization (.*): standard, 8 features" "kind and features"
has "$out" "feature 7: shift 2[01]\.[0-9]* scale" "feature 7's shift (its mean, about 21)"
expect 0 "eval applies the weights' normalisation" -- eval "$tmp/reg.model" --weights "$tmp/reg.safetensors" \
  --data "$tmp/table.csv" --target y --val 0.2 -d 0
has "$out" "test loss [0-9.]* rmse [0-9.]* (80 samples)" "eval gives loss and RMSE of the 80 held out"
last=$(grep '"event":"epoch"' "$tmp/m.jsonl" | tail -1 | sed 's/.*"test_rmse":\([0-9.e-]*\).*/\1/')
evald=$(sed 's/.*rmse \([0-9.]*\) .*/\1/' "$out")
awk -v a="$last" -v b="$evald" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-3) }' &&
  echo "ok: eval's RMSE is training's last ($evald)" ||
  { echo "FAIL: eval's RMSE $evald is not training's last $last"; fail=1; }
expect 0 "minmax normalisation" -- train "$tmp/reg.model" --data "$tmp/table.csv" -e 1 $common --normalize minmax \
  --save "$tmp/mm.safetensors" -q
"$CLTRAIN" summary "$tmp/reg.model" -w "$tmp/mm.safetensors" >"$out" 2>&1
has "$out" "minmax, 8 features" "minmax is saved"

# classification from NumPy, .npz and raw
expect 0 ".npy with --labels (classification)" -- train "$tmp/cls.model" --data "$tmp/x.npy" --labels "$tmp/y.npy" \
  --val 0.25 -e 3 $common
has "$out" "epoch 3/3: train loss [0-9.]* accuracy [0-9.]* | test loss [0-9.]* accuracy" "accuracy, not rmse"
for z in xy.npz xyz.npz; do
  expect 0 "$z (members x and y)" -- train "$tmp/cls.model" --data "$tmp/$z" -e 1 $common -q
done
expect 0 "a raw file from the CLI" -- train "$tmp/cls.model" --data "$tmp/blobs.raw" --val 0.25 -e 1 $common -q
expect 2 "a raw file for a regression spec" -- train "$tmp/reg.model" --data "$tmp/blobs.raw" -e 1 $common
has "$err" "blobs.raw: a raw file holds class labels" "the refusal names the file"

# HDF5: 2 ranks where cltrain was built with it
if [ -f "$tmp/sim.h5" ]; then
  CLT_TEST_LIMIT=120 sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" train "$tmp/reg.model" \
    --data "$tmp/sim.h5:/fields/u" --val 0.2 -e 2 $common >"$out" 2>"$err"
  case $? in
    0) has "$out" "over 2 rank(s)" "2 ranks"; has "$out" "epoch 2/2: .* rmse" "HDF5 regression trains"; echo "ok: HDF5 regression on 2 ranks" ;;
    77) echo "skip: HDF5 on 2 ranks (no MPI launcher)" ;;
    *) echo "FAIL: HDF5 on 2 ranks"; sed 's/^/  /' "$out" "$err"; fail=1 ;;
  esac
  expect 1 "a dataset the HDF5 file lacks" -- train "$tmp/reg.model" --data "$tmp/sim.h5:/fields/v" -e 1 $common
  has "$err" "sim.h5: no dataset /fields/v" "file and dataset named"
else
  printf '\211HDF\r\n\032\n' >"$tmp/sim.h5"
  expect 1 "HDF5 without HDF5 built in" -- train "$tmp/reg.model" --data "$tmp/sim.h5:/fields/u" -e 1 $common
  has "$err" "built without HDF5" "the refusal says why"
fi

# refusals: broken files, options that do not fit
sed '5s/^[^,]*,/x9,/' "$tmp/table.csv" >"$tmp/bad.csv"
expect 1 "a CSV field that is no number" -- train "$tmp/reg.model" --data "$tmp/bad.csv" -e 1 $common
has "$err" "bad.csv: line 5, column 1 (x1): 'x9' is not a number" "file, line, column and field named"
expect 1 "real-valued targets for a classifier" -- train "$tmp/cls.model" --data "$tmp/table.csv" -e 1 $common
has "$err" "is -\{0,1\}[0-9.]*, not a class" "the label and why"
head -c 100 "$tmp/x.npy" >"$tmp/cut.npy"
expect 1 "a truncated .npy" -- train "$tmp/cls.model" --data "$tmp/cut.npy" --labels "$tmp/y.npy" -e 1 $common
has "$err" "cut.npy: truncated" "the file and the fault"
expect 2 "an unknown --target" -- train "$tmp/reg.model" --data "$tmp/table.csv" --target z -e 1 $common
has "$err" "--target 'z' is no column" "the column named"
mkdir "$tmp/idx"
expect 2 "a regression spec with IDX data" -- train "$tmp/reg.model" --data "$tmp/idx" -e 1 $common
has "$err" "is a regression model" "says why"
expect 2 "--labels with an IDX directory" -- train "$tmp/cls.model" --data "$tmp/idx" --labels "$tmp/y.npy" $common
expect 2 "--val 1.5" -- train "$tmp/reg.model" --data "$tmp/table.csv" --val 1.5 $common
expect 2 "--normalize what" -- train "$tmp/reg.model" --data "$tmp/table.csv" --normalize what $common
exit $fail
