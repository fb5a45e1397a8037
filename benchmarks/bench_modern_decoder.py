"""Benchmark: the Llama-style decoder against the GPT-2-style one, equal parameter count, same recipe.

Both models are trained with the main job's recipe (`TrainConfig()`'s defaults: nanoGPT's Shakespeare-char
configuration, AdamW, cosine schedule, character tokens, float32, fast kernels) on tiny Shakespeare
(`../shared/data/tinyshakespeare.txt` next to the repository, or `--text`), three seeds each:

* GPT-2-style: learned positions, LayerNorm, GELU feed-forward of width 4 C, biases;
* Llama-style (`LLAMA_STYLE`): rotary positions, RMSNorm, SwiGLU, no biases, its hidden width chosen
  so that the two parameter counts are as close as they can be (SwiGLU has three matrices, and the
  Llama model has no position table and no biases to pay for).

`--models gpt2-rope` adds a third arm, the GPT-2-style model with rotary positions instead of its table
(8,192 parameters fewer): what RoPE alone does.

The seed fixes both the initial weights and the batches, so a seed's two runs see the same windows.
Reported: each run's final validation loss (`Trainer.evaluate`, `--eval-batches` windows), then each
model's mean and spread (sample standard deviation, and min..max) over the seeds.

Usage:
    python benchmarks/bench_modern_decoder.py [--text PATH] [--steps 2000] [--seeds 1 2 3] [--eval-batches 50]
        [--models gpt2 llama gpt2-rope]
"""

import argparse
import dataclasses
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np
from threadpoolctl import threadpool_limits

from minitransformer import GPT, LLAMA_STYLE, CharTokenizer
from minitransformer.objectives.language_model import LanguageModelObjective, Trainer
from minitransformer.training.config import TrainConfig, build_optimizer, matching_llama_width
from minitransformer.training.data import train_val_split

NAMES = {"gpt2": "GPT-2-style (LayerNorm, GELU, learned positions, biases)",
         "llama": "Llama-style (RMSNorm, SwiGLU, RoPE, no biases)",
         "gpt2-rope": "GPT-2-style with RoPE instead of the position table"}
DEFAULT_TEXT = pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "tinyshakespeare.txt"


def llama_model(config, vocab_size, d_ff):
    """The Llama-style GPT of the recipe's sizes, hidden width d_ff."""
    return GPT(vocab_size, config.d_model, config.n_heads, config.n_layers, d_ff, config.block_size,
               dtype=np.dtype(config.dtype), rng=config.seed, kernels=config.kernels, **LLAMA_STYLE)


def train_one(kind, config, data, vocab_size, llama_d_ff):
    """Train one model; return (final validation loss, parameter count, seconds)."""
    trainer = Trainer(config, *data, vocab_size, progress=False)
    if kind != "gpt2":                                   # the same trainer, with the other model
        trainer.model = (llama_model(config, vocab_size, llama_d_ff) if kind == "llama" else
                         GPT(vocab_size, config.d_model, config.n_heads, config.n_layers, config.d_ff,
                             config.block_size, dtype=np.dtype(config.dtype), rng=config.seed,
                             kernels=config.kernels, positional="rope"))
        trainer.optimizer = build_optimizer(trainer.model, config)
        trainer.objective = LanguageModelObjective(trainer.model, trainer.loss_fn)
    start = time.perf_counter()
    for _ in range(config.max_steps):
        trainer.step_on_next_batch()
    return trainer.evaluate()["val"], trainer.model.num_parameters(), time.perf_counter() - start


def summary(losses):
    spread = statistics.stdev(losses) if len(losses) > 1 else 0.0
    return f"mean {statistics.mean(losses):.4f}  sd {spread:.4f}  range {min(losses):.4f}..{max(losses):.4f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default=str(DEFAULT_TEXT), help="training text (read by path)")
    parser.add_argument("--steps", type=int, default=TrainConfig.max_steps, help="steps per run (the recipe's 2000)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--eval-batches", type=int, default=50, help="validation windows of the final evaluation")
    parser.add_argument("--models", nargs="+", choices=sorted(NAMES), default=["gpt2", "llama"])
    args = parser.parse_args(argv)
    threadpool_limits(1)            # one BLAS thread: on a shared 2-core machine more threads only wait
    text = pathlib.Path(args.text).read_text(encoding="utf-8")
    tokenizer = CharTokenizer.train(text)
    data = train_val_split(np.array(tokenizer.encode(text)))
    base = TrainConfig(max_steps=args.steps, lr_decay_steps=args.steps, eval_batches=args.eval_batches,
                       warmup_steps=min(TrainConfig.warmup_steps, args.steps // 2))     # 100 from 200 steps on
    gpt2_params = Trainer(base, *data, tokenizer.vocab_size, progress=False).model.num_parameters()
    llama_d_ff = matching_llama_width(base, tokenizer.vocab_size, gpt2_params)
    print(f"recipe: TrainConfig() with max_steps = lr_decay_steps = {args.steps}, warmup {base.warmup_steps}; "
          f"seeds {args.seeds}; final validation loss over {args.eval_batches} windows", flush=True)
    losses = {kind: [] for kind in args.models}
    for seed in args.seeds:
        config = dataclasses.replace(base, seed=seed)
        for kind in losses:
            loss, params, seconds = train_one(kind, config, data, tokenizer.vocab_size, llama_d_ff)
            losses[kind].append(loss)
            width = llama_d_ff if kind == "llama" else base.d_ff
            print(f"seed {seed}  {kind:5s}  d_ff {width:3d}  {params:,} parameters  val loss {loss:.4f}  "
                  f"({seconds:.0f} s)", flush=True)
    for kind in args.models:
        print(f"{NAMES[kind]:58s} {summary(losses[kind])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
