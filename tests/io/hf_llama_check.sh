#!/bin/sh
# hf_llama_check.sh: `cltrain hf import` and `hf export` of
# LlamaForCausalLM, Qwen2ForCausalLM and MistralForCausalLM against
# transformers itself (tests/io/hf_llama_check.py): random models saved
# with save_pretrained import with transformers' logits (within 1e-4) and
# loss (1e-5); exported back (f32, bf16, f16, with the tokenizer's files),
# from_pretrained loads the same tensors; shards and bfloat16 files import
# as the float32 of their values. Exits 77 (skipped) when no Python here
# imports torch, transformers, tokenizers and safetensors (.ci/run installs
# them), or without a device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
HF_LOGITS=${HF_LOGITS:-$(dirname "$CLTRAIN")/tests/io/hf_logits}

# The first Python that has them (a pyenv python3 may shadow Debian's).
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c "import torch, transformers, tokenizers, safetensors" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 here imports torch, transformers, tokenizers and safetensors (apt-get install"
  echo "      python3-torch; pip install transformers, as .ci/run does)"
  exit 77
fi
if [ ! -x "$HF_LOGITS" ]; then
  echo "FAIL: $HF_LOGITS is not built (make tests/io/hf_logits)"
  exit 1
fi
# Nothing is downloaded: the models and the tokenizer are made here.
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE TRANSFORMERS_OFFLINE TRANSFORMERS_VERBOSITY TOKENIZERS_PARALLELISM
exec "$py" "$srcdir/tests/io/hf_llama_check.py" --cltrain "$CLTRAIN" --logits "$HF_LOGITS"
