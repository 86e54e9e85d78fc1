#!/bin/sh
# convnd_cli.sh: conv1d, conv3d (with dilation), 1-D and 3-D pooling train
# from the command line, and alike however they are spread: a small 3-D
# net on (2, 4, 6, 6) volumes and a 1-D net on (3, 16) signals (regression,
# loss mse, on .npy files tests/data/make_data generates), and a 2-D net
# with a dilated conv2d on the signals seen as (3, 4, 4) images, train 8 SGD steps
# on one rank and on 2 ranks (tests/lib/mpi_run.sh) from the same seed, and
# end with the same weights within 1e-5 (tests/train/weights_close): the 2
# ranks add the same float32 gradients in another order. Exits 77 without
# an OpenCL device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
MAKE_DATA=${MAKE_DATA:-$(dirname "$CLTRAIN")/tests/data/make_data}
CLOSE=${WEIGHTS_CLOSE:-$(dirname "$CLTRAIN")/tests/train/weights_close}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
export CLT_TIMEOUT
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
. "$srcdir/tests/lib/cli_lib.sh"
for p in "$MAKE_DATA" "$CLOSE"; do
  [ -x "$p" ] || { echo "FAIL: $p is not built (make $p)"; exit 1; }
done
"$MAKE_DATA" "$tmp" 64 || { echo "FAIL: make_data"; exit 1; }

cat >"$tmp/vol.model" <<'SPEC'
input 2 4 6 6
conv3d 4 kernel=3 pad=1 act=relu
maxpool3d 2
conv3d 3 kernel=2 pad=1 dilation=2 act=tanh
avgpool3d 2 stride=1
flatten
linear 1
loss mse
SPEC
cat >"$tmp/sig.model" <<'SPEC'
input 3 16
conv1d 6 kernel=3 pad=2 dilation=2 act=relu
maxpool1d 2
conv1d 4 kernel=3 stride=2
avgpool1d 2
flatten
linear 2
loss mse
SPEC

# the signals seen as (3, 4, 4) images, through a dilated conv2d (conv_nd.c's path)
cat >"$tmp/img.model" <<'SPEC'
input 3 4 4
conv2d 4 kernel=2 pad=1 dilation=2 act=relu
conv2d 3 kernel=3 pad=1
flatten
linear 2
loss mse
SPEC
cp "$tmp/sig.npy" "$tmp/img.npy"
cp "$tmp/sig_y.npy" "$tmp/img_y.npy"

common="--val none -b 16 --max-steps 8 --lr 0.05 --seed 7 -q"
for net in vol sig img; do
  expect 0 "$net: 8 steps on one device" -- train "$tmp/$net.model" --data "$tmp/$net.npy" \
    --labels "$tmp/${net}_y.npy" -d 0 $common -s "$tmp/$net.1.safetensors"
  sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" train "$tmp/$net.model" --data "$tmp/$net.npy" \
    --labels "$tmp/${net}_y.npy" $common -s "$tmp/$net.2.safetensors" >"$out" 2>"$err"
  case $? in
    0) if "$CLOSE" "$tmp/$net.1.safetensors" "$tmp/$net.2.safetensors" 1e-5 >"$out" 2>&1; then
         echo "ok: $net: 2 ranks end within 1e-5 of one device: $(cat "$out")"
       else
         echo "FAIL: $net: 2 ranks differ from one device:"; sed 's/^/  /' "$out"; fail=1
       fi ;;
    77) echo "skip: $net on 2 ranks (no MPI launcher)" ;;
    *) echo "FAIL: $net on 2 ranks"; sed 's/^/  /' "$out" "$err"; fail=1 ;;
  esac
done
# the trained weights moved from the start (one step at lr 1e-12): a net whose
# gradients were all zero would pass the comparison above
"$CLTRAIN" train "$tmp/vol.model" --data "$tmp/vol.npy" --labels "$tmp/vol_y.npy" -d 0 --val none -b 16 \
  --max-steps 1 --lr 1e-12 --seed 7 -q -s "$tmp/vol.0.safetensors" >/dev/null 2>&1
"$CLOSE" "$tmp/vol.0.safetensors" "$tmp/vol.1.safetensors" 1e-4 >"$out" 2>&1
case $? in
  1) echo "ok: vol: the steps moved the weights: $(cat "$out")" ;;
  0) echo "FAIL: vol: 8 steps left the weights where they started"; fail=1 ;;
  *) echo "FAIL: vol: no weights to compare:"; sed 's/^/  /' "$out"; fail=1 ;;
esac
exit $fail
