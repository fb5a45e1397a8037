"""Softmax along one axis, numerically stable (lecture notes 2025 §1.1; Strabel §1.2).

`softmax` and `softmax_backward` are plain functions because attention and the
loss use them too; `Softmax` wraps them as a layer.

A row whose entries are all -inf (a query that may attend to nothing) is
defined to give all zeros rather than NaN.

Derivation:
    A row of all -inf gives zeros whatever its entries, so its gradient is zero too.
"""

import numpy as np

from ..core.module import Module


def softmax(x, axis=-1):
    r"""y_i = exp(x_i - m) / sum_j exp(x_j - m), with m = max_j x_j, along one axis:

    $$
    y_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}}, \qquad m = \max_j x_j
    $$

    Subtracting the row maximum changes nothing mathematically (it cancels in
    the ratio) but keeps exp() from overflowing, so logits of +-1e4 in float32
    stay finite.

    Args:
        x: array (...), any float dtype; may contain -inf (masked entries).
        axis: the axis that sums to one.
    Returns:
        y: array, same shape and dtype as x.
    """
    ### BEGIN SOLUTION softmax.forward
    row_max = np.max(x, axis=axis, keepdims=True)                # (..., 1)
    row_max = np.where(np.isfinite(row_max), row_max, 0)         # a row of all -inf: shift by 0
    exp = np.exp(x - row_max)                                    # (...), every entry in [0, 1]
    total = exp.sum(axis=axis, keepdims=True)                    # (..., 1)
    return exp / np.where(total == 0, 1, total)                  # a row of all -inf: 0 / 1 = 0, not NaN
    ### END SOLUTION


def softmax_backward(y, dy, axis=-1):
    r"""Softmax's backward, given its output y: the gradient at x from the gradient dy at y.

    Derivation:
        The Jacobian is $\partial y_i / \partial x_j = y_i (\delta_{ij} - y_j)$, so

        $$
        dx_j = \sum_i dy_i \, y_i (\delta_{ij} - y_j) = y_j \Big( dy_j - \sum_i dy_i \, y_i \Big)
        $$

        One multiply, one row sum, one subtract: the (T x T) Jacobian is never built.

    Args:
        y: softmax output (...).
        dy: upstream gradient, same shape as y.
    Returns:
        dx: same shape as y.
    """
    ### BEGIN SOLUTION softmax.backward
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))
    ### END SOLUTION


class Softmax(Module):
    """Softmax as a layer.

    Args:
        axis: axis that is normalised (default the last).
    """

    def __init__(self, axis=-1):
        self.axis = axis

    def forward(self, x):
        """x (...) -> y (...), each slice along `axis` positive and summing to 1."""
        x = self._check_input(x)
        self.y = softmax(x, self.axis)
        return self.y

    def _check_input(self, x):
        """x as an array of real floats with at least one axis, or a clear error."""
        x = np.asarray(x)
        self._check_float(x)
        if x.ndim == 0:
            raise ValueError(f"{self!r} expected an array with at least one axis, got a scalar")
        return x

    def backward(self, dout):
        """The gradient at x, by `softmax_backward`. dout (...) -> dx (...).

        Derivation:
            dx = y * (dout - sum(dout * y)) along the axis.
        """
        return softmax_backward(self.y, dout, self.axis)

    def __repr__(self):
        return f"Softmax(axis={self.axis})"
