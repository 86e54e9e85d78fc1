#!/usr/bin/python3
"""PyTorch peer for cltrain's Fashion-MNIST training benchmark.

Trains the same model (examples/fashion_mlp.model or fashion_cnn.model,
rebuilt here as nn.Sequential), on the same data, with the same batch size,
optimizer, learning rate, epochs and thread count as a cltrain run, and
prints one JSON line: samples/s over the training steps and the final test
accuracy. Uses Debian's python3-torch (or any torch: --device auto takes
the GPU when there is one, and --amp trains in fp16 with autocast and a
GradScaler there, the peer of cltrain --precision fp16); reads the IDX
files itself. OpenBLAS gets the same thread count as torch (bench/peer_env.py),
and the BLAS really loaded and the thread counts are in the output; a run
on the netlib reference BLAS is refused (PEER_ANY_BLAS=1 times it anyway).

  /usr/bin/python3 bench/pytorch_fashion.py --model mlp --epochs 1 --threads 1
"""
import argparse
import contextlib
import gzip
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402  (before torch: OpenBLAS reads its thread count when it loads)

peer_env.threads_from_argv()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, data=DATA):
    x = read_idx(os.path.join(data, f"{split}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = read_idx(os.path.join(data, f"{split}-labels-idx1-ubyte.gz")).astype(np.int64)
    return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="sgd")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, or auto (cuda when there is one)")
    ap.add_argument("--amp", action="store_true", help="fp16 autocast and loss scaling (cuda only)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    blas = peer_env.blas_info()
    if a.device != "cuda":
        peer_env.check_blas(blas)
    torch.manual_seed(a.seed)
    dev = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                       "cpu" if a.device == "auto" else a.device)
    amp = a.amp and dev.type == "cuda"
    xtr, ytr = load("train", a.data)
    xte, yte = load("t10k", a.data)
    mean, std = xtr.mean(), xtr.std(unbiased=False)
    xtr, xte = (xtr - mean) / std, (xte - mean) / std
    if a.model == "cnn":
        xtr, xte = xtr.unsqueeze(1), xte.unsqueeze(1)
    xtr, ytr, xte, yte = xtr.to(dev), ytr.to(dev), xte.to(dev), yte.to(dev)
    net = model(a.model).to(dev)
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    elif a.optimizer == "adam":
        opt = torch.optim.Adam(net.parameters(), lr=a.lr)
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=a.lr)
    lossf = nn.CrossEntropyLoss()
    scaler = torch.cuda.amp.GradScaler(enabled=amp)
    steps, samples, t_train = 0, 0, 0.0
    for epoch in range(a.epochs):
        net.train()
        perm = torch.randperm(len(xtr), device=dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, len(xtr), a.batch):
            idx = perm[i:i + a.batch]
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16) if amp else contextlib.nullcontext():
                loss = lossf(net(xtr[idx]), ytr[idx])
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            loss.item()  # like cltrain, read the loss every step
            steps += 1
            samples += len(idx)
            if a.max_steps and steps >= a.max_steps:
                break
        t_train += time.perf_counter() - t0
        if a.max_steps and steps >= a.max_steps:
            break
    net.eval()
    with torch.no_grad():
        correct = sum((net(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
                      for i in range(0, len(xte), 1000))
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "model": a.model,
                      "threads": torch.get_num_threads(), "blas": blas,
                      "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                      "device": dev.type, "amp": amp,
                      "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else "", "batch": a.batch, "steps": steps, "samples_per_s": samples / t_train,
                      "test_accuracy": correct / len(xte)}))


if __name__ == "__main__":
    main()
