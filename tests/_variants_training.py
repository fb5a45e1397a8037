"""A minimal Adam loop for the variant tests that need a briefly trained model.

The package's optimizers are written on another branch; this keeps the tests
self-contained. Adam (Kingma & Ba 2015) with bias correction, no weight decay.
"""

import numpy as np

from minitransformer import CrossEntropyLoss


class Adam:
    def __init__(self, params, lr=1e-2, betas=(0.9, 0.99), eps=1e-8):
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.m = [np.zeros_like(p.data) for p in self.params]
        self.v = [np.zeros_like(p.data) for p in self.params]
        self.t = 0

    def step(self):
        self.t += 1
        beta1, beta2 = self.betas
        for param, m, v in zip(self.params, self.m, self.v):
            m[...] = beta1 * m + (1 - beta1) * param.grad
            v[...] = beta2 * v + (1 - beta2) * param.grad ** 2
            m_hat, v_hat = m / (1 - beta1 ** self.t), v / (1 - beta2 ** self.t)
            param.data -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def lm_loss(model, ids, backward=False, **forward_kwargs):
    """Next-token loss of `model` on ids (B, T + 1); with backward=True also fills the gradients."""
    loss_fn = CrossEntropyLoss()
    loss = loss_fn.forward(model.forward(ids[:, :-1], **forward_kwargs), ids[:, 1:])
    if backward:
        model.backward(loss_fn.backward())
    return float(loss)


def train(model, batches, lr=1e-2, params=None):
    """One Adam step per batch (each int (B, T + 1)); returns the list of losses."""
    optimizer = Adam(model.parameters() if params is None else params, lr=lr)
    losses = []
    for ids in batches:
        model.zero_grad()
        losses.append(lm_loss(model, ids, backward=True))
        optimizer.step()
    return losses
