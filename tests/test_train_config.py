"""A run's config (training/config.py): its defaults are nanoGPT's CPU run, as nanoGPT states it; the guides say the
other defaults as they are; the optimizer gets every setting of the config; a default config trains in one process.

nanoGPT (Karpathy, github.com/karpathy/nanoGPT): the README's run for a laptop without a GPU ("I only have a
macbook") is the command below, over config/train_shakespeare_char.py, over train.py's own defaults. On the CPU
it runs without autocast, so in float32. nanoGPT also decays the embedding tables (every 2-D tensor); this
project leaves them undecayed unless asked (`decay_embeddings`), and so does its default run.
"""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from minitransformer.training.config import (
    TrainConfig,
    build_model,
    build_optimizer,
    matching_llama_width,
    parameter_count,
)
from minitransformer.training.deadlines import STEP_TIMEOUT_FACTOR

ROOT = Path(__file__).resolve().parent.parent
TRAIN_PY = {"weight_decay": 1e-1, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "decay_lr": True,
            "seed": 1337}                                   # torch.manual_seed(1337 + seed_offset), offset 0 alone
SHAKESPEARE_CHAR = {"eval_interval": 250, "eval_iters": 200, "batch_size": 64, "block_size": 256, "n_layer": 6,
                    "n_head": 6, "n_embd": 384, "dropout": 0.2, "learning_rate": 1e-3, "max_iters": 5000,
                    "lr_decay_iters": 5000, "min_lr": 1e-4, "beta2": 0.99, "warmup_iters": 100}
CPU_RUN = ("python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 "
           "--log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 "
           "--lr_decay_iters=2000 --dropout=0.0")
OURS = {"block_size": "block_size", "batch_size": "batch_size", "n_layer": "n_layers", "n_head": "n_heads",
        "n_embd": "d_model", "dropout": "dropout", "max_iters": "max_steps", "learning_rate": "lr", "min_lr": "min_lr",
        "warmup_iters": "warmup_steps", "lr_decay_iters": "lr_decay_steps", "weight_decay": "weight_decay",
        "beta1": "beta1", "beta2": "beta2", "grad_clip": "grad_clip", "eval_interval": "eval_interval",
        "eval_iters": "eval_batches", "seed": "seed"}
SMALL = dict(block_size=8, batch_size=4, n_layers=1, n_heads=2, d_model=8, d_ff=16)


