#!/bin/sh
# tokenize_cli.sh: `cltrain tokenize --tokenizer` and `cltrain generate
# --tokenizer` as a user meets them: shards of a SentencePiece-style and a
# byte-level tokenizer (tests/text's fixtures) with BOS and EOS as the
# tokenizer says and as --bos/--eos ask, one document a file; the uint32
# shard when the vocabulary is larger than uint16; a tiny GPT over 3006
# tokens trained for two steps and sampled; and the mistakes, each refused
# naming the file or option: a missing tokenizer, a component cltrain does
# not read, an NFC normalizer (Qwen2's: no Unicode normalization, said so),
# --bos without a tokenizer, an EOS no file names, a model whose
# vocabulary is smaller than the tokenizer's.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
out=$(mktemp) err=$(mktemp) tmp=$(mktemp -d)
trap 'rm -rf "$out" "$err" "$tmp"' EXIT
. "$srcdir/tests/lib/cli_lib.sh"
spm=$srcdir/tests/text/spm bl=$srcdir/tests/text/bytelevel

# the shard's header words and tokens, as unsigned numbers
header() { od -An -tu4 -N12 "$1" | awk '{ print $1, $2, $3 }'; }
tokens() { od -An -v -tu$2 -j1024 "$1" | tr -s ' ' '\n' | sed '/^$/d'; }

printf 'Hello world.\n' >"$tmp/a.txt"
printf 'Second document, with 123 numbers!\n' >"$tmp/b.txt"
expect 0 "tokenize with a SentencePiece-style tokenizer.json" -- tokenize "$tmp/a.txt" "$tmp/b.txt" -o "$tmp/s.bin" \
  --tokenizer "$spm"
has "$out" "tokens ($spm/tokenizer.json; vocabulary 3006) to $tmp/s.bin" "the summary names the tokenizer"
tokens "$tmp/s.bin" 2 >"$tmp/s.txt"
[ "$(header "$tmp/s.bin" | cut -d' ' -f1,2)" = "20240520 1" ] && echo "ok: a uint16 shard" ||
  { echo "FAIL: not a uint16 shard: $(header "$tmp/s.bin")"; fail=1; }
[ "$(grep -c '^1$' "$tmp/s.txt")" = 2 ] && [ "$(head -1 "$tmp/s.txt")" = 1 ] &&
  echo "ok: each document starts with <s> (add_bos_token)" ||
  { echo "FAIL: not one <s> a document: $(tr '\n' ' ' <"$tmp/s.txt")"; fail=1; }
grep -q '^2$' "$tmp/s.txt" && { echo "FAIL: </s> without add_eos_token"; fail=1; }
expect 0 "--no-bos --eos" -- tokenize "$tmp/a.txt" "$tmp/b.txt" -o "$tmp/e.bin" --tokenizer "$spm" --no-bos --eos -q
tokens "$tmp/e.bin" 2 >"$tmp/e.txt"
[ "$(grep -c '^2$' "$tmp/e.txt")" = 2 ] && [ "$(tail -1 "$tmp/e.txt")" = 2 ] && ! grep -q '^1$' "$tmp/e.txt" &&
  [ "$(wc -l <"$tmp/e.txt")" = "$(wc -l <"$tmp/s.txt")" ] && echo "ok: </s> ends each document, no <s>" ||
  { echo "FAIL: --no-bos --eos gave $(tr '\n' ' ' <"$tmp/e.txt")"; fail=1; }
expect 0 "a byte-level tokenizer.json, with a validation split" -- tokenize "$tmp/a.txt" "$tmp/b.txt" \
  -o "$tmp/t.bin" --tokenizer "$bl/tokenizer.json" --eos --val-fraction 0.25 --val-output "$tmp/v.bin"
has "$out" "validation tokens" "the validation shard is written"
[ "$(tokens "$tmp/v.bin" 2 | tail -1)" = 0 ] && echo "ok: <|endoftext|> ends the text" ||
  { echo "FAIL: the last token is not <|endoftext|>"; fail=1; }

