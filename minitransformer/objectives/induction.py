"""Sequences whose second half repeats the first: the task in which induction heads form.

Olsson et al. (2022, "In-context learning and induction heads", §2) call a head an *induction head* when, at a
token seen earlier in the context, it attends to the token that *followed* that earlier occurrence (prefix
matching) and raises that token's logit (copying). It needs a head of a lower layer that moves each token's
identity one position on, a previous-token head (their "K-composition"), so it takes two layers. They find such
heads forming in a sudden phase change, visible as a drop of the loss on repeated text.

The task (`tasks/repeated_half.py`): `RepeatedHalfTask` draws `half` random tokens and repeats them once: `a b c d a b c d`. Nothing predicts the
first half (its loss stays near log V) and, from the model's view, nor does the first token of the repeat; every
later token of the repeat is the one that followed the current token's earlier copy, which an induction head
finds. The half length varies from sequence to sequence (`min_half` .. `max_half`), all padded to one length
(padding has no targets). With one half length a head of layer 0 learns to look back by position alone, a
shortcut that is no induction head: trained on halves all 8 tokens long, the model's loss on the repeat of halves
4 to 8 tokens long ended above that of guessing. Varied lengths do not rule out every shortcut: the repeat
starts at a position that bounds where the earlier copy can be, and in the runs of benchmarks/README.md layer 0
learned that prior (prefix-matching scores 0.2-0.35, no previous-token head) before any induction head formed.

* `part_losses`: the mean loss on either part;
* `train_induction`: training through the one loop (`training/loop.py`) with AdamW and the schedule of a `TrainConfig`,
  recording the two losses on a fixed evaluation batch as it goes; `drop_step`: when the repeated part's loss
  has fallen half way.

Left out: natural text (Olsson et al. also train on it) and the ablations by which they argue that induction
heads cause in-context learning in large models.
"""

import numpy as np

from ..layers.log_probs import TokenLogProbs
from ..layers.loss import CrossEntropyLoss
from ..tasks.repeated_half import random_part, repeated_part
from ..training.config import build_optimizer
from ..training.loop import TrainingLoop
from .language_model import LanguageModelObjective


def part_losses(model, x, y, half):
    """(random part's loss, repeated part's loss): mean -log p(target) over each part (`random_part`, ...)."""
    with model.evaluating():
        logits = model(x)                                                   # (B, T, V)
    nll = -TokenLogProbs().forward(logits, np.maximum(y, 0))                # (B, T); padding masked below
    return (float(nll[random_part(half, x.shape[1])].mean()), float(nll[repeated_part(half, x.shape[1])].mean()))


def train_induction(model, task, config, eval_batch, eval_every=25, log=None, log_every=100):
    """Train `model` on fresh batches of `task` with `config` (a `TrainConfig`: batch_size, max_steps, the rate
    schedule, AdamW's settings, grad_clip) through the one training loop; evaluate on `eval_batch` (x, y, half)
    before the first step, every `eval_every` steps and after the last.

    Returns:
        dict of arrays: "loss" (max_steps,) the training loss per step; "eval_step" (E,), and at those steps
        "random_loss" and "repeated_loss" (E,), from `part_losses`.
    `log`, if given, receives the evaluation's line every `log_every` steps (a multiple of eval_every) and last.
    """
    objective = LanguageModelObjective(model, CrossEntropyLoss(ignore_index=-1))

    def evaluate():
        random_loss, repeated_loss = part_losses(model, *eval_batch)
        return {"random": random_loss, "repeated": repeated_loss}

    def say(loop, losses):
        if log and (loop.step % log_every == 0 or loop.step == config.max_steps):
            log(f"step {loop.step:5d}  random part {losses['random']:.3f}  repeated part {losses['repeated']:.3f}")

    loop = TrainingLoop(objective, build_optimizer(model, config), lambda: task.batch(config.batch_size)[:2],
                        config.learning_rate, grad_clip=config.grad_clip, max_steps=config.max_steps,
                        eval_interval=eval_every, evaluate=evaluate, progress=False, log=False,
                        name="train_induction")
    say(loop, loop_evaluation(loop))                                    # step 0: before any training
    loop.fit(on_eval=say)
    evaluations = np.array(loop.history["eval"])                       # rows: [step, random, repeated]
    return {"loss": np.array(loop.history["loss"]), "eval_step": evaluations[:, 0].astype(int),
            "random_loss": evaluations[:, 1], "repeated_loss": evaluations[:, 2]}


def loop_evaluation(loop):
    """Evaluate now and keep it in the loop's history (what the loop does at each evaluation); the losses."""
    losses = loop.evaluate_fn()
    loop.record_evaluation(losses)
    return losses


def drop_step(eval_step, repeated_loss):
    """The first evaluation step at which the repeated part's loss is below half way from its start to its end.

    eval_step, repeated_loss (E,) -> int; a measure of when the induction head forms that does not depend on
    how noisy the curve is near its plateau.
    """
    repeated_loss = np.asarray(repeated_loss)
    half_way = (repeated_loss[0] + repeated_loss[-1]) / 2
    return int(np.asarray(eval_step)[np.argmax(repeated_loss < half_way)])
