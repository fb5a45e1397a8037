"""Layer normalisation over the last axis (lecture notes 2025 §1.3; Ba et al. 2016).

The notes describe it as "subtract the mean and divide by the standard
deviation over the vector" and leave the rest aside (their footnote 9). The
rest is: the variance is the biased one (divide by C, not C - 1), eps sits
inside the square root, and a learned scale gamma and shift beta follow.

RMSNorm (no mean subtraction, no beta) is its own layer, `rmsnorm.py`. Left out: a LayerNorm
without learned parameters; the statistics are always over the last axis only.
"""

import numpy as np

from ..core.checks import check_float_dtype
from ..core.module import Module
from ..core.parameter import Parameter


class LayerNorm(Module):
    r"""y = gamma * (x - mean) / sqrt(var + eps) + beta, statistics over the last axis.

    For each row $x \in \mathbb{R}^C$ (every position of every batch entry):

    $$
    \mu = \frac{1}{C} \sum_{j=1}^{C} x_j, \qquad
    \sigma^2 = \frac{1}{C} \sum_{j=1}^{C} (x_j - \mu)^2, \qquad
    y = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta
    $$

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
        r"""x (..., C) -> y (..., C), in the six numbered steps of the code:

        $$
        \begin{aligned}
        &\text{1. } \mu = \operatorname{mean}(x) && (\ldots, 1) \\
        &\text{2. } c = x - \mu && (\ldots, C) \\
        &\text{3. } \sigma^2 = \operatorname{mean}(c^2) \quad \text{(biased: divided by } C \text{)} && (\ldots, 1) \\
        &\text{4. } \mathrm{rstd} = 1 / \sqrt{\sigma^2 + \epsilon} && (\ldots, 1) \\
        &\text{5. } \hat{x} = c \cdot \mathrm{rstd} \quad \text{(zero mean, unit variance)} && (\ldots, C) \\
        &\text{6. } y = \gamma \odot \hat{x} + \beta && (\ldots, C)
        \end{aligned}
        $$
        """
        x = np.asarray(x)
        self._check_features(x, self.d)
        ### BEGIN SOLUTION layernorm.forward
        mean = x.mean(axis=-1, keepdims=True)                 # 1. (..., 1)
        centered = x - mean                                   # 2. (..., C)
        var = (centered ** 2).mean(axis=-1, keepdims=True)    # 3. biased variance (..., 1)
        self.rstd = 1.0 / np.sqrt(var + self.eps)             # 4. rstd = 1 / sqrt(var + eps) (..., 1)
        self.xhat = centered * self.rstd                      # 5. zero mean, unit variance (..., C)
        ### END SOLUTION
        return self.xhat * self.gamma.data + self.beta.data   # 6. y = xhat * gamma + beta (..., C)

    def backward(self, dout):
        r"""The gradient at x, and gamma's and beta's gradients added to their `.grad`.

        Derivation:
            Undo steps 6 to 1. With $g = \mathrm{dout} \odot \gamma$, the gradient that reaches $\hat{x}$:

            $$
            \begin{aligned}
            \text{6. } y = \gamma \odot \hat{x} + \beta \;&\Rightarrow\;
                d\gamma \mathrel{+}= \textstyle\sum_{\text{rows}} \mathrm{dout} \odot \hat{x}, \quad
                d\beta \mathrel{+}= \textstyle\sum_{\text{rows}} \mathrm{dout} \\
            \text{5 to 1. } \hat{x} = (x - \mu) \, \mathrm{rstd} \;&\Rightarrow\;
                dx = \mathrm{rstd} \Big( g - \operatorname{mean}(g) - \hat{x} \odot \operatorname{mean}(g \odot \hat{x}) \Big)
            \end{aligned}
            $$

            The sums run over all leading axes, the means over the last one. Where $dx$ comes from: $x$ reaches
            $\hat{x}$ three ways, one term each: directly ($g \, \mathrm{rstd}$); through the mean, which shifts
            every entry ($-\operatorname{mean}(g) \, \mathrm{rstd}$); and through the variance, since
            $\partial \mathrm{rstd} / \partial x_j = -\hat{x}_j \, \mathrm{rstd}^2 / C$
            ($-\hat{x} \operatorname{mean}(g \hat{x}) \, \mathrm{rstd}$).

        Args:
            dout: (..., C).
        Returns:
            dx: (..., C).
        """
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
