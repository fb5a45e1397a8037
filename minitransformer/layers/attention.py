"""Scaled dot-product attention (lecture notes 2025 §1.1 and footnote 6; Vaswani et al. 2017).

    scores = q k^T * scale          (Tq, Tk) per batch entry
    alpha  = softmax(scores)        each row a distribution over the keys
    out    = alpha v                (Tq, dv)

The notes write the last step as "XV alpha"; the product that has the right
shapes is alpha (X W_V), with alpha on the left (errata notebook).

Masking: a key that a query may not see gets score -inf *before* the softmax,
so each row still sums to one over the allowed keys. The notes instead
multiply alpha by a 0/1 matrix after the softmax, which leaves rows that no
longer sum to one; the notebooks show the difference.

A query that may see no key at all (a fully masked row) gets alpha = 0 and
output 0, and passes no gradient; this is a definition, documented here and
tested, rather than the NaN that softmax of all -inf would give.

Speed (style rule 12): the scores are computed as (k q^T)^T rather than q k^T.
The numbers are the same; only the memory layout differs: each query's row of
scores then lies down a column, so the softmax's per-row maximum, sums and
broadcasts run over many rows at once instead of one short row of Tk at a time
(2 to 3 times faster in NumPy). dalpha is computed the same way, so that every
elementwise operation of the backward pass meets operands of one layout, and
the cached causal bias is stored in that layout too (`np.asfortranarray`).
The two products whose right operand would be a transposed view, k q^T and
v dout^T, first copy that operand into a contiguous (..., d, Tq) array:
OpenBLAS multiplies these small (64 x 32) matrices about twice as slowly
when the right one is transposed (measured on the benchmark model's
(12, 4, 64, 32) operands: 0.16 ms transposed, 0.09 ms contiguous, 0.02 ms
for the copy). The gradients dq, dk, dv are written straight into arrays laid
out in memory like q, k, v (`np.empty_like` keeps the order of the strides;
the dtype is that of the product, as `@` would give): in plain self-attention
multi-head attention's q, k, v are views of one (B, T, 3C) projection, so its
dq, dk, dv come out as (B, T, H, hs) in memory and need no copy to merge the
heads again (with grouped-query attention dk and dv still do).
tests/test_speed_forms.py checks all this against the plain form.

Left out: dropout on the attention weights (GPT-2's attn_pdrop), fused or
memory-efficient kernels (FlashAttention), and several separate masks in one
call: the mask is one boolean array broadcast against the scores.
"""

from functools import lru_cache

import numpy as np

from ..core.module import Module
from .softmax import softmax, softmax_backward


def causal_mask(Tq, Tk):
    """Boolean (Tq, Tk), True where query i may attend to key j.

    Queries are aligned to the *end* of the keys, so query i sits at absolute
    position Tk - Tq + i and sees keys 0 .. Tk - Tq + i. With Tq == Tk this is
    the lower-triangular matrix M of the notes; with Tq < Tk it is what
    incremental decoding with cached keys needs.
    """
    return np.tril(np.ones((Tq, Tk), dtype=bool), k=Tk - Tq)


@lru_cache(maxsize=32)
def causal_bias(Tq, Tk, dtype):
    """The causal mask as an additive (Tq, Tk) bias: 0 where allowed, -inf where not.

    `scores += causal_bias(...)` equals `np.where(causal_mask(...), scores, -inf)`
    (tests/test_speed_forms.py) but works in place on the scores instead of
    building a new array. Cached and read-only, so it is built once per shape.
    """
    bias = np.asfortranarray(np.where(causal_mask(Tq, Tk), 0.0, -np.inf).astype(dtype))   # laid out as the scores
    bias.flags.writeable = False
    return bias


