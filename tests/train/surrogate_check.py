"""surrogate_check.py: issue 40's surrogate models trained by cltrain and
by PyTorch from the same initial weights on the same batches end with the
same weights (run by tests/train/surrogate_check.sh).

For each model below (a 2D U-Net, a 3D conv net, a 1D conv net, as
cltrain model specs): a .npy dataset of STEPS x BATCH samples
(normal, seeded here) and as targets a teacher's outputs (the same model
with PyTorch's random initialisation); cltrain's side is
tests/train/surrogate_steps (the public step API, batches in file order,
SGD with momentum, MSE), which writes cltrain's own initial weights and
the weights after the steps; PyTorch's side is the same model built from
the spec by spec_torch.py, loaded with those initial weights and trained
with torch.optim.SGD (same lr and momentum, no dampening) on the same
batches. Every tensor of the state_dict (weights, biases and batch norm's
running statistics) must end within TOL of torch's, on 1 rank and on 2
ranks (each passing half of every batch: batch norm's statistics are the
global batch's, so 2 ranks must equal torch on the whole batch), and on
1 rank with a replica on each device (PoCL and rusticl where both are). Prints,
per model and rank count, the largest difference and where it is.

  surrogate_check.py --steps-prog tests/train/surrogate_steps [--mpi-run "sh tests/lib/mpi_run.sh"]

Exit 0 when all hold, 1 when one does not, 77 when no OpenCL device exists.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spec_torch  # noqa: E402

# The tolerance, applied to every element as |cltrain - torch| <=
# TOL * max(1, |torch|): absolute for the weights (all below 1 here),
# relative for running variances that may be larger. Both sides compute
# float32 in different orders (GEMM and convolution blocking, the batch
# statistics' sums, the all-reduce on 2 ranks); measured on PoCL after 20
# steps the largest difference is ~1e-7 (printed below), so 1e-5 leaves
# room for other devices' orders while a wrong gradient (a factor 1 + 1e-4
# on one tensor's) or a batch norm on half the batch fails by far more.
TOL = 1e-5
STEPS, BATCH = 20, 8
LR, MOMENTUM = 0.05, 0.9

# name -> spec. Each is small enough for a step in milliseconds: the
# check runs in seconds on one core.
MODELS = {
    "unet2d": """# 2D U-Net surrogate: a (2, 16, 16) field to a (2, 16, 16) field
input 2 16 16
conv2d 8 kernel=3 pad=1
batchnorm
silu
save s1
maxpool 2
conv2d 16 kernel=3 pad=1
groupnorm 4
silu
save s2
avgpool 2
conv2d 16 kernel=3 pad=1
batchnorm eps=1e-3 momentum=0.2
silu
upsample scale=2 mode=bilinear
concat s2
conv2d 16 kernel=3 pad=1
save s3
silu
conv2d 16 kernel=3 pad=1
residual s3
convtranspose2d 8 kernel=2 stride=2
concat s1
conv2d 8 kernel=3 pad=1
batchnorm
silu
conv2d 2 kernel=1
loss mse
""",
    "conv3d": """# 3D conv net: a (1, 8, 8, 8) volume to a (1, 8, 8, 8) volume
input 1 8 8 8
conv3d 4 kernel=3 pad=1
batchnorm
silu
save s1
maxpool3d 2
conv3d 8 kernel=3 pad=2 dilation=2
groupnorm 2
silu
avgpool3d 2 stride=1
convtranspose3d 4 kernel=2
batchnorm
upsample scale=2
concat s1
conv3d 4 kernel=3 pad=1
silu
conv3d 1 kernel=1
loss mse
""",
    "conv1d": """# 1D conv net: 2 probes' time series of 32 steps to the next 32
