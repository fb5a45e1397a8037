"""The training loop, one for every objective: steps, progress, evaluation, checkpoints, Ctrl-C, the NaN stop.

One step (lecture notes 2025 §1.6; nanoGPT's train.py), the same for the language model, the encoder-decoder,
BERT, the fine-tuned classifier, the in-context run, InstructGPT's reward model and PPO's inner steps:

    lr    = learning_rate(step)                the schedule (schedules.py), a function of the step alone
    batch = next_batch()                       drawn from the generators the loop keeps in its checkpoints
    loss  = train_step(objective, optimizer, batch, lr, grad_clip, parallel)          step.py

Every `eval_interval` steps (and at the end) the loop evaluates (`evaluate()`, the run's own measure; by
default the mean training loss since the last evaluation), records it with its perplexity, prints one line,
writes a checkpoint to `out_dir` and redraws loss.png there. A fresh loop never replaces a checkpoint it did
not write: one already in `out_dir` is refused unless `overwrite=True` (or continued with `restore`).

Nothing non-finite is kept: a loss or gradient norm that is NaN or infinite stops training with
`TrainingDiverged` naming the step, before anything is saved; the loop then refuses to train on or save.

Ctrl-C stops at the end of the step under way (`stop_at_step_boundary`): a checkpoint of that step is saved
and `TrainingInterrupted` raised. `restore(directory)` puts back the weights, the optimizer's state, the step,
the history and every generator's state, so a resumed run draws the very same batches and masks and produces
the same losses, bit for bit, as one that never stopped.

Under `mpiexec -n N` (a `parallel` hook, distributed.py) every rank runs this same loop on its share of each
batch; rank 0 alone prints and saves (and evaluates, unless the run shares its evaluation: Trainer's), and a
rank that raises ends the job with one line naming it.

Left out: gradient accumulation, mixed precision, skipping a bad batch and going on.
"""

import contextlib
import math
import os
import signal
import sys
import threading
import time
import types

import numpy as np

from .checkpoint import (
    CheckpointError,
    CheckpointExistsError,
    has_checkpoint,
    load_checkpoint,
    refuse_to_replace,
    save_checkpoint,
)
from .config import transformer_adam
from .metrics import perplexity
from .phases import laps
from .schedules import linear_rate
from .step import train_step

RATE_WINDOW = 20        # the progress bar's tokens/s: the mean over the last this many steps


class TrainingDiverged(FloatingPointError):
    """The loss, the gradient norm or the weights became NaN or infinite; the run stopped, nothing was saved."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped `fit` at a step boundary, after saving a checkpoint there (if the loop saves).

    Attributes: `step`, the last step done; `directory`, where its checkpoint is (None if the loop saves nowhere).
    """

    def __init__(self, step, directory):
        where = f"checkpoint saved in {os.fspath(directory)}" if directory is not None else "nothing saved"
        super().__init__(f"interrupted at step {step}: {where}")
        self.step, self.directory = step, directory


@contextlib.contextmanager
def stop_at_step_boundary():
    """`with stop_at_step_boundary() as stop:` a first Ctrl-C only sets `stop.requested`; the loop stops there.

    A second Ctrl-C interrupts at once (the handler that was there before is put back by the first). Outside
    the main thread, where Python delivers no signal, nothing changes.
    """
    stop = types.SimpleNamespace(requested=False)
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    before = signal.getsignal(signal.SIGINT)

    def request_stop(signum, frame):
        stop.requested = True
        signal.signal(signal.SIGINT, before)

    signal.signal(signal.SIGINT, request_stop)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, before)


