r"""Scaled dot-product attention (lecture notes 2025 §1.1 and footnote 6; Vaswani et al. 2017).

$$
S = \text{scale} \cdot q k^\top \;\; (T_q, T_k), \qquad
\alpha = \operatorname{softmax}(S) \text{ row by row}, \qquad
\text{out} = \alpha \, v \;\; (T_q, d_v)
$$

per batch entry: the scores $S$, the scale $1/\sqrt{d_k}$ by default, each row of the attention weights $\alpha$ a
distribution over the keys (docs/guide/notation.md has every symbol). The notes write the last step as "XV alpha"; the product that has the right
shapes is alpha (X W_V), with alpha on the left (errata notebook).

Masking: a key that a query may not see gets score -inf *before* the softmax,
so each row still sums to one over the allowed keys. The notes instead
multiply alpha by a 0/1 matrix after the softmax, which leaves rows that no
longer sum to one; the notebooks show the difference.

A query that may see no key at all (a fully masked row) gets alpha = 0 and
output 0; this is a definition, documented here and tested, rather than the
NaN that softmax of all -inf would give.

The fast tier's form of this layer (`minitransformer/fast/attention.py`) computes the
same numbers with memory-layout tricks; this file is the form the lecture derives.

The memory-efficient form, in tiles with an online softmax (FlashAttention's),
is `variants/tiled_attention.py`; the fast tier runs it from 256 keys on.
Left out: dropout on the attention weights (GPT-2's attn_pdrop), and several
separate masks in one call: the mask is one boolean array broadcast against the
scores (beside it, `bias` adds one array of score biases).

Derivation:
    A fully masked row has alpha = 0 whatever its scores, so it passes no gradient.
"""

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


def band_mask(Tq, Tk, window, causal=True):
    """Bool (Tq, Tk), True where query i (at absolute position Tk - Tq + i) may see key j.

    A sliding window of `window` keys (Beltagy et al. 2020; Kumar slides): with
    causal, 0 <= i - j < window; otherwise |i - j| < window.
    """
    distance = np.arange(Tk - Tq, Tk)[:, None] - np.arange(Tk)[None, :]     # (Tq, Tk) i - j
    if causal:
        return (distance >= 0) & (distance < window)
    return np.abs(distance) < window


