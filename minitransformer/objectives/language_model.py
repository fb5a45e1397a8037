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
loss-curve PNG redrawn. A fresh `Trainer` never replaces a checkpoint it did not
write: one already in `out_dir` is refused unless `overwrite=True` (or continued
with `Trainer.resume`).

Nothing non-finite is kept: a loss or gradient norm that is NaN or infinite
(e.g. a learning rate far too large) stops training with `TrainingDiverged`
naming the step, before anything is saved, so the last checkpoint stays as it
was; the trainer then refuses to train on or save.

The evaluation batches come from their own generator, seeded the same way at
each evaluation, so evaluating never disturbs the training batches, and every
evaluation compares the same windows.

Reproducibility: the model's weights and dropout masks come from `seed`, the
batches from a generator derived from it; a checkpoint stores both generators'
states, so a resumed run draws the very same batches and masks and produces
the same losses, bit for bit, as one that never stopped.

Under `mpiexec -n N` (TrainConfig.workers = N) every rank runs this same loop on
its share of each batch (distributed.py); rank 0 alone evaluates, prints and
saves, and a rank that raises ends the job with one line naming it.

Left out: gradient accumulation, mixed precision, skipping a bad batch and going on.
"""

import dataclasses
import math
import os
import sys
import time

import numpy as np

from ..core.module import Module
from ..layers.loss import CrossEntropyLoss
from ..training.checkpoint import (
    CheckpointError,
    CheckpointExistsError,
    check_training_meta,
    has_checkpoint,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from ..training.config import TrainConfig, build_model, build_optimizer
from ..training.data import get_batch
from ..training.distributed import MODES, DataParallel, mpi_world
from ..training.loop import RATE_WINDOW, TrainingDiverged, TrainingInterrupted, is_terminal, stop_at_step_boundary
from ..training.metrics import perplexity
from ..training.step import train_step


class LanguageModelObjective(Module):
    """Next-token prediction: the mean cross-entropy of model(x) against the targets y.

    Args:
        model: maps x int (B, T) to logits (B, T, V), e.g. a GPT.
        loss: the loss layer (default CrossEntropyLoss(); pass CrossEntropyLoss(ignore_index=-1) when some
            targets are to be ignored).
    """

    def __init__(self, model, loss=None):
        self.model = model
        self.loss = CrossEntropyLoss() if loss is None else loss

    def forward(self, x, y):
        """x int (B, T), y int (B, T) -> the loss, a 0-d float."""
        return self.loss(self.model(x), y)

    def backward(self, grad=1.0):
        """dlogits = d loss / d logits, sent back through the model."""
        self.model.backward(self.loss.backward(grad))

    def __repr__(self):
        return f"LanguageModelObjective({self.model!r}, {self.loss!r})"


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
        overwrite: if `out_dir` already holds a checkpoint, replace it (only its checkpoint files: the
            JSON, the arrays file it names, loss.png) instead of refusing with CheckpointExistsError.
    """

    def __init__(self, config, train_data, val_data, vocab_size, out_dir=None, tokenizer_config=None, progress=True,
                 overwrite=False):
        if out_dir is not None and not overwrite and has_checkpoint(out_dir):
            raise CheckpointExistsError(
                f"Trainer: out_dir {os.fspath(out_dir)} already holds a checkpoint, which a fresh run would "
                f"replace; continue it with Trainer.resume({os.fspath(out_dir)!r}, ...), pass overwrite=True to "
                "replace it, or choose another out_dir")
        for name, floor in (("block_size", 1), ("batch_size", 1), ("eval_interval", 1), ("eval_batches", 1),
                            ("max_steps", 0)):
            value = getattr(config, name)
            if type(value) is not int or value < floor:
                raise ValueError(f"Trainer: TrainConfig.{name} must be a whole number >= {floor}, got {value!r}")
        for split, data in (("train_data", train_data), ("val_data", val_data)):
            if len(data) < config.block_size + 1:
                raise ValueError(f"Trainer: {split} has {len(data)} tokens, fewer than one window of "
                                 f"block_size + 1 = {config.block_size + 1}")
        if type(config.workers) is not int or not 1 <= config.workers <= config.batch_size:
            raise ValueError(f"Trainer: TrainConfig.workers must be an int from 1 to batch_size "
                             f"({config.batch_size}), got {config.workers!r} ({type(config.workers).__name__})")
        if config.parallel not in MODES:
            raise ValueError(f"Trainer: TrainConfig.parallel must be one of {MODES}, got {config.parallel!r}")
        self.rank, size = mpi_world()
        if size != config.workers:
            raise ValueError(f"Trainer: TrainConfig.workers is {config.workers}, but this process is one of {size} "
                             f"MPI rank(s); launch it as `mpiexec -n {config.workers} python ...` (distributed.py)")
        self.config, self.out_dir, self.progress = config, out_dir, progress
        # directories whose checkpoint this trainer may replace: ones it wrote, resumed from, or was told to
        self.replaceable = {os.path.realpath(out_dir)} if out_dir is not None and overwrite else set()
        self.last_saved = None          # (step, directory) of the last checkpoint this trainer wrote
        self.train_data, self.val_data = np.asarray(train_data), np.asarray(val_data)
        self.tokenizer_config = tokenizer_config
        self.run_info = None            # what the `train` command stores to resume the run as it was (options, text)
        self.model = build_model(config, vocab_size)
        self.optimizer = build_optimizer(self.model, config)
        self.loss_fn = CrossEntropyLoss()
        self.objective = LanguageModelObjective(self.model, self.loss_fn)
        self.data_rng = np.random.default_rng([config.seed, 1])
        self.step = 0
        self.history = {"step": [], "loss": [], "lr": [], "eval": [],     # eval rows: [step, train, val]
                        "perplexity": []}                                 # rows: [step, train, val] perplexities
        self.step_times = []
        self.diverged = None            # the TrainingDiverged that stopped this run, if one did
        self.parallel = None if config.workers == 1 else DataParallel(self.model, self.optimizer, self.loss_fn,
                                                                      config, config.parallel)
        self.stop_requested = False     # data parallel: a rank was interrupted; every rank stops after this step

    # ---------------------------------------------------------------- one step, evaluation
    def step_on_next_batch(self):
        """One optimisation step on the next training batch; returns its training loss (a Python float)."""
        self._refuse_if_diverged("step_on_next_batch")
        config = self.config
        lr = config.learning_rate(self.step)
        x, y = get_batch(self.train_data, config.block_size, config.batch_size, self.data_rng)
        # NumPy's overflow warnings are left unsaid: _check_finite reports a non-finite loss or gradient norm
        # by step, and stops the run
        with np.errstate(over="ignore", invalid="ignore"):
            if self.parallel is not None:       # the same step, the batch split over MPI ranks
                loss, norm, self.stop_requested = self.parallel.step_across_ranks(x, y, self.step, lr)
            else:
                loss = train_step(self.objective, self.optimizer, (x, y), lr, config.grad_clip)   # step.py's
                norm = math.sqrt(sum(float(np.vdot(grad, grad)) for grad in self.optimizer.gradients()))
        self._check_finite(loss, norm, lr)
        self.step += 1
        self.history["step"].append(self.step)
        self.history["loss"].append(loss)
        self.history["lr"].append(lr)
        return loss

    def _check_finite(self, loss, norm, lr):
        """Stop the run (TrainingDiverged) if this step's loss or gradient norm is not finite.

        The norm is that of the step's whole gradient, measured after the step (one process: a NaN or an
        infinity stays one when clipping scales it) or from the ranks' parts (data parallel): the same on
        every rank, so every rank stops at the same step.
        """
        problem = None
        if not math.isfinite(loss):
            problem = f"the training loss is {loss}"
        elif not math.isfinite(norm):
            problem = f"the gradient norm is {norm} (the loss was {loss:.4f})"
        if problem is not None:
            self.diverged = TrainingDiverged(
                f"training diverged at step {self.step + 1}: {problem}, at learning rate {lr:.3g}. Stopped "
                f"before saving anything, so {self._last_checkpoint()} is as it was. A smaller learning rate "
                "(TrainConfig.lr, train --lr) or gradient clipping (grad_clip) may help.")
            raise self.diverged

    def _first_non_finite_parameter(self):
        for name, param in self.model.named_parameters():
            if not np.isfinite(param.data).all():
                return name
        return None

    def _last_checkpoint(self):
        if self.last_saved is None:
            return "no checkpoint was written by this run; any checkpoint there was"
        step, directory = self.last_saved
        return f"the last checkpoint (step {step}, in {os.fspath(directory)})"

    def _refuse_if_diverged(self, action):
        """A run whose loss became NaN or infinite must not train on or be saved."""
        if self.diverged is not None:
            raise TrainingDiverged(f"Trainer.{action}: this run stopped because {self.diverged}")

    def close(self):
        """Nothing to release: kept so that `with Trainer(...)` reads the same in every script."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def evaluate(self):
        """Mean loss over `eval_batches` windows of the training and the validation data, dropout off."""
        config = self.config
        losses = {}
        with self.model.evaluating(), np.errstate(over="ignore", invalid="ignore"):    # fit checks the result
            for split, data in (("train", self.train_data), ("val", self.val_data)):
                losses[split] = float(np.mean([float(self.loss_fn(self.model(x), y))
                                               for x, y in evaluation_batches(data, config)]))
        return losses

    def record_evaluation(self, losses):
        """Keep an evaluation in the history (its losses, and their perplexities) at this step; say it in a line.

        Args:
            losses: {"train": mean NLL, "val": mean NLL}, as `evaluate` returns them (nats per token).
        Returns:
            "train loss 2.1234 (perplexity 8.37), val loss ..." for the progress output.
        """
        ppl = {split: perplexity(loss) for split, loss in losses.items()}
        self.history["eval"].append([self.step, losses["train"], losses["val"]])
        self.history["perplexity"].append([self.step, ppl["train"], ppl["val"]])
        return ", ".join(f"{split} loss {losses[split]:.4f} (perplexity {ppl[split]:.2f})"
                         for split in ("train", "val"))

    # ---------------------------------------------------------------- the loop
    def fit(self, max_steps=None, on_eval=None):
        """Train until `max_steps` (default config.max_steps), evaluating and checkpointing on the way.

        Progress: a tqdm bar on a terminal; written to a file or a pipe, one line per evaluation instead
        (no carriage-return frames). Ctrl-C stops at the end of the step under way: a checkpoint of that
        step is saved (when the trainer saves) and TrainingInterrupted is raised; `Trainer.resume`
        continues from there bit for bit. A second Ctrl-C interrupts at once.

        Args:
            on_eval: optional callback(trainer, losses) after each evaluation.
        Returns:
            the last evaluation's losses {"train": ..., "val": ...}.
        """
        from tqdm import tqdm

        max_steps = self.config.max_steps if max_steps is None else max_steps
        first_step, losses = self.step, None
        on_terminal = self.progress and self.rank == 0 and is_terminal(sys.stderr)
        bar = tqdm(total=max_steps, initial=self.step, disable=not on_terminal, unit="step", dynamic_ncols=True)
        try:
            with stop_at_step_boundary() as stop:
                while self.step < max_steps:
                    started = time.perf_counter()
                    if self.parallel is not None:       # the ranks agree on stopping in the step's first message
                        self.parallel.interrupted = stop.requested
                    loss = self.step_on_next_batch()
                    self.step_times.append(time.perf_counter() - started)
                    self._show_step(bar, loss, first_step)
                    if self.step % self.config.eval_interval == 0 or self.step == max_steps:
                        losses = self._evaluate_and_save(bar if on_terminal else None, on_eval)
                    if self.stop_requested if self.parallel is not None else stop.requested:
                        self._save_interrupted()
        except Exception as error:
            if self.parallel is None or isinstance(error, TrainingDiverged):   # every rank diverges at one step
                raise
            self.parallel.abort(f"rank {self.rank} failed at step {self.step + 1}: {type(error).__name__}: {error}")
        finally:
            bar.close()
        return losses

    def tokens_per_second(self):
        """Tokens per second over the last RATE_WINDOW steps (one slow step, a worker starting, does not jump)."""
        recent = self.step_times[-RATE_WINDOW:]
        return self.config.batch_size * self.config.block_size * len(recent) / max(sum(recent), 1e-9)

    def _show_step(self, bar, loss, first_step):
        bar.set_postfix_str(f"loss {loss:.3f}  lr {self.history['lr'][-1]:.2e}  {self.tokens_per_second():,.0f} tok/s",
                            refresh=False)
        shown = bar.update(1)                           # True if it drew: with the postfix just set
        if self.step == first_step + 1 and not shown:
            bar.refresh()                               # the loss from the first step on

    def _evaluate_and_save(self, bar, on_eval):
        """Evaluate, stop on a non-finite loss, record, print one line, checkpoint and plot; returns the losses.

        Data parallel: rank 0 alone; the other ranks only send it their shards of the optimizer state
        (`DataParallel.gather_state`) and return None."""
        if not self._gather_for_rank_0():
            return None
        started = time.perf_counter()
        losses = self.evaluate()
        if not all(math.isfinite(value) for value in losses.values()):
            self.diverged = TrainingDiverged(
                f"training diverged at step {self.step}: the evaluation losses are {losses}. Stopped "
                f"before saving anything, so {self._last_checkpoint()} is as it was.")
            raise self.diverged
        line = f"step {self.step:>5}: {self.record_evaluation(losses)}"
        if bar is not None:
            bar.write(line)
        elif self.progress:                             # a file or a pipe: the bar's figures on the line
            print(f"{line}  (lr {self.history['lr'][-1]:.2e}, {self.tokens_per_second():,.0f} tok/s)", flush=True)
        else:
            print(line, flush=True)
        if self.out_dir is not None:
            self.save(self.out_dir)
            self.plot(os.path.join(self.out_dir, "loss.png"))
        if on_eval is not None:
            on_eval(self, losses)
        if self.parallel is not None:                   # the other ranks' deadline allows for it
            self.parallel.root_pause = max(self.parallel.root_pause, time.perf_counter() - started)
        return losses

    def _gather_for_rank_0(self):
        """Data parallel: the shards of the optimizer state to rank 0 (sharded); True on the rank that saves."""
        if self.parallel is not None:
            self.parallel.gather_state()
        return self.rank == 0

    def _save_interrupted(self):
        """Ctrl-C: save this step's checkpoint (unless the evaluation just did), then TrainingInterrupted."""
        if self._gather_for_rank_0() and self.out_dir is not None and self.last_saved != (self.step, self.out_dir):
            self.save(self.out_dir)
            self.plot(os.path.join(self.out_dir, "loss.png"))
        raise TrainingInterrupted(self.step, self.out_dir)

    # ---------------------------------------------------------------- checkpoints and pictures
    def save(self, directory, overwrite=False):
        """Write a checkpoint that `Trainer.resume` continues exactly.

        Args:
            directory: created if missing. If it holds a checkpoint that this trainer did not write or resume
                from (and was not told it may replace), the save is refused with CheckpointExistsError.
            overwrite: replace such a checkpoint anyway.
        Raises:
            TrainingDiverged if a weight is NaN or infinite (the checkpoint there is left as it was).
        """
        self._refuse_if_diverged("save")
        identity = os.path.realpath(directory)
        if not overwrite and identity not in self.replaceable and has_checkpoint(directory):
            raise CheckpointExistsError(f"Trainer.save: {os.fspath(directory)} already holds a checkpoint that this "
                                        "run did not write; pass overwrite=True to replace it")
        name = self._first_non_finite_parameter()
        if name is not None:
            raise TrainingDiverged(f"Trainer.save: parameter {name} holds NaN or infinite values; not saved, so "
                                   f"{self._last_checkpoint()} is as it was")
        meta = {"step": self.step, "train_config": _config_dict(self.config), "tokenizer": self.tokenizer_config,
                "history": self.history, "run": self.run_info,
                "rng": {"data": self.data_rng.bit_generator.state,
                        "dropout": self.model.dropout_rng.bit_generator.state}}
        save_checkpoint(directory, self.model, self.optimizer, meta)
        self.replaceable.add(identity)
        self.last_saved = (self.step, directory)

    @classmethod
    def resume(cls, directory, train_data, val_data, config=None, out_dir=None, progress=True, contents=None,
               overwrite=False):
        """Continue the run saved in `directory`.

        Args:
            config: optional TrainConfig; it may differ from the saved one only in
                TrainConfig.RESUMABLE fields (e.g. a larger max_steps), else CheckpointError.
            out_dir: where the continued run saves (None: nowhere); `directory` itself continues the
                run in place, another directory holding a checkpoint is refused unless `overwrite`.
            contents: `read_checkpoint(directory)`'s result, if the caller has read it already.
        """
        contents = read_checkpoint(directory) if contents is None else contents
        meta = contents[0]
        saved = check_training_meta(meta, directory)
        if config is not None:
            differences = [f"{field}: checkpoint {getattr(saved, field)!r}, now {getattr(config, field)!r}"
                           for field in _config_dict(saved)
                           if field not in TrainConfig.RESUMABLE and getattr(saved, field) != getattr(config, field)]
            if differences:
                raise CheckpointError(f"checkpoint {directory} was trained with a different config: "
                                      + "; ".join(differences))
            saved = config
        in_place = out_dir is not None and os.path.realpath(out_dir) == os.path.realpath(directory)
        trainer = cls(saved, train_data, val_data, meta["model_config"]["vocab_size"], out_dir=out_dir,
                      tokenizer_config=meta.get("tokenizer"), progress=progress, overwrite=overwrite or in_place)
        trainer.replaceable.add(os.path.realpath(directory))
        meta = load_checkpoint(directory, trainer.model, trainer.optimizer, contents=contents)
        trainer.step = meta["step"]
        trainer.history = meta["history"]
        trainer.run_info = meta.get("run")
        trainer.history.setdefault("perplexity", [[step, perplexity(train), perplexity(val)]     # 0.3 kept none
                                                  for step, train, val in trainer.history["eval"]])
        trainer.data_rng.bit_generator.state = meta["rng"]["data"]
        trainer.model.dropout_rng.bit_generator.state = meta["rng"]["dropout"]
        return trainer

    def plot(self, path):
        """Save the loss curve: every step's training loss, and the evaluations (`loss_curve`).

        A bare `Figure` (no pyplot) draws straight to the file, so saving the
        curve never switches the backend of a notebook that calls this.
        """
        from matplotlib.figure import Figure

        figure = Figure(figsize=(7, 4))
        axes = figure.subplots()
        for series in loss_curve(self.history, self.config.eval_batches):
            axes.plot(series["steps"], series["losses"], **series["style"], label=series["label"])
        axes.set_xlabel("step")
        axes.set_ylabel("cross-entropy (nats per token)")
        axes.legend()
        axes.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, dpi=100)


def loss_curve(history, eval_batches):
    """The series of the loss plot: [{"steps", "losses", "label", "style"}], each drawn with `axes.plot`.

    The batch loss is measured at every step, so it is a line. The evaluations are measured only every
    eval_interval steps (and at step 0 when the `train` command evaluates the untrained model first):
    they are markers alone, since a line between two of them would draw a curve that was never measured
    (the loss falls steeply between step 0 and the first evaluation, not in a straight line).
    """
    series = [{"steps": list(history["step"]), "losses": list(history["loss"]), "label": "batch loss",
               "style": {"color": "0.75", "linewidth": 0.8}}]
    if history["eval"]:
        steps, train, val = (list(column) for column in zip(*history["eval"]))
        series.append({"steps": steps, "losses": train, "label": f"train ({eval_batches} batches)",
                       "style": {"marker": "o", "linestyle": "none"}})
        series.append({"steps": steps, "losses": val, "label": "validation",
                       "style": {"marker": "s", "linestyle": "none"}})
    return series


def _config_dict(config):
    return dataclasses.asdict(config)
