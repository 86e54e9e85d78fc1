"""llama_check.py: cltrain's Llama-family models against transformers'
own, through `cltrain hf import` (run by tests/train/llama_check.sh, which
finds a Python with torch, transformers and safetensors).

For each of a LlamaForCausalLM (grouped-query attention, an untied head,
rope_scaling llama3), a Qwen2ForCausalLM (q, k and v biases, tied) and a
MistralForCausalLM (multi-query, untied), as tests/lib/hf_llama_models.py
makes them (random-initialised, every parameter moved off its initial
value), saved with save_pretrained and imported with `cltrain hf import`
(whose weights must be transformers' tensors, bit for bit, under the names
of the spec's layers: the spec's layers are transformers' one for one,
tensor for tensor), and:

1. on 4 windows of 32 tokens, some targets masked (PyTorch's ignore_index
   -100, cltrain's CLT_IGNORE_LABEL), cltrain's logits are transformers'
   within 1e-4 and the mean cross-entropy over the targets that count
   within 1e-5 (tests/io/hf_logits, clt_trainer_forward);
2. at those weights every parameter's gradient (clt_trainer_gradient,
   tests/train/torch_steps) is torch's within 1e-4 relative (its norm);
3. 20 AdamW steps on 20 such batches (lr 3e-3, betas (0.9, 0.95), eps
   1e-8, weight decay 0.1 on the matrices of the attention, the MLP and an
   untied head, as cltrain decays by default; never on embeddings, norms or
   biases): every step's loss within 1e-4 relative of torch's
   torch.optim.AdamW, and every parameter after them within 1e-4.

The same steps on 2 ranks, with --zero 2, --pipeline 2 and on PoCL with
rusticl are tests/train/llama_ranks.sh's, against one device.

Prints the largest differences. Exit 0 when all hold, 1 when one does not,
77 when no OpenCL device exists.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import hf_llama_models as M  # noqa: E402

# The tolerances of issue 36. Both sides compute the same float32
# operations in different orders (GEMM blocking, the softmax's and the
# norms' sums); a wrong tensor, rotation or group is off by far more (1e-1).
LOGITS_TOL = 1e-4  # absolute
LOSS_TOL = 1e-5    # absolute, the mean loss
GRAD_TOL = 1e-4    # relative per tensor
STEP_TOL = 1e-4    # relative, each step's loss
WEIGHT_TOL = 1e-4  # absolute, each parameter after the steps
# AdamW's first step moves a parameter by lr g / (|g| + eps): where the
# gradient g is itself within a hundred eps of zero (1e-6, against a median
# of 1e-3 here), it is rounding (each side sums ~10^2 products of 1e-4 in
# its own order, 1e-9 apart) and so is the step's size, up to lr. Measured:
# one element of 74,176 (a down_proj weight whose gradient is 1.2e-8 in
# torch, 9.7e-9 in cltrain) ends 1.4e-4 away, from step 1 on; every other
# one within 4e-6. Such elements are left out of the weights' comparison,
# checked to be within lr, and to be few (at most 1 in 10,000).
TINY_GRAD = 1e-6

VOCAB, T, LAYERS, IGNORE = M.VOCAB, M.T, M.LAYERS, M.IGNORE
BATCH, STEPS = 4, 20
LR, BETA1, BETA2, EPS, WD = 3e-3, 0.9, 0.95, 1e-8, 0.1

failed = False


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    failed = failed or not ok


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
    return p


def names(model, tied):
    """transformers' parameter name -> the cltrain weights file's: layer i
    of the spec (the input line is 0) is "i - 1." and its tensor's name."""
    out = {"model.embed_tokens.weight": "0.weight"}
    for b in range(M.LAYERS):
        base = 1 + 6 * b  # the block's first line, rmsnorm, is layer base + 1
        hf = "model.layers.%d." % b
        out[hf + "input_layernorm.weight"] = "%d.weight" % base
        for p in ("q", "k", "v", "o"):
            out[hf + "self_attn.%s_proj.weight" % p] = "%d.%s_proj.weight" % (base + 1, p)
            out[hf + "self_attn.%s_proj.bias" % p] = "%d.%s_proj.bias" % (base + 1, p)
        out[hf + "post_attention_layernorm.weight"] = "%d.weight" % (base + 3)
        for p in ("gate", "up", "down"):
            out[hf + "mlp.%s_proj.weight" % p] = "%d.%s_proj.weight" % (base + 4, p)
    out["model.norm.weight"] = "%d.weight" % (1 + 6 * LAYERS)
    if not tied:
        out["lm_head.weight"] = "%d.weight" % (2 + 6 * LAYERS)
    return {n: out[n] for n, _ in model.named_parameters()}


def torch_loss(model, x, y):
    logits = model(torch.tensor(x, dtype=torch.long)).logits
    return F.cross_entropy(logits.reshape(-1, VOCAB), torch.tensor(y, dtype=torch.long).reshape(-1),
                           ignore_index=IGNORE), logits


def adamw(model):
    """torch's AdamW with cltrain's default grouping: decay on the 2-D
    matrices but the token embedding (an untied head decays; a tied one is
    the embedding)."""
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed_tokens" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed_tokens" not in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}], lr=LR,
                             betas=(BETA1, BETA2), eps=EPS)


