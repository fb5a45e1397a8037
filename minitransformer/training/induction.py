"""Sequences whose second half repeats the first: the task in which induction heads form.

Olsson et al. (2022, "In-context learning and induction heads", §2) call a head an *induction head* when, at a
token seen earlier in the context, it attends to the token that *followed* that earlier occurrence (prefix
matching) and raises that token's logit (copying). It needs a head of a lower layer that moves each token's
identity one position on, a previous-token head (their "K-composition"), so it takes two layers. They find such
heads forming in a sudden phase change, visible as a drop of the loss on repeated text.

`RepeatedHalfTask` draws `half` random tokens and repeats them once: `a b c d a b c d`. Nothing predicts the
first half (its loss stays near log V) and, from the model's view, nor does the first token of the repeat; every
later token of the repeat is the one that followed the current token's earlier copy, which an induction head
finds. The half length varies from sequence to sequence (`min_half` .. `max_half`), all padded to one length
(padding has no targets). With one half length a head of layer 0 learns to look back by position alone, a
shortcut that is no induction head: trained on halves all 8 tokens long, the model's loss on the repeat of halves
4 to 8 tokens long ended above that of guessing. Varied lengths do not rule out every shortcut: the repeat
starts at a position that bounds where the earlier copy can be, and in the runs of benchmarks/README.md layer 0
learned that prior (prefix-matching scores 0.2-0.35, no previous-token head) before any induction head formed.

* `RepeatedHalfTask.batch`: inputs, targets (-1 at the padding) and each sequence's half length;
* `random_part`, `repeated_part`: which targets are unpredictable and which an induction head can predict;
* `earlier_next`: for each query in the repeat, the position right after its token's earlier occurrence
  (where an induction head looks; `models/head_scores.py` scores heads with it);
* `part_losses`: the mean loss on either part;
* `train_induction`: training with the package's `train_step`, AdamW and schedule from a `TrainConfig`,
  recording the two losses on a fixed evaluation batch as it goes; `drop_step`: when the repeated part's loss
  has fallen half way.

Left out: natural text (Olsson et al. also train on it) and the ablations by which they argue that induction
heads cause in-context learning in large models.
"""

import numpy as np

from ..core.random import as_generator
from ..layers.log_probs import TokenLogProbs
from ..layers.loss import CrossEntropyLoss
from .config import build_optimizer
from .objectives import LanguageModelObjective
from .step import train_step


class RepeatedHalfTask:
    """Random first halves, each followed by its own repeat, padded to one length (module docstring).

    Args:
        vocab_size: V, tokens 0 .. V - 1, drawn uniformly.
        max_half, min_half: the longest and shortest half (>= 2); T = 2 max_half - 1 inputs per sequence.
        rng: seed or Generator for every draw.
    """

    def __init__(self, vocab_size=64, max_half=16, min_half=8, rng=None):
        if vocab_size < 2 or not 2 <= min_half <= max_half:
            raise ValueError(f"RepeatedHalfTask expected vocab_size >= 2 and 2 <= min_half <= max_half, got "
                             f"vocab_size={vocab_size}, min_half={min_half}, max_half={max_half}")
        self.vocab_size, self.max_half, self.min_half = vocab_size, max_half, min_half
        self.seq_len = 2 * max_half - 1
        self.rng = as_generator(rng)

    def batch(self, batch_size):
        """(x int (B, T), y int (B, T), half int (B,)): y[b, t] = x's next token, -1 past 2 half[b] - 1 tokens.

        Sequence b is tokens[:half] twice, then random padding (inputs only, never a target).
        """
        half = self.rng.integers(self.min_half, self.max_half + 1, size=batch_size)          # (B,)
        tokens = self.rng.integers(0, self.vocab_size, size=(batch_size, 2 * self.max_half))  # (B, T + 1)
        position = np.arange(2 * self.max_half)                                               # (T + 1,)
        second = (position >= half[:, None]) & (position < 2 * half[:, None])                 # (B, T + 1)
        source = np.where(second, position - half[:, None], position)                         # where each copy is from
        tokens = np.take_along_axis(tokens, source, axis=1)                                   # the repeat
        targets = np.where(position < 2 * half[:, None], tokens, -1)
        return tokens[:, :-1], targets[:, 1:], half


