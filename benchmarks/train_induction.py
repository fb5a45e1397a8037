"""Train 2-layer attention-only GPTs on random tokens with a repeated segment, several seeds, and score every
head for the marks of an induction head.

    python benchmarks/train_induction.py [--seeds 0 1 2] [--steps 2500] [--out data/induction_gpt.npz]

A GPT of 2 layers of 2 heads, C = 32, rotary positions and no feed-forward sublayers (d_ff = 0; Olsson et al.
2022 study such models) learns `RepeatedSegmentTask` (minitransformer/tasks/repeated_segment.py: 64 token ids,
T = 32, a segment of 4 to 10 tokens repeated at a random distance) through the one training loop, AdamW from a
`TrainConfig` and its cosine schedule, the loss counting the repeat's targets alone. Per seed the script prints
the losses on the random and the repeated part every 100 steps, the step at which the repeated part's loss has
fallen half way (`drop_step`), the repeated part's loss before and after the drop, and every head's
previous-token, prefix-matching and copying scores (minitransformer/models/head_scores.py) on held-out
sequences; it names the induction head (layer 1's best prefix matcher) and the previous-token head of layer 0
that feeds it. Training takes longer than a notebook's time budget, so `--out` saves the first seed's weights
and every seed's loss curves and scores to one .npz for notebook 19 to load (an existing file is not
overwritten unless `--force`). The same seed gives the same numbers; the 3-seed result is in
benchmarks/README.md.
"""

import argparse
import os
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitransformer import GPT  # noqa: E402
from minitransformer.models.head_scores import head_scores  # noqa: E402
from minitransformer.objectives import induction  # noqa: E402
from minitransformer.tasks.repeated_segment import RepeatedSegmentTask  # noqa: E402
from minitransformer.training.config import TrainConfig  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "induction_gpt.npz")
TASK = dict(vocab_size=64, seq_len=32, min_length=4, max_length=10)
SAVED_FIELDS = ("block_size", "n_layers", "n_heads", "d_model", "d_ff", "max_steps", "lr", "batch_size", "seed")
EVAL_SEED = 12345                   # the held-out sequences, the same for every seed


def run_config(seed, steps, d_model=32, n_heads=2, lr=3e-3, batch_size=64):
    """The `TrainConfig` of one run: 2 layers, attention only (d_ff = 0); AdamW, cosine from `lr` to lr / 10."""
    return TrainConfig(block_size=TASK["seq_len"], batch_size=batch_size, n_layers=2, n_heads=n_heads,
                       d_model=d_model, d_ff=0, max_steps=steps, lr=lr, min_lr=lr / 10, warmup_steps=100,
                       lr_decay_steps=steps, weight_decay=0.0, grad_clip=1.0, seed=seed, eval_interval=25)


def build_gpt(config, vocab_size, positional):
    """`build_model`'s GPT with another position scheme: `positional` ("rope": rotary, which makes a head that
    looks one place back a matter of one rotation, and gives no absolute position to learn a prior from)."""
    return GPT(vocab_size, config.d_model, config.n_heads, config.n_layers, config.d_ff, config.block_size,
               positional=positional, dtype=np.dtype(config.dtype), rng=config.seed, kernels=config.kernels)


def train_one(seed, args):
    """Train one seed; returns dict: seed, weights (the model's state dict), config, history (from
    `train_induction`), scores (from `head_scores`), seconds. Logs every 100 steps, lines prefixed by the seed."""
    started = time.time()
    config = run_config(seed, args.steps, args.d_model, args.heads, args.lr, args.batch_size)
    task = RepeatedSegmentTask(**TASK, rng=np.random.default_rng([1, seed]))
    held_out = RepeatedSegmentTask(**TASK, rng=EVAL_SEED)
    eval_batch = held_out.batch(256)
    model = build_gpt(config, TASK["vocab_size"], args.positional)
    history = induction.train_induction(model, task, config, eval_batch, eval_every=config.eval_interval,
                                        log=lambda line: print(f"seed {seed}: {line}", flush=True), log_every=100,
                                        repeat_only=not args.all_targets)
    x, _, earlier_next = held_out.batch(512)
    return dict(seed=seed, weights=model.state_dict(), config=config, history=history,
                scores=head_scores(model, x, earlier_next), seconds=time.time() - started)


