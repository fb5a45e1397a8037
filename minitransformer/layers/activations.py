"""Elementwise activations: ReLU (lecture notes 2025 §1, max(0, x)) and GELU.

GELU is the tanh approximation GPT-2 uses (Hendrycks & Gimpel 2016, eq. for
"GELU(x) ~ 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"), which is what
PyTorch calls `gelu(approximate="tanh")`. The exact erf form is left out.

The constants are Python floats on purpose: NumPy 2 promotes a float32 array
times an `np.float64` scalar to float64, which silently doubled the cost of a
float32 model. GELU's forward and backward work in place on one buffer each,
a block of rows at a time (`row_blocks.py`); the plain formulas are in the
docstrings and `tests/test_speed_forms.py` proves both forms agree.
"""

import numpy as np

from ..core.module import Module
from ..fast.row_blocks import by_row_blocks

SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))   # a Python float: it must not promote float32 arrays
GELU_CUBIC = 0.044715


class ReLU(Module):
    """y = max(0, x), elementwise. Shapes: x (...) -> y (...)."""

    def forward(self, x):
        """x (...) -> y (...)."""
        self.positive = x > 0
        return x * self.positive

    def backward(self, dout):
        """dy/dx = 1 where x > 0 else 0 (the kink at 0 is given slope 0)."""
        self._require("positive")
        self._check_dout(dout, self.positive.shape)
        ### BEGIN SOLUTION relu.backward
        return dout * self.positive
        ### END SOLUTION


class GELU(Module):
    """y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). Shapes: x (...) -> y (...).

    Speed: forward and backward are chains of in-place passes, run one block
    of rows at a time so that a block stays in the CPU cache for the whole
    chain (`layers/row_blocks.py`); `_forward_rows` and `_backward_rows` are
    the chains, written for any block of rows.
    """

    def forward(self, x):
        """x (...) -> y (...).

        Plain form: t = tanh(SQRT_2_OVER_PI * (x + GELU_CUBIC * x**3)); y = 0.5 * x * (1 + t).
        The gate 0.5 (1 + t) is kept for the backward pass, and y = x * gate.
        """
        x = np.asarray(x)
        self.x = x
        y, self.gate = by_row_blocks(self._forward_rows, [x], n_outputs=2)
        return y

    def backward(self, dout):
        """Product rule on y = 0.5 x (1 + t), t = tanh(u):
            dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx,
            du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
        With gate = 0.5 (1 + t), 1 - t^2 = 4 gate (1 - gate), so
            dy/dx = gate (1 + 2 x (1 - gate) du/dx),
        and dx = dout * dy/dx, which `_backward_rows` computes in place on each block of rows.

        Args:
            dout: (...), the shape of x.
        Returns:
            dx: (...).
        """
        self._require("x")
        self._check_dout(dout, self.x.shape)
        (dx,) = by_row_blocks(self._backward_rows, [self.x, self.gate, np.asarray(dout)])
        return dx

    @staticmethod
    def _forward_rows(x, y, gate):
        """The forward pass on a block of rows x (rows, n): writes y and gate (rows, n)."""
        np.multiply(x, x, out=gate)                 # u = x (sqrt(2/pi) + sqrt(2/pi) 0.044715 x^2), in place
        gate *= SQRT_2_OVER_PI * GELU_CUBIC
        gate += SQRT_2_OVER_PI
        gate *= x
        np.tanh(gate, out=gate)                     # t
        gate *= 0.5
        gate += 0.5                                 # gate = 0.5 (1 + t)
        np.multiply(x, gate, out=y)                 # y = x * gate

    @staticmethod
    def _backward_rows(x, gate, dout, dx):
        """dx = dout * dy/dx on a block of rows, with dy/dx = gate (1 + 2 x (1 - gate) du/dx) and
        du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2) (derived in `backward`).

        Args:
            x, gate, dout: (rows, n) blocks of the input, the cached gate 0.5 (1 + t) and the upstream gradient.
            dx: (rows, n) output block: write the result into it (dx[...] = ..., or out=dx);
                `dx = ...` would only rebind the name, and is refused.
        """
        ### BEGIN SOLUTION gelu.backward
        np.multiply(x, x, out=dx)                   # 2 x du/dx = x (2 sqrt(2/pi) + 6 sqrt(2/pi) 0.044715 x^2)
        dx *= 6.0 * SQRT_2_OVER_PI * GELU_CUBIC
        dx += 2.0 * SQRT_2_OVER_PI
        dx *= x
        dx *= 1.0 - gate                            # (1 - gate) is one temporary
        dx += 1.0
        dx *= gate                                  # dy/dx = gate (1 + 2 x (1 - gate) du/dx)
        dx *= dout
        ### END SOLUTION
