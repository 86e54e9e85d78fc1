"""hf_llama_models.py: the small Llama-family models that
tests/train/llama_check.py and tests/io/hf_llama_check.py compare cltrain
with (imported by both; not a test).

  - LlamaForCausalLM: 2 layers, width 64, 4 heads sharing 2 key and value
    heads (grouped-query attention), SwiGLU of 96, RMSNorm eps 1e-5, an
    untied lm_head, rope_theta 10000 with rope_scaling of type llama3
    (factor 8, low_freq_factor 1, high_freq_factor 4, an original context
    of 64, so that the head's 8 frequencies fall in all three of its bands);
  - Qwen2ForCausalLM: the same shape with biases on q, k and v (not o) and
    the output tied to the token embedding;
  - MistralForCausalLM: 4 heads sharing one key and value head (multi-query),
    rope_theta 1e6, a sliding window as long as the context (which masks
    nothing: the import takes it), an untied head.

random-initialised, then (move_off_init) every parameter moved off its
initial value: norms start at 1 and biases at 0, and a weight in the wrong
place would not show.

transformers before 4.43 (the CI's 4.40) has no llama3 rope_scaling, and its
LlamaConfig refuses one: there the model is made without it and each
layer's rotary inv_freq is set to _compute_llama3_parameters' frequencies,
transcribed below from transformers' modeling_rope_utils.py; save() then
writes the rope_scaling into config.json as 4.43 and later write it, and
load() reads such a directory back the same way (from 4.43 on,
transformers itself does both). Both compute in float32 with torch.
"""
import json
import math
import os

import numpy as np
import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

WIDTH, HEADS, KV_HEADS, INTER, LAYERS, VOCAB, T = 64, 4, 2, 96, 2, 97, 32
THETA, EPS_NORM = 10000.0, 1e-5
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
LABELS = ("llama", "qwen2", "mistral")
CLASSES = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "mistral": MistralForCausalLM}
IGNORE = -100


def llama3_inv_freq(inv_freq, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings,
                    **_):
    """transformers' _compute_llama3_parameters (modeling_rope_utils.py,
    4.43 and later), from its default inv_freq on."""
    old_context_len = original_max_position_embeddings
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def native_llama3():
    try:
        import transformers.modeling_rope_utils as r
        return "llama3" in r.ROPE_INIT_FUNCTIONS
    except ImportError:
        return False


def patch_llama3(model, scaling):
    """Older transformers: each layer's inv_freq as llama3 scales it."""
    for layer in model.model.layers:
        rot = layer.self_attn.rotary_emb
        rot.inv_freq = llama3_inv_freq(rot.inv_freq, **scaling)


def make(label):
    """A random-initialised model of the class `label`, and a line saying
    how its rotary embedding is made."""
    common = dict(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=INTER, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, max_position_embeddings=T, rms_norm_eps=EPS_NORM, hidden_act="silu")
    if label == "llama":
        kw = dict(common, num_key_value_heads=KV_HEADS, rope_theta=THETA, tie_word_embeddings=False,
                  attention_bias=False)
        if native_llama3():
            return LlamaForCausalLM(LlamaConfig(rope_scaling=dict(LLAMA3), **kw)), \
                "GQA, untied, transformers' own llama3 rope_scaling"
        model = LlamaForCausalLM(LlamaConfig(**kw))
        patch_llama3(model, LLAMA3)
        return model, "GQA, untied, inv_freq set to _compute_llama3_parameters' (transformers %s has no llama3 " \
            "rope_scaling)" % transformers.__version__
    if label == "qwen2":
        cfg = Qwen2Config(num_key_value_heads=KV_HEADS, rope_theta=THETA, tie_word_embeddings=True,
                          use_sliding_window=False, **common)
        return Qwen2ForCausalLM(cfg), "GQA, q, k and v biases, tied output"
    cfg = MistralConfig(num_key_value_heads=1, rope_theta=1e6, tie_word_embeddings=False, sliding_window=T, **common)
    return MistralForCausalLM(cfg), "multi-query, untied, sliding_window = the context"


def move_off_init(model, seed=1):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))


def save(label, model, path, **kw):
    """save_pretrained, with the llama3 rope_scaling in config.json where
    this transformers cannot write it."""
    model.save_pretrained(path, safe_serialization=True, **kw)
    if label == "llama" and not native_llama3():
        cfg_path = os.path.join(path, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["rope_scaling"] = dict(LLAMA3)
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)


def load(label, path, **kw):
    """from_pretrained of a directory (an export, say), its llama3
    rope_scaling applied by hand where this transformers has none; and the
    config.json it read."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cls = CLASSES[label]
    if label == "llama" and not native_llama3() and cfg.get("rope_scaling"):
        config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type",
                                                                         "rope_scaling")})
        model = cls.from_pretrained(path, config=config, **kw)
        patch_llama3(model, cfg["rope_scaling"])
    else:
        model = cls.from_pretrained(path, **kw)
    return model.eval(), cfg


def batches(path, steps, batch):
    """steps batches of batch windows of the file's bytes (mod VOCAB), one
    target in 7 masked (PyTorch's ignore_index)."""
    with open(path, "rb") as f:
        text = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64) % VOCAB
    n = steps * batch
    text = np.resize(text, n * T + 1)
    w = np.stack([text[i * T:i * T + T + 1] for i in range(n)]).reshape(steps, batch, T + 1)
    x, y = w[:, :, :-1].copy(), w[:, :, 1:].copy()
    y.reshape(-1)[3::7] = IGNORE
    return x, y
