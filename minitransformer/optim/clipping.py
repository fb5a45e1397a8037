"""Global-norm gradient clipping (Pascanu et al. 2013; nanoGPT clips at 1.0).

All gradients are treated as one long vector g. If its length exceeds
max_norm, every gradient is scaled by the same factor so the length becomes
max_norm:

    ||g|| = sqrt(sum over parameters of sum(grad^2))
    g <- g * max_norm / (||g|| + 1e-6)     only when ||g|| > max_norm

The direction of the step is kept; only its size is capped, which protects
training from the rare batch with an exploding gradient.
"""

import math

import numpy as np


def global_grad_norm(params):
    """sqrt of the sum of squares of every gradient, as a Python float (the per-parameter sums are added in float64)."""
    return math.sqrt(sum(float(np.vdot(param.grad, param.grad)) for param in params))


def clip_grad_norm(params, max_norm):
    """Scale all gradients in place so their global norm is at most `max_norm`.

    Args:
        params: iterable of Parameters.
        max_norm: the largest allowed global norm (> 0).
    Returns:
        the global norm *before* clipping (worth logging: spikes show instability).
    """
    if max_norm <= 0:
        raise ValueError(f"clip_grad_norm expected max_norm > 0, got {max_norm}")
    params = list(params)
    norm = global_grad_norm(params)
    if norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for param in params:
            param.grad *= scale
    return norm
