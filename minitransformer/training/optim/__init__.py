"""Optimizers (SGD with momentum, Adam, AdamW), parameter groups and gradient clipping; fast.py: their speed form."""

from .adam import Adam, AdamW
from .clipping import clip_factor, clip_grad_norm, factor_for_norm, global_grad_norm
from .optimizer import Optimizer, parameter_groups
from .sgd import SGD
