#!/bin/sh
# torch_check.sh: cltrain's training against PyTorch itself
# (tests/train/torch_check.py): a random 2-layer GPT2LMHeadModel saved with
# save_pretrained and imported with `cltrain hf import`; on the same
# batches, the loss and every parameter's gradient at step 0 within 1e-4
# relative, 20 AdamW steps' losses within 1e-3, and 20 Lion steps' losses
# and parameters within 1e-5 of lion-pytorch's (its update transcribed where
# the package is missing). Exits 77 (skipped) when no Python here imports
# torch and transformers (.ci/run installs them, and lion-pytorch), or
# without a device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
TORCH_STEPS=${TORCH_STEPS:-$(dirname "$CLTRAIN")/tests/train/torch_steps}

# The first Python that has both (a pyenv python3 may shadow Debian's).
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c "import torch, transformers, safetensors" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 here imports torch and transformers (apt-get install python3-torch;"
  echo "      pip install transformers, as .ci/run does)"
  exit 77
fi
if [ ! -x "$TORCH_STEPS" ]; then
  echo "FAIL: $TORCH_STEPS is not built (make tests/train/torch_steps)"
  exit 1
fi
# Nothing is downloaded: the model is made here.
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export HF_HUB_OFFLINE TRANSFORMERS_OFFLINE TRANSFORMERS_VERBOSITY
exec "$py" "$srcdir/tests/train/torch_check.py" --cltrain "$CLTRAIN" --steps "$TORCH_STEPS"
