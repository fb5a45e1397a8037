"""Benchmark: greedy decoding and beam search with cached keys/values against recomputing the prefix.

An untrained float32 Seq2SeqTransformer (the weights do not change the cost)
generates exactly `--length` tokens for a batch of sources (EOS is banned so no
row stops early). Each mode is timed `--repeats` times and the median printed,
with the ratio recompute / cached, which grows with the length: the cached
decoder projects one new position per step, the recomputing one the whole prefix.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/bench_decoding.py [--length 8 32 64] [--batch 32] [--beam 4] [--repeats 5]
"""

import argparse
import statistics
import time

import numpy as np

from minitransformer.generation.decoding import beam_search, greedy_decode
from minitransformer.models.seq2seq import Seq2SeqTransformer

BOS, EOS = 1, 2


def median_seconds(function, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    longest = max(args.length)
    model = Seq2SeqTransformer(32, 32, 64, 4, 2, 128, longest + 1, pad_id=0, dtype=np.float32, rng=0).eval()
    model.head.bias.data[EOS] = -1e4                       # never stop early: every row runs the full length
    src = np.random.default_rng(1).integers(3, 32, size=(args.batch, 16))
    print(f"batch {args.batch}, source length 16, C=64, 2+2 layers, float32, median of {args.repeats}")
    print(f"{'mode':<22}{'length':>7}{'cached s':>11}{'recompute s':>13}{'ratio':>8}")
    for length in args.length:
        rows = {
            "greedy": lambda cache: greedy_decode(model, src, BOS, EOS, length, use_cache=cache),
            f"beam K={args.beam}": lambda cache: beam_search(model, src, BOS, EOS, length, beam_size=args.beam,
                                                             use_cache=cache),
        }
        for name, decode in rows.items():
            cached = median_seconds(lambda: decode(True), args.repeats)
            recomputed = median_seconds(lambda: decode(False), args.repeats)
            print(f"{name:<22}{length:>7}{cached:>11.3f}{recomputed:>13.3f}{recomputed / cached:>8.1f}")


if __name__ == "__main__":
    main()
