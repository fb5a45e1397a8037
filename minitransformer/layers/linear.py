"""Linear map y = x W + b (lecture notes 2025 §1: "xW_1 + b_1").

The weight is stored as (d_in, d_out) so the forward reads exactly like the
lecture's row-vector convention, x @ W.

Derivation:
    The backward flattens the leading axes so that the weight's gradient is one
    product x^T g summed over every position.
"""

import numpy as np

from ..core.checks import check_float_dtype
from ..core.module import Module
from ..core.parameter import Parameter
from ..core.random import as_generator


class Linear(Module):
    """y = x @ weight + bias.

    Args:
        d_in: input features.
        d_out: output features.
        bias: whether to add a learned bias.
        dtype: float64 (default) or float32.
        rng: seed or np.random.Generator for the initial weights.
        init_std: standard deviation of the normal initial weights
            (default 1/sqrt(d_in), which keeps the output variance near the input's).
    Parameters:
        weight (d_in, d_out); bias (d_out,) initialised to zero.
    """

    def __init__(self, d_in, d_out, bias=True, dtype=np.float64, rng=None, init_std=None):
        dtype = check_float_dtype(dtype, f"Linear({d_in} -> {d_out})")
        rng = as_generator(rng)
        self.d_in, self.d_out = d_in, d_out
        std = d_in ** -0.5 if init_std is None else init_std
        self.weight = Parameter((rng.standard_normal((d_in, d_out)) * std).astype(dtype))
        self.bias = Parameter(np.zeros(d_out, dtype=dtype)) if bias else None

    def forward(self, x):
        """x (..., d_in) -> y (..., d_out)."""
        x = np.asarray(x)
        self._check_features(x, self.d_in)
        self.x = x
        y = x @ self.weight.data                            # (..., d_out)
        if self.bias is not None:
            y = y + self.bias.data
        return y

    def backward(self, dout):
        """The gradient at x, and the weight's and bias's gradients added to their `.grad`.

        Derivation:
            Gradients of y = x W + b, with rows x_n and upstream rows g_n = dL/dy_n (the rows of dout):

                dx     = g W^T                  (each input feature fed every output through W)
                dW    += x^T g = sum_n x_n^T g_n
                db    += sum_n g_n

        Args:
            dout: (..., d_out).
        Returns:
            dx: (..., d_in).
        """
        ### BEGIN SOLUTION linear.backward
        x2d = self.x.reshape(-1, self.d_in)                 # (N, d_in)
        dout2d = dout.reshape(-1, self.d_out)               # (N, d_out)
        self.weight.grad += x2d.T @ dout2d                  # forward was y = x @ W
        if self.bias is not None:
            self.bias.grad += dout2d.sum(axis=0)            # forward was y = y + b: (d_out,)
        dx = dout2d @ self.weight.data.T                    # (N, d_in)
        return dx.reshape(self.x.shape)
        ### END SOLUTION

    def __repr__(self):
        return f"Linear({self.d_in} -> {self.d_out})"
