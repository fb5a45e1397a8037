"""Relative position representations (Shaw et al. 2018) and the memory-efficient "skewing" of
Huang et al. (Music Transformer, 2018; survey note §11, Algorithm 1).

Shaw et al. give each clipped offset d = clip(j - i, -K, K) a learned vector
a_d (hs,) and add to the score of query i and key j the term q_i . a_(j-i):

    score(i, j) = (q_i . k_j + q_i . a_(j-i)) / sqrt(hs)

Two ways to compute the relative term S_rel (T, T):

* direct: build R[i, j] = a_(j-i), a (T, T, hs) array, and take
  S_rel[i, j] = q_i . R[i, j]. Memory O(T^2 hs).
* skewed (causal only): in a causal model query i needs the offsets
  -(T-1) .. 0 only. Stack them as E (T, hs), row r for offset r - (T - 1),
  and take A = q E^T (T, T): A[i, r] = q_i . a_(r-(T-1)), every offset for
  every query, memory O(T hs) beyond the scores. The entry S_rel[i, j] needs
  is A[i, (T - 1) + j - i]: row i shifted left by T - 1 - i. The skew does
  this shift for all rows with one pad and one reshape: put a zero column in
  front (T, T+1), read the same memory as (T+1, T), drop the first row. Entry
  (i, j <= i) then lands exactly on A[i, T - 1 - i + j]; the entries with
  j > i receive padding or values of the next row, which the causal mask
  removes anyway.

`tests/test_relative_position.py` proves both forms equal, forward and
backward. The survey note's listing of the skew (Algorithm 1) masks A with a
lower-triangular matrix *before* skewing; that erases the entries the skew
needs (errata in notebooks/errata_variants.md, shown in the same test file).

The rest is scaled dot-product attention, and this layer calls it
(`layers/attention.py`) rather than repeat it: the relative term enters as T
extra coordinates, the one-hot e_i on query i and column j of S_rel on key j,
so that q'_i . k'_j = q_i . k_j + S_rel[i, j]. Shaw's value-side vectors a^V
are another layer, `relative_values.py` (Huang et al. use only the key side).
Left out: the non-causal skew.

Derivation:
    The backward of the skew is its adjoint: pad the gradient with a zero first
    row, read it as (T, T+1), drop the first column. Attention's own backward
    hands back dS_rel in the extra coordinates of dk'.
"""

import numpy as np

from ..core.checks import check_float_dtype
from ..core.module import Module
from ..core.parameter import Parameter
from ..core.random import as_generator
from ..layers.attention import ScaledDotProductAttention


def skew(rel_logits):
    """(..., T, T) with column r = offset r - (T - 1)  ->  (..., T, T) with entry (i, j) = offset j - i, j <= i."""
    T = rel_logits.shape[-1]
    ### BEGIN SOLUTION skew.forward
    padded = np.concatenate([np.zeros((*rel_logits.shape[:-1], 1), rel_logits.dtype), rel_logits], axis=-1)  # (..., T, T+1)
    return padded.reshape(*rel_logits.shape[:-2], T + 1, T)[..., 1:, :]                                     # (..., T, T)
    ### END SOLUTION


def skew_backward(dskewed):
    """The backward of `skew`: the gradient at its input, (..., T, T) -> (..., T, T).

    Derivation:
        The skew only moves entries, so its backward is its adjoint: the forward's steps undone in reverse.
    """
    T = dskewed.shape[-1]
    ### BEGIN SOLUTION skew.backward
    dpadded = np.zeros((*dskewed.shape[:-2], T + 1, T), dskewed.dtype)
    dpadded[..., 1:, :] = dskewed                                        # undo: drop the first row
    return dpadded.reshape(*dskewed.shape[:-2], T, T + 1)[..., :, 1:]    # undo: reshape; drop the pad column
    ### END SOLUTION


