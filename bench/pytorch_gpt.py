#!/usr/bin/python3
"""PyTorch peer for cltrain's GPT training benchmark (bench/gpt.sh).

Trains the same GPT as a cltrain model spec of the GPT-2 form
(examples/gpt_tiny.model: pre-layernorm blocks, fused QKV causal attention,
GELU in GPT-2's tanh form, learned positions, output tied to the token
embedding), with the same width, heads, layers, context, batch, AdamW
settings and thread count, on the same token file (llm.c's .bin format, as
`cltrain tokenize` writes), and prints one JSON line: tokens/s over the
timed steps, the BLAS PyTorch runs on and its thread count. On a GPU
(--device cuda) --amp trains with autocast and a GradScaler, the peer of
cltrain --precision fp16.

  /usr/bin/python3 bench/pytorch_gpt.py --data data/fortunes_train.bin --layers 2 --width 128 --heads 4 \
      --context 128 --vocab 256 --batch 16 --steps 30 --threads 2
"""
import argparse
import json
import math
import os
import sys
import time

# The thread count has to reach OpenBLAS before torch loads it: OpenBLAS
# ignores torch.set_num_threads and would start its own pool beside torch's
# OpenMP threads (measured on 2 cores: 2 + 2 threads busy-waiting ran at a
# third of the speed of either alone). So OpenBLAS gets the same count, and
# idle OpenMP threads sleep instead of spinning.
_threads = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--threads"), "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", _threads)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_tokens(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    if header[0] == 20240520 and header[1] == 1:
        dtype = "<u2"
    elif header[0] == 20240801 and header[1] == 7:
        dtype = "<u4"
    else:
        raise SystemExit(f"{path}: not an llm.c token file (magic {header[0]}, version {header[1]})")
    toks = np.fromfile(path, dtype=dtype, offset=256 * 4)
    if len(toks) != header[2]:
        raise SystemExit(f"{path}: the header says {header[2]} tokens, the file holds {len(toks)}")
    return torch.from_numpy(toks.astype(np.int64))


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def attn(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13: the explicit form
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, width, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        for m in self.modules():  # GPT-2's initialisation, as the cltrain spec's init=normal std=0.02
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def blas_info():
    """The BLAS library this process really runs on (Debian's torch says
    BLAS_INFO=generic at build time and loads whatever libblas.so.3 the
    alternatives system points at): read from the loaded libraries after a
    matrix product."""
    torch.ones(64, 64) @ torch.ones(64, 64)
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.lower() or "mkl" in line.lower()}
    real = sorted(os.path.realpath(p) for p in libs if p.startswith("/"))
    return ",".join(real) or "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    toks = read_tokens(a.data)
    T = a.context
    nwin = (len(toks) - 1) // T
    model = GPT(a.vocab, T, a.width, a.heads, a.layers).to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "wte" not in n and "wpe" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "wte" not in n and "wpe" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": other, "weight_decay": 0.0}], lr=a.lr)
    scaler = torch.cuda.amp.GradScaler() if a.amp else None
    g = torch.Generator().manual_seed(a.seed)
    losses, t0 = [], None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        w = torch.randint(0, nwin, (a.batch,), generator=g) * T
        x = torch.stack([toks[i:i + T] for i in w.tolist()]).to(dev)
        y = torch.stack([toks[i + 1:i + T + 1] for i in w.tolist()]).to(dev)
        opt.zero_grad(set_to_none=True)
        if a.amp:
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                loss = model(x, y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss = model(x, y)
            loss.backward()
            opt.step()
        losses.append(loss.item())
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "blas": blas_info(),
                      "threads": torch.get_num_threads(), "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "device": str(dev), "amp": a.amp,
                      "params": sum(p.numel() for p in model.parameters()), "batch": a.batch, "context": T,
                      "steps": a.steps, "tokens_per_s": a.steps * a.batch * T / dt,
                      "first_loss": losses[0], "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
