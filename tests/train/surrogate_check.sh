#!/bin/sh
# surrogate_check.sh: issue 40's surrogate models (a 2D U-Net, a 3D and a
# 1D conv net) trained 20 SGD steps by cltrain and by PyTorch from the same
# initial weights on the same batches end within 1e-5 of each other, on 1
# rank and on 2 (tests/train/surrogate_check.py; cltrain's side is
# tests/train/surrogate_steps, PyTorch's the spec translated by
# tests/train/spec_torch.py), and with a replica on each device of one rank
# (PoCL and rusticl). Exits 77 (skipped) when no Python here
# imports torch, numpy and safetensors, or without a device; the 2-rank
# half is skipped without an MPI launcher.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
STEPS_PROG=${SURROGATE_STEPS:-$(dirname "$CLTRAIN")/tests/train/surrogate_steps}
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c "import torch, numpy, safetensors" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 here imports torch, numpy and safetensors (apt-get install python3-torch)"
  exit 77
fi
if [ ! -x "$STEPS_PROG" ]; then
  echo "FAIL: $STEPS_PROG is not built (make tests/train/surrogate_steps)"
  exit 1
fi
mpi=
sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
[ $? -ne 77 ] && mpi="sh $srcdir/tests/lib/mpi_run.sh"
[ -z "$mpi" ] && echo "note: no MPI launcher: 1 rank only"
POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-1}
export POCL_MAX_PTHREAD_COUNT
exec "$py" "$srcdir/tests/train/surrogate_check.py" --steps-prog "$STEPS_PROG" --mpi-run "$mpi"
