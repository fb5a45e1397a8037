"""Train the in-context learner of notebook 19 and save it: a GPT on `KeyValueTask`, longer than a notebook can.

    python benchmarks/bench_in_context.py [--steps 1500] [--out data/in_context_gpt.npz]

Induction heads appear after a plateau of some hundreds of steps, too long for the notebooks' time budget on
the shared 2-core machine; this script trains the model (float32, the fast tier), prints the loss every 100
steps, the in-context accuracy by number of pairs shown and the induction score of every head, and saves the
weights, the configuration and the loss curve to one small .npz that notebook 19 loads (`--out`; an existing
file is not overwritten unless `--force`). Same seed, same model.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitransformer import GPT  # noqa: E402
from minitransformer.objectives import in_context  # noqa: E402
from minitransformer.tasks.key_value import KeyValueTask  # noqa: E402

CONFIG = dict(d_model=32, n_heads=2, n_layers=2, d_ff=64)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--keys", type=int, default=4)
    parser.add_argument("--values", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                                      "in_context_gpt.npz"))
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    args = parser.parse_args(argv)
    if os.path.exists(args.out) and not args.force:
        parser.error(f"{args.out} exists; pass --force to overwrite it")
    task = KeyValueTask(args.keys, args.values, args.pairs, rng=args.seed)
    model = GPT(task.vocab_size, max_len=2 * args.pairs, dtype=np.float32, rng=args.seed, kernels="fast", **CONFIG)
    started = time.time()
    losses = in_context.train_in_context(model, task, args.steps, args.batch_size, args.lr, log_every=100,
                                         log=lambda line: print(f"{line}  {time.time() - started:.0f} s", flush=True))
    held_out = KeyValueTask(args.keys, args.values, args.pairs, rng=args.seed + 1)
    accuracy = in_context.in_context_accuracy(model, held_out)
    print("accuracy by pairs shown:", np.round(accuracy["by_pair"], 2), f"seen {accuracy['seen']:.3f}",
          f"new {accuracy['new']:.3f}")
    print("induction score (layer x head):", np.round(in_context.induction_scores(model, task), 3).tolist())
    config = dict(CONFIG, n_keys=args.keys, n_values=args.values, n_pairs=args.pairs, steps=args.steps,
                  lr=args.lr, batch_size=args.batch_size, seed=args.seed)
    np.savez(args.out, losses=np.array(losses), config_keys=np.array(list(config)),
             config_values=np.array([float(value) for value in config.values()]),
             **{f"param.{name}": value for name, value in model.state_dict().items()})
    print(f"saved {args.out} ({os.path.getsize(args.out) // 1024} KB)")


if __name__ == "__main__":
    main()