class RelativePositionAttention(Module):
    """Self-attention with Shaw et al.'s relative key vectors, in the direct or the skewed form.

    Args:
        head_size: hs.
        max_distance: K; offsets beyond +-K share the vector of +-K.
        causal: mask keys after the query.
        skewed: use Huang et al.'s skewing (needs causal=True).
        dtype, rng: as everywhere; the table is N(0, 1/hs).
    Parameters:
        table (2K + 1, hs): row K + d holds a_d.
    Attributes after forward:
        alpha (..., T, T).
    """

    def __init__(self, head_size, max_distance, causal=True, skewed=False, dtype=np.float64, rng=None):
        if skewed and not causal:
            raise ValueError("RelativePositionAttention: the skewed form is defined for causal attention only")
        dtype = check_float_dtype(dtype, "RelativePositionAttention")
        self.head_size, self.max_distance, self.causal, self.skewed = head_size, max_distance, causal, skewed
        table = as_generator(rng).standard_normal((2 * max_distance + 1, head_size)) * head_size ** -0.5
        self.table = Parameter(table.astype(dtype))

    def _rows(self, offsets):
        """Row of the table for each offset: clip(d, -K, K) + K."""
        return np.clip(offsets, -self.max_distance, self.max_distance) + self.max_distance

    def forward(self, q, k, v):
        """q, k (..., T, hs), v (..., T, dv) -> out (..., T, dv)."""
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        if q.ndim < 2 or q.shape != k.shape or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != self.head_size:
            raise ValueError(f"{self!r} expected q, k (..., T, {self.head_size}) and v (..., T, dv), "
                             f"got {q.shape}, {k.shape}, {v.shape}")
        T = q.shape[-2]
        ### BEGIN SOLUTION relative_position.forward
        if self.skewed:
            self.rows = self._rows(np.arange(-(T - 1), 1))                       # (T,) offsets -(T-1) .. 0
            self.gathered = self.table.data[self.rows]                           # (T, hs) E
            relative = skew(q @ self.gathered.T)                                 # 1. skew(q E^T): (..., T, T)
        else:
            self.rows = self._rows(np.arange(T)[None, :] - np.arange(T)[:, None])  # (T, T) offset j - i
            self.gathered = self.table.data[self.rows]                           # (T, T, hs) R
            relative = (q[..., :, None, :] @ np.swapaxes(self.gathered, -1, -2))[..., 0, :]  # 1. q_i . R[i, j]
        ### END SOLUTION
        one_hot = np.broadcast_to(np.eye(T, dtype=q.dtype), relative.shape)      # (..., T, T) e_i on query i
        self.attention = ScaledDotProductAttention(causal=self.causal, scale=self.head_size ** -0.5)
        self.q = q
        return self.attention.forward(np.concatenate([q, one_hot], axis=-1),      # 2. (..., T, hs + T) q'
                                      np.concatenate([k, np.swapaxes(relative, -1, -2)], axis=-1), v)  # k'

    @property
    def alpha(self):
        """(..., T, T) the attention weights of the last forward."""
        self._require("attention")
        return self.attention.alpha

    def backward(self, dout):
        """The gradients at q, k and v, and the table's gradient added to its `.grad`.

        Derivation:
            Reverse steps 2 and 1:

                2. attention on q' = [q, e_i], k' = [k, S_rel^T]  ->  its backward: dq', dk', dv;
                   dq = dq'[:hs], dk = dk'[:hs], dS_rel[i, j] = dk'[j, hs + i]
                1. direct: S_rel[i, j] = q_i . R[i, j]  ->  dq_i += sum_j dS_ij R[i, j],  da_(j-i) += sum dS_ij q_i
                   skewed: S_rel = skew(q E^T)         ->  dA = skew^T(dS),  dq += dA E,  dE = dA^T q
                   (a row of the table used for several offsets, or several times, gets every share)

        Returns:
            (dq, dk, dv).
        """
        dq_aug, dk_aug, dv = self.attention.backward(dout)                       # 2.
        hs = self.head_size
        drelative = np.swapaxes(dk_aug[..., hs:], -1, -2)                        # (..., T, T) dS_rel
        ### BEGIN SOLUTION relative_position.backward
        q2d = self.q.reshape(-1, *self.q.shape[-2:])                             # (N, T, hs), N = batch axes
        if self.skewed:                                                          # 1.
            drel = skew_backward(drelative)                                      # (..., T, T) dA
            dq = dq_aug[..., :hs] + drel @ self.gathered                         # dA E
            drel_T = np.swapaxes(drel, -1, -2).reshape(q2d.shape[0], *drel.shape[-2:])   # (N, T, T) dA^T
            np.add.at(self.table.grad, self.rows, (drel_T @ q2d).sum(axis=0))    # (T, hs) into the table
        else:
            dq = dq_aug[..., :hs] + (drelative[..., :, None, :] @ self.gathered)[..., 0, :]   # sum_j dS_ij R[i, j]
            ds2d = drelative.reshape(-1, *drelative.shape[-2:])                  # (N, T, T)
            # dR[i, j] = sum_n dS[n, i, j] q[n, i]: for each i a (T, N) @ (N, hs) product
            np.add.at(self.table.grad, self.rows, ds2d.transpose(1, 2, 0) @ q2d.transpose(1, 0, 2))  # (T, T, hs)
        ### END SOLUTION
        return dq, dk_aug[..., :hs], dv

    def __repr__(self):
        form = "skewed" if self.skewed else "direct"
        return f"RelativePositionAttention(head_size={self.head_size}, max_distance={self.max_distance}, {form})"
