#!/usr/bin/python3
"""PyTorch peer of bench/unet.sh: the same model spec (translated by
tests/train/spec_torch.py into the torch.nn module of the same layers),
batch, optimizer (SGD with momentum, MSE loss) and thread count as
cltrain's tests/train/surrogate_steps run, on the same .npy batches in
file order; prints one JSON line with samples/s over the steps after the
first (which, as cltrain's first, pays for one-off set-up). OpenBLAS gets
the thread count before torch loads it (bench/peer_env.py); the BLAS
really loaded is in the output, and the netlib reference BLAS is refused
(PEER_ANY_BLAS=1 times it anyway).

  /usr/bin/python3 bench/pytorch_unet.py --model M.model --x X.npy --y Y.npy --batch 8 --steps 30 --threads 1
"""
import argparse
import json
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests", "train"))
import peer_env  # noqa: E402  (before torch: OpenBLAS reads its thread count when it loads)

peer_env.threads_from_argv()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import spec_torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--x", required=True)
    ap.add_argument("--y", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    blas = peer_env.blas_info()
    peer_env.check_blas(blas)
    torch.manual_seed(0)
    with open(a.model) as f:
        net, loss = spec_torch.from_spec(f.read(), a.model)
    lossf = spec_torch.loss_fn(loss)
    x, y = torch.from_numpy(np.load(a.x)), torch.from_numpy(np.load(a.y))
    k_batches = len(x) // a.batch
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    times = []
    for k in range(a.steps):
        b = (k % k_batches) * a.batch
        xb, yb = x[b:b + a.batch], y[b:b + a.batch]
        t0 = time.perf_counter()
        opt.zero_grad()
        out = lossf(net(xb), yb)
        out.backward()
        opt.step()
        out.item()  # like cltrain, read the loss every step
        times.append(time.perf_counter() - t0)
    timed = sum(times[1:])
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "model": os.path.basename(a.model),
                      "threads": torch.get_num_threads(), "blas": blas,
                      "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "batch": a.batch, "steps": a.steps,
                      "samples_per_s": (a.steps - 1) * a.batch / timed if timed > 0 else 0.0,
                      "parameters": sum(p.numel() for p in net.parameters())}))


if __name__ == "__main__":
    main()
