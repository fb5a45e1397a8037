"""Train 2-layer attention-only GPTs on repeated random halves, several seeds, and score every head for the
marks of an induction head.

    python benchmarks/train_induction.py [--seeds 0 1 2] [--jobs 3] [--steps 1500] [--out data/induction_gpt.npz]

A 2-layer, 4-head GPT without feed-forward sublayers (d_ff = 0; Olsson et al. 2022 study such models) learns
`RepeatedHalfTask` (minitransformer/tasks/repeated_half.py) through the one training loop, AdamW from a
`TrainConfig` and its cosine schedule. Per seed the script prints the losses on the random and the repeated part
every 100 steps, the step at which the repeated part's loss has fallen half way (`drop_step`), the final losses,
and every head's previous-token, prefix-matching and copying scores (minitransformer/models/head_scores.py) on
held-out sequences; it names the induction head (layer 1's best prefix matcher) and the previous-token head of
layer 0 that feeds it. Training takes longer than a notebook's time budget, so `--out` saves the first seed's
weights and every seed's loss curves and scores to one .npz for a notebook to load (an existing file is not
overwritten unless `--force`). The same seed gives the same numbers. The runs so far, and what their scores
show (no induction head yet), are in benchmarks/README.md.
"""

import argparse
import functools
import multiprocessing
import os
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitransformer import GPT  # noqa: E402
from minitransformer.models.head_scores import head_scores  # noqa: E402
from minitransformer.objectives import induction  # noqa: E402
from minitransformer.tasks import repeated_half  # noqa: E402
from minitransformer.training.config import TrainConfig  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "induction_gpt.npz")
TASK = dict(vocab_size=64, max_half=16, min_half=8)
SAVED_FIELDS = ("block_size", "n_layers", "n_heads", "d_model", "d_ff", "max_steps", "lr", "batch_size", "seed")
EVAL_SEED = 12345                   # the held-out sequences, the same for every seed


def run_config(seed, steps, d_model=64, n_heads=4, lr=3e-3, max_half=TASK["max_half"]):
    """The `TrainConfig` of one run: 2 layers, attention only (d_ff = 0); AdamW, cosine from `lr` to lr / 10."""
    return TrainConfig(block_size=2 * max_half - 1, batch_size=32, n_layers=2, n_heads=n_heads,
                       d_model=d_model, d_ff=0, max_steps=steps, lr=lr, min_lr=lr / 10, warmup_steps=50,
                       lr_decay_steps=steps,
                       weight_decay=0.0, grad_clip=1.0, seed=seed, eval_interval=25)


def build_gpt(config, vocab_size, positional):
    """`build_model`'s GPT with another position scheme: `positional` ("rope": rotary, so no head can learn
    where the repeat starts from absolute positions)."""
    return GPT(vocab_size, config.d_model, config.n_heads, config.n_layers, config.d_ff, config.block_size,
               positional=positional, dtype=np.dtype(config.dtype), rng=config.seed, kernels=config.kernels)


