"""Where a training step's time goes, layer class by layer class, beside its matrix products replayed alone.

    python benchmarks/bench_step_layers.py --text ../shared/data/tinyshakespeare.txt [--batch 6] [--threads 1]
    python benchmarks/bench_step_layers.py --text ../shared/data/tinyshakespeare.txt --batch 1 --block-size 2048 --threads 2

The loop's step (`step_on_next_batch`: the batch, forward, loss, backward, clipping, AdamW, as `train` runs
it) of nanoGPT's Shakespeare-char CPU model with `--batch` windows (default 6: one rank's share of 12 on 2
ranks) of `--block-size` tokens (default 64) and `--threads` BLAS threads (default 1: a rank's; the tiled
attention's threads at long lengths follow it). Each layer class's forward and backward is timed by a
wrapper that keeps its own time apart from the layers it calls (multi-head attention's own time leaves out its
Linears and its attention), over `--steps` steps; what no layer spends (the optimizer, clipping, the batch,
the loop) is the step's rest. Then every matrix product of the step (bench_train.py's replay, on operands made
beforehand) is timed alone: the part of the step that is BLAS's, against the part that is NumPy's elementwise
passes and Python's. The wrappers add about 2 µs a call; the table says how many calls each row makes.
From the tiled attention's threshold on (T >= 256) the replay holds the tiles' products (bench_train.py's
`attention_tile_products`), one after another on the BLAS threads, where the tiled attention shares its tiles out
between its own threads of one BLAS thread each: what the products cost, not how the step schedules them.
"""

import argparse
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _threads import threads_from_argv  # noqa: E402

threads_from_argv(sys.argv, default=1)

import numpy as np  # noqa: E402
from bench_train import matmul_products, product_replay  # noqa: E402

from minitransformer.objectives.language_model import LanguageModelObjective  # noqa: E402
from minitransformer.tokenizers import CharTokenizer  # noqa: E402
from minitransformer.training.config import TrainConfig, build_model, build_optimizer  # noqa: E402
from minitransformer.training.data import get_batch, train_val_split  # noqa: E402
from minitransformer.training.loop import LoopOptions, TrainingLoop  # noqa: E402


class LayerClock:
    """Wraps forward and backward of the given classes; `own[(class name, pass)]` = seconds spent in that
    method outside any wrapped method it called, `calls[...]` = how many calls."""

    def __init__(self, classes):
        self.own, self.calls, self._children = Counter(), Counter(), [0.0]
        self._restore = []
        for cls in classes:
            for name in ("forward", "backward"):
                method = getattr(cls, name)
                self._restore.append((cls, name, cls.__dict__.get(name)))
                setattr(cls, name, self._timed(method, (cls.__name__, name)))

    def _timed(self, method, key):
        def timed(*args, **kwargs):
            self._children.append(0.0)
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                self.own[key] += elapsed - self._children.pop()
                self.calls[key] += 1
                self._children[-1] += elapsed
        return timed

    def reset(self):
        self.own.clear()
        self.calls.clear()

    def close(self):
        for cls, name, original in reversed(self._restore):
            if original is None:
                delattr(cls, name)
            else:
                setattr(cls, name, original)


def timed_median(function, repeats):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default="../shared/data/tinyshakespeare.txt", help="training text (read by path)")
    parser.add_argument("--batch", type=int, default=6, help="windows per step (6: one rank's share of 12 on 2 ranks)")
    parser.add_argument("--block-size", type=int, default=64, help="T, tokens per window (64: the CPU model's)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (1: a rank's)")
    args = parser.parse_args(argv)
    if min(args.batch, args.steps, args.block_size) < 1:
        parser.error(f"--batch, --block-size and --steps must be at least 1, got {args.batch}, {args.block_size} "
                     f"and {args.steps}")
    with open(args.text, encoding="utf-8") as file:
        text = file.read()
    tokenizer = CharTokenizer.train(text)
    train_data, _ = train_val_split(np.array(tokenizer.encode(text), dtype=np.int64))
    config = TrainConfig(batch_size=args.batch, block_size=args.block_size)
    model, rng = build_model(config, tokenizer.vocab_size), np.random.default_rng([config.seed, 1])
    objective = LanguageModelObjective(model)
    loop = TrainingLoop(objective, build_optimizer(model, config),
                        lambda: get_batch(train_data, config.block_size, config.batch_size, rng),
                        config.learning_rate, LoopOptions(grad_clip=config.grad_clip, max_steps=10 ** 9, progress=False))
    clock = LayerClock({type(layer) for layer in model.modules()} | {type(objective.loss)})
    try:
        for _ in range(5):                                              # warm up
            loop.step_on_next_batch()
        clock.reset()
        started = time.perf_counter()
        for _ in range(args.steps):
            loop.step_on_next_batch()
        step = (time.perf_counter() - started) / args.steps
    finally:
        clock.close()
    replay = product_replay(matmul_products(config, tokenizer.vocab_size))
    replay()
    products = timed_median(replay, args.steps)
    print(f"the loop's step, B = {args.batch}, T = {args.block_size}, {args.threads} BLAS thread(s): {1e3 * step:.2f} ms (mean of "
          f"{args.steps}); each layer class's own time (ms per step, calls per step, share of the step):")
    for (name, method), seconds in sorted(clock.own.items(), key=lambda item: -item[1]):
        print(f"  {name + '.' + method:<44} {1e3 * seconds / args.steps:7.2f} ms {clock.calls[(name, method)] // args.steps:4d}"
              f"   {seconds / args.steps / step:6.1%}")
    rest = step - sum(clock.own.values()) / args.steps
    print(f"  {'the rest (optimizer, clipping, batch, loop)':<44} {1e3 * rest:7.2f} ms        {rest / step:6.1%}")
    print(f"the step's matrix products replayed alone (median of {args.steps}): {1e3 * products:.2f} ms, "
          f"{products / step:.1%} of the step; everything else {1e3 * (step - products):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
