"""Inverted dropout (lecture notes 2025 §1.6, "Dropout (in training)!"; Srivastava et al. 2014).

In training each entry is zeroed with probability p and the survivors are
scaled by 1/(1-p), so the expected activation is unchanged and evaluation
needs no rescaling: in `eval()` mode the layer is the identity.

The notes say dropout treats "a parameter" as zero; in the Transformer it
drops *activations* (after embeddings, attention and feed-forward sublayers),
which is what this layer does.

Left out: dropout on the attention weights (GPT-2's attn_pdrop; see
models/gpt.py) and variants such as DropConnect or stochastic depth.
"""

import numpy as np

from ..core.module import Module
from ..core.random import as_generator


class Dropout(Module):
    """y = x * mask / (1 - p) in training, y = x in evaluation.

    Args:
        p: drop probability, 0 <= p < 1.
        rng: seed or np.random.Generator the masks are drawn from (shared
            generators draw consecutive masks, reproducibly).
    """

    def __init__(self, p, rng=None):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout expected 0 <= p < 1, got p={p}")
        self.p = p
        self.rng = as_generator(rng)

    def forward(self, x):
        """x (...) -> y (...)."""
        x = np.asarray(x)
        self._check_float(x)
        if not self.training or self.p == 0.0:
            self.scaled_mask = 1.0                              # identity: nothing to remember or copy
            return x
        keep = self.rng.random(x.shape) >= self.p
        self.scaled_mask = keep.astype(x.dtype) / (1.0 - self.p)   # (...) zeros and 1/(1-p)
        return x * self.scaled_mask

    def backward(self, dout):
        """The gradient at x. dout (...) -> dx (...), shaped like x.

        Derivation:
            dy/dx is the same scaled mask: dx = dout * mask / (1 - p).
        """
        if np.isscalar(self.scaled_mask):                       # identity in forward: pass dout through
            return dout
        ### BEGIN SOLUTION dropout.backward
        return dout * self.scaled_mask
        ### END SOLUTION

    def __repr__(self):
        return f"Dropout(p={self.p})"
