"""Sparse attention patterns as boolean masks (survey note §9.2, Child et al. 2019, "Sparse
Transformers"; §9.3, Beltagy et al. 2020, "Longformer").

The survey note writes sparse attention as each output i attending only to a
set S_i of positions (its eq. 24-26). Here each pattern is the (T, T) bool
matrix with row i the indicator of S_i (True = may attend), ready for
`ScaledDotProductAttention(mask=...)`; stacking two of them as (2, T, T) gives
two heads with different patterns, the way the Sparse Transformer splits its
factorised attention over heads.

* strided (stride l, for data with a period such as image rows): a local head
  sees the last l positions, a strided head every l-th position back.
* fixed (block l, c summary positions per block, for text): one head sees its
  own block, the other the last c positions of every block.
* Longformer: a sliding window, optionally dilated, plus a few global positions
  that attend to and are attended by everything (an encoder pattern, so not causal).

In each Sparse Transformer pair, two heads in sequence connect every position
to every earlier one (Child et al. §4.2); `tests/test_sparse_masks.py` checks
that through boolean matrix products.

These masks only *describe* the patterns: applied to dense attention they save
nothing. `sliding_window.BandedAttention` shows the saving for the window
pattern; block-sparse kernels for the others are left out.
"""

import numpy as np

from .sliding_window import band_mask


def _positions(T):
    """(T, 1) query positions i and (1, T) key positions j."""
    return np.arange(T)[:, None], np.arange(T)[None, :]


def strided_masks(T, stride):
    """Child et al.'s strided pattern: (local, strided), each bool (T, T), causal.

    local:   i - stride < j <= i
    strided: j <= i and (i - j) mod stride == 0
    """
    if stride < 1:
        raise ValueError(f"strided_masks expected stride >= 1, got {stride}")
    i, j = _positions(T)
    return band_mask(T, T, stride), (j <= i) & ((i - j) % stride == 0)


def fixed_masks(T, block, summary=1):
    """Child et al.'s fixed pattern: (block_mask, summary_mask), each bool (T, T), causal.

    block_mask:   j <= i, j in the same block of `block` positions as i
    summary_mask: j <= i, j among the last `summary` positions of its block
    """
    if not 1 <= summary <= block:
        raise ValueError(f"fixed_masks expected 1 <= summary <= block, got summary={summary}, block={block}")
    i, j = _positions(T)
    return (j <= i) & (i // block == j // block), (j <= i) & (j % block >= block - summary)


def longformer_mask(T, window, global_positions=(), dilation=1):
    """Longformer's pattern, bool (T, T), not causal: |i - j| <= (window // 2) * dilation with i - j a multiple of
    `dilation`, plus global rows and columns.

    Args:
        window: w, the number of positions in the band (w // 2 on each side).
        global_positions: indices that see every position and that every position sees
            (e.g. the classification token).
        dilation: d, the gap between the band's positions (Beltagy et al. §3.1, "dilated sliding window",
            survey note §9.3, Fig. 9c): the same w positions reach d times as far, so l stacked layers see
            l * d * w positions instead of l * w. 1 is the plain sliding window.
    """
    if isinstance(dilation, bool) or not isinstance(dilation, (int, np.integer)) or dilation < 1:
        raise ValueError(f"longformer_mask expected dilation an integer >= 1, got {dilation!r}")
    i, j = _positions(T)
    mask = (np.abs(j - i) <= (window // 2) * dilation) & ((j - i) % dilation == 0)
    chosen = np.asarray(global_positions, dtype=int)
    if chosen.size and (chosen.min() < 0 or chosen.max() >= T):
        raise ValueError(f"longformer_mask expected global positions in [0, {T}), got {list(chosen)}")
    mask[chosen, :] = True
    mask[:, chosen] = True
    return mask
