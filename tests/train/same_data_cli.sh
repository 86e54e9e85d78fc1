#!/bin/sh
# same_data_cli.sh: a `cltrain train` and `cltrain eval` job of 2 ranks,
# each rank given its own --data directory by a wrapper: IDX files of the
# very same shape but other images (another draw of random pixels) end the
# job before the first step, naming rank 1, both ranks' files and the
# sample that differs; an identical copy per rank trains and evaluates.
# Exits 77 without MPI or an OpenCL device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
case $? in 77) echo "SKIP: no MPI launcher"; exit 77 ;; esac

. "$srcdir/tests/lib/cli_lib.sh" # mkidx
mkdir "$tmp/a" "$tmp/b" "$tmp/copy"
mkidx "$tmp/a" train 96
mkidx "$tmp/a" t10k 24
cp "$tmp/a"/* "$tmp/copy/"
mkidx "$tmp/b" train 96 # the same shape, other images
mkidx "$tmp/b" t10k 24
printf 'input 1 4 4\nflatten\nlinear 32\nrelu\nlinear 10\n' >"$tmp/m.model"

# Rank r reads --data $DATA_r.
cat >"$tmp/rank.sh" <<'RANK'
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}
eval "data=\$DATA_$r"
exec "$@" --data "$data"
RANK

# job WANT WHAT DATA_0 DATA_1 ARGS...: 2 ranks of cltrain ARGS end with
# WANT (0, or 1 for a refusal).
job() {
  want=$1 what=$2 DATA_0=$3 DATA_1=$4
  shift 4
  export DATA_0 DATA_1
  CLT_TIMEOUT=60 CLT_TEST_LIMIT=120 sh "$srcdir/tests/lib/mpi_run.sh" 2 sh "$tmp/rank.sh" "$CLTRAIN" "$@" \
    >"$tmp/out" 2>"$tmp/err"
  got=$?
  if { [ "$want" -eq 0 ] && [ $got -ne 0 ]; } || { [ "$want" -ne 0 ] && { [ $got -eq 0 ] || [ $got -eq 124 ]; }; }; then
    echo "FAIL: $what: exit $got"; sed 's/^/  /' "$tmp/err" "$tmp/out"; fail=1
    return 1
  fi
  echo "ok: $what (exit $got)"
}
has() {
  if ! grep -qF -- "$2" "$1"; then echo "FAIL: $3: no '$2' in:"; sed 's/^/  /' "$1"; fail=1; fi
}

job 0 "identical copies on the two ranks" "$tmp/a" "$tmp/copy" train "$tmp/m.model" -e 1 -b 12 -d 0 -q \
  --save "$tmp/w.safetensors"
job 1 "other images of the same shape on rank 1" "$tmp/a" "$tmp/b" train "$tmp/m.model" -e 1 -b 12 -d 0 -q
has "$tmp/err" "the ranks read different data: rank 1 trains on another sample 0 than rank 0" "the rank and sample are named"
has "$tmp/err" "rank 1 reads $tmp/b/train-images-idx3-ubyte, rank 0 $tmp/a/train-images-idx3-ubyte" "both files are named"
if grep -q "^step\|epoch 1/1" "$tmp/out"; then echo "FAIL: a step was taken:"; sed 's/^/  /' "$tmp/out"; fail=1; fi
job 0 "eval on identical copies" "$tmp/a" "$tmp/copy" eval "$tmp/m.model" --weights "$tmp/w.safetensors" -d 0
job 1 "eval on another test split on rank 1" "$tmp/a" "$tmp/b" eval "$tmp/m.model" --weights "$tmp/w.safetensors" -d 0
has "$tmp/err" "rank 1 evaluates on another sample 0 than rank 0" "the rank and sample are named"
has "$tmp/err" "$tmp/b/t10k-images-idx3-ubyte" "rank 1's file is named"
exit $fail
