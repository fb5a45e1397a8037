"""Benchmark: what the backward contract's checks cost a training step.

    python benchmarks/bench_contract.py --rounds 40

The checks are the base class's wrappers of every layer's forward and backward (core/contract.py): forward
fingerprints each array it is given and records its output's shape; backward checks dout and the
fingerprints. Three contenders take turns on the same trainer, so that all see the same machine load:

* checks on: the package as it is;
* checks off: every wrapper removed (each class's own forward and backward, the wrapped functions);
* checks on, every element read: the fingerprint replaced by a checksum of every element (each row's sum
  weighted by a fixed non-periodic vector, plus the column sums), the design `fingerprint`'s docstring
  weighs against its sample.

The step is the `train` command's default: nanoGPT's Shakespeare-char CPU configuration (TrainConfig's
defaults, fast tier, float32, one process) on its default corpus, CPython's pydoc help topics, with a
character tokenizer. Each round gives every contender a turn of BLOCK consecutive steps, the first one
untimed (it warms the caches the others used). Prints the median wall and CPU time of a step for each
contender and the ratios to "checks off", with the load average before and after.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _machine import load_average  # noqa: E402
from _threads import threads_from_argv  # noqa: E402

threads_from_argv(sys.argv)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitransformer.core import contract  # noqa: E402
from minitransformer.core.module import Module  # noqa: E402
from minitransformer.objectives.language_model import Trainer  # noqa: E402
from minitransformer.tokenizers import CharTokenizer  # noqa: E402
from minitransformer.training.config import TrainConfig  # noqa: E402
from minitransformer.training.data import default_corpus, train_val_split  # noqa: E402

BLOCK = 5


def _wrapped_methods(cls=Module):
    """[(class, name, wrapper)] for every forward and backward the base class wrapped, in all subclasses."""
    found = []
    for subclass in cls.__subclasses__():
        found += [(subclass, name, subclass.__dict__[name]) for name in ("forward", "backward")
                  if hasattr(subclass.__dict__.get(name), "__wrapped__")]
        found += _wrapped_methods(subclass)
    return found


def _every_element_fingerprint(array):
    """Row sums weighted by 1 + frac(k x golden ratio), and column sums: every element read."""
    if array.ndim == 0 or array.dtype.kind != "f":
        return array.tobytes()
    weights = (1 + np.arange(1, array.shape[-1] + 1) * 0.6180339887498949 % 1).astype(array.dtype)
    rows = array.reshape(-1, array.shape[-1])
    return (rows @ weights).tobytes() + rows.sum(axis=0).tobytes()


def contenders():
    """{name: function that puts the package in that state}."""
    wrapped, sampled = _wrapped_methods(), contract.fingerprint

    def checks(on, fingerprint=sampled):
        contract.fingerprint = fingerprint
        for cls, name, wrapper in wrapped:
            setattr(cls, name, wrapper if on else wrapper.__wrapped__)

    return {"checks on": lambda: checks(True), "checks off": lambda: checks(False),
            "checks on, every element read": lambda: checks(True, _every_element_fingerprint)}


def measure(trainer, states, rounds):
    """{name: [(wall s, CPU s)] of timed steps}, in interleaved turns of BLOCK steps."""
    times = {name: [] for name in states}
    for _ in range(rounds):
        for name, put in states.items():
            put()
            trainer.step_on_next_batch()                    # untimed: the turn's first step
            for _ in range(BLOCK - 1):
                wall, cpu = time.perf_counter(), time.process_time()
                trainer.step_on_next_batch()
                times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    states["checks on"]()
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help=f"turns of each contender ({BLOCK - 1} timed steps each)")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS threads (default: the library's own choice, all cores)")
    args = parser.parse_args(argv)
    text = default_corpus()
    tokenizer = CharTokenizer.train(text)
    train_data, val_data = train_val_split(np.array(tokenizer.encode(text), dtype=np.int64))
    config = TrainConfig(max_steps=10**6)
    states = contenders()
    load_before = load_average()
    with Trainer(config, train_data, val_data, tokenizer.vocab_size, progress=False) as trainer:
        for _ in range(3):                                  # warm up
            trainer.step_on_next_batch()
        times = measure(trainer, states, args.rounds)
    load_after = load_average()
    print(f"threads: {os.environ.get('OPENBLAS_NUM_THREADS', 'library default')}; load average (1 min) "
          f"{load_before:.1f} before, {load_after:.1f} after, on {os.cpu_count()} cores")
    medians = {name: np.median(np.array(values), axis=0) for name, values in times.items()}
    off_wall, off_cpu = medians["checks off"]
    print(f"the train command's default step (fast tier, one process), {len(times['checks on'])} timed steps each, "
          f"in turns of {BLOCK - 1}: median wall ms / CPU ms, and the ratio to checks off")
    for name, (wall, cpu) in medians.items():
        print(f"  {name:<32} {wall * 1e3:7.1f} / {cpu * 1e3:7.1f}   {wall / off_wall:.3f} / {cpu / off_cpu:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
