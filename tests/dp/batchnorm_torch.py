"""batchnorm_torch.py: cltrain's batchnorm against PyTorch's (run by
tests/dp/batchnorm_torch.sh, which finds a Python with torch).

A small conv net with batchnorm after a convolution (BatchNorm2d) and after
a linear layer (BatchNorm1d), its initial weights made here (every weight
and bias moved off its usual start, the running statistics too) and given
to `cltrain train --weights`; 20 SGD steps (lr 0.1, momentum 0.9) of the
whole set of 32 4x4 images as one batch (the statistics and the mean loss
do not depend on the order cltrain's sampler puts them in), on 1 rank and
on 2 ranks (each rank half the batch: the statistics are the global
batch's, as SyncBatchNorm's), then every parameter and running statistic
within 1e-5 relative (|a - b| <= 1e-5 (1 + |b|)) of torch's BatchNorm on
the whole batch, in float64 (so the difference is cltrain's float
rounding). Prints the largest differences. Exit 0 when all hold, 1 when
one does not.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--cltrain", required=True)
ap.add_argument("--mpi-run", required=True)
a = ap.parse_args()

N, STEPS, LR, MOM = 32, 20, 0.1, 0.9
rng = np.random.default_rng(7)
tmp = tempfile.mkdtemp()
images = rng.integers(0, 256, size=(N, 4, 4), dtype=np.uint8)
labels = rng.integers(0, 10, size=N, dtype=np.uint8)
with open(os.path.join(tmp, "train-images-idx3-ubyte"), "wb") as f:
    f.write(struct.pack(">4B3I", 0, 0, 8, 3, N, 4, 4) + images.tobytes())
with open(os.path.join(tmp, "train-labels-idx1-ubyte"), "wb") as f:
    f.write(struct.pack(">4BI", 0, 0, 8, 1, N) + labels.tobytes())
spec = os.path.join(tmp, "m.model")
with open(spec, "w") as f:
    f.write("input 1 4 4\nconv2d 4 kernel=3 pad=1\nbatchnorm\nrelu\nflatten\n"
            "linear 12\nbatchnorm momentum=0.2 eps=1e-3\nrelu\nlinear 10\n")

torch.manual_seed(3)
net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                          torch.nn.Flatten(), torch.nn.Linear(64, 12), torch.nn.BatchNorm1d(12, eps=1e-3, momentum=0.2),
                          torch.nn.ReLU(), torch.nn.Linear(12, 10)).double()
with torch.no_grad():
    for name, t in net.state_dict().items():
        if t.dtype.is_floating_point:
            t.add_(torch.rand_like(t) * 0.5 - 0.25)  # weights off 1, biases off 0, running stats off 0 and 1
        if "running_var" in name:
            t.abs_().add_(0.5)
start = {k: v.float().numpy() for k, v in net.state_dict().items() if v.dtype.is_floating_point}


def save(path, tensors):
    header, blobs, at = {}, [], 0
    for k, v in tensors.items():
        b = np.ascontiguousarray(v, dtype="<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], "<f4").reshape(v["shape"])
            for k, v in h.items()}


init = os.path.join(tmp, "init.safetensors")
save(init, start)

# torch: 20 steps of the whole batch (x scaled to [0, 1], as --normalize scale)
x = torch.tensor(images, dtype=torch.float64).reshape(N, 1, 4, 4) / 255.0
y = torch.tensor(labels, dtype=torch.long)
opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOM)
net.train()
for _ in range(STEPS):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
want = {k: v.numpy() for k, v in net.state_dict().items() if v.dtype.is_floating_point}

ok = True
common = ["train", spec, "--data", tmp, "--normalize", "scale", "-b", str(N), "-e", str(STEPS), "-q", "-o", "sgd",
          "--lr", str(LR), "--momentum", str(MOM), "--weights", init]
for ranks in (1, 2):
    out = os.path.join(tmp, "w%d.safetensors" % ranks)
    cmd = ([a.cltrain] + common + ["-d", "0"] if ranks == 1 else ["sh", a.mpi_run, "2", a.cltrain] + common)
    r = subprocess.run(cmd + ["--save", out], capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL: %d rank(s): %s\n%s%s" % (ranks, " ".join(cmd), r.stdout, r.stderr))
        ok = False
        continue
    got = load(out)
    worst = max((float(np.max(np.abs(got[k] - want[k]) / (1 + np.abs(want[k])))), k) for k in want)
    good = sorted(got) == sorted(want) and worst[0] <= 1e-5
    print("%s: %d rank(s), 20 SGD steps: largest difference from torch %.3g in %s"
          % ("ok" if good else "FAIL", ranks, worst[0], worst[1]))
    ok = ok and good
sys.exit(0 if ok else 1)
