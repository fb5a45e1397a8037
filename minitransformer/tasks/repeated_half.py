"""Sequences whose second half repeats the first: the task in which induction heads form.

`RepeatedHalfTask` draws `half` random tokens and repeats them once: `a b c d a b c d`. Nothing predicts the
first half (its loss stays near log V) and, from the model's view, nor does the first token of the repeat; every
later token of the repeat is the one that followed the current token's earlier copy, which an induction head
finds (Olsson et al. 2022, "In-context learning and induction heads", §2). The half length varies from sequence to
sequence (`min_half` .. `max_half`), all padded to one length (padding has no targets): with one half length a
head of layer 0 learns to look back by position alone, a shortcut that is no induction head.

* `RepeatedHalfTask.batch`: inputs, targets (-1 at the padding) and each sequence's half length;
* `random_part`, `repeated_part`: which targets are unpredictable and which an induction head can predict;
* `earlier_next`: for each query in the repeat, the position right after its token's earlier occurrence
  (where an induction head looks; `models/head_scores.py` scores heads with it).

Training on it and the two losses are `objectives/induction.py`.
"""

import numpy as np

from ..core.random import as_generator


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
