#!/bin/sh
# tokenizer_check.sh: cltrain's tokenizers against the installed Hugging
# Face `tokenizers` library, live: tokenizer_check.py has the library encode
# and decode stress.txt and 300 random texts under every variant of
# tests/text/variants.json, and test_tokenizer compares cltrain's ids and
# texts with those (TOKENIZER_EXPECTED), besides the committed fixtures.
# Skipped (77) without python3 and its tokenizers package.
srcdir=${srcdir:-.}
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }
"$py" -c 'import tokenizers' 2>/dev/null || { echo "SKIP: no tokenizers package for $py"; exit 77; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
"$py" "$srcdir/tests/text/tokenizer_check.py" "$tmp/expected.json" ${TOKENIZER_SEED:-} || exit $?
TOKENIZER_EXPECTED=$tmp/expected.json ./tests/text/test_tokenizer
