#!/usr/bin/python3
"""tokenize_peer.py: the tokenizers library's side of bench/tokenize.sh, on
one thread (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false, set before
the import): the same text encoded as whole documents (encode) or as its
lines (encode_batch), REPS times; one line of JSON a repetition, as
tokenize_bench prints.

  tokenize_peer.py TOKENIZER_JSON TEXT docs|lines REPS"""
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402


def main():
    path, text_path, how, reps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    tok = Tokenizer.from_file(path)
    with open(text_path, "rb") as f:
        raw = f.read()
    if how == "lines":
        units = [l.decode("utf-8", "replace") for l in raw.splitlines(keepends=True)]
    else:
        units = [raw.decode("utf-8", "replace")]
    for _ in range(reps):
        t0 = time.perf_counter()
        if how == "lines":
            encs = tok.encode_batch(units, add_special_tokens=False)
        else:
            encs = [tok.encode(u, add_special_tokens=False) for u in units]
        secs = time.perf_counter() - t0
        h, n = 0xcbf29ce484222325, 0
        for e in encs:
            for i in e.ids:
                for b in i.to_bytes(4, "little"):
                    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
            n += len(e.ids)
        print('{"seconds": %.6f, "bytes": %d, "ids": %d, "fnv1a64": "%016x"}' % (secs, len(raw), n, h), flush=True)


if __name__ == "__main__":
    main()