class TrainingLoop:
    """The one training loop (module docstring).

    A subclass whose `evaluate` can be shared by MPI ranks (Trainer's) sets `shares_evaluation`: every rank
    then joins the loop's evaluations, `evaluating_together` telling its `evaluate` so.

    Args:
        objective: forward(*batch) -> scalar loss, backward(), parameters() (objectives/).
        optimizer: over the objective's parameters (optim/).
        next_batch: () -> the objective's batch, a tuple; its randomness from `generators`.
        learning_rate: step (0-based) -> rate (schedules.py).
        grad_clip: the largest global gradient norm, 0 for none.
        max_steps: where `fit` stops by default.
        eval_interval: steps between evaluations, progress lines and checkpoints (None: only at the end).
        evaluate: () -> {name: mean loss}, e.g. {"train": ..., "val": ...} (None: the mean training loss since
            the last evaluation, {"train": ...}).
        generators: {name: np.random.Generator} whose states a checkpoint keeps (the batches', dropout's).
        model: the Module a checkpoint holds (default the objective's `model`, else the objective).
        out_dir: where checkpoints and loss.png go (None: nowhere).
        overwrite: replace a checkpoint already in `out_dir` instead of refusing with CheckpointExistsError.
        progress: a tqdm bar on a terminal, one line per evaluation elsewhere; False: the lines alone.
        tokens_per_step: for the progress bar's tokens/s (None: steps/s).
        parallel: the data-parallel hook of `train_step` (distributed.py), or None for one process.
        meta: () -> the run's own fields for its checkpoints (e.g. the `train` command's options).
        nll: the evaluated losses are mean negative log-likelihoods per token: their perplexities are recorded
            and said (False for e.g. PPO's surrogate, whose exp means nothing).
        log: how the evaluation line is said (default: printed and flushed; False: not at all).
        on_step: optional callback(loop) after each step (e.g. to read what the objective kept of it).
        name: how messages name the loop.
    """

    shares_evaluation = False           # True: under MPI every rank takes part in the loop's evaluate()
    evaluating_together = False         # True while the loop's evaluation is shared by every rank

    def __init__(self, objective, optimizer, next_batch, learning_rate, *, grad_clip=0.0, max_steps=0,
                 eval_interval=None, evaluate=None, generators=None, model=None, out_dir=None, overwrite=False,
                 progress=True, tokens_per_step=None, parallel=None, meta=None, nll=True, log=None, on_step=None,
                 name="TrainingLoop"):
        refuse_to_replace(out_dir, overwrite, name, f"{name}.restore({os.fspath(out_dir or '')!r})")
        self.objective, self.optimizer, self.next_batch = objective, optimizer, next_batch
        self.learning_rate, self.grad_clip, self.max_steps = learning_rate, grad_clip, max_steps
        self.eval_interval, self.evaluate_fn, self.name = eval_interval, evaluate, name
        self.generators = dict(generators or {})
        self.model = model if model is not None else getattr(objective, "model", objective)
        self.out_dir, self.progress, self.tokens_per_step = out_dir, progress, tokens_per_step
        self.parallel, self.meta, self.nll, self.on_step = parallel, meta, nll, on_step
        self.log = say if log is None else log or None
        self.rank = 0 if parallel is None else parallel.rank
        if parallel is not None:
            parallel.attach(optimizer)
        # directories whose checkpoint this loop may replace: ones it wrote, resumed from, or was told to
        self.replaceable = {os.path.realpath(out_dir)} if out_dir is not None and overwrite else set()
        self.last_saved = None          # (step, directory) of the last checkpoint this loop wrote
        self.step = 0
        self.history = {"step": [], "loss": [], "lr": [], "eval": [],     # eval rows: [step, *losses]
                        "perplexity": []}                                 # rows: [step, *perplexities]
        self.step_times = []
        self.diverged = None            # the TrainingDiverged that stopped this run, if one did
        self.stop_requested = False     # data parallel: a rank was interrupted; every rank stops after this step
        self.eval_names = ["train"]     # what the evaluations measure, in the order of the history's rows

    def close(self):
        """Nothing to release: kept so that `with Trainer(...)` reads the same in every script."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # ---------------------------------------------------------------- one step, evaluation
    def step_on_next_batch(self):
        """One optimisation step on the next batch; returns its training loss (a Python float)."""
        laps.begin()
        self._refuse_if_diverged("step_on_next_batch")
        lr = self.learning_rate(self.step)
        batch = self.next_batch()
        laps.lap("batch")
        # NumPy's overflow warnings are left unsaid: _check_finite reports a non-finite loss or gradient norm
        # by step, and stops the run
        with np.errstate(over="ignore", invalid="ignore"):
            loss, norm = self.take_step(batch, lr)
        self._check_finite(loss, norm, lr)
        self.step += 1
        self.history["step"].append(self.step)                             # the steps done, counted from 1
        self.history["loss"].append(loss)
        self.history["lr"].append(lr)
        for name, part in getattr(self.objective, "parts", {}).items():     # e.g. BERT's two terms
            self.history.setdefault("parts", {}).setdefault(name, []).append(float(part))
        if self.on_step is not None:
            self.on_step(self)
        laps.lap("finite check")
        return loss

    def take_step(self, batch, lr):
        """`train_step` on `batch` at rate `lr`, on this rank's share under MPI; returns (loss, the gradient
        norm ||g|| before clipping), both of the whole batch (the same on every rank)."""
        if self.parallel is None:
            loss = train_step(self.objective, self.optimizer, batch, lr, self.grad_clip)
            return loss, math.sqrt(sum(float(np.vdot(grad, grad)) for grad in self.optimizer.gradients()))
        self.parallel.prepare(self.model, self.step)
        loss = train_step(self.objective, self.optimizer, batch, lr, self.grad_clip, self.parallel)
        self.stop_requested = self.parallel.stop_requested
        return loss, self.parallel.norm

    def _check_finite(self, loss, norm, lr):
        """Stop with TrainingDiverged on a non-finite loss or gradient norm (the same on every rank)."""
        problem = None
        if not math.isfinite(loss):
            problem = f"the training loss is {loss}"
        elif not math.isfinite(norm):
            problem = f"the gradient norm is {norm} (the loss was {loss:.4f})"
        if problem is not None:
            self.diverged = TrainingDiverged(
                f"training diverged at step {self.step + 1}: {problem}, at learning rate {lr:.3g}. Stopped "
                f"before saving anything, so {self._last_checkpoint()} is as it was. A smaller learning rate "
                "or gradient clipping may help.")
            raise self.diverged

    def evaluate(self):
        """The run's measure {name: mean loss}: `evaluate()` as given, else the mean training loss since the
        last evaluation (of each of its parts, when the objective names them in `parts`)."""
        if self.evaluate_fn is not None:
            return self.evaluate_fn()
        since = self.history["eval"][-1][0] if self.history["eval"] else 0
        recent = [k for k, step in enumerate(self.history["step"]) if step > since]
        series = self.history.get("parts", {"train": self.history["loss"]})
        return {name: float(np.mean([values[k] for k in recent])) if recent else math.nan
                for name, values in series.items()}

    def record_evaluation(self, losses):
        """Keep an evaluation in the history (its losses, and their perplexities) at this step; say it in a line.

        Args:
            losses: {name: mean NLL}, as `evaluate` returns them (nats per token).
        Returns:
            "train loss 2.1234 (perplexity 8.37), val loss ..." for the progress output.
        """
        self.eval_names = list(losses)
        self.history["eval"].append([self.step, *losses.values()])
        if not self.nll:
            return ", ".join(f"{name} loss {losses[name]:.4f}" for name in losses)
        ppl = {name: perplexity(loss) for name, loss in losses.items()}
        self.history["perplexity"].append([self.step, *ppl.values()])
        return ", ".join(f"{name} loss {losses[name]:.4f} (perplexity {ppl[name]:.2f})" for name in losses)

    # ---------------------------------------------------------------- the loop
    def fit(self, max_steps=None, on_eval=None, evaluate_first=False):
        """Train until `max_steps` (default the loop's), evaluating and checkpointing on the way.

        Progress: a tqdm bar on a terminal; written to a file or a pipe, one line per evaluation instead.
        Ctrl-C stops at the end of the step under way: a checkpoint of that step is saved (when the loop
        saves) and TrainingInterrupted is raised; `restore` continues from there bit for bit.

        Args:
            on_eval: optional callback(loop, losses) after each evaluation.
            evaluate_first: also evaluate at step 0, before the first step of a fresh loop, so that the history
                starts from the untrained model (a resumed loop has that evaluation already).
        Returns:
            the last evaluation's losses, or None if no step was left to take.
        """
        from tqdm import tqdm

        max_steps = self.max_steps if max_steps is None else max_steps
        first_step, losses = self.step, None
        on_terminal = self.progress and self.rank == 0 and is_terminal(sys.stderr)
        bar = tqdm(total=max_steps, initial=self.step, disable=not on_terminal, unit="step", dynamic_ncols=True)
        try:
            with stop_at_step_boundary() as stop:
                if evaluate_first and self.step == 0:                  # recorded, not saved: nothing trained yet
                    self._evaluate_and_save(bar if on_terminal else None, on_eval, save=False)
                while self.step < max_steps:
                    started = time.perf_counter()
                    if self.parallel is not None:       # the ranks agree on stopping in the step's first message
                        self.parallel.interrupted = stop.requested
                    loss = self.step_on_next_batch()
                    self.step_times.append(time.perf_counter() - started)
                    self._show_step(bar, loss, first_step)
                    laps.lap("progress")
                    if self._evaluates_now(max_steps):
                        losses = self._evaluate_and_save(bar if on_terminal else None, on_eval)
                    laps.lap("evaluation")
                    if self.stop_requested if self.parallel is not None else stop.requested:
                        self._save_interrupted()
        except Exception as error:
            if self.parallel is None or isinstance(error, TrainingDiverged):   # every rank diverges at one step
                raise
            self.parallel.abort(f"rank {self.rank} failed at step {self.step + 1}: {type(error).__name__}: {error}")
        finally:
            bar.close()
        return losses

    def _evaluates_now(self, max_steps):
        interval = self.eval_interval
        return self.step == max_steps or (interval is not None and self.step % interval == 0)

    def tokens_per_second(self):
        """Tokens (or steps) per second over the last RATE_WINDOW steps (one slow step does not jump)."""
        recent = self.step_times[-RATE_WINDOW:]
        return (self.tokens_per_step or 1) * len(recent) / max(sum(recent), 1e-9)

    def _rate_text(self):
        unit = "tok/s" if self.tokens_per_step else "steps/s"
        return f"{self.tokens_per_second():,.{0 if self.tokens_per_step else 1}f} {unit}"

    def _show_step(self, bar, loss, first_step):
        bar.set_postfix_str(f"loss {loss:.3f}  lr {self.history['lr'][-1]:.2e}  {self._rate_text()}", refresh=False)
        shown = bar.update(1)                           # True if it drew: with the postfix just set
        if self.step == first_step + 1 and not shown:
            bar.refresh()                               # the loss from the first step on

    def _evaluate_and_save(self, bar, on_eval, save=True):
        """Evaluate, stop on a non-finite loss, record, print one line, checkpoint and plot (if `save`); returns the
        losses.

        Data parallel: rank 0 alone; the other ranks send it their shards of the optimizer state
        (`parallel.gather_state`), take their share of the evaluation if the run shares it (`shares_evaluation`)
        and return None."""
        if not self._gather_for_rank_0():
            if self.parallel is not None and self.shares_evaluation:
                self._evaluate_checked()                # this rank's share of rank 0's evaluation
            return None
        started = time.perf_counter()
        losses = self._evaluate_checked()
        line = f"step {self.step:>5}: {self.record_evaluation(losses)}"
        if bar is not None:
            bar.write(line)
        elif self.log is not None and self.progress and self.history["lr"]:   # a file or a pipe: the bar's figures
            self.log(f"{line}  (lr {self.history['lr'][-1]:.2e}, {self._rate_text()})")
        elif self.log is not None:
            self.log(line)
        if save:
            self._save_and_plot()
        if on_eval is not None:
            on_eval(self, losses)
        if self.parallel is not None:                   # the other ranks' deadline allows for it
            self.parallel.root_pause = max(self.parallel.root_pause, time.perf_counter() - started)
        return losses

    def evaluate_together(self):
        """`evaluate()` with dropout off, as the loop's evaluations run it: data parallel, every rank calls this
        and, if the run shares its evaluations (`shares_evaluation`), computes its share of them alone; the
        losses on every rank."""
        self.evaluating_together = self.parallel is not None and self.shares_evaluation
        try:
            with self.model.evaluating(), np.errstate(over="ignore", invalid="ignore"):    # the caller checks them
                return self.evaluate()
        finally:
            self.evaluating_together = False

    def _evaluate_checked(self):
        """`evaluate_together()`; stop on a non-finite loss, on every rank that knows it."""
        losses = self.evaluate_together()
        if not all(math.isfinite(value) for value in losses.values()):
            self.diverged = TrainingDiverged(
                f"training diverged at step {self.step}: the evaluation losses are {losses}. Stopped "
                f"before saving anything, so {self._last_checkpoint()} is as it was.")
            raise self.diverged
        return losses

    def _gather_for_rank_0(self):
        """Data parallel: the shards of the optimizer state to rank 0 (sharded); True on the rank that saves."""
        if self.parallel is not None:
            self.parallel.gather_state()
        return self.rank == 0

    def _save_and_plot(self):
        if self.out_dir is not None:
            self.save(self.out_dir)
            self.plot(os.path.join(self.out_dir, "loss.png"))

    def _save_interrupted(self):
        """Ctrl-C: save this step's checkpoint (unless the evaluation just did), then TrainingInterrupted."""
        if self._gather_for_rank_0() and self.out_dir is not None and self.last_saved != (self.step, self.out_dir):
            self._save_and_plot()
        raise TrainingInterrupted(self.step, self.out_dir)

    # ---------------------------------------------------------------- divergence
    def _last_checkpoint(self):
        if self.last_saved is None:
            return "no checkpoint was written by this run; any checkpoint there was"
        step, directory = self.last_saved
        return f"the last checkpoint (step {step}, in {os.fspath(directory)})"

    def _refuse_if_diverged(self, action):
        """A run whose loss became NaN or infinite must not train on or be saved."""
        if self.diverged is not None:
            raise TrainingDiverged(f"{self.name}.{action}: this run stopped because {self.diverged}")

    def _first_non_finite_parameter(self):
        for name, param in self.model.named_parameters():
            if not np.isfinite(param.data).all():
                return name
        return None

    # ---------------------------------------------------------------- checkpoints and pictures
    def save(self, directory, overwrite=False):
        """Write a checkpoint that `restore` continues exactly.

        Args:
            directory: created if missing. If it holds a checkpoint that this loop did not write or resume
                from (and was not told it may replace), the save is refused with CheckpointExistsError.
            overwrite: replace such a checkpoint anyway.
        Raises:
            TrainingDiverged if a weight is NaN or infinite (the checkpoint there is left as it was).
        """
        self._refuse_if_diverged("save")
        identity = os.path.realpath(directory)
        if not overwrite and identity not in self.replaceable and has_checkpoint(directory):
            raise CheckpointExistsError(f"{self.name}.save: {os.fspath(directory)} already holds a checkpoint that "
                                        "this run did not write; pass overwrite=True to replace it")
        name = self._first_non_finite_parameter()
        if name is not None:
            raise TrainingDiverged(f"{self.name}.save: parameter {name} holds NaN or infinite values; not saved, "
                                   f"so {self._last_checkpoint()} is as it was")
        meta = {"step": self.step, **(self.meta() if self.meta is not None else {}), "history": self.history,
                "rng": {key: generator.bit_generator.state for key, generator in self.generators.items()}}
        save_checkpoint(directory, self.model, self.optimizer, meta)
        self.replaceable.add(identity)
        self.last_saved = (self.step, directory)

    def restore(self, directory, contents=None):
        """Continue the run saved in `directory`: weights, optimizer state, step, history, generators.

        Args:
            contents: `read_checkpoint(directory)`'s result, if the caller has read it already.
        Returns:
            the checkpoint's meta dictionary.
        """
        meta = load_checkpoint(directory, self.model, self.optimizer, contents=contents)
        missing = sorted(set(self.generators) - set(meta["rng"]))
        if missing:
            raise CheckpointError(f"checkpoint {directory} holds no state of the generator(s) {missing}")
        self.replaceable.add(os.path.realpath(directory))
        self.step, self.history = meta["step"], meta["history"]
        for key, generator in self.generators.items():
            generator.bit_generator.state = meta["rng"][key]
        return meta

    def plot(self, path):
        """Save the loss curve: every step's training loss, and the evaluations (`loss_curve`).

        A bare `Figure` (no pyplot) draws straight to the file, so saving the curve never switches the
        backend of a notebook that calls this.
        """
        from matplotlib.figure import Figure

        figure = Figure(figsize=(7, 4))
        axes = figure.subplots()
        for series in self.loss_curve():
            axes.plot(series["steps"], series["losses"], **series["style"], label=series["label"])
        axes.set_xlabel("step")
        axes.set_ylabel("loss")
        axes.legend()
        axes.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, dpi=100)

    def loss_curve(self):
        """The series of the loss plot (`loss_curve`), the evaluations named as `evaluate` names them."""
        return loss_curve(self.history, self.eval_names)


