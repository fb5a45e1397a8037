"""GELU, fast form: chains of in-place passes, one cache-sized block of rows at a time.

NumPy runs one pass over memory per operation; the plain GELU's backward writes
about nine temporaries of the activation's size, (B*T, 4C) = (768, 512) float32 on
the benchmark model. Here the forward keeps the gate 0.5 (1 + t) for the backward
pass, both passes work in place on one buffer, and `row_blocks.by_row_blocks` runs
them on blocks small enough to stay in the L2 cache (measured in 0.2: benchmarks/README.md,
"Where the time outside the products went"). The plain layer and its derivation are in
`minitransformer/layers/activations.py`; tests/test_fast.py proves this form equal to it.
"""

import numpy as np

from ..layers.activations import GELU, GELU_CUBIC, SQRT_2_OVER_PI
from .row_blocks import by_row_blocks


class FastGELU(GELU):
    """y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). Shapes: x (...) -> y (...).

    Forward and backward are chains of in-place passes, run one block of rows
    at a time so that a block stays in the CPU cache for the whole chain
    (`fast/row_blocks.py`); `_forward_rows` and `_backward_rows` are the
    chains, written for any block of rows. Caches `gate` instead of t.
    """

    def forward(self, x):
        """x (...) -> y (...).

        Plain form: t = tanh(SQRT_2_OVER_PI * (x + GELU_CUBIC * x**3)); y = 0.5 * x * (1 + t).
        The gate 0.5 (1 + t) is kept for the backward pass, and y = x * gate. The gate is computed as
        the logistic sigmoid of 2u, the same function: 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), since
        tanh u = (1 - exp(-2u)) / (1 + exp(-2u)). NumPy's float32 exp is cheaper than its tanh, so the
        forward pass takes less time (benchmarks/README.md, "What the code's docstrings point to").
        Where -2u exceeds the dtype's range (x below about -12 in float32), exp gives inf and the gate
        1 / inf = 0, as tanh's 0.5 (1 - 1) does.
        """
        x = np.asarray(x)
        self._check_float(x)                        # the plain layer's dtype check
        self.x = x
        y, self.gate = by_row_blocks(self._forward_rows, [x], n_outputs=2)
        return y

    def backward(self, dout):
        """Product rule on y = 0.5 x (1 + t), t = tanh(u):
            dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx,
            du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
        With gate = 0.5 (1 + t), 1 - t^2 = 4 gate (1 - gate), so
            dy/dx = gate (1 + 2 x (1 - gate) du/dx),
        and dx = dout * dy/dx (dout and dx (...) shaped like x), which `_backward_rows` computes in place
        on each block of rows.
        """
        (dx,) = by_row_blocks(self._backward_rows, [self.x, self.gate, np.asarray(dout)])
        return dx

    @staticmethod
    def _forward_rows(x, y, gate):
        """The forward pass on a block of rows x (rows, n): writes y and gate (rows, n)."""
        np.multiply(x, x, out=gate)                 # -2u = x (-2 sqrt(2/pi) - 2 sqrt(2/pi) 0.044715 x^2), in place
        gate *= -2.0 * SQRT_2_OVER_PI * GELU_CUBIC
        gate += -2.0 * SQRT_2_OVER_PI
        gate *= x
        with np.errstate(over="ignore", under="ignore"):   # exp(-2u): inf for x below about -12 (gate 0), 0 far above
            np.exp(gate, out=gate)
        gate += 1.0
        np.reciprocal(gate, out=gate)               # gate = 1 / (1 + exp(-2u)) = 0.5 (1 + tanh u)
        np.multiply(x, gate, out=y)                 # y = x * gate

    @staticmethod
    def _backward_rows(x, gate, dout, dx):
        """dx = dout * dy/dx on a block of rows, with dy/dx = gate (1 + 2 x (1 - gate) du/dx) and
        du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2) (derived in `backward`).

        Args:
            x, gate, dout: (rows, n) blocks of the input, the cached gate 0.5 (1 + t) and the upstream gradient.
            dx: (rows, n) output block, written in place.
        """
        np.multiply(x, x, out=dx)                   # 2 x du/dx = x (2 sqrt(2/pi) + 6 sqrt(2/pi) 0.044715 x^2)
        dx *= 6.0 * SQRT_2_OVER_PI * GELU_CUBIC
        dx += 2.0 * SQRT_2_OVER_PI
        dx *= x
        dx *= 1.0 - gate                            # (1 - gate) is one temporary
        dx += 1.0
        dx *= gate                                  # dy/dx = gate (1 + 2 x (1 - gate) du/dx)
        dx *= dout


FAST_FORMS = {GELU: FastGELU}
