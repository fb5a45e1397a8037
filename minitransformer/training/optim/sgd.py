"""Stochastic gradient descent with momentum (lecture notes 2025 §1.6 names SGD as Adam's starting point).

    v <- mu v + (g + lambda p)        (velocity; lambda p is L2 weight decay, coupled into g)
    p <- p - lr v

This is the form PyTorch uses (the learning rate outside the velocity), so a
changing learning rate rescales the whole step at once. mu = 0 is plain SGD.
Left out: Nesterov momentum, dampening.
"""

from .optimizer import Optimizer


class SGD(Optimizer):
    """p <- p - lr v,  v <- momentum v + g (+ weight_decay p).

    Args:
        params: Parameters or groups (see `Optimizer`).
        lr: learning rate.  momentum: mu in [0, 1).  weight_decay: lambda.
    """

    state_names = ("velocity",)

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0):
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"SGD expected 0 <= momentum < 1, got {momentum}")
        super().__init__(params, lr, weight_decay)
        self.momentum = float(momentum)

    def _update(self, param, state, weight_decay):
        g = param.grad + weight_decay * param.data if weight_decay else param.grad   # L2: g <- g + lambda p
        state["velocity"] = self.momentum * state["velocity"] + g                      # v <- mu v + g
        param.data -= self.lr * state["velocity"]                                       # p <- p - lr v
