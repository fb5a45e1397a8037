"""Root-mean-square normalisation over the last axis (Zhang & Sennrich 2019; Llama, Touvron et al. 2023).

    y = gamma * x / sqrt(mean(x^2) + eps)

LayerNorm (`layernorm.py`) with two things removed: the mean is not subtracted
(the vector is only rescaled, never re-centred) and there is no shift beta.
Zhang & Sennrich found the re-centring contributes little while costing a
reduction; every Llama-style decoder uses this form. eps sits inside the
square root, as in PyTorch's `torch.nn.functional.rms_norm` (tests/test_rmsnorm.py
pins it there).

No fast form: on the benchmark's Llama-style model (B 12, T 64, C 128, float32) its nine
layers' forward and backward take a small share of a training step, less than a fast form
could save above the noise (benchmarks/README.md, "The modern decoder").

Left out: partial RMSNorm (statistics over a fraction of the features) and a
learned shift. It lives in layers/ rather than variants/ because the block
(`block.py`, `norm_layer="rmsnorm"`) builds it, and layers may not import variants.
"""

import numpy as np

from ..core.checks import check_float_dtype
from ..core.module import Module
from ..core.parameter import Parameter


class RMSNorm(Module):
    """y = gamma * x / sqrt(mean(x^2) + eps), the mean over the last axis.

    Args:
        d: size of the normalised (last) axis, C.
        eps: added to the mean square inside the square root.
        dtype: float64 (default) or float32.
        rng: accepted and unused (gamma starts at 1), as for LayerNorm.
    Parameters:
        gamma (C,) initialised to 1.
    """

    def __init__(self, d, eps=1e-5, dtype=np.float64, rng=None):
        dtype = check_float_dtype(dtype, f"RMSNorm({d})")
        self.d, self.eps = d, eps
        self.gamma = Parameter(np.ones(d, dtype=dtype))

    def forward(self, x):
        """x (..., C) -> y (..., C)."""
        x = np.asarray(x)
        self._check_features(x, self.d)
        mean_square = (x ** 2).mean(axis=-1, keepdims=True)    # 1. (..., 1)
        self.rstd = 1.0 / np.sqrt(mean_square + self.eps)       # 2. 1 / rms (..., 1)
        self.xhat = x * self.rstd                               # 3. unit root mean square (..., C)
        return self.xhat * self.gamma.data                      # 4. y = xhat * gamma (..., C)

    def backward(self, dout):
        """The gradient at x, and gamma's gradient added to its `.grad`.

        Derivation:
            With g = dout * gamma and rstd = 1 / sqrt(mean(x^2) + eps), the cached step 2:

                dx     = rstd (g - xhat * mean(g * xhat))
                dgamma += sum over all leading axes of dout * xhat

            Where dx comes from: xhat_i = x_i rstd depends on x_i directly (g_i rstd) and through rstd,
            with d rstd/dx_j = -x_j rstd^3 / C = -xhat_j rstd^2 / C, giving
            sum_i g_i x_i * (-xhat_j rstd^2 / C) = -xhat_j mean(g xhat) rstd. LayerNorm's dx has one
            more term, -mean(g) rstd, from the mean it subtracts; RMSNorm subtracts none.

        Args:
            dout: (..., C).
        Returns:
            dx: (..., C).
        """
        ### BEGIN SOLUTION rmsnorm.backward
        leading_axes = tuple(range(dout.ndim - 1))
        self.gamma.grad += np.sum(dout * self.xhat, axis=leading_axes)                # undo 4: (C,)
        dxhat = dout * self.gamma.data                                                 # g (..., C)
        projection = np.mean(dxhat * self.xhat, axis=-1, keepdims=True)                # mean(g xhat) (..., 1)
        dx = self.rstd * (dxhat - self.xhat * projection)                              # undo 3-1 (..., C)
        return dx
        ### END SOLUTION

    def __repr__(self):
        return f"RMSNorm({self.d})"
