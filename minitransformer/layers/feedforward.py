"""Position-wise feed-forward sublayer (lecture notes 2025 §1, footnote 4; Vaswani et al. §3.3).

    out = act(x W_1 + b_1) W_2 + b_2

applied to every position independently, d_model -> d_ff -> d_model (the notes'
W_1 is 512 x 2048, W_2 2048 x 512). The notes' opening formula wraps the
whole thing in a second max(0, .); the paper, and this layer, do not: the
output is added to the residual stream unclipped.
"""

import numpy as np

from ..core.module import Module
from ..core.random import as_generator
from .activations import GELU, ReLU
from .linear import Linear

ACTIVATIONS = {"relu": ReLU, "gelu": GELU}


def make_activation(name, where):
    if name not in ACTIVATIONS:
        raise ValueError(f"{where} expected activation in {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]()


class FeedForward(Module):
    """Two linear maps with an activation between them.

    Args:
        d_model: C.
        d_ff: hidden width.
        activation: "relu" (the paper) or "gelu" (GPT-2).
        bias: whether fc1 and fc2 add a bias (default True).
        dtype, rng: as everywhere.
        init_std: standard deviation of fc1's normal initial weights (default
            `Linear`'s, 1/sqrt(width in)).
        out_std: that of fc2 (default init_std), which writes into the residual
            stream in a Transformer block.
    Children:
        fc1 Linear(C -> d_ff), act, fc2 Linear(d_ff -> C).
    """

    def __init__(self, d_model, d_ff, activation="relu", dtype=np.float64, rng=None, init_std=None, out_std=None,
                 bias=True):
        rng = as_generator(rng)
        self.d_model, self.d_ff = d_model, d_ff
        self.fc1 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng, init_std=init_std)
        self.act = make_activation(activation, "FeedForward")
        self.fc2 = Linear(d_ff, d_model, bias=bias, dtype=dtype, rng=rng,
                          init_std=init_std if out_std is None else out_std)

    def forward(self, x):
        """x (..., C) -> (..., C)."""
        return self.fc2(self.act(self.fc1(x)))

    def backward(self, dout):
        """The gradient at x, and the two linear maps' gradients. dout (..., C) -> dx (..., C).

        Derivation:
            Chain rule through fc2, the activation and fc1, in that order.
        """
        ### BEGIN SOLUTION feedforward.backward
        return self.fc1.backward(self.act.backward(self.fc2.backward(dout)))
        ### END SOLUTION

    def __repr__(self):
        return f"FeedForward({self.d_model} -> {self.d_ff} -> {self.d_model})"
