"""Rotary position embedding, RoPE (Su et al. 2021, arXiv 2104.09864; lecture notes 2025 §1.4; Kumar slides).

Instead of adding a position vector to the token, RoPE *rotates* each query
and each key by an angle proportional to its position. The head's hs
channels are taken in pairs (2i, 2i+1); pair i at position p is turned by the
angle p * theta_i, with theta_i = base^(-2i / hs) (the sinusoidal table's
frequencies):

    [x'_2i  ]   [cos p theta_i   -sin p theta_i] [x_2i  ]
    [x'_2i+1] = [sin p theta_i    cos p theta_i] [x_2i+1]

A rotation by a and one by b meet in a dot product as a rotation by b - a:
(R_m q) . (R_n k) = q . R_(n-m) k. So the attention score of a query at m and
a key at n depends on the tokens and on the offset n - m only, never on m
itself; `tests/test_rope.py` checks exactly that. There is no table and no
parameter, so nothing limits the sequence length.

Left out: the "rotate half" channel layout of GPT-NeoX/LLaMA (a permutation of
the same thing), partial rotation of only some channels, and frequency scaling
for context extension.

Derivation:
    A rotation is orthogonal, R^T = R(-angle), so the gradient is the output
    gradient turned back by the opposite angle (`rotate_back`).
"""

import numpy as np

from ..core.module import Module


def rotary_angles(positions, head_size, base=10000.0):
    """cos and sin of p * theta_i for every position p and pair i.

    Args:
        positions: int or float (T,) absolute positions.
        head_size: hs, even.
    Returns:
        (cos, sin): float64 (T, hs/2) each.
    """
    if head_size % 2:
        raise ValueError(f"RotaryEmbedding expected an even head size, got {head_size}")
    frequencies = base ** (-np.arange(0, head_size, 2) / head_size)      # (hs/2,) theta_i
    angles = np.asarray(positions, dtype=np.float64)[:, None] * frequencies  # (T, hs/2)
    return np.cos(angles), np.sin(angles)


def rotate(x, cos, sin):
    """Turn each channel pair (2i, 2i+1) of x by the angle whose cos and sin are given.

    Args:
        x: (..., T, hs).  cos, sin: (T, hs/2).
    Returns:
        (..., T, hs), same dtype as x.
    """
    cos, sin = cos.astype(x.dtype), sin.astype(x.dtype)
    ### BEGIN SOLUTION rope.forward
    even, odd = x[..., 0::2], x[..., 1::2]                   # (..., T, hs/2) each
    rotated_even = even * cos - odd * sin                    # (..., T, hs/2)
    rotated_odd = even * sin + odd * cos                     # (..., T, hs/2)
    return np.stack([rotated_even, rotated_odd], axis=-1).reshape(x.shape)   # pairs interleaved back: (..., T, hs)
    ### END SOLUTION


def rotate_back(dout, cos, sin):
    """The backward of `rotate(x, cos, sin)`: the gradient at x.

    Derivation:
        y = R x with R orthogonal, so dx = R^T dout, and R^T turns each pair by the opposite angle.

    Args:
        dout: (..., T, hs).  cos, sin: (T, hs/2), those the forward used.
    Returns:
        dx: (..., T, hs).
    """
    ### BEGIN SOLUTION rope.backward
    return rotate(dout, cos, -sin)
    ### END SOLUTION


class RotaryEmbedding(Module):
    """Rotary position embedding, no parameters.

    As a layer, `forward(x, offset)` rotates x (..., T, hs) as if its rows sat at
    positions offset .. offset + T - 1. Inside `MultiHeadAttention` it is used
    through `transform(q, k)`, which rotates queries and keys together; queries
    are aligned to the end of the keys (query i sits at Tk - Tq + i), as in
    `causal_mask`, so cached or remembered keys keep their positions.

    Args:
        head_size: hs, even.
        base: 10000 in the paper.
    """

    def __init__(self, head_size, base=10000.0):
        if head_size % 2:
            raise ValueError(f"RotaryEmbedding expected an even head size, got {head_size}")
        self.head_size, self.base = head_size, base

    def forward(self, x, offset=0):
        """x (..., T, hs) -> x rotated position by position (..., T, hs)."""
        x = np.asarray(x)
        self._check_features(x, self.head_size)
        if x.ndim < 2:
            raise ValueError(f"{self!r} expected input (..., T, {self.head_size}), got {x.shape}")
        self.cos, self.sin = rotary_angles(offset + np.arange(x.shape[-2]), self.head_size, self.base)
        return rotate(x, self.cos, self.sin)

    def backward(self, dout):
        """The gradient at x, by `rotate_back`. dout (..., T, hs) -> dx (..., T, hs).

        Derivation:
            y = R x with R orthogonal  ->  dx = R^T dout = R(-angle) dout.
        """
        return rotate_back(dout, self.cos, self.sin)

    # ---------------------------------------------------------------- the hook used by MultiHeadAttention
    def transform(self, q, k, offset=0):
        """Rotate k (B, Hkv, Tk, hs) at positions offset + j and q (B, H, Tq, hs) at the last Tq of them.

        `offset` is for keys appended to a cache: the keys already cached were
        rotated at their own positions 0 .. offset - 1 when they were new.
        """
        Tq, Tk = q.shape[-2], k.shape[-2]
        self.cos_q, self.sin_q = rotary_angles(offset + np.arange(Tk - Tq, Tk), self.head_size, self.base)
        self.cos_k, self.sin_k = rotary_angles(offset + np.arange(Tk), self.head_size, self.base)
        return rotate(q, self.cos_q, self.sin_q), rotate(k, self.cos_k, self.sin_k)

    def transform_backward(self, dq, dk):
        """Rotate both gradients back (see `backward`)."""
        self._require("cos_q")
        return rotate_back(dq, self.cos_q, self.sin_q), rotate_back(dk, self.cos_k, self.sin_k)

    def score_bias(self, Tq, Tk, dtype=np.float64):
        """RoPE adds nothing to the scores."""
        return None

    def __repr__(self):
        return f"RotaryEmbedding(head_size={self.head_size})"
