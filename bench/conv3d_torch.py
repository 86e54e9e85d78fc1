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
    ap.add_argument("--unet", action="store_true", help="nn_bench --unet's convolutions instead")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    blas = peer_env.blas_info()
    peer_env.check_blas(blas)
    shapes = [(3, cin, cout, s, 3, 1) for cin, cout, s in ((8, 16, 16), (16, 32, 8))]
    if a.unet:  # nn_bench.c's unet_convs: dims, Cin, Cout, size, kernel, dx
        shapes = [(2, 2, 16, 64, 3, 0), (2, 16, 16, 64, 3, 1), (2, 16, 32, 32, 3, 1), (2, 32, 32, 32, 3, 1),
                  (2, 32, 64, 16, 3, 1), (2, 64, 64, 16, 3, 1), (2, 64, 32, 32, 3, 1), (2, 32, 16, 64, 3, 1),
                  (2, 16, 2, 64, 1, 1), (3, 1, 8, 16, 3, 0), (3, 8, 16, 8, 3, 1), (3, 16, 16, 8, 3, 1),
                  (3, 24, 8, 16, 3, 1), (3, 8, 1, 16, 1, 1)]
    for nd, cin, cout, s, k, want_dx in shapes:
        conv = (torch.nn.Conv2d if nd == 2 else torch.nn.Conv3d)(cin, cout, k, padding=k // 2)
        x = torch.randn((a.batch, cin) + (s,) * nd, requires_grad=bool(want_dx))
        dy = torch.randn((a.batch, cout) + (s,) * nd)
        with torch.no_grad():
            fwd = median_ms(lambda: conv(x), a.iters)
        y = conv(x)

        def bwd():
            x.grad = None
            torch.autograd.grad(y, ([x] if want_dx else []) + [conv.weight, conv.bias], dy, retain_graph=True)

        print(json.dumps({"op": "conv%dd %d-%d %d^%d k%d" % (nd, cin, cout, s, nd, k), "dx": bool(want_dx),
                          "batch": a.batch, "threads": a.threads,
                          "forward_ms": fwd, "backward_ms": median_ms(bwd, a.iters),
                          "mkldnn": torch.backends.mkldnn.is_available(), "blas": blas}))


if __name__ == "__main__":
    main()