input 2 32
conv1d 8 kernel=5 pad=2
batchnorm
silu
save s1
avgpool1d 2
conv1d 16 kernel=3 pad=2 dilation=2
groupnorm 4
silu
maxpool1d 2
conv1d 16 kernel=3 pad=1
batchnorm
silu
upsample scale=2 mode=linear
convtranspose1d 8 kernel=3 stride=2 pad=1 output_pad=1
concat s1
conv1d 2 kernel=1
loss mse
""",
}


failed = False


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    failed = failed or not ok


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 77):
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
    return p


def dataset(spec, name, shape, work):
    """STEPS * BATCH samples (normal) and their targets: the outputs of a
    teacher, the same model with PyTorch's own random initialisation, so
    that the steps learn something and move every weight."""
    rng = np.random.default_rng(40)
    x = rng.standard_normal((STEPS * BATCH,) + shape).astype(np.float32)
    torch.manual_seed(40)
    teacher, _ = spec_torch.from_spec(spec, name)
    with torch.no_grad():
        y = teacher.eval()(torch.from_numpy(x)).double().numpy()
    y = ((y - y.mean()) / y.std()).astype(np.float32)  # a first loss near 1 whatever the teacher's scale
    xp, yp = os.path.join(work, name + "_x.npy"), os.path.join(work, name + "_y.npy")
    np.save(xp, x)
    np.save(yp, y)
    return x, y, xp, yp


def torch_steps(net, loss, x, y):
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    lossf = spec_torch.loss_fn(loss)
    losses = []
    for k in range(STEPS):
        opt.zero_grad()
        out = lossf(net(torch.from_numpy(x[k * BATCH:(k + 1) * BATCH])), torch.from_numpy(y[k * BATCH:(k + 1) * BATCH]))
        out.backward()
        opt.step()
        losses.append(out.item())
    return losses


def compare(mine_path, ref_state, init):
    """(largest difference as TOL measures it, its tensor, the largest
    distance any tensor moved from its initial value)."""
    from safetensors.numpy import load_file
    mine = load_file(mine_path)
    worst, where, moved = 0.0, None, 0.0
    for k, v in ref_state.items():
        if k.endswith("num_batches_tracked") and k not in mine:
            continue
        t = v.detach().double().numpy()
        if k not in mine or mine[k].shape != t.shape:
            return float("inf"), k + " (missing or another shape)", 0.0
        d = float(np.max(np.abs(mine[k].astype(np.float64) - t) / np.maximum(1.0, np.abs(t))))
        if not d <= worst:
            worst, where = d, k
        moved = max(moved, float(np.max(np.abs(t - init[k].astype(np.float64)))))
    return worst, where, moved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps-prog", required=True, help="tests/train/surrogate_steps")
    ap.add_argument("--mpi-run", default="", help="launcher of 2 ranks, e.g. 'sh tests/lib/mpi_run.sh'; "
                    "empty: 1 rank only")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    torch.set_num_threads(1)
    print("torch %s" % torch.__version__)
    report = []
    with tempfile.TemporaryDirectory(prefix="surrogate_check.") as work:
        for name in a.models.split(","):
            spec = MODELS[name]
            path = os.path.join(work, name + ".model")
            with open(path, "w") as f:
                f.write(spec)
            net, loss = spec_torch.from_spec(spec, name + ".model")
            shape = next(tuple(int(v) for v in l.split()[1:]) for l in spec.splitlines() if l.startswith("input"))
            x, y, xp, yp = dataset(spec, name, shape, work)
            init, final1 = os.path.join(work, name + "_init.safetensors"), os.path.join(work, name + "_1.safetensors")
            common = ["--batch", str(BATCH), "--lr", repr(LR), "--momentum", repr(MOMENTUM), path, xp, yp]
            p = run([a.steps_prog, "--init", init, "--final", final1] + common)
            if p.returncode == 77:
                print("SKIP: no OpenCL device: " + p.stderr.strip())
                return 77
            check(p.returncode == 0, "%s: surrogate_steps on 1 rank (exit %d)" % (name, p.returncode))
            if p.returncode != 0:
                continue
            mine = json.loads(p.stdout)
            init_w = spec_torch.load_cltrain(net, init)
            ref = torch_steps(net, loss, x, y)
            state = net.state_dict()
            dl = max(abs(u - v) / max(1.0, abs(v)) for u, v in zip(mine["losses"], ref))
            print("  %s: %d parameters; loss %.6f -> %.6f (torch %.6f -> %.6f), largest step loss difference %.3g"
                  % (name, sum(p.numel() for p in net.parameters()), mine["losses"][0], mine["losses"][-1], ref[0],
                     ref[-1], dl))
            worst, where, moved = compare(final1, state, init_w)
            check(moved > 1000 * TOL, "%s: the %d steps move the weights (torch's by up to %.3g)" % (name, STEPS, moved))
            check(worst <= TOL, "%s, 1 rank: every tensor within %g of torch's after %d SGD steps (largest "
                  "difference %.3g, %s)" % (name, TOL, STEPS, worst, where))
            report.append((name, "1 rank", worst, where))
            # every device of this process, one replica each (PoCL and rusticl where both are)
            final_r = os.path.join(work, name + "_r.safetensors")
            p = run([a.steps_prog, "--devices", "all", "--final", final_r] + common)
            check(p.returncode == 0, "%s: surrogate_steps on every device (exit %d)" % (name, p.returncode))
            replicas = json.loads(p.stdout)["replicas"] if p.returncode == 0 else 0
            if replicas > 1:
                worst, where, _ = compare(final_r, state, init_w)
                check(worst <= TOL, "%s, 1 rank, %d replicas (PoCL and rusticl): every tensor within %g of torch's "
                      "on the whole batch (largest difference %.3g, %s)" % (name, replicas, TOL, worst, where))
                report.append((name, "%d replicas" % replicas, worst, where))
            elif p.returncode == 0:
                print("skip: %s on several replicas (one device here)" % name)
            if not a.mpi_run:
                continue
            final2 = os.path.join(work, name + "_2.safetensors")
            p = run(shlex.split(a.mpi_run) + ["2", a.steps_prog, "--final", final2] + common)
            if p.returncode == 77:
                print("skip: %s on 2 ranks (no MPI launcher)" % name)
                continue
            check(p.returncode == 0, "%s: surrogate_steps on 2 ranks (exit %d)" % (name, p.returncode))
            if p.returncode != 0:
                continue
            worst, where, _ = compare(final2, state, init_w)
            check(worst <= TOL, "%s, 2 ranks (half of each batch each): every tensor within %g of torch's on the "
                  "whole batch (largest difference %.3g, %s)" % (name, TOL, worst, where))
            report.append((name, "2 ranks", worst, where))
    print("largest differences (|cltrain - torch| / max(1, |torch|), over every element):")
    for name, how, worst, where in report:
        print("  %-8s %-11s %.3g (%s)" % (name, how, worst, where))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
