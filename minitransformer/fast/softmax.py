"""Softmax, fast form: in place on one buffer, row sums through BLAS (`reductions.py`).

The plain functions and the layer are in `minitransformer/layers/softmax.py`, with the
derivation. Only the functions have fast forms here, for fast attention (`fast/attention.py`):
`softmax` may write into its input's buffer (`out=`; attention hands it the scores it owns)
and both functions sum rows as matrix-vector products, faster than `np.sum` along a short
last axis (attention rows of T = 64; `reductions.py`). tests/test_fast_forms.py proves
both equal to the plain forms.
"""

import numpy as np

from .reductions import sum_last_axis


def _sum_keepdims(x, axis):
    """np.sum(x, axis=axis, keepdims=True), through BLAS along the last axis (fast/reductions.py)."""
    if axis in (-1, x.ndim - 1):
        return sum_last_axis(x)
    return np.sum(x, axis=axis, keepdims=True)


def softmax(x, axis=-1, out=None):
    """`layers.softmax.softmax` (the derivation is there), in one buffer.

    Args:
        x: array (...), any float dtype; may contain -inf (masked entries).
        axis: the axis that sums to one.
        out: optional array to write y into (may be x itself: a caller that owns
            x, like attention its scores, saves a buffer).
    Returns:
        y: array, same shape and dtype as x.
    """
    row_max = np.max(x, axis=axis, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0)   # all -inf row: shift by 0, exp gives 0
    y = np.subtract(x, row_max, out=out)
    np.exp(y, out=y)                                        # in place: one buffer, not two
    total = _sum_keepdims(y, axis)
    total[total == 0] = 1                                   # all -inf row: 0 / 1 = 0, not NaN
    y /= total
    return y


def softmax_backward(y, dy, axis=-1):
    """`layers.softmax.softmax_backward`, dx = y (dy - sum(dy y)), in one buffer.

    Args:
        y: softmax output (...).
        dy: upstream gradient, same shape as y.
    Returns:
        dx: same shape as y.
    """
    dx = dy * y
    row_sum = _sum_keepdims(dx, axis)                        # sum_i dy_i y_i
    np.subtract(dy, row_sum, out=dx)                        # reuse the buffer: dx = y * (dy - row_sum)
    dx *= y
    return dx


# No fast form of the `Softmax` layer: no model builds one (attention calls the functions above, and
# fast attention these fast ones), so a fast layer would gain nothing that a run could measure.
FAST_FORMS = {}