def adam_warmup_loop(objective, next_batch, steps, lr, warmup=50, grad_clip=1.0, **options):
    """The loop of the encoder family's runs (seq2seq, BERT, fine-tuning): Adam with Vaswani et al.'s settings
    (2017, §5.3: beta2 0.98, eps 1e-9; `config.transformer_adam`), a rate that rises linearly over `warmup`
    steps then decays linearly to a tenth at `steps` (`schedules.linear_rate`: post-norm Transformers need the
    warm-up), global-norm clipping at `grad_clip`. Under MPI (a `parallel` hook) Adam's fast form, over the one
    flat buffer the collectives send.

    Args:
        options: TrainingLoop's (generators, eval_interval, out_dir, meta, log, name, ...).
    """
    optimizer = transformer_adam(objective.parameters(), lr=lr, flat=options.get("parallel") is not None)
    return TrainingLoop(objective, optimizer, next_batch, lambda step: linear_rate(step, lr, warmup, steps),
                        grad_clip=grad_clip, max_steps=steps, **options)


def loss_curve(history, names):
    """The series of the loss plot: [{"steps", "losses", "label", "style"}], each drawn with `axes.plot`.

    The batch loss is measured at every step, so it is a line. The evaluations are measured only every
    eval_interval steps: they are markers alone, since a line between two of them would draw a curve that
    was never measured (the loss falls steeply between step 0 and the first evaluation, not in a straight line).

    Args:
        history: the loop's history; its "eval" rows are [step, *losses].
        names: the label of each evaluated loss, in the rows' order.
    """
    series = [{"steps": list(history["step"]), "losses": list(history["loss"]), "label": "batch loss",
               "style": {"color": "0.75", "linewidth": 0.8}}]
    if history["eval"]:
        columns = [list(column) for column in zip(*history["eval"])]
        for name, losses, marker in zip(names, columns[1:], "osD^"):
            series.append({"steps": columns[0], "losses": losses, "label": name,
                           "style": {"marker": marker, "linestyle": "none"}})
    return series


def say(line):
    """Print `line` at once (a pipe or a file sees each evaluation when it happens)."""
    print(line, flush=True)


def is_terminal(stream):
    """True if `stream` is a terminal (a closed stream, or one without isatty, is not)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):                # no isatty, or a closed stream
        return False
