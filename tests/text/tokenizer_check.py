#!/usr/bin/python3
"""tokenizer_check.py OUT.json [SEED]: what the installed `tokenizers` library
gives, under every variant of variants.json, for stress.txt and 300 random
texts (pieces of every script, emoji, combining marks, special tokens,
whitespace, digits and bytes that are not UTF-8), as test_tokenizer reads it
(TOKENIZER_EXPECTED). Exits 77 without the library."""
import os
import random
import sys

try:
    import tokenizers  # noqa: F401
except ImportError:
    print("SKIP: no tokenizers package for python3")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tokcheck import expected_for, stress_bytes  # noqa: E402

PIECES = ["the", " quick", " brown", "fox", "'s", "'LL", "'ve", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n",
          "\u00a0", "\u3000", "\u2028", "\u0085", "\u180e", "\u200b", "\ufeff", "日本語", "中文", "한국어", "ＡＢＣ",
          "👩\u200d👩\u200d👧", "👍🏽", "🏳️\u200d🌈", "🇫🇷", "e\u0301", "a\u030a\u0323", "\u0915\u094d\u0937",
          "مرحبا", "שלום", "\u200f", "٣١٤", "0", "12", "345", "6789", "3141592653", "²", "Ⅻ", "½", ".", ",", "!!",
          "...", "?", "-", "\"", "(", ")", "@", "#", "$", "%", "&", "*", "<", ">", "|", "<|endoftext|>",
          "<|im_start|>", "<|im_end|>", "<mask>", "<tool>", "<s>", "</s>", "<unk>", "New York", "fortune", "fortunes",
          "\u2581", "<0x41>", "<0xZZ>", "x", "xx", "aeiou", "Zürich", "naïve", "ſ", "K", "ß", "İ", "\x00", "\x1b"]
BAD = [b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xc0\xaf", b"\x80", b"\xf4\x90\x80\x80"]


def random_texts(rng, n):
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randrange(0, 40)):
            if rng.random() < 0.05:
                parts.append(rng.choice(BAD))
            else:
                parts.append(rng.choice(PIECES).encode("utf-8"))
        texts.append(b"".join(parts))
    return texts


def main():
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 20240520
    texts = [stress_bytes()] + random_texts(random.Random(seed), 300)
    import json
    with open(sys.argv[1], "w") as f:
        json.dump(expected_for(HERE, texts), f, ensure_ascii=True)
    print("tokenizers %s: %d texts, seed %d" % (tokenizers.__version__, len(texts), seed))


if __name__ == "__main__":
    main()
