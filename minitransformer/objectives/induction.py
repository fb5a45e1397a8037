"""Training on a repeated random segment, where an induction head forms, and the losses that show it forming.

Olsson et al. (2022, "In-context learning and induction heads", §2) call a head an *induction head* when, at a
token seen earlier in the context, it attends to the token that *followed* that earlier occurrence (prefix
matching) and raises that token's logit (copying). It needs a head of a lower layer that moves each token's
identity one position on, a previous-token head (their "K-composition"), so it takes two layers. They see such
heads form in a sudden phase change, visible as a drop of the loss on repeated text.

The task (`tasks/repeated_segment.py`): random tokens in which one random segment appears twice, at a random
distance. Only the repeat's tokens after its first can be predicted, by content matching alone.

* `part_losses`: the mean loss on the random part (nothing to learn: log V) and on the repeated part;
* `train_induction`: training through the one loop (`training/loop.py`) with AdamW and the schedule of a
  `TrainConfig`, recording the two losses on a fixed evaluation batch from step 0 on; by default the loss counts
  the repeated part's targets alone (`repeat_only`), see below;
* `drop_step`: when the repeated part's loss has fallen half way.

Why the loss counts the repeat alone: the random part's targets carry no signal, only noise, and they outweigh
the repeat's four to one. Trained on every target, the 2-layer models of benchmarks/README.md stayed on the
plateau of betting on tokens already in the context for the 2,500 steps a run can afford; trained on the
repeat's targets, an induction head forms in about a thousand steps. The price: the model is never told that
a token met earlier *by chance* (V = 64 and T = 32 make that common) predicts nothing, so its loss on the random
part climbs far above log V as its induction head grows confident. `repeat_only=False` trains on every target.

Left out: natural text (Olsson et al. also train on it) and the ablations by which they argue that induction
heads cause in-context learning in large models.
"""

import numpy as np

from ..layers.log_probs import TokenLogProbs
from ..layers.loss import CrossEntropyLoss
from ..tasks.repeated_segment import repeated_part
from ..training.config import build_optimizer
from ..training.loop import LoopOptions, TrainingLoop
from .language_model import LanguageModelObjective


def part_losses(model, x, y, earlier_next):
    """(random part's loss, repeated part's loss): mean -log p(y) over the queries outside and inside
    `repeated_part(earlier_next)`; x, y, earlier_next int (B, T) as `RepeatedSegmentTask.batch` gives them."""
    with model.evaluating():
        logits = model(x)                                                   # (B, T, V)
    nll = -TokenLogProbs().forward(logits, y)                               # (B, T)
    repeated = repeated_part(earlier_next)                                  # (B, T)
    return float(nll[~repeated].mean()), float(nll[repeated].mean())


def repeat_targets(y, earlier_next):
    """int (B, T): y where an induction head can predict it, -1 (no target) elsewhere."""
    return np.where(repeated_part(earlier_next), y, -1)


def train_induction(model, task, config, eval_batch, eval_every=25, log=None, log_every=100, repeat_only=True):
    """Train `model` on fresh batches of `task` with `config` (a `TrainConfig`: batch_size, max_steps, the rate
    schedule, AdamW's settings, grad_clip) through the one training loop; evaluate on `eval_batch`
    (x, y, earlier_next) at step 0, every `eval_every` steps and after the last.

    repeat_only: the loss counts the repeated part's targets alone (module docstring); False: every target.
    Returns:
        dict of arrays: "loss" (max_steps,) the training loss per step; "eval_step" (E,), and at those steps
        "random_loss" and "repeated_loss" (E,), from `part_losses`.
    `log`, if given, receives the evaluation's line every `log_every` steps (a multiple of eval_every) and last.
    """
    objective = LanguageModelObjective(model, CrossEntropyLoss(ignore_index=-1))

    def next_batch():
        x, y, earlier_next = task.batch(config.batch_size)
        return x, repeat_targets(y, earlier_next) if repeat_only else y

    def evaluate():
        random_loss, repeated_loss = part_losses(model, *eval_batch)
        return {"random": random_loss, "repeated": repeated_loss}

    def say(loop, losses):
        if log and (loop.step % log_every == 0 or loop.step == config.max_steps):
            log(f"step {loop.step:5d}  random part {losses['random']:.3f}  repeated part {losses['repeated']:.3f}")

    loop = TrainingLoop(objective, build_optimizer(model, config), next_batch, config.learning_rate,
                        LoopOptions(grad_clip=config.grad_clip, max_steps=config.max_steps, eval_interval=eval_every,
                                    evaluate=evaluate, progress=False, log=False, name="train_induction"))
    loop.fit(on_eval=say, evaluate_first=True)
    evaluations = np.array(loop.history["eval"])                       # rows: [step, random, repeated]
    return {"loss": np.array(loop.history["loss"]), "eval_step": evaluations[:, 0].astype(int),
            "random_loss": evaluations[:, 1], "repeated_loss": evaluations[:, 2]}


def drop_step(eval_step, repeated_loss):
    """The first evaluation step at which the repeated part's loss is below half way from its start to its end.

    eval_step, repeated_loss (E,) -> int; a measure of when the induction head forms that does not depend on
    how noisy the curve is near its plateau.
    """
    repeated_loss = np.asarray(repeated_loss)
    half_way = (repeated_loss[0] + repeated_loss[-1]) / 2
    return int(np.asarray(eval_step)[np.argmax(repeated_loss < half_way)])