class ScaledDotProductAttention(Module):
    """out = softmax(q k^T * scale + mask) v, with no parameters.

    Args:
        causal: if True, query i attends only to keys at positions <= its own.
        scale: multiplies the scores; None means 1/sqrt(d_k) (footnote 6 of the
            notes), 1.0 gives the unscaled form of the notes' worked example.
    Attributes after forward:
        alpha: (..., Tq, Tk) the attention weights, kept for plotting.
    """

    def __init__(self, causal=False, scale=None):
        self.causal, self.scale = causal, scale

    def forward(self, q, k, v, mask=None, bias=None):
        """Attend from each query to the keys.

        Args:
            q: (..., Tq, dk) queries.
            k: (..., Tk, dk) keys.
            v: (..., Tk, dv) values.
            mask: optional bool, broadcastable to (..., Tq, Tk); True = may attend.
            bias: optional constant float, broadcastable to (..., Tq, Tk), added to the
                scaled scores (ALiBi's distance penalties); it receives no gradient.
        Returns:
            out: (..., Tq, dv).
        """
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        self._check_shapes(q, k, v)
        scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        Tq, Tk = q.shape[-2], k.shape[-2]
        ### BEGIN SOLUTION attention.forward
        q_t = np.ascontiguousarray(np.swapaxes(q, -1, -2))         # (..., dk, Tq), see "Speed" above
        scores = np.swapaxes(k @ q_t, -1, -2)                      # 1. q k^T (..., Tq, Tk), in column layout
        scores *= scale                                            # 2.
        ### END SOLUTION
        if bias is not None:
            scores += bias                                         # 2b. constant score bias
        if self.causal and mask is None:
            scores += causal_bias(Tq, Tk, scores.dtype)            # 3. masked keys get -inf (in place)
        else:
            allowed = self._allowed(mask, scores.shape, Tq, Tk)
            if allowed is not None:
                scores = np.where(allowed, scores, -np.inf)        # 3. masked keys get -inf
        self.alpha = softmax(scores, axis=-1, out=scores)          # 4. (..., Tq, Tk), in the scores' buffer
        self.q, self.k, self.v, self.used_scale = q, k, v, scale
        return self.alpha @ v                                      # 5. (..., Tq, dv)

    def backward(self, dout):
        """Reverse steps 5 to 1.

            5. out = alpha v        ->  dalpha = dout v^T,   dv = alpha^T dout
            4. alpha = softmax(s)   ->  ds = alpha * (dalpha - sum_j dalpha_j alpha_j)
            3. masked entries have alpha = 0, so ds = 0 there: nothing to undo
            2b. s += bias           ->  the bias is a constant: nothing to undo
            2. s = scale * raw      ->  draw = scale * ds
            1. raw = q k^T          ->  dq = draw k,   dk = draw^T q
        Args:
            dout: (..., Tq, dv).
        Returns:
            (dq, dk, dv) with the shapes of q, k, v.
        """
        self._require("alpha")
        self._check_dout(dout, (*self.alpha.shape[:-1], self.v.shape[-1]))
        ### BEGIN SOLUTION attention.backward
        dout_t = np.ascontiguousarray(np.swapaxes(dout, -1, -2))   # (..., dv, Tq), see "Speed" above
        dalpha = np.swapaxes(self.v @ dout_t, -1, -2)              # dout v^T (..., Tq, Tk), as alpha
        dv = np.matmul(np.swapaxes(self.alpha, -1, -2), dout,                       # (..., Tk, dv)
                       out=np.empty_like(self.v, dtype=np.result_type(self.alpha, dout)))
        dscores = softmax_backward(self.alpha, dalpha, axis=-1)    # (..., Tq, Tk)
        dscores *= self.used_scale
        dq = np.matmul(dscores, self.k, out=np.empty_like(self.q, dtype=np.result_type(dscores, self.k)))  # (..., Tq, dk)
        dk = np.matmul(np.swapaxes(dscores, -1, -2), self.q,                        # (..., Tk, dk)
                       out=np.empty_like(self.k, dtype=np.result_type(dscores, self.q)))
        return dq, dk, dv
        ### END SOLUTION

    def _allowed(self, mask, scores_shape, Tq, Tk):
        """Combine the causal rule and the user's mask into one bool array (or None)."""
        allowed = causal_mask(Tq, Tk) if self.causal else None
        if mask is not None:
            mask = np.asarray(mask)
            if mask.dtype != bool:
                raise TypeError(f"{self!r} expected a bool mask (True = may attend), got dtype {mask.dtype}")
            try:
                if np.broadcast_shapes(mask.shape, scores_shape) != scores_shape:
                    raise ValueError
            except ValueError:
                raise ValueError(f"{self!r} expected a mask broadcastable to {scores_shape}, got {mask.shape}") from None
            allowed = mask if allowed is None else allowed & mask
        return allowed

    def _check_shapes(self, q, k, v):
        if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
            raise ValueError(f"{self!r} expected q (..., Tq, dk), k (..., Tk, dk), v (..., Tk, dv) "
                             f"with the same number of axes, got {q.shape}, {k.shape}, {v.shape}")
        if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
            raise ValueError(f"{self!r} expected q (..., Tq, dk), k (..., Tk, dk), v (..., Tk, dv) "
                             f"with matching batch axes, dk and Tk, got {q.shape}, {k.shape}, {v.shape}")

    def __repr__(self):
        return f"ScaledDotProductAttention(causal={self.causal}, scale={self.scale})"
