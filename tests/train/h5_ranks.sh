#!/bin/sh
# h5_ranks.sh: an HDF5 dataset stored contiguously (sim.h5, as h5py and
# H5Dcreate write by default) is read row by row from the file, not whole:
# on 2 ranks, each rank reads only the rows of its own slices of the
# batches (the rows it asks pread for, logged at CLT_LOG_LEVEL=info as "read
# N rows": 2 epochs of 300 samples are 300 a rank, plus at most the
# prefetcher's two slices of 16 ahead, where reading the dataset whole would
# be 600), and the weights equal, bit for bit, those of the same values read
# whole by HDF5 (simz.h5, chunked and deflated) and those of sim.h5 through
# the mapping (CLT_DATA_MAP_MAX unset). On one rank, shuffled .npy
# classification ends with the same weights read by pread
# (CLT_DATA_MAP_MAX=0) as mapped. Exits 77 without HDF5, an OpenCL device
# or an MPI launcher.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
MAKE_DATA=${MAKE_DATA:-$(dirname "$CLTRAIN")/tests/data/make_data}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
export CLT_TIMEOUT
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
case $? in 77) echo "SKIP: no MPI launcher"; exit 77 ;; esac
"$MAKE_DATA" "$tmp" 300 || { echo "FAIL: make_data"; exit 1; }
if [ ! -f "$tmp/sim.h5" ]; then echo "SKIP: cltrain was built without HDF5"; exit 77; fi
printf 'input 8\nlinear 1\nloss mse\n' >"$tmp/reg.model"
printf 'input 8\nlinear 3\n' >"$tmp/cls.model"

# run NAME MAP_MAX NP ARGS...: train on NP ranks, weights to $tmp/NAME.st, log to $tmp/NAME.log
run() {
  name=$1 map=$2 np=$3
  shift 3
  if [ -n "$map" ]; then CLT_DATA_MAP_MAX=$map; export CLT_DATA_MAP_MAX; else unset CLT_DATA_MAP_MAX; fi
  if ! CLT_LOG_LEVEL=info sh "$srcdir/tests/lib/mpi_run.sh" "$np" "$CLTRAIN" train "$@" -d 0 -e 2 -b 32 -q \
      -s "$tmp/$name.st" >"$tmp/$name.log" 2>&1; then
    echo "FAIL: $name: cltrain train failed"; sed 's/^/  /' "$tmp/$name.log"; fail=1
  fi
  unset CLT_DATA_MAP_MAX
}
same() {
  if cmp -s "$tmp/$1.st" "$tmp/$2.st"; then echo "ok: $3: the same weights, bit for bit"
  else echo "FAIL: $3: the weights differ"; fail=1; fi
}

run rows 0 2 "$tmp/reg.model" --data "$tmp/sim.h5:/fields/u"
run whole "" 2 "$tmp/reg.model" --data "$tmp/simz.h5:/fields/u"
run mapped "" 2 "$tmp/reg.model" --data "$tmp/sim.h5:/fields/u"
[ $fail -eq 0 ] || exit 1
counts=$(sed -n 's/.*sim\.h5:\/fields\/u: read \([0-9]*\) rows for batches.*/\1/p' "$tmp/rows.log")
set -- $counts
if [ $# -ne 2 ]; then
  echo "FAIL: 2 ranks, $# 'read N rows' lines:"; sed 's/^/  /' "$tmp/rows.log"; fail=1
else
  for n in "$@"; do
    if [ "$n" -ge 300 ] && [ "$n" -le 332 ]; then echo "ok: a rank read $n rows of the 600 of 2 epochs (its share: 300)"
    else echo "FAIL: a rank read $n rows; its share is 300 (and 32 ahead at most)"; fail=1; fi
  done
fi
same rows whole "HDF5 on 2 ranks, each reading its rows, and read whole"
same rows mapped "HDF5 on 2 ranks, rows by pread and through the mapping"

run npy_map "" 1 "$tmp/cls.model" --data "$tmp/x.npy" --labels "$tmp/y.npy"
run npy_pread 0 1 "$tmp/cls.model" --data "$tmp/x.npy" --labels "$tmp/y.npy"
same npy_map npy_pread ".npy, shuffled batches read by pread and through the mapping"
exit $fail
