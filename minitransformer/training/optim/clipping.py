"""Global-norm gradient clipping (Pascanu et al. 2013; nanoGPT clips at 1.0).

All gradients are treated as one long vector g. If its length exceeds
max_norm, every gradient is scaled by the same factor so the length becomes
max_norm:

    ||g|| = sqrt(sum over parameters of sum(grad^2))
    g <- g * max_norm / (||g|| + 1e-6)     only when ||g|| > max_norm

The direction of the step is kept; only its size is capped, which protects
training from the rare batch with an exploding gradient.

`clip_factor` only computes the norm and the factor: the fast optimizer
(fast.py) keeps the factor and folds it into its update's constants, so the
gradients are never rewritten (one pass over them saved); `factor_for_norm`
turns a norm added up from several ranks' parts into the same factor
(training/distributed.py).
"""

import math

import numpy as np


def global_grad_norm(params):
    """sqrt of the sum of squares of every gradient, as a Python float (the per-parameter sums are added in float64)."""
    return _norm([param.grad for param in params])


def _norm(grads):
    return math.sqrt(sum(float(np.vdot(grad, grad)) for grad in grads))


def clip_grad_norm(params, max_norm):
    """Scale all gradients in place so their global norm is at most `max_norm`.

    Args:
        params: iterable of Parameters.
        max_norm: the largest allowed global norm (> 0).
    Returns:
        the global norm *before* clipping (worth logging: spikes show instability).
    """
    grads = [param.grad for param in params]
    norm, scale = clip_factor(grads, max_norm)
    if scale != 1.0:
        for grad in grads:
            grad *= scale                                 # g <- g max_norm / (||g|| + 1e-6)
    return norm


def clip_factor(grads, max_norm):
    """(norm, factor) for a list of gradient arrays: factor = max_norm / (norm + 1e-6) if norm > max_norm, else 1.0."""
    norm = _norm(grads)
    return norm, factor_for_norm(norm, max_norm)


def factor_for_norm(norm, max_norm):
    """The clipping factor for a global norm already computed (e.g. from the parts of a sum of squares)."""
    if max_norm <= 0:
        raise ValueError(f"clip_grad_norm expected max_norm > 0, got {max_norm}")
    return max_norm / (norm + 1e-6) if norm > max_norm else 1.0
