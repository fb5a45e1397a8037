"""The training loop's harness: what keeps a run safe and visible around the lesson of loop.py.

`TrainingLoop` (loop.py) is the step on the next batch and `fit`'s loop; it enters this file at one place, its
base class `Harness`, whose methods it calls by name (`take_step`, `after_step`, `running`). Here:

* the options of a loop (`LoopOptions`): how long, how often to evaluate, what a checkpoint keeps, what is shown;
* the step's machinery (`take_step`): `train_step` on this rank's share under MPI, the gradient norm, the NaN
  stop (`TrainingDiverged`, before anything is saved; a stopped run refuses to train on or save), the phase
  timer's laps (phases.py);
* a run of `fit` (`running`, a `Run`): the progress bar on a terminal (one line per evaluation elsewhere),
  tokens per second, each evaluation recorded with its perplexity, said in one line, saved and plotted;
  Ctrl-C (`stop_at_step_boundary`: a checkpoint of the step under way, then `TrainingInterrupted`); under
  `mpiexec` the ranks' agreement on stopping, the optimizer's shards gathered to rank 0 before it saves, and
  one line naming a rank that failed;
* checkpoints (`save`, `restore` bit for bit, training/checkpoint.py's format) and the loss plot.

A fresh loop never replaces a checkpoint it did not write: one already in `out_dir` is refused unless
`overwrite=True` (or continued with `restore`).
"""

import contextlib
import dataclasses
import math
import os
import signal
import sys
import threading
import time
import types
import warnings

import numpy as np

from .checkpoint import (
    CheckpointError,
    CheckpointExistsError,
    has_checkpoint,
    load_checkpoint,
    refuse_to_replace,
    save_checkpoint,
)
from .metrics import perplexity
from .phases import laps
from .step import train_step

RATE_WINDOW = 20        # the progress bar's tokens/s: the mean over the last this many steps


@dataclasses.dataclass
class LoopOptions:
    """How a TrainingLoop runs; every field has a default (a loop of `max_steps` steps that saves nothing)."""

    # the run
    max_steps: int = 0              # where fit() stops by default
    grad_clip: float = 0.0          # the largest global gradient norm, 0 for none
    eval_interval: int = None       # steps between evaluations, progress lines and checkpoints (None: at the end)
    evaluate: object = None         # () -> {name: mean loss} (None: the mean training loss since the last evaluation)
    nll: bool = True                # the evaluated losses are mean NLLs per token: perplexities recorded and said
    parallel: object = None         # the data-parallel hook of train_step (distributed.py), None for one process
    # what a checkpoint keeps, and where
    generators: dict = dataclasses.field(default_factory=dict)   # {name: np.random.Generator} (batches, dropout)
    model: object = None            # the Module a checkpoint holds (default the objective's `model`, else itself)
    meta: object = None             # () -> the run's own fields for its checkpoints (`run`: the command's options)
    out_dir: str = None             # where checkpoints and loss.png go (None: nowhere)
    overwrite: bool = False         # replace a checkpoint already in out_dir instead of refusing
    # what is shown
    progress: bool = True           # a tqdm bar on a terminal, one line per evaluation elsewhere; False: lines alone
    tokens_per_step: int = None     # for the progress bar's tokens/s (None: steps/s)
    log: object = None              # how the evaluation line is said (None: printed and flushed; False: not at all)
    on_step: object = None          # callback(loop) after each step (e.g. to read what the objective kept of it)
    name: str = "TrainingLoop"      # how messages name the loop


def options_given(options, keywords):
    """The loop's LoopOptions: `options` (None: the defaults), with 0.4's keyword options (`grad_clip=...`, ...)
    folded in and a DeprecationWarning; 0.6 removes the keywords."""
    options = LoopOptions() if options is None else options
    if not keywords:
        return options
    warnings.warn(f"TrainingLoop(..., {', '.join(f'{key}=...' for key in keywords)}): pass them as "
                  "LoopOptions(...), the fifth argument; 0.4's keyword options go in 0.6", DeprecationWarning,
                  stacklevel=3)
    return dataclasses.replace(options, **keywords)         # an unknown keyword: TypeError naming it


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


