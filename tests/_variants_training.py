"""A minimal Adam loop for the variant tests that need a briefly trained model.

The optimizer is the package's Adam (`minitransformer.training.optim`), with bias
correction and no weight decay.
"""

from minitransformer import CrossEntropyLoss
from minitransformer.training import optim


def Adam(params, lr=1e-2, betas=(0.9, 0.99), eps=1e-8):
    """The package's Adam with this helper's defaults (no weight decay)."""
    return optim.Adam(list(params), lr=lr, betas=betas, eps=eps)


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
