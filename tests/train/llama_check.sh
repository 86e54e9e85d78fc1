#!/bin/sh
# llama_check.sh: cltrain's Llama-family models against transformers itself
# (tests/train/llama_check.py): a random LlamaForCausalLM (grouped-query
# attention, an untied head, rope_scaling llama3), Qwen2ForCausalLM (q, k
# and v biases, tied) and MistralForCausalLM (multi-query), saved with
# save_pretrained and imported with `cltrain hf import`: logits within 1e-4
# and loss within 1e-5, every gradient within 1e-4 relative, 20 AdamW
# steps' losses within 1e-4 relative and the weights after them within 1e-4. Exits 77 (skipped) when no Python here
# imports torch, transformers and safetensors (.ci/run installs them), or
# without a device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
HF_LOGITS=${HF_LOGITS:-$(dirname "$CLTRAIN")/tests/io/hf_logits}
TORCH_STEPS=${TORCH_STEPS:-$(dirname "$CLTRAIN")/tests/train/torch_steps}

# The first Python that has them (a pyenv python3 may shadow Debian's).
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c "import torch, transformers, safetensors" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 here imports torch, transformers and safetensors (apt-get install python3-torch;"
  echo "      pip install transformers, as .ci/run does)"
  exit 77
fi
for b in "$HF_LOGITS" "$TORCH_STEPS"; do
  [ -x "$b" ] || { echo "FAIL: $b is not built (make tests/io/hf_logits tests/train/torch_steps)"; exit 1; }
done
# Nothing is downloaded: the models are made here.
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export HF_HUB_OFFLINE TRANSFORMERS_OFFLINE TRANSFORMERS_VERBOSITY
exec "$py" "$srcdir/tests/train/llama_check.py" --cltrain "$CLTRAIN" --logits "$HF_LOGITS" --steps "$TORCH_STEPS"