class Harness:
    """The machinery of `TrainingLoop` (module docstring), its base class: the loop sets `objective`,
    `optimizer`, `step` and `history`, then calls `__init__` with its options.

    A subclass whose `evaluate` can be shared by MPI ranks (Trainer's) sets `shares_evaluation`: every rank
    then joins the loop's evaluations, `evaluating_together` telling its `evaluate` so.
    """

    shares_evaluation = False           # True: under MPI every rank takes part in the loop's evaluate()
    evaluating_together = False         # True while the loop's evaluation is shared by every rank

    def __init__(self, options):
        name, out_dir = options.name, options.out_dir
        refuse_to_replace(out_dir, options.overwrite, name, f"{name}.restore({os.fspath(out_dir or '')!r})")
        self.options = options
        self.model = options.model if options.model is not None else getattr(self.objective, "model", self.objective)
        self.parallel = options.parallel
        self.rank = 0 if self.parallel is None else self.parallel.rank
        if self.parallel is not None:
            self.parallel.attach(self.optimizer)
        self.log = say if options.log is None else options.log or None
        # directories whose checkpoint this loop may replace: ones it wrote, resumed from, or was told to
        self.replaceable = {os.path.realpath(out_dir)} if out_dir is not None and options.overwrite else set()
        self.last_saved = None          # (step, directory) of the last checkpoint this loop wrote
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

    # ---------------------------------------------------------------- the step's machinery
    def take_step(self, batch, lr):
        """`train_step` (step.py) on `batch` at rate `lr`, on this rank's share under MPI; returns the batch's
        loss (the same on every rank). Stops with TrainingDiverged on a non-finite loss or gradient norm."""
        laps.next_step("batch")
        self.refuse_if_diverged("step_on_next_batch")
        objective, optimizer = laps.around(self.objective, self.optimizer)     # the phase timer's, when it records
        # NumPy's overflow warnings are left unsaid: a non-finite loss or gradient norm stops the run, by step
        with np.errstate(over="ignore", invalid="ignore"):
            if self.parallel is None:
                loss = train_step(objective, optimizer, batch, lr, self.options.grad_clip)
                norm = math.sqrt(sum(float(np.vdot(grad, grad)) for grad in self.optimizer.gradients()))
            else:
                self.parallel.prepare(self.model, self.step)
                loss = train_step(objective, optimizer, batch, lr, self.options.grad_clip, self.parallel)
                self.stop_requested, norm = self.parallel.stop_requested, self.parallel.norm
        self._check_finite(loss, norm, lr)
        laps.lap("finite check")
        return loss

    def after_step(self):
        """After the step is counted: the objective's parts of its loss kept (e.g. BERT's two terms), `on_step`."""
        for name, part in getattr(self.objective, "parts", {}).items():
            self.history.setdefault("parts", {}).setdefault(name, []).append(float(part))
        if self.options.on_step is not None:
            self.options.on_step(self)

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

    def refuse_if_diverged(self, action):
        """A run whose loss became NaN or infinite must not train on or be saved."""
        if self.diverged is not None:
            raise TrainingDiverged(f"{self.options.name}.{action}: this run stopped because {self.diverged}")

    def _last_checkpoint(self):
        if self.last_saved is None:
            return "no checkpoint was written by this run; any checkpoint there was"
        step, directory = self.last_saved
        return f"the last checkpoint (step {step}, in {os.fspath(directory)})"

    # ---------------------------------------------------------------- a run of fit
    @contextlib.contextmanager
    def running(self, max_steps, on_eval):
        """`with loop.running(max_steps, on_eval) as run:` fit's loop inside: the progress bar, Ctrl-C caught at
        the step boundary, the phase timer's first step; under MPI a rank that raises (but for a NaN, which
        every rank meets at one step) ends the job with one line naming it."""
        from tqdm import tqdm

        on_terminal = self.options.progress and self.rank == 0 and is_terminal(sys.stderr)
        bar = tqdm(total=max_steps, initial=self.step, disable=not on_terminal, unit="step", dynamic_ncols=True)
        laps.begin()
        try:
            with stop_at_step_boundary() as stop:
                yield Run(self, bar, on_terminal, stop, on_eval)
        except Exception as error:
            if self.parallel is None or isinstance(error, TrainingDiverged):
                raise
            self.parallel.abort(f"rank {self.rank} failed at step {self.step + 1}: {type(error).__name__}: {error}")
        finally:
            bar.close()

    def record_evaluation(self, losses):
        """Keep an evaluation in the history (its losses, and their perplexities) at this step; say it in a line.

        Args:
            losses: {name: mean NLL}, as `evaluate` returns them (nats per token).
        Returns:
            "train loss 2.1234 (perplexity 8.37), val loss ..." for the progress output.
        """
        self.eval_names = list(losses)
        self.history["eval"].append([self.step, *losses.values()])
        if not self.options.nll:
            return ", ".join(f"{name} loss {losses[name]:.4f}" for name in losses)
        ppl = {name: perplexity(loss) for name, loss in losses.items()}
        self.history["perplexity"].append([self.step, *ppl.values()])
        return ", ".join(f"{name} loss {losses[name]:.4f} (perplexity {ppl[name]:.2f})" for name in losses)

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

    def evaluate_checked(self):
        """`evaluate_together()`; stop on a non-finite loss, on every rank that knows it."""
        losses = self.evaluate_together()
        if not all(math.isfinite(value) for value in losses.values()):
            self.diverged = TrainingDiverged(
                f"training diverged at step {self.step}: the evaluation losses are {losses}. Stopped "
                f"before saving anything, so {self._last_checkpoint()} is as it was.")
            raise self.diverged
        return losses

    def gather_for_rank_0(self):
        """Data parallel: the shards of the optimizer state to rank 0 (sharded); True on the rank that saves."""
        if self.parallel is not None:
            self.parallel.gather_state()
        return self.rank == 0

    def tokens_per_second(self):
        """Tokens (or steps) per second over the last RATE_WINDOW steps (one slow step does not jump)."""
        recent = self.step_times[-RATE_WINDOW:]
        return (self.options.tokens_per_step or 1) * len(recent) / max(sum(recent), 1e-9)

    def rate_text(self):
        unit = "tok/s" if self.options.tokens_per_step else "steps/s"
        return f"{self.tokens_per_second():,.{0 if self.options.tokens_per_step else 1}f} {unit}"

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
        self.refuse_if_diverged("save")
        identity = os.path.realpath(directory)
        if not overwrite and identity not in self.replaceable and has_checkpoint(directory):
            raise CheckpointExistsError(f"{self.options.name}.save: {os.fspath(directory)} already holds a "
                                        "checkpoint that this run did not write; pass overwrite=True to replace it")
        name = next((name for name, param in self.model.named_parameters() if not np.isfinite(param.data).all()),
                    None)
        if name is not None:
            raise TrainingDiverged(f"{self.options.name}.save: parameter {name} holds NaN or infinite values; not "
                                   f"saved, so {self._last_checkpoint()} is as it was")
        meta = {"step": self.step, "run": None, **(self.options.meta() if self.options.meta is not None else {}),
                "history": self.history,
                "rng": {key: generator.bit_generator.state for key, generator in self.options.generators.items()}}
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
        if "run" not in meta:                           # read_checkpoint checked a run's fields: this has none
            raise CheckpointError(f"checkpoint {directory} was not written by a training loop: it holds no step, "
                                  "history or generators to continue")
        missing = sorted(set(self.options.generators) - set(meta["rng"]))
        if missing:
            raise CheckpointError(f"checkpoint {directory} holds no state of the generator(s) {missing}")
        self.replaceable.add(os.path.realpath(directory))
        self.step, self.history = meta["step"], meta["history"]
        for key, generator in self.options.generators.items():
            generator.bit_generator.state = meta["rng"][key]
        return meta

    def save_and_plot(self):
        if self.options.out_dir is not None:
            self.save(self.options.out_dir)
            self.plot(os.path.join(self.options.out_dir, "loss.png"))

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

    def loss_curve(self, labels=None):
        """The series of the loss plot (`loss_curve`), the evaluations labelled `labels` (default: as `evaluate`
        names them)."""
        return loss_curve(self.history, self.eval_names if labels is None else labels)


