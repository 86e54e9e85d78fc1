"""data_torch_check.py DIR WHAT: the same model as cltrain's, trained in
PyTorch on the same data (tests/data/make_data's files in DIR), with the
same split (the last fraction held out), the same normalisation (the
training split's per-feature mean and population std) and the same
optimiser; prints the held-out RMSE (WHAT=reg: a linear model, MSE) or
accuracy (WHAT=cls: softmax regression, cross-entropy). The models are
linear, so both trainings reach the same optimum whatever the
initialisation and order (a cosine schedule to 0 ends both near it): the figures must agree within 1%."""
import sys

import numpy as np
import torch

d, what = sys.argv[1], sys.argv[2]
csv = sys.argv[3] if len(sys.argv) > 3 else "table.csv"
torch.manual_seed(0)
if what == "reg":
    t = np.loadtxt(f"{d}/{csv}", delimiter=",", skiprows=1 if csv == "table.csv" else 0, dtype=np.float64)
    x, y = t[:, :-1].astype(np.float32), t[:, -1:].astype(np.float32)
    frac = 0.2
else:
    x, y = np.load(f"{d}/x.npy"), np.load(f"{d}/y.npy")
    frac = 0.25
n = len(x)
nv = int(round(frac * n))
xt, yt, xv, yv = x[: n - nv], y[: n - nv], x[n - nv :], y[n - nv :]
mean, std = xt.astype(np.float64).mean(0), xt.astype(np.float64).std(0)
std[std == 0] = 1
xt = ((xt - mean) / std).astype(np.float32)
xv = ((xv - mean) / std).astype(np.float32)
model = torch.nn.Linear(x.shape[1], 1 if what == "reg" else 3)
opt = torch.optim.SGD(model.parameters(), lr=float(sys.argv[4]) if len(sys.argv) > 4 else 0.05, momentum=0.9)
loss_fn = torch.nn.MSELoss() if what == "reg" else torch.nn.CrossEntropyLoss()
X, Y = torch.tensor(xt), torch.tensor(yt if what == "reg" else yt.astype(np.int64))
# cltrain's --schedule cosine: from lr down to 0 over every step of the run
steps = 60 * ((len(X) + 31) // 32)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
for epoch in range(60):
    perm = torch.randperm(len(X))
    for i in range(0, len(X), 32):
        b = perm[i : i + 32]
        opt.zero_grad()
        loss_fn(model(X[b]), Y[b]).backward()
        opt.step()
        sched.step()
with torch.no_grad():
    out = model(torch.tensor(xv))
    if what == "reg":
        print("%.6f" % torch.sqrt(((out - torch.tensor(yv)) ** 2).mean()).item())
    else:
        print("%.6f" % (out.argmax(1).numpy() == yv).mean())
