#!/bin/sh
# hf_check.sh: cltrain against transformers itself (tests/io/hf_check.py): a
# random 2-layer GPT2LMHeadModel saved with save_pretrained, imported with
# `cltrain hf import`, gives the same logits (within 1e-4) and loss (1e-5)
# on the same tokens; exported back with `cltrain hf export`, from_pretrained
# loads the same model. Exits 77 (skipped) when no Python here imports
# torch and transformers (.ci/run installs them), or without a device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
HF_LOGITS=${HF_LOGITS:-$(dirname "$CLTRAIN")/tests/io/hf_logits}

# The first Python that has both (a pyenv python3 may shadow Debian's).
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c "import torch, transformers" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 here imports torch and transformers (apt-get install python3-torch;"
  echo "      pip install transformers, as .ci/run does)"
  exit 77
fi
if [ ! -x "$HF_LOGITS" ]; then
  echo "FAIL: $HF_LOGITS is not built (make tests/io/hf_logits)"
  exit 1
fi
# Nothing is downloaded: the model is made here.
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export HF_HUB_OFFLINE TRANSFORMERS_OFFLINE TRANSFORMERS_VERBOSITY
exec "$py" "$srcdir/tests/io/hf_check.py" --cltrain "$CLTRAIN" --logits "$HF_LOGITS"