class Run:
    """One call of `fit`, between its steps: the progress bar, the evaluations, Ctrl-C (made by `running`)."""

    def __init__(self, loop, bar, on_terminal, stop, on_eval):
        self.loop, self.bar, self.on_terminal, self.stop, self.on_eval = loop, bar, on_terminal, stop, on_eval
        self.first_step, self.losses = loop.step, None
        self._next_step()

    def _next_step(self):
        """Before a step: its clock starts; under MPI the ranks agree on stopping in the step's first message."""
        if self.loop.parallel is not None:
            self.loop.parallel.interrupted = self.stop.requested
        self.started = time.perf_counter()

    def show(self, loss):
        """The step's time kept; the bar's loss, rate and tokens per second (drawn from the first step on)."""
        loop = self.loop
        loop.step_times.append(time.perf_counter() - self.started)
        self.bar.set_postfix_str(f"loss {loss:.3f}  lr {loop.history['lr'][-1]:.2e}  {loop.rate_text()}",
                                 refresh=False)
        shown = self.bar.update(1)                      # True if it drew: with the postfix just set
        if loop.step == self.first_step + 1 and not shown:
            self.bar.refresh()                          # the loss from the first step on
        laps.lap("progress")

    def evaluate(self, save=True):
        """Evaluate, stop on a non-finite loss, record, say one line, checkpoint and plot (if `save`), `on_eval`.

        Data parallel: rank 0 alone; the other ranks send it their shards of the optimizer state
        (`gather_for_rank_0`), take their share of the evaluation if the run shares it, and record nothing."""
        loop = self.loop
        if not loop.gather_for_rank_0():
            if loop.parallel is not None and loop.shares_evaluation:
                loop.evaluate_checked()                 # this rank's share of rank 0's evaluation
            return
        started = time.perf_counter()
        self.losses = loop.evaluate_checked()
        line = f"step {loop.step:>5}: {loop.record_evaluation(self.losses)}"
        if self.on_terminal:
            self.bar.write(line)
        elif loop.log is not None and loop.options.progress and loop.history["lr"]:   # a file or a pipe: the bar's
            loop.log(f"{line}  (lr {loop.history['lr'][-1]:.2e}, {loop.rate_text()})")   # figures in the line
        elif loop.log is not None:
            loop.log(line)
        if save:
            loop.save_and_plot()
        if self.on_eval is not None:
            self.on_eval(loop, self.losses)
        if loop.parallel is not None:                   # the other ranks' deadline allows for it
            loop.parallel.root_pause = max(loop.parallel.root_pause, time.perf_counter() - started)

    def evaluate_untrained(self):
        """The untrained model's evaluation, before the first step: recorded at step 0, not saved, and outside
        the first step's time (its clock and the phase timer start after it)."""
        self.evaluate(save=False)
        laps.begin()
        self._next_step()

    def stop_if_asked(self):
        """Ctrl-C (on any rank, under MPI): this step's checkpoint saved (unless the evaluation just did), then
        TrainingInterrupted; else the next step's clock starts."""
        laps.lap("evaluation")
        loop = self.loop
        if loop.stop_requested if loop.parallel is not None else self.stop.requested:
            out_dir = loop.options.out_dir
            if loop.gather_for_rank_0() and out_dir is not None and loop.last_saved != (loop.step, out_dir):
                loop.save_and_plot()
            raise TrainingInterrupted(loop.step, out_dir)
        self._next_step()


def loss_curve(history, labels):
    """The series of the loss plot: [{"steps", "losses", "label", "style"}], each drawn with `axes.plot`.

    The batch loss is measured at every step, so it is a line. The evaluations are measured only every
    eval_interval steps (and at step 0 when the untrained model is evaluated first): they are markers alone,
    since a line between two of them would draw a curve that was never measured (the loss falls steeply
    between step 0 and the first evaluation, not in a straight line).

    Args:
        history: the loop's history; its "eval" rows are [step, *losses].
        labels: the label of each evaluated loss, in the rows' order.
    """
    series = [{"steps": list(history["step"]), "losses": list(history["loss"]), "label": "batch loss",
               "style": {"color": "0.75", "linewidth": 0.8}}]
    if history["eval"]:
        columns = [list(column) for column in zip(*history["eval"])]
        for label, losses, marker in zip(labels, columns[1:], "osD^"):
            series.append({"steps": columns[0], "losses": losses, "label": label,
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
