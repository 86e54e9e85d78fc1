#!/bin/sh
# hf_cli.sh: `cltrain hf import|export` as a user meets them: the help
# texts, a bad command line (exit 2: no -o, a bad --context or --dtype,
# --tokenizer with --no-tokenizer), and a directory or model that cannot be
# converted (exit 1, naming the file and what is wrong: GPT-2's and Llama's
# configs, a spec of neither structure). The conversions themselves are
# tests/io/test_hf and test_hf_llama (in C) and tests/io/hf_check.sh and
# hf_llama_check.sh (against transformers). Needs no device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
out=$(mktemp) err=$(mktemp) dir=$(mktemp -d)
trap 'rm -rf "$out" "$err" "$dir"' EXIT

. "$srcdir/tests/lib/cli_lib.sh"

expect 0 "hf --help" -- hf --help
has "$out" "hf import DIR -o PREFIX" "hf --help shows import"
has "$out" "hf export MODEL --weights FILE -o DIR" "hf --help shows export"
expect 0 "hf import --help" -- hf import --help
has "$out" "--context" "import --help shows --context"
expect 0 "hf export --help" -- hf export --help
has "$out" "--weights" "export --help shows --weights"
has "$out" "--dtype D" "export --help shows --dtype"
has "$out" "MistralForCausalLM" "export --help names the classes"
expect 2 "hf export with a bad --dtype" -- hf export "$srcdir/examples/llama_tiny.model" --weights "$dir/w" -o "$dir/out" --dtype f8
has "$err" "--dtype must be f32, bf16 or f16, not 'f8'" "the bad dtype is named"
expect 2 "hf export with --tokenizer and --no-tokenizer" -- hf export "$srcdir/examples/llama_tiny.model" \
  --weights "$dir/w" -o "$dir/out" --tokenizer "$dir" --no-tokenizer
has "$err" "--tokenizer and --no-tokenizer" "the contradiction is named"
expect 2 "hf without a subcommand" -- hf
expect 2 "an unknown hf subcommand" -- hf frobnicate
has "$err" "frobnicate" "the unknown subcommand is named"
expect 2 "hf import without -o" -- hf import "$dir"
has "$err" "-o PREFIX" "the missing option is named"
expect 2 "hf import with a bad --context" -- hf import "$dir" -o "$dir/m" --context 0
has "$err" "--context" "the bad option is named"
expect 2 "hf export without --weights" -- hf export "$srcdir/examples/gpt_tiny.model" -o "$dir/out"
expect 1 "hf import of a directory without config.json" -- hf import "$dir" -o "$dir/m"
has "$err" "$dir/config.json" "the missing config is named"
printf '{"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 32, "vocab_size": 256, "activation_function": "relu"}\n' >"$dir/config.json"
expect 1 "hf import of an unsupported activation" -- hf import "$dir" -o "$dir/m"
has "$err" "config.json: \"activation_function\": \"relu\" is not supported" "the key and value are named"
[ ! -e "$dir/m.model" ] && [ ! -e "$dir/m.safetensors" ] && echo "ok: nothing written" ||
  { echo "FAIL: a refused import wrote files"; fail=1; }
printf '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256, "hidden_act": "gelu"}\n' >"$dir/config.json"
expect 1 "hf import of a Llama with another activation" -- hf import "$dir" -o "$dir/m"
has "$err" "config.json: \"hidden_act\": \"gelu\" is not supported" "the key and value are named"
expect 2 "hf export of a Llama to an unknown class" -- hf export "$srcdir/examples/llama_tiny.model" --weights "$dir/w" \
  -o "$dir/out" --class GemmaForCausalLM
has "$err" "'GemmaForCausalLM' is not a class hf export writes" "the class is named"
expect 1 "hf export of a model that is not GPT-2" -- hf export "$srcdir/examples/fashion_mlp.model" --weights "$dir/w.safetensors" -o "$dir/out"
has "$err" "fashion_mlp.model:2: layer 0 (input)" "the first layer that does not fit is named"
exit $fail
