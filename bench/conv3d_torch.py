#!/usr/bin/python3
"""PyTorch peer of bench/nn_bench's conv3d lines: torch.nn.Conv3d forward
and backward (input gradient too) on the same shapes, 3x3x3 kernels,
padding 1: [median wall ms, CPU ms] per call over --iters, one JSON line
per op. OpenBLAS gets the same thread count as torch (bench/peer_env.py).

  /usr/bin/python3 bench/conv3d_torch.py --threads 1 --batch 8
  bench/nn_bench --devices pocl --batch 8 --only conv3d     (with POCL_MAX_PTHREAD_COUNT=1)
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402

peer_env.threads_from_argv()

import torch  # noqa: E402


def median_ms(fn, iters):
    """The median wall time of a call, and the process's CPU time per call
    (nn_bench prints both: on a shared machine the CPU time is the steadier)."""
    fn()
    ts = []
    c0 = time.process_time()
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    cpu = (time.process_time() - c0) * 1e3 / iters
    ts.sort()
    return round(ts[len(ts) // 2], 3), round(cpu, 3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    blas = peer_env.blas_info()
    peer_env.check_blas(blas)
    for cin, cout, s in ((8, 16, 16), (16, 32, 8)):
        conv = torch.nn.Conv3d(cin, cout, 3, padding=1)
        x = torch.randn(a.batch, cin, s, s, s, requires_grad=True)
        dy = torch.randn(a.batch, cout, s, s, s)
        with torch.no_grad():
            fwd = median_ms(lambda: conv(x), a.iters)
        y = conv(x)

        def bwd():
            x.grad = None
            torch.autograd.grad(y, [x, conv.weight, conv.bias], dy, retain_graph=True)

        print(json.dumps({"op": "conv3d %d-%d %d^3" % (cin, cout, s), "batch": a.batch, "threads": a.threads,
                          "forward_ms": fwd, "backward_ms": median_ms(bwd, a.iters),
                          "mkldnn": torch.backends.mkldnn.is_available(), "blas": blas}))


if __name__ == "__main__":
    main()
