#!/bin/sh
# tokenize.sh: cltrain's tokenizers against the Hugging Face tokenizers
# library on one thread, in the same run, from the build directory:
#
#   sh ../bench/tokenize.sh [REPS]
#
# Each of tests/text's tokenizers (a byte-level BPE like GPT-2's, the same
# with Llama 3's pattern, a SentencePiece-style BPE like Llama 2's) encodes
# the fortunes corpus (scripts/make-fortunes-data.sh's files, joined) as
# whole documents (the file) and as lines (the library's encode_batch),
# REPS (5) times a side, the two sides alternating: cltrain
# (bench/tokenize_bench) and the library (bench/tokenize_peer.py,
# RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false). Prints each side's
# median MB/s and the median of the per-repetition ratios cltrain / library;
# the ids of both sides must be the same (their count and checksum).
set -e
here=$(dirname "$0")
src=$(cd "$here/.." && pwd)
REPS=${1:-5}
dir=${FORTUNES_DIR:-/usr/share/games/fortunes}
/usr/bin/python3 -c 'import tokenizers' 2>/dev/null || { echo "tokenize.sh: needs python3's tokenizers package"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for f in art ascii-art computers cookie debian definitions disclaimer drugs education ethnic food fortunes \
  goedel humorists kids knghtbrd law linux linuxcookie literature love magic medicine men-women miscellaneous \
  news paradoxum people perl pets platitudes politics pratchett riddles science songs-poems sports startrek tao \
  translate-me wisdom work zippy; do
  cat "$dir/$f"
done >"$out/corpus.txt"
/usr/bin/python3 - "$src/tests/text" "$out" <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
from tokcheck import variant_json
here, out = sys.argv[1], sys.argv[2]
variants = json.load(open(os.path.join(here, "variants.json")))
for name in ("bytelevel", "llama3", "spm"):
    with open(os.path.join(out, name + ".json"), "w") as f:
        f.write(variant_json(here, variants, name))
PY
echo "corpus: $(wc -c <"$out/corpus.txt") bytes; $REPS repetitions a side, alternating; one thread"
printf '%-10s %-6s %12s %12s %8s\n' tokenizer unit "cltrain MB/s" "library MB/s" ratio
for name in bytelevel llama3 spm; do
  for unit in docs lines; do
    : >"$out/c.jsonl"; : >"$out/p.jsonl"
    i=0
    while [ $i -lt "$REPS" ]; do
      ./bench/tokenize_bench "$out/$name.json" "$out/corpus.txt" $unit 1 >>"$out/c.jsonl"
      /usr/bin/python3 "$src/bench/tokenize_peer.py" "$out/$name.json" "$out/corpus.txt" $unit 1 >>"$out/p.jsonl"
      i=$((i + 1))
    done
    /usr/bin/python3 - "$out/c.jsonl" "$out/p.jsonl" "$name" "$unit" <<'PY'
import json, statistics, sys
c = [json.loads(l) for l in open(sys.argv[1])]
p = [json.loads(l) for l in open(sys.argv[2])]
same = all((x["ids"], x["fnv1a64"]) == (y["ids"], y["fnv1a64"]) for x, y in zip(c, p))
mb = lambda r: r["bytes"] / r["seconds"] / 1e6
ratio = statistics.median(mb(x) / mb(y) for x, y in zip(c, p))
print("%-10s %-6s %12.2f %12.2f %8.2f%s" % (sys.argv[3], sys.argv[4], statistics.median(map(mb, c)),
      statistics.median(map(mb, p)), ratio, "" if same else "  DIFFERENT IDS"))
if not same:
    sys.exit(1)
PY
  done
done
