#!/bin/sh
# llama_cli.sh: Llama-family models through the tool. `cltrain summary`
# prints SmolLM2-135M's parameter count (134,515,008), the memory it needs
# and the tensors weight decay applies to; the attention options that do
# not fit are refused where they are written (an unsupported rope_scaling
# by name, kv_heads that do not divide heads, llama3's numbers missing or
# given alone, a bias= word, a rotary embedding over odd heads);
# --betas and --eps reach the optimizer (a checkpoint's record of it) and
# are refused with an optimizer that does not read them; a tiny Llama
# trains on bytes with a targets shard, and a shard that is not aligned
# with its tokens is refused naming it.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
. "$srcdir/tests/lib/cli_lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err fail=0
need_python "a checkpoint's header and write a targets shard"

# ---- summary ----
expect 0 "summary of SmolLM2-135M's shape" -- summary "$srcdir/examples/smollm2_135m.model" -b 1 -o adamw
has "$out" "total parameters: 134515008 (134.5M, " "SmolLM2-135M has 134.5M parameters"
has "$out" "attention 9 heads 3 kv rope 100000 no-bias" "its attention is described"
has "$out" "swiglu 1536  *(2048, 576)  *2654208  q\?.*gate_proj up_proj down_proj" "swiglu's matrices decay"
has "$out" "q_proj k_proj v_proj o_proj" "attention's projections decay"
has "$out" "linear 49152 no-bias tied .* - (tied)" "the tied output does not decay"
has "$out" ": 106168320 of the 134515008 parameters" "the decayed parameters counted: attention and MLP matrices"
has "$out" "activations  *[0-9.]* GiB" "the memory it needs at batch 1"
has "$out" "optimizer state  *1.0 GiB" "AdamW's state: two floats a parameter"
expect 0 "summary of the tiny Llama, --decay-all" -- summary "$srcdir/examples/llama_tiny.model" -o adamw --decay-all
has "$out" "total parameters: 918144 " "the tiny Llama's parameters"
has "$out" "linear 2048 no-bias  *(128, 2048)  *262144  weight" "its untied head decays"
has "$out" "rmsnorm eps=1e-05 .* -$" "rmsnorm's weight does not"
has "$out" "(--decay-all: adamw's decoupled weight decay applies to every parameter)" "--decay-all is said"

# ---- spec errors ----
spec_error() { # WHAT LINE MESSAGE
  printf 'input tokens 8 vocab=16\nembedding 8\n%b\n' "$2" >"$tmp/bad.model"
  if expect 1 "$1" -- summary "$tmp/bad.model"; then has "$err" "$3" "$1: the message"; fi
  has "$err" "bad.model:[34]:" "$1: the line"
}
spec_error "rope_scaling=linear" "attention heads=2 rope_theta=10000 rope_scaling=linear factor=2" \
  "rope_scaling=linear is not supported: cltrain implements rope_scaling=llama3"
spec_error "kv_heads not dividing heads" "attention heads=4 kv_heads=3" "kv_heads=3 must divide heads=4"
spec_error "llama3 without its factor" \
  "attention heads=2 rope_theta=10000 rope_scaling=llama3 low_freq_factor=1 high_freq_factor=4 original_max_position_embeddings=64" \
  "rope_scaling=llama3 needs factor="
spec_error "llama3's numbers without rope_scaling" "attention heads=2 rope_theta=10000 factor=8" \
  "factor= is an option of rope_scaling=llama3"
spec_error "rope_scaling without rope_theta" \
  "attention heads=2 rope_scaling=llama3 factor=8 low_freq_factor=1 high_freq_factor=4 original_max_position_embeddings=64" \
  "give rope_theta= too"
spec_error "bias=maybe" "attention heads=2 bias=maybe" "attention's bias= is all, none, qkv"
spec_error "rope over heads of 3" "linear 6\\nattention heads=2 rope_theta=10000" "head width 3 must be even"
spec_error "swiglu without its width" "swiglu" "swiglu needs the hidden width"

# ---- the optimizer's settings ----
expect 2 "--betas with sgd" -- train "$srcdir/examples/llama_tiny.model" -o sgd --betas 0.9,0.95
has "$err" "--betas sets what sgd does not use: it is for adam, adamw, lion" "--betas with sgd: the message"
expect 2 "--eps with lion" -- train "$srcdir/examples/llama_tiny.model" -o lion --eps 1e-6
has "$err" "--eps sets what lion does not use: it is for adam, adamw" "--eps with lion: the message"
expect 2 "--betas of one number" -- train "$srcdir/examples/llama_tiny.model" -o adamw --betas 0.9
has "$err" "--betas must be two numbers" "--betas of one number: the message"

# ---- a tiny Llama on bytes, fine-tuned on masked targets ----
cat >"$tmp/llama.model" <<'SPEC'
input tokens 16 vocab=256
embedding 32
block repeat=2
  rmsnorm
  attention heads=4 kv_heads=2 rope_theta=10000 rope_scaling=llama3 factor=8 low_freq_factor=1 high_freq_factor=4 original_max_position_embeddings=8 bias=qkv
  residual
  rmsnorm
  swiglu 64
  residual
end
rmsnorm
linear 256 bias=false
SPEC
head -c 6000 "$srcdir/README.md" >"$tmp/text"
expect 0 "tokenize some text" -- tokenize "$tmp/text" -o "$tmp/train.bin"
# Targets: every third token masked; and the same shifted by one (misaligned).
"$py" - "$tmp/train.bin" "$tmp/train.targets" "$tmp/shifted.targets" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
tok = struct.unpack("<%dH" % ((len(data) - 1024) // 2), data[1024:])
t = [-1 if i % 3 == 0 else v for i, v in enumerate(tok)]
for path, vals in ((sys.argv[2], t), (sys.argv[3], t[-1:] + t[:-1])):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20250301, 1, len(vals), *([0] * 253)))
        f.write(struct.pack("<%di" % len(vals), *vals))
PY
train="train $tmp/llama.model --data $tmp/train.bin --val none -d 0 -q -b 8 --max-steps 3 --log-every 1"
expect 0 "train on masked targets with --betas and --eps" -- $train --targets "$tmp/train.targets" -o adamw \
  --betas 0.8,0.95 --eps 1e-6 --checkpoint-every 3 --checkpoint-dir "$tmp/ck" --metrics "$tmp/m.jsonl"
ckpt=$(ls "$tmp"/ck/*.safetensors 2>/dev/null | head -n 1)
if [ -n "$ckpt" ] && "$py" - "$ckpt" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; meta = json.loads(f.read(n))["__metadata__"]
o = next(json.loads(v) for k, v in meta.items() if "beta2" in v)
o = o.get("optimizer", o)
sys.exit(0 if (o["kind"], o["beta1"], o["beta2"], o["eps"]) == ("adamw", 0.8, 0.95, 1e-6) else print(o) or 1)
PY
then echo "ok: the checkpoint records adamw with betas 0.8, 0.95 and eps 1e-6"
else echo "FAIL: no checkpoint in $tmp/ck records --betas 0.8,0.95 --eps 1e-6"; fail=1; fi
has "$tmp/m.jsonl" '"loss"' "the steps' losses are recorded"
expect 1 "a targets shard shifted by one" -- $train --targets "$tmp/shifted.targets"
has "$err" "shifted.targets: target 0 is" "the misaligned shard is named, with the index"
expect 2 "--targets on a model that takes no tokens" -- train "$srcdir/examples/fashion_mlp.model" --targets "$tmp/train.targets" -d 0
has "$err" "--targets goes with a language model's token files" "--targets without tokens: the message"
exit $fail
