#!/bin/sh
# upconv_ranks.sh: a model with transposed convolutions (kernel 2 stride 2
# as the first layer, which needs no input gradient; kernel 3 stride 2 with
# padding and output padding) and bilinear up-sampling trains alike however
# it is spread: 4 SGD steps on a small synthetic IDX set on one device are
# the reference, and 2 ranks (data parallelism, when mpirun exists) and one
# rank on PoCL and rusticl together (when rusticl is there:
# RUSTICL_ENABLE=llvmpipe) each end with every weight within 1e-5 of it
# (tests/train/weights_close): they add the same float32 numbers in other
# orders (the all-reduce; each replica's half batch in the weight
# gradients' GEMMs). Exits 77 without an OpenCL device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLOSE=${WEIGHTS_CLOSE:-$(dirname "$CLTRAIN")/tests/train/weights_close}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
export CLT_TIMEOUT
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
[ -x "$CLOSE" ] || { echo "FAIL: $CLOSE is not built (make tests/train/weights_close)"; exit 1; }

. "$srcdir/tests/lib/cli_lib.sh" # mkidx
mkidx "$tmp" train 96
cat >"$tmp/u.model" <<'SPEC'
input 1 4 4
convtranspose2d 3 kernel=2 stride=2
relu
upsample scale=2 mode=linear
conv2d 4 kernel=3 stride=2 pad=1
relu
convtranspose2d 2 kernel=3 stride=2 pad=1 output_pad=1
upsample scale=2
flatten
linear 10
SPEC
train="train $tmp/u.model --data $tmp --normalize scale -e 1 -b 12 -q --max-steps 4 --val none"

if ! "$CLTRAIN" $train -d 0 --save "$tmp/one.safetensors" >"$tmp/out" 2>&1; then
  echo "FAIL: one device:"; sed 's/^/  /' "$tmp/out"; exit 1
fi
echo "ok: 4 steps on one device"

close() { # WHAT FILE
  if "$CLOSE" "$tmp/one.safetensors" "$2" 1e-5 >"$tmp/close" 2>&1; then
    echo "ok: $1: the weights within 1e-5 of one device's"
  else
    echo "FAIL: $1: the weights differ from one device's:"; sed 's/^/  /' "$tmp/close"; fail=1
  fi
}

sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
if [ $? -eq 77 ]; then
  echo "skip: 2 ranks (no MPI launcher)"
elif sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" $train -d 0 --save "$tmp/two.safetensors" >"$tmp/out" 2>&1; then
  close "2 ranks" "$tmp/two.safetensors"
else
  echo "FAIL: 2 ranks:"; sed 's/^/  /' "$tmp/out"; fail=1
fi

if "$CLTRAIN" devices 2>/dev/null | grep -q rusticl; then
  if "$CLTRAIN" $train --devices pocl,rusticl --save "$tmp/both.safetensors" >"$tmp/out" 2>&1; then
    close "PoCL and rusticl" "$tmp/both.safetensors"
  else
    echo "FAIL: PoCL and rusticl:"; sed 's/^/  /' "$tmp/out"; fail=1
  fi
else
  echo "skip: PoCL and rusticl (no rusticl device)"
fi
exit $fail
