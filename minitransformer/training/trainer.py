"""Training a GPT language model: the loop, evaluation, progress, loss curve and checkpoints.

One step (lecture notes 2025 §1.6; nanoGPT's train.py):

    lr      = config.learning_rate(step)          warmup + cosine decay, or the notes' rule (schedules.py)
    x, y    = get_batch(train, T, B, data_rng)    random windows, the target shifted by one
    train_step(LanguageModelObjective(model), optimizer, (x, y), lr, grad_clip)
            zero_grad; loss = CrossEntropy(model(x), y); backward; clip the global gradient
            norm (the factor folded into AdamW's update); AdamW with decoupled weight decay

`train_step` (step.py) is the one step every objective of the course trains with;
the config and the builders of the model and AdamW are in config.py.

Every `eval_interval` steps (and at the end) the mean loss over `eval_batches`
held-out batches is measured with dropout off, a checkpoint is written and the
loss-curve PNG redrawn. The evaluation batches come from their own generator,
seeded the same way at each evaluation, so evaluating never disturbs the
training batches, and every evaluation compares the same windows.

Reproducibility: the model's weights and dropout masks come from `seed`, the
batches from a generator derived from it; a checkpoint stores both generators'
states, so a resumed run draws the very same batches and masks and produces
the same losses, bit for bit, as one that never stopped.

With `workers` > 1 each batch's forward and backward passes are split across
processes, which then share the clipping norm and the AdamW update (data
parallel, parallel.py); the numbers are the same up to float rounding.

Left out: gradient accumulation, mixed precision.
"""

import dataclasses
import os
import time

import numpy as np

from ..layers.loss import CrossEntropyLoss
from .checkpoint import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint
from .config import TrainConfig, build_model, build_optimizer, build_parameter_groups  # noqa: F401 (0.2 had them here)
from .data import get_batch
from .objectives import LanguageModelObjective
from .parallel import DataParallel, TornUpdate
from .step import train_step


def evaluation_batches(data, config, n_batches=None):
    """The evaluation windows: `n_batches` (default config.eval_batches) (x, y) pairs of (B, T) ids.

    They come from a generator of their own, seeded [seed, 2] afresh at each call, so every evaluation
    compares the same windows and never disturbs the training batches; a longer list starts with the
    standard one.
    """
    rng = np.random.default_rng([config.seed, 2])
    return [get_batch(data, config.block_size, config.batch_size, rng)
            for _ in range(config.eval_batches if n_batches is None else n_batches)]


