#!/bin/sh
# upconv_torch_check.sh: upsample and convtranspose1d/2d/3d against
# PyTorch on the same weights (tests/nn/upconv_torch_check.py, with
# tests/nn/upconv_torch giving cltrain's side): the outputs, the loss and
# every parameter's gradient within 1e-5. Exits 77 (skipped) when no Python
# here imports torch and safetensors, or without a device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
DRIVER=${UPCONV_TORCH:-$(dirname "$CLTRAIN")/tests/nn/upconv_torch}

py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c "import torch, safetensors, numpy" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 here imports torch and safetensors (apt-get install python3-torch; pip install safetensors)"
  exit 77
fi
if [ ! -x "$DRIVER" ]; then
  echo "FAIL: $DRIVER is not built (make tests/nn/upconv_torch)"
  exit 1
fi
exec "$py" "$srcdir/tests/nn/upconv_torch_check.py" --driver "$DRIVER"