def _number(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def test_the_defaults_are_nanogpts_cpu_run():
    nanogpt = {**TRAIN_PY, **SHAKESPEARE_CHAR}
    nanogpt.update(option[2:].split("=") for option in CPU_RUN.split() if option.startswith("--"))
    nanogpt = {name: _number(value) if isinstance(value, str) else value for name, value in nanogpt.items()}
    defaults = TrainConfig()
    for theirs, ours in OURS.items():
        assert getattr(defaults, ours) == nanogpt[theirs], f"TrainConfig.{ours}: nanoGPT's {theirs} is {nanogpt[theirs]}"
    assert defaults.d_ff == 4 * nanogpt["n_embd"]                  # nanoGPT's MLP: 4 n_embd wide
    assert defaults.schedule == "cosine" and nanogpt["decay_lr"]   # its warmup, then the cosine to min_lr
    assert nanogpt["device"] == "cpu" and defaults.dtype == "float32"


def _words(page, pattern):
    found = re.search(pattern, " ".join((ROOT / page).read_text(encoding="utf-8").split()))
    assert found, f"{page} no longer says {pattern!r}"
    return found.groups()


def test_the_guides_say_the_defaults_of_the_ranks_and_the_kernels():
    """A run given no --parallel, as the guide shows its first line; the worker timeout; the tier of the trainer."""
    (mode,) = _words("docs/guide/training-and-sampling.md",
                     r"`mpiexec -n 2 python -m minitransformer train \.\.\.`.*?`one job of 2 MPI ranks, (\w+), 1 BLAS")
    seconds, factor = _words("docs/guide/training-and-sampling.md",
                             r"`--worker-timeout`, default (\d+) s or (\d+) times the slowest step")
    (kernels,) = _words("docs/guide/plain-and-fast.md",
                        r"the trainer \(`TrainConfig`\), `python -m minitransformer train` and the benchmark default to (\w+)")
    defaults = TrainConfig()
    assert (defaults.parallel, defaults.worker_timeout, defaults.kernels) == (mode, float(seconds), kernels)
    assert STEP_TIMEOUT_FACTOR == int(factor)


def test_a_default_config_trains_in_one_process(monkeypatch):
    """No mpiexec, no option: one process (a config asking for more ranks than the process has is refused)."""
    from minitransformer.objectives.language_model import Trainer

    for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    ids = np.arange(40) % 5
    trainer = Trainer(TrainConfig(**SMALL), ids[:30], ids[30:], 5, progress=False)
    assert trainer.parallel is None


def test_the_optimizer_gets_the_configs_betas_and_decay_and_leaves_the_embedding_tables_undecayed_by_default():
    config = TrainConfig(**SMALL, beta1=0.8, beta2=0.95, weight_decay=0.3)
    model = build_model(config, 11)
    tables = [param for _, param in model.named_parameters() if param.embedding]
    assert tables

    def decayed(optimizer):
        return [id(param) for group in optimizer.groups if group["weight_decay"] == 0.3 for param in group["params"]]
    optimizer = build_optimizer(model, config)
    assert (optimizer.beta1, optimizer.beta2) == (0.8, 0.95)
    assert decayed(optimizer) and not set(decayed(optimizer)) & {id(table) for table in tables}
    assert {id(table) for table in tables} <= set(decayed(build_optimizer(model, dataclasses.replace(
        config, decay_embeddings=True))))


@pytest.mark.parametrize("kernels, workers, fast", [("fast", 1, True), ("plain", 1, False), ("plain", 2, True)])
def test_the_optimizer_is_the_fast_form_for_the_fast_kernels_and_for_ranks(kernels, workers, fast):
    """The ranks' collectives send the fast form's flat buffers, so a data-parallel run takes it with either tier."""
    config = TrainConfig(**SMALL, kernels=kernels, workers=workers)
    assert hasattr(build_optimizer(build_model(config, 11), config), "data") == fast


def test_a_resumed_run_may_change_how_long_and_how_it_runs_and_nothing_that_changes_its_numbers():
    """By hand: its length and evaluation, its ranks, their mode and waits, and the kernels (the same numbers) may
    change (resuming.py's continued_config); every other field is refused, named."""
    from minitransformer.training.resuming import ResumeRefused, continued_config

    saved = TrainConfig(**SMALL)
    may = {"max_steps": 10, "eval_interval": 3, "eval_batches": 2, "workers": 2, "parallel": "sharded",
           "kernels": "plain", "worker_timeout": 5.0}
    for name, value in may.items():
        assert continued_config(saved, dataclasses.replace(saved, **{name: value}), "run") is not saved, name
    for field in dataclasses.fields(saved):
        if field.name not in may:
            value = getattr(saved, field.name)
            other = not value if isinstance(value, bool) else value + ("x" if isinstance(value, str) else 1)
            with pytest.raises(ResumeRefused, match=f"different config: {field.name}: checkpoint"):
                continued_config(saved, dataclasses.replace(saved, **{field.name: other}), "run")


@pytest.mark.parametrize("kernels", ["plain", "fast"])
def test_the_model_is_built_in_the_configs_kernels(kernels):
    from minitransformer.core.tiers import kernels_of

    assert kernels_of(build_model(TrainConfig(**SMALL, kernels=kernels), 11)) == kernels


def test_the_matching_llama_width_is_the_one_whose_count_is_nearest_the_target():
    """Against a search over the widths 1 to 60: for targets below the 1-wide model's count (width 1, the least),
    and between and beyond the counts (one hidden unit costs 3 C n_layers = 24 here; no target halfway)."""
    config = TrainConfig(**SMALL)

    def count(width):
        return parameter_count(dataclasses.replace(config, style="llama", d_ff=width), 11)
    for target in range(count(1) - 50, count(40)):
        if (target - count(1)) % 24 != 12:
            nearest = min(range(1, 61), key=lambda width: abs(count(width) - target))
            assert matching_llama_width(config, 11, target) == nearest, target


def test_an_unknown_schedule_or_style_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown schedule 'linear'; expected 'cosine', 'noam' or 'constant'"):
        TrainConfig(**SMALL, schedule="linear").learning_rate(0)
    with pytest.raises(ValueError, match=r"TrainConfig expected style in \('gpt2', 'llama'\), got 'bert'"):
        build_model(TrainConfig(**SMALL, style="bert"), 11)