class ScaledDotProductAttention(Module):
    r"""out = softmax(scale q k^T + mask) v, with no parameters:

    $$
    \text{out} = \operatorname{softmax}\!\Big( \frac{q k^\top}{\sqrt{d_k}} + M \Big) v, \qquad
    M_{ij} = 0 \text{ where query } i \text{ may see key } j, \; -\infty \text{ elsewhere}
    $$

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
        r"""Attend from each query to the keys, in the numbered steps of the code:

        $$
        \begin{aligned}
        &\text{1-2. } S = \text{scale} \cdot q k^\top && (\ldots, T_q, T_k) \\
        &\text{2b. } S \mathrel{+}= \text{bias} \quad \text{(a constant, e.g. ALiBi's)} \\
        &\text{3. } S_{ij} = -\infty \text{ where query } i \text{ may not see key } j \\
        &\text{4. } \alpha = \operatorname{softmax}(S) \text{ along } T_k && (\ldots, T_q, T_k) \\
        &\text{5. } \text{out} = \alpha \, v && (\ldots, T_q, d_v)
        \end{aligned}
        $$

        Args:
            q: (..., Tq, d_k) queries.
            k: (..., Tk, d_k) keys.
            v: (..., Tk, d_v) values.
            mask: optional bool, broadcastable to (..., Tq, Tk); True = may attend.
            bias: optional constant float, broadcastable to (..., Tq, Tk), added to the
                scaled scores (ALiBi's distance penalties); it receives no gradient.
        Returns:
            out: (..., Tq, d_v).
        """
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        self._check_shapes(q, k, v)
        scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        Tq, Tk = q.shape[-2], k.shape[-2]
        allowed = self._allowed(mask, (*q.shape[:-1], Tk), Tq, Tk)  # bool, True = may attend, or None
        ### BEGIN SOLUTION attention.forward
        scores = q @ np.swapaxes(k, -1, -2) * scale                # 1-2. scaled q k^T (..., Tq, Tk)
        if bias is not None:
            scores = scores + bias                                 # 2b. constant score bias
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)            # 3. masked keys get -inf
        alpha = softmax(scores, axis=-1)                           # 4. (..., Tq, Tk), rows sum to 1
        out = alpha @ v                                            # 5. (..., Tq, d_v)
        ### END SOLUTION
        self.q, self.k, self.v, self.alpha, self.used_scale = q, k, v, alpha, scale
        return out

    def backward(self, dout):
        r"""The gradients at the queries, keys and values.

        Derivation:
            Reverse steps 5 to 1:

            $$
            \begin{aligned}
            \text{5. } \text{out} = \alpha \, v \;&\Rightarrow\;
                d\alpha = \mathrm{dout} \, v^\top, \quad dv = \alpha^\top \mathrm{dout} \\
            \text{4. } \alpha = \operatorname{softmax}(S) \;&\Rightarrow\;
                dS_{ij} = \alpha_{ij} \Big( d\alpha_{ij} - \textstyle\sum_k d\alpha_{ik} \, \alpha_{ik} \Big) \\
            \text{3. masked: } \alpha_{ij} = 0 \;&\Rightarrow\; dS_{ij} = 0 \text{ there: nothing to undo} \\
            \text{2b. } S \mathrel{+}= \text{bias} \;&\Rightarrow\; \text{a constant: nothing to undo} \\
            \text{1-2. } S = \text{scale} \cdot q k^\top \;&\Rightarrow\;
                dq = \text{scale} \cdot dS \, k, \quad dk = \text{scale} \cdot dS^\top q
            \end{aligned}
            $$

        Args:
            dout: (..., Tq, d_v).
        Returns:
            (dq, dk, dv) with the shapes of q, k, v.
        """
        ### BEGIN SOLUTION attention.backward
        dalpha = dout @ np.swapaxes(self.v, -1, -2)                # 5. out = alpha v: (..., Tq, Tk)
        dv = np.swapaxes(self.alpha, -1, -2) @ dout                #    (..., Tk, d_v)
        dscores = softmax_backward(self.alpha, dalpha, axis=-1)    # 4. (..., Tq, Tk); 0 where masked (3.)
        dscores = dscores * self.used_scale                        # 2. (..., Tq, Tk)
        dq = dscores @ self.k                                      # 1. S = scale q k^T: (..., Tq, d_k)
        dk = np.swapaxes(dscores, -1, -2) @ self.q                 #    (..., Tk, d_k)
        return dq, dk, dv
        ### END SOLUTION

    def _allowed(self, mask, scores_shape, Tq, Tk):
        """Combine the causal rule and the user's mask into one bool array (or None)."""
        allowed = causal_mask(Tq, Tk) if self.causal else None
        mask = self._check_mask(mask, scores_shape)
        if mask is not None:
            allowed = mask if allowed is None else allowed & mask
        return allowed

    def _check_mask(self, mask, scores_shape):
        """The user's mask as a bool array broadcastable to scores_shape (or None); a clear error otherwise."""
        if mask is None:
            return None
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise TypeError(f"{self!r} expected a bool mask (True = may attend), got dtype {mask.dtype}")
        try:
            if np.broadcast_shapes(mask.shape, scores_shape) != scores_shape:
                raise ValueError
        except ValueError:
            raise ValueError(f"{self!r} expected a mask broadcastable to {scores_shape}, got {mask.shape}") from None
        return mask

    def _check_shapes(self, q, k, v):
        """Real floats, and shapes that fit together; the fast form calls this too."""
        for name, array in (("q", q), ("k", k), ("v", v)):
            self._check_float(array, name)
        if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
            raise ValueError(f"{self!r} expected q (..., Tq, d_k), k (..., Tk, d_k), v (..., Tk, d_v) "
                             f"with the same number of axes, got {q.shape}, {k.shape}, {v.shape}")
        if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
            raise ValueError(f"{self!r} expected q (..., Tq, d_k), k (..., Tk, d_k), v (..., Tk, d_v) "
                             f"with matching batch axes, d_k and Tk, got {q.shape}, {k.shape}, {v.shape}")

    def __repr__(self):
        return f"ScaledDotProductAttention(causal={self.causal}, scale={self.scale})"
