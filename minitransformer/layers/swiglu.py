"""The gated feed-forward sublayer of Llama-style decoders (Shazeer 2020, "GLU Variants Improve Transformer").

    out = (silu(x W_1) * (x W_3)) W_2

Where the 2017 feed-forward (`feedforward.py`) computes act(x W_1) W_2, SwiGLU
computes two projections of x to the hidden width: one goes through SiLU and
acts as a gate, multiplying the other elementwise. Three matrices instead of
two, so at equal parameter count the hidden width is 2/3 of the usual 4 C
(Llama uses d_ff = 8 C / 3, rounded).

No biases by default (Llama has none); `bias=True` gives each of the three
linear maps one. It lives in layers/ rather than variants/ because the block
(`block.py`, `activation="swiglu"`) builds it, and layers may not import variants.

Left out: the other GLU variants of Shazeer's paper (GEGLU, ReGLU, bilinear),
and fusing W_1 and W_3 into one (C, 2 d_ff) product.
"""

import numpy as np

from ..core.module import Module
from ..core.random import as_generator
from .activations import SiLU
from .linear import Linear


class SwiGLU(Module):
    """out = (silu(x W_1) * (x W_3)) W_2, applied to every position on its own.

    Args:
        d_model: C.
        d_ff: hidden width of the gate and of the value.
        bias: whether the three linear maps add a bias (default False, as Llama).
        dtype, rng: as everywhere.
        init_std: standard deviation of W_1's and W_3's normal initial weights (default
            `Linear`'s, 1/sqrt(C)).
        out_std: that of W_2 (default init_std), which writes into the residual stream.
    Children:
        w1 Linear(C -> d_ff) (the gate), w3 Linear(C -> d_ff) (the value), act SiLU,
        w2 Linear(d_ff -> C); built in the order w1, w3, w2.
    """

    def __init__(self, d_model, d_ff, bias=False, dtype=np.float64, rng=None, init_std=None, out_std=None):
        rng = as_generator(rng)
        self.d_model, self.d_ff = d_model, d_ff
        self.w1 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng, init_std=init_std)
        self.w3 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng, init_std=init_std)
        self.act = SiLU()
        self.w2 = Linear(d_ff, d_model, bias=bias, dtype=dtype, rng=rng,
                         init_std=init_std if out_std is None else out_std)

    def forward(self, x):
        """x (..., C) -> out (..., C)."""
        self.gate = self.act(self.w1(x))                # 1. silu(x W_1) (..., d_ff)
        self.value = self.w3(x)                         # 2. x W_3 (..., d_ff)
        hidden = self.gate * self.value                 # 3. the gated hidden layer (..., d_ff)
        return self.w2(hidden)                          # 4. out = hidden W_2 (..., C)

    def backward(self, dout):
        """The gradient at x, and the three linear maps' gradients.

        Derivation:
            With dh = dL/dhidden = dout W_2^T (from W_2's backward), a = x W_1, g = silu(a), v = x W_3:

                dv = dh * g                  (hidden = g * v, product rule)
                dg = dh * v
                da = dg * silu'(a)           (SiLU's backward)
                dx = da W_1^T + dv W_3^T     (x feeds both projections: the two paths add)

        Args:
            dout: (..., C).
        Returns:
            dx: (..., C).
        """
        ### BEGIN SOLUTION swiglu.backward
        dhidden = self.w2.backward(dout)                # undo 4 (..., d_ff)
        dvalue = dhidden * self.gate                    # undo 3, the value's share
        dgate = dhidden * self.value                    # undo 3, the gate's share
        dx_through_gate = self.w1.backward(self.act.backward(dgate))    # undo 1 (..., C)
        dx_through_value = self.w3.backward(dvalue)                     # undo 2 (..., C)
        return dx_through_gate + dx_through_value
        ### END SOLUTION

    def __repr__(self):
        return f"SwiGLU({self.d_model} -> {self.d_ff} -> {self.d_model})"
