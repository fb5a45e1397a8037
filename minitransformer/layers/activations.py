"""Elementwise activations: ReLU (lecture notes 2025 §1, max(0, x)) and GELU.

GELU is the tanh approximation GPT-2 uses (Hendrycks & Gimpel 2016, eq. for
"GELU(x) ~ 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"), which is what
PyTorch calls `gelu(approximate="tanh")`. The exact erf form is left out.

The constants are Python floats on purpose: NumPy 2 promotes a float32 array
times an `np.float64` scalar to float64, which silently doubled the cost of a
float32 model. GELU's forward and backward work in place on one buffer each;
the plain formulas are in the docstrings and `tests/test_speed_forms.py`
proves both forms agree.
"""

import numpy as np

from ..module import Module

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
    """y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). Shapes: x (...) -> y (...)."""

    def forward(self, x):
        """x (...) -> y (...).

        Plain form: t = tanh(SQRT_2_OVER_PI * (x + GELU_CUBIC * x**3)); y = 0.5 * x * (1 + t).
        Here the gate gate = 0.5 (1 + t) is kept for the backward pass, and y = x * gate.
        """
        x = np.asarray(x)
        self.x = x
        gate = x * x                                # u = x (sqrt(2/pi) + sqrt(2/pi) 0.044715 x^2), in place
        gate *= SQRT_2_OVER_PI * GELU_CUBIC
        gate += SQRT_2_OVER_PI
        gate *= x
        np.tanh(gate, out=gate)                     # t
        gate *= 0.5
        gate += 0.5                                 # gate = 0.5 (1 + t)
        self.gate = gate
        return x * gate

    def backward(self, dout):
        """Product rule on y = 0.5 x (1 + t), t = tanh(u):
            dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx,
            du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
        With gate = 0.5 (1 + t), 1 - t^2 = 4 gate (1 - gate), so
            dy/dx = gate (1 + 2 x (1 - gate) du/dx),
        which is what the in-place steps below compute.
        """
        self._require("x")
        self._check_dout(dout, self.x.shape)
        ### BEGIN SOLUTION gelu.backward
        x, gate = self.x, self.gate
        dy_dx = x * x                               # 2 x du/dx = x (2 sqrt(2/pi) + 6 sqrt(2/pi) 0.044715 x^2)
        dy_dx *= 6.0 * SQRT_2_OVER_PI * GELU_CUBIC
        dy_dx += 2.0 * SQRT_2_OVER_PI
        dy_dx *= x
        dy_dx *= 1.0 - gate                         # (1 - gate) is one temporary
        dy_dx += 1.0
        dy_dx *= gate                               # gate (1 + 2 x (1 - gate) du/dx)
        dy_dx *= dout
        return dy_dx
        ### END SOLUTION