class Trainer:
    """Trains a fresh GPT on token arrays, or continues one from a checkpoint (`Trainer.resume`).

    Args:
        config: TrainConfig.
        train_data, val_data: 1-D int arrays of token ids.
        vocab_size: V.
        out_dir: where checkpoints and loss.png go (None: nowhere).
        tokenizer_config: stored in checkpoints so `sample` can decode (dict or None).
        progress: show a tqdm progress bar.
    """

    def __init__(self, config, train_data, val_data, vocab_size, out_dir=None, tokenizer_config=None, progress=True):
        if type(config.workers) is not int or not 1 <= config.workers <= config.batch_size:
            raise ValueError(f"Trainer: TrainConfig.workers must be an int from 1 to batch_size "
                             f"({config.batch_size}), got {config.workers!r} ({type(config.workers).__name__})")
        self.config, self.out_dir, self.progress = config, out_dir, progress
        self.train_data, self.val_data = np.asarray(train_data), np.asarray(val_data)
        self.tokenizer_config = tokenizer_config
        self.model = build_model(config, vocab_size)
        self.optimizer = build_optimizer(self.model, config)
        self.loss_fn = CrossEntropyLoss()
        self.objective = LanguageModelObjective(self.model, self.loss_fn)
        self.data_rng = np.random.default_rng([config.seed, 1])
        self.step = 0
        self.history = {"step": [], "loss": [], "lr": [], "eval": []}     # eval rows: [step, train, val]
        self.step_times = []
        self.parallel = None            # DataParallel, started by the first step when config.workers > 1
        self.torn = None                # the TornUpdate that left the weights half updated, if one did

    # ---------------------------------------------------------------- one step, evaluation
    def train_step(self):
        """One optimisation step; returns the training loss of the batch (a Python float)."""
        self._refuse_if_torn("train_step")
        config = self.config
        lr = config.learning_rate(self.step)
        x, y = get_batch(self.train_data, config.block_size, config.batch_size, self.data_rng)
        if config.workers > 1:
            if self.parallel is None or not self.parallel.alive:      # first step, or the last one failed
                self.parallel = DataParallel(self.model, self.optimizer, config, self.model.vocab_size, self.loss_fn)
            try:
                loss = self.parallel.train_step(x, y, self.step, lr)    # the same step, split over processes
            except TornUpdate as error:
                self.torn = error
                raise
        else:
            loss = train_step(self.objective, self.optimizer, (x, y), lr, config.grad_clip)   # step.py's
        self.step += 1
        self.history["step"].append(self.step)
        self.history["loss"].append(loss)
        self.history["lr"].append(lr)
        return loss

    def _refuse_if_torn(self, action):
        """A run whose weights a failed data-parallel update left half updated must not train on or be saved."""
        if self.torn is not None:
            raise TornUpdate(f"Trainer.{action}: a data-parallel update failed half way at step {self.step + 1}, "
                             "so the weights are part updated; this run cannot go on or be saved. Resume it "
                             f"from its last checkpoint (Trainer.resume). The failure: {self.torn.__cause__!r}")

    def close(self):
        """Stop the worker processes of a data-parallel run (they also stop when the trainer is collected)."""
        if self.parallel is not None:
            self.parallel.close()
            self.parallel = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def evaluate(self):
        """Mean loss over `eval_batches` windows of the training and the validation data, dropout off."""
        config = self.config
        losses = {}
        with self.model.evaluating():
            for split, data in (("train", self.train_data), ("val", self.val_data)):
                losses[split] = float(np.mean([float(self.loss_fn(self.model(x), y))
                                               for x, y in evaluation_batches(data, config)]))
        return losses

    # ---------------------------------------------------------------- the loop
    def fit(self, max_steps=None, on_eval=None):
        """Train until `max_steps` (default config.max_steps), evaluating and checkpointing on the way.

        Args:
            on_eval: optional callback(trainer, losses) after each evaluation.
        Returns:
            the last evaluation's losses {"train": ..., "val": ...}.
        """
        from tqdm import tqdm

        config = self.config
        max_steps = config.max_steps if max_steps is None else max_steps
        tokens_per_step = config.batch_size * config.block_size
        losses = None
        bar = tqdm(total=max_steps, initial=self.step, disable=not self.progress, unit="step", dynamic_ncols=True)
        while self.step < max_steps:
            started = time.perf_counter()
            loss = self.train_step()
            elapsed = time.perf_counter() - started
            self.step_times.append(elapsed)
            bar.update(1)
            bar.set_postfix_str(f"loss {loss:.3f}  lr {self.history['lr'][-1]:.2e}  "
                                f"{tokens_per_step / elapsed:,.0f} tok/s", refresh=False)
            if self.step % config.eval_interval == 0 or self.step == max_steps:
                losses = self.evaluate()
                self.history["eval"].append([self.step, losses["train"], losses["val"]])
                bar.write(f"step {self.step:>5}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
                if self.out_dir is not None:
                    self.save(self.out_dir)
                    self.plot(os.path.join(self.out_dir, "loss.png"))
                if on_eval is not None:
                    on_eval(self, losses)
        bar.close()
        return losses

    # ---------------------------------------------------------------- checkpoints and pictures
    def save(self, directory):
        """Write a checkpoint that `Trainer.resume` continues exactly."""
        self._refuse_if_torn("save")
        meta = {"step": self.step, "train_config": _config_dict(self.config), "tokenizer": self.tokenizer_config,
                "history": self.history,
                "rng": {"data": self.data_rng.bit_generator.state,
                        "dropout": self.model.dropout_rng.bit_generator.state}}
        save_checkpoint(directory, self.model, self.optimizer, meta)

    @classmethod
    def resume(cls, directory, train_data, val_data, config=None, out_dir=None, progress=True, contents=None):
        """Continue the run saved in `directory`.

        Args:
            config: optional TrainConfig; it may differ from the saved one only in
                TrainConfig.RESUMABLE fields (e.g. a larger max_steps), else CheckpointError.
            contents: `read_checkpoint(directory)`'s result, if the caller has read it already.
        """
        contents = read_checkpoint(directory) if contents is None else contents
        meta = contents[0]
        saved = TrainConfig(**meta["train_config"])
        if config is not None:
            differences = [f"{field}: checkpoint {getattr(saved, field)!r}, now {getattr(config, field)!r}"
                           for field in _config_dict(saved)
                           if field not in TrainConfig.RESUMABLE and getattr(saved, field) != getattr(config, field)]
            if differences:
                raise CheckpointError(f"checkpoint {directory} was trained with a different config: "
                                      + "; ".join(differences))
            saved = config
        trainer = cls(saved, train_data, val_data, meta["model_config"]["vocab_size"], out_dir=out_dir,
                      tokenizer_config=meta.get("tokenizer"), progress=progress)
        meta = load_checkpoint(directory, trainer.model, trainer.optimizer, contents=contents)
        trainer.step = meta["step"]
        trainer.history = meta["history"]
        trainer.data_rng.bit_generator.state = meta["rng"]["data"]
        trainer.model.dropout_rng.bit_generator.state = meta["rng"]["dropout"]
        return trainer

    def plot(self, path):
        """Save the loss curve: every step's training loss, and the evaluations.

        A bare `Figure` (no pyplot) draws straight to the file, so saving the
        curve never switches the backend of a notebook that calls this.
        """
        from matplotlib.figure import Figure

        figure = Figure(figsize=(7, 4))
        axes = figure.subplots()
        axes.plot(self.history["step"], self.history["loss"], color="0.75", linewidth=0.8, label="batch loss")
        if self.history["eval"]:
            steps, train, val = zip(*self.history["eval"])
            axes.plot(steps, train, "o-", label=f"train ({self.config.eval_batches} batches)")
            axes.plot(steps, val, "s-", label="validation")
        axes.set_xlabel("step")
        axes.set_ylabel("cross-entropy (nats per token)")
        axes.legend()
        axes.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, dpi=100)


def _config_dict(config):
    return dataclasses.asdict(config)
