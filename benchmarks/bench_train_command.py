"""Benchmark: the `train` command as users run it, one process and under `mpiexec -n 2`, beside PyTorch's step.

    python benchmarks/bench_train_command.py --text ../shared/data/tinyshakespeare.txt

A step of ours is what the command spends per step, start-up and the last evaluation aside:

    (wall time of `train --max-steps 260` - wall time of `train --max-steps 60`) / 200,   best of --repeats (3)

for `python -m minitransformer train` (one process, the libraries' own threads: both cores) and for
`mpiexec -n 2 python -m minitransformer train` (one BLAS thread per rank, as the command limits them),
nanoGPT's Shakespeare-char CPU configuration (the command's defaults; each run writes its checkpoint to a
temporary directory). The difference keeps what a longer run adds: the steps, with their batching, finite check,
bookkeeping and progress, and one more evaluation and checkpoint (every 250 steps).
PyTorch's step is bench_train.py's twin, a whole eager step (the batch drawn, forward, backward, clipping,
AdamW) with --threads threads (default 2), timed the same way in this process: (260 steps - 60 steps) / 200,
best of --repeats. The contenders take turns in each repeat, so all see the same load. It prints each
one's ms per step and its ratio to PyTorch's; then, since the best of each side may come from different
repeats on a noisy machine, each repeat's ratio to PyTorch's step of the same repeat, and their median.

--phases also prints where the 260-step runs' time went, per rank (MINITRANSFORMER_PHASES=1:
training/phases.py's table, from the command's stderr).
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _threads import threads_from_argv  # noqa: E402

threads = int(threads_from_argv(sys.argv, default=2))       # PyTorch's and this process's BLAS threads

import numpy as np  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from minitransformer.tokenizers import CharTokenizer  # noqa: E402
from minitransformer.training.config import TrainConfig  # noqa: E402
from minitransformer.training.data import get_batch, train_val_split  # noqa: E402

STEPS = (60, 260)           # steps of the two runs whose difference is timed


def command(ranks, text, steps, out, options=()):
    """The `train` command line of a run of `steps` steps on `ranks` processes, saving in `out`."""
    train = [sys.executable, "-m", "minitransformer", "train", "--text", text, "--max-steps", str(steps),
             "--out", out, *options]
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")       # a venv with the mpich wheel
    return train if ranks == 1 else [beside if os.path.exists(beside) else "mpiexec", "-n", str(ranks), *train]


def run_train(ranks, text, steps, scratch, options=(), phases=False):
    """Wall seconds of one `train` run (its stderr too, for --phases); a failed run stops the benchmark."""
    out = tempfile.mkdtemp(dir=scratch)
    shutil.rmtree(out)                                          # the command makes it, as a new run's directory
    environment = {**os.environ, "PYTHONPATH": os.path.abspath(ROOT)}
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        environment.pop(variable, None)                         # the command chooses, as for a user
    if phases:
        environment["MINITRANSFORMER_PHASES"] = "1"
    started = time.perf_counter()
    done = subprocess.run(command(ranks, text, steps, out, options), cwd=ROOT, env=environment, capture_output=True,
                          text=True, encoding="utf-8")
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"error: {shlex.join(command(ranks, text, steps, out, options))} failed ({done.returncode}):\n{done.stderr}")
    return wall, done.stderr


def torch_twin(config, train_data, V):
    """(steps -> wall seconds of that many PyTorch steps from fresh weights), or None without torch."""
    try:
        import torch
        from bench_train import torch_model, torch_step
    except ImportError:
        print("torch not installed: no PyTorch comparison (pip install torch==2.13.0 to add it)")
        return None
    torch.set_num_threads(threads)

    def run(steps):
        model, optimizer = torch_model(config, V)
        rng = np.random.default_rng([config.seed, 1])              # the trainer's batch generator
        started = time.perf_counter()
        for step in range(steps):
            x, y = get_batch(train_data, config.block_size, config.batch_size, rng)
            torch_step(model, optimizer, config, x, y, config.learning_rate(step))
        return time.perf_counter() - started
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default="../shared/data/tinyshakespeare.txt", help="training text (read by path)")
    parser.add_argument("--repeats", type=int, default=3, help="pairs of runs per contender; the best is kept")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="processes of each `train` contender")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch's threads")
    parser.add_argument("--phases", action="store_true", help="print each rank's phases of the last longer runs")
    parser.add_argument("--steps", type=int, nargs=2, default=STEPS, metavar=("SHORT", "LONG"),
                        help=f"steps of the two runs whose difference is timed (default {STEPS[0]} {STEPS[1]})")
    parser.add_argument("--train-options", default="", metavar="OPTIONS",
                        help="more options of the train command, e.g. \"--sample-tokens 0\" (PyTorch's twin keeps "
                             "the default model: options that change the model make its ratio meaningless)")
    args = parser.parse_args(argv)
    options = shlex.split(args.train_options)
    (short_steps, long_steps), text = args.steps, os.path.abspath(args.text)
    if not 0 < short_steps < long_steps:
        parser.error(f"--steps expected SHORT < LONG, both > 0, got {short_steps} {long_steps}")
    with open(text, encoding="utf-8") as file:
        corpus = file.read()
    tokenizer = CharTokenizer.train(corpus)
    train_data, _ = train_val_split(np.array(tokenizer.encode(corpus), dtype=np.int64))
    twin = torch_twin(TrainConfig(), train_data, tokenizer.vocab_size)
    names = {ranks: "train, one process" if ranks == 1 else f"mpiexec -n {ranks} ... train" for ranks in args.ranks}
    per_step, tables = {name: [] for name in names.values()}, {}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.repeats):
            for ranks, name in names.items():
                short, _ = run_train(ranks, text, short_steps, scratch, options)
                long, tables[name] = run_train(ranks, text, long_steps, scratch, options, args.phases)
                per_step[name].append((long - short) / (long_steps - short_steps))
            if twin is not None:
                per_step.setdefault(f"PyTorch eager twin ({threads} threads)", []).append(
                    (twin(long_steps) - twin(short_steps)) / (long_steps - short_steps))
    best = {name: 1e3 * min(values) for name, values in per_step.items()}
    torch_ms = best.get(f"PyTorch eager twin ({threads} threads)")
    print(f"ms per step, (wall of {long_steps} steps - wall of {short_steps}) / {long_steps - short_steps}, "
          f"best of {args.repeats}:")
    for name, ms in best.items():
        print(f"  {name:<32} {ms:7.1f} ms" + (f"   ratio to PyTorch {ms / torch_ms:.2f}" if torch_ms else "")
              + f"   (each: {', '.join(f'{1e3 * value:.1f}' for value in per_step[name])})")
    twin_name = f"PyTorch eager twin ({threads} threads)"
    if twin_name in per_step:                       # the brief's measure on a noisy machine: paired ratios' median
        print("ratio to PyTorch's step in the same repeat (each), and their median:")
        for name in names.values():
            ratios = [ours / theirs for ours, theirs in zip(per_step[name], per_step[twin_name])]
            print(f"  {name:<32} {', '.join(f'{ratio:.2f}' for ratio in ratios)}   median {np.median(ratios):.2f}")
    for name, stderr in tables.items():
        lines = [line for line in stderr.splitlines() if line.startswith(("phases of", "  "))]
        if lines:
            print(f"\n{name}, the {long_steps}-step run's phases:\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
