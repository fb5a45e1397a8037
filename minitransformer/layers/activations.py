"""Elementwise activations: ReLU (lecture notes 2025 §1, max(0, x)), GELU and SiLU.

GELU is the tanh approximation GPT-2 uses (Hendrycks & Gimpel 2016, eq. for
"GELU(x) ~ 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"), which is what
PyTorch calls `gelu(approximate="tanh")`. The exact erf form is left out.

The constants are Python floats on purpose: NumPy 2 promotes a float32 array
times an `np.float64` scalar to float64, which silently doubled the cost of a
float32 model. The fast tier's GELU (`minitransformer/fast/activations.py`)
computes the same numbers in place, a block of rows at a time.

SiLU (x times its sigmoid; Elfwing et al. 2018, "swish" in Ramachandran et al.
2017) is the gate of SwiGLU (`swiglu.py`), the feed-forward of Llama-style
decoders. It has no fast form: measured on the benchmark's Llama-style model (B 12, T 64,
d_ff 350, float32), its forward and backward take a negligible share of a training step, and
an in-place form of it was slower (benchmarks/README.md, "The modern decoder").
"""

import numpy as np

from ..core.module import Module

SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))   # a Python float: it must not promote float32 arrays
GELU_CUBIC = 0.044715


class ReLU(Module):
    """y = max(0, x), elementwise. Shapes: x (...) -> y (...)."""

    def forward(self, x):
        """x (...) -> y (...)."""
        x = np.asarray(x)
        self._check_float(x)
        self.positive = x > 0
        return np.maximum(x, 0)                     # max(0, -inf) = 0; a NaN stays NaN

    def backward(self, dout):
        """The gradient at x. dout (...) -> dx (...), shaped like x.

        Derivation:
            dy/dx = 1 where x > 0 else 0 (the kink at 0 is given slope 0), so dx = dout * [x > 0].
        """
        ### BEGIN SOLUTION relu.backward
        return dout * self.positive
        ### END SOLUTION

    def __repr__(self):
        return "ReLU()"


class GELU(Module):
    """y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). Shapes: x (...) -> y (...)."""

    def forward(self, x):
        """x (...) -> y (...)."""
        x = np.asarray(x)
        self._check_float(x)                                    # the fast form calls it too
        self.x = x
        ### BEGIN SOLUTION gelu.forward
        u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x)       # 1. (...); x*x*x, not x**3 (a general pow: 10x slower)
        self.t = np.tanh(u)                                     # 2. t = tanh(u)
        return 0.5 * x * (1 + self.t)                           # 3. y = 0.5 x (1 + t)
        ### END SOLUTION

    def backward(self, dout):
        """The gradient at x. dout (...) -> dx (...), shaped like x.

        Derivation:
            Product rule on y = 0.5 x (1 + t), t = tanh(u), with tanh' = 1 - tanh^2:

                dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx,
                du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2),
                dx    = dout * dy/dx.
        """
        ### BEGIN SOLUTION gelu.backward
        du_dx = SQRT_2_OVER_PI * (1 + 3 * GELU_CUBIC * self.x * self.x)              # undo 1. (...)
        dy_dx = 0.5 * (1 + self.t) + 0.5 * self.x * (1 - self.t ** 2) * du_dx       # undo 3 and 2. (...)
        return dout * dy_dx
        ### END SOLUTION

    def __repr__(self):
        return "GELU()"            # the fast form too: errors name the layer, not the tier


class SiLU(Module):
    """y = x * sigmoid(x), elementwise. Shapes: x (...) -> y (...).

    The sigmoid is computed as (1 + tanh(x / 2)) / 2, the same function without exp(-x), which
    overflows for x < -709 in float64 (and -88 in float32).
    """

    def forward(self, x):
        """x (...) -> y (...)."""
        x = np.asarray(x)
        self._check_float(x)
        self.x = x
        ### BEGIN SOLUTION silu.forward
        self.sigmoid = 0.5 * (1 + np.tanh(0.5 * x))             # 1. s = sigmoid(x) (...)
        return x * self.sigmoid                                 # 2. y = x s (...)
        ### END SOLUTION

    def backward(self, dout):
        """The gradient at x. dout (...) -> dx (...), shaped like x.

        Derivation:
            Product rule on y = x s, s = sigmoid(x), with s' = s (1 - s):

                dy/dx = s + x s (1 - s) = s (1 + x (1 - s)),
                dx    = dout * dy/dx.
        """
        ### BEGIN SOLUTION silu.backward
        dy_dx = self.sigmoid * (1 + self.x * (1 - self.sigmoid))               # undo 2 and 1. (...)
        ### END SOLUTION
        return dout * dy_dx

    def __repr__(self):
        return "SiLU()"
