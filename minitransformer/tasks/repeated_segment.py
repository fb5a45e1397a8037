"""Random tokens in which one random segment appears twice, at a random distance: where induction heads form.

`RepeatedSegmentTask` draws T + 1 random tokens, picks a segment of `length` tokens at a random `start` and
writes it again `distance` positions later: `q a b c r s a b c t` (segment `a b c`, distance 5). Every token is
drawn uniformly, so only one kind of target can be predicted: inside the repeat, after its first token, the next
token is the one that followed the current token's earlier copy. Finding it by content, "where was my token
before, and what came after it", is what an induction head does (Olsson et al. 2022, "In-context learning and
induction heads", §2; Strabel 2023, *Transformers*, §6).

Why the segment sits at a random start and distance: if every sequence were one half and its repeat
(`a b c d a b c d`), the copy would lie at a distance the position alone nearly gives away, and a single head
learns that prior instead (with halves of 8 to 16 tokens, looking back 8 to 16 places scores some of the loss
without knowing where the earlier copy is; benchmarks/README.md). Here the distance ranges over most of the context, so looking back by position is worth
little, and the only way down is content matching.

* `RepeatedSegmentTask.batch`: inputs, next-token targets, and for each query the position an induction head
  should attend to (`earlier_next`, -1 where there is none);
* `repeated_part`: the queries whose target an induction head can predict.

`objectives/induction.py` trains on it and measures the loss on each part; `models/head_scores.py` scores heads
with `earlier_next`. Left out: segments repeated more than once, and several segments in one sequence.
"""

import numpy as np

from ..core.random import as_generator


class RepeatedSegmentTask:
    """Random tokens with one segment repeated at a random distance (module docstring).

    Args:
        vocab_size: V, tokens 0 .. V - 1, drawn uniformly.
        seq_len: T inputs per sequence (T + 1 tokens are drawn: the targets are the next tokens).
        min_length, max_length: the segment's shortest and longest length (2 <= min <= max, 2 max <= T + 1).
        rng: seed or Generator for every draw.
    """

    def __init__(self, vocab_size=64, seq_len=32, min_length=4, max_length=10, rng=None):
        if vocab_size < 2 or not 2 <= min_length <= max_length or 2 * max_length > seq_len + 1:
            raise ValueError(f"RepeatedSegmentTask expected vocab_size >= 2 and 2 <= min_length <= max_length <= "
                             f"(seq_len + 1) / 2, got vocab_size={vocab_size}, seq_len={seq_len}, "
                             f"min_length={min_length}, max_length={max_length}")
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.min_length, self.max_length = min_length, max_length
        self.rng = as_generator(rng)

    def batch(self, batch_size):
        """(x int (B, T), y int (B, T), earlier_next int (B, T)): y[b, t] = x[b, t + 1] (the next token).

        In sequence b the segment of length[b] tokens at start[b] is written again at start[b] + distance[b],
        with length <= distance <= T + 1 - length. earlier_next[b, t] is, for a query t inside the repeat and
        before its last token, t - distance + 1: the position right after the earlier copy of token t, which
        holds the answer y[b, t]; -1 for every other query.
        """
        n_tokens = self.seq_len + 1
        length = self.rng.integers(self.min_length, self.max_length + 1, size=batch_size)   # (B,)
        distance = self.rng.integers(length, n_tokens - length + 1)                         # (B,)
        start = self.rng.integers(0, n_tokens - length - distance + 1)                      # (B,)
        tokens = self.rng.integers(0, self.vocab_size, size=(batch_size, n_tokens))         # (B, T + 1)
        position = np.arange(n_tokens)                                                      # (T + 1,)
        repeat = (position >= (start + distance)[:, None]) & (position < (start + distance + length)[:, None])
        source = np.where(repeat, position - distance[:, None], position)                   # where each copy is from
        tokens = np.take_along_axis(tokens, source, axis=1)
        query = position[:-1]                                                                 # (T,)
        inside = (query >= (start + distance)[:, None]) & (query < (start + distance + length - 1)[:, None])
        earlier_next = np.where(inside, query - distance[:, None] + 1, -1)                  # (B, T)
        return tokens[:, :-1], tokens[:, 1:], earlier_next


def repeated_part(earlier_next):
    """bool (B, T): the queries whose target an induction head predicts (earlier_next >= 0); every other
    target is a uniform draw, which nothing predicts better than log V nats."""
    return np.asarray(earlier_next) >= 0
