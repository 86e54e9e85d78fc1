#!/bin/sh
# make-fortunes-data.sh: the default corpus for training a small language
# model: the English text of Debian's fortunes packages (fortunes and
# fortunes-min, about 2.5 MB), tokenized byte-level by `cltrain tokenize`
# into OUT_DIR/fortunes_train.bin (the first 90% of every file) and
# OUT_DIR/fortunes_val.bin (the last 10% of every file), so that the
# validation text is drawn from every kind of fortune. See doc/data.md.
#
# The files are a fixed list in C-locale order, so every machine makes the
# same two shards; the .dat indexes and .u8 links beside them are left out.
#
# With TOKENIZER set, the same two texts are tokenized by that Hugging Face
# tokenizer.json instead (each split one document), into
# OUT_DIR/NAME_train.bin and OUT_DIR/NAME_val.bin.
#
#   CLTRAIN       the tool (default ./cltrain where it exists, as in a built
#                 source tree, else cltrain from PATH, as installed)
#   FORTUNES_DIR  where the packages put the text (default /usr/share/games/fortunes)
#   OUT_DIR       where the shards go (default data)
#   TOKENIZER     a tokenizer.json or its directory (default: none, byte-level)
#   NAME          the shards' file name prefix (default fortunes)
set -e
if [ -z "${CLTRAIN:-}" ]; then
  if [ -x ./cltrain ]; then CLTRAIN=./cltrain; else CLTRAIN=cltrain; fi
fi
dir=${FORTUNES_DIR:-/usr/share/games/fortunes}
out=${OUT_DIR:-data}
name=${NAME:-fortunes}

files="art ascii-art computers cookie debian definitions disclaimer drugs education ethnic food fortunes
goedel humorists kids knghtbrd law linux linuxcookie literature love magic medicine men-women miscellaneous
news paradoxum people perl pets platitudes politics pratchett riddles science songs-poems sports startrek tao
translate-me wisdom work zippy"

mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/train.txt"
: > "$tmp/val.txt"
for f in $files; do
  if [ ! -f "$dir/$f" ]; then
    echo "make-fortunes-data.sh: $dir/$f is missing; install the fortunes package (apt-get install fortunes)" >&2
    exit 1
  fi
  n=$(wc -c < "$dir/$f")
  keep=$((n - n / 10))
  head -c "$keep" "$dir/$f" >> "$tmp/train.txt"
  tail -c "+$((keep + 1))" "$dir/$f" >> "$tmp/val.txt"
done
"$CLTRAIN" tokenize "$tmp/train.txt" -o "$out/${name}_train.bin" ${TOKENIZER:+--tokenizer "$TOKENIZER"}
"$CLTRAIN" tokenize "$tmp/val.txt" -o "$out/${name}_val.bin" ${TOKENIZER:+--tokenizer "$TOKENIZER"}
