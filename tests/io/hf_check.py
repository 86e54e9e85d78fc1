"""hf_check.py: cltrain's GPT against transformers' GPT2LMHeadModel (run by
tests/io/hf_check.sh, which finds a Python with torch and transformers).

1. A random-initialised 2-layer GPT2Config (n_embd 64, n_head 4, n_positions
   32, vocab 256), every parameter moved off its initial value so that a
   bias or norm put in the wrong place shows, saved with save_pretrained.
2. `cltrain hf import` it; on the same tokens cltrain's logits
   (tests/io/hf_logits, clt_trainer_forward) are transformers' within 1e-4 and
   the mean cross-entropy within 1e-5.
3. `cltrain hf export` the imported model; GPT2LMHeadModel.from_pretrained
   loads it with every tensor as it was, and its logits are cltrain's.
4. `cltrain eval` of the imported model on an llm.c token shard prints
   transformers' loss on the same windows (to its 4 decimals).
5. `cltrain train` the imported model a little on token shards (bytes of
   this file) and export it: in transformers its mean loss on the
   validation shard is the validation loss cltrain reported (its metrics
   file, full precision) within 1e-5; its last checkpoint exports the same.
6. Imported with a shorter context, the logits are those of the first
   positions. With reorder_and_upcast_attn (which changes only how half
   precision rounds) the logits are transformers' too. The same model saved in
   shards imports as the same model; saved as float16 and as bfloat16, as
   the float32 of those values: its logits are transformers' for them
   within 1e-4.

Exit 0 when all hold, 1 when one does not, 77 when no OpenCL device exists.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

# The tolerances of the issue. The two compute the same float32 operations
# in different orders (GEMM blocking, the softmax's and layernorm's sums):
# over two layers of width 64 logits of size ~1 differ by ~1e-6, so 1e-4
# leaves room without hiding a wrong tensor (those differ by ~1e-1).
LOGITS_TOL = 1e-4
LOSS_TOL = 1e-5

N_EMBD, N_HEAD, N_LAYER, N_POS, VOCAB = 64, 4, 2, 32, 256

failed = False


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    failed = failed or not ok


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
    return p


def cltrain_logits(args, work, prefix, x, y):
    """cltrain's logits (n, T, V) and mean loss over y for model prefix."""
    xs, ys, out = (os.path.join(work, f) for f in ("x.i32", "y.i32", "logits.f32"))
    x.astype("<i4").tofile(xs)
    y.astype("<i4").tofile(ys)
    p = run([args.logits, prefix + ".model", prefix + ".safetensors", xs, ys, out])
    if p.returncode == 77:
        print("SKIP: no OpenCL device: " + p.stderr.strip())
        sys.exit(77)
    if p.returncode != 0:
        check(False, "hf_logits ran (exit %d)" % p.returncode)
        sys.exit(1)
    _, total, labels = p.stdout.split()
    logits = np.fromfile(out, dtype="<f4").reshape(x.shape[0], x.shape[1], VOCAB)
    return logits, float(total) / int(labels)


def write_shard(path, tokens):
    """An llm.c .bin shard: 256 int32 of header (magic, version 1, count), uint16 tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def windows(tokens, T):
    """cltrain's samples of a token stream: windows of T+1 at stride T."""
    n = (len(tokens) - 1) // T
    x = np.stack([tokens[i * T:i * T + T] for i in range(n)])
    y = np.stack([tokens[i * T + 1:i * T + T + 1] for i in range(n)])
    return x, y


def load(work, name):
    return GPT2LMHeadModel.from_pretrained(os.path.join(work, name)).eval()


def devices():
    return [] if os.environ.get("CLT_DEVICES") else ["-d", "0"]


