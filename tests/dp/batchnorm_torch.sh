#!/bin/sh
# batchnorm_torch.sh: cltrain's batchnorm against PyTorch's BatchNorm2d and
# BatchNorm1d on the whole batch (what SyncBatchNorm computes), 20 SGD steps
# from the same weights on 1 and 2 ranks, every parameter and running
# statistic within 1e-5 (tests/dp/batchnorm_torch.py). Exits 77 (skipped)
# when no Python here imports torch and numpy, or without a device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-120}
export CLT_TIMEOUT CLT_TEST_LIMIT
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c "import torch, numpy" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then echo "SKIP: no python3 here imports torch and numpy"; exit 77; fi
"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
exec "$py" "$srcdir/tests/dp/batchnorm_torch.py" --cltrain "$CLTRAIN" --mpi-run "$srcdir/tests/lib/mpi_run.sh"