# ids beyond uint16: the uint32 shard (llm.c's LLaMA-3 format)
cat >"$tmp/big.json" <<'JSON'
{"version": "1.0", "added_tokens": [{"id": 70000, "content": "<|big|>", "special": true}],
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
 "decoder": {"type": "ByteLevel"},
 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<|big|>": 70000}, "merges": ["a b"]}}
JSON
printf 'abab<|big|>a' >"$tmp/big.txt"
expect 0 "a vocabulary beyond uint16" -- tokenize "$tmp/big.txt" -o "$tmp/big.bin" --tokenizer "$tmp/big.json"
[ "$(header "$tmp/big.bin")" = "20240801 7 4" ] && [ "$(tokens "$tmp/big.bin" 4 | tr '\n' ' ')" = "2 2 70000 0 " ] &&
  echo "ok: a uint32 shard of ab ab <|big|> a" ||
  { echo "FAIL: $(header "$tmp/big.bin") / $(tokens "$tmp/big.bin" 4 | tr '\n' ' ')"; fail=1; }

# mistakes
expect 1 "a missing tokenizer" -- tokenize "$tmp/a.txt" -o "$tmp/x.bin" --tokenizer "$tmp/nowhere"
has "$err" "$tmp/nowhere: No such file or directory" "the path is named"
sed 's/"type": "ByteLevel", "add_prefix_space": false, "use_regex": true/"type": "Whitespace"/' \
  "$tmp/big.json" >"$tmp/ws.json"
expect 1 "a pre-tokenizer cltrain does not read" -- tokenize "$tmp/a.txt" -o "$tmp/x.bin" --tokenizer "$tmp/ws.json"
has "$err" "$tmp/ws.json: pre_tokenizer type \"Whitespace\" is not supported" "the file and the component are named"
sed 's/"pre_tokenizer":/"normalizer": {"type": "NFC"}, "pre_tokenizer":/' "$tmp/big.json" >"$tmp/nfc.json"
expect 1 "an NFC normalizer (Qwen2's)" -- tokenize "$tmp/a.txt" -o "$tmp/x.bin" --tokenizer "$tmp/nfc.json"
has "$err" "$tmp/nfc.json: normalizer type \"NFC\" is not supported: cltrain has no Unicode normalization" \
  "the file, the component and the reason are named"
expect 1 "--eos where no EOS is known" -- tokenize "$tmp/a.txt" -o "$tmp/x.bin" --tokenizer "$tmp/big.json" --eos
has "$err" "no EOS token is known" "the reason is given"
expect 2 "--bos without a tokenizer" -- tokenize "$tmp/a.txt" -o "$tmp/x.bin" --bos
has "$err" "need --tokenizer" "the reason is given"
[ -e "$tmp/x.bin" ] && { echo "FAIL: a refused command wrote $tmp/x.bin"; fail=1; }

# generate through the tokenizer: a tiny GPT over its 3006 tokens
if "$CLTRAIN" devices >/dev/null 2>&1; then
  tiny_gpt_spec | sed 's/vocab=256/vocab=3006/; s/linear 256/linear 3006/' >"$tmp/gpt.model"
  i=0
  while [ $i -lt 40 ]; do cat "$srcdir/README.md"; i=$((i + 1)); done | head -c 60000 >"$tmp/text.txt"
  expect 0 "tokenize the GPT's text" -- tokenize "$tmp/text.txt" -o "$tmp/train.bin" --tokenizer "$spm" -q
  expect 0 "train the GPT two steps" -- train "$tmp/gpt.model" --data "$tmp/train.bin" --devices 0 --max-steps 2 \
    --batch 4 --save "$tmp/w.safetensors" --quiet
  expect 0 "generate with the tokenizer" -- generate "$tmp/gpt.model" --weights "$tmp/w.safetensors" \
    --tokenizer "$spm" --prompt "Hello world" --tokens 12 --devices 0
  head -c 11 "$out" | grep -q '^Hello world$' && [ "$(wc -c <"$out")" -gt 13 ] && echo "ok: the prompt, then text" ||
    { echo "FAIL: generate printed: $(cat "$out")"; fail=1; }
  expect 1 "the GPT without its tokenizer" -- generate "$tmp/gpt.model" --weights "$tmp/w.safetensors" --devices 0
  has "$err" "needs a byte-level model" "the reason is given"
  sed 's/vocab=3006/vocab=1000/; s/linear 3006/linear 1000/' "$tmp/gpt.model" >"$tmp/small.model"
  expect 1 "a model smaller than the tokenizer" -- generate "$tmp/small.model" --weights "$tmp/w.safetensors" \
    --tokenizer "$spm" --devices 0
  has "$err" "has a vocabulary of 1000, smaller than the 3006 ids of $spm/tokenizer.json" "both sizes are named"
  expect 2 "--bos without a tokenizer" -- generate "$tmp/gpt.model" --weights "$tmp/w.safetensors" --bos
else
  echo "skipped generate: no OpenCL device"
fi
exit $fail
