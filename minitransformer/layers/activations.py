"""Elementwise activations: ReLU (lecture notes 2025 §1, max(0, x)) and GELU.

GELU is the tanh approximation GPT-2 uses (Hendrycks & Gimpel 2016, eq. for
"GELU(x) ~ 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"), which is what
PyTorch calls `gelu(approximate="tanh")`. The exact erf form is left out.
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
        return dout * self.positive


class GELU(Module):
    """y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). Shapes: x (...) -> y (...)."""

    def forward(self, x):
        """x (...) -> y (...)."""
        self.x = x
        u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x ** 3)
        self.tanh_u = np.tanh(u)
        return 0.5 * x * (1.0 + self.tanh_u)

    def backward(self, dout):
        """Product rule on y = 0.5 x (1 + t), t = tanh(u):
            dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx,
            du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
        """
        self._require("x")
        self._check_dout(dout, self.x.shape)
        x, t = self.x, self.tanh_u
        du_dx = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * x * x)
        dy_dx = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx
        return dout * dy_dx
