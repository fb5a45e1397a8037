"""Optimizers (SGD with momentum, Adam, AdamW), parameter groups and gradient clipping."""

from .adam import Adam, AdamW
from .clipping import clip_factor, clip_grad_norm, clip_gradients, global_grad_norm
from .optimizer import Optimizer, parameter_groups, part_slice
from .sgd import SGD
