#!/usr/bin/python3
"""PyTorch DDP (gloo) peer for cltrain's data-parallel benchmark.

Trains the Fashion-MNIST MLP or CNN with DistributedDataParallel over N
processes on this machine (gloo backend, one thread each), global batch B
split evenly, SGD with momentum, OpenBLAS at one thread per rank too
(bench/peer_env.py; the run is refused on the netlib reference BLAS), and prints one JSON line with the global
samples/s over the timed steps. Compare with
`mpirun -np N cltrain train ... --batch B` in the same run (bench/dp.sh).

  /usr/bin/python3 bench/pytorch_ddp.py --model mlp --ranks 2 --batch 128 --steps 200
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402  (before torch: OpenBLAS reads its thread count when it loads)

# one thread per rank, OpenBLAS's pool included (the spawned workers inherit it)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

from pytorch_fashion import load, model  # noqa: E402


def worker(rank, a, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    torch.manual_seed(a.seed)
    xtr, ytr = load("train")
    mean, std = xtr.mean(), xtr.std(unbiased=False)
    xtr = (xtr - mean) / std
    if a.model == "cnn":
        xtr = xtr.unsqueeze(1)
    net = nn.parallel.DistributedDataParallel(model(a.model))
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(a.seed)
    perm = torch.randperm(len(xtr), generator=g)
    share = a.batch // a.ranks
    t0 = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        at = (step * a.batch) % (len(xtr) - a.batch)
        idx = perm[at + rank * share: at + (rank + 1) * share]
        opt.zero_grad()
        loss = lossf(net(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
        loss.item()
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        out.put(a.steps * a.batch / dt)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--port", type=int, default=29517)
    a = ap.parse_args()
    blas = peer_env.blas_info()
    peer_env.check_blas(blas)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.spawn(worker, args=(a, out), nprocs=a.ranks, join=True)
    print(json.dumps({"peer": "pytorch-ddp-gloo", "torch": torch.__version__, "model": a.model, "ranks": a.ranks,
                      "batch": a.batch, "threads_per_rank": 1, "blas": blas,
                      "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "samples_per_s": out.get()}))


if __name__ == "__main__":
    main()