def check_model(label, model, work, args):
    M.move_off_init(model)
    model.train()  # no dropout in these models: training computes what evaluation does
    tied = model.config.tie_word_embeddings
    where = names(model, tied)
    hf_dir, prefix = os.path.join(work, label), os.path.join(work, label + "-imported")
    M.save(label, model, hf_dir)
    p = run([args.cltrain, "hf", "import", hf_dir, "-o", prefix])
    check(p.returncode == 0, "%s: cltrain hf import" % label)
    if p.returncode != 0:
        return 1
    spec_path, w_path = prefix + ".model", prefix + ".safetensors"
    mine = load_file(w_path)
    same = sorted(mine) == sorted(where.values()) and all(
        np.array_equal(mine[where[n]], p.detach().numpy()) for n, p in model.named_parameters())
    check(same, "%s: the imported weights are transformers' tensors, bit for bit, under the spec's layers" % label)
    x, y = M.batches(__file__, STEPS, BATCH)
    xs, ys = os.path.join(work, label + ".x.i32"), os.path.join(work, label + ".y.i32")

    # 1. logits and loss on the first batch
    x[0].astype("<i4").tofile(xs)
    y[0].astype("<i4").tofile(ys)
    out = os.path.join(work, label + ".logits")
    p = run([args.logits, spec_path, w_path, xs, ys, out])
    if p.returncode == 77:
        print("SKIP: no OpenCL device: " + p.stderr.strip())
        return 77
    check(p.returncode == 0, "%s: hf_logits ran" % label)
    if p.returncode != 0:
        return 1
    _, loss_sum, labels = p.stdout.split()
    mine = np.fromfile(out, dtype="<f4").reshape(BATCH, T, VOCAB)
    with torch.no_grad():
        ref_loss, ref_logits = torch_loss(model, x[0], y[0])
    counted = int(np.sum(y[0] != IGNORE))
    d = float(np.abs(mine - ref_logits.numpy()).max())
    check(d <= LOGITS_TOL, "%s: logits within %g of transformers' (largest difference %.3g)" % (label, LOGITS_TOL, d))
    my_loss = float(loss_sum) / counted
    check(abs(my_loss - ref_loss.item()) <= LOSS_TOL,
          "%s: the mean loss over the %d targets that count (of %s) %.7f, transformers' %.7f (difference %.3g)" %
          (label, counted, labels, my_loss, ref_loss.item(), abs(my_loss - ref_loss.item())))

    # 2. and 3. the gradient, then 20 AdamW steps
    x.astype("<i4").tofile(xs)
    y.astype("<i4").tofile(ys)
    grad, final = os.path.join(work, label + ".grad"), os.path.join(work, label + ".final")
    p = run([args.steps, "--batch", str(BATCH), "--lr", repr(LR), "--beta1", repr(BETA1), "--beta2", repr(BETA2),
             "--eps", repr(EPS), "--weight-decay", repr(WD), "--save", final, spec_path, w_path, xs, ys, grad])
    check(p.returncode == 0, "%s: torch_steps ran (exit %d)" % (label, p.returncode))
    if p.returncode != 0:
        return 1
    steps = json.loads(p.stdout)
    my_grad = load_file(grad)
    model.zero_grad()
    torch_loss(model, x[0], y[0])[0].backward()
    tiny = {n: prm.grad.abs().numpy() < TINY_GRAD for n, prm in model.named_parameters()}
    worst, worst_name = 0.0, None
    for n, prm in model.named_parameters():
        g_t = prm.grad.double().numpy()
        g_c = my_grad[where[n]].astype(np.float64)
        r = np.linalg.norm(g_c - g_t) / np.linalg.norm(g_t)
        if not r <= worst:
            worst, worst_name = r, n
    check(worst <= GRAD_TOL, "%s: every parameter's gradient within %g relative of torch's (largest %.3g, %s)" %
          (label, GRAD_TOL, worst, worst_name))
    opt, ref = adamw(model), []
    for k in range(STEPS):
        opt.zero_grad()
        loss = torch_loss(model, x[k], y[k])[0]
        loss.backward()
        opt.step()
        ref.append(loss.item())
    rel = [abs(a - b) / b for a, b in zip(steps["losses"], ref)]
    k = int(np.argmax(rel))
    check(len(steps["losses"]) == STEPS and max(rel) <= STEP_TOL,
          "%s: %d AdamW steps, every loss within %g relative of torch's (from %.4f to %.4f; largest %.3g, step %d)" %
          (label, STEPS, STEP_TOL, ref[0], ref[-1], rel[k], k + 1))
    check(ref[-1] < ref[0] - 0.3, "%s: the steps train (torch's loss from %.4f to %.4f)" % (label, ref[0], ref[-1]))
    my_w = load_file(final)
    worst, worst_name, noise, excused, elements = 0.0, None, 0.0, 0, 0
    for n, prm in model.named_parameters():
        dw = np.abs(my_w[where[n]].astype(np.float64) - prm.detach().double().numpy())
        elements += dw.size
        excused += int(np.sum(tiny[n] & (dw > WEIGHT_TOL)))
        noise = max(noise, float(dw[tiny[n]].max()) if tiny[n].any() else 0.0)
        dw[tiny[n]] = 0
        if not dw.max() <= worst:
            worst, worst_name = float(dw.max()), n
    check(worst <= WEIGHT_TOL, "%s: every parameter after the steps within %g of torch's (largest %.3g, %s)" %
          (label, WEIGHT_TOL, worst, worst_name))
    check(noise <= LR and excused * 10000 <= elements,
          "%s: %d of %d elements whose first gradient is below %g (rounding, which sets AdamW's first step) end "
          "%.3g away, within the learning rate" % (label, excused, elements, TINY_GRAD, noise))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cltrain", required=True)
    ap.add_argument("--logits", required=True, help="tests/io/hf_logits")
    ap.add_argument("--steps", required=True, help="tests/train/torch_steps")
    args = ap.parse_args()
    print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="llama_check.") as work:
        for label in M.LABELS:
            torch.manual_seed(0)
            model, how = M.make(label)
            print("%s: %s" % (label, how))
            rc = check_model(label, model, work, args)
            if rc:
                return rc
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
