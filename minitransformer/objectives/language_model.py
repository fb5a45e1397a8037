"""The language model: next-token prediction (`LanguageModelObjective`) and the GPT `Trainer` on the one loop.

One step (lecture notes 2025 §1.6; nanoGPT's train.py), run by training/loop.py's `TrainingLoop`:

    lr      = config.learning_rate(step)          warmup + cosine decay, or the notes' rule (schedules.py)
    x, y    = get_batch(train, T, B, data_rng)    random windows, the target shifted by one
    train_step(LanguageModelObjective(model), optimizer, (x, y), lr, grad_clip)
            zero_grad; loss = CrossEntropy(model(x), y); backward; clip the global gradient
            norm (the factor folded into AdamW's update); AdamW with decoupled weight decay

The config and the builders of the model and AdamW are in training/config.py. What the `Trainer` adds to the
loop: its evaluation, the mean loss over `eval_batches` windows of the training and the held-out tokens with
dropout off. The evaluation batches come from their own generator, seeded the same way at each evaluation, so
evaluating never disturbs the training batches, and every evaluation compares the same windows. Its
checkpoints hold the config, the tokenizer and the command's options beside the loop's own fields, and both
generators (the batches', dropout's), so `Trainer.resume` continues bit for bit.

Under `mpiexec -n N` (TrainConfig.workers = N) every rank runs this same loop on its share of each batch
(training/distributed.py).
"""

import dataclasses
import os
import warnings

import numpy as np

from ..core.module import Module
from ..layers.loss import CrossEntropyLoss
from ..training.checkpoint import checkpoint_train_config, read_checkpoint, refuse_to_replace
from ..training.config import build_model, build_optimizer
from ..training.data import get_batch
from ..training.distributed import MODES, DataParallel, mpi_world, shares
from ..training.loop import LoopOptions, TrainingLoop
from ..training.loop import loss_curve as harness_loss_curve
from ..training.resuming import continued_config


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

    def row_weights(self, x, y):
        """(B,) the targets each row counts (those not ignored), or None when every row counts alike; data
        parallelism weighs each rank's rows by them (training/distributed.py)."""
        ignore = getattr(self.loss, "ignore_index", None)
        return None if ignore is None else (np.asarray(y) != ignore).reshape(len(y), -1).sum(axis=1)

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


