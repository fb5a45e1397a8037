"""Shaw et al.'s value-side relative vectors (2018, eq. 3; survey note §11): relative positions in the values too.

`RelativePositionAttention` (relative_position.py) adds a learned vector a^K_(j-i) to each key; Shaw et al. also
add one to each value, so that what a query reads depends on how far away it was read from:

    z_i = sum_j alpha_ij (v_j + a^V_(j-i)),   a^V_d = a^V_(clip(d, -K, K))

The new term is sum_j alpha_ij a^V_(j-i): the attention weights, already computed, applied to a (T, T, dv)
array of vectors. The parent's attention runs on v extended by the identity, [v, I] (T, dv + T), so that its
output carries alpha itself beside alpha v.

Left out: the skewed form (Huang et al. skew only the keys) and dropout.

Derivation:
    The new term's backward adds to dalpha_ij the product dout_i . a^V_(j-i), and to each table row the
    sum of alpha_ij dout_i over the (i, j) with that offset.

    The key side's backward (the parent's) takes dalpha = dout v^T. The extra dalpha joins it without changing
    that code: with v extended by the identity, [v, I], and the upstream by the extra term,
    [dout, dalpha_rel], the parent's dout v^T becomes dout v^T + dalpha_rel I, exactly the sum needed (and its dv
    comes back in the first dv columns).
"""

import numpy as np

from ..core.checks import check_float_dtype
from ..core.parameter import Parameter
from ..core.random import as_generator
from .relative_position import RelativePositionAttention


class RelativeValueAttention(RelativePositionAttention):
    """Self-attention with relative vectors on the keys and on the values (Shaw et al. 2018), direct form.

    Args:
        head_size: hs.  value_size: dv (default hs).  max_distance: K.  causal: mask keys after the query.
        dtype, rng: as everywhere; both tables are drawn from `rng`, the key table first.
    Parameters:
        table (2K + 1, hs): a^K;  table_v (2K + 1, dv): a^V, row K + d holds a^V_d.
    """

    def __init__(self, head_size, max_distance, value_size=None, causal=True, dtype=np.float64, rng=None):
        rng = as_generator(rng)
        super().__init__(head_size, max_distance, causal=causal, skewed=False, dtype=dtype, rng=rng)
        self.value_size = head_size if value_size is None else value_size
        table_v = rng.standard_normal((2 * max_distance + 1, self.value_size)) * self.value_size ** -0.5
        self.table_v = Parameter(table_v.astype(check_float_dtype(dtype, "RelativeValueAttention")))

    def forward(self, q, k, v):
        """q, k (..., T, hs), v (..., T, dv) -> out (..., T, dv)."""
        v = np.asarray(v)
        if v.ndim < 2 or v.shape[-1] != self.value_size:
            raise ValueError(f"{self!r} expected v (..., T, {self.value_size}), got {v.shape}")
        identity = np.broadcast_to(np.eye(v.shape[-2], dtype=v.dtype), (*v.shape[:-1], v.shape[-2]))  # (..., T, T)
        read = super().forward(q, k, np.concatenate([v, identity], axis=-1))    # 1.-6. [alpha v, alpha] (..., T, dv + T)
        ### BEGIN SOLUTION relative_values.forward
        self.values_rel = self.table_v.data[self.rows]                           # 7. (T, T, dv) a^V_(j-i)
        return read[..., :self.value_size] + (self.alpha[..., :, None, :] @ self.values_rel)[..., 0, :]  # 8.
        ### END SOLUTION

    def backward(self, dout):
        """The gradients at q, k and v, and the value table's gradient added to its `.grad`. Returns (dq, dk, dv).

        Derivation:
            8. out += sum_j alpha_ij a^V_(j-i)  ->  dalpha_ij += dout_i . a^V_(j-i),
                                                    da^V_(j-i) += sum over the batch of alpha_ij dout_i;
            then steps 6-1 as the parent, with dalpha_rel added through [v, I] (module docstring).
        """
        dout = np.asarray(dout)
        ### BEGIN SOLUTION relative_values.backward
        dalpha_rel = (dout[..., :, None, :] @ np.swapaxes(self.values_rel, -1, -2))[..., 0, :]   # (..., T, T)
        alpha2d = self.alpha.reshape(-1, *self.alpha.shape[-2:])                  # (N, T, T)
        dout2d = dout.reshape(-1, *dout.shape[-2:])                               # (N, T, dv)
        dvalues_rel = alpha2d.transpose(1, 2, 0) @ dout2d.transpose(1, 0, 2)      # (T, T, dv) sum_n alpha dout_i
        np.add.at(self.table_v.grad, self.rows, dvalues_rel)
        dq, dk, dv_extended = super().backward(np.concatenate([dout, dalpha_rel], axis=-1))   # 6.-1. through [v, I]
        return dq, dk, dv_extended[..., :self.value_size]
        ### END SOLUTION

    def __repr__(self):
        return (f"RelativeValueAttention(head_size={self.head_size}, value_size={self.value_size}, "
                f"max_distance={self.max_distance})")
