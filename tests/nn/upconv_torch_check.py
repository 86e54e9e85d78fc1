"""upconv_torch_check.py --driver PATH: upsample and convtranspose1d/2d/3d
against PyTorch on the same weights. For each model below, torch's
modules (torch.nn.ConvTranspose*d, torch.nn.Upsample with
align_corners=False) are initialised at random and saved as a safetensors
file under the names cltrain gives them ("<layer>.weight", the layer
counted after the input, weight (in, out, k...)); tests/nn/upconv_torch
loads it into the same spec, runs the same samples forward and takes the
gradient of the mean squared error against the same targets. The outputs
and every parameter's gradient must agree within 1e-5 of the largest
magnitude of each (float32 sums of up to a few thousand terms err by
about 1e-6 of it; a wrong index, weight layout or interpolation weight
errs by O(1))."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import save_file

TOL = 1e-5
LOSS_TOL = 1e-3

# (name, input shape, spec lines, torch modules): the modules' order is
# the spec's layers', so nn.Sequential's state_dict names are cltrain's.
MODELS = [
    ("1d", (3, 7),
     ["convtranspose1d 4 kernel=4 stride=2 pad=1", "upsample scale=3 mode=linear",
      "convtranspose1d 2 kernel=3 stride=3 pad=1 output_pad=2"],
     lambda: [torch.nn.ConvTranspose1d(3, 4, 4, stride=2, padding=1),
              torch.nn.Upsample(scale_factor=3, mode="linear", align_corners=False),
              torch.nn.ConvTranspose1d(4, 2, 3, stride=3, padding=1, output_padding=2)]),
    ("2d", (2, 5, 6),
     ["convtranspose2d 3 kernel=3 stride=2 pad=1 output_pad=1", "upsample scale=2 mode=linear",
      "convtranspose2d 2 kernel=2 stride=2 bias=false", "upsample scale=3"],
     lambda: [torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1),
              torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
              torch.nn.ConvTranspose2d(3, 2, 2, stride=2, bias=False),
              torch.nn.Upsample(scale_factor=3, mode="nearest")]),
    ("3d", (2, 3, 2, 3),
     ["convtranspose3d 3 kernel=2 stride=2", "upsample scale=2 mode=trilinear",
      "convtranspose3d 2 kernel=3 stride=2 pad=1 output_pad=1", "upsample scale=2"],
     lambda: [torch.nn.ConvTranspose3d(2, 3, 2, stride=2),
              torch.nn.Upsample(scale_factor=2, mode="trilinear", align_corners=False),
              torch.nn.ConvTranspose3d(3, 2, 3, stride=2, padding=1, output_padding=1),
              torch.nn.Upsample(scale_factor=2, mode="nearest")]),
]
N = 3


def rel_err(got, want):
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def check(driver, tmp, name, shape, lines, make):
    torch.manual_seed(len(lines) + len(shape))
    net = torch.nn.Sequential(*make())
    x = torch.randn(N, *shape)
    out = net(x)
    tgt = torch.randn_like(out)
    loss = torch.nn.functional.mse_loss(out, tgt)
    loss.backward()
    spec = os.path.join(tmp, name + ".model")
    with open(spec, "w") as f:
        f.write("input " + " ".join(map(str, shape)) + "\n" + "\n".join(lines) + "\nloss mse\n")
    weights = os.path.join(tmp, name + ".safetensors")
    save_file({k: v.detach().contiguous() for k, v in net.state_dict().items()}, weights)
    files = {k: os.path.join(tmp, f"{name}_{k}.f32") for k in ("x", "t", "out", "grad")}
    x.numpy().astype("<f4").tofile(files["x"])
    tgt.numpy().astype("<f4").tofile(files["t"])
    r = subprocess.run([driver, spec, weights, files["x"], files["t"], str(N), files["out"], files["grad"]],
                       capture_output=True, text=True)
    if r.returncode == 77:
        print("SKIP: " + r.stderr.strip())
        sys.exit(77)
    if r.returncode != 0:
        print(f"FAIL {name}: upconv_torch exited {r.returncode}: {r.stdout}{r.stderr}")
        return False
    ok = True
    got_out = np.fromfile(files["out"], dtype="<f4")
    e = rel_err(got_out, out.detach().numpy().ravel())
    print(f"{name}: output {tuple(out.shape)} error {e:.2e}")
    ok &= e <= TOL
    # the loss sums every output's squared error (663552 of them in 3d) in
    # float32, cltrain's in one fixed order and torch's in its own: both
    # against the sum in double, within float32's error for that many terms
    exact = float(np.mean((out.detach().numpy().astype(np.float64) - tgt.numpy()) ** 2))
    for who, v in (("cltrain", float(r.stdout.split()[0])), ("torch", loss.item())):
        e = abs(v - exact) / exact
        print(f"{name}: {who}'s loss {v:.6f} error {e:.2e} against {exact:.6f}")
        ok &= e <= LOSS_TOL
    grad = np.fromfile(files["grad"], dtype="<f4")
    at = 0
    for k, p in net.named_parameters():
        g = p.grad.numpy().ravel()
        e = rel_err(grad[at:at + g.size], g)
        print(f"{name}: grad {k} {tuple(p.shape)} error {e:.2e}")
        ok &= e <= TOL
        at += g.size
    if at != grad.size:
        print(f"FAIL {name}: cltrain has {grad.size} parameters, torch {at}")
        ok = False
    if not ok:
        print(f"FAIL {name}: beyond {TOL}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape, lines, make in MODELS:
            ok &= check(a.driver, tmp, name, shape, lines, make)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
