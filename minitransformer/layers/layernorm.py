"""Layer normalisation over the last axis (lecture notes 2025 §1.3; Ba et al. 2016).

The notes describe it as "subtract the mean and divide by the standard
deviation over the vector" and leave the rest aside (their footnote 9). The
rest is: the variance is the biased one (divide by C, not C - 1), eps sits
inside the square root, and a learned scale gamma and shift beta follow.

Left out: RMSNorm (no mean subtraction, no beta) and a LayerNorm without
learned parameters; the statistics are always over the last axis only.
"""

import numpy as np

from ..core.module import Module
from ..core.parameter import Parameter
from ..core.random import check_float_dtype


class LayerNorm(Module):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta, statistics over the last axis.

    Args:
        d: size of the normalised (last) axis, C.
        eps: added to the variance inside the square root.
        dtype: float64 (default) or float32.
        rng: accepted and unused (gamma and beta start at 1 and 0), so that every
            layer with parameters takes the same (dtype, rng) keywords.
    Parameters:
        gamma (C,) initialised to 1; beta (C,) initialised to 0.
    """

    def __init__(self, d, eps=1e-5, dtype=np.float64, rng=None):
        dtype = check_float_dtype(dtype, f"LayerNorm({d})")
        self.d, self.eps = d, eps
        self.gamma = Parameter(np.ones(d, dtype=dtype))
        self.beta = Parameter(np.zeros(d, dtype=dtype))

    def forward(self, x):
        """x (..., C) -> y (..., C)."""
        x = np.asarray(x)
        self._check_features(x, self.d)
        ### BEGIN SOLUTION layernorm.forward
        mean = x.mean(axis=-1, keepdims=True)                 # 1. (..., 1)
        centered = x - mean                                   # 2. (..., C)
        var = (centered ** 2).mean(axis=-1, keepdims=True)    # 3. biased variance (..., 1)
        self.rstd = 1.0 / np.sqrt(var + self.eps)             # 4. 1 / sigma (..., 1)
        self.xhat = centered * self.rstd                      # 5. zero mean, unit variance (..., C)
        ### END SOLUTION
        return self.xhat * self.gamma.data + self.beta.data   # 6. y = xhat * gamma + beta (..., C)

    def backward(self, dout):
        """With g = dout * gamma and sigma = sqrt(var + eps) (the cached rstd = 1/sigma):

            dx     = (1/sigma) (g - mean(g) - xhat * mean(g * xhat))
            dgamma += sum over all leading axes of dout * xhat
            dbeta  += sum over all leading axes of dout

        Where dx comes from: xhat depends on x directly (g/sigma), through the
        mean (every entry shifts, -mean(g)/sigma) and through the variance
        (d sigma / dx_j = xhat_j / (C sigma), giving -xhat mean(g xhat)/sigma).

        Args:
            dout: (..., C).
        Returns:
            dx: (..., C).
        """
        self._require("xhat")
        self._check_dout(dout, self.xhat.shape)
        ### BEGIN SOLUTION layernorm.backward
        C = self.d
        self.gamma.grad += (dout * self.xhat).reshape(-1, C).sum(axis=0)   # undo 6: y = xhat * gamma + beta
        self.beta.grad += dout.reshape(-1, C).sum(axis=0)                   # (C,)
        g = dout * self.gamma.data                                          # dL/dxhat (..., C)
        dx = self.rstd * (g - g.mean(-1, keepdims=True) - self.xhat * (g * self.xhat).mean(-1, keepdims=True))
        return dx                                                           # undo 5-1 (..., C)
        ### END SOLUTION

    def __repr__(self):
        return f"LayerNorm({self.d})"