def random_part(half, seq_len):
    """bool (B, T): targets no model can predict, the first half's tokens after the first and the repeat's first.

    half int (B,) -> positions t < half[b] (their target is token t + 1 <= half[b]).
    """
    return np.arange(seq_len) < np.asarray(half)[:, None]


def repeated_part(half, seq_len):
    """bool (B, T): targets an induction head predicts, positions half[b] .. 2 half[b] - 2 (tokens half + 1 ..)."""
    position, half = np.arange(seq_len), np.asarray(half)[:, None]
    return (position >= half) & (position < 2 * half - 1)


def earlier_next(half, seq_len):
    """int (B, T): for a query t in the repeated part, t - half + 1, the position after its token's first
    occurrence (the token to copy); -1 elsewhere."""
    position, half = np.arange(seq_len), np.asarray(half)[:, None]
    return np.where(repeated_part(half[:, 0], seq_len), position - half + 1, -1)


def part_losses(model, x, y, half):
    """(random part's loss, repeated part's loss): mean -log p(target) over each part (`random_part`, ...)."""
    with model.evaluating():
        logits = model(x)                                                   # (B, T, V)
    nll = -TokenLogProbs().forward(logits, np.maximum(y, 0))                # (B, T); padding masked below
    return (float(nll[random_part(half, x.shape[1])].mean()), float(nll[repeated_part(half, x.shape[1])].mean()))


def train_induction(model, task, config, eval_batch, eval_every=25, log=None, log_every=100):
    """Train `model` on fresh batches of `task` with `config` (a `TrainConfig`: batch_size, max_steps, the rate
    schedule, AdamW's settings, grad_clip) and `train_step`; evaluate on `eval_batch` (x, y, half) every
    `eval_every` steps and after the last.

    Returns:
        dict of arrays: "loss" (max_steps,) the training loss per step; "eval_step" (E,), and at those steps
        "random_loss" and "repeated_loss" (E,), from `part_losses`.
    `log`, if given, receives the evaluation's line every `log_every` steps (a multiple of eval_every) and last.
    """
    objective = LanguageModelObjective(model, CrossEntropyLoss(ignore_index=-1))
    optimizer = build_optimizer(model, config)
    history = {"loss": [], "eval_step": [], "random_loss": [], "repeated_loss": []}
    for step in range(config.max_steps + 1):
        if step % eval_every == 0 or step == config.max_steps:
            random_loss, repeated_loss = part_losses(model, *eval_batch)
            history["eval_step"].append(step)
            history["random_loss"].append(random_loss)
            history["repeated_loss"].append(repeated_loss)
            if log and (step % log_every == 0 or step == config.max_steps):
                log(f"step {step:5d}  random part {random_loss:.3f}  repeated part {repeated_loss:.3f}")
        if step < config.max_steps:
            x, y, _ = task.batch(config.batch_size)
            history["loss"].append(train_step(objective, optimizer, (x, y), config.learning_rate(step),
                                              config.grad_clip))
    return {name: np.array(values) for name, values in history.items()}


def drop_step(eval_step, repeated_loss):
    """The first evaluation step at which the repeated part's loss is below half way from its start to its end.

    eval_step, repeated_loss (E,) -> int; a measure of when the induction head forms that does not depend on
    how noisy the curve is near its plateau.
    """
    repeated_loss = np.asarray(repeated_loss)
    half_way = (repeated_loss[0] + repeated_loss[-1]) / 2
    return int(np.asarray(eval_step)[np.argmax(repeated_loss < half_way)])
