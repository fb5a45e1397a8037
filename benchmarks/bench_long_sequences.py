"""Benchmark: the training step at long sequences, against PyTorch eager, with step time and peak memory (tiled attention).

    python benchmarks/bench_long_sequences.py                       # T = 64 ... 4096, 3 rounds
    python benchmarks/bench_long_sequences.py --lengths 64 2048 --rounds 5 --steps 6

nanoGPT's CPU model (C = 128, 4 layers, 4 heads, d_ff 512, float32, AdamW, clip 1.0; bench_train.py's
configuration) at context length T with B = max(1, 768 // T) windows, so that every step sees about 768
tokens. One step is forward, backward and the optimizer's update. Sides:

* `ours`: the fast tier (`kernels="fast"`), whose attention tiles from Tk >= `TILED_FROM` keys
  (minitransformer/fast/attention.py), the tiles' blocks shared between --threads threads
  (minitransformer/fast/tiled_attention.py);
* `ours-spinning`: `ours` with OpenBLAS's helper threads spinning 2^28 cycles (about 0.1 s) after each
  multi-threaded product, OpenBLAS's default, instead of the 2^22 minitransformer sets
  (minitransformer/fast/blas_idle.py): the spinning thread takes a core from the tiled attention's threads;
* `ours-serial`: the same with the tiled attention on one thread (`FastTiledAttention.workers = 1`; BLAS
  keeps its --threads threads): the tiled attention before it used threads;
* `ours-dense`: the same with tiling switched off (`FastScaledDotProductAttention.tiled_from` set past
  every T): the attention before tiling, which holds the (B, H, T, T) weights (run up to --dense-up-to);
* `torch`: the same model in PyTorch eager (bench_train.torch_model) with
  `F.scaled_dot_product_attention(is_causal=True)`, PyTorch's tiled CPU kernel.

Each side and each T runs in a process of its own (`--one SIDE T`), so that its peak resident memory
(ru_maxrss, which includes the interpreter and the imported libraries) is its own. BLAS and PyTorch run
with --threads threads (default 2). The rounds interleave the sides: round r runs every (T, side) once,
in turn, so all sides see the same machine load. Each process times --steps steps after 2 untimed ones and
reports their median; the table gives the median over rounds. The machine is shared, so the ratio of
two sides within a round is the figure to quote.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _machine import load_average, peak_mb  # noqa: E402
from _threads import threads_from_argv  # noqa: E402

THREADS = int(threads_from_argv(sys.argv, "2"))       # before NumPy loads (a --one child reads its own)
SIDES = ("ours", "ours-spinning", "ours-serial", "ours-dense", "torch")
OPENBLAS_DEFAULT_SPIN = "28"                          # OpenBLAS's own OPENBLAS_THREAD_TIMEOUT: 2^28 cycles


def _one(side, T, steps, threads):
    """Run `steps` training steps of one side at length T in this process; return its figures."""
    import numpy as np

    from minitransformer.fast.attention import FastScaledDotProductAttention
    from minitransformer.fast.tiled_attention import FastTiledAttention
    from minitransformer.objectives.language_model import Trainer
    from minitransformer.tokenizers import CharTokenizer
    from minitransformer.training.config import TrainConfig
    from minitransformer.training.data import default_corpus, get_batch, train_val_split

    text = default_corpus()
    tokenizer = CharTokenizer.train(text)
    train_data, val_data = train_val_split(np.array(tokenizer.encode(text), dtype=np.int64))
    config = TrainConfig(block_size=T, batch_size=max(1, 768 // T), max_steps=steps + 2, kernels="fast")
    if side == "torch":
        import torch
        from bench_train import torch_model, torch_step
        torch.set_num_threads(threads)
        model, optimizer = torch_model(config, tokenizer.vocab_size, sdpa=True)
        x, y = get_batch(train_data, T, config.batch_size, np.random.default_rng(0))
        step = lambda: torch_step(model, optimizer, config, x, y, config.lr)   # noqa: E731
    else:
        if side == "ours-dense":
            FastScaledDotProductAttention.tiled_from = sys.maxsize
        if side == "ours-serial":
            FastTiledAttention.workers = 1
        trainer = Trainer(config, train_data, val_data, tokenizer.vocab_size, progress=False)
        step = trainer.step_on_next_batch
    times = []
    for index in range(steps + 2):
        started = time.perf_counter()
        step()
        if index >= 2:
            times.append(time.perf_counter() - started)
    return {"side": side, "T": T, "B": config.batch_size, "ms": float(np.median(times)) * 1e3,
            "peak_mb": peak_mb()}


def _run_in_process(side, T, steps, threads):
    command = [sys.executable, os.path.abspath(__file__), "--one", side, str(T), "--steps", str(steps),
               "--threads", str(threads)]
    environment = dict(os.environ)
    if side == "ours-spinning":           # read by OpenBLAS when it loads, so set for the child process
        environment["OPENBLAS_THREAD_TIMEOUT"] = OPENBLAS_DEFAULT_SPIN
    done = subprocess.run(command, capture_output=True, text=True, env=environment, encoding="utf-8")
    if done.returncode:
        print(f"error: {side} at T = {T} failed:\n{done.stderr.strip()}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def _table(results, lengths, sides):
    """Markdown: per T the median ms and peak MB of each side over rounds, and the ratios to PyTorch: of the
    medians, and paired (the median over rounds of each round's ratio, steadier when the machine's speed drifts
    between rounds)."""
    import statistics
    others = [side for side in sides if side != "torch"] if "torch" in sides else []
    head = ["T", "B"] + [f"{side} ms" for side in sides] + [f"{side} MB" for side in sides]
    head += [f"{side} / torch" for side in others] + [f"{side} / torch, paired" for side in others]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for T in lengths:
        runs = {side: {r["round"]: r for r in results if r["T"] == T and r["side"] == side} for side in sides}
        ms = {side: statistics.median(r["ms"] for r in runs[side].values()) if runs[side] else None for side in sides}
        mb = {side: statistics.median(r["peak_mb"] for r in runs[side].values()) if runs[side] else None
              for side in sides}
        cells = [str(T), str(max(1, 768 // T))]
        cells += [f"{ms[side]:.1f}" if ms[side] else "–" for side in sides]
        cells += [f"{mb[side]:.0f}" if mb[side] else "–" for side in sides]
        cells += [f"{ms[side] / ms['torch']:.2f}" if ms[side] and ms["torch"] else "–" for side in others]
        for side in others:
            paired = [runs[side][k]["ms"] / runs["torch"][k]["ms"] for k in runs[side] if k in runs["torch"]]
            cells.append(f"{statistics.median(paired):.2f}" if paired else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=["ours", "ours-dense", "torch"])
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each runs every (T, side) once")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per process (after 2 untimed)")
    parser.add_argument("--threads", type=int, default=2, help="BLAS and PyTorch threads")
    parser.add_argument("--dense-up-to", type=int, default=2048, help="largest T at which ours-dense runs")
    parser.add_argument("--one", nargs=2, metavar=("SIDE", "T"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(_one(args.one[0], int(args.one[1]), args.steps, args.threads)))
        return 0
    if min(args.lengths) < 1 or args.rounds < 1 or args.steps < 1:
        parser.error("--lengths, --rounds and --steps must be at least 1")
    print(f"load average before: {load_average():.1f}; {args.threads} threads; {args.rounds} rounds of "
          f"{args.steps} timed steps", flush=True)
    results = []
    for round_index in range(args.rounds):
        for T in args.lengths:
            for side in args.sides:
                if side == "ours-dense" and T > args.dense_up_to:
                    continue
                result = _run_in_process(side, T, args.steps, args.threads)
                if result:
                    results.append({**result, "round": round_index})
                    print(f"round {round_index + 1} T {T:5d} {side:<10} {result['ms']:9.1f} ms "
                          f"{result['peak_mb']:6.0f} MB  (load {load_average():.1f})", flush=True)
    print(f"\nload average after: {load_average():.1f}\n")
    print(_table(results, args.lengths, args.sides))
    return 0


if __name__ == "__main__":
    sys.exit(main())
