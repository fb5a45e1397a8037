"""Benchmark: sliding-window attention, banded (T*w) against dense with a band mask (T^2).

    python benchmarks/bench_sliding_window.py [--window 32] [--lengths 256 512 1024 2048]

For each length T, one forward and one backward of causal window attention on
(B, H, T, hs) = (2, 4, T, 32) float32, both ways, interleaved so that both see
the same machine load; prints the median of --repeats runs of each, their
ratio, and the growth from one length to the next. Dense cost grows with T^2,
banded with T*w: doubling T should double the banded time and quadruple the
dense one. Times are CPU time of this process (`time.process_time`, all its
threads), which a shared, loaded machine disturbs far less than wall time;
the ratios within one run are the figures to quote.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitransformer import BandedAttention, ScaledDotProductAttention, band_mask  # noqa: E402


def time_once(forward_backward):
    """CPU seconds of one call."""
    started = time.process_time()
    forward_backward()
    return time.process_time() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"window w = {args.window}, (B, H, hs) = (2, 4, 32), float32, forward + backward, median of {args.repeats}")
    print(f"{'T':>6}  {'dense ms':>9}  {'banded ms':>9}  {'dense/banded':>12}  {'dense growth':>12}  {'banded growth':>13}")
    previous = None
    for T in args.lengths:
        q, k, v, dout = (rng.standard_normal((2, 4, T, 32)).astype(np.float32) for _ in range(4))
        dense, banded = ScaledDotProductAttention(causal=True), BandedAttention(args.window)
        mask = band_mask(T, T, args.window)

        def run_dense():
            dense.forward(q, k, v, mask=mask)
            dense.backward(dout)

        def run_banded():
            banded.forward(q, k, v)
            banded.backward(dout)

        dense_times, banded_times = [], []
        for _ in range(args.repeats):
            dense_times.append(time_once(run_dense))
            banded_times.append(time_once(run_banded))
        dense_ms, banded_ms = 1e3 * np.median(dense_times), 1e3 * np.median(banded_times)
        growth = ("", "") if previous is None else (f"x{dense_ms / previous[0]:.2f}", f"x{banded_ms / previous[1]:.2f}")
        print(f"{T:>6}  {dense_ms:>9.1f}  {banded_ms:>9.1f}  {dense_ms / banded_ms:>12.2f}  {growth[0]:>12}  {growth[1]:>13}")
        previous = (dense_ms, banded_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
