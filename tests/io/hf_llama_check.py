"""hf_llama_check.py: `cltrain hf import` and `hf export` of the Llama
family against transformers itself (run by tests/io/hf_llama_check.sh,
which finds a Python with torch, transformers and safetensors).

For each of a LlamaForCausalLM (grouped-query attention, an untied head,
rope_scaling llama3), a Qwen2ForCausalLM (q, k and v biases, tied) and a
MistralForCausalLM (multi-query, a sliding window as long as the context),
random-initialised with every parameter moved off its initial value
(tests/lib/hf_llama_models.py), saved with save_pretrained beside a small
tokenizer (tokenizers' WordLevel, saved by PreTrainedTokenizerFast):

1. `cltrain hf import`: on 4 windows of 32 tokens, some targets masked,
   cltrain's logits (tests/io/hf_logits) are transformers' within 1e-4 and
   the mean loss over the targets that count within 1e-5.
2. `cltrain hf export` (the class, and the tokenizer's directory, as the
   import recorded them): from_pretrained loads every tensor bit for bit,
   its logits are cltrain's within 1e-4, config.json names the class (and
   Llama's rope_scaling), and AutoTokenizer loads the copied tokenizer,
   which encodes a text as the original does.
3. `--dtype bf16` and `--dtype f16`: every tensor is torch's own rounding of
   the float32 one (round to nearest even), bit for bit, and config.json's
   torch_dtype says which.
4. The same model saved in shards (max_shard_size) imports as the whole
   file does, bit for bit; saved in bfloat16, as the float32 of those
   values (torch's bfloat16 -> float32 of the whole file's import), and its
   logits are transformers' for those values within 1e-4.

Exit 0 when all hold, 1 when one does not, 77 when no OpenCL device exists.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.numpy import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import hf_llama_models as M  # noqa: E402

# The tolerances of issue 36: both sides compute the same float32
# operations in different orders (GEMM blocking, the softmax's and the
# norms' sums), ~1e-6 apart here; a wrong tensor is off by ~1e-1.
LOGITS_TOL = 1e-4
LOSS_TOL = 1e-5
BATCH = 4
TEXT = "the model reads the text and the tokenizer splits it into words"

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


def save_tokenizer(path):
    """A WordLevel tokenizer over the words of TEXT (and a few specials)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    words = ["<unk>", "<s>", "</s>"] + sorted(set(TEXT.split()))
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(path)
    return fast


def cltrain_logits(args, work, prefix, x, y):
    """cltrain's logits (n, T, V) and summed loss over y for model prefix;
    None when there is no device (the caller exits 77)."""
    xs, ys, out = (os.path.join(work, f) for f in ("x.i32", "y.i32", "logits.f32"))
    x.astype("<i4").tofile(xs)
    y.astype("<i4").tofile(ys)
    p = run([args.logits, prefix + ".model", prefix + ".safetensors", xs, ys, out])
    if p.returncode == 77:
        print("SKIP: no OpenCL device: " + p.stderr.strip())
        sys.exit(77)
    if p.returncode != 0:
        check(False, "hf_logits of %s ran (exit %d)" % (prefix, p.returncode))
        return None, None
    _, total, _ = p.stdout.split()
    return np.fromfile(out, dtype="<f4").reshape(x.shape[0], x.shape[1], M.VOCAB), float(total)


def hf_logits(model, x, y):
    with torch.no_grad():
        logits = model(torch.tensor(x, dtype=torch.long)).logits.float()
        loss = F.cross_entropy(logits.reshape(-1, M.VOCAB), torch.tensor(y, dtype=torch.long).reshape(-1),
                               ignore_index=M.IGNORE)
    return logits.numpy(), loss.item()


def export(args, label, prefix, out, *extra):
    p = run([args.cltrain, "hf", "export", prefix + ".model", "--weights", prefix + ".safetensors", "-o", out] +
            list(extra))
    check(p.returncode == 0, "%s: cltrain hf export %s" % (label, " ".join(extra)))
    return p.returncode == 0