def train_and_export(args, work, prefix):
    """Train the imported model on bytes of this file, export it and compare
    the validation loss cltrain reported with transformers'."""
    with open(__file__, "rb") as f:
        text = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)
    T = N_POS
    train, val = np.resize(text, 160 * T + 1), text[-(16 * T + 1):]
    train_bin, val_bin = os.path.join(work, "train.bin"), os.path.join(work, "val.bin")
    write_shard(train_bin, train)
    write_shard(val_bin, val)
    x, y = windows(val, T)
    # cltrain eval of the imported (untrained) model on the shard: its
    # printed loss (4 decimals) is transformers' on the same windows
    p = run([args.cltrain, "eval", prefix + ".model", "--weights", prefix + ".safetensors", "--data", val_bin] +
            devices())
    check(p.returncode == 0 and "val loss" in p.stdout, "cltrain eval of the imported model on a token shard")
    if p.returncode != 0:
        return
    printed = float(p.stdout.split("val loss")[1].split()[0])
    _, hf_loss = hf_logits(load(work, "gpt2"), x, y)
    check(abs(printed - hf_loss) <= 5e-5, "imported: cltrain eval's val loss %.4f, transformers' %.7f" %
          (printed, hf_loss))

    metrics, trained = os.path.join(work, "metrics.jsonl"), os.path.join(work, "trained.safetensors")
    ckpt_dir = os.path.join(work, "ckpt")
    p = run([args.cltrain, "train", prefix + ".model", "--weights", prefix + ".safetensors", "--data", train_bin,
             "--val", val_bin, "-e", "1", "-b", "8", "-o", "adamw", "--lr", "3e-3", "--metrics", metrics,
             "-s", trained, "--checkpoint-dir", ckpt_dir, "-q"] + devices())
    check(p.returncode == 0, "cltrain train of the imported model")
    if p.returncode != 0:
        return
    with open(metrics) as f:
        epochs = [r for r in map(json.loads, f) if r["event"] == "epoch"]
    steps_loss, val_loss = epochs[-1]["loss"], epochs[-1]["test_loss"]
    out_dir = os.path.join(work, "trained")
    p = run([args.cltrain, "hf", "export", prefix + ".model", "--weights", trained, "-o", out_dir])
    check(p.returncode == 0, "cltrain hf export of the trained model")
    if p.returncode != 0:
        return
    model = load(work, "trained")
    _, hf_loss = hf_logits(model, x, y)
    uniform = float(np.log(VOCAB))  # the imported random model is about there too
    check(val_loss < uniform - 0.5, "trained: validation loss %.4f after a training loss of %.4f (uniform: %.4f)" %
          (val_loss, steps_loss, uniform))
    check(abs(hf_loss - val_loss) <= LOSS_TOL,
          "trained and exported: transformers' validation loss %.7f, cltrain's %.7f (difference %.3g)" %
          (hf_loss, val_loss, abs(hf_loss - val_loss)))
    # the checkpoint training ended with exports to the same model
    ckpts = sorted(f for f in os.listdir(ckpt_dir) if f.endswith(".safetensors"))
    p = run([args.cltrain, "hf", "export", prefix + ".model", "--weights", os.path.join(ckpt_dir, ckpts[-1]),
             "-o", os.path.join(work, "from_ckpt")])
    check(p.returncode == 0, "cltrain hf export of the last checkpoint")
    if p.returncode == 0:
        a, b = model.state_dict(), load(work, "from_ckpt").state_dict()
        check(all(torch.equal(a[k], b[k]) for k in a), "the checkpoint exports the same tensors as the saved weights")