def chosen_heads(scores):
    """((1, h), (0, h')): layer 1's best prefix matcher, the induction head, and the head of layer 0 that looks
    most at the previous token, the one whose output its keys read."""
    return (1, int(scores["prefix_matching"][1].argmax())), (0, int(scores["previous_token"][0].argmax()))


def report(seed, history, scores, seconds):
    """Print one seed's summary; returns (induction head, previous-token head) as (layer, head) pairs."""
    steps, repeated = history["eval_step"], history["repeated_loss"]
    drop = induction.drop_step(steps, repeated)
    before, after = repeated[steps <= drop - 200], repeated[steps >= drop + 200]
    print(f"seed {seed}: repeated part's loss half way down at step {drop}: {before[-1] if before.size else repeated[0]:.3f}"
          f" 200 steps before, {after[0] if after.size else repeated[-1]:.3f} 200 steps after; final losses: "
          f"random part {history['random_loss'][-1]:.3f}, repeated part {repeated[-1]:.3f}  ({seconds:.0f} s)")
    for name, table in scores.items():
        print(f"  {name:16s}" + "   ".join(f"layer {layer}: " + " ".join(f"{value:5.2f}" for value in row)
                                          for layer, row in enumerate(table)))
    induction_head, previous_head = chosen_heads(scores)
    print(f"  induction head: layer 1 head {induction_head[1]} (prefix matching "
          f"{scores['prefix_matching'][induction_head]:.2f}, copying {scores['copying'][induction_head]:.2f}); "
          f"previous-token head feeding it: layer 0 head {previous_head[1]} "
          f"(previous token {scores['previous_token'][previous_head]:.2f})", flush=True)
    return induction_head, previous_head


def save(path, runs, positional):
    """One .npz: the first run's weights and config, every run's curves, scores and chosen heads."""
    config = runs[0]["config"]
    arrays = {f"param.{name}": value for name, value in runs[0]["weights"].items()}
    settings = {name: getattr(config, name) for name in SAVED_FIELDS}
    settings.update(TASK)
    arrays["config_keys"] = np.array(list(settings))
    arrays["config_values"] = np.array([float(value) for value in settings.values()])
    arrays["positional"] = np.array(positional)
    for run in runs:
        prefix = f"seed{run['seed']}."
        arrays.update({prefix + name: value for name, value in run["history"].items()})
        arrays.update({prefix + name: value for name, value in run["scores"].items()})
        arrays[prefix + "heads"] = np.array([run["heads"][0], run["heads"][1]])   # induction, previous-token
    arrays["seeds"] = np.array([run["seed"] for run in runs])
    np.savez_compressed(path, **arrays)
    print(f"saved {path} ({os.path.getsize(path) // 1024} KB)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=2500)
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--positional", default="rope", choices=["rope", "learned"])
    parser.add_argument("--all-targets", action="store_true",
                        help="the loss counts every target, the random part's too (default: the repeat's alone)")
    parser.add_argument("--out", default=None, help=f"save the weights and curves here (e.g. {OUT})")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    args = parser.parse_args(argv)
    if args.out and os.path.exists(args.out) and not args.force:
        parser.error(f"{args.out} exists; pass --force to overwrite it")
    if args.steps <= 100:
        parser.error(f"--steps must be > 100 (the warm-up), got {args.steps}")
    threadpool_limits(1)            # one BLAS thread: the products are tiny, and the machine is shared
    runs = [train_one(seed, args) for seed in args.seeds]          # one at a time
    for run in runs:
        run["heads"] = report(run["seed"], run["history"], run["scores"], run["seconds"])
    if args.out:
        save(args.out, runs, args.positional)


if __name__ == "__main__":
    main()
