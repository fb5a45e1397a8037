"""In-context learning in miniature: a GPT trained on sequences that reward copying from its own context.

The survey note (Strabel, *Transformers*, 2023, §6) reports GPT-3's few-shot learning: a task shown by
examples in the prompt, with no change of weights, is done better the more examples the prompt holds. Olsson et
al. (2022, "In-context learning and induction heads") trace much of it to *induction heads*: a head that, at a
token seen before, attends to the token that *followed* its earlier occurrence and copies it.

`KeyValueTask` (tasks/key_value.py) builds the smallest such setting. Each sequence draws its own random table from `n_keys` keys to
`n_values` values, then lists `n_pairs` pairs `k v k v ...` with keys drawn at random (so keys repeat). The value
of a key is only predictable if the key appeared earlier in the same sequence: nothing in the weights can know
this sequence's table, so accuracy must come from the context, and it rises with the number of pairs shown.
The model is scored on the values only.

* `train_in_context`: the LM loss on the values, Adam, a short warm-up, on the one training loop;
* `in_context_accuracy`: accuracy at each pair index, and apart for keys seen before and keys new to the sequence;
* `induction_scores`: per layer and head, the attention a repeated key puts on the values that followed its
  earlier occurrences (the induction head's signature; a head attending uniformly scores far lower).

Token layout: keys are ids 0 .. n_keys - 1, values n_keys .. n_keys + n_values - 1.
"""

import numpy as np

from ..layers.loss import CrossEntropyLoss
from ..training.loop import LoopOptions, TrainingLoop
from ..training.optim import Adam
from ..training.schedules import warmup_rate
from .language_model import LanguageModelObjective


def train_in_context(model, task, steps, batch_size=64, lr=1e-2, warmup=50, log_every=0, log=print):
    """Train `model` (a GPT with vocab_size >= task.vocab_size) on fresh batches with the one training loop;
    returns the loss per step.

    The rate rises linearly over `warmup` steps (`schedules.warmup_rate`); `log_every` > 0 says the mean
    loss that often, with `log`.
    """
    objective = LanguageModelObjective(model, CrossEntropyLoss(ignore_index=-1))
    loop = TrainingLoop(objective, Adam(objective.parameters(), lr=lr), lambda: task.batch(batch_size)[:2],
                        lambda step: warmup_rate(step, lr, warmup),
                        LoopOptions(grad_clip=1.0, max_steps=steps, eval_interval=log_every or None,
                                    generators={"task": task.rng}, progress=False, log=log if log_every else False,
                                    name="train_in_context"))
    loop.fit()
    return loop.history["loss"]


def in_context_accuracy(model, task, n_sequences=500):
    """Greedy accuracy on the values of fresh sequences.

    Returns:
        dict with "by_pair" (N,): accuracy at pair index n (n earlier pairs in context), "seen" and "new": the
        accuracy on keys that occurred before in the sequence and on keys that did not (chance: 1/n_values).
    """
    x, y, keys = task.batch(n_sequences)
    with model.evaluating():
        correct = model(x).argmax(axis=-1)[:, 0::2] == y[:, 0::2]                          # (B, N)
    seen = task.seen_before(keys)
    return {"by_pair": correct.mean(axis=0), "seen": float(correct[seen].mean()), "new": float(correct[~seen].mean())}


def induction_scores(model, task, n_sequences=200):
    """(n_layers, H): the attention each repeated key puts on the values that followed its earlier occurrences.

    In this task every earlier occurrence of a key was followed by the same value, so an induction head may
    spread its weight over all of them; the score sums it. A head attending uniformly scores (number of
    earlier occurrences) / T on average. Reads the attention weights each block keeps after its forward
    (`attn.attention.alpha`, (B, H, T, T)).
    """
    x, _, keys = task.batch(n_sequences)
    with model.evaluating():
        model(x)
    B, N = keys.shape
    targets = np.zeros((B, 2 * N - 1, 2 * N - 1), dtype=bool)      # [b, query, key position] to sum over
    for b in range(B):
        for n in range(1, N):
            for earlier in np.flatnonzero(keys[b, :n] == keys[b, n]):
                targets[b, 2 * n, 2 * earlier + 1] = True          # the key's position -> the value after an earlier copy
    repeated = targets.any(axis=2)                                   # (B, T) queries that are repeated keys
    scores = []
    for block in model.blocks:
        on_targets = (block.attn.attention.alpha * targets[:, None]).sum(axis=-1)    # (B, H, T)
        scores.append(on_targets.transpose(0, 2, 1)[repeated].mean(axis=0))          # (H,)
    return np.array(scores)
