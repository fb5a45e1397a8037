"""Benchmark: from which length on the fast attention's tiled form beats its dense form, and with which tiles.

    python benchmarks/bench_tiled_threshold.py                                # T = 64 ... 2048, tiles 64, 128, 256
    python benchmarks/bench_tiled_threshold.py --lengths 128 256 512 --tiles 128 --rounds 15 --threads 1

The benchmark model's attention alone (bench_train.py's configuration: H = 4 heads of hs = 32, float32, causal) at
length T with B = max(1, 768 // T) windows, one forward and one backward pass, in two forms of the fast tier:

* `dense`: `FastScaledDotProductAttention` with its threshold set past every T: it holds the (B, H, T, T) weights;
* `tiled-N`: `FastTiledAttention` (fast/tiled_attention.py) in N x N tiles, its blocks shared between as many
  threads as BLAS may use (--threads).

Everything runs in this one process, in rounds: round r times every (T, form) once, in turn, so that every form
sees the same load; the table gives per T the median time over rounds and the median over rounds of each tiled
form's time divided by the dense form's in the same round (below 1: tiling pays). The machine is shared: quote
the ratios, with the load printed before and after.

Last it prints the decision: for each tile size, the shortest measured length from which on the tiled form is
never slower than the dense one (its ratio at most 1 there and at every longer length measured), and the
`TILED_FROM` and `TILE_SIZE` this run supports beside the values in minitransformer/fast/attention.py. Below
the threshold the dense form holds (B, H, T, T) weights; above it memory grows with T only, so a tie goes to
tiling. Then the same rule between tile sizes: from which length on a tile size wider than TILE_SIZE is never
slower than TILE_SIZE's tiles (`WIDE_TILES_FROM`, `WIDE_TILE_SIZE`).
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _machine import load_average  # noqa: E402
from _threads import threads_from_argv  # noqa: E402

THREADS = int(threads_from_argv(sys.argv, "2"))       # before NumPy loads


def forms(tiles):
    """{name: a function building a fresh layer of that form}."""
    from minitransformer.fast.attention import FastScaledDotProductAttention
    from minitransformer.fast.tiled_attention import FastTiledAttention

    def dense():
        layer = FastScaledDotProductAttention(causal=True)
        layer.tiled_from = sys.maxsize
        return layer
    made = {"dense": dense}
    for tile in tiles:
        made[f"tiled-{tile}"] = lambda tile=tile: FastTiledAttention(causal=True, block_size=tile)
    return made


def time_once(make, inputs):
    """Seconds for one forward and one backward pass of a fresh layer."""
    q, k, v, dout = inputs
    layer = make()
    started = time.perf_counter()
    layer(q, k, v)
    layer.backward(dout)
    return time.perf_counter() - started


def run(lengths, tiles, rounds, seed=0):
    """{(T, form): [seconds per round]}, the forms of each round interleaved."""
    import numpy as np
    rng = np.random.default_rng(seed)
    inputs = {T: [rng.standard_normal((max(1, 768 // T), 4, T, 32)).astype(np.float32) for _ in range(4)]
              for T in lengths}
    made = forms(tiles)
    for T in lengths:                                   # one untimed pass each: caches, the threads' pool
        for make in made.values():
            time_once(make, inputs[T])
    times = {(T, name): [] for T in lengths for name in made}
    for _ in range(rounds):
        for T in lengths:
            for name, make in made.items():
                times[T, name].append(time_once(make, inputs[T]))
    return times


def table(times, lengths, names):
    """Markdown: per T the median ms of each form and the median per-round ratio of each tiled form to dense."""
    tiled = [name for name in names if name != "dense"]
    head = ["T", "B"] + [f"{name} ms" for name in names] + [f"{name} / dense" for name in tiled]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for T in lengths:
        cells = [str(T), str(max(1, 768 // T))]
        cells += [f"{statistics.median(times[T, name]) * 1e3:.1f}" for name in names]
        cells += [f"{ratio(times, T, name):.2f}" for name in tiled]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio(times, T, name, against="dense"):
    """The median over rounds of form `name`'s time divided by form `against`'s in the same round, at T."""
    return statistics.median(a / b for a, b in zip(times[T, name], times[T, against]))


def crossover(times, lengths, name, against="dense"):
    """The shortest length from which on `name` is never slower than `against` (None: slower at the longest)."""
    start = None
    for T in sorted(lengths, reverse=True):
        if ratio(times, T, name, against) > 1:
            break
        start = T
    return start


def decision(times, lengths, tiles):
    """The lines that say where the fast attention should start tiling, and with which tile size."""
    from minitransformer.fast.attention import TILE_SIZE, TILED_FROM, WIDE_TILE_SIZE, WIDE_TILES_FROM
    longest = max(lengths)
    starts = {tile: crossover(times, lengths, f"tiled-{tile}") for tile in tiles}
    lines = ["Decision:"]
    for tile, start in starts.items():
        where = f"from T = {start} on" if start is not None else f"nowhere up to T = {longest}"
        lines.append(f"  tiles of {tile} x {tile}: tiled at most as slow as dense {where} "
                     f"(ratio at T = {longest}: {ratio(times, longest, f'tiled-{tile}'):.2f})")
    best = earliest(times, lengths, starts, "dense")
    if best is None:
        lines.append(f"  -> the dense form is faster at every length measured: measure beyond T = {longest}")
    else:
        lines.append(f"  -> TILED_FROM = {starts[best]}, TILE_SIZE = {best} (the earliest crossover; "
                     f"a tie goes to the lower ratio at T = {longest})")
        lines += wide_tiles(times, lengths, [tile for tile in tiles if tile > best], best)
    lines.append(f"  now in minitransformer/fast/attention.py: TILED_FROM = {TILED_FROM}, TILE_SIZE = {TILE_SIZE}, "
                 f"WIDE_TILES_FROM = {WIDE_TILES_FROM}, WIDE_TILE_SIZE = {WIDE_TILE_SIZE}")
    return "\n".join(lines)


def earliest(times, lengths, starts, against):
    """The tile size of `starts` ({tile: its crossover against form `against`, or None}) whose crossover comes
    first, a tie going to the lower ratio at the longest length; None if no tile has one."""
    found = [tile for tile, start in starts.items() if start is not None]
    longest = max(lengths)
    return min(found, key=lambda tile: (starts[tile], ratio(times, longest, f"tiled-{tile}", against)), default=None)


def wide_tiles(times, lengths, wider, base):
    """The lines that say from which length wider tiles than `base` should run: for each wider tile size, the
    shortest length from which on it is never slower than `base`; the earliest such length wins."""
    starts = {tile: crossover(times, lengths, f"tiled-{tile}", f"tiled-{base}") for tile in wider}
    tile = earliest(times, lengths, starts, f"tiled-{base}")
    if tile is None:
        return [f"  -> no wider tile is at most as slow as {base} x {base} at the longest length: no wide tiles"]
    longest = max(lengths)
    return [f"  -> WIDE_TILES_FROM = {starts[tile]}, WIDE_TILE_SIZE = {tile} (tiles of {tile} at most as slow as "
            f"{base} from there on; ratio at T = {longest}: {ratio(times, longest, f'tiled-{tile}', f'tiled-{base}'):.2f})"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 192, 256, 384, 512, 1024, 2048])
    parser.add_argument("--tiles", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--rounds", type=int, default=9, help="rounds; each times every (T, form) once")
    parser.add_argument("--threads", type=int, default=2,
                        help="BLAS threads, and the tiled form's threads (read before NumPy loads)")
    args = parser.parse_args(argv)
    if min(args.lengths) < 1 or min(args.tiles) < 1 or args.rounds < 1:
        parser.error("--lengths, --tiles and --rounds must be at least 1")
    print(f"load average before: {load_average():.1f}; {THREADS} threads; {args.rounds} rounds", flush=True)
    times = run(args.lengths, args.tiles, args.rounds)
    print(f"load average after: {load_average():.1f}\n")
    print(table(times, args.lengths, ["dense"] + [f"tiled-{tile}" for tile in args.tiles]))
    print()
    print(decision(times, args.lengths, args.tiles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
