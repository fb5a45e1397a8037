"""Adam and AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019; lecture notes 2025 §1.6).

Adam keeps running averages of the gradient and of its square,

    m <- beta1 m + (1 - beta1) g               first moment
    v <- beta2 v + (1 - beta2) g^2             second moment (elementwise square)
    m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)      bias correction (both start at 0)
    w <- w - lr m_hat / (sqrt(v_hat) + eps)

so each coordinate's step is about lr in size whatever the scale of its
gradient: the notes' "SGD with fancy learning rate".

Weight decay, two ways:
* Adam with L2 (`Adam(weight_decay=lambda)`): g <- g + lambda w before the
  moments, so the decay is divided by sqrt(v_hat) like the gradient and
  parameters with large gradients are barely decayed.
* AdamW (decoupled): w <- w - lr lambda w, applied beside the Adam step and
  untouched by the moments, so every decayed weight shrinks at the same rate.
  This is the "modification" the notes mention and what nanoGPT trains with.

Each line of `_update` is one line of the rule above, per parameter. The
scalars are Python floats, so a float32 model stays float32. The flat-buffer
form the trainer runs (fast.py) computes the same numbers to float rounding.
"""

import numpy as np

from .optimizer import Optimizer


class Adam(Optimizer):
    """Adam; `weight_decay` is L2 added to the gradient (coupled).

    Args:
        params: Parameters or groups (see `Optimizer`).
        lr: learning rate.  betas: (beta1, beta2).  eps: added to sqrt(v_hat).
        weight_decay: lambda.
    """

    state_names = ("m", "v")
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        beta1, beta2 = betas
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"{type(self).__name__} expected betas in [0, 1), got {betas}")
        super().__init__(params, lr, weight_decay)
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)

    def _update(self, param, state, weight_decay):
        w, g, t = param.data, param.grad, self.step_count
        if weight_decay and not self.decoupled:
            g = g + weight_decay * w                                       # Adam + L2: g <- g + lambda w
        state["m"] = self.beta1 * state["m"] + (1 - self.beta1) * g        # m <- beta1 m + (1 - beta1) g
        state["v"] = self.beta2 * state["v"] + (1 - self.beta2) * g ** 2   # v <- beta2 v + (1 - beta2) g^2
        m_hat = state["m"] / (1 - self.beta1 ** t)                         # bias corrections: m and v start at 0
        v_hat = state["v"] / (1 - self.beta2 ** t)
        decay = weight_decay * w if self.decoupled else 0.0                # AdamW: lambda w, beside the moments
        w -= self.lr * (m_hat / (np.sqrt(v_hat) + self.eps) + decay)       # w <- w - lr (m_hat / (sqrt(v_hat) + eps) + lambda w)


class AdamW(Adam):
    """Adam with decoupled weight decay: w <- w - lr (m_hat / (sqrt(v_hat) + eps) + lambda w).

    Same arguments as `Adam`; the default weight_decay is 0.01 as in PyTorch.
    """

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