def hf_logits(model, x, y):
    with torch.no_grad():
        logits = model(torch.tensor(x, dtype=torch.long)).logits
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), torch.tensor(y, dtype=torch.long).reshape(-1))
    return logits.numpy(), loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cltrain", required=True)
    ap.add_argument("--logits", required=True)
    args = ap.parse_args()
    print("torch %s, transformers %s" % (torch.__version__, __import__("transformers").__version__))

    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=N_EMBD, n_head=N_HEAD, n_layer=N_LAYER, n_positions=N_POS, vocab_size=VOCAB,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # biases start at 0 and norms at 1: move them all
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))

    rng = np.random.default_rng(1)
    w = rng.integers(0, VOCAB, size=(20, N_POS + 1))  # more than hf_logits' batch of 16
    x, y = w[:, :-1], w[:, 1:]
    ref_logits, ref_loss = hf_logits(model, x, y)

    with tempfile.TemporaryDirectory(prefix="hf_check.") as work:
        hf_dir = os.path.join(work, "gpt2")
        model.save_pretrained(hf_dir, safe_serialization=True)
        prefix = os.path.join(work, "imported")
        p = run([args.cltrain, "hf", "import", hf_dir, "-o", prefix])
        check(p.returncode == 0, "cltrain hf import of save_pretrained's directory")
        if p.returncode != 0:
            return 1

        out_dir = os.path.join(work, "exported")
        p = run([args.cltrain, "hf", "export", prefix + ".model", "--weights", prefix + ".safetensors",
                 "-o", out_dir])
        check(p.returncode == 0, "cltrain hf export")
        if p.returncode != 0:
            return 1
        back = GPT2LMHeadModel.from_pretrained(out_dir).eval()
        mine, theirs = back.state_dict(), model.state_dict()
        same = sorted(mine) == sorted(theirs) and all(torch.equal(mine[k], theirs[k]) for k in theirs)
        check(same, "exported: from_pretrained gives every tensor bit for bit")

        logits, loss = cltrain_logits(args, work, prefix, x, y)
        diff = float(np.abs(logits - ref_logits).max())
        check(diff <= LOGITS_TOL, "imported: logits within %g of transformers' (max difference %.3g)" %
              (LOGITS_TOL, diff))
        check(abs(loss - ref_loss) <= LOSS_TOL, "imported: loss %.7f, transformers' %.7f (difference %.3g)" %
              (loss, ref_loss, abs(loss - ref_loss)))
        back_logits, _ = hf_logits(back, x, y)
        diff = float(np.abs(back_logits - logits).max())
        check(diff <= LOGITS_TOL, "exported: transformers' logits within %g of cltrain's (max difference %.3g)" %
              (LOGITS_TOL, diff))

        train_and_export(args, work, prefix)

        # a shorter context (--context 16 of the 32 positions): causal
        # attention gives the first 16 positions' logits of the whole window
        short = os.path.join(work, "short")
        p = run([args.cltrain, "hf", "import", hf_dir, "-o", short, "--context", "16"])
        check(p.returncode == 0, "cltrain hf import --context 16")
        if p.returncode == 0:
            got, _ = cltrain_logits(args, work, short, x[:, :16], y[:, :16])
            diff = float(np.abs(got - ref_logits[:, :16]).max())
            check(diff <= LOGITS_TOL, "context 16: logits within %g of transformers' first 16 positions (max "
                  "difference %.3g)" % (LOGITS_TOL, diff))

        # reorder_and_upcast_attn only changes how half precision rounds: in
        # float32 the import takes it, and the logits are transformers'
        cfg2 = GPT2Config(**{**cfg.to_dict(), "reorder_and_upcast_attn": True})
        reordered = GPT2LMHeadModel(cfg2).eval()
        reordered.load_state_dict(model.state_dict())
        rdir = os.path.join(work, "reordered")
        reordered.save_pretrained(rdir, safe_serialization=True)
        p = run([args.cltrain, "hf", "import", rdir, "-o", rdir])
        check(p.returncode == 0, "cltrain hf import of a config with reorder_and_upcast_attn")
        if p.returncode == 0:
            want, _ = hf_logits(reordered, x, y)
            got, _ = cltrain_logits(args, work, rdir, x, y)
            diff = float(np.abs(got - want).max())
            check(diff <= LOGITS_TOL, "reorder_and_upcast_attn: logits within %g of transformers' (max difference %.3g)"
                  % (LOGITS_TOL, diff))

        # saved in shards (max_shard_size; GPT-2 XL is by default): the same model
        sharded = os.path.join(work, "sharded")
        model.save_pretrained(sharded, safe_serialization=True, max_shard_size="100KB")
        nshards = len([f for f in os.listdir(sharded) if f.endswith(".safetensors")])
        p = run([args.cltrain, "hf", "import", sharded, "-o", sharded])
        check(p.returncode == 0 and nshards > 1, "cltrain hf import of a checkpoint in %d shards" % nshards)
        if p.returncode == 0:
            got, _ = cltrain_logits(args, work, sharded, x, y)
            check(np.array_equal(got, logits), "sharded: the same logits as the whole file's")

        # saved in half precision: cltrain's logits are those of the same
        # half values in float32
        for dtype in (torch.float16, torch.bfloat16):
            name = str(dtype).split(".")[1]
            low = GPT2LMHeadModel(cfg).eval()
            low.load_state_dict(model.state_dict())
            low.to(dtype).save_pretrained(os.path.join(work, name), safe_serialization=True)
            low = low.float()
            p = run([args.cltrain, "hf", "import", os.path.join(work, name), "-o", os.path.join(work, name)])
            check(p.returncode == 0, "cltrain hf import of a %s checkpoint" % name)
            if p.returncode != 0:
                continue
            want, _ = hf_logits(low, x, y)
            got, _ = cltrain_logits(args, work, os.path.join(work, name), x, y)
            diff = float(np.abs(got - want).max())
            check(diff <= LOGITS_TOL, "%s: logits within %g of transformers' (max difference %.3g)" %
                  (name, LOGITS_TOL, diff))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
