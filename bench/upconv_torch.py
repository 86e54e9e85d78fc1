"""upconv_torch.py [--threads N] [--iters N]: PyTorch's milliseconds per
forward and per backward of the ops bench/upconv_bench times, at the same
shapes (a U-Net decoder's up steps), for the ratio of the two."""
import argparse
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--iters", type=int, default=20)
a = ap.parse_args()
torch.set_num_threads(a.threads)
print(f"upconv_torch, torch {torch.__version__}, {a.threads} thread(s), {a.iters} iterations: median ms, CPU ms")

OPS = [
    ("convtranspose2d 64->32 k2 s2 (16, 64, 16, 16)", torch.nn.ConvTranspose2d(64, 32, 2, stride=2), (16, 64, 16, 16)),
    ("convtranspose2d 32->16 k2 s2 (16, 32, 32, 32)", torch.nn.ConvTranspose2d(32, 16, 2, stride=2), (16, 32, 32, 32)),
    ("upsample nearest x2 (16, 64, 16, 16)", torch.nn.Upsample(scale_factor=2), (16, 64, 16, 16)),
    ("upsample bilinear x2 (16, 64, 16, 16)", torch.nn.Upsample(scale_factor=2, mode="bilinear"), (16, 64, 16, 16)),
    ("convtranspose3d 32->16 k2 s2 (4, 32, 8, 8, 8)", torch.nn.ConvTranspose3d(32, 16, 2, stride=2), (4, 32, 8, 8, 8)),
    ("upsample trilinear x2 (4, 32, 8, 8, 8)", torch.nn.Upsample(scale_factor=2, mode="trilinear"), (4, 32, 8, 8, 8)),
]


def median_ms(f):
    """The median wall-clock ms of f and its mean CPU ms."""
    f()
    t, c0 = [], time.process_time()
    for _ in range(a.iters):
        t0 = time.perf_counter()
        f()
        t.append((time.perf_counter() - t0) * 1e3)
    return sorted(t)[len(t) // 2], (time.process_time() - c0) * 1e3 / a.iters


for name, m, shape in OPS:
    x = torch.randn(*shape, requires_grad=True)
    y = m(x)
    dy = torch.randn_like(y)
    fwd = median_ms(lambda: m(x))
    # the backward alone: a fresh graph each time, its forward not timed
    ys, cs = [], []

    def bwd():
        y = m(x)
        t0, c0 = time.perf_counter(), time.process_time()
        y.backward(dy)
        ys.append((time.perf_counter() - t0) * 1e3)
        cs.append((time.process_time() - c0) * 1e3)

    bwd()
    ys.clear(), cs.clear()
    for _ in range(a.iters):
        bwd()
    print(f"  {name:44s} forward  {fwd[0]:9.3f} {fwd[1]:9.3f}")
    print(f"  {name:44s} backward {sorted(ys)[len(ys) // 2]:9.3f} {sum(cs) / len(cs):9.3f}")
