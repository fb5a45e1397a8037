"""Adam and AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019; lecture notes 2025 §1.6).

Adam keeps running averages of the gradient and of its square,

    m <- beta1 m + (1 - beta1) g               first moment
    v <- beta2 v + (1 - beta2) g^2             second moment (elementwise square)
    m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)      bias correction (both start at 0)
    p <- p - lr m_hat / (sqrt(v_hat) + eps)

so each coordinate's step is about lr in size whatever the scale of its
gradient: the notes' "SGD with fancy learning rate".

Weight decay, two ways:
* Adam with L2 (`Adam(weight_decay=lambda)`): g <- g + lambda p before the
  moments, so the decay is divided by sqrt(v_hat) like the gradient and
  parameters with large gradients are barely decayed.
* AdamW (decoupled): p <- p - lr lambda p, applied beside the Adam step and
  untouched by the moments, so every decayed weight shrinks at the same rate.
  This is the "modification" the notes mention and what nanoGPT trains with.

The arithmetic is done in place in the parameters' dtype; every scalar is a
Python float so a float32 model stays float32.
"""

import math

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

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, flatten=True):
        beta1, beta2 = betas
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"{type(self).__name__} expected betas in [0, 1), got {betas}")
        super().__init__(params, lr, weight_decay, flatten)
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)

    def _update(self, data, grad, state, weight_decay, grad_scale):
        if weight_decay and self.decoupled:
            data *= 1.0 - self.lr * weight_decay                       # AdamW: p <- p - lr lambda p
        elif weight_decay:
            grad = grad * grad_scale + weight_decay * data             # Adam + L2: g <- s g + lambda p
            grad_scale = 1.0
        m, v = state["m"], state["v"]
        # with g the scaled gradient s * grad (s = grad_scale, e.g. clipping's factor), s goes into the constants:
        scratch = np.multiply(grad, (1.0 - self.beta1) * grad_scale)   # the one temporary of the update
        m *= self.beta1                                                # m <- beta1 m + (1 - beta1) g
        m += scratch
        np.multiply(grad, grad, out=scratch)
        scratch *= (1.0 - self.beta2) * grad_scale * grad_scale
        v *= self.beta2                                                # v <- beta2 v + (1 - beta2) g^2
        v += scratch
        t = self.step_count
        bias1, bias2 = 1.0 - self.beta1 ** t, 1.0 - self.beta2 ** t
        # p -= lr m_hat / (sqrt(v_hat) + eps) with m_hat = m / bias1 and sqrt(v_hat) = sqrt(v) / sqrt(bias2);
        # multiplied above and below by sqrt(bias2), both corrections become scalars:
        # p -= (lr sqrt(bias2) / bias1) m / (sqrt(v) + eps sqrt(bias2)).
        step = np.sqrt(v, out=scratch)
        step += self.eps * math.sqrt(bias2)
        np.divide(m, step, out=step)
        step *= self.lr * math.sqrt(bias2) / bias1
        data -= step


class AdamW(Adam):
    """Adam with decoupled weight decay: p <- p - lr lambda p, then the Adam step.

    Same arguments as `Adam`; the default weight_decay is 0.01 as in PyTorch.
    """

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, flatten=True):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, flatten=flatten)
