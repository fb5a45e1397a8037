"""Linear, fast form: one 2-D product for any leading axes, the bias gradient through BLAS.

A (B, T, d_in) @ (d_in, d_out) product runs as B batched products; reshaped to
(B*T, d_in) it is one large 2-D product, the fastest form NumPy has. The bias
gradient, a sum over rows, runs as a product with a vector of ones (`sum_rows`),
faster than `np.sum(axis=0)` on the benchmark model's rows (`fast/reductions.py`).
The plain layer is `minitransformer/layers/linear.py`; tests/test_fast.py proves
this form equal to it.
"""

import numpy as np

from ..layers.linear import Linear
from .reductions import sum_rows


class FastLinear(Linear):
    """`Linear` as one 2-D product with a BLAS bias gradient. Same parameters, caches and results."""

    def forward(self, x):
        """x (..., d_in) -> y (..., d_out)."""
        x = np.asarray(x)
        self._check_features(x, self.d_in)
        self.x = x
        x2d = x.reshape(-1, self.d_in)                      # (N, d_in), N = product of leading axes
        y = x2d @ self.weight.data                          # (N, d_out)
        if self.bias is not None:
            y += self.bias.data
        return y.reshape(*x.shape[:-1], self.d_out)

    def backward(self, dout):
        """dout (..., d_out) -> dx (..., d_in); the derivation is in the plain layer's backward."""
        x2d = self.x.reshape(-1, self.d_in)                 # (N, d_in)
        dout2d = dout.reshape(-1, self.d_out)               # (N, d_out)
        self.weight.grad += x2d.T @ dout2d                  # forward was y = x @ W
        if self.bias is not None:
            self.bias.grad += sum_rows(dout2d)              # forward was y += b (sum over rows, via BLAS)
        dx = dout2d @ self.weight.data.T                    # (N, d_in)
        return dx.reshape(self.x.shape)


FAST_FORMS = {Linear: FastLinear}
