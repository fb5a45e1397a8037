"""The training loop, one for every objective: the step on the next batch, and `fit`, which repeats it.

One step (lecture notes 2025 §1.6; nanoGPT's train.py), the same for every run of the package (step.py lists
them):

    lr    = learning_rate(step)                the schedule (schedules.py), a function of the step alone
    batch = next_batch()                       drawn from the generators the loop keeps in its checkpoints
    loss  = train_step(objective, optimizer, batch, lr, grad_clip, parallel)          step.py

`fit` repeats it until `max_steps`. Every `eval_interval` steps (and at the end) it evaluates the run's own
measure (`evaluate`; by default the mean training loss of the steps since the last evaluation), records it
with its perplexity, says it in one line, writes a checkpoint to `out_dir` and redraws loss.png there.

Everything else a run needs is the loop's harness (harness.py), its base class: the options (`LoopOptions`),
the progress bar, checkpoints (`save`, and `restore`, after which the run goes on bit for bit), Ctrl-C (a
checkpoint at the step boundary, then `TrainingInterrupted`), the NaN stop (`TrainingDiverged`), the ranks
under `mpiexec` (a `parallel` hook, distributed.py: every rank runs this same loop on its share of each
batch; rank 0 alone prints and saves) and the phase timer (phases.py).

Left out: gradient accumulation, mixed precision, skipping a bad batch and going on.
"""

import math

import numpy as np

from .config import transformer_adam
from .harness import (  # noqa: F401  (the harness's names that 0.4's scripts import from here)
    RATE_WINDOW,
    Harness,
    LoopOptions,
    TrainingDiverged,
    TrainingInterrupted,
    loss_curve,
    options_given,
    stop_at_step_boundary,
)
from .schedules import linear_rate


class TrainingLoop(Harness):
    """The one training loop (module docstring): `step_on_next_batch` and `fit` are the lesson; the methods
    they call beyond it (`take_step`, `after_step`, `running`) are the harness's (harness.py).

    Args:
        objective: forward(*batch) -> scalar loss, backward(), parameters() (objectives/).
        optimizer: over the objective's parameters (optim/).
        next_batch: () -> the objective's batch, a tuple; its randomness from `options.generators`.
        learning_rate: step (0-based) -> rate (schedules.py).
        options: LoopOptions (harness.py): how long, clipping, how often to evaluate, what a checkpoint keeps
            and where, what is shown (default: LoopOptions()).
        keywords: 0.4's keyword options (grad_clip=..., max_steps=..., ...), folded into `options` with a
            DeprecationWarning; 0.6 removes them.
    """

    def __init__(self, objective, optimizer, next_batch, learning_rate, options=None, **keywords):
        self.objective, self.optimizer = objective, optimizer
        self.next_batch, self.learning_rate = next_batch, learning_rate
        self.step = 0                                                     # the steps done
        self.history = {"step": [], "loss": [], "lr": [], "eval": [],     # eval rows: [step, *losses]
                        "perplexity": []}                                 # rows: [step, *perplexities]
        super().__init__(options_given(options, keywords))               # keywords: 0.4's, until 0.6

    def step_on_next_batch(self):
        """One optimisation step on the next batch; returns its training loss (a Python float)."""
        lr = self.learning_rate(self.step)
        batch = self.next_batch()
        loss = self.take_step(batch, lr)                 # train_step; on this rank's share under MPI; NaN stops
        self.step += 1
        self.history["step"].append(self.step)           # the steps done, counted from 1
        self.history["loss"].append(loss)
        self.history["lr"].append(lr)
        self.after_step()                                # the objective's parts of the loss; options.on_step
        return loss

    def fit(self, max_steps=None, on_eval=None, evaluate_first=False):
        """Train until `max_steps` (default options.max_steps), evaluating every options.eval_interval steps and
        at the end.

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
        max_steps = self.options.max_steps if max_steps is None else max_steps
        interval = self.options.eval_interval
        with self.running(max_steps, on_eval) as run:           # the bar, Ctrl-C, the ranks (harness.py)
            if evaluate_first and self.step == 0:
                run.evaluate_untrained()                         # step 0: recorded, not saved
            while self.step < max_steps:
                loss = self.step_on_next_batch()
                run.show(loss)                                   # the progress bar, tokens per second
                if self.step == max_steps or (interval is not None and self.step % interval == 0):
                    run.evaluate()                               # recorded, said, saved, plotted
                run.stop_if_asked()                              # Ctrl-C: this step saved, TrainingInterrupted
        return run.losses

    def evaluate(self):
        """The run's measure {name: mean loss}: `options.evaluate()`, else the mean training loss of the steps
        since the last evaluation (of each of its parts, when the objective names them in `parts`)."""
        if self.options.evaluate is not None:
            return self.options.evaluate()
        since = self.history["eval"][-1][0] if self.history["eval"] else 0
        recent = [k for k, step in enumerate(self.history["step"]) if step > since]
        series = self.history.get("parts", {"train": self.history["loss"]})
        return {name: float(np.mean([values[k] for k in recent])) if recent else math.nan
                for name, values in series.items()}


def adam_warmup_loop(objective, next_batch, steps, lr, warmup=50, grad_clip=1.0, **options):
    """The loop of the encoder family's runs (seq2seq, BERT, fine-tuning): Adam with Vaswani et al.'s settings
    (2017, §5.3: beta2 0.98, eps 1e-9; `config.transformer_adam`), a rate that rises linearly over `warmup`
    steps then decays linearly to a tenth at `steps` (`schedules.linear_rate`: post-norm Transformers need the
    warm-up), global-norm clipping at `grad_clip`. Under MPI (a `parallel` hook) Adam's fast form, over the one
    flat buffer the collectives send.

    Args:
        options: LoopOptions' fields (generators, eval_interval, out_dir, meta, log, name, ...).
    """
    optimizer = transformer_adam(objective.parameters(), lr=lr, flat=options.get("parallel") is not None)
    return TrainingLoop(objective, optimizer, next_batch, lambda step: linear_rate(step, lr, warmup, steps),
                        LoopOptions(grad_clip=grad_clip, max_steps=steps, **options))
