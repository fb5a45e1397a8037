"""LayerNorm, fast form: row means as matrix-vector products, the backward folded into two of them.

`np.mean` along a short last axis (C = 128) is a reduction NumPy runs without BLAS;
the same mean as a product with a vector of 1/C runs in BLAS, faster on the benchmark
model's (768, 128) rows (benchmarks/README.md, "What the code's docstrings point to"). The backward pass takes both of its
row means, mean(g) and mean(g xhat) with g = dout * gamma, as products of dout and
dout * xhat with gamma / C, and reuses one buffer with `out=`. The plain layer and its
derivation are in `minitransformer/layers/layernorm.py`; tests/test_fast.py proves
this form equal to it.
"""

import numpy as np

from ..layers.layernorm import LayerNorm
from .reductions import sum_rows


class FastLayerNorm(LayerNorm):
    """`LayerNorm` with BLAS row means and one reused buffer. Same parameters, caches and results."""

    def forward(self, x):
        """x (..., C) -> y (..., C)."""
        x = np.asarray(x)
        self._check_features(x, self.d)
        x2d = x.reshape(-1, self.d)                           # (N, C)
        averager = np.full(self.d, 1.0 / self.d, dtype=x.dtype)   # row means as matrix-vector products:
        mean = (x2d @ averager)[:, None]                      # 1. (N, 1)  BLAS is ~4x faster than .mean(-1)
        centered = x2d - mean                                 # 2. (N, C)
        var = (np.square(centered) @ averager)[:, None]       # 3. biased variance (N, 1)
        rstd = 1.0 / np.sqrt(var + self.eps)                  # 4. (N, 1)
        centered *= rstd                                      # 5. in place: xhat, zero mean, unit variance
        self.rstd = rstd.reshape(*x.shape[:-1], 1)            # (..., 1)
        self.xhat = centered.reshape(x.shape)
        out = self.xhat * self.gamma.data                     # 6. y = xhat * gamma + beta
        out += self.beta.data
        return out

    def backward(self, dout):
        """dout (..., C) -> dx (..., C); the derivation is in the plain layer's backward."""
        C = self.d
        dout2d = dout.reshape(-1, C)                          # (N, C)
        xhat2d = self.xhat.reshape(-1, C)
        dout_xhat = dout2d * xhat2d
        self.gamma.grad += sum_rows(dout_xhat)                # undo 6: y = xhat*gamma + beta
        self.beta.grad += sum_rows(dout2d)
        g = dout2d * self.gamma.data                          # dL/dxhat
        gamma_mean = self.gamma.data / C                      # mean(g * a) over a row = (dout * a) @ (gamma / C)
        mean_g_xhat = (dout_xhat @ gamma_mean)[:, None]       # undo 3-4: the variance term (N, 1)
        mean_g = (dout2d @ gamma_mean)[:, None]               # undo 1-2: the mean term (N, 1)
        dx = g
        dx -= np.multiply(xhat2d, mean_g_xhat, out=dout_xhat)  # reusing the buffer
        dx -= mean_g
        dx *= self.rstd.reshape(-1, 1)                        # dx = (g - mean(g) - xhat mean(g xhat)) / sigma
        return dx.reshape(self.xhat.shape)


FAST_FORMS = {LayerNorm: FastLayerNorm}