def train_one(seed, args):
    """Train one seed; returns dict: seed, weights (the model's state dict), config, history (from
    `train_induction`), scores (from `head_scores`), seconds. Logs every 100 steps, lines prefixed by the seed."""
    threadpool_limits(1)            # one BLAS thread: on a shared 2-core machine more threads only wait
    started = time.time()
    config = run_config(seed, args.steps, args.d_model, args.heads, args.lr, args.max_half)
    shape = dict(vocab_size=TASK["vocab_size"], max_half=args.max_half)
    task = repeated_half.RepeatedHalfTask(**shape, min_half=args.min_half, rng=np.random.default_rng([1, seed]))
    held_out = repeated_half.RepeatedHalfTask(**shape, min_half=args.max_half // 2, rng=EVAL_SEED)
    eval_batch = held_out.batch(256)
    model = build_gpt(config, TASK["vocab_size"], args.positional)
    history = induction.train_induction(model, task, config, eval_batch, eval_every=config.eval_interval,
                                        log=lambda line: print(f"seed {seed}: {line}", flush=True), log_every=100)
    x, _, half = held_out.batch(512)
    return dict(seed=seed, weights=model.state_dict(), config=config, history=history,
                scores=head_scores(model, x, repeated_half.earlier_next(half, x.shape[1])), seconds=time.time() - started)


def report(seed, history, scores, seconds):
    """Print one seed's summary; returns (induction head, previous-token head) as (layer, head) pairs."""
    drop = induction.drop_step(history["eval_step"], history["repeated_loss"])
    print(f"seed {seed}: repeated part's loss half way down at step {drop}; final losses: random part "
          f"{history['random_loss'][-1]:.3f}, repeated part {history['repeated_loss'][-1]:.3f}  ({seconds:.0f} s)")
    for name, table in scores.items():
        print(f"  {name:16s}" + "   ".join(f"layer {layer}: " + " ".join(f"{value:5.2f}" for value in row)
                                          for layer, row in enumerate(table)))
    induction_head = (1, int(scores["prefix_matching"][1].argmax()))
    previous_head = (0, int(scores["previous_token"][0].argmax()))
    print(f"  induction head: layer 1 head {induction_head[1]} (prefix matching "
          f"{scores['prefix_matching'][induction_head]:.2f}, copying {scores['copying'][induction_head]:.2f}); "
          f"previous-token head: layer 0 head {previous_head[1]} "
          f"({scores['previous_token'][previous_head]:.2f})", flush=True)
    return induction_head, previous_head


def save(path, runs, max_half, min_half, positional):
    """One .npz: the first run's weights and config, every run's curves, scores and chosen heads."""
    config = runs[0]["config"]
    arrays = {f"param.{name}": value for name, value in runs[0]["weights"].items()}
    settings = {name: getattr(config, name) for name in SAVED_FIELDS}
    settings.update(vocab_size=TASK["vocab_size"], max_half=max_half, min_half=min_half)
    arrays["config_keys"] = np.array(list(settings))
    arrays["config_values"] = np.array([float(value) for value in settings.values()])
    arrays["positional"] = np.array(positional)
    for run in runs:
        prefix = f"seed{run['seed']}."
        arrays.update({prefix + name: value for name, value in run["history"].items()})
        arrays.update({prefix + name: value for name, value in run["scores"].items()})
        arrays[prefix + "heads"] = np.array([run["heads"][0], run["heads"][1]])   # induction, previous-token
    arrays["seeds"] = np.array([run["seed"] for run in runs])
    np.savez(path, **arrays)
    print(f"saved {path} ({os.path.getsize(path) // 1024} KB)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--positional", default="learned", choices=["learned", "rope"])
    parser.add_argument("--max-half", type=int, default=TASK["max_half"])
    parser.add_argument("--min-half", type=int, default=TASK["min_half"],
                        help=f"shortest half in training (default {TASK['min_half']}; {TASK['max_half']}: every "
                             "half equally long, which a head can learn by position alone)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained at once, one process each")
    parser.add_argument("--out", default=None, help=f"save the weights and curves here (e.g. {OUT})")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    args = parser.parse_args(argv)
    if args.out and os.path.exists(args.out) and not args.force:
        parser.error(f"{args.out} exists; pass --force to overwrite it")
    if not 2 <= args.min_half <= args.max_half or args.steps <= 50:
        parser.error(f"--min-half must be in 2 .. --max-half ({args.max_half}) and --steps > 50 (the warm-up), "
                     f"got {args.min_half} and {args.steps}")
    with multiprocessing.Pool(args.jobs) as pool:          # seeds are independent: one process each
        runs = pool.map(functools.partial(train_one, args=args), args.seeds)
    for run in runs:
        run["heads"] = report(run["seed"], run["history"], run["scores"], run["seconds"])
    if args.out:
        save(args.out, runs, args.max_half, args.min_half, args.positional)


if __name__ == "__main__":
    main()
