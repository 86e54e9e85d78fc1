#!/bin/sh
# unet.sh: issue 40's surrogate models, cltrain against PyTorch on the same
# model spec, batch, optimizer (SGD, momentum 0.9, MSE) and thread count,
# in the same run: REPS alternating runs of each side, medians of their
# samples/s over the steps after the first, and the ratio (targets: the 2D
# U-Net at least 1.0x PyTorch, the 3D net at least 0.8x). cltrain's side is
# tests/train/surrogate_steps (the public step API, batches in file order,
# PoCL with POCL_MAX_PTHREAD_COUNT threads); PyTorch's is
# bench/pytorch_unet.py (the spec translated by tests/train/spec_torch.py,
# torch.set_num_threads and OpenBLAS's threads as bench/peer_env.py sets
# them; the netlib reference BLAS is refused). Each figure comes with the
# machine's load average when it was taken; then, per model, where
# cltrain's step time goes (CLT_PROFILE=1). Run from the build directory:
#
#   sh ../bench/unet.sh [MODELS] [THREADS] [STEPS] [REPS] [BATCH]
#
# MODELS: "2d 3d" (default: bench/unet2d.model, bench/unet3d.model) or
# model spec files with a regression loss; THREADS "1 2"; STEPS 30; REPS 3;
# BATCH 8.
set -e
models=${1:-2d 3d}
threads_list=${2:-1 2}
steps=${3:-30}
reps=${4:-3}
batch=${5:-8}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
fair_blas
prog=./tests/train/surrogate_steps
[ -x "$prog" ] || { echo "unet.sh: $prog is not built (make tests/train/surrogate_steps)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
for model in $models; do
  case $model in
    2d|3d|1d) spec=$here/unet$model.model ;;
    *) spec=$model ;;
  esac
  name=$(basename "$spec" .model)
  # 4 batches of data of the model's shapes (random: speed does not depend on the values)
  HERE=$here /usr/bin/python3 - "$spec" "$tmp/$name" "$batch" <<'PY'
import sys, os
sys.path.insert(0, os.path.join(os.environ.get("HERE", "."), "..", "tests", "train"))
import numpy as np, torch, spec_torch
spec, out, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = open(spec).read()
net, _ = spec_torch.from_spec(text, spec)
shape = next(tuple(int(v) for v in l.split()[1:]) for l in text.splitlines() if l.strip().startswith("input"))
with torch.no_grad():
    oshape = tuple(net.eval()(torch.zeros((2,) + shape)).shape[1:])
rng = np.random.default_rng(0)
np.save(out + "_x.npy", rng.standard_normal((4 * batch,) + shape).astype(np.float32))
np.save(out + "_y.npy", rng.standard_normal((4 * batch,) + oshape).astype(np.float32))
print("%s: input %s, output %s, %d parameters" % (os.path.basename(spec), shape, oshape,
      sum(p.numel() for p in net.parameters())))
PY
  for th in $threads_list; do
    : > "$tmp/ours"; : > "$tmp/theirs"; : > "$tmp/load"
    for r in $(seq "$reps"); do
      echo "$(load)" >> "$tmp/load"
      POCL_MAX_PTHREAD_COUNT=$th CLT_LOG_LEVEL=info "$prog" --batch "$batch" --steps "$steps" --lr 0.01 \
        "$spec" "$tmp/${name}_x.npy" "$tmp/${name}_y.npy" > "$tmp/c$r.json" 2>"$tmp/log$r"
      /usr/bin/python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["samples_per_s"])' \
        "$tmp/c$r.json" >> "$tmp/ours"
      /usr/bin/python3 "$here/pytorch_unet.py" --model "$spec" --x "$tmp/${name}_x.npy" --y "$tmp/${name}_y.npy" \
        --batch "$batch" --steps "$steps" --lr 0.01 --threads "$th" > "$tmp/p$r.json"
      /usr/bin/python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["samples_per_s"])' \
        "$tmp/p$r.json" >> "$tmp/theirs"
    done
    c=$(median "$tmp/ours") p=$(median "$tmp/theirs")
    echo "$name, batch $batch, SGD, $th thread(s), $steps steps, $reps runs each; load average before each run: $(tr '\n' ';' < "$tmp/load")"
    echo "  cltrain samples/s: $(tr '\n' ' ' < "$tmp/ours")(median $c); $(sed -n 's/^cltrain: info: \(GEMMs on .*\)/\1/p' "$tmp/log1" | head -1)"
    echo "  PyTorch samples/s: $(tr '\n' ' ' < "$tmp/theirs")(median $p); $(peer_says "$tmp/p1.json")"
    echo "  cltrain/PyTorch $(ratio "$c" "$p")"
  done
  echo "$name: where cltrain's step goes (CLT_PROFILE=1, 1 thread, $steps steps):"
  POCL_MAX_PTHREAD_COUNT=1 CLT_PROFILE=1 "$prog" --batch "$batch" --steps "$steps" --lr 0.01 \
    "$spec" "$tmp/${name}_x.npy" "$tmp/${name}_y.npy" 2>&1 >/dev/null | sed 's/^cltrain: warn: //'
done