class Trainer(TrainingLoop):
    """Trains a fresh GPT on token arrays with the one training loop, or continues one (`Trainer.resume`).

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
        refuse_to_replace(out_dir, overwrite, "Trainer", f"Trainer.resume({os.fspath(out_dir or '')!r}, ...)")
        _check_config(config, train_data, val_data)
        self.config = config
        self.train_data, self.val_data = np.asarray(train_data), np.asarray(val_data)
        self.tokenizer_config = tokenizer_config
        self.run_info = None            # the `train` command's record of its run (resuming.run_record): to resume it
        model = build_model(config, vocab_size)
        optimizer = build_optimizer(model, config)
        self.loss_fn = CrossEntropyLoss()
        self.data_rng = np.random.default_rng([config.seed, 1])
        parallel = None if config.workers == 1 else DataParallel(config.parallel, config.seed, config.worker_timeout,
                                                                 config.eval_interval)
        options = LoopOptions(max_steps=config.max_steps, grad_clip=config.grad_clip, eval_interval=config.eval_interval,
                              parallel=parallel, generators={"data": self.data_rng, "dropout": model.dropout_rng},
                              model=model, meta=self.checkpoint_meta, out_dir=out_dir, overwrite=overwrite,
                              progress=progress, tokens_per_step=config.batch_size * config.block_size, name="Trainer")
        super().__init__(LanguageModelObjective(model, self.loss_fn), optimizer, self.next_windows,
                         config.learning_rate, options)
        self.eval_names = ["train", "val"]

    def next_windows(self):
        """The next training batch: (x, y) of int (B, T), random windows of the training tokens."""
        return get_batch(self.train_data, self.config.block_size, self.config.batch_size, self.data_rng)

    shares_evaluation = True            # under MPI the loop's evaluations are shared by the ranks (_batch_losses)

    def evaluate(self):
        """Mean loss over `eval_batches` windows of the training and the validation data, dropout off."""
        losses = {}
        with self.model.evaluating(), np.errstate(over="ignore", invalid="ignore"):    # fit checks the result
            for split, data in (("train", self.train_data), ("val", self.val_data)):
                losses[split] = float(np.mean(self._batch_losses(evaluation_batches(data, self.config))))
        return losses

    def _batch_losses(self, batches):
        """Each window batch's loss, (n,) float64: all computed here; or, in an evaluation the loop shares
        (`evaluating_together`), this rank's `shares` of them, added up with the other ranks' (`add_up`)."""
        mine = shares(len(batches), self.parallel.size)[self.parallel.rank] if self.evaluating_together else slice(None)
        losses = np.zeros(len(batches))
        losses[mine] = [float(self.loss_fn(self.model(x), y)) for x, y in batches[mine]]
        return self.parallel.add_up(losses) if self.evaluating_together else losses

    def checkpoint_meta(self):
        """What a checkpoint of this run holds beside the loop's own: the config, the tokenizer, the options."""
        return {"train_config": _config_dict(self.config), "tokenizer": self.tokenizer_config, "run": self.run_info}

    def loss_curve(self, labels=None):
        """The loss plot's series (training/harness.py's `loss_curve`), the evaluations named for the plot."""
        return super().loss_curve([f"train ({self.config.eval_batches} batches)", "validation"] if labels is None
                                  else labels)

    @classmethod
    def resume(cls, directory, train_data, val_data, config=None, out_dir=None, progress=True, contents=None,
               overwrite=False):
        """Continue the run saved in `directory`.

        Args:
            config: optional TrainConfig; it may differ from the saved one only in
                TrainConfig.RESUMABLE fields (e.g. a larger max_steps), else ResumeRefused (a CheckpointError;
                training/resuming.py's `continued_config`).
            out_dir: where the continued run saves (None: nowhere); `directory` itself continues the
                run in place, another directory holding a checkpoint is refused unless `overwrite`.
            contents: `read_checkpoint(directory)`'s result, if the caller has read it already.
        """
        contents = read_checkpoint(directory) if contents is None else contents      # read and checked once
        meta = contents[0]
        saved = checkpoint_train_config(meta, directory)
        if config is not None:
            saved = continued_config(saved, config, directory)          # only its RESUMABLE fields may differ
        in_place = out_dir is not None and os.path.realpath(out_dir) == os.path.realpath(directory)
        trainer = cls(saved, train_data, val_data, meta["model_config"]["vocab_size"], out_dir=out_dir,
                      tokenizer_config=meta.get("tokenizer"), progress=progress, overwrite=overwrite or in_place)
        trainer.run_info = trainer.restore(directory, contents=contents)["run"]
        return trainer


def _check_config(config, train_data, val_data):
    """Refuse a TrainConfig that cannot make a run here, before a model is built."""
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
    size = mpi_world()[1]
    if size != config.workers:
        raise ValueError(f"Trainer: TrainConfig.workers is {config.workers}, but this process is one of {size} "
                         f"MPI rank(s); launch it as `mpiexec -n {config.workers} python ...` (distributed.py)")


def loss_curve(history, eval_batches):
    """0.4's loss curve of a Trainer's history (0.6 removes it): training/harness.py's `loss_curve` with the
    Trainer's labels, and a DeprecationWarning."""
    warnings.warn("objectives.language_model.loss_curve(history, eval_batches) goes in 0.6: use "
                  "Trainer.loss_curve() or training.loop.loss_curve(history, labels)", DeprecationWarning, stacklevel=2)
    return harness_loss_curve(history, [f"train ({eval_batches} batches)", "validation"])


def _config_dict(config):
    return dataclasses.asdict(config)
