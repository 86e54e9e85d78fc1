#!/usr/bin/python3
"""PyTorch peer for cltrain's Llama training benchmark (bench/llama.sh).

Trains transformers' LlamaForCausalLM of examples/llama_tiny.model's shape
(width 128, 2 layers, 4 heads sharing 2 key and value heads, SwiGLU of 384,
RMSNorm, rope_theta 10000, an untied head over a vocabulary of 2048,
context 128) with the same batch, AdamW settings (weight decay on the
matrices but the embedding, as cltrain's default) and thread count, on the
same token file (llm.c's .bin format), and prints one JSON line: tokens/s
over the timed steps, the BLAS PyTorch runs on and its thread count. Its
attention is transformers' default for the installed version (sdpa where
it has it, else eager).

  /usr/bin/python3 bench/pytorch_llama.py --data data/fortunes_train.bin --batch 16 --steps 30 --threads 2
"""
import argparse
import json
import os
import sys
import time

# As bench/pytorch_gpt.py: OpenBLAS gets the thread count before torch loads
# it, and idle OpenMP threads sleep.
_threads = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--threads"), "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", _threads)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpt import blas_info, read_tokens  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=384)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    toks = read_tokens(a.data)
    T = a.context
    nwin = (len(toks) - 1) // T
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.width, intermediate_size=a.intermediate,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                      max_position_embeddings=T, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed_tokens" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed_tokens" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": other, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(a.seed)
    losses, t0 = [], None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            t0 = time.perf_counter()
        w = torch.randint(0, nwin, (a.batch,), generator=g) * T
        x = torch.stack([toks[i:i + T] for i in w.tolist()])
        y = torch.stack([toks[i + 1:i + T + 1] for i in w.tolist()])
        opt.zero_grad(set_to_none=True)
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, a.vocab), y.view(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    dt = time.perf_counter() - t0
    print(json.dumps({"peer": "transformers", "torch": torch.__version__, "blas": blas_info(),
                      "threads": torch.get_num_threads(), "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                      "attention": getattr(cfg, "_attn_implementation", "eager"),
                      "params": sum(p.numel() for p in model.parameters()), "batch": a.batch, "context": T,
                      "steps": a.steps, "tokens_per_s": a.steps * a.batch * T / dt,
                      "first_loss": losses[0], "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
