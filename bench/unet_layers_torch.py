"""unet_layers_torch.py [--threads N] [--iters N]: PyTorch's milliseconds
per forward and per backward of the layers bench/unet_layers_bench times,
at the same shapes (the U-Net benchmarks' non-convolution layers, batch 8,
training mode), for the ratio of the two."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402

peer_env.threads_from_argv()
import torch  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--iters", type=int, default=20)
a = ap.parse_args()
torch.set_num_threads(a.threads)
print(f"unet_layers_torch, torch {torch.__version__}, {a.threads} thread(s), {a.iters} iterations: median ms, CPU ms")


class Cat(torch.nn.Module):
    def __init__(self, other):
        super().__init__()
        self.other = other

    def forward(self, x):
        return torch.cat([x, self.other], 1)


def bn(c):
    return torch.nn.BatchNorm2d(c).train()


OPS = [
    ("2d batchnorm (8, 16, 64x64)", bn(16), (8, 16, 64, 64)),
    ("2d batchnorm (8, 32, 32x32)", bn(32), (8, 32, 32, 32)),
    ("2d batchnorm (8, 64, 16x16)", bn(64), (8, 64, 16, 16)),
    ("2d silu (8, 16, 64x64)", torch.nn.SiLU(), (8, 16, 64, 64)),
    ("2d silu (8, 64, 16x16)", torch.nn.SiLU(), (8, 64, 16, 16)),
    ("2d maxpool 2 (8, 16, 64x64)", torch.nn.MaxPool2d(2), (8, 16, 64, 64)),
    ("2d maxpool 2 (8, 32, 32x32)", torch.nn.MaxPool2d(2), (8, 32, 32, 32)),
    ("2d concat (8, 32 + 32, 32x32)", Cat(torch.randn(8, 32, 32, 32, requires_grad=True)), (8, 32, 32, 32)),
    ("2d concat (8, 16 + 16, 64x64)", Cat(torch.randn(8, 16, 64, 64, requires_grad=True)), (8, 16, 64, 64)),
    ("2d convtranspose2d 64->32 k2 s2 (8, 16x16)", torch.nn.ConvTranspose2d(64, 32, 2, stride=2), (8, 64, 16, 16)),
    ("2d convtranspose2d 32->16 k2 s2 (8, 32x32)", torch.nn.ConvTranspose2d(32, 16, 2, stride=2), (8, 32, 32, 32)),
    ("3d batchnorm (8, 8, 16^3)", torch.nn.BatchNorm3d(8).train(), (8, 8, 16, 16, 16)),
    ("3d batchnorm (8, 16, 8^3)", torch.nn.BatchNorm3d(16).train(), (8, 16, 8, 8, 8)),
    ("3d maxpool3d 2 (8, 8, 16^3)", torch.nn.MaxPool3d(2), (8, 8, 16, 16, 16)),
    ("3d upsample trilinear x2 (8, 16, 8^3)", torch.nn.Upsample(scale_factor=2, mode="trilinear"), (8, 16, 8, 8, 8)),
    ("3d concat (8, 16 + 8, 16^3)", Cat(torch.randn(8, 8, 16, 16, 16, requires_grad=True)), (8, 16, 16, 16, 16)),
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
    print(f"  {name:40s} forward        {fwd[0]:9.3f} {fwd[1]:9.3f}")
    print(f"  {name:40s} backward       {sorted(ys)[len(ys) // 2]:9.3f} {sum(cs) / len(cs):9.3f}")
