#!/usr/bin/python3
"""make_fixtures.py: the tokenizers the tests of src/text read, trained here
with the `tokenizers` package (0.19.1) on the fortunes corpus, and what that
library gives for them, so the C-only tests need no Python:

  bytelevel/tokenizer.json   a byte-level BPE like GPT-2's (ByteLevel
                             pre-tokenizer and decoder, <|endoftext|>),
                             with added tokens of every flag
  spm/tokenizer.json         a SentencePiece-style BPE like Llama 2's
                             (Prepend + Replace normalizer, byte fallback
                             <0xXX> tokens, the Replace/ByteFallback/Fuse/
                             Strip decoder, BOS by TemplateProcessing)
  */tokenizer_config.json    their BOS and EOS
  stress.txt                 text that is hard to tokenize (written here)
  expected.json              the library's ids and decodings of stress.txt
                             under every variant of variants.json, and the
                             count and a checksum of its ids for the corpus

Run from tests/text with the fortunes package installed:
  /usr/bin/python3 make_fixtures.py
The training is deterministic for a given corpus and tokenizers version.
"""
import json
import os
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from tokcheck import FORTUNES, corpus_docs, encode_docs_checksum, expected_for, stress_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 3000


def added_tokens(tok, spm):
    tok.add_special_tokens([
        AddedToken("<|im_start|>", special=True, normalized=False),
        AddedToken("<|im_end|>", special=True, normalized=False, rstrip=True),
        AddedToken("<mask>", special=True, normalized=False, lstrip=True),
    ])
    tok.add_tokens([
        AddedToken("New York", normalized=True),
        AddedToken("fortune", single_word=True, normalized=False),
        AddedToken("<tool>", normalized=False, lstrip=True, rstrip=True),
    ])


def bytelevel(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    added_tokens(tok, False)
    return tok, {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": False,
                 "add_eos_token": False}


def spm(texts):
    # Trained on words cut as SentencePiece cuts them (Metaspace), then read
    # as Llama 2's tokenizer.json reads text: a normalizer and no pre-tokenizer.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 259, min_frequency=2, show_progress=False)
    tok.train_from_iterator(texts, trainer)
    j = json.loads(tok.to_str())
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for t, _ in sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(t, len(vocab))
    model = models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in j["model"]["merges"]], unk_token="<unk>",
                       fuse_unk=True, byte_fallback=True)
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    added_tokens(tok, True)
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "add_eos_token": False}


def main():
    docs = corpus_docs()
    if docs is None:
        sys.exit("make_fixtures.py: the fortunes corpus (%s) is missing: apt-get install fortunes" % FORTUNES)
    texts = [d.decode("utf-8", "replace") for d in docs]
    for name, make in (("bytelevel", bytelevel), ("spm", spm)):
        tok, config = make(texts)
        os.makedirs(os.path.join(HERE, name), exist_ok=True)
        tok.save(os.path.join(HERE, name, "tokenizer.json"))
        with open(os.path.join(HERE, name, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
    stress = stress_bytes()
    with open(os.path.join(HERE, "stress.txt"), "wb") as f:
        f.write(stress)
    expected = expected_for(HERE, [stress], docs)
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
