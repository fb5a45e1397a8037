"""What a gradient-check case is, and what every catalogue builds its cases with.

A case is a row name, a label and a `build(rng)` that returns the module (in float64), its forward
inputs, and optionally a custom forward callable; `python -m minitransformer gradcheck` and the test
suite run the very same cases (`all_cases()` in this package's __init__).
"""

from collections.abc import Callable
from dataclasses import dataclass

from ...core.module import Module
from ...layers.loss import CrossEntropyLoss


@dataclass
class GradcheckCase:
    layer: str                      # row name in the table, e.g. "LayerNorm"
    label: str                      # what distinguishes this case, e.g. "x (2, 3, 6)"
    build: Callable                 # rng -> (module, inputs, forward or None)

    @property
    def id(self):
        return f"{self.layer}[{self.label}]"


def normal(rng, *shape):
    """Standard normal inputs of `shape` (float64) from `rng`."""
    return rng.standard_normal(shape)


def perturb(module, rng, std):
    """Add N(0, std^2) noise to every parameter, so that no bias, gain or small init hides a wrong gradient.

    Used by every catalogue. Too much noise (0.3 and up on the tiny post-norm models) saturates some
    attention rows; their query gradients shrink to ~1e-4 and the finite differences lose the digits
    needed for 1e-7, which is why the encoder-decoder cases use 0.1.
    """
    for _, param in module.named_parameters():
        param.data[...] += rng.standard_normal(param.shape) * std
    return module


class WithLoss(Module):
    """A model followed by a loss (default CrossEntropyLoss()), as one module for the checker: the
    training objective end to end. forward(*inputs) -> scalar loss; backward(grad) -> the model's dinputs."""

    def __init__(self, model, targets, loss=None):
        self.model, self.targets = model, targets
        self.loss = CrossEntropyLoss() if loss is None else loss

    def forward(self, *inputs):
        return self.loss.forward(self.model.forward(*inputs), self.targets)

    def backward(self, grad):
        return self.model.backward(self.loss.backward(grad))

    def __repr__(self):
        return f"{self.model!r} + {type(self.loss).__name__}"
