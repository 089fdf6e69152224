#!/usr/bin/env python3
"""Random token shards in llm.c's format, for timing llm.c's train_gpt2cu (and trident, which reads them
as data.format = "llmc") without a data set.

A shard is a header of 256 little-endian int32 (magic 20240520, version 1, the token count, then zeros)
followed by the tokens as little-endian uint16; tokens are uniform in [0, vocab). Standard library only.

  python3 llmc_shards.py OUT_DIR [--train-tokens N] [--val-tokens N] [--vocab V] [--seed S]

writes OUT_DIR/rand_train_000000.bin and OUT_DIR/rand_val_000000.bin and prints their paths.
"""
import argparse
import array
import os
import random
import sys

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256


def shard_bytes(tokens):
    """The bytes of one shard holding `tokens` (each in [0, 65536))."""
    header = array.array("i", [0] * HEADER_INTS)
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    body = array.array("H", tokens)
    if sys.byteorder != "little":
        header.byteswap()
        body.byteswap()
    return header.tobytes() + body.tobytes()


def random_tokens(count, vocab, seed):
    if not 0 < vocab <= 65536:
        raise ValueError(f"vocab {vocab} does not fit uint16 tokens")
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(count)]


def write_shard(path, tokens):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(shard_bytes(tokens))
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--train-tokens", type=int, default=(1 << 20) + 1)
    ap.add_argument("--val-tokens", type=int, default=(1 << 16) + 1)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    for name, count, seed in (("train", a.train_tokens, a.seed), ("val", a.val_tokens, a.seed + 1)):
        path = os.path.join(a.out_dir, f"rand_{name}_000000.bin")
        write_shard(path, random_tokens(count, a.vocab, seed))
        print(path)


if __name__ == "__main__":
    main()
