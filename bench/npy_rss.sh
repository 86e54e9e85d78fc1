#!/bin/sh
# npy_rss.sh: the resident memory of training from a 1 GiB memory-mapped
# .npy against a 4 MiB one with the same model (the model's own share), from
# the build directory:
#
#   sh ../bench/npy_rss.sh [MiB]      (default 1024)
#
# 2^20 samples of 256 float32 (--labels y.npy, 10 classes), a 256-64-10
# MLP, 300 steps of 256 on device 0. Prints each run's peak resident set
# (VmHWM) and its file-page share (RssFile at the end). Needs python3 with
# NumPy to write the files; writes them into $TMPDIR (or /tmp) and removes
# them. A measurement, not a test.
mib=${1:-1024}
dir=$(mktemp -d "${TMPDIR:-/tmp}/npy_rss.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
"${PYTHON:-/usr/bin/python3}" - "$dir" "$mib" <<'PY' || exit 1
import sys, numpy as np
d, mib = sys.argv[1], int(sys.argv[2])
for name, n in (("big", mib * 1024 * 1024 // 1024), ("small", 4096)):
    x = np.lib.format.open_memmap(f"{d}/{name}_x.npy", mode="w+", dtype=np.float32, shape=(n, 256))
    rng = np.random.default_rng(0)
    for at in range(0, n, 65536):
        x[at:at + 65536] = rng.standard_normal((min(65536, n - at), 256), dtype=np.float32)
    x.flush(); del x
    np.save(f"{d}/{name}_y.npy", rng.integers(0, 10, n).astype(np.int32))
PY
printf 'input 256\nlinear 64\nrelu\nlinear 10\n' >"$dir/mlp.model"
for name in small big; do
  ${CLTRAIN:-./cltrain} train "$dir/mlp.model" --data "$dir/${name}_x.npy" --labels "$dir/${name}_y.npy" -d 0 -b 256 \
    --max-steps 300 --lr 0.01 >"$dir/log" 2>&1 &
  pid=$!
  hwm=0 file=0
  while kill -0 $pid 2>/dev/null; do
    h=$(awk '/^VmHWM/ {print $2}' /proc/$pid/status 2>/dev/null)
    f=$(awk '/^RssFile/ {print $2}' /proc/$pid/status 2>/dev/null)
    [ -n "$h" ] && hwm=$h
    [ -n "$f" ] && [ "$f" -gt "$file" ] && file=$f
    sleep 0.2
  done
  wait $pid || { cat "$dir/log"; exit 1; }
  echo "$name: VmHWM $((hwm / 1024)) MB, RssFile peak $((file / 1024)) MB"
done
