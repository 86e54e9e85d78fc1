"""tokcheck.py: what make_fixtures.py and tokenizer_check.py share: the
fortunes corpus (one document a file, the files of
scripts/make-fortunes-data.sh), the stress text, the tokenizer variants of
variants.json, and the checksum of a corpus's ids."""
import json
import os

FORTUNES = os.environ.get("FORTUNES_DIR", "/usr/share/games/fortunes")
FILES = """art ascii-art computers cookie debian definitions disclaimer drugs education ethnic food fortunes
goedel humorists kids knghtbrd law linux linuxcookie literature love magic medicine men-women miscellaneous
news paradoxum people perl pets platitudes politics pratchett riddles science songs-poems sports startrek tao
translate-me wisdom work zippy""".split()


def corpus_docs():
    """The corpus's documents as bytes, or None without the fortunes package."""
    docs = []
    for f in FILES:
        path = os.path.join(FORTUNES, f)
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as fh:
            docs.append(fh.read())
    return docs


def fnv1a64(ids, h=0xcbf29ce484222325):
    for i in ids:
        for b in i.to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def encode_docs_checksum(tok, docs):
    """Every document encoded without special tokens: the number of ids and
    the FNV-1a 64 of them all as little-endian uint32."""
    n, h = 0, 0xcbf29ce484222325
    for d in docs:
        ids = tok.encode(d.decode("utf-8", "replace"), add_special_tokens=False).ids
        n += len(ids)
        h = fnv1a64(ids, h)
    return n, h


def stress_bytes():
    """Text that is hard to tokenize, with bytes that are not UTF-8."""
    parts = [
        "It's a test: I'M sure we'LL see, they'd've, 'S 'ſ 'K (Kelvin) don't.\n",
        "日本語のテキストと中文文本，한국어 텍스트。全角ＡＢＣ１２３\n",
        "Emoji 👩‍👩‍👧‍👦 family, 👨🏽‍💻 coder, 🏳️‍🌈 flag, ❤️ heart, 🇫🇷🇯🇵 flags, 👍🏿\n",
        "Combining: e\u0301 n\u0303 a\u030a\u0323 Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032d\u0308\u0307l "
        "\u1e9b\u0323 \u0915\u094d\u0937 \u0e01\u0e34\u0e19\n",
        "RTL: مرحبا بالعالم \u200fשלום עולם\u200e (mixed עברית and English) ٣١٤ ۱۲۳\n",
        "Spaces:   x    y\t\tz \u00a0nbsp\u3000ideographic\u2028line\u0085nel\u180emvs\u200bzwsp\ufeffbom\n",
        " " * 40 + "\n\n\n\n" + "   \n \n\t\n" + "\r\n\r\n" + " \n" * 5,
        "Digits: 3141592653589793238462643383279502884197169399375105820974944 1,000,000.00 "
        "2024-05-20 ²³ Ⅻ ½ 0x1F 007\n",
        "Specials:<|endoftext|>x <|endoftext|> <|im_start|>user\nhi<|im_end|>  \n<|im_start|>"
        "<|im_end|><|im_end|>   <mask> a  <mask>b <|im_sta <|endoftext <s> </s> <unk>\n",
        "Added: New York, New  York, NewYork, the fortune teller, fortunes, a fortune. x<tool>  y  <tool>z\n",
        "SentencePiece: \u2581word \u2581\u2581 <0x41> <0xZZ> <0x+A> \u2581\n",
        "Controls: \x00\x01\x7f\x1b[0m end\n",
        "Punctuation!!! ... ??? --- \"quoted\" (paren) [bracket] {brace} @user #tag $5 100% a&b\n",
        "Normalization: \ufb01ne \u212b \u1100\u1161\u11a8 \u00c5 A\u030a \u2126 \u0344 \u1e9b\u0323 \uff76\uff9e "
        "\u3300 \u2460 \u01c4 \u0390\n",
    ]
    text = "".join(parts).encode("utf-8")
    bad = (b"Invalid: \xff\xfe x \xc3( \xe2\x82 \xf0\x9f\x98 y \xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80 "
           b"\x80\xbf z\xe0\x80\xaf \xf8\x88\x80\x80\x80 end\n")
    return text[:400] + bad + text[400:] + b"tail without newline \xe2\x82"


def variant_json(here, variants, name):
    """A variant's tokenizer.json text: its base with the members it sets."""
    v = variants[name]
    with open(os.path.join(here, v["base"], "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    for key, value in v.get("set", {}).items():
        obj = j
        path = key.split(".")
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return json.dumps(j, ensure_ascii=False)


def expected_for(here, texts, docs=None):
    """What test_tokenizer compares with: each text (bytes) encoded by every
    variant with and without special tokens, decoded with and without them,
    and, given the corpus's documents, the count and checksum of its ids."""
    from tokenizers import Tokenizer
    with open(os.path.join(here, "variants.json")) as f:
        variants = json.load(f)
    out = {"texts": [t.hex() for t in texts], "variants": {}}
    for name in variants:
        tok = Tokenizer.from_str(variant_json(here, variants, name))
        results = []
        for t in texts:
            s = t.decode("utf-8", "replace")
            ids = tok.encode(s).ids
            results.append({"ids_special": ids, "ids": tok.encode(s, add_special_tokens=False).ids,
                            "decode": tok.decode(ids, skip_special_tokens=False),
                            "decode_skip": tok.decode(ids, skip_special_tokens=True)})
        v = {"results": results}
        if docs is not None:
            n, fnv = encode_docs_checksum(tok, docs)
            v["corpus_tokens"], v["corpus_fnv1a64"] = n, "%016x" % fnv
        out["variants"][name] = v
    return out
