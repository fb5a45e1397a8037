"""ALiBi, attention with linear biases (Press et al. 2021, arXiv 2108.12409; Kumar slides).

No position vector at all: each head h subtracts from the score of query i and
key j a penalty proportional to their distance,

    score_h(i, j) = q_i . k_j / sqrt(hs)  -  m_h |i - j|,

with a fixed slope m_h per head. For H heads, a power of two, the paper takes
the geometric sequence m_h = 2^(-8h/H), h = 1 .. H (H = 8: 1/2, 1/4, ..., 1/256),
so some heads look far back and others mostly at their neighbours. For other H
it takes the slopes of the nearest power of two below, H', and fills up with
every other slope of 2H' (the paper's footnote and reference code).

Nothing here is learned and nothing depends on a maximum length: a model
trained on short sequences runs on longer ones unchanged, which is the
paper's claim ("train short, test long"); `tests/test_alibi.py` checks that.

In `MultiHeadAttention` the bias enters through `ScaledDotProductAttention(bias=...)`.
Queries are aligned to the end of the keys (query i at position Tk - Tq + i),
as in `causal_mask`. Left out: the paper's trick of dropping the |.| because
a causal mask hides j > i anyway (the same numbers on every visible entry).

Derivation:
    The bias is a constant, so its backward is the identity.
"""

from functools import lru_cache

import numpy as np

from ..core.module import Module


def alibi_slopes(n_heads):
    """The paper's slopes m_1 .. m_H, float64 (H,); e.g. H = 8 gives 2^-1, 2^-2, ..., 2^-8."""
    if n_heads <= 0:
        raise ValueError(f"ALiBi expected a positive number of heads, got {n_heads}")
    closest = 2 ** int(np.floor(np.log2(n_heads)))              # the largest power of two <= H
    slopes = 2.0 ** (-8.0 * np.arange(1, closest + 1) / closest)
    if closest < n_heads:                                       # odd slopes of the 2H' sequence
        extra = 2.0 ** (-8.0 * np.arange(1, 2 * (n_heads - closest), 2) / (2 * closest))
        slopes = np.concatenate([slopes, extra])
    return slopes


@lru_cache(maxsize=32)
def alibi_bias(n_heads, Tq, Tk, dtype=np.float64):
    """-m_h |i - j| for query i (at absolute position Tk - Tq + i) and key j: (H, Tq, Tk) in `dtype`.

    Cached and read-only, like `causal_bias`, and like it kept per dtype: every layer of a model asks
    for the same one, in the scores' dtype, at every step. Computed in float64, then rounded once.
    """
    query_positions = np.arange(Tk - Tq, Tk)[:, None]          # (Tq, 1)
    ### BEGIN SOLUTION alibi.forward
    distance = np.abs(query_positions - np.arange(Tk)[None, :])  # (Tq, Tk)
    bias = (-alibi_slopes(n_heads)[:, None, None] * distance).astype(dtype, copy=False)   # (H, Tq, Tk)
    ### END SOLUTION
    bias.flags.writeable = False
    return bias


class ALiBi(Module):
    """Adds the ALiBi biases to attention scores; no parameters.

    As a layer: `forward(scores)` with scores (B, H, Tq, Tk) returns scores + bias.
    As MultiHeadAttention's position hook: `score_bias(Tq, Tk, dtype)` gives the bias,
    `transform` leaves queries and keys alone.

    Args:
        n_heads: H, one slope per head.
    """

    def __init__(self, n_heads):
        alibi_slopes(n_heads)                    # refuses n_heads <= 0 now rather than at the first forward
        self.n_heads = n_heads

    def forward(self, scores):
        """scores (B, H, Tq, Tk) -> scores - m_h |i - j| (B, H, Tq, Tk)."""
        scores = np.asarray(scores)
        if scores.ndim < 3 or scores.shape[-3] != self.n_heads:
            raise ValueError(f"{self!r} expected scores (..., {self.n_heads}, Tq, Tk), got {scores.shape}")
        return scores + self.score_bias(*scores.shape[-2:], scores.dtype)

    def backward(self, dout):
        """The gradient at the scores the bias was added to. dout (..., H, Tq, Tk) -> dscores, the same shape.

        Derivation:
            The bias is constant: dscores = dout.
        """
        ### BEGIN SOLUTION alibi.backward
        return dout
        ### END SOLUTION

    # ---------------------------------------------------------------- the hook used by MultiHeadAttention
    def transform(self, q, k, offset=0):
        """ALiBi leaves queries and keys alone."""
        return q, k

    def transform_backward(self, dq, dk):
        return dq, dk

    def score_bias(self, Tq, Tk, dtype=np.float64):
        return alibi_bias(self.n_heads, Tq, Tk, np.dtype(dtype))

    def __repr__(self):
        return f"ALiBi(n_heads={self.n_heads})"