def check_class(args, work, label):
    torch.manual_seed(0)
    model, how = M.make(label)
    M.move_off_init(model)
    model.eval()
    print("%s: %s" % (label, how))
    cls = M.CLASSES[label].__name__
    hf_dir, prefix = os.path.join(work, label), os.path.join(work, label + "-imported")
    M.save(label, model, hf_dir)
    tokenizer = save_tokenizer(hf_dir)
    x, y = M.batches(__file__, 1, BATCH)
    x, y = x[0], y[0]
    counted = int(np.sum(y != M.IGNORE))
    ref_logits, ref_loss = hf_logits(model, x, y)

    # 1. import: the same logits and loss
    p = run([args.cltrain, "hf", "import", hf_dir, "-o", prefix])
    check(p.returncode == 0 and "(%s)" % cls in p.stdout, "%s: cltrain hf import says %s" % (label, cls))
    if p.returncode != 0:
        return
    mine, loss_sum = cltrain_logits(args, work, prefix, x, y)
    if mine is None:
        return
    d = float(np.abs(mine - ref_logits).max())
    check(d <= LOGITS_TOL, "%s: imported, logits within %g of transformers' (largest difference %.3g)" %
          (label, LOGITS_TOL, d))
    my_loss = loss_sum / counted
    check(abs(my_loss - ref_loss) <= LOSS_TOL, "%s: the mean loss over %d targets %.7f, transformers' %.7f "
          "(difference %.3g)" % (label, counted, my_loss, ref_loss, abs(my_loss - ref_loss)))

    # 2. export (class and tokenizer as recorded): from_pretrained gives the same model
    out = os.path.join(work, label + "-exported")
    if export(args, label, prefix, out):
        back, cfg = M.load(label, out)
        a, b = back.state_dict(), model.state_dict()
        same = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in b)
        check(same, "%s: exported, from_pretrained gives every tensor bit for bit" % label)
        check(cfg["architectures"] == [cls] and cfg["torch_dtype"] == "float32",
              "%s: config.json names %s, float32" % (label, cls))
        if label == "llama":
            check(cfg.get("rope_scaling") == M.LLAMA3, "llama: config.json has the llama3 rope_scaling: %s" %
                  cfg.get("rope_scaling"))
        back_logits, _ = hf_logits(back, x, y)
        d = float(np.abs(back_logits - mine).max())
        check(d <= LOGITS_TOL, "%s: exported, transformers' logits within %g of cltrain's (largest %.3g)" %
              (label, LOGITS_TOL, d))
        tok = transformers.AutoTokenizer.from_pretrained(out)
        ids = [(cfg.get(k), getattr(model.config, k)) for k in ("bos_token_id", "eos_token_id")]
        check(tok(TEXT)["input_ids"] == tokenizer(TEXT)["input_ids"] and all(a == b for a, b in ids),
              "%s: the copied tokenizer loads and encodes as the original (%d files; bos and eos ids %s as in the "
              "model's config)" % (label, len([f for f in os.listdir(out) if "token" in f]), [a for a, _ in ids]))

    # 3. bf16 and f16: torch's own rounding of each tensor
    for dtype, flag in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        out = os.path.join(work, "%s-%s" % (label, flag))
        if not export(args, label, prefix, out, "--dtype", flag, "--no-tokenizer"):
            continue
        back, cfg = M.load(label, out, torch_dtype=dtype)
        a, b = back.state_dict(), model.state_dict()
        same = all(a[k].dtype == dtype and torch.equal(a[k], b[k].to(dtype)) for k in b)
        check(same and cfg["torch_dtype"] == str(dtype).split(".")[1] and not os.path.exists(
            os.path.join(out, "tokenizer.json")), "%s: --dtype %s: every tensor is torch's %s of the float32 one, "
              "bit for bit" % (label, flag, dtype))

    # 4. shards, and bfloat16 files
    whole = load_file(prefix + ".safetensors")
    sharded = os.path.join(work, label + "-sharded")
    M.save(label, model, sharded, max_shard_size="40KB")
    shards = len([f for f in os.listdir(sharded) if f.endswith(".safetensors")])
    p = run([args.cltrain, "hf", "import", sharded, "-o", sharded])
    if p.returncode == 0:
        got = load_file(sharded + ".safetensors")
        check(shards > 1 and sorted(got) == sorted(whole) and all(np.array_equal(got[k], whole[k]) for k in whole),
              "%s: saved in %d shards, imports as the whole file, bit for bit" % (label, shards))
    else:
        check(False, "%s: cltrain hf import of %d shards" % (label, shards))
    low = os.path.join(work, label + "-bf16")
    M.save(label, model.to(torch.bfloat16), low)
    model.float()
    p = run([args.cltrain, "hf", "import", low, "-o", low])
    check(p.returncode == 0, "%s: cltrain hf import of a bfloat16 checkpoint" % label)
    if p.returncode == 0:
        got = load_file(low + ".safetensors")
        want = {k: torch.from_numpy(v).to(torch.bfloat16).float().numpy() for k, v in whole.items()}
        check(all(np.array_equal(got[k], want[k]) for k in want),
              "%s: bfloat16 imports as the float32 of those values, bit for bit" % label)
        rounded, _ = M.load(label, low)
        rounded.float()
        want_logits, _ = hf_logits(rounded, x, y)
        mine, _ = cltrain_logits(args, work, low, x, y)
        if mine is not None:
            d = float(np.abs(mine - want_logits).max())
            check(d <= LOGITS_TOL, "%s: bfloat16, logits within %g of transformers' for those values (largest %.3g)"
                  % (label, LOGITS_TOL, d))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cltrain", required=True)
    ap.add_argument("--logits", required=True, help="tests/io/hf_logits")
    args = ap.parse_args()
    print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="hf_llama_check.") as work:
        for label in M.LABELS:
            check_class(args, work, label)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
